/* ds4ref-server's scheduler (server_sched.h). */
#include "server_sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_sched {
    ds4ref_model *m;
    srv_sched_options o;
    uint32_t n_vocab;
    int32_t eos;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work;          /* the scheduler: a job came, or stop */
    pthread_cond_t progress;      /* the HTTP threads: a pass ended */
    srv_job *queue, *queue_tail;  /* submitted, not yet rows */
    uint32_t n_queued;
    srv_job **rows;               /* in flight */
    uint32_t n_rows;
    int stopping;
    float *logits;                /* max_rows x n_vocab: each row's last */
    /* A pass's arguments, max_rows each. */
    ds4ref_session **ss;
    const int32_t **ids;
    size_t *len;
    float **lg, **all;
};

/* ---- under the lock ---- */

static void end_job(srv_sched *s, srv_job *j, const char *finish) {
    j->finish = finish;
    ds4ref_session_free(j->s);
    j->s = NULL;
    (void)s;
}

static int push_step(srv_job *j, const srv_step *st) {
    if (j->n_steps == j->steps_cap) {
        uint32_t cap = j->steps_cap ? 2 * j->steps_cap : 16;
        srv_step *p = realloc(j->steps, sizeof(*p) * cap);
        if (!p) return -1;
        j->steps = p;
        j->steps_cap = cap;
    }
    j->steps[j->n_steps++] = *st;
    return 0;
}

/* Append a token's bytes; a stop string that now appears ends the text at
 * its start.  Returns 1 when one did. */
static int push_text(srv_job *j, const char *b, size_t n, int *oom) {
    if (j->text_len + n + 1 > j->text_cap) {
        size_t cap = 2 * (j->text_len + n + 1);
        char *p = realloc(j->text, cap);
        if (!p) return *oom = 1, 0;
        j->text = p;
        j->text_cap = cap;
    }
    const size_t old = j->text_len;
    memcpy(j->text + old, b, n);
    j->text_len += n;
    j->text[j->text_len] = '\0';
    size_t cut = SIZE_MAX;
    for (size_t k = 0; k < j->n_stop; k++) {
        const size_t L = j->stop_len[k];
        size_t from = old + 1 > L ? old + 1 - L : 0;
        for (size_t p = from; p + L <= j->text_len; p++)
            if (!memcmp(j->text + p, j->stop[k], L) && p < cut) {
                cut = p;
                break;
            }
    }
    if (cut == SIZE_MAX) return 0;
    j->text_len = cut;
    j->text[cut] = '\0';
    return 1;
}

/* ---- the thread ---- */

/* A step from a row's last logits: greedy (the top alternative) or drawn
 * from the job's generator. */
static int choose(srv_sched *s, srv_job *j, const float *logits, srv_step *st,
                  ds4ref_error *e) {
    memset(st, 0, sizeof(*st));
    const uint32_t k = j->top ? j->top : 1;
    if (ds4ref_top_logprobs(s->m, logits, k, st->top, &st->n_top, e)) return -1;
    if (st->n_top == 0) {
        snprintf(e->message, sizeof(e->message), "every logit is NaN");
        return -1;
    }
    if (j->temperature > 0) {
        if (ds4ref_sample(s->m, &j->sampler, logits, j->temperature, &st->id, e) ||
            ds4ref_token_logprob(s->m, logits, st->id, &st->logprob, e))
            return -1;
    } else {
        st->id = st->top[0].id;
        st->logprob = st->top[0].logprob;
    }
    if (!j->top) st->n_top = 0;
    return 0;
}

/* A token's rank in a logits row as vLLM gives it: the tokens whose logit
 * is at least its own, itself included (ties take the worst place); NaN
 * logits rank after every number. */
static uint32_t token_rank(const float *lg, uint32_t n, int32_t id) {
    const float x = lg[id];
    uint32_t rank = 0;
    for (uint32_t k = 0; k < n; k++) {
        const float y = lg[k];
        rank += x != x ? 1 : y >= x;
    }
    return rank;
}

