/* ds4ref-conform's HTTP client, over libcurl: a JSON body posted, or a
 * GET, and the answer's status and body; and a free port for a server it
 * starts.  The checking layer's only network code (the model library opens
 * no socket). */
#ifndef DS4_CONFORM_HTTP_H
#define DS4_CONFORM_HTTP_H

#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* POST body[0..len) as application/json to url (GET when body is NULL);
 * the answer's body into *resp (appended) and its status into *status.
 * An error (DS4_E_IO) only when no answer came: the connection refused,
 * reset, or timeout seconds passed (0: none). */
int ds4chk_http_request(const char *url, const char *body, size_t len, double timeout,
                        ds4_buf *resp, long *status, ds4err *err);

/* A free TCP port of the loopback, for a server started for one cell; 0
 * when none could be had. */
uint32_t ds4chk_http_free_port(void);

#endif
