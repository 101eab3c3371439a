/* ds4ref.h — the public C API of ds4ref, the CPU reference implementation of
 * DeepSeek V4 Flash inference.
 *
 * One header, plain C, usable from C and C++.  Link with libds4ref
 * (`pkg-config --cflags --libs ds4ref`).
 *
 * Numbers: every logit ds4ref produces is bit-identical whatever the thread
 * count, the chunk size, the batch composition, the compiler or the CPU
 * (docs/NUMERICS.md).  A backend can therefore compare its own values with
 * ds4ref's exactly where its arithmetic is the same, and with a tolerance
 * where it is not; the debug taps give every intermediate tensor of every
 * layer so the first divergence can be found.
 *
 * Errors: every function that can fail returns 0 on success or a
 * DS4REF_E_* code, and fills the ds4ref_error the caller passed (which may be
 * NULL) with the same code and a one-line message naming the file, key,
 * tensor or argument involved.  The library never prints and never exits.
 *
 * Threads: a model may be shared by several sessions, but calls on one model
 * (and its sessions) must not run concurrently.  Each call parallelizes
 * internally with OpenMP (set the thread count with ds4ref_set_threads or
 * OMP_NUM_THREADS). */
#ifndef DS4REF_H
#define DS4REF_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS4REF_API_VERSION 1

/* ------------------------------------------------------------------ errors */

enum ds4ref_status {
    DS4REF_OK = 0,
    DS4REF_E_ARG = 2,          /* bad argument */
    DS4REF_E_IO = 3,           /* a file could not be opened, read or written */
    DS4REF_E_FORMAT = 4,       /* malformed file (GGUF, golden, JSON, vectors) */
    DS4REF_E_MODEL = 5,        /* valid GGUF, but not a valid DeepSeek V4 model */
    DS4REF_E_NOMEM = 6,        /* out of memory, or a size that cannot fit */
    DS4REF_E_RANGE = 7,        /* token id, position or context out of range */
    DS4REF_E_UNSUPPORTED = 8,
    DS4REF_E_MISMATCH = 9,     /* a comparison failed */
    DS4REF_E_INTERRUPTED = 10, /* stopped on request (outputs written, incomplete) */
    DS4REF_E_INTERNAL = 11
};

typedef struct ds4ref_error {
    int code;
    char message[512];
} ds4ref_error;

/* "DS4REF_E_RANGE" etc. */
const char *ds4ref_status_name(int code);
const char *ds4ref_version(void);

/* The matrix kernels in use ("avx512", "avx2", "neon" or "portable": the
 * best the CPU supports, or the variable DS4REF_KERNELS's choice) and all
 * those this build and CPU can run, best first.  Every variant gives the
 * same bits: the choice is about speed only.  A DS4REF_KERNELS that names a
 * variant this machine cannot run makes ds4ref_model_open fail. */
const char *ds4ref_kernels(void);
const char *ds4ref_kernels_available(void);

/* Release memory the library returned (token arrays, strings). */
void ds4ref_free(void *p);

/* OpenMP threads for every later call made from the calling thread (OpenMP
 * keeps its count per thread, and so does this).  0, what a thread starts
 * with, undoes an earlier n (the thread gets back the OpenMP count it had):
 * ds4ref chooses.  With OMP_NUM_THREADS set it takes that; otherwise, on a
 * machine of more than 16 threads, each model times its own forward passes
 * and climbs from three quarters of the threads towards the fastest count
 * (in eighths, from a half to all), measuring its neighbours again now and
 * then: a virtual machine's host can take cores back under load, and then
 * every core is the slow choice.  A thread whose count was set through
 * OpenMP itself (omp_set_num_threads) to another than OpenMP's default
 * keeps that count.  The count never changes a bit of any result. */
void ds4ref_set_threads(int n);

/* Models are memory-mapped: if a model file is truncated or rewritten while
 * it is open, the next read of a page past its new end raises SIGBUS, in
 * whichever thread touched it, in the middle of any computation, and nothing
 * can be recovered.  A program may ask for a clear death instead of "Bus
 * error": this installs a process-wide SIGBUS handler that writes one line,
 * "PROGRAM: FILE: the file was truncated or changed while mapped (...)",
 * to stderr and _exit()s with DS4REF_EXIT_SIGBUS.  Outputs the library was
 * writing are not committed (they are written to a temporary file and renamed
 * when complete), so no truncated golden is left behind.  The library never
 * installs it by itself; `program` is kept, not copied. */
