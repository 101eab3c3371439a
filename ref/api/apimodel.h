/* What the public model and session handles hold, for the API files that
 * need the internal objects behind them (api.c, api_serve.c, and the checking
 * library's check_conform.c). */
#ifndef DS4_APIMODEL_H
#define DS4_APIMODEL_H

#include "ref/decode/session.h"
#include "ds4ref.h"
#include "ref/forward/engine.h"
#include "ref/model/model.h"

struct ds4ref_model {
    ds4_model m;
    ds4_engine e;
    ds4ref_tap_fn tap;
    void *tap_ud;
};

struct ds4ref_session {
    ds4ref_model *model;
    ds4_session s;
};

#endif
