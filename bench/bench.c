/* ds4ref-bench: throughput of the reference forward pass.
 *
 * Default mode, like ds4-bench: a fixed synthetic token sequence is prefilled
 * to each context frontier (only the newest interval is timed), then
 * --gen-tokens tokens are decoded greedily one at a time (timed), and the
 * session is truncated back to the frontier before the next one.  One CSV row
 * per frontier:
 *
 *   ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,
 *   rss_bytes,weight_bytes_per_token,gen_gbps,model_rss_bytes,threads,kernels,
 *   decode_threads,prefill_threads
 *
 * weight_bytes_per_token is what one decode step must read: every matrix of
 * the trunk and the head once, the n_expert_used routed experts of each layer
 * and one embedding row.  gen_gbps = weight_bytes_per_token * gen_tps, the
 * memory bandwidth decode would need if nothing stayed in cache.
 * model_rss_bytes is how much of the mapped model file the process has
 * touched (Linux /proc/self/smaps; 0 elsewhere).  threads is OpenMP's count;
 * decode_threads and prefill_threads are what passes of each kind ran with:
 * -t's count, or, without it on a machine of more than 16 threads, the count
 * the engine found fastest so far (ref/forward/threads.h; 0 when no pass of
 * that kind was measured).
 *
 * --layers also times one decode step layer by layer (through the forward
 * pass's debug taps; a single token has no parallel loop a tap would
 * serialize), counts each layer's fork/joins, times each kind of parallel
 * region of the step (by the function the compiler outlined for it, such
 * as attend._omp_fn.0: where a step's threads wait), and prints the
 * estimate for the real 43-layer model, whose layers are 2 window-only,
 * 21 ratio-4 and 20 ratio-128 (ds4's layout).
 *
 * --kernels measures the matrix kernels alone: one 4096 x 4096 matrix of
 * each block type (--kernel-rows changes the 4096 rows), T = 1, 2, 4, 8,
 * 16 and 64 tokens: decode's one token; a verify batch, a few rows of a
 * batch or a routed expert's share of a prefill pass (2 take the fused
 * kernels on AVX-512, more the blocked ones); one tile of the blocked kernel, and four
 * tiles, as a prefill pass cuts its tokens (each thread's jobs then share
 * their weights in cache).
 *
 * Unlike the other programs, which use only the public API (ds4ref.h), this
 * one includes internal headers: it times the kernels, the engine and the
 * KV state that the public API deliberately hides. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>
#include <sys/resource.h>

#include "base/version.h"
#include "ref/decode/sample.h"
#include "ref/decode/session.h"
#include "ref/forward/forward.h"
#include "ref/ckpt/checkpoint.h"
#include "ref/model/modelopen.h"
#include "ref/model/model.h"
#include "quant/dot.h"
#include "quant/types.h"
#include "../programs/models.h"
#include "../programs/wait_policy.h"

typedef struct bench_cfg {
    const char *model;
    const char *csv;
    uint32_t frontiers[16];
    uint32_t n_frontiers;
    uint32_t gen;
    uint32_t ctx;
    uint32_t chunk;
    int threads;
    int header;
    int layers;
    int fma;
    int kernels;
    uint32_t kernel_rows;
    int qat;
    int warm;
} bench_cfg;

static double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ds4ref-bench [-m MODEL] [options]\n"
            "       ds4ref-bench --kernels [-t N]\n"
            "       ds4ref-bench --fma [-t N]\n"
            "\n"
            "  -m, --model FILE     GGUF model (default models/tiny.gguf, the synthetic one\n"
            "                       make builds; or a fullwidth model from ds4ref-mkmodel\n"
            "                       --config fullwidth), or a checkpoint's folder\n"
            "  -p, --prompt LIST    context frontiers, comma separated (default 64)\n"
            "  -n, --gen-tokens N   greedy decode tokens per frontier (default 16)\n"
            "  -c, --ctx N          allocated context (default: last frontier + gen + 1)\n"
            "  --chunk N            tokens per forward pass (default 256)\n"
            "  -t, --threads N      OpenMP threads (default: OMP_NUM_THREADS, or chosen\n"
            "                       by measuring passes on machines of more than 16)\n"
            "  --qat on|off         default on\n"
            "  --layers             time one decode step per layer, with its fork/joins\n"
            "                       and each parallel region's time (to stderr)\n"
            "  --warm               read the whole model once before timing (as a\n"
            "                       program that loads its weights does)\n"
            "  --kernels            matrix kernel throughput per block type\n"
            "  --fma                the machine's peak rate of double FMAs (the kernels'\n"
            "                       vector width), billions a second, to set --kernels against\n"
            "  --kernel-rows N      rows of the --kernels matrices (default 4096; 256\n"
            "                       keeps them in L2: compute without memory)\n"
            "  --no-header          omit the CSV header\n"
            "  --csv FILE           write the CSV there instead of stdout\n"
            "  -h, --help, --version\n");
}

static int parse_u32(const char *s, uint32_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || v == 0 || v > 0x7fffffffull) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_list(const char *s, bench_cfg *c) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    c->n_frontiers = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (c->n_frontiers == 16 || parse_u32(tok, &c->frontiers[c->n_frontiers])) return -1;
        if (c->n_frontiers && c->frontiers[c->n_frontiers] <= c->frontiers[c->n_frontiers - 1])
            return -1;
        c->n_frontiers++;
    }
    return c->n_frontiers ? 0 : -1;
}

/* The options followed by a value. */
static bool takes_value(const char *a) {
    static const char *const names[] = {"-m", "--model", "--csv", "-p", "--prompt", "--qat", "-n",
                                        "--gen-tokens", "-c", "--ctx", "--chunk", "--kernel-rows",
                                        "-t", "--threads"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(a, names[i])) return true;
    return false;
}

