/* Deterministic exp, log, log1p, sin, cos and pow (docs/NUMERICS.md §4).
 *
 * Nothing here mirrors official code: the official model calls torch/libm,
 * whose last bits differ between libraries.  What ds4ref needs is one fixed,
 * reproducible rounding, so these are textbook algorithms (Tang's table-driven
 * exp and log, Taylor series, an exact Payne-Hanek style reduction by pi/2)
 * written with double-double arithmetic and rounded once at the end.
 *
 * Why the results are portable:
 *   - only + - * / and comparisons on doubles, plus exact bit manipulation;
 *     no libm call at all (not even ldexp or floor);
 *   - every constant is a hex literal or an exact rational folded by the
 *     compiler; the tables were generated offline with mpmath (400 bits and
 *     more);
 *   - the double-double steps (two_sum, Dekker's two_prod) are exact only if
 *     each operation is rounded to double on its own: that is why the build
 *     uses -ffp-contract=off, and why x87 excess precision is rejected below;
 *   - a fixed evaluation order: the only branches are range checks and the
 *     choice of quadrant.
 * With ~100-bit intermediates the only rounding that normally matters is the
 * final one, so the results are also (almost always) the correctly rounded
 * values, which makes them easy to check against any other accurate source. */
#include "base/detmath.h"

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "base/bits.h"

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "ds4ref needs each float/double operation rounded to its own type (SSE2, aarch64; no x87)"
#endif

/* ---- bits ---- */


