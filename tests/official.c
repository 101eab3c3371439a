#include "official.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

char *off_path(const char *name) {
    char *p = tu_official(name);
    if (!p) fail_msg("the official oracle file %s is missing", name);
    return p;
}

void *off_read(const char *name, size_t bytes) {
    char *p = off_path(name);
    uint8_t *buf;
    size_t len;
    if (tu_read_file(p, &buf, &len)) fail_msg("cannot read %s", p);
    if (len != bytes) fail_msg("%s: %zu bytes, expected %zu", p, len, bytes);
    free(p);
    return buf;
}

int32_t *off_tokens(void) {
    char *p = off_path("tokens.txt");
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("cannot open %s", p);
    int32_t *t = malloc(sizeof(int32_t) * OFF_N_POS);
    uint32_t n = 0;
    int extra;
    while (n < OFF_N_POS && fscanf(f, "%d", &t[n]) == 1) n++;
    bool more = fscanf(f, "%d", &extra) == 1;
    fclose(f);
    if (n != OFF_N_POS || more) fail_msg("%s: expected exactly %d token ids", p, OFF_N_POS);
    free(p);
    return t;
}

/* "L<digit>" or "MTP" -> table index. */
static int layer_index(const char *s) {
    if (!strcmp(s, "MTP")) return OFF_SEL_MTP;
    if (s[0] == 'L' && s[1] >= '0' && s[1] <= '9' && !s[2] && s[1] - '0' < OFF_SEL_MTP)
        return s[1] - '0';
    return -1;
}

void off_sel_read(bool qat, off_sel *s) {
    const char *name = qat ? "selections.qat_on.txt" : "selections.qat_off.txt";
    char *p = off_path(name);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("cannot open %s", p);
    memset(s, 0, sizeof(*s));
    char line[1024];
    for (uint32_t ln = 1; fgets(line, sizeof(line), f); ln++) {
        if (line[0] == '#') continue;
        char kind, layer[8];
        unsigned pos, n;
        int used, at;
        if (sscanf(line, "%c %7s %u %u%n", &kind, layer, &pos, &n, &used) != 4 ||
            (kind != 'r' && kind != 'i') || layer_index(layer) < 0 || pos >= OFF_N_POS ||
            n > OFF_SEL_MAX)
            fail_msg("%s:%u: malformed line", p, ln);
        off_sel_row **table = kind == 'r' ? s->routing : s->indexer;
        int l = layer_index(layer);
        if (!table[l]) table[l] = calloc(OFF_N_POS, sizeof(off_sel_row));
        off_sel_row *r = &table[l][pos];
        if (r->present) fail_msg("%s:%u: a second row for %s %u", p, ln, layer, pos);
        r->present = true;
        r->n = n;
        for (unsigned i = 0; i < n; i++, used += at)
            if (sscanf(line + used, "%d%n", &r->id[i], &at) != 1) fail_msg("%s:%u: ids", p, ln);
        for (unsigned i = 0; kind == 'r' && i < n; i++, used += at)
            if (sscanf(line + used, "%lf%n", &r->w[i], &at) != 1) fail_msg("%s:%u: weights", p, ln);
        if (sscanf(line + used, " %*s") != EOF) fail_msg("%s:%u: trailing text", p, ln);
    }
    fclose(f);
    free(p);
}

void off_sel_free(off_sel *s) {
    for (int l = 0; l < OFF_SEL_LAYERS; l++) {
        free(s->routing[l]);
        free(s->indexer[l]);
    }
}

bool off_contains(const int32_t *v, uint32_t n, int32_t id) {
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == id) return true;
    return false;
}