static int parse_args(int argc, char **argv, bench_cfg *c) {
    memset(c, 0, sizeof(*c));
    c->frontiers[0] = 64;
    c->n_frontiers = 1;
    c->gen = 16;
    c->chunk = 256;
    c->header = 1;
    c->qat = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            printf("ds4ref-bench %s (kernels %s)\n", DS4REF_VERSION, ds4_dot_kernels());
            exit(0);
        }
        if (!strcmp(a, "--layers")) { c->layers = 1; continue; }
        if (!strcmp(a, "--warm")) { c->warm = 1; continue; }
        if (!strcmp(a, "--kernels")) { c->kernels = 1; continue; }
        if (!strcmp(a, "--fma")) { c->fma = c->kernels = 1; continue; }
        if (!strcmp(a, "--no-header")) { c->header = 0; continue; }
        if (!takes_value(a)) {
            fprintf(stderr, "ds4ref-bench: unknown option %s (see --help)\n", a);
            return -1;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        uint32_t u;
        if (!v) {
            fprintf(stderr, "ds4ref-bench: %s needs a value (see --help)\n", a);
            return -1;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) c->model = v;
        else if (!strcmp(a, "--csv")) c->csv = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (parse_list(v, c)) {
                fprintf(stderr, "ds4ref-bench: --prompt expects increasing positive integers, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--qat")) {
            if (strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr, "ds4ref-bench: --qat expects on or off, got '%s'\n", v);
                return -1;
            }
            c->qat = !strcmp(v, "on");
        } else if (parse_u32(v, &u)) {
            fprintf(stderr, "ds4ref-bench: bad option or value: %s %s\n", a, v);
            return -1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--gen-tokens")) c->gen = u;
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) c->ctx = u;
        else if (!strcmp(a, "--chunk")) c->chunk = u;
        else if (!strcmp(a, "--kernel-rows")) c->kernel_rows = u;
        else c->threads = (int)u;
    }
    if (!c->model && !c->kernels) {
        /* As the other programs: the synthetic model make builds. */
        static char path[PATH_MAX + 64];
        char where[3 * PATH_MAX];
        if (!ds4ref_find_model("tiny.gguf", path, sizeof(path), where, sizeof(where))) {
            fprintf(stderr, "ds4ref-bench: no model: give -m MODEL (or --kernels); the synthetic "
                            "tiny.gguf that make builds is not in %s\n", where);
            return -1;
        }
        fprintf(stderr, "ds4ref-bench: model %s (the synthetic tiny model)\n", path);
        c->model = path;
    }
    return 0;
}

/* ---- memory ------------------------------------------------------------ */

/* Resident set size now (Linux), else the peak getrusage reports. */
static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        unsigned long long size, res;
        int ok = fscanf(f, "%llu %llu", &size, &res) == 2;
        fclose(f);
        if (ok) return res * 4096ull;
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (uint64_t)ru.ru_maxrss * 1024ull;
}

/* Resident bytes of the mappings of `path` (what the process touched of the
 * model file), from /proc/self/smaps; 0 where that does not exist. */
