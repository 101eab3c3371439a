/* The ds4ref version: what `--version` prints and every golden records.
 * The Makefile reads it from here for ds4ref.pc. */
#ifndef DS4_VERSION_H
#define DS4_VERSION_H

#define DS4REF_VERSION "0.1.0"

#endif