static double from_bits(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#define MANT_MASK 0x000fffffffffffffULL
#define INF_BITS 0x7ff0000000000000ULL
#define NAN_BITS 0x7ff8000000000000ULL

/* 2^n for -1022 <= n <= 1023, built from the exponent field. */
static double pow2i(int n) {
    return from_bits((uint64_t)(n + 1023) << 52);
}

static double dabs(double x) {
    return from_bits(ds4_bits_of_f64(x) & ~(1ULL << 63));
}

/* ---- double-double arithmetic: hi + lo with |lo| <= ulp(hi)/2 ---- */

typedef struct {
    double hi, lo;
} dd;

/* a + b = s.hi + s.lo exactly (Knuth). */
static dd two_sum(double a, double b) {
    double s = a + b;
    double bb = s - a;
    dd r = {s, (a - (s - bb)) + (b - bb)};
    return r;
}

/* The same when |a| >= |b| (Dekker). */
static dd fast_two_sum(double a, double b) {
    double s = a + b;
    dd r = {s, b - (s - a)};
    return r;
}

/* a * b = p.hi + p.lo exactly (Dekker's product with Veltkamp's split; no
 * FMA so that it means the same thing everywhere).  |a|, |b| < 2^995. */
static dd two_prod(double a, double b) {
    double ca = 134217729.0 * a, cb = 134217729.0 * b; /* 2^27 + 1 */
    double ah = ca - (ca - a), al = a - ah;
    double bh = cb - (cb - b), bl = b - bh;
    double p = a * b;
    dd r = {p, ((ah * bh - p) + ah * bl + al * bh) + al * bl};
    return r;
}

static dd dd_add(dd a, dd b) {
    dd s = two_sum(a.hi, b.hi);
    dd t = two_sum(a.lo, b.lo);
    s.lo += t.hi;
    s = fast_two_sum(s.hi, s.lo);
    s.lo += t.lo;
    return fast_two_sum(s.hi, s.lo);
}

static dd dd_add_d(dd a, double b) {
    dd s = two_sum(a.hi, b);
    s.lo += a.lo;
    return fast_two_sum(s.hi, s.lo);
}

static dd dd_mul(dd a, dd b) {
    dd p = two_prod(a.hi, b.hi);
    p.lo += a.hi * b.lo + a.lo * b.hi;
    return fast_two_sum(p.hi, p.lo);
}

static dd dd_mul_d(dd a, double b) {
    dd p = two_prod(a.hi, b);
    p.lo += a.lo * b;
    return fast_two_sum(p.hi, p.lo);
}

/* ---- exp ---- */

/* 2^(j/64) = hi + lo, j = 0..63. */
static const double exp2_tab[64][2] = {
    {0x1.0000000000000p+0, 0.0},
    {0x1.02c9a3e778061p+0, -0x1.19083535b085dp-56},
    {0x1.059b0d3158574p+0, 0x1.d73e2a475b465p-55},
    {0x1.0874518759bc8p+0, 0x1.186be4bb284ffp-57},
    {0x1.0b5586cf9890fp+0, 0x1.8a62e4adc610bp-54},
    {0x1.0e3ec32d3d1a2p+0, 0x1.03a1727c57b53p-59},
    {0x1.11301d0125b51p+0, -0x1.6c51039449b3ap-54},
    {0x1.1429aaea92de0p+0, -0x1.32fbf9af1369ep-54},
    {0x1.172b83c7d517bp+0, -0x1.19041b9d78a76p-55},
    {0x1.1a35beb6fcb75p+0, 0x1.e5b4c7b4968e4p-55},
    {0x1.1d4873168b9aap+0, 0x1.e016e00a2643cp-54},
    {0x1.2063b88628cd6p+0, 0x1.dc775814a8495p-55},
    {0x1.2387a6e756238p+0, 0x1.9b07eb6c70573p-54},
    {0x1.26b4565e27cddp+0, 0x1.2bd339940e9d9p-55},
    {0x1.29e9df51fdee1p+0, 0x1.612e8afad1255p-55},
    {0x1.2d285a6e4030bp+0, 0x1.0024754db41d5p-54},
    {0x1.306fe0a31b715p+0, 0x1.6f46ad23182e4p-55},
    {0x1.33c08b26416ffp+0, 0x1.32721843659a6p-54},
    {0x1.371a7373aa9cbp+0, -0x1.63aeabf42eae2p-54},
    {0x1.3a7db34e59ff7p+0, -0x1.5e436d661f5e3p-56},
    {0x1.3dea64c123422p+0, 0x1.ada0911f09ebcp-55},
    {0x1.4160a21f72e2ap+0, -0x1.ef3691c309278p-58},
    {0x1.44e086061892dp+0, 0x1.89b7a04ef80d0p-59},
    {0x1.486a2b5c13cd0p+0, 0x1.3c1a3b69062f0p-56},
    {0x1.4bfdad5362a27p+0, 0x1.d4397afec42e2p-56},
    {0x1.4f9b2769d2ca7p+0, -0x1.4b309d25957e3p-54},
    {0x1.5342b569d4f82p+0, -0x1.07abe1db13cadp-55},
    {0x1.56f4736b527dap+0, 0x1.9bb2c011d93adp-54},
    {0x1.5ab07dd485429p+0, 0x1.6324c054647adp-54},
    {0x1.5e76f15ad2148p+0, 0x1.ba6f93080e65ep-54},
    {0x1.6247eb03a5585p+0, -0x1.383c17e40b497p-54},
    {0x1.6623882552225p+0, -0x1.bb60987591c34p-54},
    {0x1.6a09e667f3bcdp+0, -0x1.bdd3413b26456p-54},
    {0x1.6dfb23c651a2fp+0, -0x1.bbe3a683c88abp-57},
    {0x1.71f75e8ec5f74p+0, -0x1.16e4786887a99p-55},
    {0x1.75feb564267c9p+0, -0x1.0245957316dd3p-54},
    {0x1.7a11473eb0187p+0, -0x1.41577ee04992fp-55},
    {0x1.7e2f336cf4e62p+0, 0x1.05d02ba15797ep-56},
    {0x1.82589994cce13p+0, -0x1.d4c1dd41532d8p-54},
    {0x1.868d99b4492edp+0, -0x1.fc6f89bd4f6bap-54},
    {0x1.8ace5422aa0dbp+0, 0x1.6e9f156864b27p-54},
    {0x1.8f1ae99157736p+0, 0x1.5cc13a2e3976cp-55},
    {0x1.93737b0cdc5e5p+0, -0x1.75fc781b57ebcp-57},
    {0x1.97d829fde4e50p+0, -0x1.d185b7c1b85d1p-54},
    {0x1.9c49182a3f090p+0, 0x1.c7c46b071f2bep-56},
    {0x1.a0c667b5de565p+0, -0x1.359495d1cd533p-54},
    {0x1.a5503b23e255dp+0, -0x1.d2f6edb8d41e1p-54},
    {0x1.a9e6b5579fdbfp+0, 0x1.0fac90ef7fd31p-54},
    {0x1.ae89f995ad3adp+0, 0x1.7a1cd345dcc81p-54},
    {0x1.b33a2b84f15fbp+0, -0x1.2805e3084d708p-57},
    {0x1.b7f76f2fb5e47p+0, -0x1.5584f7e54ac3bp-56},
    {0x1.bcc1e904bc1d2p+0, 0x1.23dd07a2d9e84p-55},
    {0x1.c199bdd85529cp+0, 0x1.11065895048ddp-55},
    {0x1.c67f12e57d14bp+0, 0x1.2884dff483cadp-54},
    {0x1.cb720dcef9069p+0, 0x1.503cbd1e949dbp-56},
    {0x1.d072d4a07897cp+0, -0x1.cbc3743797a9cp-54},
    {0x1.d5818dcfba487p+0, 0x1.2ed02d75b3707p-55},
    {0x1.da9e603db3285p+0, 0x1.c2300696db532p-54},
    {0x1.dfc97337b9b5fp+0, -0x1.1a5cd4f184b5cp-54},
    {0x1.e502ee78b3ff6p+0, 0x1.39e8980a9cc8fp-55},
    {0x1.ea4afa2a490dap+0, -0x1.e9c23179c2893p-54},
    {0x1.efa1bee615a27p+0, 0x1.dc7f486a4b6b0p-54},
    {0x1.f50765b6e4540p+0, 0x1.9d3e12dd8a18bp-54},
    {0x1.fa7c1819e90d8p+0, 0x1.74853f3a5931ep-55},
};

/* ln2/64 = C1 + C2 + C3.  C1 and C2 have 36 significant bits, so k*C1 and
 * k*C2 are exact for |k| < 2^17 (|x| <= 746 gives |k| <= 68900). */
static const double EXP_C1 = 0x1.62e42fefa0000p-7;
static const double EXP_C2 = 0x1.cf79abc9e0000p-46;
static const double EXP_C3 = 0x1.d9cc01f97b57ap-85;
static const double EXP_INV = 0x1.71547652b82fep+6; /* 64/ln2 */

/* e^(xh + xl) = 2^m * (hi + lo) with hi + lo in [0.99, 2), |xh| <= 746 and
 * |xl| <= ulp(xh).  Tang's method: x = (64m + j) ln2/64 + r, |r| <= ln2/128,
 * e^x = 2^m * 2^(j/64) * e^r. */
static dd exp_core(double xh, double xl, int *m) {
    /* k = nearest integer to x*64/ln2: adding 1.5*2^52 leaves the integer
     * part in the low mantissa bits, rounded to nearest even. */
    double kd = (xh * EXP_INV + 0x1.8p52) - 0x1.8p52;
    int k = (int)kd;
    int j = ((k % 64) + 64) % 64;
    *m = (k - j) / 64;

    /* r = x - k*ln2/64 as a double-double.  x - k*C1 is exact: both are
     * within a factor of two of each other or k is 0 (Sterbenz). */
    double t = xh - kd * EXP_C1;
    dd r = two_sum(t, -(kd * EXP_C2));
    r = two_sum(r.hi, r.lo + (xl - kd * EXP_C3));

    /* e^r - 1 - rh: the Taylor series to r^7 (next term < 2^-75), plus the
     * first-order effect of rl.  Its size (< 1.5e-5) makes double enough. */
    double rh = r.hi, rl = r.lo;
    double q = rh * rh * (1.0 / 2 + rh * (1.0 / 6 + rh * (1.0 / 24 + rh * (1.0 / 120 +
               rh * (1.0 / 720 + rh * (1.0 / 5040))))));
    double p = q + (rl + rh * rl);

    /* 2^(j/64) * (1 + rh + p), keeping th*rh exact. */
    double th = exp2_tab[j][0], tl = exp2_tab[j][1];
    dd ph = two_prod(th, rh);
    dd s = fast_two_sum(th, ph.hi);
    s.lo += ph.lo + (th * p + tl * (1.0 + rh + p));
    return fast_two_sum(s.hi, s.lo);
}

/* RN((y.hi + y.lo) * 2^m) for y in [0.99, 2) and -1077 <= m <= 1024. */
static double scale_dd(dd y, int m) {
    if (m > 1023)
        return (y.hi + y.lo) * 2.0 * pow2i(m - 1); /* may overflow to +Inf */
    if (m > -1022 || (m == -1022 && y.hi >= 1.0))
        return (y.hi + y.lo) * pow2i(m); /* normal result: exact scaling */

    /* Subnormal result: scale to a = y*2^(m+1022) < 1, whose wanted rounding
     * grid is 2^-52, the grid of [1, 2): add 1, round once there, take the 1
     * away (exact), and scale back (exact, lands on the subnormal grid). */
    double sc = pow2i(m + 1022);
    dd s = two_sum(1.0, y.hi * sc);
    double v = s.hi + (s.lo + y.lo * sc);
    return (v - 1.0) * 0x1p-1022;
}

double ds4_det_exp(double x) {
    if (!(x > -746.0)) /* NaN, -Inf, or e^x < 2^-1076: rounds to +0 */
        return x != x ? x + x : 0.0;
    if (x > 710.0)
        return from_bits(INF_BITS);
    int m;
    dd y = exp_core(x, 0.0, &m);
    return scale_dd(y, m);
}

/* ---- log ---- */

/* log(j/64) = hi + lo, j = 48..96. */
static const double log_tab[49][2] = {
    {-0x1.269621134db92p-2, -0x1.e0efadd9db02bp-56},
    {-0x1.1178e8227e47cp-2, 0x1.0e63a5f01c691p-57},
    {-0x1.f991c6cb3b379p-3, -0x1.f665066f980a2p-57},
    {-0x1.d1037f2655e7bp-3, -0x1.60629242471a2p-57},
    {-0x1.a93ed3c8ad9e3p-3, -0x1.bcafa9de97203p-57},
    {-0x1.823c16551a3c2p-3, 0x1.1232ce70be781p-57},
    {-0x1.5bf406b543db2p-3, 0x1.1f5b44c0df7e7p-61},
    {-0x1.365fcb0159016p-3, -0x1.7d411a5b944adp-58},
    {-0x1.1178e8227e47cp-3, 0x1.0e63a5f01c691p-58},
    {-0x1.da727638446a2p-4, -0x1.401fa71733019p-58},
    {-0x1.9335e5d594989p-4, 0x1.478a85704ccb7p-58},
    {-0x1.4d3115d207eacp-4, -0x1.769f42c7842ccp-58},
    {-0x1.08598b59e3a07p-4, 0x1.dd7009902bf32p-58},
    {-0x1.894aa149fb343p-5, -0x1.a8be97660a23dp-60},
    {-0x1.0415d89e74444p-5, -0x1.c05cf1d753622p-59},
    {-0x1.0205658935847p-6, -0x1.27c8e8416e71fp-60},
    {0.0, 0.0},
    {0x1.fc0a8b0fc03e4p-7, -0x1.83092c59642a1p-62},
    {0x1.f829b0e783300p-6, 0x1.33e3f04f1ef23p-60},
    {0x1.77458f632dcfcp-5, 0x1.18d3ca87b9296p-59},
    {0x1.f0a30c01162a6p-5, 0x1.85f325c5bbacdp-59},
    {0x1.341d7961bd1d1p-4, -0x1.b599f227becbbp-58},
    {0x1.6f0d28ae56b4cp-4, -0x1.906d99184b992p-58},
    {0x1.a926d3a4ad563p-4, 0x1.942f48aa70ea9p-58},
    {0x1.e27076e2af2e6p-4, -0x1.61578001e0162p-60},
    {0x1.0d77e7cd08e59p-3, 0x1.9a5dc5e9030acp-57},
    {0x1.29552f81ff523p-3, 0x1.301771c407dbfp-57},
    {0x1.44d2b6ccb7d1ep-3, 0x1.9f4f6543e1f88p-57},
    {0x1.5ff3070a793d4p-3, -0x1.bc60efafc6f6ep-58},
    {0x1.7ab890210d909p-3, 0x1.be36b2d6a0608p-59},
    {0x1.9525a9cf456b4p-3, 0x1.d904c1d4e2e26p-57},
    {0x1.af3c94e80bff3p-3, -0x1.398cff3641985p-58},
    {0x1.c8ff7c79a9a22p-3, -0x1.4f689f8434012p-57},
    {0x1.e27076e2af2e6p-3, -0x1.61578001e0162p-59},
    {0x1.fb9186d5e3e2bp-3, -0x1.caaae64f21acbp-57},
    {0x1.0a324e27390e3p-2, 0x1.7dcfde8061c03p-56},
    {0x1.1675cababa60ep-2, 0x1.ce63eab883717p-61},
    {0x1.22941fbcf7966p-2, -0x1.76f5eb09628afp-56},
    {0x1.2e8e2bae11d31p-2, -0x1.8f4cdb95ebdf9p-56},
    {0x1.3a64c556945eap-2, -0x1.c68651945f97cp-57},
    {0x1.4618bc21c5ec2p-2, 0x1.f42decdeccf1dp-56},
    {0x1.51aad872df82dp-2, 0x1.3927ac19f55e3p-59},
    {0x1.5d1bdbf5809cap-2, 0x1.4236383dc7fe1p-56},
    {0x1.686c81e9b14afp-2, -0x1.ddea0f7f58e3dp-57},
    {0x1.739d7f6bbd007p-2, -0x1.8c76ceb014b04p-56},
    {0x1.7eaf83b82afc3p-2, 0x1.92ce979ed2950p-56},
    {0x1.89a3386c1425bp-2, -0x1.29639dfbbf0fbp-56},
    {0x1.947941c2116fbp-2, -0x1.16cc8bae0bbe4p-56},
    {0x1.9f323ecbf984cp-2, -0x1.a92e513217f5cp-59},
};

/* ln2 = LN2_HI + LN2_LO; LN2_HI has 42 bits so e*LN2_HI is exact for any
 * binary exponent e. */
static const double LN2_HI = 0x1.62e42fefa3800p-1;
static const double LN2_LO = 0x1.ef35793c76730p-45;

/* log(1 + u) for u = uh + ul, |u| <= 2^-6.5: u - u^2/2 in double-double,
 * u^3 (1/3 - u/4 + ... + u^8/11) in double (it is < 2^-21 of the result;
 * the first omitted term is < 2^-76 of it). */
static dd log1p_small(double uh, double ul) {
    dd sq = two_prod(uh, uh);
    sq.lo += 2.0 * uh * ul;
    double tail = uh * uh * uh * (1.0 / 3 + uh * (-1.0 / 4 + uh * (1.0 / 5 + uh * (-1.0 / 6 +
                  uh * (1.0 / 7 + uh * (-1.0 / 8 + uh * (1.0 / 9 + uh * (-1.0 / 10 +
                  uh * (1.0 / 11)))))))));
    dd u = {uh, ul};
    dd half = {-0.5 * sq.hi, -0.5 * sq.lo};
    return dd_add_d(dd_add(u, half), tail);
}

/* log(x) as a double-double for finite x > 0: x = 2^e * m, m in [0.75, 1.5),
 * m = F (1 + u) with F = j/64 the nearest table point, |u| <= 1/96. */
static dd log_core(double x) {
    int e = -1023;
    if (x < 0x1p-1022) { /* subnormal: make it normal, exactly */
        x *= 0x1p54;
        e -= 54;
    }
    uint64_t b = ds4_bits_of_f64(x);
    e += (int)(b >> 52);
    double m = from_bits((b & MANT_MASK) | ((uint64_t)1023 << 52));
    if (m >= 1.5) {
        m *= 0.5;
        e += 1;
    }
    int j = (int)(m * 64.0 + 0.5); /* 48..96 */
    double F = j * 0x1p-6;
    double f = m - F; /* exact */

    /* u = f/F as a double-double: the remainder f - uh*F is exact. */
    double uh = f / F;
    dd p = two_prod(uh, F);
    double ul = ((f - p.hi) - p.lo) / F;

    dd le = {e * LN2_HI, e * LN2_LO};
    dd lf = {log_tab[j - 48][0], log_tab[j - 48][1]};
    return dd_add(dd_add(le, lf), log1p_small(uh, ul));
}

double ds4_det_log(double x) {
    if (x != x)
        return x + x;
    if (x < 0.0)
        return from_bits(NAN_BITS);
    if (x == 0.0)
        return -from_bits(INF_BITS);
    if (x == from_bits(INF_BITS))
        return x;
    dd l = log_core(x);
    return l.hi + l.lo;
}

double ds4_det_log1p(double x) {
    if (x != x)
        return x + x;
    if (x <= -1.0)
        return x == -1.0 ? -from_bits(INF_BITS) : from_bits(NAN_BITS);
    if (x == from_bits(INF_BITS))
        return x;
    double ax = dabs(x);
    if (ax < 0x1p-54) /* x^2/2 is below a quarter ulp of x (keeps ±0) */
        return x;
    if (ax <= 0x1p-7) {
        dd l = log1p_small(x, 0.0);
        return l.hi + l.lo;
    }
    /* 1 + x = a.hi + a.lo exactly; log(a.hi + a.lo) = log(a.hi) + a.lo/a.hi
     * to within (a.lo/a.hi)^2/2 < 2^-107, against |result| > 2^-8. */
    dd a = two_sum(1.0, x);
    dd l = dd_add_d(log_core(a.hi), a.lo / a.hi);
    return l.hi + l.lo;
}

/* ---- sin, cos ---- */

/* 2/pi in binary: word i holds bits 32i+1 .. 32i+32 after the point. */
static const uint32_t two_over_pi[40] = {
    0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041,
    0xfe5163ab, 0xdebbc561, 0xb7246e3a, 0x424dd2e0, 0x06492eea, 0x09d1921c,
    0xfe1deb1c, 0xb129a73e, 0xe88235f5, 0x2ebb4484, 0xe99c7026, 0xb45f7e41,
    0x3991d639, 0x835339f4, 0x9c845f8b, 0xbdf9283b, 0x1ff897ff, 0xde05980f,
    0xef2f118b, 0x5a0a6d1f, 0x6d367ecf, 0x27cb09b7, 0x4f463f66, 0x9e5fea2d,
    0x7527bac7, 0xebe5f17b, 0x3d0739f7, 0x8a5292ea, 0x6bfb5fb1, 0x1f8d5d08,
    0x56033046, 0xfc7b6bab, 0xf0cfbc20, 0x9af4361d,
};

static const dd PIO2 = {0x1.921fb54442d18p+0, 0x1.1a62633145c07p-54};

/* 64 bits of the little-endian 32-bit-limb integer p[0..n-1] starting at bit
 * pos >= 0 (bits past the top read as 0). */
static uint64_t bits64(const uint32_t *p, int n, int pos) {
    int i = pos / 32, sh = pos % 32;
    uint64_t l0 = i < n ? p[i] : 0;
    uint64_t l1 = i + 1 < n ? p[i + 1] : 0;
    uint64_t l2 = i + 2 < n ? p[i + 2] : 0;
    uint64_t v = (l0 | l1 << 32) >> sh;
    if (sh)
        v |= l2 << (64 - sh);
    return v;
}

/* ax = q*pi/2 + r with |r| <= pi/4, for finite ax >= pi/4; returns q mod 4.
 *
 * ax = M * 2^E with M a 53-bit integer.  ax*2/pi mod 4 only depends on the
 * bits of 2/pi of weight 2^-i with i > E-2 (earlier ones give multiples of
 * 4), so we multiply M by 256 bits of 2/pi starting there, exactly, in
 * 32-bit limbs.  That leaves >= 223 fraction bits, and the truncated tail of
 * 2/pi moves the fraction by < 2^-170: ample, since no double lies closer
 * than ~2^-62 to a multiple of pi/2.  The fraction (rounded to the nearest
 * quadrant) is turned into a double-double and multiplied by pi/2. */
static int reduce_pio2_big(double ax, dd *r) {
    uint64_t b = ds4_bits_of_f64(ax);
    int E = (int)(b >> 52) - 1075;
    uint64_t M = (b & MANT_MASK) | (1ULL << 52);
    int i0 = E - 1 > 1 ? E - 1 : 1;
    int w0 = (i0 - 1) / 32; /* words 0..w0-1 only contribute multiples of 4 */
    uint64_t mw[2] = {M & 0xffffffffu, M >> 32};

    uint32_t p[10] = {0}; /* M * (words w0..w0+7), little-endian limbs */
    for (int t = 0; t < 8; t++) {
        uint64_t w = two_over_pi[w0 + 7 - t], carry = 0;
        for (int s = 0; s < 2; s++) {
            uint64_t cur = p[t + s] + w * mw[s] + carry; /* < 2^64 */
            p[t + s] = (uint32_t)cur;
            carry = cur >> 32;
        }
        p[t + 2] = (uint32_t)carry;
    }

    int u = 32 * w0 + 256 - E; /* bit of p with weight 2^0 in ax*2/pi */
    int q = (int)(bits64(p, 10, u) & 3);
    uint64_t f[3] = {bits64(p, 10, u - 64), bits64(p, 10, u - 128), bits64(p, 10, u - 192)};
    double sign = 1.0;
    if (f[0] >> 63) { /* fraction >= 1/2: next quadrant, r = (fraction - 1)*pi/2 */
        q += 1;
        sign = -1.0;
        f[0] = ~f[0];
        f[1] = ~f[1];
        f[2] = ~f[2] + 1;
        if (f[2] == 0 && ++f[1] == 0)
            f[0]++;
    }

    /* The 192-bit magnitude as six exact 32-bit pieces; all are >= 0, so
     * accumulating them in double-double loses nothing but ~2^-104. */
    dd g = {0.0, 0.0};
    for (int k = 5; k >= 0; k--) {
        uint64_t piece = (f[k / 2] >> (k % 2 ? 0 : 32)) & 0xffffffffu;
        g = dd_add_d(g, (double)piece * pow2i(-32 * (k + 1)));
    }
    dd rr = dd_mul(g, PIO2);
    r->hi = sign * rr.hi;
    r->lo = sign * rr.lo;
    return q & 3;
}

/* 1/n! as double-doubles for the leading Taylor terms. */
static const dd INV_F3 = {0x1.5555555555555p-3, 0x1.5555555555555p-57};
static const dd INV_F5 = {0x1.1111111111111p-7, 0x1.1111111111111p-63};
static const dd INV_F7 = {0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-73};
static const dd INV_F9 = {0x1.71de3a556c734p-19, -0x1.c154f8ddc6c00p-73};
static const dd INV_F4 = {0x1.5555555555555p-5, 0x1.5555555555555p-59};
static const dd INV_F6 = {0x1.6c16c16c16c17p-10, -0x1.f49f49f49f49fp-65};
static const dd INV_F8 = {0x1.a01a01a01a01ap-16, 0x1.a01a01a01a01ap-76};

/* (-1)^k / (2k+11)!, k = 0..5, and (-1)^(k+1) / (2k+10)!, k = 0..6. */
static const double SIN_TAIL[6] = {
    -0x1.ae64567f544e4p-26, 0x1.6124613a86d09p-33, -0x1.ae7f3e733b81fp-41,
    0x1.952c77030ad4ap-49, -0x1.2f49b46814157p-57, 0x1.71b8ef6dcf572p-66,
};
static const double COS_TAIL[7] = {
    -0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29, -0x1.93974a8c07c9dp-37, 0x1.ae7f3e733b81fp-45,
    -0x1.6827863b97d97p-53, 0x1.e542ba4020225p-62, -0x1.0ce396db7f853p-70,
};

/* c[0] + h (c[1] + h (... + h c[n-1])), in double. */
static double horner(const double *c, int n, double h) {
    double t = c[n - 1];
    for (int i = n - 2; i >= 0; i--)
        t = c[i] + h * t;
    return t;
}

static dd neg(dd a) {
    dd r = {-a.hi, -a.lo};
    return r;
}

static dd square(dd r) {
    dd z = two_prod(r.hi, r.hi);
    z.lo += 2.0 * r.hi * r.lo;
    return fast_two_sum(z.hi, z.lo);
}

/* sin(r), |r| <= pi/4: r + r z (-1/3! + z (1/5! - z (1/7! - z (1/9! + z T)))),
 * z = r^2.  The tail T (from 1/11! to 1/21!) is below 2^-28 of the result,
 * so double suffices for it; the first omitted term is below 2^-75. */
static double sin_poly(dd r) {
    dd z = square(r);
    double h = z.hi;
    dd acc = dd_add(INV_F9, dd_mul_d(z, horner(SIN_TAIL, 6, h)));
    acc = dd_add(neg(INV_F7), dd_mul(z, acc));
    acc = dd_add(INV_F5, dd_mul(z, acc));
    acc = dd_add(neg(INV_F3), dd_mul(z, acc));
    dd s = dd_add(r, dd_mul(r, dd_mul(z, acc)));
    return s.hi + s.lo;
}

/* cos(r), |r| <= pi/4: 1 + z (-1/2 + z (1/4! - z (1/6! - z (1/8! + z U)))),
 * U from -1/10! to -1/22! in double (below 2^-25 of the result). */
static double cos_poly(dd r) {
    dd z = square(r);
    double h = z.hi;
    dd acc = dd_add(INV_F8, dd_mul_d(z, horner(COS_TAIL, 7, h)));
    acc = dd_add(neg(INV_F6), dd_mul(z, acc));
    acc = dd_add(INV_F4, dd_mul(z, acc));
    acc = dd_add_d(dd_mul(z, acc), -0.5);
    dd c = dd_add_d(dd_mul(z, acc), 1.0);
    return c.hi + c.lo;
}

/* sin(r + q*pi/2). */
static double sin_quadrant(dd r, int q) {
    double v = (q & 1) ? cos_poly(r) : sin_poly(r);
    return (q & 2) ? -v : v;
}

/* |x| = q*pi/2 + r.  Returns q mod 4; |x| < 2^-27 is left to the callers. */
static int reduce(double ax, dd *r) {
    if (ax <= 0x1.921fb54442d18p-1) { /* pi/4 rounded down */
        r->hi = ax;
        r->lo = 0.0;
        return 0;
    }
    return reduce_pio2_big(ax, r);
}

double ds4_det_sin(double x) {
    if (x - x != 0.0) /* Inf or NaN */
        return x - x;
    double ax = dabs(x);
    if (ax < 0x1p-27) /* sin x = x - x^3/6: the correction is < 1/4 ulp */
        return x;
    dd r;
    int q = reduce(ax, &r);
    double v = sin_quadrant(r, q);
    return x < 0.0 ? -v : v;
}

double ds4_det_cos(double x) {
    if (x - x != 0.0)
        return x - x;
    double ax = dabs(x);
    if (ax < 0x1p-27) /* 1 - x^2/2 rounds to 1 */
        return 1.0;
    dd r;
    int q = reduce(ax, &r);
    return sin_quadrant(r, q + 1);
}

void ds4_det_sincos(double x, double *s, double *c) {
    *s = ds4_det_sin(x);
    *c = ds4_det_cos(x);
}

/* ---- pow ---- */

/* Handles the special cases of b^e; returns 1 and sets *out if it did. */
static int pow_special(double b, double e, double *out) {
    if (e == 0.0 || b == 1.0)
        *out = 1.0;
    else if (b != b || e != e)
        *out = b + e;
    else if (b < 0.0)
        *out = from_bits(NAN_BITS);
    else if (b == 0.0)
        *out = e > 0.0 ? 0.0 : from_bits(INF_BITS);
    else if (b == from_bits(INF_BITS))
        *out = e > 0.0 ? from_bits(INF_BITS) : 0.0;
    else
        return 0;
    return 1;
}

/* e*log(b) as a double-double, with *big set to ±1 when it is beyond the
 * range of exp (|y| > 746), 0 otherwise.  b is finite, > 0 and != 1. */
static dd pow_exponent(double b, double e, int *big) {
    dd l = log_core(b);
    dd y = {e * l.hi, 0.0};
    *big = y.hi > 710.0 ? 1 : y.hi < -746.0 ? -1 : 0;
    if (*big) /* also avoids two_prod on huge e */
        return y;
    y = two_prod(e, l.hi);
    y.lo += e * l.lo;
    return fast_two_sum(y.hi, y.lo);
}

double ds4_det_pow(double b, double e) {
    double out;
    if (pow_special(b, e, &out))
        return out;
    int big, m;
    dd y = pow_exponent(b, e, &big);
    if (big)
        return big > 0 ? from_bits(INF_BITS) : 0.0;
    dd r = exp_core(y.hi, y.lo, &m);
    return scale_dd(r, m);
}

float ds4_det_pow_f32(double b, double e) {
    double out;
    if (pow_special(b, e, &out))
        return (float)out;
    int big, m;
    dd y = pow_exponent(b, e, &big);
    if (big)
        return big > 0 ? (float)from_bits(INF_BITS) : 0.0f;
    dd r = exp_core(y.hi, y.lo, &m);
    if (m > 200 || m < -200) /* far outside the float range: +Inf or +0 */
        return (float)scale_dd(r, m);
    double sc = pow2i(m);
    return ds4_det_round_sum_f32(r.hi * sc, r.lo * sc);
}

/* ---- rounding ---- */

/* Rounds the exact a + b to odd at double precision (Boldo-Melquiond), then
 * to float: round-to-odd at >= 24+2 bits followed by round-to-nearest gives
 * the correctly rounded float, with no double-rounding error. */
float ds4_det_round_sum_f32(double a, double b) {
    dd s = two_sum(a, b);
    double v = s.hi;
    if (s.lo != 0.0 && v - v == 0.0) {
        uint64_t u = ds4_bits_of_f64(v);
        if ((u & 1) == 0) /* even: take the neighbour on the side of s.lo */
            u = (s.lo > 0.0) == (v > 0.0) ? u + 1 : u - 1;
        v = from_bits(u);
    }
    return (float)v;
}

/* ---- activations ---- */

double ds4_det_sigmoid(double x) {
    if (x >= 0.0)
        return 1.0 / (1.0 + ds4_det_exp(-x));
    double e = ds4_det_exp(x); /* NaN also lands here */
    return e / (1.0 + e);
}

double ds4_det_silu(double x) {
    return x / (1.0 + ds4_det_exp(-x));
}

double ds4_det_softplus(double x) {
    return x > 20.0 ? x : ds4_det_log1p(ds4_det_exp(x));
}