static uint64_t mapped_rss(const char *path) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char *real = realpath(path, NULL);
    char line[4096];
    int in = 0;
    uint64_t total = 0;
    const size_t rn = real ? strlen(real) : 0;
    while (real && fgets(line, sizeof(line), f)) {
        unsigned long long kb, lo, hi;
        if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2) {   /* a mapping's header line */
            size_t n = strlen(line);
            while (n && (line[n - 1] == '\n' || line[n - 1] == ' ')) line[--n] = 0;
            /* The file itself, or a file of the folder (a checkpoint's shards). */
            const char *mp = strchr(line, '/');
            in = mp && !strncmp(mp, real, rn) && (mp[rn] == 0 || mp[rn] == '/');
        } else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            total += kb * 1024ull;
        }
    }
    free(real);
    fclose(f);
    return total;
}

/* Every page of the mapped file (or of a checkpoint's shards) read once,
 * so that page faults are not timed.  Returns a sum the compiler cannot
 * drop. */
static uint64_t touch(const uint8_t *map, uint64_t size) {
    uint64_t sum = 0;
    for (uint64_t off = 0; off < size; off += 4096) sum += map[off];
    return sum;
}

static uint64_t touch_pages(const ds4_model *m) {
    if (!m->ckpt) return touch(m->file.map, m->file.size);
    uint64_t sum = 0;
    for (size_t i = 0; i < m->ckpt->n_shards; i++)
        sum += touch(m->ckpt->shards[i].map, m->ckpt->shards[i].size);
    return sum;
}

/* ---- weights one decode step reads --------------------------------------- */

/* A matrix's bytes, with its block scales (FP8, FP4); an expert's for the
 * experts' matrices. */
static uint64_t mat_bytes(const ds4_mat *m) {
    if (!m->data && !m->parts) return 0;
    uint64_t b = m->rows * m->row_bytes;
    const ds4_type_info *t = ds4_types_info(m->type);
    if (t && t->scale_rows) b += (m->rows + t->scale_rows - 1) / t->scale_rows * m->scale_stride;
    return b;
}

static uint64_t layer_bytes(const ds4_config *c, const ds4_layer *L) {
    const ds4_mat *dense[] = {&L->hc_attn_fn, &L->hc_ffn_fn, &L->q_a,     &L->q_b,
                              &L->kv,         &L->out_a,     &L->out_b,   &L->comp_kv,
                              &L->comp_gate,  &L->idx_q_b,   &L->idx_proj, &L->idx_comp_kv,
                              &L->idx_comp_gate, &L->gate_inp, &L->sh_gate, &L->sh_up,
                              &L->sh_down};
    uint64_t b = 0;
    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++) b += mat_bytes(dense[i]);
    /* One APE row per compressor and position. */
    if (L->comp_ape.data) b += L->comp_ape.row_bytes;
    if (L->idx_comp_ape.data) b += L->idx_comp_ape.row_bytes;
    const ds4_mat *exps[] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int i = 0; i < 3; i++) b += mat_bytes(exps[i]) * c->n_expert_used;
    return b;
}

static uint64_t decode_bytes(const ds4_model *m) {
    uint64_t b = m->token_embd.row_bytes + mat_bytes(&m->output) + mat_bytes(&m->output_hc_fn);
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) b += layer_bytes(&m->cfg, &m->layers[l]);
    return b;
}

/* ---- fork/joins ----------------------------------------------------------- */

/* How many parallel regions of more than one thread a step starts, and how
 * long each kind took.  libgomp starts every region through GOMP_parallel (a
 * region whose `if` clause is false asks for one thread), so this program
 * defines that function, counts, times, and calls libgomp's; the library is
 * linked in statically, so its regions come here too.  Other OpenMP runtimes
 * (clang's libomp) start regions elsewhere: there the count is -1 and no
 * region is timed.  A region of the default count is counted even where that
 * count is one thread. */
#if defined(__GNUC__) && !defined(__clang__)
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_ulong fork_joins;

/* The outermost regions' time by the function GCC outlined for each (such
 * as attend._omp_fn.0), while region_timing is on. */
enum { MAX_REGIONS = 128 };
typedef struct region_time {
    void (*fn)(void *);
    unsigned long calls, threaded;   /* calls, and those of more than one thread */
    double sec;
} region_time;
static region_time regions[MAX_REGIONS];
static bool region_timing;

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
    static gomp_parallel_fn libgomp;
    if (!libgomp) *(void **)&libgomp = dlsym(RTLD_NEXT, "GOMP_parallel");
    if (!libgomp) {   /* libgomp linked in statically: nothing to pass on to */
        fprintf(stderr, "ds4ref-bench: cannot find libgomp's GOMP_parallel: %s\n", dlerror());
        abort();
    }
    if (num_threads != 1) atomic_fetch_add(&fork_joins, 1);
    /* Only the outermost regions, which the calling thread starts one at a
     * time: nested ones run inside another region's time. */
    if (!region_timing || omp_get_level() != 0) {
        libgomp(fn, data, num_threads, flags);
        return;
    }
    double t0 = now_sec();
    libgomp(fn, data, num_threads, flags);
    double sec = now_sec() - t0;
    for (int i = 0; i < MAX_REGIONS; i++) {
        if (regions[i].fn && regions[i].fn != fn) continue;
        regions[i].fn = fn;
        regions[i].calls++;
        /* 0 asks for the default count, which may itself be one thread. */
        regions[i].threaded += (num_threads ? num_threads : (unsigned)omp_get_max_threads()) > 1;
        regions[i].sec += sec;
        break;
    }
}

