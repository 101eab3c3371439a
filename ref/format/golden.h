/* Golden streams: what ds4ref computed for a prompt, step by step, in a form
 * other implementations (ds4's Metal/CUDA backends, ports) are compared
 * against.  docs/FORMATS.md describes every byte of the file.
 *
 * The file is JSON Lines:
 *   line 1      header: format, ds4ref version, model identity (modelid.h),
 *               the settings that shape the numbers, the prompt tokens;
 *   one line    per generated step: the greedy token (id and bytes), its
 *               logit and logprob, the SHA-256 of the whole logits vector,
 *               the top-K alternatives;
 *   last line   {"end":true,...}: step count, complete or not, stop reason.
 * f32 values are printed with "%.9g" and doubles with "%.17g", which read
 * back to the identical bits; the reader insists on exactly those spellings,
 * so a golden read and written again is byte-identical.  Nothing in the file
 * depends on the machine, the thread count or the time: one model, prompt and
 * settings give one golden, byte for byte.
 *
 * In memory a golden is a ds4_golden.  The same struct also carries what the
 * diff tool reads from ds4's --dump-logprobs JSON (dump.h) and from
 * official.vec cases (lpvec.h); the has_* flags say which fields a source
 * provides.
 *
 * Writing is golden_write.h (the streaming writer the golden runner uses),
 * reading golden_read.h (the strict reader); this header is the model and
 * the rules both apply. */
#ifndef DS4_GOLDEN_H
#define DS4_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "ref/model/modelid.h"

#define DS4_GOLDEN_FORMAT "ds4ref-golden-v1"
#define DS4_GOLDEN_MAX_FILE ((size_t)1 << 30)   /* reader limit, bytes */
#define DS4_GOLDEN_MAX_TOP 1024                 /* alternatives per step */
#define DS4_GOLDEN_MAX_TOKEN_BYTES 1024         /* bytes of one token */
#define DS4_GOLDEN_VERSION_MAX 63               /* ds4ref_version chars */

/* Why generation stopped.  The first three end a complete golden. */
typedef enum ds4_stop {
    DS4_STOP_UNKNOWN = 0,    /* the source does not say (ds4 dumps, .vec) */
    DS4_STOP_LENGTH,         /* the requested number of steps was reached */
    DS4_STOP_EOS,            /* the end-of-sequence token was generated */
    DS4_STOP_CTX,            /* the context was full */
    DS4_STOP_INTERRUPTED,    /* SIGINT */
    DS4_STOP_ERROR           /* evaluation failed part way */
} ds4_stop;

/* "length", "eos", ...; NULL for DS4_STOP_UNKNOWN. */
const char *ds4_golden_stop_name(ds4_stop s);
static inline bool ds4_stop_complete(ds4_stop s) {
    return s == DS4_STOP_LENGTH || s == DS4_STOP_EOS || s == DS4_STOP_CTX;
}

/* Where a ds4_golden came from. */
typedef enum ds4_trace_kind {
    DS4_TRACE_GOLDEN,        /* a ds4ref golden (this file format) */
    DS4_TRACE_DUMP,          /* ds4 --dump-logprobs JSON */
    DS4_TRACE_VEC            /* one case of an official.vec file */
} ds4_trace_kind;

/* Settings that decide the numbers or what is recorded.  Thread counts are
 * deliberately absent: they never change a bit (docs/NUMERICS.md), and
 * recording them would make goldens from different machines differ. */
typedef struct ds4_golden_settings {
    bool qat;                /* FP8/FP4 quantization-aware simulation */
    /* The numerics profile (model/numerics.h) by its canonical name; ""
     * for the official numerics, which the file then does not name, so a
     * golden made without a profile has the bytes it always had. */
    char numerics[64];
    uint32_t ctx;            /* session context */
    uint32_t chunk;          /* prefill chunk (never changes numbers) */
    uint32_t top_k;          /* alternatives recorded per step, <= MAX_TOP */
    uint32_t max_steps;      /* steps requested */
    uint32_t mtp_draft;      /* draft depth (0: no speculation) */
    /* Which drafter drafted (mtp_draft > 0): "mtp" or "dspark"; a golden
     * of the MTP head names none (it predates DSpark), so "" is MTP. */
    char drafter[8];
    bool stop_at_eos;
} ds4_golden_settings;