enum { DS4REF_EXIT_SIGBUS = 12 };
int ds4ref_report_sigbus(const char *program, ds4ref_error *err);

/* ------------------------------------------------------------------ models */

typedef struct ds4ref_model ds4ref_model;

typedef struct ds4ref_model_options {
    /* The base model: a GGUF, or the official checkpoint in its published
     * layout (a folder with config.json, model.safetensors.index.json and
     * the shards, or one .safetensors file with config.json beside it;
     * docs/FORMATS.md section 5). */
    const char *path;
    /* MTP head GGUF, or NULL.  A checkpoint holds its MTP layer: NULL, or
     * the checkpoint's own path to use it. */
    const char *mtp_path;
    /* 1: official FP8 KV / FP4 indexer simulation (default); for a
     * checkpoint also the official linears' FP8 activations and BF16
     * outputs.  A model whose key_length - rope.dimension_count is not a
     * multiple of the FP8 blocks of 64, or a checkpoint with an FP8 or FP4
     * product whose input is not whole blocks of 128, runs with 0 only
     * (DS4REF_E_UNSUPPORTED otherwise). */
    int qat;
    uint32_t max_batch;        /* most tokens of one forward pass (default 256) */
    /* A numerics profile (docs/NUMERICS.md): another engine's intended
     * approximations, reproduced exactly.  NULL or "official": none (the
     * default); "ggml-act" (ggml's CPU conversion of every product's input
     * for the weight's type), "ds4-act" (ds4.c's), "f16-kv" (KV rows stored
     * as binary16), "ds4" (ds4-act,f16-kv), "jitter" (every product's
     * output moved one ulp: another order of the same sums, whose effect
     * through the other roundings ds4ref-conform measures), or a comma
     * list.  Unknown
     * names are DS4REF_E_ARG.  Goldens record it (settings.numerics).  A
     * checkpoint runs "official" only. */
    const char *numerics;
    /* llama.cpp's DSpark drafter GGUF (general.architecture "dflash", the
     * file of its -md --spec-type draft-dspark), or NULL: the drafter of a
     * DeepSeek-V4-Flash-0731 GGUF whose own file has none (docs/FORMATS.md). */
    const char *dspark_path;
} ds4ref_model_options;

void ds4ref_model_options_init(ds4ref_model_options *o);
int ds4ref_model_open(const ds4ref_model_options *o, ds4ref_model **out, ds4ref_error *err);
void ds4ref_model_close(ds4ref_model *m);

typedef struct ds4ref_model_info {
    uint32_t n_layer, n_embd, n_vocab, n_head, head_dim, n_hc;
    uint32_t n_expert, n_expert_used, context_length;
    int has_mtp, has_tokenizer;
    int32_t bos, eos;          /* -1 without a tokenizer */
} ds4ref_model_info;

void ds4ref_model_get_info(const ds4ref_model *m, ds4ref_model_info *info);

/* The thread counts a model's passes run with when ds4ref chooses: for
 * passes of one token (decode) and of 16 or more (prefill), each 0 while
 * none was measured; both 0 when the calling thread's count is fixed
 * (ds4ref_set_threads, OMP_NUM_THREADS, omp_set_num_threads) or the machine
 * has 16 threads or fewer, where every thread is used. */
void ds4ref_model_threads(const ds4ref_model *model, int *decode, int *prefill);

/* A weight tensor of the model (names as in the GGUF; the MTP file's are
 * mtp.0.*), dequantized exactly to f32, in GGUF element order (ne[0]
 * fastest).  ne[] gets the shape (unused dims 1).  *data: free with
 * ds4ref_free.  For a backend that wants to recompute a step itself. */
int ds4ref_tensor_f32(const ds4ref_model *m, const char *name, float **data, uint64_t ne[4],
                      ds4ref_error *err);

/* --------------------------------------------------------------- tokenizer */

#define DS4REF_TOKENIZE_SPECIAL 1u   /* recognise special-token strings in the text */

