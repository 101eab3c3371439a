/* Reading a Hugging Face tokenizer.json into the GGUF vocabulary layout
 * (ds4_vocab, see tokenizer.h).  Used by the synthetic model generator to
 * embed the real DeepSeek vocabulary, and by tests to build the official
 * tokenizer without a GGUF.  Plain JSON only: the library starts no
 * process, so a compressed file is the caller's to decompress. */
#include "base/file.h"
#include "ref/text/json.h"
#include "ref/text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids above this are refused: real vocabularies have a few hundred thousand
 * tokens, and the id sets the size of the arrays we allocate. */
#define MAX_VOCAB (1u << 24)

/* tokenizer.json files are a few MB; anything past this is not one. */
#define MAX_FILE ((size_t)1 << 30)

/* A JSON integer in [0, MAX_VOCAB), or -1. */
static int64_t json_id(const ds4_json *v) {
    if (!v || v->type != DS4_JSON_NUMBER || strpbrk(v->str, ".eE-")) return -1;
    return v->num < MAX_VOCAB ? (int64_t)v->num : -1;
}

typedef struct builder {
    const char *path;
    uint32_t n;
    size_t *tok_off, *tok_len;   /* SIZE_MAX offset: id not seen yet */
    int32_t *types;
    ds4_buf store;
} builder;

static int set_token(builder *b, int64_t id, const ds4_json *s, int32_t type, const char *where,
                     ds4err *err) {
    if (b->tok_off[id] != SIZE_MAX) {
        size_t len = b->tok_len[id];
        if (len != s->len || memcmp(b->store.p + b->tok_off[id], s->str, len) != 0)
            return ds4_err_set(err, DS4_E_FORMAT,
                              "%s: %s: id %lld is \"%.*s\" but was already \"%.*s\"", b->path,
                              where, (long long)id, (int)(s->len > 60 ? 60 : s->len), s->str,
                              (int)(len > 60 ? 60 : len), b->store.p + b->tok_off[id]);
    } else {
        b->tok_off[id] = b->store.len;
        b->tok_len[id] = s->len;
        ds4_buf_put(&b->store, s->str, s->len);
    }
    b->types[id] = type;
    return 0;
}

/* One merge as "left right"; `rank` only names it in errors. */
static int put_merge(builder *b, const ds4_json *m, size_t rank, ds4err *err) {
    const ds4_json *l = NULL, *r = NULL;
    if (m->type == DS4_JSON_ARRAY && m->n == 2) {
        l = &m->elems[0];
        r = &m->elems[1];
    }
    if (m->type == DS4_JSON_STRING) {
        const char *sp = memchr(m->str, ' ', m->len);
        if (sp && sp != m->str && (size_t)(sp - m->str) + 1 < m->len &&
            !memchr(sp + 1, ' ', m->len - (size_t)(sp - m->str) - 1)) {
            ds4_buf_put(&b->store, m->str, m->len);
            return 0;
        }
    } else if (l && r && l->type == DS4_JSON_STRING && r->type == DS4_JSON_STRING && l->len &&
               r->len && !memchr(l->str, ' ', l->len) && !memchr(r->str, ' ', r->len)) {
        ds4_buf_put(&b->store, l->str, l->len);
        ds4_buf_put(&b->store, " ", 1);
        ds4_buf_put(&b->store, r->str, r->len);
        return 0;
    }
    return ds4_err_set(err, DS4_E_FORMAT,
                      "%s: model.merges[%zu] (byte %zu): expected \"left right\" or [left, right] "
                      "with non-empty parts and no other space",
                      b->path, rank, m->offset);
}