typedef struct ds4_golden_header {
    char version[DS4_GOLDEN_VERSION_MAX + 1];   /* printable ASCII */
    ds4_modelid model;
    bool has_mtp;
    ds4_modelid mtp;
    ds4_golden_settings settings;
    uint32_t n_prompt;
    int32_t *prompt;         /* [n_prompt], or NULL when only the count is known */
    bool has_prompt_text;
    uint8_t *prompt_text;    /* the prompt's bytes, when recorded */
    size_t n_prompt_text;
} ds4_golden_header;

/* One token with its scores. */
typedef struct ds4_golden_tok {
    int32_t id;              /* -1 when the source has no ids (.vec) */
    uint32_t n_bytes;
    uint8_t *bytes;
    float logit;             /* valid when has_logits */
    double logprob;          /* f32 precision when lp_f32 */
} ds4_golden_tok;

typedef struct ds4_golden_step {
    ds4_golden_tok tok;      /* the greedy token; scores valid when has_sel_scores */
    uint8_t logits_sha256[32];   /* valid when has_digests */
    uint32_t n_top;
    ds4_golden_tok *top;     /* by logit descending, then id ascending */
} ds4_golden_step;

typedef struct ds4_golden {
    ds4_trace_kind kind;
    /* What the source provides. */
    bool has_header;         /* version, model identity, full settings */
    bool has_ids;            /* token ids */
    bool has_logits;         /* logits of the top entries */
    bool has_sel_scores;     /* logit/logprob of the greedy token itself */
    bool has_digests;        /* logits_sha256 */
    bool lp_f32;             /* logprobs are f32 values (dumps, .vec) */
    bool has_prompt_tokens;  /* h.prompt is set */
    bool has_prompt_count;   /* h.n_prompt is meaningful */
    ds4_golden_header h;     /* for dumps/.vec: settings.ctx and .top_k only */
    uint32_t n_steps, cap_steps;
    ds4_golden_step *steps;
    bool has_end;            /* the end record was seen / written */
    ds4_stop stop;
    char vec_id[96];         /* DS4_TRACE_VEC: the case id */
    /* A dump's "model_sha256", lowercase: the SHA-256 of the model file the
     * backend that wrote it loaded; "" when it says none. */
    char model_sha256[65];
} ds4_golden;

/* ------------------------------------------------------------ in memory */

void ds4_golden_init(ds4_golden *g, ds4_trace_kind kind);
void ds4_golden_free(ds4_golden *g);
void ds4_golden_step_free(ds4_golden_step *s);

/* Deep copy of h into g->h (and g becomes a full ds4ref golden: every has_*
 * flag set).  Validates what the file format requires: printable version,
 * UTF-8 names, top_k <= DS4_GOLDEN_MAX_TOP, a prompt token list. */
int ds4_golden_set_header(ds4_golden *g, const ds4_golden_header *h, ds4err *err);

/* Append a copy of step st; for a ds4ref golden, st must pass
 * ds4_golden_check_step (DS4_E_FORMAT otherwise). */
int ds4_golden_push_step(ds4_golden *g, const ds4_golden_step *st, ds4err *err);

/* Append st itself, unchecked: g takes over its arrays and st is zeroed. */
int ds4_golden_take_step(ds4_golden *g, ds4_golden_step *st, ds4err *err);

/* Mark the end: stop reason and completeness (ds4_stop_complete). */
void ds4_golden_set_end(ds4_golden *g, ds4_stop stop);

/* ------------------------------------------------------------ the rules */

/* What a ds4ref golden step must satisfy (finite scores, the top list in
 * order and without repeats, top[0] equal to the greedy token, at most
 * settings.top_k entries): why[0] is '\0' when it does, else the reason. */
void ds4_golden_check_step(const ds4_golden *g, const ds4_golden_step *s, char *why,
                           size_t cap);

/* The consistency an end record with this stop reason must have with the
 * steps and settings (same convention). */
void ds4_golden_check_end(const ds4_golden *g, ds4_stop stop, char *why, size_t cap);

/* The stop reason named s[0..n), DS4_STOP_UNKNOWN when none is. */
ds4_stop ds4_golden_stop_by_name(const char *s, size_t n);

/* DS4_E_NOMEM "out of memory building a golden". */
int ds4_golden_nomem(ds4err *err);

#endif
