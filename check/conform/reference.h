/* The reference side of ds4ref-conform: what ds4ref computes for a prompt
 * (its greedy golden) and under a backend's own committed tokens
 * (teacher-forced), both kept in a cache folder when one is given, keyed by
 * the model's identity, the prompt and the settings, so that a second run
 * against a fixed backend only runs the backend again. */
#ifndef DS4_CONFORM_REFERENCE_H
#define DS4_CONFORM_REFERENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/decode/session.h"
#include "ref/model/modelid.h"
#include "ref/text/tokenizer.h"
#include "ref/format/golden.h"

/* The reference teacher-forced on a stream of committed tokens: at step i,
 * the distribution after the prompt and ids[0..i). */
typedef struct ds4_cf_tf {
    uint32_t n;            /* steps */
    int32_t *ids;          /* [n] the stream */
    double *lp;            /* [n] the reference's logprob of ids[i] */
    double *gap;           /* [n] the logprob of the reference's argmax minus lp[i], >= 0 */
    uint32_t k;            /* alternatives kept per step */
    uint32_t *n_top;       /* [n] */
    int32_t *top_ids;      /* [n][k], by logit descending then id ascending */
    double *top_lp;        /* [n][k] */
} ds4_cf_tf;

void ds4chk_reference_tf_free(ds4_cf_tf *tf);

typedef struct ds4_cf_ref {
    ds4_engine *e;
    const ds4_tokenizer *tok;
    ds4_session s;         /* the session teacher forcing runs on */
    uint32_t ctx, top_k, n_steps;
    bool stop_at_eos;
    ds4_modelid id;        /* the model's identity, read once (it hashes every tensor) */
    char model_key[129];   /* hex of its two digests */
    const char *cache_dir; /* NULL: nothing kept between runs */
} ds4_cf_ref;

/* The reference for prompts of up to ctx positions, n_steps greedy steps
 * with top_k alternatives each; cache_dir (kept, not copied) is created when
 * missing. */
int ds4chk_reference_init(ds4_cf_ref *r, ds4_engine *e, const ds4_tokenizer *tok, uint32_t ctx,
                    uint32_t top_k, uint32_t n_steps, bool stop_at_eos, const char *cache_dir,
                    ds4err *err);
void ds4chk_reference_free(ds4_cf_ref *r);

/* The greedy golden of a prompt, from the cache when it holds it (*cached
 * says so). */
int ds4chk_reference_golden(ds4_cf_ref *r, const int32_t *prompt, uint32_t n_prompt, ds4_golden *g,
                      bool *cached, ds4err *err);

/* The reference teacher-forced on ids[0..n) after the prompt; ref is the
 * prompt's golden, whose steps serve as long as ids follows it. */
int ds4chk_reference_force(ds4_cf_ref *r, const int32_t *prompt, uint32_t n_prompt,
                     const ds4_golden *ref, const int32_t *ids, uint32_t n, ds4_cf_tf *tf,
                     ds4err *err);

#endif
