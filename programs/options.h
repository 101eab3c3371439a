/* Command-line options looked up in a table, for the programs whose every
 * argument is an option (ds4ref, ds4ref-mkmodel).
 *
 * Looking the name up before taking a value is what tells "--bogus" (not an
 * option) from "--ctx" at the end of the line (an option without its value):
 * a program that takes the next argument first reports both as a missing
 * value.  Included by each program's main file. */
#ifndef DS4REF_OPTIONS_H
#define DS4REF_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct ds4ref_option {
    const char *name;          /* "-m", "--model", ... */
    int id;                    /* the program's own code for it */
    bool value;                /* followed by a value */
} ds4ref_option;

/* The option argv[*i] names, from table[0..n): its id, with *value set to
 * its value (and *i moved past it) when it takes one.  -1, after one line on
 * stderr, when the name is unknown or the value is missing. */
static int ds4ref_option_next(const char *prog, const ds4ref_option *table, size_t n, int argc,
                              char **argv, int *i, const char **value) {
    const char *a = argv[*i];
    *value = NULL;
    for (size_t k = 0; k < n; k++) {
        if (strcmp(a, table[k].name)) continue;
        if (!table[k].value) return table[k].id;
        if (*i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, a);
            return -1;
        }
        *value = argv[++*i];
        return table[k].id;
    }
    fprintf(stderr, "%s: unknown option %s (see --help)\n", prog, a);
    return -1;
}

#endif