/* Token ids of text[0..len) (no BOS added).  *ids: free with ds4ref_free. */
int ds4ref_tokenize(const ds4ref_model *m, const char *text, size_t len, unsigned flags,
                    int32_t **ids, size_t *n, ds4ref_error *err);

/* The bytes of ids[0..n).  *bytes (NUL-terminated for convenience): free with
 * ds4ref_free. */
int ds4ref_detokenize(const ds4ref_model *m, const int32_t *ids, size_t n, char **bytes,
                      size_t *len, ds4ref_error *err);

/* The vocabulary string of one token as stored (byte-alphabet form), valid as
 * long as the model is open. */
int ds4ref_token_string(const ds4ref_model *m, int32_t id, const char **s, size_t *len,
                        ds4ref_error *err);

/* The length (1..4) of the well-formed UTF-8 character at p[0..n), 0 when
 * the bytes there do not begin one or it is cut short.  Well-formed is the
 * library's one rule, everywhere it reads text: RFC 3629 / Unicode table
 * 3-7, no overlong forms, no surrogates, nothing above U+10FFFF.  Tokens are
 * bytes (a token may end inside a character): for a program that shows
 * them. */
size_t ds4ref_utf8_char(const uint8_t *p, size_t n);

/* ds4's default system prompt on the command line. */
#define DS4REF_DEFAULT_SYSTEM "You are a helpful assistant"

/* Which release's chat encoder: they differ in the reasoning-effort prompts
 * only (docs/TOKENIZER.md). */
enum ds4ref_chat_release {
    DS4REF_CHAT_V4 = 0,        /* DeepSeek-V4-Flash: efforts high (no prompt) and max */
    DS4REF_CHAT_V4_0731 = 1    /* DeepSeek-V4-Flash-0731: low (the default), high, max */
};

typedef struct ds4ref_chat_options {
    const char *system;        /* system prompt; NULL: none */
    size_t system_len;
    int thinking;              /* 1: ends with <think>; 0: with </think> */
    int think_max;             /* the "max" reasoning effort, as reasoning_effort "max" */
    /* "low", "high" or "max" (the official reasoning_effort; another name,
     * or one the release refuses, is an error); NULL: the release's
     * default, unless think_max. */
    const char *reasoning_effort;
    int release;               /* enum ds4ref_chat_release */
} ds4ref_chat_options;

/* A one-user-turn chat prompt rendered with the official template and
 * tokenized as the official pipeline does.  A prompt starting with the BOS
 * string is taken as already rendered. */
int ds4ref_chat_prompt(const ds4ref_model *m, const char *prompt, size_t len,
                       const ds4ref_chat_options *o, int32_t **ids, size_t *n,
                       ds4ref_error *err);

/* ---------------------------------------------------------------- sessions */

typedef struct ds4ref_session ds4ref_session;

typedef struct ds4ref_session_options {
    uint32_t ctx;              /* positions available (0: the model's, at most 32768) */
    uint32_t chunk;            /* tokens per forward pass (0: the model's max_batch) */
    /* NULL, or progress: in ds4ref_session_eval, called after every forward
     * pass with the tokens done so far of the call's total; in
     * ds4ref_generate (and per row in ds4ref_generate_batch), for the
     * prompt only: with 0 of the prompt's length before its first pass,
     * then after every pass with the prompt tokens done.  The decoding that
     * follows the prompt reports nothing. */
    void (*progress)(void *ud, uint32_t done, uint32_t total);
    void *progress_ud;
} ds4ref_session_options;

int ds4ref_session_new(ds4ref_model *m, const ds4ref_session_options *o, ds4ref_session **out,
                       ds4ref_error *err);
void ds4ref_session_free(ds4ref_session *s);

/* Tokens evaluated so far (the next position). */
uint32_t ds4ref_session_pos(const ds4ref_session *s);

/* The session's context: the most positions it holds (its ctx option, or
 * the default that replaced 0). */
uint32_t ds4ref_session_ctx(const ds4ref_session *s);

/* Append n tokens.  logits: NULL, or room for n rows of n_vocab floats that
 * receive the logits after each of them. */
int ds4ref_session_eval(ds4ref_session *s, const int32_t *ids, size_t n, float *logits,
                        ds4ref_error *err);

/* Go back to position pos (<= current); the state is exactly the one a fresh
 * evaluation of the first pos tokens gives. */
