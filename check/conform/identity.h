/* Which model a backend ran, wherever it can tell (docs/CONFORM.md §1,
 * "Model identity").  A run whose backend loaded another file than the
 * reference's model is a wrong setup, not a set of failing cells, and
 * when the numbers alone must say so (calibrate.h) the verdict comes late
 * and costs the whole matrix.  So every identity a backend gives is
 * compared with the reference's model file, and a mismatch is a setup
 * error naming both:
 *   - a ds4ref golden's header (its model's digests: conform.c);
 *   - a dump's "model_sha256", the SHA-256 of the file the backend loaded
 *     (what sha256sum prints);
 *   - a server's GET /v1/models: an entry's "model_sha256", else its "root"
 *     or "id" when that names a file here (llama.cpp's server,
 *     llama-cpp-python and vLLM name the path they were given;
 *     ds4ref-server gives it as "root").
 * A file is the reference's when it is the same file, or has its size and
 * SHA-256 (a copy); the reference's own SHA-256 is read once, when first
 * needed.  Where no identity is available the report says so. */
#ifndef DS4_CONFORM_IDENTITY_H
#define DS4_CONFORM_IDENTITY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "base/err.h"

typedef struct ds4_cf_identity {
    const char *model;         /* the reference's model file */
    const char *twin;          /* its unquantized twin, which stands for it; NULL: none */
    char model_sha[65], twin_sha[65];   /* "" until needed */
    /* What was compared, and agreed: outputs whose golden header or
     * model_sha256 named the model, cells whose server's /v1/models did;
     * and the outputs and server cells that said nothing comparable. */
    uint32_t by_header, by_sha256, by_server, unnamed, server_unnamed;
    char server_names[160];    /* what a server named that could not be compared */
    /* The last other file hashed, so that a server naming a copy of the
     * model is not read again in every cell. */
    struct {
        dev_t dev;
        ino_t ino;
        off_t size;
        time_t mtime;
        char sha[65];
    } seen;
    pthread_mutex_t mu;        /* servers are asked from the cells' threads (--jobs) */
    bool ready;                /* mu was initialized */
} ds4_cf_identity;

void ds4chk_identity_init(ds4_cf_identity *id, const char *model, const char *twin);
void ds4chk_identity_free(ds4_cf_identity *id);

/* The SHA-256 of the reference's model file ({model_sha256}). */
int ds4chk_identity_model_sha256(ds4_cf_identity *id, const char **hex, ds4err *err);

/* A dump's model_sha256 (lowercase hex): the reference's model or its twin?
 * DS4_E_ARG naming both otherwise; where names the output. */
int ds4chk_identity_check_sha256(ds4_cf_identity *id, const char *hex, const char *where,
                                 ds4err *err);

/* What one entry of a /v1/models answer names: its model_sha256 (lowercase;
 * "" none), its root and id ("" none, or longer than these hold). */
typedef struct ds4_cf_named {
    char sha[65];
    char root[1024], id[256];
} ds4_cf_named;

/* The entries of a /v1/models answer body[0..len), the first cap of them
 * into out (*n of them); 0 entries when it is not such an answer. */
void ds4chk_identity_parse_models(const char *body, size_t len, ds4_cf_named *out, uint32_t cap,
                                  uint32_t *n);

/* The engine at url (an OpenAI server): its /v1/models compared with the
 * reference's model; DS4_E_ARG naming both when it serves another file
 * (no entry names the reference's, and one names another file).  The
 * paths an answer gives are looked up here only when local: the engine
 * runs on this machine (started by the run, or at a loopback address).
 * An answer that names nothing comparable (or none) is counted, not an
 * error. */
int ds4chk_identity_check_server(ds4_cf_identity *id, const char *url, bool local, ds4err *err);

#endif