static long fork_join_count(void) { return (long)atomic_load(&fork_joins); }

/* Does [off, off + len) lie within a file of `size` bytes? */
static bool in_file(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

/* The name of this program's function fn, from its ELF symbol table: the
 * outlined region bodies are local symbols, which dladdr cannot name.  "?"
 * where it cannot say (a stripped program, a function of a shared library).
 * The headers are copied out, since the file gives no alignment. */
static void symbol_name(void (*fn)(void *), char *out, size_t n) {
    snprintf(out, n, "?");
    Dl_info info;
    struct link_map *lm = NULL;
    void *p = *(void **)&fn;
    /* The program's own link map has an empty name; a library's has its path. */
    if (!dladdr1(p, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm || (lm->l_name && lm->l_name[0])) return;
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) || (uint64_t)st.st_size < sizeof(Elf64_Ehdr)) {
        close(fd);
        return;
    }
    const uint64_t size = (uint64_t)st.st_size;
    const unsigned char *f = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return;
    Elf64_Ehdr eh;
    memcpy(&eh, f, sizeof(eh));
    /* Symbol values are addresses before the load offset (l_addr: 0 for a
     * program that is not position-independent). */
    const uint64_t addr = (uint64_t)(uintptr_t)p - (uint64_t)lm->l_addr;
    bool searching = !memcmp(eh.e_ident, ELFMAG, SELFMAG) && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
                     eh.e_shentsize == sizeof(Elf64_Shdr) &&
                     in_file(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr), size);
    for (unsigned i = 0; searching && i < eh.e_shnum; i++) {
        Elf64_Shdr sh, str;
        memcpy(&sh, f + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (sh.sh_type != SHT_SYMTAB || sh.sh_link >= eh.e_shnum) continue;
        memcpy(&str, f + eh.e_shoff + sh.sh_link * sizeof(str), sizeof(str));
        if (!in_file(sh.sh_offset, sh.sh_size, size) || !in_file(str.sh_offset, str.sh_size, size))
            continue;
        for (uint64_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); k++) {
            Elf64_Sym sym;
            memcpy(&sym, f + sh.sh_offset + k * sizeof(sym), sizeof(sym));
            if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || addr < sym.st_value ||
                addr - sym.st_value >= sym.st_size || sym.st_name >= str.sh_size)
                continue;
            /* The name ends at its NUL or at the end of the table. */
            const char *name = (const char *)f + str.sh_offset + sym.st_name;
            size_t len = strnlen(name, (size_t)(str.sh_size - sym.st_name));
            snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), name);
            searching = false;
            break;
        }
    }
    munmap((void *)f, (size_t)size);
}

