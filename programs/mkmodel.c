/* ds4ref-mkmodel: write a synthetic DS4 model (base GGUF + MTP GGUF), or
 * the same model as a checkpoint in the official layout.  Argument parsing
 * over the public API (ds4ref_synth_write and ds4ref_gguf_to_checkpoint in
 * ds4ref.h); the generator is ref/model/synth.c, the checkpoint writer
 * ref/model/hfwrite.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4ref.h"

#include "options.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ds4ref-mkmodel --config NAME [--seed N] [--types f32|ds4|release]\n"
            "                      [--format gguf|hf] [--vocab-from tokenizer.json]\n"
            "                      [--no-mtp] -o FILE|DIR\n"
            "\n"
            "Writes a complete DeepSeek V4 Flash GGUF with random weights to FILE and\n"
            "the matching MTP head to FILE with -mtp.gguf in place of .gguf; with\n"
            "--format hf, the same model (its F32 values) as a checkpoint in the\n"
            "official layout in the folder DIR: config.json, the shard index, two\n"
            "shards, tokenizer.json, the MTP layer inside.\n"
            "Same options and seed give byte-identical files.\n"
            "\n"
            "  --config NAME   tiny (4 layers: ratios 0,0,4,128), tiny-k64 (tiny with heads\n"
            "                  of 64, RoPE on 16: runs with --qat off only), tiny-ckpt (tiny\n"
            "                  with low ranks 128 and 64: whole FP8 activation blocks),\n"
            "                  tiny-spec (tiny whose MTP head drafts what it decodes),\n"
            "                  tiny-0731 (tiny-ckpt with DeepSeek-V4-Flash-0731's DSpark\n"
            "                  configuration and no MTP layer: use --no-mtp),\n"
            "                  tiny-dspark (tiny-0731 whose DSpark drafter drafts what\n"
            "                  it decodes: use --no-mtp),\n"
            "                  tiny-pro (DeepSeek-V4-Pro's shape: ratio-128 hash layers,\n"
            "                  8 heads in 4 groups, 12 experts, route scale 2.5),\n"
            "                  fullwidth (the real per-layer dimensions, 3 layers, 16\n"
            "                  experts) or fulldepth (the same with the real 43 layers\n"
            "                  and their ratios, ~13 GB)\n"
            "  --types T       GGUF: f32, every float tensor F32, or ds4 (default),\n"
            "                  ds4's published mix (Q8_0 / F16 / IQ2_XXS / Q2_K / F32 /\n"
            "                  I32); hf: release (default), the release's FP8, FP4 and\n"
            "                  BF16 tensors, or f32, their unquantized twin (every float\n"
            "                  tensor F32 with the same values)\n"
            "  --format F      gguf (default) or hf\n"
            "  --seed N        random seed (default 1)\n"
            "  --vocab-from F  embed a Hugging Face byte-level BPE vocabulary\n"
            "  --no-mtp        do not write the MTP file\n"
            "  -h, --help, --version\n");
}

enum opt_id { O_HELP, O_VERSION, O_NO_MTP, O_CONFIG, O_SEED, O_TYPES, O_FORMAT, O_VOCAB_FROM, O_OUT };

static const ds4ref_option options[] = {
    {"-h", O_HELP, false}, {"--help", O_HELP, false}, {"--version", O_VERSION, false},
    {"--no-mtp", O_NO_MTP, false}, {"--config", O_CONFIG, true}, {"--seed", O_SEED, true},
    {"--types", O_TYPES, true}, {"--format", O_FORMAT, true}, {"--vocab-from", O_VOCAB_FROM, true},
    {"-o", O_OUT, true},
};

/* --format hf: the model synthesized with every float tensor F32 into
 * temporary files beside the folder, then written as a checkpoint (f32: its
 * unquantized twin); the temporary files are removed either way. */
