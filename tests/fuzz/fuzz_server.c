/* libFuzzer target: ds4ref-server's request bodies (programs/server_request.c).
 *
 * The first byte picks the endpoint (completions, chat, tokenize,
 * detokenize), the rest is the body.  Whatever it is, srv_request_parse must
 * refuse it with a 4xx status, an error type and a message, or accept it;
 * and what it accepts must keep the parser's promises: token ids inside the
 * vocabulary, at most SRV_MAX_PROMPTS prompts, SRV_MAX_STOP non-empty stop
 * strings, SRV_MAX_MESSAGES messages of a known role, alternatives within
 * SRV_MAX_TOP, max_tokens positive or unset (0 only to score a prompt, with
 * echo), prompt_logprobs and include_usage only where they apply.  Every byte of every string it
 * hands on is read, so that a wrong pointer is a sanitizer report.
 *
 * Seeds (tests/fuzz/seeds.c): the requests tests/server_test.py sends,
 * good and bad. */
#include <stdlib.h>
#include <string.h>

#include "fuzzutil.h"
#include "server_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_VOCAB = 1000 };

static volatile unsigned sink;

static void touch(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) sink += (unsigned char)s[i];
}

static void check_prompt(const srv_prompt *p) {
    fz_check(p->text || p->ids, "a prompt is text or ids");
    if (p->text) touch(p->text, p->len);
    for (size_t i = 0; p->ids && i < p->n_ids; i++)
        fz_check(p->ids[i] >= 0 && p->ids[i] < N_VOCAB, "token ids are inside the vocabulary");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int kind = data[0] % 4;
    srv_request r;
    srv_error e;
    if (srv_request_parse(kind, (const char *)data + 1, size - 1, N_VOCAB, &r, &e)) {
        fz_check(e.status >= 400 && e.status < 600 && e.type && e.message[0],
                 "a refusal carries a status, a type and a message");
        srv_request_free(&r);
        return 0;
    }
    fz_check(r.n_prompts <= SRV_MAX_PROMPTS && r.n_stop <= SRV_MAX_STOP &&
                 r.n_msgs <= SRV_MAX_MESSAGES && r.logprobs >= -1 && r.logprobs <= SRV_MAX_TOP,
             "counts within their limits");
    fz_check(r.max_tokens == -1 || r.max_tokens >= 1 || (r.max_tokens == 0 && r.echo && kind == 0),
             "max_tokens positive or unset, or 0 to score a prompt");
    fz_check(r.prompt_logprobs >= -1 && r.prompt_logprobs <= SRV_MAX_TOP &&
                 (r.prompt_logprobs == -1 || !r.stream),
             "prompt_logprobs within its limit, never in a stream");
    fz_check(!r.include_usage || r.stream, "include_usage only in a stream");
    fz_check(r.temperature >= 0, "temperature not negative");
    for (size_t i = 0; i < r.n_prompts; i++) check_prompt(&r.prompts[i]);
    for (size_t i = 0; i < r.n_stop; i++) {
        fz_check(r.stop_len[i] > 0, "stop strings are not empty");
        touch(r.stop[i], r.stop_len[i]);
    }
    for (size_t i = 0; i < r.n_msgs; i++) {
        fz_check(r.msgs[i].role >= DS4REF_CHAT_SYSTEM && r.msgs[i].role <= DS4REF_CHAT_ASSISTANT,
                 "messages have a known role");
        touch(r.msgs[i].content, r.msgs[i].len);
    }
    if (kind == 0 || kind == 3) fz_check(r.n_prompts >= 1, "completions and detokenize have a prompt");
    if (kind == 1) fz_check(r.n_msgs >= 1, "chat has messages");
    srv_request_free(&r);
    return 0;
}
