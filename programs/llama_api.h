/* llama.cpp's C API as the prebuilt libraries of the npm package
 * @node-llama-cpp/linux-x64@3.22.1 have it (bins/linux-x64:
 * libllama.v0.5.0.so, libggml.v0.5.0.so, libggml-base.so and the per-CPU
 * ggml backends), loaded at run time with dlopen: ds4ref-llama and
 * bench/llama_time build without them, and nothing of llama.cpp is linked
 * into a library.
 *
 * The struct layouts are that package's libllama (0.5.0), found by
 * disassembling its *_default_params, not the public llama.h of another
 * version: llama_model_params is 0x50 bytes, with the bool use_extra_bufts
 * (its repacked weight layouts) at 0x4a; llama_context_params is 0xa0
 * bytes, with n_ctx, n_batch, n_ubatch and n_seq_max as its first four
 * 32-bit fields, flash_attn_type at 0x34 and the KV cache types at 0x68 and
 * 0x6c; llama_batch is its public 56-byte layout.  Both params structs are
 * used as the library's defaults return them, with only those fields set. */
#ifndef DS4REF_PROGRAMS_LLAMA_API_H
#define DS4REF_PROGRAMS_LLAMA_API_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct llama_api_model_params {
    _Alignas(8) unsigned char bytes[0x50];
} llama_api_model_params;

typedef struct llama_api_context_params {
    _Alignas(8) unsigned char bytes[0xa0];
} llama_api_context_params;

typedef struct llama_api_batch {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_api_batch;

/* The entry points used, looked up by name. */
typedef struct llama_api {
    void (*backend_load_all_from_path)(const char *dir);
    void (*backend_init)(void);
    void (*log_set)(void (*cb)(int, const char *, void *), void *ud);
    llama_api_model_params (*model_default_params)(void);
    llama_api_context_params (*context_default_params)(void);
    void *(*model_load_from_file)(const char *path, llama_api_model_params p);
    void *(*init_from_model)(void *model, llama_api_context_params p);
    void (*set_n_threads)(void *ctx, int32_t n, int32_t n_batch);
    llama_api_batch (*batch_init)(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
    void (*batch_free)(llama_api_batch b);
    int32_t (*decode)(void *ctx, llama_api_batch b);
    void (*synchronize)(void *ctx);
    float *(*get_logits_ith)(void *ctx, int32_t i);
    const void *(*model_get_vocab)(const void *model);
    int32_t (*vocab_n_tokens)(const void *vocab);
    int32_t (*vocab_eos)(const void *vocab);
    void (*free_ctx)(void *ctx);
    void (*model_free)(void *model);
} llama_api;

static void *llama_api_open(const char *dir, const char *name, char *why, size_t cap) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) snprintf(why, cap, "cannot load %s", dlerror());
    return h;
}

/* One entry point into *slot; false, saying which, when the library has
 * none of that name (another version of it). */
static int llama_api_sym(void *h, const char *name, void *slot, char *why, size_t cap) {
    void *p = dlsym(h, name);
    if (!p) {
        snprintf(why, cap, "the library has no %s: is it node-llama-cpp 3.22.1's libllama?", name);
        return 0;
    }
    memcpy(slot, &p, sizeof(p));
    return 1;
}

/* The libraries of dir into L, then llama.cpp's log sent to log (before
 * anything logs), its CPU backends loaded and llama.cpp initialized.  0, or
 * -1 with the reason in why. */
static int llama_api_load(llama_api *L, const char *dir, void (*log)(int, const char *, void *),
                          char *why, size_t cap) {
    void *base = llama_api_open(dir, "libggml-base.so", why, cap);
    void *ggml = base ? llama_api_open(dir, "libggml.v0.5.0.so", why, cap) : NULL;
    void *llama = ggml ? llama_api_open(dir, "libllama.v0.5.0.so", why, cap) : NULL;
    if (!llama) return -1;
    int ok = llama_api_sym(ggml, "ggml_backend_load_all_from_path", &L->backend_load_all_from_path, why, cap) &&
             llama_api_sym(llama, "llama_backend_init", &L->backend_init, why, cap) &&
             llama_api_sym(llama, "llama_log_set", &L->log_set, why, cap) &&
             llama_api_sym(llama, "llama_model_default_params", &L->model_default_params, why, cap) &&
             llama_api_sym(llama, "llama_context_default_params", &L->context_default_params, why, cap) &&
             llama_api_sym(llama, "llama_model_load_from_file", &L->model_load_from_file, why, cap) &&
             llama_api_sym(llama, "llama_init_from_model", &L->init_from_model, why, cap) &&
             llama_api_sym(llama, "llama_set_n_threads", &L->set_n_threads, why, cap) &&
             llama_api_sym(llama, "llama_batch_init", &L->batch_init, why, cap) &&
             llama_api_sym(llama, "llama_batch_free", &L->batch_free, why, cap) &&
             llama_api_sym(llama, "llama_decode", &L->decode, why, cap) &&
             llama_api_sym(llama, "llama_synchronize", &L->synchronize, why, cap) &&
             llama_api_sym(llama, "llama_get_logits_ith", &L->get_logits_ith, why, cap) &&
             llama_api_sym(llama, "llama_model_get_vocab", &L->model_get_vocab, why, cap) &&
             llama_api_sym(llama, "llama_vocab_n_tokens", &L->vocab_n_tokens, why, cap) &&
             llama_api_sym(llama, "llama_vocab_eos", &L->vocab_eos, why, cap) &&
             llama_api_sym(llama, "llama_free", &L->free_ctx, why, cap) &&
             llama_api_sym(llama, "llama_model_free", &L->model_free, why, cap);
    if (!ok) return -1;
    L->log_set(log, NULL);
    L->backend_load_all_from_path(dir);
    L->backend_init();
    return 0;
}

static void llama_api_set_u32(llama_api_context_params *p, size_t off, uint32_t v) {
    memcpy(p->bytes + off, &v, sizeof(v));
}

/* Context parameters for n_ctx positions shared by n_seq sequences and
 * calls of up to n_batch tokens (n_ubatch = n_batch: a call is one forward
 * pass), with flash attention off and an f32 KV cache: the settings
 * llama.cpp's own tests run its deepseek4 graph with. */
static llama_api_context_params llama_api_context(const llama_api *L, uint32_t n_ctx,
                                                  uint32_t n_batch, uint32_t n_seq) {
    llama_api_context_params cp = L->context_default_params();
    llama_api_set_u32(&cp, 0x00, n_ctx);
    llama_api_set_u32(&cp, 0x04, n_batch);
    llama_api_set_u32(&cp, 0x08, n_batch);
    llama_api_set_u32(&cp, 0x0c, n_seq);
    llama_api_set_u32(&cp, 0x34, 0);   /* flash_attn_type: off */
    llama_api_set_u32(&cp, 0x68, 0);   /* type_k: GGML_TYPE_F32 */
    llama_api_set_u32(&cp, 0x6c, 0);   /* type_v: GGML_TYPE_F32 */
    return cp;
}

/* Model parameters, with or without llama.cpp's repacked weight layouts
 * (use_extra_bufts): with them, this package cannot build a graph of more
 * than one token for the deepseek4 models on some CPUs (AMX:
 * "GGML_ASSERT(*cur_backend_id != -1)"). */
static llama_api_model_params llama_api_model(const llama_api *L, int repack) {
    llama_api_model_params mp = L->model_default_params();
    mp.bytes[0x4a] = (unsigned char)(repack != 0);
    return mp;
}

#endif
