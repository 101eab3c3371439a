/* Errors at the public API boundary: every ds4ref_* function turns the
 * internal ds4err it got into the caller's ds4ref_error (which may be NULL)
 * and returns the code.  The DS4REF_E_* values are the DS4_E_* codes. */
#ifndef DS4_APIERR_H
#define DS4_APIERR_H

#include <stdio.h>

#include "base/err.h"
#include "ds4ref.h"
#include "ref/text/chat.h"

#define DS4_SAME_CODE(x) _Static_assert((int)DS4REF_##x == (int)DS4_##x, #x " differs")
DS4_SAME_CODE(E_ARG);
DS4_SAME_CODE(E_IO);
DS4_SAME_CODE(E_FORMAT);
DS4_SAME_CODE(E_MODEL);
DS4_SAME_CODE(E_NOMEM);
DS4_SAME_CODE(E_RANGE);
DS4_SAME_CODE(E_UNSUPPORTED);
DS4_SAME_CODE(E_MISMATCH);
DS4_SAME_CODE(E_INTERRUPTED);
DS4_SAME_CODE(E_INTERNAL);
#undef DS4_SAME_CODE

/* Copy e into out; returns the code (DS4REF_E_INTERNAL when e has none). */
static inline int api_fail(ds4ref_error *out, const ds4err *e) {
    int code = e->code ? e->code : DS4REF_E_INTERNAL;
    if (out) {
        out->code = code;
        snprintf(out->message, sizeof(out->message), "%s", e->msg);
    }
    return code;
}

static inline int api_fail_msg(ds4ref_error *out, int code, const char *msg) {
    ds4err e;
    ds4_err_set(&e, code, "%s", msg);
    return api_fail(out, &e);
}

/* Success: out says DS4REF_OK with an empty message. */
static inline void api_ok(ds4ref_error *out) {
    if (out) {
        out->code = DS4REF_OK;
        out->message[0] = '\0';
    }
}

/* A call's outcome: api_fail when rc is non-zero, else api_ok.  Returns the
 * public code. */
static inline int api_result(ds4ref_error *out, int rc, const ds4err *e) {
    if (rc) return api_fail(out, e);
    api_ok(out);
    return 0;
}

/* The public chat options as the encoder's (o may be NULL: the defaults). */
static inline int api_chat_opts(const ds4ref_chat_options *o, ds4_chat_opts *co, ds4err *e) {
    *co = (ds4_chat_opts){.thinking = o && o->thinking};
    if (!o) return 0;
    if (o->release != DS4REF_CHAT_V4 && o->release != DS4REF_CHAT_V4_0731)
        return ds4_err_set(e, DS4_E_ARG, "chat options: release %d: expected DS4REF_CHAT_V4 "
                           "(0) or DS4REF_CHAT_V4_0731 (1)", o->release);
    co->release = o->release == DS4REF_CHAT_V4_0731 ? DS4_CHAT_V4_0731 : DS4_CHAT_V4;
    if (o->think_max) co->effort = DS4_EFFORT_MAX;
    if (!o->reasoning_effort) return 0;
    ds4_chat_effort effort;
    if (ds4_chat_effort_parse(o->reasoning_effort, &effort))
        return ds4_err_set(e, DS4_E_ARG, "chat options: reasoning_effort \"%.32s\": expected "
                           "low, high or max", o->reasoning_effort);
    if (o->think_max && effort != DS4_EFFORT_MAX)
        return ds4_err_set(e, DS4_E_ARG, "chat options: think_max and reasoning_effort "
                           "\"%s\" disagree", o->reasoning_effort);
    co->effort = effort;
    return 0;
}

#endif
