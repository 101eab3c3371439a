/* ckpt-dump PATH: what ds4ref reads of a checkpoint (a folder or one
 * shard), for scripts/peers.sh to compare with what the safetensors library
 * wrote.  One line per tensor, in name order:
 *   tensor NAME DTYPE D0,D1,... BYTES
 * and, for every 2-D NAME.weight that has a NAME.scale (F8_E8M0), its
 * dequantized rows: FP8 for an F8_E4M3 weight, FP4 for an I8 one:
 *   values NAME.weight V V V ...   (%.9g: each f32 exactly)
 * Exit status 0, or 1 with the reader's error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ckpt/checkpoint.h"
#include "quant/blockfp.h"

static int dump_values(const ds4_st_tensor *w, const ds4_st_tensor *s) {
    int fp4 = w->dtype == DS4_ST_I8;
    uint64_t rows = w->shape[0], in = fp4 ? 2 * w->shape[1] : w->shape[1], want[2];
    ds4_blockfp_scale_shape(fp4, rows, in, want);
    if (s->n_dims != 2 || s->shape[0] != want[0] || s->shape[1] != want[1] ||
        (fp4 && in % DS4_BLOCKFP_FP4_BLOCK)) {
        fprintf(stderr, "ckpt-dump: %s: its scale is not [%llu, %llu]\n", w->name,
                (unsigned long long)want[0], (unsigned long long)want[1]);
        return -1;
    }
    float *row = malloc((in ? in : 1) * sizeof(float));
    if (!row) return -1;
    printf("values %s", w->name);
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t bad;
        int rc = fp4 ? ds4_blockfp_fp4_row(w->data, s->data, in, r, row, &bad)
                     : ds4_blockfp_fp8_row(w->data, s->data, in, r, row, &bad);
        if (rc) {
            fprintf(stderr, "ckpt-dump: %s: row %llu column %llu is not an exact f32\n", w->name,
                    (unsigned long long)r, (unsigned long long)bad);
            free(row);
            return -1;
        }
        for (uint64_t k = 0; k < in; k++) printf(" %.9g", row[k]);
    }
    printf("\n");
    free(row);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ckpt-dump FOLDER|FILE.safetensors\n");
        return 2;
    }
    ds4_ckpt c;
    ds4err err = {0};
    if (ds4_checkpoint_open(&c, argv[1], &err)) {
        fprintf(stderr, "ckpt-dump: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < c.n_tensors && !rc; i++) {
        const ds4_st_tensor *t = c.tensors[i].t;
        printf("tensor %s %s ", t->name, ds4_safetensors_dtype_name(t->dtype));
        for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
        printf(" %llu\n", (unsigned long long)(t->end - t->begin));
        size_t n = strlen(t->name);
        if (n < 7 || strcmp(t->name + n - 7, ".weight") || t->n_dims != 2 ||
            (t->dtype != DS4_ST_F8_E4M3 && t->dtype != DS4_ST_I8))
            continue;
        char scale[512];
        snprintf(scale, sizeof(scale), "%.*s.scale", (int)(n - 7), t->name);
        const ds4_st_tensor *s = ds4_checkpoint_find(&c, scale);
        if (s && s->dtype == DS4_ST_F8_E8M0) rc = dump_values(t, s);
    }
    ds4_checkpoint_close(&c);
    return rc ? 1 : 0;
}