/* Each prompt token's logprob, rank and alternatives under the logits of
 * the tokens before it (echo, prompt_logprobs). */
static int prompt_steps(srv_sched *s, srv_job *j, const float *all, ds4ref_error *e) {
    srv_step *ps = calloc(j->n_prompt, sizeof(*ps));
    if (!ps) return -1;
    for (size_t i = 1; i < j->n_prompt; i++) {
        const float *lg = all + (i - 1) * (size_t)s->n_vocab;
        ps[i].id = j->prompt[i];
        /* A pass over the vocabulary a token: only when asked for. */
        if (j->prompt_rank) ps[i].rank = token_rank(lg, s->n_vocab, j->prompt[i]);
        if (ds4ref_token_logprob(s->m, lg, j->prompt[i], &ps[i].logprob, e) ||
            (j->prompt_top &&
             ds4ref_top_logprobs(s->m, lg, j->prompt_top, ps[i].top, &ps[i].n_top, e))) {
            free(ps);
            return -1;
        }
    }
    ps[0].id = j->prompt[0];
    pthread_mutex_lock(&s->lock);
    j->prompt_steps = ps;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Admit queued jobs as rows, drop cancelled ones.  Under the lock. */
static void admit(srv_sched *s) {
    uint32_t w = 0;
    for (uint32_t i = 0; i < s->n_rows; i++) {
        srv_job *j = s->rows[i];
        if (j->cancel || s->stopping) end_job(s, j, "cancelled");
        else s->rows[w++] = j;
    }
    s->n_rows = w;
    /* Cancelled jobs leave the queue wherever they wait, so that a client
     * gone from the queue frees its place (and its connection) at once. */
    for (srv_job **p = &s->queue, *prev = NULL; *p;) {
        srv_job *j = *p;
        if (!j->cancel) {
            prev = j;
            p = &j->link;
            continue;
        }
        *p = j->link;
        if (s->queue_tail == j) s->queue_tail = prev;
        s->n_queued--;
        j->link = NULL;
        j->finish = "cancelled";
    }
    while (s->queue && s->n_rows < s->o.max_rows && !s->stopping) {
        srv_job *j = s->queue;
        s->queue = j->link;
        if (!s->queue) s->queue_tail = NULL;
        s->n_queued--;
        j->link = NULL;
        if (j->cancel) {
            j->finish = "cancelled";
            continue;
        }
        /* The last token is never evaluated; scoring evaluates the prompt. */
        const size_t ctx = j->n_prompt + (j->max_tokens ? j->max_tokens - 1 : 0);
        ds4ref_session_options so = {.ctx = (uint32_t)ctx, .chunk = s->o.chunk};
        ds4ref_error e;
        if (ds4ref_session_new(s->m, &so, &j->s, &e)) {
            snprintf(j->error, sizeof(j->error), "%s", e.message);
            j->finish = "error";
            continue;
        }
        ds4ref_sampler_init(&j->sampler, j->seed);
        j->next = -1;
        s->rows[s->n_rows++] = j;
    }
    while (s->stopping && s->queue) {
        srv_job *j = s->queue;
        s->queue = j->link;
        j->finish = "cancelled";
    }
    s->queue_tail = s->queue ? s->queue_tail : NULL;
    s->n_queued = s->queue ? s->n_queued : 0;
}

/* One shared forward pass over every row, then each row's step. */
static void pass(srv_sched *s, srv_job **rows, uint32_t n) {
    ds4ref_session **ss = s->ss;
    const int32_t **ids = s->ids;
    size_t *len = s->len;
    float **lg = s->lg, **all = s->all;
    ds4ref_error e = {0};
    int rc = 0;
    for (uint32_t i = 0; i < n; i++) {
        srv_job *j = rows[i];
        ss[i] = j->s;
        all[i] = NULL;
        if (j->next < 0) {
            ids[i] = j->prompt;
            len[i] = j->n_prompt;
            if (j->prompt_logprobs && !(all[i] = malloc(sizeof(float) * s->n_vocab * j->n_prompt)))
                rc = -1;
        } else {
            ids[i] = &j->next;
            len[i] = 1;
        }
        lg[i] = all[i] ? all[i] : (len[i] == 1 ? s->logits + (size_t)i * s->n_vocab : NULL);
    }
    if (!rc) rc = ds4ref_session_eval_many(ss, ids, len, n, lg, &e);
    else snprintf(e.message, sizeof(e.message), "out of memory for the prompt's logits");
    for (uint32_t i = 0; i < n && !rc; i++) {
        srv_job *j = rows[i];
        float *last = s->logits + (size_t)i * s->n_vocab;
        if (all[i]) memcpy(last, all[i] + (len[i] - 1) * (size_t)s->n_vocab, sizeof(float) * s->n_vocab);
        else if (len[i] > 1) rc = ds4ref_session_logits(j->s, ds4ref_session_pos(j->s) - 1, last, &e);
        if (!rc && all[i]) rc = prompt_steps(s, j, all[i], &e);
        if (!rc && j->max_tokens == 0) {
            pthread_mutex_lock(&s->lock);
            clock_gettime(CLOCK_MONOTONIC, &j->first_at);
            end_job(s, j, "length");
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        srv_step st;
        if (!rc) rc = choose(s, j, last, &st, &e);
        char *bytes = NULL;
        size_t nb = 0;
        const int eos = j->stop_at_eos && st.id == s->eos;
        if (!rc && !eos) rc = ds4ref_detokenize(s->m, &st.id, 1, &bytes, &nb, &e);
        if (rc) break;
        pthread_mutex_lock(&s->lock);
        int oom = push_step(j, &st) != 0;
        if (j->n_steps == 1) clock_gettime(CLOCK_MONOTONIC, &j->first_at);
        const int stopped = bytes ? push_text(j, bytes, nb, &oom) : 0;
        if (oom) snprintf(j->error, sizeof(j->error), "out of memory");
        if (oom) end_job(s, j, "error");
        else if (eos || stopped) end_job(s, j, "stop");
        else if (j->n_steps == j->max_tokens) end_job(s, j, "length");
        else j->next = st.id;
        pthread_mutex_unlock(&s->lock);
        ds4ref_free(bytes);
    }
    for (uint32_t i = 0; i < n; i++) free(all[i]);
    if (!rc) return;
    /* A pass that failed leaves every row's state unknown: all end. */
    pthread_mutex_lock(&s->lock);
    for (uint32_t i = 0; i < n; i++)
        if (!rows[i]->finish) {
            snprintf(rows[i]->error, sizeof(rows[i]->error), "%s", e.message);
            end_job(s, rows[i], "error");
        }
    pthread_mutex_unlock(&s->lock);
}

static void *run(void *arg) {
    srv_sched *s = arg;
    /* The passes run on this thread, and a thread count is the thread's. */
    ds4ref_set_threads(s->o.threads);
    srv_job **batch = malloc(sizeof(*batch) * s->o.max_rows);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        /* Rows that ended in the last pass leave first, so that the queue
         * can take their places in this pass: admitting before they left
         * found every row taken when all of them ended together, and the
         * queue then waited for an unrelated request to wake the loop. */
        uint32_t w = 0;
        for (uint32_t i = 0; i < s->n_rows; i++)
            if (!s->rows[i]->finish) s->rows[w++] = s->rows[i];
        s->n_rows = w;
        admit(s);
        pthread_cond_broadcast(&s->progress);
        if (s->stopping && !s->n_rows) break;
        if (!s->n_rows) {
            pthread_cond_wait(&s->work, &s->lock);
            continue;
        }
        const uint32_t n = s->n_rows;
        memcpy(batch, s->rows, sizeof(*batch) * n);
        pthread_mutex_unlock(&s->lock);
        pass(s, batch, n);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    free(batch);
    return NULL;
}

static void free_arrays(srv_sched *s) {
    free(s->rows), free(s->logits), free(s->ss), free(s->ids), free(s->len), free(s->lg);
    free(s->all);
}

int srv_sched_start(ds4ref_model *m, const srv_sched_options *o, srv_sched **out, char *err,
                    size_t err_size) {
    srv_sched *s = calloc(1, sizeof(*s));
    ds4ref_model_info info;
    ds4ref_model_get_info(m, &info);
    if (s) {
        s->m = m;
        s->o = *o;
        s->n_vocab = info.n_vocab;
        s->eos = info.eos;
        s->rows = calloc(o->max_rows, sizeof(*s->rows));
        s->logits = malloc(sizeof(float) * info.n_vocab * o->max_rows);
        s->ss = calloc(o->max_rows, sizeof(*s->ss));
        s->ids = calloc(o->max_rows, sizeof(*s->ids));
        s->len = calloc(o->max_rows, sizeof(*s->len));
        s->lg = calloc(o->max_rows, sizeof(*s->lg));
        s->all = calloc(o->max_rows, sizeof(*s->all));
    }
    if (!s || !s->rows || !s->logits || !s->ss || !s->ids || !s->len || !s->lg || !s->all) {
        if (s) free_arrays(s);
        free(s);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->progress, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->thread, NULL, run, s)) {
        snprintf(err, err_size, "cannot start the scheduler thread: %s", strerror(errno));
        free_arrays(s);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

void srv_sched_stop(srv_sched *s) {
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
}

void srv_sched_free(srv_sched *s) {
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->progress);
    free_arrays(s);
    free(s);
}

int srv_sched_submit(srv_sched *s, srv_job *const *jobs, size_t n) {
    pthread_mutex_lock(&s->lock);
    /* Room: the free rows, then the queue. */
    if (s->stopping || s->n_rows + s->n_queued + n > (size_t)s->o.max_rows + s->o.max_queue) {
        pthread_mutex_unlock(&s->lock);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        jobs[i]->link = NULL;
        if (s->queue_tail) s->queue_tail->link = jobs[i];
        else s->queue = jobs[i];
        s->queue_tail = jobs[i];
        s->n_queued++;
    }
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int srv_sched_wait(srv_sched *s, srv_job *job, uint32_t seen, int timeout_ms,
                   void (*copy)(void *ud, const srv_job *job), void *ud) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += timeout_ms / 1000;
    t.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->lock);
    while (!job->finish && job->n_steps <= seen)
        if (pthread_cond_timedwait(&s->progress, &s->lock, &t) == ETIMEDOUT) break;
    if (copy) copy(ud, job);
    const int ended = job->finish != NULL;
    pthread_mutex_unlock(&s->lock);
    return ended;
}

void srv_sched_cancel(srv_sched *s, srv_job *job) {
    pthread_mutex_lock(&s->lock);
    job->cancel = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
}

void srv_job_free(srv_sched *s, srv_job *job) {
    if (!job) return;
    if (s) {
        pthread_mutex_lock(&s->lock);
        /* A job leaves the rows only at the top of the loop after it ends. */
        while (!job->finish) pthread_cond_wait(&s->progress, &s->lock);
        int held = 1;
        while (held) {
            held = 0;
            for (uint32_t i = 0; i < s->n_rows; i++) held |= s->rows[i] == job;
            for (srv_job *q = s->queue; q; q = q->link) held |= q == job;
            if (held) pthread_cond_wait(&s->progress, &s->lock);
        }
        pthread_mutex_unlock(&s->lock);
    }
    free(job->prompt);
    free(job->steps);
    free(job->prompt_steps);
    free(job->text);
    free(job);
}

void srv_sched_load(srv_sched *s, uint32_t *rows, uint32_t *queued) {
    pthread_mutex_lock(&s->lock);
    *rows = s->n_rows;
    *queued = s->n_queued;
    pthread_mutex_unlock(&s->lock);
}