int ds4ref_session_truncate(ds4ref_session *s, uint32_t pos, ds4ref_error *err);

/* The logits (n_vocab floats) after token pos, for any evaluated position.
 * The last position is immediate; an earlier one is recomputed exactly
 * (truncate, re-evaluate, restore), which costs a forward pass from pos. */
int ds4ref_session_logits(ds4ref_session *s, uint32_t pos, float *out, ds4ref_error *err);

typedef struct ds4ref_logprob {
    int32_t id;
    float logit;
    double logprob;            /* logit - logsumexp(all logits), in double */
} ds4ref_logprob;

/* The k most likely next tokens after position pos (by logit, ties to the
 * lowest id), *n = number written. */
int ds4ref_session_top_logprobs(ds4ref_session *s, uint32_t pos, uint32_t k,
                                ds4ref_logprob *out, uint32_t *n, ds4ref_error *err);

/* The k most likely tokens of a logits vector of the model's vocabulary, by
 * logit, ties to the lowest id, with logprobs computed as ds4ref computes
 * them (log-softmax in double with its own exp and log): for a backend
 * that wants ds4ref's figures for logits it computed itself.  *n = number
 * written (min(k, non-NaN logits)). */
int ds4ref_top_logprobs(const ds4ref_model *m, const float *logits, uint32_t k,
                        ds4ref_logprob *out, uint32_t *n, ds4ref_error *err);

/* -------------------------------------------------------------- generation */

typedef struct ds4ref_step {
    uint32_t index;
    int32_t id;                /* the chosen token */
    const uint8_t *bytes;      /* its bytes */
    size_t n_bytes;
    float logit;
    double logprob;
    uint32_t n_top;            /* alternatives, by logit (greedy runs only) */
    const ds4ref_logprob *top;
    const uint8_t *logits_sha256;   /* 32 bytes, digest of the logits vector */
} ds4ref_step;

/* Return non-zero to stop generating. */
typedef int (*ds4ref_step_fn)(void *ud, const ds4ref_step *step);

typedef struct ds4ref_generate_options {
    uint32_t n_tokens;         /* tokens to generate */
    uint32_t top_k;            /* alternatives per step (default 20) */
    int stop_at_eos;           /* default 1 */
    double temperature;        /* 0: greedy */
    uint64_t seed;             /* sampling seed (temperature > 0) */
    uint32_t mtp_draft;        /* 0: no speculation; 1..16 with an MTP head, or
                                  with the DSpark drafter of a model that has one
                                  and no MTP head (a block drafts at most its size) */
    /* Outputs, or NULL (greedy runs only), each opened before the first
     * token, so that one that cannot be written fails at once.  vec_path:
     * an official.vec file to append a new case vec_id (NULL: "ds4ref") to;
     * an id already there is an error.  The case names its prompt file:
     * vec_prompt_path, or (NULL) "prompts/<vec_id>.txt"; and the prompt's
     * text, when given, is written to the prompts folder beside the .vec
     * file under that name, where ds4_test --logprob-vectors reads it (a
     * file there with other bytes is an error). */
    const char *golden_path;
    const char *dump_path;
    const char *vec_path;
    const char *vec_id;
    const char *vec_prompt_path;
    const uint8_t *prompt_text;   /* recorded in the golden, written beside a vec */
    size_t prompt_text_len;
    /* Set to non-zero asynchronously (e.g. by a SIGINT handler): generation
     * stops, outputs are written marked incomplete, DS4REF_E_INTERRUPTED. */
    volatile sig_atomic_t *stop;
    struct ds4ref_spec_stats *stats;   /* NULL, or added to (speculation) */
    /* The DSpark drafter's confidence threshold, 0..1: a block's drafts stop
     * at the first slot whose sigmoid(confidence) is below it (0: every
     * block whole).  It changes which drafts are verified, never a token. */
    double dspark_confidence;
} ds4ref_generate_options;