static int build(builder *b, const ds4_json *root, ds4_vocab *v, ds4err *err) {
    const ds4_json *model = ds4_json_get(root, "model");
    const ds4_json *type = ds4_json_get(model, "type");
    const ds4_json *vocab = ds4_json_get(model, "vocab");
    const ds4_json *merges = ds4_json_get(model, "merges");
    const ds4_json *added = ds4_json_get(root, "added_tokens");
    if (!vocab || vocab->type != DS4_JSON_OBJECT || (type && !ds4_json_is_str(type, "BPE")))
        return ds4_err_set(err, DS4_E_FORMAT, "%s: expected a BPE \"model\" with a \"vocab\" object",
                          b->path);
    if (!merges || merges->type != DS4_JSON_ARRAY || merges->n > INT32_MAX)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: expected a \"model.merges\" array", b->path);
    if (added && added->type != DS4_JSON_ARRAY)
        return ds4_err_set(err, DS4_E_FORMAT, "%s: \"added_tokens\" is not an array", b->path);

    /* The vocabulary size is the highest id + 1. */
    int64_t max_id = -1;
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id = json_id(&vocab->elems[i]);
        if (id < 0)
            return ds4_err_set(err, DS4_E_FORMAT,
                              "%s: model.vocab \"%.*s\" (byte %zu): id must be an integer in [0, %u)",
                              b->path, (int)(vocab->keys[i].len > 60 ? 60 : vocab->keys[i].len),
                              vocab->keys[i].str, vocab->elems[i].offset, MAX_VOCAB);
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; added && i < added->n; i++) {
        const ds4_json *a = &added->elems[i];
        const ds4_json *content = ds4_json_get(a, "content");
        int64_t id = json_id(ds4_json_get(a, "id"));
        if (id < 0 || !content || content->type != DS4_JSON_STRING)
            return ds4_err_set(err, DS4_E_FORMAT,
                              "%s: added_tokens[%zu] (byte %zu): expected an integer \"id\" in "
                              "[0, %u) and a string \"content\"", b->path, i, a->offset, MAX_VOCAB);
        if (id > max_id) max_id = id;
    }
    if (max_id < 0) return ds4_err_set(err, DS4_E_FORMAT, "%s: the vocabulary is empty", b->path);
    b->n = (uint32_t)max_id + 1;
    b->tok_off = malloc(b->n * sizeof(size_t));
    b->tok_len = malloc(b->n * sizeof(size_t));
    b->types = malloc(b->n * sizeof(int32_t));
    size_t *merge_off = malloc((merges->n + 1) * sizeof(size_t));
    v->tokens = malloc(b->n * sizeof(ds4_strref));
    v->merges = malloc((merges->n ? merges->n : 1) * sizeof(ds4_strref));
    int rc = -1;
    if (!b->tok_off || !b->tok_len || !b->types || !merge_off || !v->tokens || !v->merges) {
        ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory for %u tokens", b->path, b->n);
        goto done;
    }
    for (uint32_t id = 0; id < b->n; id++) b->tok_off[id] = SIZE_MAX;

    for (size_t i = 0; i < vocab->n; i++)
        if (set_token(b, json_id(&vocab->elems[i]), &vocab->keys[i], DS4_TOKTYPE_NORMAL,
                      "model.vocab", err))
            goto done;
    for (size_t i = 0; added && i < added->n; i++) {
        const ds4_json *a = &added->elems[i];
        const ds4_json *special = ds4_json_get(a, "special");
        int32_t ty = special && special->type == DS4_JSON_TRUE ? DS4_TOKTYPE_CONTROL
                                                                : DS4_TOKTYPE_USER_DEFINED;
        if (set_token(b, json_id(ds4_json_get(a, "id")), ds4_json_get(a, "content"), ty,
                      "added_tokens", err))
            goto done;
    }
    /* Ids nobody names: fillers, as llama.cpp's converter writes them. */
    for (uint32_t id = 0; id < b->n; id++) {
        if (b->tok_off[id] != SIZE_MAX) continue;
        char pad[32];
        int len = snprintf(pad, sizeof(pad), "[PAD%u]", id);
        b->tok_off[id] = b->store.len;
        b->tok_len[id] = (size_t)len;
        b->types[id] = DS4_TOKTYPE_UNUSED;
        ds4_buf_put(&b->store, pad, (size_t)len);
    }
    for (size_t r = 0; r < merges->n; r++) {
        merge_off[r] = b->store.len;
        if (put_merge(b, &merges->elems[r], r, err)) goto done;
    }
    merge_off[merges->n] = b->store.len;
    if (b->store.failed) {
        ds4_err_set(err, DS4_E_NOMEM, "%s: out of memory", b->path);
        goto done;
    }

    /* Offsets become pointers only now: the store moved while it grew. */
    for (uint32_t id = 0; id < b->n; id++) {
        v->tokens[id].ptr = b->store.p + b->tok_off[id];
        v->tokens[id].len = b->tok_len[id];
    }
    for (size_t r = 0; r < merges->n; r++) {
        v->merges[r].ptr = b->store.p + merge_off[r];
        v->merges[r].len = merge_off[r + 1] - merge_off[r];
    }
    v->n_tokens = b->n;
    v->n_merges = (uint32_t)merges->n;
    v->types = b->types;
    b->types = NULL;
    v->store = b->store.p;
    b->store.p = NULL;
    rc = 0;
done:
    free(merge_off);
    return rc;
}

int ds4_hf_vocab_from_text(ds4_vocab *v, const char *text, size_t len, const char *name,
                           ds4err *err) {
    memset(v, 0, sizeof(*v));
    ds4_json_doc *doc = NULL;
    if (ds4_json_parse(text, len, name, &doc, err)) return -1;
    builder b = {0};
    b.path = name;
    int rc = build(&b, ds4_json_root(doc), v, err);
    free(b.tok_off);
    free(b.tok_len);
    free(b.types);
    ds4_buf_free(&b.store);
    ds4_json_free(doc);
    if (rc) ds4_hf_vocab_free(v);
    return rc;
}

int ds4_hf_vocab_from_json(ds4_vocab *v, const char *path, ds4err *err) {
    memset(v, 0, sizeof(*v));
    char *raw = NULL;
    size_t raw_len = 0;
    if (ds4_file_read(path, MAX_FILE, &raw, &raw_len, err)) return -1;
    int rc = ds4_hf_vocab_from_text(v, raw, raw_len, path, err);
    free(raw);
    return rc;
}

void ds4_hf_vocab_free(ds4_vocab *v) {
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->store);
    memset(v, 0, sizeof(*v));
}
