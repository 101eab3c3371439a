/* The C side of the Python tests: what a C user of include/ds4ref.h sees,
 * for the tests to compare the Python package with.
 *
 *   chelper layout
 *       every public struct's size and field offsets, one "NAME SIZE" or
 *       "NAME.FIELD OFFSET" per line (against ds4ref/_lib.py's ctypes
 *       mirrors);
 *   chelper taps MODEL IDS_FILE OUT
 *       evaluates the whitespace-separated ids of IDS_FILE with a tap that
 *       writes every report to OUT as it comes: the name (NUL-terminated),
 *       then layer, pos, kind and n as little-endian u32, then the n values
 *       (against Model.taps). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ds4check.h>
#include <ds4ref.h>

#define SIZE(T) printf("%s %zu\n", #T, sizeof(T))
#define FIELD(T, f) printf("%s.%s %zu\n", #T, #f, offsetof(T, f))

static void layout(void) {
    SIZE(ds4ref_error);
    FIELD(ds4ref_error, code); FIELD(ds4ref_error, message);
    SIZE(ds4ref_model_options);
    FIELD(ds4ref_model_options, path); FIELD(ds4ref_model_options, mtp_path);
    FIELD(ds4ref_model_options, qat); FIELD(ds4ref_model_options, max_batch);
    FIELD(ds4ref_model_options, numerics); FIELD(ds4ref_model_options, dspark_path);
    SIZE(ds4ref_model_info);
    FIELD(ds4ref_model_info, n_layer); FIELD(ds4ref_model_info, n_embd);
    FIELD(ds4ref_model_info, n_vocab); FIELD(ds4ref_model_info, n_head);
    FIELD(ds4ref_model_info, head_dim); FIELD(ds4ref_model_info, n_hc);
    FIELD(ds4ref_model_info, n_expert); FIELD(ds4ref_model_info, n_expert_used);
    FIELD(ds4ref_model_info, context_length); FIELD(ds4ref_model_info, has_mtp);
    FIELD(ds4ref_model_info, has_tokenizer); FIELD(ds4ref_model_info, bos);
    FIELD(ds4ref_model_info, eos);
    SIZE(ds4ref_chat_options);
    FIELD(ds4ref_chat_options, system); FIELD(ds4ref_chat_options, system_len);
    FIELD(ds4ref_chat_options, thinking); FIELD(ds4ref_chat_options, think_max);
    FIELD(ds4ref_chat_options, reasoning_effort); FIELD(ds4ref_chat_options, release);
    SIZE(ds4ref_session_options);
    FIELD(ds4ref_session_options, ctx); FIELD(ds4ref_session_options, chunk);
    FIELD(ds4ref_session_options, progress); FIELD(ds4ref_session_options, progress_ud);
    SIZE(ds4ref_logprob);
    FIELD(ds4ref_logprob, id); FIELD(ds4ref_logprob, logit); FIELD(ds4ref_logprob, logprob);
    SIZE(ds4ref_step);
    FIELD(ds4ref_step, index); FIELD(ds4ref_step, id); FIELD(ds4ref_step, bytes);
    FIELD(ds4ref_step, n_bytes); FIELD(ds4ref_step, logit); FIELD(ds4ref_step, logprob);
    FIELD(ds4ref_step, n_top); FIELD(ds4ref_step, top); FIELD(ds4ref_step, logits_sha256);
    SIZE(ds4ref_spec_stats);
    FIELD(ds4ref_spec_stats, passes); FIELD(ds4ref_spec_stats, iters);
    FIELD(ds4ref_spec_stats, proposed); FIELD(ds4ref_spec_stats, accepted);
    FIELD(ds4ref_spec_stats, deepest);
    FIELD(ds4ref_spec_stats, proposed_at);
    FIELD(ds4ref_spec_stats, accepted_at);
    SIZE(ds4ref_generate_options);
    FIELD(ds4ref_generate_options, n_tokens); FIELD(ds4ref_generate_options, top_k);
    FIELD(ds4ref_generate_options, stop_at_eos); FIELD(ds4ref_generate_options, temperature);
    FIELD(ds4ref_generate_options, seed); FIELD(ds4ref_generate_options, mtp_draft);
    FIELD(ds4ref_generate_options, golden_path); FIELD(ds4ref_generate_options, dump_path);
    FIELD(ds4ref_generate_options, vec_path); FIELD(ds4ref_generate_options, vec_id);
    FIELD(ds4ref_generate_options, vec_prompt_path); FIELD(ds4ref_generate_options, prompt_text);
    FIELD(ds4ref_generate_options, prompt_text_len); FIELD(ds4ref_generate_options, stop);
    FIELD(ds4ref_generate_options, stats); FIELD(ds4ref_generate_options, dspark_confidence);
    SIZE(ds4ref_tap);
    FIELD(ds4ref_tap, name); FIELD(ds4ref_tap, layer); FIELD(ds4ref_tap, pos);
    FIELD(ds4ref_tap, kind); FIELD(ds4ref_tap, data); FIELD(ds4ref_tap, n);
    SIZE(ds4check_diff_options);
    FIELD(ds4check_diff_options, case_id); FIELD(ds4check_diff_options, all_steps);
    FIELD(ds4check_diff_options, json); FIELD(ds4check_diff_options, quiet);
    FIELD(ds4check_diff_options, max_dlogprob); FIELD(ds4check_diff_options, min_top1);
    FIELD(ds4check_diff_options, min_top5_overlap); FIELD(ds4check_diff_options, min_top20_overlap);
    FIELD(ds4check_diff_options, max_kl); FIELD(ds4check_diff_options, exact);
    FIELD(ds4check_diff_options, ignore_model);
    SIZE(ds4check_diff_result);
    FIELD(ds4check_diff_result, violations); FIELD(ds4check_diff_result, exact);
    FIELD(ds4check_diff_result, prompt_differs); FIELD(ds4check_diff_result, first_divergence);
    FIELD(ds4check_diff_result, n_steps_a); FIELD(ds4check_diff_result, n_steps_b);
    FIELD(ds4check_diff_result, n_compared); FIELD(ds4check_diff_result, top1);
    FIELD(ds4check_diff_result, max_dlogprob); FIELD(ds4check_diff_result, max_kl);
    SIZE(ds4ref_golden_model);
    FIELD(ds4ref_golden_model, file); FIELD(ds4ref_golden_model, size);
    FIELD(ds4ref_golden_model, metadata_sha256); FIELD(ds4ref_golden_model, tensor_data_sha256);
    SIZE(ds4ref_golden_step);
    FIELD(ds4ref_golden_step, id); FIELD(ds4ref_golden_step, logit);
    FIELD(ds4ref_golden_step, logprob); FIELD(ds4ref_golden_step, bytes);
    FIELD(ds4ref_golden_step, n_bytes); FIELD(ds4ref_golden_step, logits_sha256);
    FIELD(ds4ref_golden_step, n_top); FIELD(ds4ref_golden_step, top);
    SIZE(ds4ref_golden);
    FIELD(ds4ref_golden, version); FIELD(ds4ref_golden, model); FIELD(ds4ref_golden, has_mtp);
    FIELD(ds4ref_golden, mtp); FIELD(ds4ref_golden, qat); FIELD(ds4ref_golden, ctx);
    FIELD(ds4ref_golden, chunk); FIELD(ds4ref_golden, top_k); FIELD(ds4ref_golden, max_steps);
    FIELD(ds4ref_golden, mtp_draft); FIELD(ds4ref_golden, stop_at_eos);
    FIELD(ds4ref_golden, n_prompt); FIELD(ds4ref_golden, prompt);
    FIELD(ds4ref_golden, prompt_text); FIELD(ds4ref_golden, n_prompt_text);
    FIELD(ds4ref_golden, n_steps); FIELD(ds4ref_golden, steps);
    FIELD(ds4ref_golden, complete); FIELD(ds4ref_golden, stop);
    FIELD(ds4ref_golden, numerics);
}

static void put_u32(FILE *f, uint32_t v) {
    unsigned char b[4] = {v & 255, (v >> 8) & 255, (v >> 16) & 255, (v >> 24) & 255};
    fwrite(b, 1, 4, f);
}

static void on_tap(void *ud, const ds4ref_tap *t) {
    FILE *f = ud;
    static const size_t elem[] = {[DS4REF_TAP_F32] = 4, [DS4REF_TAP_I32] = 4, [DS4REF_TAP_F64] = 8};
    fwrite(t->name, 1, strlen(t->name) + 1, f);
    put_u32(f, t->layer);
    put_u32(f, t->pos);
    put_u32(f, (uint32_t)t->kind);
    put_u32(f, t->n);
    fwrite(t->data, elem[t->kind], t->n, f);
}

static int taps(const char *model, const char *ids_file, const char *out) {
    FILE *in = fopen(ids_file, "r"), *f = fopen(out, "wb");
    if (!in || !f) {
        fprintf(stderr, "chelper: cannot open %s or %s\n", ids_file, out);
        return 1;
    }
    int32_t ids[4096], extra;
    size_t n = 0;
    while (n < 4096 && fscanf(in, "%d", &ids[n]) == 1) n++;
    int more = fscanf(in, "%d", &extra) == 1;
    fclose(in);
    if (more) {
        fprintf(stderr, "chelper: %s: more than 4096 ids\n", ids_file);
        return 1;
    }
    ds4ref_error err;
    ds4ref_model_options mo;
    ds4ref_model_options_init(&mo);
    mo.path = model;
    ds4ref_model *m;
    ds4ref_session *s;
    ds4ref_session_options so = {.ctx = (uint32_t)n};
    if (ds4ref_model_open(&mo, &m, &err) || ds4ref_session_new(m, &so, &s, &err)) {
        fprintf(stderr, "chelper: %s\n", err.message);
        return 1;
    }
    ds4ref_set_tap(m, on_tap, f);
    int rc = ds4ref_session_eval(s, ids, n, NULL, &err);
    if (rc) fprintf(stderr, "chelper: %s\n", err.message);
    ds4ref_session_free(s);
    ds4ref_model_close(m);
    return fclose(f) || rc;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "layout")) {
        layout();
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "taps")) return taps(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: chelper layout | chelper taps MODEL IDS_FILE OUT\n");
    return 2;
}