/* Speculative decoding counters. */
typedef struct ds4ref_spec_stats {
    uint64_t passes;           /* trunk forward passes of the decode loop */
    uint64_t iters;            /* cycles that verified at least one draft */
    uint64_t proposed;         /* drafts verified */
    uint64_t accepted;         /* drafts accepted */
    uint64_t deepest;          /* the most drafts one cycle of one row accepted */
    /* By draft position k (0: a cycle's first draft; a DSpark block's slot
     * k+1): drafts verified there, and accepted there. */
    uint64_t proposed_at[16];
    uint64_t accepted_at[16];
} ds4ref_spec_stats;

/* "mtp accept: iters=N proposed=M accepted=K rate=X% per_iter=Y deepest=D". */
void ds4ref_spec_report(const ds4ref_spec_stats *st, char *buf, size_t size);

/* "accept by position: 1=A/P 2=A/P ...": A of the P drafts verified at each
 * position accepted, up to the last position verified ("" when none). */
void ds4ref_spec_report_positions(const ds4ref_spec_stats *st, char *buf, size_t size);

void ds4ref_generate_options_init(ds4ref_generate_options *o);

/* How many of n_tokens a generation from a prompt of n_prompt tokens makes
 * on this session: fewer when the context is too small (the last token
 * generated is never evaluated, so n_prompt + n - 1 positions must fit),
 * 0 when the prompt itself does not fit (ds4ref_generate refuses it).  For
 * a program that wants to say so before it starts. */
uint32_t ds4ref_generate_room(const ds4ref_session *s, size_t n_prompt, uint32_t n_tokens);

/* Evaluate the prompt on the (reset) session and generate, calling fn after
 * each token.  Greedy by default; speculative with an MTP head and
 * mtp_draft > 0 (bit-identical to greedy); sampled with temperature > 0. */
int ds4ref_generate(ds4ref_session *s, const int32_t *prompt, size_t n_prompt,
                    const ds4ref_generate_options *o, ds4ref_step_fn fn, void *ud,
                    ds4ref_error *err);

/* Several prompts decoded together: rows[i] (sessions of one model) gets
 * prompts[i]; every forward pass carries tokens of every row, each row at its
 * own positions, and each row's stream is bit-identical to decoding it alone.
 * Row r samples with seed o->seed + r.  fn gets the row index.  A golden or
 * a dump is written per row, to golden_path.ROW and dump_path.ROW (ROW = 0,
 * 1, ...; a batch of one row writes golden_path itself); official.vec
 * cases are appended by single runs only (DS4REF_E_ARG with several rows). */
typedef int (*ds4ref_row_step_fn)(void *ud, uint32_t row, const ds4ref_step *step);

int ds4ref_generate_batch(ds4ref_session *const *rows, const int32_t *const *prompts,
                          const size_t *n_prompt, size_t n_rows,
                          const ds4ref_generate_options *o, ds4ref_row_step_fn fn, void *ud,
                          ds4ref_error *err);

/* ----------------------------------------------------------------- serving
 *
 * What a server needs to decode requests that come and go in shared forward
 * passes (continuous batching), with every bit as when each runs alone. */

/* Append ids[i][0..n[i]) to rows[i], all rows at once: each forward pass
 * carries tokens of every row (n[i] may be 0), each at its own positions,
 * and every value is the same bits as ds4ref_session_eval of each row
 * alone.  logits: NULL, or per row NULL or room for n[i] rows of n_vocab
 * floats.  The rows are sessions of one model, each listed once; nothing
 * is evaluated when a row is bad (its context, a token id). */
int ds4ref_session_eval_many(ds4ref_session *const *rows, const int32_t *const *ids,
                             const size_t *n, size_t n_rows, float *const *logits,
                             ds4ref_error *err);

/* A sampling generator (ref/decode/rng.h defines every bit). */
typedef struct ds4ref_sampler {
    uint64_t state;
} ds4ref_sampler;

/* The generator ds4ref_generate starts a run of `seed` with (a row r of
 * ds4ref_generate_batch: seed + r). */
void ds4ref_sampler_init(ds4ref_sampler *s, uint64_t seed);

/* A token drawn from logits (n_vocab floats) at temperature temp > 0, as
 * ds4ref_generate draws each one: the same generator gives the same
 * stream as `ds4ref --temp T --seed S`.  DS4REF_E_RANGE if every logit is
 * NaN (the generator is not advanced). */
int ds4ref_sample(const ds4ref_model *m, ds4ref_sampler *s, const float *logits, double temp,
                  int32_t *id, ds4ref_error *err);