static int by_time(const void *a, const void *b) {
    double x = ((const region_time *)a)->sec, y = ((const region_time *)b)->sec;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The regions of the step just timed, the longest first. */
static void print_regions(void) {
    int n = 0;
    while (n < MAX_REGIONS && regions[n].fn) n++;
    qsort(regions, (size_t)n, sizeof(regions[0]), by_time);
    fprintf(stderr, "region,calls,threaded_calls,ms,mean_us\n");
    for (int i = 0; i < n; i++) {
        char name[128];
        symbol_name(regions[i].fn, name, sizeof(name));
        fprintf(stderr, "%s,%lu,%lu,%.3f,%.1f\n", name, regions[i].calls, regions[i].threaded,
                regions[i].sec * 1e3, regions[i].sec / (double)regions[i].calls * 1e6);
    }
    memset(regions, 0, sizeof(regions));
}

static void time_regions(bool on) { region_timing = on; }
#else
static long fork_join_count(void) { return -1; }
static void print_regions(void) {}
static void time_regions(bool on) { (void)on; }
#endif

/* ---- per-layer timing ---------------------------------------------------- */

typedef struct layer_clock {
    double t0;
    double attn_end[256];
    double ffn_end[256];
    long attn_forks[256];   /* fork_join_count() at the same moments */
    long ffn_forks[256];
    uint32_t n_layer;
} layer_clock;

static void on_tap(void *ud, const ds4_tap *t) {
    layer_clock *lc = ud;
    if (t->layer >= lc->n_layer) return;
    if (!strcmp(t->name, "hc_attn")) {
        lc->attn_end[t->layer] = now_sec();
        lc->attn_forks[t->layer] = fork_join_count();
    } else if (!strcmp(t->name, "hc_ffn")) {
        lc->ffn_end[t->layer] = now_sec();
        lc->ffn_forks[t->layer] = fork_join_count();
    }
}

/* DeepSeek V4 Flash's layer size as a decoded token meets it (the width,
 * the experts it runs and theirs), which the 43-layer estimate assumes. */
enum { REAL_N_EMBD = 4096, REAL_N_FF = 2048, REAL_N_USED = 6 };

/* Times one decode step and prints per-layer times, fork/joins (-1 where
 * they cannot be counted) and the 43-layer estimate (2 x ratio 0, 21 x
 * ratio 4, 20 x ratio 128, then the head). */
static int time_layers(ds4_session *s, ds4_engine *e, const ds4_model *m, int32_t tok,
                       ds4err *err) {
    const ds4_config *c = &m->cfg;
    layer_clock lc = {0};
    lc.n_layer = c->n_layer < 256 ? c->n_layer : 256;
    e->tap = on_tap;
    e->tap_ud = &lc;
    long forks0 = fork_join_count(), prev_forks = forks0;
    time_regions(true);
    lc.t0 = now_sec();
    int rc = ds4_session_eval(s, &tok, 1, NULL, NULL, err);
    double t_end = now_sec();
    time_regions(false);
    long forks_end = fork_join_count();
    e->tap = NULL;
    e->tap_ud = NULL;
    if (rc) return -1;
    double sum[3] = {0}, cnt[3] = {0}, prev = lc.t0;
    bool counted = forks0 >= 0;
    fprintf(stderr, "layer,ratio,attn_ms,ffn_ms,total_ms,weight_mb,attn_fork_joins,ffn_fork_joins\n");
    for (uint32_t l = 0; l < lc.n_layer; l++) {
        double a = lc.attn_end[l] - prev, f = lc.ffn_end[l] - lc.attn_end[l];
        uint32_t r = c->ratio[l];
        int k = r == 0 ? 0 : r == 4 ? 1 : 2;
        sum[k] += a + f;
        cnt[k] += 1;
        fprintf(stderr, "%u,%u,%.3f,%.3f,%.3f,%.1f,%ld,%ld\n", l, r, a * 1e3, f * 1e3,
                (a + f) * 1e3, (double)layer_bytes(c, &m->layers[l]) / 1e6,
                counted ? lc.attn_forks[l] - prev_forks : -1,
                counted ? lc.ffn_forks[l] - lc.attn_forks[l] : -1);
        prev = lc.ffn_end[l];
        prev_forks = lc.ffn_forks[l];
    }
    double head = t_end - prev;
    fprintf(stderr, "head,,,,%.3f,%.1f,,%ld\n", head * 1e3,
            (double)(mat_bytes(&m->output) + mat_bytes(&m->output_hc_fn)) / 1e6,
            counted ? forks_end - prev_forks : -1);
    fprintf(stderr, "fork_joins_per_step: %ld\n", counted ? forks_end - forks0 : -1);
    print_regions();
    /* The estimate stands for the real model only when its layers are the
     * real ones' size (the fullwidth and fulldepth synthetics); on a tiny
     * model it would read like a figure for DeepSeek V4 Flash. */
    if (c->n_embd != REAL_N_EMBD || c->n_ff != REAL_N_FF || c->n_expert_used != REAL_N_USED) {
        fprintf(stderr, "estimate_43_layers: none (n_embd %u, expert width %u, %u experts a "
                        "token: not the real model's %d, %d and %d; use a fullwidth model)\n",
                c->n_embd, c->n_ff, c->n_expert_used, REAL_N_EMBD, REAL_N_FF, REAL_N_USED);
    } else if (cnt[0] && cnt[1] && cnt[2]) {
        double est = 2 * sum[0] / cnt[0] + 21 * sum[1] / cnt[1] + 20 * sum[2] / cnt[2] + head;
        fprintf(stderr, "estimate_43_layers: %.1f ms/token = %.2f tokens/s "
                        "(2 x %.2f + 21 x %.2f + 20 x %.2f + head %.2f ms)\n",
                est * 1e3, 1.0 / est, sum[0] / cnt[0] * 1e3, sum[1] / cnt[1] * 1e3,
                sum[2] / cnt[2] * 1e3, head * 1e3);
    }
    return 0;
}

/* ---- the frontier walk -------------------------------------------------- */

/* Token i of the benchmark sequence: a fixed pseudo-random id (splitmix64). */
static int32_t bench_token(uint64_t i, uint32_t n_vocab) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (int32_t)(z % n_vocab);
}

