/* ds4ref-conform's HTTP client, over libcurl: a JSON body posted, or a
 * GET, and the answer's status and body.  The checking layer's only
 * network code (the model library opens no socket). */
#ifndef DS4_CONFORM_HTTP_H
#define DS4_CONFORM_HTTP_H

#include "base/buf.h"
#include "base/err.h"

/* POST body[0..len) as application/json to url (GET when body is NULL);
 * the answer's body into *resp (appended) and its status into *status.
 * An error (DS4_E_IO) only when no answer came: the connection refused,
 * reset, or timeout seconds passed (0: none). */
int ds4chk_http_request(const char *url, const char *body, size_t len, double timeout,
                        ds4_buf *resp, long *status, ds4err *err);

#endif