/* The logprob of token id under logits (n_vocab floats): logit -
 * logsumexp, in double, as every step of a golden and ds4ref_top_logprobs
 * give it. */
int ds4ref_token_logprob(const ds4ref_model *m, const float *logits, int32_t id, double *out,
                         ds4ref_error *err);

enum ds4ref_chat_role { DS4REF_CHAT_SYSTEM, DS4REF_CHAT_USER, DS4REF_CHAT_ASSISTANT };

typedef struct ds4ref_chat_message {
    int role;                  /* enum ds4ref_chat_role */
    const char *content;
    size_t len;
} ds4ref_chat_message;

/* A conversation rendered with the official template (BOS, then each turn;
 * an assistant turn is a finished one) and the generation prompt after the
 * last, thinking or not as o says (o->system is not used: a system turn is
 * a message), tokenized as the official pipeline does.  *ids: free with
 * ds4ref_free. */
int ds4ref_chat_messages(const ds4ref_model *m, const ds4ref_chat_message *msgs, size_t n,
                         const ds4ref_chat_options *o, int32_t **ids, size_t *n_ids,
                         ds4ref_error *err);

/* ---------------------------------------------------------------- taps */

enum ds4ref_tap_kind { DS4REF_TAP_F32, DS4REF_TAP_I32, DS4REF_TAP_F64 };

/* One intermediate value of one token (names in ref/forward/engine.h):
 * hc_attn, hc_ffn, attn_out, ffn_out, experts, expert_weights, expert_scores,
 * indexer_scores, indexer_sel, comp_row, idx_row.  layer = n_layer for the
 * MTP block.  data is valid during the callback only. */
typedef struct ds4ref_tap {
    const char *name;
    uint32_t layer;
    uint32_t pos;
    int kind;
    const void *data;
    uint32_t n;
} ds4ref_tap;

typedef void (*ds4ref_tap_fn)(void *ud, const ds4ref_tap *t);

/* Install (fn != NULL) or remove a tap for every later evaluation on this
 * model's sessions. */
void ds4ref_set_tap(ds4ref_model *m, ds4ref_tap_fn fn, void *ud);

/* ------------------------------------------------------- synthetic models */

/* A synthetic DeepSeek V4 Flash model: a complete GGUF in the real tensor
 * layout with random but numerically sane weights (and its MTP head), for
 * tests, goldens and benchmarks without the real model.  The same options
 * give byte-identical files on every machine. */
typedef struct ds4ref_synth_options {
    const char *config;        /* "tiny" (default), "tiny-k64" (QAT off only),
                                  "tiny-ckpt" (whole FP8 activation blocks),
                                  "tiny-spec" (its MTP head drafts what it decodes),
                                  "fullwidth" or "fulldepth" */
    int f32;                   /* 1: every float tensor F32; 0: ds4's quant mix (default) */
    uint64_t seed;             /* default 1 */
    const char *vocab_from;    /* NULL, or a Hugging Face tokenizer.json to embed */
} ds4ref_synth_options;

void ds4ref_synth_options_init(ds4ref_synth_options *o);

/* Write the model to path and its MTP head to mtp_path (NULL: none), each
 * atomically (a temporary file renamed when complete).  Errors:
 * DS4REF_E_ARG (unknown config, no path), DS4REF_E_IO (cannot write, or
 * read vocab_from), DS4REF_E_FORMAT (a malformed vocab_from). */
int ds4ref_synth_write(const ds4ref_synth_options *o, const char *path, const char *mtp_path,
                       ds4ref_error *err);

/* The MTP file name ds4ref-mkmodel writes next to a model: "x.gguf" ->
 * "x-mtp.gguf" (a name without .gguf gets "-mtp.gguf" appended).
 * *mtp_path: free with ds4ref_free. */
int ds4ref_synth_mtp_path(const char *path, char **mtp_path, ds4ref_error *err);

/* ------------------------------------------------------- GGUF inspection */

/* These read any GGUF file (v2 or v3), not only DeepSeek V4 models.  The
 * file is mapped during the call and registered with the SIGBUS report of
 * ds4ref_report_sigbus (when the program installed it).  A failed write on
 * out is DS4REF_E_IO, "stdout: write failed: REASON" when out is stdout and
 * "output: write failed: REASON" otherwise. */

