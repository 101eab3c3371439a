/* A catalogue of malformed GGUF files, each with the error the reader must
 * give for it.  Built byte by byte (not with the writer) so that every field
 * can be wrong on purpose.  Used by tests/test_gguf.c; the buffers also make
 * a seed corpus for a fuzzer. */
#ifndef DS4_MALFORMED_H
#define DS4_MALFORMED_H

#include <stddef.h>
#include <stdint.h>

typedef struct mf_case {
    const char *name;     /* short id; tests parse the buffer as "<name>.gguf" */
    const char *expect;   /* a substring distinctive of the expected error */
    uint8_t *buf;         /* malloc'd */
    size_t len;
} mf_case;

/* Every case of the catalogue (malloc'd array); -1 on OOM. */
int mf_catalogue(mf_case **cases, size_t *n);
void mf_free(mf_case *cases, size_t n);

/* The small valid file most cases are variations of: GGUF v3, keys
 * general.alignment = u32 32, a.str = "hi", a.arr = arr[u8] {1, 2, 3};
 * tensors t0 f32 [4, 2] at 0 and t1 f16 [32] at 32; data 0x00, 0x01, ...
 * Its last tensor ends exactly at end of file, so every proper prefix of it
 * is invalid.  `version` is written as given (2 and 3 are both valid). */
int mf_valid_small(uint32_t version, uint8_t **buf, size_t *len);

/* A file whose only key "nested" holds `depth` arrays nested in one another,
 * the innermost an empty arr[u8] (valid for depth <= GGUF_MAX_ARRAY_DEPTH). */
int mf_nested_arrays(int depth, uint8_t **buf, size_t *len);

#endif
