/* ds4ref-gguf: look inside a GGUF file.
 *
 *   ds4ref-gguf info FILE             header, metadata, tensor table
 *   ds4ref-gguf dequant FILE TENSOR   the tensor as little-endian f32 on stdout
 *   ds4ref-gguf twin FILE OUT         the unquantized twin
 *   ds4ref-gguf checkpoint FILE [MTP] DIR   the model in the official layout
 *   ds4ref-gguf dspark-split FILE TRUNK DRAFT   llama.cpp's two files of a DSpark model
 *
 * A thin front end over the public API (ds4ref_gguf_describe,
 * ds4ref_gguf_dequant, ds4ref_gguf_twin, ds4ref_gguf_to_checkpoint,
 * ds4ref_gguf_dspark_split in
 * ds4ref.h).  Errors are one line on stderr; the exit
 * status is the DS4REF_E_* code (2 for usage errors, DS4REF_EXIT_SIGBUS when
 * the file shrinks while it is read). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ds4ref.h"

static const char usage[] =
    "usage: ds4ref-gguf info FILE\n"
    "       ds4ref-gguf dequant FILE TENSOR > out.f32\n"
    "       ds4ref-gguf twin FILE OUT.gguf\n"
    "       ds4ref-gguf checkpoint FILE [MTP.gguf] DIR\n"
    "       ds4ref-gguf dspark-split FILE TRUNK.gguf DRAFT.gguf\n"
    "\n"
    "info     prints the header (version, alignment, data offset, counts), every\n"
    "         metadata key with its type and value (arrays: element type, length,\n"
    "         first and last elements) and the tensor table (name, type, shape in\n"
    "         ggml order with ne0 contiguous, file offset, bytes).\n"
    "dequant  writes every element of TENSOR, in GGUF element order, as\n"
    "         little-endian float32 to stdout (not to a terminal).\n"
    "twin     writes FILE's unquantized twin: the same metadata and tensors,\n"
    "         every float tensor as F32 holding exactly its dequantized values\n"
    "         (for an engine that should run the model's values unquantized).\n"
    "checkpoint  writes the DS4 model in FILE (and its MTP head) to the folder\n"
    "         DIR in the official checkpoint's layout: config.json, the shard\n"
    "         index, two shards, tokenizer.json.  Its values are rounded to the\n"
    "         release's formats (FP8 Linears, FP4 experts, BF16 where the release\n"
    "         has BF16), so a checkpoint of ds4's 2-bit experts is not their\n"
    "         values; from an all-F32 GGUF it is what ds4ref-mkmodel --format hf\n"
    "         writes.  For synthetic models of any size (the fulldepth benchmark).\n"
    "dspark-split  writes a model with a DSpark drafter (DeepSeek-V4-Flash-0731)\n"
    "         as llama.cpp ships it: the trunk alone, and the drafter as\n"
    "         llama.cpp's drafter file (architecture dflash: -md, --spec-type\n"
    "         draft-dspark), which ds4ref --dspark reads back.\n"
    "\n"
    "  -h, --help, --version\n";

int main(int argc, char **argv) {
    /* The commands take files and tensor names; every other word that starts
     * with '-' is an option, and only these two exist. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("ds4ref-gguf %s\n", ds4ref_version());
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "ds4ref-gguf: unknown option %s (see --help)\n", argv[i]);
            return DS4REF_E_ARG;
        }
    }
    ds4ref_error err = {0};
    /* A file truncated while it is read ends with one line, not "Bus error". */
    int rc = ds4ref_report_sigbus("ds4ref-gguf", &err);
    if (rc == 0 && argc == 3 && !strcmp(argv[1], "info")) {
        rc = ds4ref_gguf_describe(argv[2], stdout, &err);
    } else if (rc == 0 && argc == 4 && !strcmp(argv[1], "dequant")) {
        if (isatty(STDOUT_FILENO)) {
            fputs("ds4ref-gguf: refusing to write binary float32 data to a terminal; "
                  "redirect stdout to a file or a pipe\n", stderr);
            return DS4REF_E_ARG;
        }
        rc = ds4ref_gguf_dequant(argv[2], argv[3], stdout, &err);
    } else if (rc == 0 && argc == 4 && !strcmp(argv[1], "twin")) {
        rc = ds4ref_gguf_twin(argv[2], argv[3], &err);
    } else if (rc == 0 && (argc == 4 || argc == 5) && !strcmp(argv[1], "checkpoint")) {
        rc = ds4ref_gguf_to_checkpoint(argv[2], argc == 5 ? argv[3] : NULL, argv[argc - 1], 0, &err);
    } else if (rc == 0 && argc == 5 && !strcmp(argv[1], "dspark-split")) {
        rc = ds4ref_gguf_dspark_split(argv[2], argv[3], argv[4], &err);
    } else if (rc == 0) {
        fputs("ds4ref-gguf: expected 'info FILE', 'dequant FILE TENSOR', 'twin FILE OUT', "
              "'checkpoint FILE [MTP] DIR' or 'dspark-split FILE TRUNK DRAFT' "
              "(see --help)\n", stderr);
        return DS4REF_E_ARG;
    }
    if (rc == 0) return 0;
    fprintf(stderr, "ds4ref-gguf: %s\n", err.message);
    return rc;
}