/* Print to out what `ds4ref-gguf info` prints: the header line (path,
 * version, key and tensor counts, size), alignment and data offset, every
 * metadata key with its type and value (strings escaped and cut at 160
 * bytes, arrays as element type, length, first and last elements) and the
 * tensor table (name, type, shape in ggml order, file offset, bytes).
 * Errors: DS4REF_E_IO (cannot open), DS4REF_E_FORMAT (malformed GGUF),
 * DS4REF_E_ARG (no path or no out). */
int ds4ref_gguf_describe(const char *path, FILE *out, ds4ref_error *err);

/* Write every element of the tensor named `tensor`, dequantized exactly, to
 * out as little-endian f32 in GGUF element order (ne[0] fastest), the
 * bytes of `ds4ref-gguf dequant`; memory stays bounded whatever the size.
 * Errors: DS4REF_E_IO, DS4REF_E_FORMAT, DS4REF_E_ARG (no such tensor). */
int ds4ref_gguf_dequant(const char *path, const char *tensor, FILE *out, ds4ref_error *err);

/* Split a GGUF whose model has a DSpark drafter (DeepSeek-V4-Flash-0731,
 * tiny-dspark) as llama.cpp ships it: the trunk alone to trunk_path, the
 * drafter to draft_path as llama.cpp's drafter file (general.architecture
 * "dflash"), which ds4ref_model_options.dspark_path reads back
 * (`ds4ref-gguf dspark-split`; docs/FORMATS.md).  Tensors keep their bytes.
 * Errors: DS4REF_E_IO, DS4REF_E_FORMAT, DS4REF_E_MODEL, DS4REF_E_ARG (no
 * drafter). */
int ds4ref_gguf_dspark_split(const char *path, const char *trunk_path, const char *draft_path,
                             ds4ref_error *err);

/* Write the unquantized twin of the GGUF at path to out_path (atomically):
 * the same metadata and tensors, every float tensor stored as F32 holding
 * exactly the values it dequantizes to (`ds4ref-gguf twin`).  An engine
 * given it keeps its activations unquantized; ds4ref gives it the same
 * logits, bit for bit, as the original.  Errors: DS4REF_E_IO,
 * DS4REF_E_FORMAT, DS4REF_E_NOMEM (the twin is built in memory). */
int ds4ref_gguf_twin(const char *path, const char *out_path, ds4ref_error *err);

/* The model of a DS4 GGUF (with its MTP GGUF, or NULL) written as a
 * checkpoint in the official layout into the folder dir (made if missing):
 * config.json, model.safetensors.index.json, two shards and, when the GGUF
 * has a vocabulary, tokenizer.json (docs/FORMATS.md section 5).  f32_twin
 * 0: each tensor stored as the release stores it (FP8 Linears and FP4
 * experts with their E8M0 scales, BF16 norms, embeddings, head, router and
 * compressors), the model's values rounded to those formats; 1: every float
 * tensor F32, holding exactly the values the formats give (the unquantized
 * twin: the same logits with QAT off).  Errors: DS4REF_E_IO, DS4REF_E_FORMAT,
 * DS4REF_E_MODEL, DS4REF_E_UNSUPPORTED (a value too large for an E8M0
 * scale, experts clamped unlike config.json's one swiglu_limit). */
int ds4ref_gguf_to_checkpoint(const char *path, const char *mtp_path, const char *dir,
                              int f32_twin, ds4ref_error *err);

/* ------------------------------------------------------------------ files */

/* ds4ref_read_file: the whole of path (a regular file, a pipe, /dev/stdin)
 * with a NUL appended (not counted in *len); free *data with ds4ref_free.
 * The programs read their prompt and token files through it, with the
 * library's limits and errors.  Errors: DS4REF_E_IO, DS4REF_E_NOMEM (more
 * than 1 GiB, or out of memory). */
int ds4ref_read_file(const char *path, char **data, size_t *len, ds4ref_error *err);

/* The SHA-256 of a whole file as 64 lowercase hex digits and a NUL, what
 * sha256sum prints (a model's identity: ds4ref-conform compares it with its
 * reference's file).  Read in pieces; cancel (NULL: never) is looked at
 * between them, for a caller that stops a digest of a large file early
 * (DS4REF_E_INTERRUPTED).  Errors: DS4REF_E_IO naming the file. */