/* The count passes of a class (0: one token, 2: prefill) ran with: the fastest measured when the
 * engine chooses (0 before any was measured), else OpenMP's. */
static int chosen_threads(const ds4_engine *e, int cls) {
    return ds4_threads_tuning(&e->threads) ? ds4_threads_best(&e->threads, cls)
                                           : omp_get_max_threads();
}

static int run_model(const bench_cfg *cfg, FILE *out, ds4err *err) {
    ds4_model m;
    /* A checkpoint under the official numerics: with --qat on its FP8/FP4
     * linears take FP8 inputs and write BF16, as ds4ref's own do. */
    if (ds4_modelopen(&m, cfg->model, NULL, NULL, 0, cfg->qat != 0, err)) return -1;
    const ds4_config *c = &m.cfg;
    if (cfg->warm && touch_pages(&m) == UINT64_MAX) fprintf(stderr, " ");
    uint32_t last = cfg->frontiers[cfg->n_frontiers - 1];
    uint32_t ctx = cfg->ctx ? cfg->ctx : last + cfg->gen + 2;
    int rc = -1;
    int32_t *toks = malloc(sizeof(int32_t) * last);
    ds4_engine e;
    ds4_session s;
    int have_e = 0, have_s = 0;
    if (!toks) {
        ds4_err_set(err, DS4_E_NOMEM, "out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < last; i++) toks[i] = bench_token(i, c->n_vocab);
    ds4_fwd_opts fo = {.qat = cfg->qat != 0};
    if (ds4_engine_init(&e, &m, &fo, cfg->chunk, err)) goto done;
    have_e = 1;
    ds4_session_opts so = {.ctx = ctx, .chunk = cfg->chunk, .rollback = cfg->gen + 2};
    if (ds4_session_init(&s, &e, &so, err)) goto done;
    have_s = 1;
    const uint64_t wbytes = decode_bytes(&m);
    if (cfg->header)
        fprintf(out, "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,"
                     "rss_bytes,weight_bytes_per_token,gen_gbps,model_rss_bytes,threads,kernels,"
                     "decode_threads,prefill_threads\n");
    uint32_t prev = 0;
    for (uint32_t f = 0; f < cfg->n_frontiers; f++) {
        uint32_t fr = cfg->frontiers[f];
        double t0 = now_sec();
        if (ds4_session_eval(&s, toks + prev, fr - prev, NULL, NULL, err)) goto done;
        double t1 = now_sec();
        uint32_t done_gen = 0;
        for (; done_gen < cfg->gen; done_gen++) {
            int32_t tok = ds4_sample_argmax(s.logits, c->n_vocab);
            if (ds4_session_eval(&s, &tok, 1, NULL, NULL, err)) goto done;
        }
        double t2 = now_sec();
        double gen_tps = done_gen ? done_gen / (t2 - t1) : 0;
        fprintf(out, "%u,%u,%.2f,%u,%.3f,%llu,%llu,%llu,%.2f,%llu,%d,%s,%d,%d\n", fr, fr - prev,
                (fr - prev) / (t1 - t0), done_gen, gen_tps, (unsigned long long)s.kv.bytes,
                (unsigned long long)rss_bytes(), (unsigned long long)wbytes,
                gen_tps * (double)wbytes / 1e9, (unsigned long long)mapped_rss(cfg->model),
                omp_get_max_threads(), ds4_dot_kernels(), chosen_threads(&e, 0),
                chosen_threads(&e, 2));
        fflush(out);
        if (cfg->layers && f == cfg->n_frontiers - 1 &&
            time_layers(&s, &e, &m, ds4_sample_argmax(s.logits, c->n_vocab), err))
            goto done;
        if (ds4_session_truncate(&s, fr, err)) goto done;
        prev = fr;
    }
    rc = 0;
done:
    if (have_s) ds4_session_free(&s);
    if (have_e) ds4_engine_free(&e);
    free(toks);
    ds4_model_close(&m);
    return rc;
}

/* ---- kernels -------------------------------------------------------------- */

static uint64_t kr_state = 0x243F6A8885A308D3ull;

static uint64_t kr_next(void) {
    uint64_t z = (kr_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random blocks with moderate, finite scales (as in test_dot). */
static void fill_blocks(uint32_t type, uint8_t *p, uint64_t n) {
    const ds4_type_info *t = ds4_types_info(type);
    uint64_t bytes = ds4_types_row_bytes(type, n);
    for (uint64_t i = 0; i < bytes; i++) p[i] = (uint8_t)kr_next();
    for (uint64_t b = 0; b < n / t->blck; b++) {
        uint8_t *k = p + b * t->bytes;
        switch (type) {
        case DS4_TYPE_F32: k[3] = (uint8_t)((k[3] & 0x80) | 0x3c); break;
        case DS4_TYPE_F16: k[1] = (uint8_t)((k[1] & 0x83) | 0x30); break;
        case DS4_TYPE_BF16: k[1] = (uint8_t)((k[1] & 0x80) | 0x3e); break;
        case DS4_TYPE_Q8_0:
        case DS4_TYPE_IQ2_XXS: k[1] = (uint8_t)((k[1] & 0x83) | 0x20); break;
        case DS4_TYPE_Q2_K: k[81] = (uint8_t)((k[81] & 0x83) | 0x20); k[83] = 0x1c; break;
        case DS4_TYPE_Q4_K: k[1] = (uint8_t)((k[1] & 0x83) | 0x20); k[3] = 0x1c; break;
        case DS4_TYPE_FP8_B128: if ((k[0] & 0x7f) == 0x7f) k[0] ^= 1; break;   /* no NaN */
        default: break;
        }
    }
}

static int run_kernels(FILE *out, int header, uint64_t rows) {
    static const uint32_t types[] = {DS4_TYPE_Q8_0, DS4_TYPE_IQ2_XXS, DS4_TYPE_Q2_K,
                                     DS4_TYPE_Q4_K, DS4_TYPE_F16, DS4_TYPE_BF16, DS4_TYPE_F32,
                                     DS4_TYPE_FP8_B128, DS4_TYPE_FP4_B32};
    const uint64_t cols = 4096;
    static const int Ts[] = {1, 2, 4, 8, 16, 64};
    const int nT = (int)(sizeof(Ts) / sizeof(Ts[0])), Tmax = Ts[nT - 1];
    float *x = malloc(sizeof(float) * cols * Tmax), *y = malloc(sizeof(float) * rows * Tmax);
    if (!x || !y) return -1;
    for (uint64_t i = 0; i < cols * Tmax; i++) x[i] = (float)((double)(kr_next() >> 11) * 0x1p-52 - 1.0);
    if (header) fprintf(out, "type,rows,cols,T,threads,kernels,ms,weight_gbps,gmacs\n");
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint64_t rb = ds4_types_row_bytes(types[ti], cols);
        uint8_t *data = malloc(rb * rows);
        /* The checkpoint's types: E8M0 scales near 2^-7, as its weights'. */
        uint8_t *scale = malloc(rows * (cols / 32));
        if (!data || !scale) return -1;
        fill_blocks(types[ti], data, cols * rows);
        for (uint64_t i = 0; i < rows * (cols / 32); i++) scale[i] = (uint8_t)(118 + kr_next() % 4);
        ds4_mat W = {.type = types[ti], .cols = cols, .rows = rows, .row_bytes = rb, .data = data};
        if (ds4_types_info(types[ti])->scale_cols) W = ds4_dot_scaled(types[ti], cols, rows, data, scale, 0);
        for (int k = 0; k < nT; k++) {
            int T = Ts[k], reps = 0;
            ds4_dot_matmul(&W, x, cols, T, y, rows);   /* warm up: pages, caches, threads */
            double t0 = now_sec(), t;
            do {
                ds4_dot_matmul(&W, x, cols, T, y, rows);
                reps++;
                t = now_sec() - t0;
            } while (t < 0.3);
            double sec = t / reps;
            fprintf(out, "%s,%llu,%llu,%d,%d,%s,%.3f,%.2f,%.2f\n", ds4_types_name(types[ti]),
                    (unsigned long long)rows, (unsigned long long)cols, T, omp_get_max_threads(),
                    ds4_dot_kernels(), sec * 1e3, (double)(rb * rows) / sec / 1e9,
                    (double)rows * (double)cols * T / sec / 1e9);
            fflush(out);
        }
        free(data);
        free(scale);
    }
    free(x);
    free(y);
    return 0;
}

/* ---- the machine's FMA peak ------------------------------------------------ */

/* What the kernels' multiply-adds are measured against: every thread runs
 * independent chains of double fused multiply-adds in the widest vectors the
 * kernels in use have, for long enough that nothing else counts.  Sixteen
 * chains per thread cover the latency of two FMA units. */
enum { FMA_CHAINS = 16 };

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static double fma_avx512(uint64_t iters) {
    __m512d a[FMA_CHAINS];
    const __m512d m = _mm512_set1_pd(0.9999999), c = _mm512_set1_pd(1e-7);
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_set1_pd(i);
    for (uint64_t n = 0; n < iters; n++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = _mm512_fmadd_pd(a[i], m, c);
    double s = 0;
    for (int i = 0; i < FMA_CHAINS; i++) s += _mm512_reduce_add_pd(a[i]);
    return s;
}

__attribute__((target("avx2,fma"))) static double fma_avx2(uint64_t iters) {
    __m256d a[FMA_CHAINS / 2], b[FMA_CHAINS / 2];   /* 12 of 16 registers, with m and c */
    const __m256d m = _mm256_set1_pd(0.9999999), c = _mm256_set1_pd(1e-7);
    for (int i = 0; i < FMA_CHAINS / 2; i++) a[i] = b[i] = _mm256_set1_pd(i);
    for (uint64_t n = 0; n < iters; n++)
        for (int i = 0; i < FMA_CHAINS / 2 - 2; i++) {
            a[i] = _mm256_fmadd_pd(a[i], m, c);
            b[i] = _mm256_fmadd_pd(b[i], m, c);
        }
    double s = 0, v[4];
    for (int i = 0; i < FMA_CHAINS / 2; i++) {
        _mm256_storeu_pd(v, _mm256_add_pd(a[i], b[i]));
        s += v[0] + v[1] + v[2] + v[3];
    }
    return s;
}
#endif

static double fma_scalar(uint64_t iters) {
    double a[FMA_CHAINS];
    for (int i = 0; i < FMA_CHAINS; i++) a[i] = i;
    for (uint64_t n = 0; n < iters; n++)
        for (int i = 0; i < FMA_CHAINS; i++) a[i] = fma(a[i], 0.9999999, 1e-7);
    double s = 0;
    for (int i = 0; i < FMA_CHAINS; i++) s += a[i];
    return s;
}

/* Double FMAs one call of run(iters) does, per iteration. */
static int fma_lanes(const char *kern) {
#if defined(__x86_64__)
    if (!strcmp(kern, "avx512")) return FMA_CHAINS * 8;
    if (!strcmp(kern, "avx2")) return (FMA_CHAINS - 4) * 4;
#endif
    return FMA_CHAINS;
}

static double fma_run(const char *kern, uint64_t iters) {
#if defined(__x86_64__)
    if (!strcmp(kern, "avx512")) return fma_avx512(iters);
    if (!strcmp(kern, "avx2")) return fma_avx2(iters);
#endif
    return fma_scalar(iters);
}

static int run_fma(FILE *out, int header) {
    const char *kern = ds4_dot_kernels();
    volatile double sink = 0;
    uint64_t iters = 1u << 16;
    double sec;
    for (;;) {   /* long enough: 0.5 s on every thread */
        double t0 = now_sec();
        #pragma omp parallel
        {
            double s = fma_run(kern, iters);
            if (s == 0.123) sink = s;
        }
        sec = now_sec() - t0;
        if (sec >= 0.5) break;
        iters *= 2;
    }
    double gfma = (double)omp_get_max_threads() * (double)iters * fma_lanes(kern) / sec / 1e9;
    if (header) fprintf(out, "threads,kernels,gfma_per_s,gfma_per_s_per_thread\n");
    fprintf(out, "%d,%s,%.1f,%.2f\n", omp_get_max_threads(), kern, gfma,
            gfma / omp_get_max_threads());
    (void)sink;
    return 0;
}

int main(int argc, char **argv) {
    ds4ref_wait_policy(argv);
    bench_cfg cfg;
    if (parse_args(argc, argv, &cfg)) return 2;
    if (cfg.threads) ds4_threads_fix(cfg.threads);
    FILE *out = stdout;
    if (cfg.csv && !(out = fopen(cfg.csv, "w"))) {
        perror(cfg.csv);
        return 1;
    }
    ds4err err = {0};
    int rc = cfg.fma       ? run_fma(out, cfg.header)
             : cfg.kernels ? run_kernels(out, cfg.header, cfg.kernel_rows ? cfg.kernel_rows : 4096)
                           : run_model(&cfg, out, &err);
    if (out != stdout) fclose(out);
    if (rc) {
        fprintf(stderr, "ds4ref-bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        return err.code ? err.code : 1;
    }
    return 0;
}
