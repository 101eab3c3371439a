/* ds4ref-mkmodel: write a synthetic DS4 model (base GGUF + MTP GGUF).
 * Argument parsing over the public API (ds4ref_synth_write in ds4ref.h);
 * the generator is ref/model/synth.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4ref.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ds4ref-mkmodel --config NAME [--seed N] [--types f32|ds4]\n"
            "                      [--vocab-from tokenizer.json[.xz]] [--no-mtp] -o FILE\n"
            "\n"
            "Writes a complete DeepSeek V4 Flash GGUF with random weights to FILE and\n"
            "the matching MTP head to FILE with -mtp.gguf in place of .gguf.\n"
            "Same options and seed give byte-identical files.\n"
            "\n"
            "  --config NAME   tiny (4 layers: ratios 0,0,4,128), fullwidth (the real\n"
            "                  per-layer dimensions, 3 layers, 16 experts) or fulldepth\n"
            "                  (the same with the real 43 layers and their ratios, ~13 GB)\n"
            "  --types T       f32: every float tensor F32; ds4 (default): ds4's\n"
            "                  published mix (Q8_0 / F16 / IQ2_XXS / Q2_K / F32 / I32)\n"
            "  --seed N        random seed (default 1)\n"
            "  --vocab-from F  embed a Hugging Face byte-level BPE vocabulary\n"
            "  --no-mtp        do not write the MTP file\n");
}

int main(int argc, char **argv) {
    ds4ref_synth_options o;
    ds4ref_synth_options_init(&o);
    o.config = NULL;   /* required */
    const char *out = NULL;
    int mtp = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-mtp")) {
            mtp = 0;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ds4ref-mkmodel: %s needs a value (see --help)\n", a);
            return DS4REF_E_ARG;
        }
        i++;
        if (!strcmp(a, "--config")) o.config = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o.seed = strtoull(v, &end, 10);
            if (*end || !*v || *v == '-' || errno) {
                fprintf(stderr, "ds4ref-mkmodel: --seed expects a decimal integer, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
        } else if (!strcmp(a, "--types")) {
            if (!strcmp(v, "f32")) o.f32 = 1;
            else if (!strcmp(v, "ds4")) o.f32 = 0;
            else {
                fprintf(stderr, "ds4ref-mkmodel: --types expects f32 or ds4, got '%s'\n", v);
                return DS4REF_E_ARG;
            }
        } else if (!strcmp(a, "--vocab-from")) o.vocab_from = v;
        else if (!strcmp(a, "-o")) out = v;
        else {
            fprintf(stderr, "ds4ref-mkmodel: unknown option %s (see --help)\n", a);
            return DS4REF_E_ARG;
        }
    }
    if (!o.config || !out) {
        fprintf(stderr, "ds4ref-mkmodel: --config NAME and -o FILE are required (see --help)\n");
        return DS4REF_E_ARG;
    }
    ds4ref_error err = {0};
    char *mtp_path = NULL;
    int rc = mtp ? ds4ref_synth_mtp_path(out, &mtp_path, &err) : 0;
    if (rc == 0) rc = ds4ref_synth_write(&o, out, mtp_path, &err);
    if (rc) fprintf(stderr, "ds4ref-mkmodel: %s\n", err.message);
    ds4ref_free(mtp_path);
    return rc;
}