int ds4ref_file_sha256(const char *path, char hex[65], const volatile int *cancel,
                       ds4ref_error *err);

/* The logits file (ds4ref --logits-out; README, "Output formats"): rows of
 * n_vocab f32, little-endian, row-major, no header.
 *
 * It is written atomically: the rows go to a temporary file next to path,
 * and only commit renames the complete, fsync'ed file over it, so a reader
 * sees the old file or the whole new one, never a truncated one; a symbolic
 * link keeps pointing at the replaced file; a target that exists and is not
 * a regular file (/dev/null, a FIFO) is written in place.  Opening checks at
 * once that the file can be created, so a program can open it before hours
 * of computation.  Errors name the file. */
typedef struct ds4ref_logits_file ds4ref_logits_file;
int ds4ref_logits_open(const char *path, uint32_t n_vocab, ds4ref_logits_file **out,
                       ds4ref_error *err);
/* n_rows rows of n_vocab logits each. */
int ds4ref_logits_write(ds4ref_logits_file *f, const float *logits, size_t n_rows,
                        ds4ref_error *err);
/* Commit and release (on failure the target keeps its old content). */
int ds4ref_logits_commit(ds4ref_logits_file *f, ds4ref_error *err);
/* Release without committing: the temporary file is removed.  NULL is fine. */
void ds4ref_logits_abort(ds4ref_logits_file *f);

/* ---------------------------------------------------------- reading goldens */

/* A golden stream file (ds4ref --golden-out; docs/FORMATS.md, section 2) read
 * into memory, for a program that wants the recorded numbers themselves
 * rather than a comparison (ds4check_diff_files).  The reader is the strict
 * one ds4ref-diff uses: every key, number spelling, digest and count is
 * checked.  Every pointer below stays valid until ds4ref_golden_free. */

/* A model file's identity as the golden records it (the per-tensor digests
 * the file also lists are checked by the reader, not returned). */
typedef struct ds4ref_golden_model {
    const char *file;          /* base name of the path it was written from */
    uint64_t size;             /* bytes */
    uint8_t metadata_sha256[32];
    uint8_t tensor_data_sha256[32];
} ds4ref_golden_model;

typedef struct ds4ref_golden_step {
    int32_t id;                /* the greedy token */
    float logit;
    double logprob;
    const uint8_t *bytes;      /* its bytes */
    uint32_t n_bytes;
    uint8_t logits_sha256[32]; /* of the whole logits vector (n_vocab f32, little-endian) */
    uint32_t n_top;            /* alternatives, at most top_k */
    const ds4ref_logprob *top; /* by logit descending, then id ascending */
} ds4ref_golden_step;

typedef struct ds4ref_golden {
    const char *version;       /* ds4ref version that wrote it */
    ds4ref_golden_model model;
    int has_mtp;
    ds4ref_golden_model mtp;   /* the MTP head, when has_mtp */
    /* The settings the golden was made with. */
    int qat;
    uint32_t ctx, chunk, top_k, max_steps, mtp_draft;
    int stop_at_eos;
    uint32_t n_prompt;
    const int32_t *prompt;     /* the prompt tokens */
    const uint8_t *prompt_text;   /* its text as recorded, NULL when not recorded */
    size_t n_prompt_text;
    uint32_t n_steps;
    const ds4ref_golden_step *steps;
    int complete;              /* 0: interrupted, or evaluation failed part way */
    const char *stop;          /* "length", "eos", "ctx", "interrupted" or "error" */
    const char *numerics;      /* "official", or the numerics profile it was made under */
} ds4ref_golden;

/* Read the golden at path into *out (NULL on failure).  Errors:
 * DS4REF_E_ARG (no path), DS4REF_E_IO (cannot read), DS4REF_E_FORMAT
 * ("PATH:LINE: what is wrong"), DS4REF_E_NOMEM. */
int ds4ref_golden_read(const char *path, ds4ref_golden **out, ds4ref_error *err);

/* Release a golden from ds4ref_golden_read (NULL: nothing). */
void ds4ref_golden_free(ds4ref_golden *g);

#ifdef __cplusplus
}
#endif

#endif
