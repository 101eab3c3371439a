/* Plain greedy decoding (greedy.h). */
#include "greedy.h"

#include <stdbool.h>
#include <string.h>

int ds4_generate_greedy(ds4_session *s, const ds4_gen_opts *o, ds4_gen_step *steps,
                        uint32_t *n_done, ds4_gen_cb cb, void *ud, ds4err *err) {
    uint32_t n_vocab = s->e->m->cfg.n_vocab;
    *n_done = 0;
    memset(steps, 0, sizeof(*steps) * o->n_steps);
    for (uint32_t i = 0; i < o->n_steps; i++) {
        if (!s->has_logits)
            return ds4_err_set(err, DS4_E_ARG, "nothing evaluated yet: no logits to continue from");
        if (ds4_step_from_logits(s->logits, n_vocab, o->top_k, &steps[i], err)) {
            ds4_step_list_free(steps, i + 1);
            return -1;
        }
        *n_done = i + 1;
        bool eos = o->stop_at_eos && steps[i].token == o->eos;
        if (cb && cb(ud, i, &steps[i])) break;
        if (eos || i + 1 == o->n_steps) break;
        if (ds4_session_eval(s, &steps[i].token, 1, NULL, NULL, err)) return -1;
    }
    return 0;
}

int ds4_spec_generate1(ds4_session *s, const ds4_spec_cfg *sc, const ds4_gen_opts *go,
                       uint64_t seed, ds4_gen_step *steps, uint32_t *n_done, ds4_gen_cb cb,
                       void *ud, ds4_spec_stats *stats, ds4err *err) {
    ds4_spec_row r = {.s = s, .seed = seed, .steps = steps, .cb = cb, .ud = ud};
    int rc = ds4_spec_generate(sc, go, &r, 1, stats, err);
    *n_done = r.n_done;
    return rc;
}
