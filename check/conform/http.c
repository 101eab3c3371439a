/* ds4ref-conform's HTTP client (http.h). */
#include "check/conform/http.h"

#include <threads.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <curl/curl.h>

static once_flag curl_once = ONCE_FLAG_INIT;

/* libcurl's global state, once, before any thread makes a handle. */
static void curl_start(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t take(char *p, size_t size, size_t n, void *ud) {
    ds4_buf *b = ud;
    ds4_buf_put(b, p, size * n);
    return b->failed ? 0 : size * n;
}

int ds4chk_http_request(const char *url, const char *body, size_t len, double timeout,
                        ds4_buf *resp, long *status, ds4err *err) {
    call_once(&curl_once, curl_start);
    CURL *c = curl_easy_init();
    if (!c) return ds4_err_set(err, DS4_E_NOMEM, "cannot make an HTTP handle");
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    if (timeout > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
    if (body) {
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    const CURLcode rc = curl_easy_perform(c);
    *status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK)
        return ds4_err_set(err, DS4_E_IO, "%s: %s", url, curl_easy_strerror(rc));
    if (resp->failed) return ds4_err_set(err, DS4_E_NOMEM, "out of memory for %s's answer", url);
    return 0;
}

uint32_t ds4chk_http_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    uint32_t port = 0;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a)) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}