static int write_checkpoint(ds4ref_synth_options *o, const char *dir, int mtp, int f32,
                            ds4ref_error *err) {
    const size_t n = strlen(dir) + 32;
    char *gguf = malloc(n), *mtp_path = malloc(n);
    if (!gguf || !mtp_path) {
        free(gguf), free(mtp_path);
        fprintf(stderr, "ds4ref-mkmodel: out of memory\n");
        return DS4REF_E_NOMEM;
    }
    snprintf(gguf, n, "%s.tmp-XXXXXX", dir);
    int fd = mkstemp(gguf);
    if (fd < 0) {
        fprintf(stderr, "ds4ref-mkmodel: cannot make a temporary file beside %s: %s\n", dir,
                strerror(errno));
        free(gguf), free(mtp_path);
        return DS4REF_E_IO;
    }
    close(fd);
    snprintf(mtp_path, n, "%s-mtp", gguf);
    o->f32 = 1;
    int rc = ds4ref_synth_write(o, gguf, mtp ? mtp_path : NULL, err);
    if (rc == 0) rc = ds4ref_gguf_to_checkpoint(gguf, mtp ? mtp_path : NULL, dir, f32, err);
    remove(gguf);
    if (mtp) remove(mtp_path);
    free(gguf), free(mtp_path);
    return rc;
}

int main(int argc, char **argv) {
    ds4ref_synth_options o;
    ds4ref_synth_options_init(&o);
    o.config = NULL;   /* required */
    const char *out = NULL, *types = NULL;
    int mtp = 1, hf = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        char *end;
        switch (ds4ref_option_next("ds4ref-mkmodel", options, sizeof(options) / sizeof(options[0]),
                                   argc, argv, &i, &v)) {
        case -1:
            return DS4REF_E_ARG;
        case O_HELP:
            usage(stdout);
            return 0;
        case O_VERSION:
            printf("ds4ref-mkmodel %s\n", ds4ref_version());
            return 0;
        case O_NO_MTP:
            mtp = 0;
            break;
        case O_CONFIG:
            o.config = v;
            break;
        case O_SEED:
            errno = 0;
            o.seed = strtoull(v, &end, 10);
            if (*end || !*v || *v == '-' || errno) {
                fprintf(stderr, "ds4ref-mkmodel: --seed expects a decimal integer, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
            break;
        case O_TYPES:
            if (strcmp(v, "f32") && strcmp(v, "ds4") && strcmp(v, "release")) {
                fprintf(stderr, "ds4ref-mkmodel: --types expects f32, ds4 or release, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
            types = v;
            break;
        case O_FORMAT:
            if (strcmp(v, "gguf") && strcmp(v, "hf")) {
                fprintf(stderr, "ds4ref-mkmodel: --format expects gguf or hf, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
            hf = !strcmp(v, "hf");
            break;
        case O_VOCAB_FROM:
            o.vocab_from = v;
            break;
        case O_OUT:
            out = v;
            break;
        }
    }
    if (!o.config || !out) {
        fprintf(stderr, "ds4ref-mkmodel: --config NAME and -o FILE are required (see --help)\n");
        return DS4REF_E_ARG;
    }
    if (types && !strcmp(types, hf ? "ds4" : "release")) {
        fprintf(stderr, "ds4ref-mkmodel: --types %s is for --format %s\n", types, hf ? "gguf" : "hf");
        return DS4REF_E_ARG;
    }
    o.f32 = types && !strcmp(types, "f32");
    ds4ref_error err = {0};
    if (hf) {
        int rc = write_checkpoint(&o, out, mtp, o.f32, &err);
        if (rc && err.code) fprintf(stderr, "ds4ref-mkmodel: %s\n", err.message);
        return rc;
    }
    char *mtp_path = NULL;
    int rc = mtp ? ds4ref_synth_mtp_path(out, &mtp_path, &err) : 0;
    if (rc == 0) rc = ds4ref_synth_write(&o, out, mtp_path, &err);
    if (rc) fprintf(stderr, "ds4ref-mkmodel: %s\n", err.message);
    ds4ref_free(mtp_path);
    return rc;
}
