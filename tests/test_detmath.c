/* Tests of base/detmath.c.
 *
 * Three independent references:
 *   - exact tables: inputs whose correctly rounded result was computed
 *     offline with 1200-bit mpmath (and agrees with glibc's long double
 *     functions), chosen >= 0.01 ulp away from a rounding tie so the expected
 *     bits are unambiguous.  These pin the exact output bits: any change of
 *     algorithm, compiler flag (e.g. FMA contraction) or platform that moves
 *     a last bit fails here;
 *   - the C library's long double functions (80-bit on x86-64, 128-bit on
 *     aarch64) on >= 100k inputs per function and range: <= 1 ulp required;
 *   - hand-derived special values. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/detmath.h"
#include "testutil.h"

struct unary_case {
    double x;
    uint64_t want;
};

struct pow_case {
    double b, e;
    uint64_t want;
};

/* exp: input, correctly rounded result; the comment gives the result and
 * how far (in ulps) the exact value lies from a rounding tie. */
static const struct unary_case exp_cases[] = {
    {0x1.0000000000000p+0, 0x4005bf0a8b145769ULL}, /* 2.7182818284590451, 0.174 */
    {-0x1.0000000000000p-1, 0x3fe368b2fc6f960aULL}, /* 0.60653065971263342, 0.494 */
    {0x1.4000000000000p+1, 0x40285d6fd931e0bbULL}, /* 12.182493960703473, 0.386 */
    {-0x1.4400000000000p+4, 0x3e1b93de1e27ca3bULL}, /* 1.6052280551856116e-09, 0.323 */
    {-0x1.5d33333333333p+6, 0x38109874c0b9cacbULL}, /* 1.2192470959520051e-38, 0.399 */
    {0x1.62ccccccccccdp+6, 0x47ef4705bbffae5cULL}, /* 3.3259869802505791e+38, 0.432 */
    {0x1.5e0cccccccccdp+9, 0x7f1058614179b2a5ULL}, /* 1.120899771073261e+304, 0.053 */
    {-0x1.5e26666666666p+9, 0x00c9a5615b10648aULL}, /* 7.3042280336457152e-305, 0.296 */
    {-0x1.7240000000000p+9, 0x0000000000000033ULL}, /* 2.5197347937903574e-322, 0.078 */
    {-0x1.7480000000000p+9, 0x0000000000000001ULL}, /* 4.9406564584124654e-324, 0.071 */
    {0x1.62e3d70a3d70ap+9, 0x7fefe9ce5c4c52b4ULL}, /* 1.7928227943945155e+308, 0.085 */
    {0x1.b7cdfd9d7bdbbp-34, 0x3ff000000006df38ULL}, /* 1.0000000001, 0.463 */
    {-0x1.14d2f5dbb9cfap-15, 0x3fefffbacb8d5ec0ULL}, /* 0.99996700054449406, 0.093 */
    {-0x1.cd7b3b80e5ddep+8, 0x1652ad08364b2985ULL}, /* 3.8122783034726756e-201, 0.075 */
    {0x1.ba1234feb5b30p-2, 0x3ff8a3623bcec56fULL}, /* 1.5398886047590528, 0.394 */
    {0x1.fc7b7c1b8797cp-2, 0x3ffa4a00f31b523aULL}, /* 1.6430673118931183, 0.305 */
    {-0x1.45b62fe6ff400p+1, 0x3fb418c08ea8fa3bULL}, /* 0.078502688244932381, 0.154 */
    {-0x1.8be1ca1a74df2p-21, 0x3feffffe741e3f76ULL}, /* 0.9999992626126033, 0.167 */
    {-0x1.ea0adb5976a00p-7, 0x3fef8666a264f7e6ULL}, /* 0.98515636174829235, 0.292 */
    {-0x1.2e78f783a1f48p+8, 0x24a8aa34c098dd7dULL}, /* 4.3436087351552378e-132, 0.131 */
};
/* log: the same */
static const struct unary_case log_cases[] = {
    {0x1.0000000000000p+1, 0x3fe62e42fefa39efULL}, /* 0.69314718055994529, 0.291 */
    {0x1.4000000000000p+3, 0x40026bb1bbb55516ULL}, /* 2.3025850929940459, 0.011 */
    {0x1.56e1fc2f8f359p-997, 0xc085963447f87fb5ULL}, /* -690.77552789821368, 0.292 */
    {0x0.00000000017b8p-1022, 0xc086fdd43b3b8eabULL}, /* -735.72862860230578, 0.316 */
    {0x1.ff7ced916872bp-1, 0xbf5064670d979b73ULL}, /* -0.0010005003335835344, 0.382 */
    {0x1.000001ad7f29bp+0, 0x3e7ad7f2847b6492ULL}, /* 9.9999995058387044e-08, 0.385 */
    {0x1.7e43c8800759cp+996, 0x4085963447f87fb5ULL}, /* 690.77552789821368, 0.291 */
    {0x1.3880000000000p+17, 0x4027f7427b73e391ULL}, /* 11.982929094215963, 0.187 */
    {0x1.3880000000000p+13, 0x40226bb1bbb55516ULL}, /* 9.2103403719761836, 0.011 */
    {0x1.8000000000000p-1, 0xbfd269621134db92ULL}, /* -0.2876820724517809, 0.030 */
    {0x1.8000000000000p+0, 0x3fd9f323ecbf984cULL}, /* 0.40546510810816438, 0.448 */
    {0x0.55f53cbaf24e2p-1022, 0xc0862be6e300c66dULL}, /* -709.4877376614146, 0.481 */
    {0x1.d0afedce79986p-855, 0xc082805b72a81b77ULL}, /* -592.04465228399101, 0.500 */
    {0x0.799edff8d69efp-1022, 0xc086292021dabc34ULL}, /* -709.14068957220888, 0.092 */
    {0x0.a1f9779b6845ep-1022, 0xc08626d5505b9cb2ULL}, /* -708.85415717670389, 0.491 */
    {0x0.0000000578660p-1022, 0xc086c705b8b18fbeULL}, /* -728.87779368133465, 0.314 */
    {0x1.10a605fa2f20ep+0, 0x3fb0212a9fa56194ULL}, /* 0.0630060806046287, 0.044 */
    {0x0.cf74080c4aaffp-1022, 0xc08624da8045f1cdULL}, /* -708.60668997425239, 0.361 */
    {0x1.13345f04def3fp+0, 0x3fb284b2427ad1a3ULL}, /* 0.072337285261545634, 0.221 */
    {0x0.35e02178ebf94p-1022, 0xc0862fa3ad11dc33ULL}, /* -709.95491994813199, 0.294 */
};
/* log1p: the same */
static const struct unary_case log1p_cases[] = {
    {0x1.b7cdfd9d7bdbbp-34, 0x3ddb7cdfd9d1d693ULL}, /* 9.9999999995000007e-11, 0.238 */
    {-0x1.3333333333333p-2, 0xbfd6d3c324e13f4eULL}, /* -0.35667494393873234, 0.016 */
    {0x1.0624dd2f1a9fcp-8, 0x3f7059f00cc2f7f8ULL}, /* 0.0039920212695374532, 0.327 */
    {0x1.4000000000000p+2, 0x3ffcab0bfa2a2002ULL}, /* 1.791759469228055, 0.304 */
    {0x1.2a05f20000000p+33, 0x4037069e2aa3184eULL}, /* 23.025850930040455, 0.113 */
    {-0x1.fff2e48e8a71ep-1, 0xc0226bb1bbb55554ULL}, /* -9.2103403719762937, 0.011 */
    {0x1.0000000000000p-7, 0x3f7fe02a6b106789ULL}, /* 0.007782140442054949, 0.485 */
    {-0x1.0000000000000p-7, 0xbf8010157588de71ULL}, /* -0.0078431774610258926, 0.341 */
    {0x1.14b37f4b51f71p-55, 0x3c814b37f4b51f71ULL}, /* 3.0000000000000001e-17, 0.427 */
    {0x1.0d4316d040e80p-1, 0x3fdb0ba63d7cdcdeULL}, /* 0.42258602146780599, 0.307 */
    {0x1.d6705dee52676p+687, 0x407dcccf43ca6ea4ULL}, /* 476.80060175967287, 0.499 */
    {-0x1.5cdcdeb0f1848p-10, 0xbf55d18595b2befbULL}, /* -0.0013316921747836264, 0.452 */
    {-0x1.5983ff0313be4p-29, 0xbe25983ff0a5d126ULL}, /* -2.5139569360102712e-09, 0.138 */
    {0x1.ba6375b525f57p+497, 0x407590a89729044aULL}, /* 345.04115978262109, 0.500 */
    {0x1.0aaa78cf9ecc1p+411, 0x4071cec9f9a6cb96ULL}, /* 284.92431035189054, 0.499 */
    {0x1.ff0b32874418ep-1, 0x3fe6269ba8f6b1c6ULL}, /* 0.69221289635384475, 0.296 */
    {-0x1.1987f9e9b8820p-7, 0xbf81abf5ea1ee0c0ULL}, /* -0.0086287700722639249, 0.041 */
    {0x1.1e39e9a29dfc2p-1, 0x3fdc6b99bed8622eULL}, /* 0.44406741749984036, 0.228 */
    {0x1.40bdff95fb192p-28, 0x3e340bdff896c3ccULL}, /* 4.6674130198116215e-09, 0.448 */
    {0x1.269380e2bb0eep+276, 0x4067ee5e0f9ca755ULL}, /* 191.44898205372252, 0.498 */
};
/* sin: the same */
static const struct unary_case sin_cases[] = {
    {0x1.0000000000000p-1, 0x3fdeaee8744b05f0ULL}, /* 0.47942553860420301, 0.408 */
    {0x1.921f9f01b866ep+1, 0x3ec6428a6aa44cd0ULL}, /* 2.65358979335273e-06, 0.208 */
    {0x1.4f8b588e368f1p-17, 0x3ee4f8b588e1e8a2ULL}, /* 9.9999999998333335e-06, 0.135 */
    {0x1.0000000000000p+22, 0x3fef34428f9492a2ULL}, /* 0.97512939494170703, 0.424 */
    {0x1.81cd6c8b43958p+13, 0xbfe687d5890974a5ULL}, /* -0.70408131375338157, 0.323 */
    {0x1.ffffe00000000p+19, 0xbfe3b32b2ca06654ULL}, /* -0.61562117305875086, 0.274 */
    {0x1.0f0cf064dd592p+73, 0xbfeb453ab76bf397ULL}, /* -0.85220084976718879, 0.439 */
    {0x1.921fb54442d18p+2, 0xbcb1a62633145c07ULL}, /* -2.4492935982947064e-16, 0.379 */
    {0x1.30a0a60000000p+4, 0x3fc821be9de3694dULL}, /* 0.18852980336562056, 0.051 */
    {0x1.1561b153a4608p+0, 0x3fec468d5596e73bULL}, /* 0.88361231533710993, 0.233 */
    {-0x1.8d5eb34671f54p+0, 0xbfeffe96696a0c17ULL}, /* -0.99982758129806626, 0.490 */
    {0x1.47496f95ff2d8p+19, 0xbfdb29bebcfbc395ULL}, /* -0.42442291694083539, 0.231 */
    {0x1.8957ba0000000p+14, 0xbfd5ed88c65f830eULL}, /* -0.34262294170734797, 0.398 */
    {-0x1.8d0c0b26e7738p+21, 0x3fe8447249696109ULL}, /* 0.7583552774258645, 0.044 */
    {0x1.6cadc60000000p+9, 0x3fdf233f491175f9ULL}, /* 0.48652631888930348, 0.224 */
    {0x1.3569be0000000p+5, 0x3fea8818eda549bbULL}, /* 0.8291134492413258, 0.269 */
    {-0x1.28a4d2e511320p+21, 0xbfd7a9706dec8941ULL}, /* -0.3697167466617835, 0.474 */
    {-0x1.231bf1bef8990p+1, 0xbfe8671c1d7a8eb2ULL}, /* -0.76258664853636149, 0.333 */
    {-0x1.66543c1cc8300p-3, 0xbfc6480eb60e6538ULL}, /* -0.17407401933159306, 0.207 */
    {-0x1.41e3955bf2fecp+20, 0xbf8b2fdd4b76666bULL}, /* -0.013274887910301921, 0.398 */
};
/* cos: the same */
static const struct unary_case cos_cases[] = {
    {0x1.0000000000000p-1, 0x3fec1528065b7d50ULL}, /* 0.87758256189037276, 0.116 */
    {0x1.921f9f01b866ep+1, 0xbfefffffffff8420ULL}, /* -0.99999999999647926, 0.229 */
    {0x1.4f8b588e368f1p-17, 0x3feffffffff920c8ULL}, /* 0.99999999995, 0.463 */
    {0x1.0000000000000p+22, 0x3fcc5e944c25ddfcULL}, /* 0.22163633077774125, 0.149 */
    {0x1.81cd6c8b43958p+13, 0x3fe6b94c3bbe24b8ULL}, /* 0.7101193587160628, 0.276 */
    {0x1.ffffe00000000p+19, 0x3fe937a45bd49642ULL}, /* 0.78804223952892749, 0.302 */
    {0x1.0f0cf064dd592p+73, 0x3fe0be2cef01c8f4ULL}, /* 0.52321478539513899, 0.075 */
    {0x1.921fb54442d18p+0, 0x3c91a62633145c07ULL}, /* 6.123233995736766e-17, 0.379 */
    {0x1.2ff9254b48a90p+20, 0xbfb940125775757bULL}, /* -0.098633905746700209, 0.430 */
    {-0x1.3462c8d7c6510p+20, 0xbfe077189a63ae04ULL}, /* -0.51453809885191548, 0.198 */
    {0x1.1b40d20000000p+16, 0x3fc30fe598015226ULL}, /* 0.14892263338210049, 0.390 */
    {0x1.10ba7a0000000p+8, 0xbfea967149a8f12fULL}, /* -0.83086456667618858, 0.335 */
    {0x1.ae8dfc0000000p+4, 0xbfca32a0ba552c6dULL}, /* -0.20467003916050733, 0.072 */
    {-0x1.40223e50b0b98p+20, 0x3fbb8c09133be7e9ULL}, /* 0.10760552138881931, 0.397 */
    {0x1.43792b30f29b8p+0, 0x3fd35ad21997f6edULL}, /* 0.30241825580001952, 0.191 */
    {-0x1.abbebe2529072p+1, 0xbfef5c6f745994aeULL}, /* -0.98003361439318382, 0.285 */
    {-0x1.0b6493579afe0p-2, 0x3feeea4a66f7a1ceULL}, /* 0.96609993086627255, 0.040 */
    {-0x1.9e5edb08bedecp+1, 0xbfefda888a718f05ULL}, /* -0.99542643584979429, 0.204 */
    {0x1.70752a6a2a5d0p+19, 0xbfef64fce70f79c1ULL}, /* -0.98107762459749648, 0.448 */
    {0x1.c24eba0000000p+8, 0xbfdf4ce10c80188cULL}, /* -0.48906732769717887, 0.089 */
};
/* pow: base, exponent, correctly rounded result (its value in the comment) */
static const struct pow_case pow_cases[] = {
    {0x1.3880000000000p+13, 0x1.0000000000000p-5, 0x3ff5561a91ba8144ULL}, /* 1.333521432163324 */
    {0x1.3880000000000p+13, 0x1.f000000000000p-1, 0x40bd4af12d0732c2ULL}, /* 7498.9420933245583 */
    {0x1.3880000000000p+17, 0x1.0000000000000p-1, 0x4079000000000000ULL}, /* 400 */
    {0x1.3880000000000p+17, 0x1.9000000000000p-1, 0x40c6b8dc9a9606e2ULL}, /* 11633.72346759163 */
    {0x1.0000000000000p+1, 0x1.0000000000000p-1, 0x3ff6a09e667f3bcdULL}, /* 1.4142135623730951 */
    {0x1.0000000000000p-1, 0x1.a666666666666p+1, 0x3fb9fdf8bcce533eULL}, /* 0.10153154954452945 */
    {0x1.c000000000000p+2, -0x1.2000000000000p+1, 0x3f89b2152a44b59cULL}, /* 0.012546696999005395 */
    {0x1.3880000000000p+17, 0x1.4063de5f8163cp+0, 0x4148dd2d283354f2ULL}, /* 3258970.3140665228 */
    {0x1.3880000000000p+13, -0x1.c0824ac41e798p-1, 0x3f348911ba6afe53ULL},
    {0x1.6d74322efcd19p+15, 0x1.0000000000000p-4, 0x3fff552afc76feacULL}, /* 1.9582929479510467 */
    {0x1.219065cf6583cp+15, 0x1.4000000000000p-3, 0x4014b3103af42d51ULL}, /* 5.1748666011365723 */
    {0x1.3880000000000p+17, 0x1.6000000000000p-2, 0x404ec0bedaab47c6ULL}, /* 61.505824407227507 */
    {0x1.262095b1ecfdfp+16, -0x1.ef9fc8ebed644p+1, 0x3c034fd8889eb78aULL},
    {0x1.3880000000000p+13, -0x1.0638e588f8db4p+0, 0x3f14f4d85d61a3a5ULL},
    {0x1.6d9f7c311f721p+16, 0x1.0000000000000p-4, 0x40005c44ce244c53ULL}, /* 2.0450531105830492 */
    {0x1.3880000000000p+13, 0x1.c000000000000p-2, 0x404c1df80dec17afULL}, /* 56.234132519034908 */
    {0x1.3880000000000p+13, 0x1.1985ae9a7139ep+1, 0x41c2b2f29c78cad0ULL}, /* 627434808.94368935 */
    {0x1.3880000000000p+17, 0x1.5000000000000p-1, 0x40a452c2618cc895ULL}, /* 2601.3796504969455 */
    {0x1.3880000000000p+17, 0x1.8000000000000p-4, 0x40089a3248890638ULL}, /* 3.0752912203613754 */
    {0x1.3880000000000p+13, 0x1.bc93e42ea8080p-3, 0x401d89a2dcc8ac38ULL}, /* 7.3844103333931841 */
};
static const struct unary_case sigmoid_cases[] = {
    {0x0.0p+0, 0x3fe0000000000000ULL}, /* 0.5 */
    {0x1.0000000000000p+0, 0x3fe764d4f5d5a2bdULL}, /* 0.7310585786300049 */
    {-0x1.0000000000000p+0, 0x3fd136561454ba86ULL}, /* 0.2689414213699951 */
    {0x1.e000000000000p+4, 0x3feffffffffffcb6ULL}, /* 0.99999999999990652 */
    {-0x1.e000000000000p+4, 0x3d3a56e0c2ac7cc0ULL}, /* 9.3576229688393001e-14 */
    {-0x1.5e00000000000p+9, 0x00d14f2b0fb9307fULL}, /* 9.8596765437597708e-305 */
    {0x1.12e0be826d695p-30, 0x3fe0000000225c18ULL}, /* 0.50000000025000002 */
    {-0x1.19de197a6d4b4p+3, 0x3f2396e5cb8fa937ULL}, /* 0.00014945559612950809 */
    {-0x1.175216d48484cp+4, 0x3e5c218cbf7071c7ULL}, /* 2.619908553653994e-08 */
    {0x1.e2fd853350878p+2, 0x3feffbada157d32bULL}, /* 0.99947244179074823 */
    {-0x1.560d0c69df60ep+4, 0x3e01d96d5105a3a8ULL}, /* 5.1948370782475211e-10 */
    {0x1.cb4a26d69baa0p+0, 0x3feb700f71d35bc3ULL}, /* 0.85742923957410999 */
};
static const struct unary_case silu_cases[] = {
    {0x0.0p+0, 0x0000000000000000ULL}, /* 0 */
    {0x1.0000000000000p+0, 0x3fe764d4f5d5a2bdULL}, /* 0.7310585786300049 */
    {-0x1.0000000000000p+0, 0xbfd136561454ba86ULL}, /* -0.2689414213699951 */
    {0x1.4000000000000p+3, 0x4023ffc47f00c5b5ULL}, /* 9.999546021312975 */
    {-0x1.4000000000000p+3, 0xbf3dc07f9d254fb7ULL}, /* -0.00045397868702434389 */
    {-0x1.9000000000000p+5, 0xbbc6c549ea027672ULL}, /* -9.6437492398195903e-21 */
    {0x1.a000000000000p+1, 0x4009078d5f757b91ULL}, /* 3.1286876161315793 */
    {-0x1.03069bf4dec30p+4, 0xbeb94c7f57fc291eULL}, /* -1.5079270667151064e-06 */
    {-0x1.acde77a44bf24p+3, 0xbef53f2705536be9ULL}, /* -2.0262421760768651e-05 */
    {-0x1.aaa98a45965f2p+3, 0xbef6a57da0fc82bbULL}, /* -2.159733600060291e-05 */
    {-0x1.80f4401c802a0p-1, 0xbfced618169ba745ULL}, /* -0.24090863326937942 */
    {0x1.1d31f968efe90p+2, 0x40119ec4b4ba21e1ULL}, /* 4.4050472487074055 */
};
static const struct unary_case softplus_cases[] = {
    {0x0.0p+0, 0x3fe62e42fefa39efULL}, /* 0.69314718055994529 */
    {0x1.0000000000000p+0, 0x3ff5031eafefb049ULL}, /* 1.3132616875182228 */
    {-0x1.0000000000000p+0, 0x3fd40c7abfbec125ULL}, /* 0.31326168751822286 */
    {0x1.3fd70a3d70a3dp+4, 0x4033fd70a3dffb47ULL}, /* 19.990000002081867 */
    {0x1.4000000000000p+4, 0x403400000008da43ULL}, /* 20.000000002061153 */
    {0x1.4800000000000p+4, 0x4034800000000000ULL}, /* 20.5 */
    {-0x1.4000000000000p+5, 0x3c539792499b1a24ULL}, /* 4.2483542552915889e-18 */
    {-0x1.74c0000000000p+9, 0x0000000000000000ULL}, /* 0 */
    {0x1.00efe1dffb10cp+3, 0x40200f28cfa4e7e7ULL}, /* 8.029608239059554 */
    {0x1.47d25b96da83cp+4, 0x40347d25b96da83cULL}, /* 20.488856877586144 */
    {0x1.c3af42e64c70cp+3, 0x402c3af44742afddULL}, /* 14.115144945993899 */
    {0x1.90398847dd274p+3, 0x4029039900a9709eULL}, /* 12.507026692088683 */
};

/* The long double references need a real >= 64-bit significand at run time:
 * valgrind, for one, computes x87 long double in double precision. */
static int have_long_double(void) {
    volatile long double one = 1.0L, tiny = 0x1p-63L;
    return LDBL_MANT_DIG >= 64 && one + tiny != one;
}

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void check_unary(const char *name, double (*f)(double), const struct unary_case *c, size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double got = f(c[i].x);
        if (dbits(got) != c[i].want) {
            print_error("%s(%a) = %a (0x%016llx), want 0x%016llx\n", name, c[i].x, got,
                        (unsigned long long)dbits(got), (unsigned long long)c[i].want);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static void test_exact_tables(void **state) {
    (void)state;
    check_unary("exp", ds4_det_exp, exp_cases, N_OF(exp_cases));
    check_unary("log", ds4_det_log, log_cases, N_OF(log_cases));
    check_unary("log1p", ds4_det_log1p, log1p_cases, N_OF(log1p_cases));
    check_unary("sin", ds4_det_sin, sin_cases, N_OF(sin_cases));
    check_unary("cos", ds4_det_cos, cos_cases, N_OF(cos_cases));
    int bad = 0;
    for (size_t i = 0; i < N_OF(pow_cases); i++) {
        double got = ds4_det_pow(pow_cases[i].b, pow_cases[i].e);
        if (dbits(got) != pow_cases[i].want) {
            print_error("pow(%a, %a) = %a, want 0x%016llx\n", pow_cases[i].b, pow_cases[i].e,
                        got, (unsigned long long)pow_cases[i].want);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* The activation helpers are compositions with several roundings, so their
 * expected bits were computed from their definitions in detmath.h with IEEE
 * doubles around correctly rounded exp / log1p values. */
static void test_activation_tables(void **state) {
    (void)state;
    check_unary("sigmoid", ds4_det_sigmoid, sigmoid_cases, N_OF(sigmoid_cases));
    check_unary("silu", ds4_det_silu, silu_cases, N_OF(silu_cases));
    check_unary("softplus", ds4_det_softplus, softplus_cases, N_OF(softplus_cases));
}

static void test_sincos_matches_sin_cos(void **state) {
    (void)state;
    for (size_t i = 0; i < N_OF(sin_cases); i++) {
        double s, c;
        ds4_det_sincos(sin_cases[i].x, &s, &c);
        assert_true(dbits(s) == sin_cases[i].want);
        assert_true(dbits(c) == dbits(ds4_det_cos(sin_cases[i].x)));
    }
}

/* ---- special values ---- */

static void assert_bits(double got, double want) {
    if (dbits(got) != dbits(want) && !(isnan(got) && isnan(want))) {
        print_error("got %a, want %a\n", got, want);
        fail();
    }
}

static void test_specials(void **state) {
    (void)state;
    const double inf = INFINITY, nan = NAN;
    assert_bits(ds4_det_exp(0.0), 1.0);
    assert_bits(ds4_det_exp(-0.0), 1.0);
    assert_bits(ds4_det_exp(-inf), 0.0);
    assert_bits(ds4_det_exp(inf), inf);
    assert_bits(ds4_det_exp(nan), nan);
    assert_bits(ds4_det_exp(709.78), 0x1.fe9ce5c4c52b4p+1023); /* last finite region */
    assert_bits(ds4_det_exp(0x1.62e42fefa39fp+9), inf);       /* just above ln(DBL_MAX) */
    assert_bits(ds4_det_exp(710.0), inf);
    assert_bits(ds4_det_exp(1000.0), inf);
    assert_bits(ds4_det_exp(-745.0), 0x0.0000000000001p-1022); /* 0.57 * 2^-1074: rounds up */
    assert_bits(ds4_det_exp(-746.0), 0.0);
    assert_bits(ds4_det_exp(-1e300), 0.0);

    assert_bits(ds4_det_log(1.0), 0.0);
    assert_bits(ds4_det_log(0.0), -inf);
    assert_bits(ds4_det_log(-0.0), -inf);
    assert_bits(ds4_det_log(-1.0), nan);
    assert_bits(ds4_det_log(-inf), nan);
    assert_bits(ds4_det_log(inf), inf);
    assert_bits(ds4_det_log(nan), nan);
    assert_bits(ds4_det_log(0x1p-1074), -0x1.74385446d71c3p+9); /* -1074 ln 2 */
    assert_bits(ds4_det_log(DBL_MAX), 0x1.62e42fefa39efp+9);

    assert_bits(ds4_det_log1p(0.0), 0.0);
    assert_bits(ds4_det_log1p(-0.0), -0.0);
    assert_bits(ds4_det_log1p(-1.0), -inf);
    assert_bits(ds4_det_log1p(-1.5), nan);
    assert_bits(ds4_det_log1p(inf), inf);
    assert_bits(ds4_det_log1p(nan), nan);
    assert_bits(ds4_det_log1p(0x1p-1074), 0x1p-1074);
    assert_bits(ds4_det_log1p(-0x1p-60), -0x1p-60);
    assert_bits(ds4_det_log1p(DBL_MAX), 0x1.62e42fefa39efp+9);

    assert_bits(ds4_det_sin(0.0), 0.0);
    assert_bits(ds4_det_sin(-0.0), -0.0);
    assert_bits(ds4_det_sin(0x1p-1074), 0x1p-1074);
    assert_bits(ds4_det_sin(-0x1p-30), -0x1p-30);
    assert_bits(ds4_det_sin(inf), nan);
    assert_bits(ds4_det_sin(-inf), nan);
    assert_bits(ds4_det_sin(nan), nan);
    assert_bits(ds4_det_cos(0.0), 1.0);
    assert_bits(ds4_det_cos(-0.0), 1.0);
    assert_bits(ds4_det_cos(0x1p-30), 1.0);
    assert_bits(ds4_det_cos(inf), nan);
    assert_bits(ds4_det_cos(nan), nan);
    /* sin/cos are odd/even functions bit for bit. */
    assert_bits(ds4_det_sin(-1234.5), -ds4_det_sin(1234.5));
    assert_bits(ds4_det_cos(-1234.5), ds4_det_cos(1234.5));
    /* The largest double: the reduction must still be exact.  Values from
     * mpmath: sin(DBL_MAX) = 0.00496195478918406..., cos = -0.99998768942655... */
    assert_bits(ds4_det_sin(DBL_MAX), 0x1.452fc98b34e97p-8);
    assert_bits(ds4_det_cos(DBL_MAX), -0x1.fffe62ecfab75p-1);

    assert_bits(ds4_det_pow(123.0, 0.0), 1.0);
    assert_bits(ds4_det_pow(nan, 0.0), 1.0);
    assert_bits(ds4_det_pow(1.0, nan), 1.0);
    assert_bits(ds4_det_pow(1.0, inf), 1.0);
    assert_bits(ds4_det_pow(nan, 2.0), nan);
    assert_bits(ds4_det_pow(2.0, nan), nan);
    assert_bits(ds4_det_pow(-2.0, 2.0), nan);
    assert_bits(ds4_det_pow(0.0, 3.0), 0.0);
    assert_bits(ds4_det_pow(0.0, -3.0), inf);
    assert_bits(ds4_det_pow(inf, 2.0), inf);
    assert_bits(ds4_det_pow(inf, -2.0), 0.0);
    assert_bits(ds4_det_pow(2.0, 1024.0), inf);
    assert_bits(ds4_det_pow(2.0, -1074.0), 0x1p-1074);
    assert_bits(ds4_det_pow(2.0, -1076.0), 0.0);
    assert_bits(ds4_det_pow(2.0, 10.0), 1024.0);
    assert_bits(ds4_det_pow(10.0, 22.0), 1e22); /* exact, and needs > 53 bits on the way */
    assert_bits(ds4_det_pow(0.5, inf), 0.0);
    assert_bits(ds4_det_pow(2.0, inf), inf);
    assert_bits(ds4_det_pow(2.0, -inf), 0.0);

    assert_bits(ds4_det_sigmoid(inf), 1.0);
    assert_bits(ds4_det_sigmoid(-inf), 0.0);
    assert_bits(ds4_det_sigmoid(nan), nan);
    assert_bits(ds4_det_silu(inf), inf);
    assert_bits(ds4_det_silu(-1000.0), -0.0); /* -1000 / Inf, as torch's x / (1 + exp(-x)) */
    assert_bits(ds4_det_softplus(20.0000001), 20.0000001);
    assert_bits(ds4_det_softplus(-inf), 0.0);
    assert_bits(ds4_det_softplus(inf), inf);
}

/* ---- comparison with the C library's long double functions ---- */

static uint64_t rng = 0x243f6a8885a308d3ULL;

static uint64_t rnd(void) {
    return tu_splitmix64(&rng);
}

static double uni(double a, double b) {
    return tu_uniform(&rng, a, b);
}

/* Uniform in log scale over [2^lo, 2^hi). */
static double logu(double lo, double hi) {
    return exp2(uni(lo, hi));
}

/* |got - ref| in ulps of the double nearest ref (2^-1074 for subnormals). */
static double ulp_err(double got, long double ref) {
    double r = (double)ref;
    if (isinf(r) || isinf(got))
        return got == r ? 0.0 : INFINITY;
    int e;
    frexp(r, &e);
    double u = r == 0.0 || e - 53 < -1074 ? 0x1p-1074 : ldexp(1.0, e - 53);
    return (double)(fabsl((long double)got - ref) / u);
}

enum { N_RANDOM = 100000 };

typedef double (*gen_fn)(void);

static double g_exp_all(void) { return uni(-745.1, 709.78); }
static double g_exp_small(void) { return uni(-1.0, 1.0); }
static double g_exp_softmax(void) { return uni(-60.0, 0.0); }
static double g_exp_subnormal(void) { return uni(-745.1, -708.4); }
static double g_log_all(void) { return logu(-1074.0, 1024.0); }
static double g_log_near1(void) { return uni(0.9, 1.1); }
static double g_log_sub(void) { return uni(0.0, 0x1p-1022); }
static double g_log1p_unit(void) { return uni(-1.0, 1.0); }
static double g_log1p_small(void) { return uni(-0.01, 0.01) * logu(-40.0, 0.0); }
static double g_log1p_big(void) { return logu(0.0, 1024.0); }
static double g_trig_rope(void) {
    /* f32 RoPE angles: fl32(fl32(p) * f32 frequency), p < 2^20. */
    float p = (float)(rnd() % (1u << 20)), f = (float)exp2(-uni(0.0, 24.0));
    return p * f;
}
static double g_trig_2p22(void) { return uni(-0x1p22, 0x1p22); }
static double g_trig_small(void) { return uni(-4.0, 4.0); }
static double g_trig_huge(void) { return (rnd() & 1 ? -1 : 1) * logu(22.0, 1024.0); }
static double g_trig_tiny(void) { return (rnd() & 1 ? -1 : 1) * logu(-40.0, -2.0); }

struct ld_case {
    const char *name;
    double (*f)(double);
    long double (*ref)(long double);
    gen_fn gen;
};

static double compare_range(const struct ld_case *c, long *not_nearest) {
    double worst = 0.0;
    *not_nearest = 0;
    for (int i = 0; i < N_RANDOM; i++) {
        double x = c->gen();
        double got = c->f(x);
        long double ref = c->ref(x);
        double e = ulp_err(got, ref);
        if (!(e <= worst))
            worst = e;
        if (got != (double)ref)
            (*not_nearest)++;
        if (!(e <= 1.0)) {
            print_error("%s(%a) = %a, long double says %La (%.3f ulp)\n", c->name, x, got, ref, e);
            break;
        }
    }
    return worst;
}

static void test_vs_long_double(void **state) {
    (void)state;
    if (!have_long_double()) {
        print_message("skipping: long double has fewer than 64 bits here (or under valgrind)\n");
        skip();
    }
    const struct ld_case cases[] = {
        {"exp", ds4_det_exp, expl, g_exp_all},
        {"exp", ds4_det_exp, expl, g_exp_small},
        {"exp", ds4_det_exp, expl, g_exp_softmax},
        {"exp", ds4_det_exp, expl, g_exp_subnormal},
        {"log", ds4_det_log, logl, g_log_all},
        {"log", ds4_det_log, logl, g_log_near1},
        {"log", ds4_det_log, logl, g_log_sub},
        {"log1p", ds4_det_log1p, log1pl, g_log1p_unit},
        {"log1p", ds4_det_log1p, log1pl, g_log1p_small},
        {"log1p", ds4_det_log1p, log1pl, g_log1p_big},
        {"sin", ds4_det_sin, sinl, g_trig_rope},
        {"sin", ds4_det_sin, sinl, g_trig_2p22},
        {"sin", ds4_det_sin, sinl, g_trig_small},
        {"sin", ds4_det_sin, sinl, g_trig_huge},
        {"sin", ds4_det_sin, sinl, g_trig_tiny},
        {"cos", ds4_det_cos, cosl, g_trig_rope},
        {"cos", ds4_det_cos, cosl, g_trig_2p22},
        {"cos", ds4_det_cos, cosl, g_trig_small},
        {"cos", ds4_det_cos, cosl, g_trig_huge},
        {"cos", ds4_det_cos, cosl, g_trig_tiny},
    };
    int bad = 0;
    for (size_t i = 0; i < N_OF(cases); i++) {
        long nn;
        double worst = compare_range(&cases[i], &nn);
        /* Results that differ from the long double value rounded to double
         * are the reference's own double rounding (~1 in 4000); we measured
         * every one of them against mpmath while writing this. */
        print_message("%-6s range %2zu: max %.4f ulp, %ld of %d differ from RN(long double)\n",
                      cases[i].name, i, worst, nn, N_RANDOM);
        bad += !(worst <= 1.0);
    }
    assert_int_equal(bad, 0);
}

static void test_pow_vs_long_double(void **state) {
    (void)state;
    if (!have_long_double()) {
        tu_skipping("long double has fewer than 64 bits here (or under valgrind)");
        skip();
    }
    double worst = 0.0;
    for (int i = 0; i < N_RANDOM; i++) {
        double b = i % 2 ? logu(-30.0, 30.0) : (i % 4 ? 10000.0 : 160000.0);
        double e = i % 2 ? uni(-20.0, 20.0) : (double)(rnd() % 64) / 64;
        double got = ds4_det_pow(b, e);
        double err = ulp_err(got, powl(b, e));
        if (!(err <= worst))
            worst = err;
        if (!(err <= 1.0)) {
            print_error("pow(%a, %a) = %a: %.3f ulp\n", b, e, got, err);
            fail();
        }
    }
    print_message("pow: max %.4f ulp over %d inputs\n", worst, N_RANDOM);
}

/* ds4_det_pow_f32 must be the correctly rounded float: compare with the long
 * double power rounded to float, skipping the (rare) inputs where the long
 * double value is too close to a float tie to decide. */
static void test_pow_f32(void **state) {
    (void)state;
    if (!have_long_double()) {
        tu_skipping("long double has fewer than 64 bits here (or under valgrind)");
        skip();
    }
    int checked = 0;
    for (int i = 0; i < N_RANDOM; i++) {
        double b = i % 2 ? logu(-10.0, 20.0) : (i % 4 ? 10000.0 : 160000.0);
        double e = i % 2 ? uni(-8.0, 8.0) : (double)(rnd() % 128) / 128;
        long double v = powl(b, e);
        float want = (float)v;
        /* distance of v from the float tie nearest to it, relative to v */
        float up = nextafterf(want, INFINITY), dn = nextafterf(want, 0.0f);
        long double tie = v > want ? ((long double)want + up) / 2 : ((long double)want + dn) / 2;
        if (fabsl(v - tie) < fabsl(v) * 0x1p-50L)
            continue;
        checked++;
        float got = ds4_det_pow_f32(b, e);
        if (fbits(got) != fbits(want)) {
            print_error("pow_f32(%a, %a) = %a, want %a\n", b, e, got, want);
            fail();
        }
    }
    assert_true(checked > N_RANDOM - 10);
}

static void test_f32_round_sum(void **state) {
    (void)state;
    /* 1 + 2^-24 is a tie between the floats 1 and 1 + 2^-23; the tiny second
     * term decides it, although a double sum would absorb it. */
    assert_true(fbits(ds4_det_round_sum_f32(1.0 + 0x1p-24, 0x1p-80)) == fbits(1.0f + 0x1p-23f));
    assert_true(fbits(ds4_det_round_sum_f32(1.0 + 0x1p-24, -0x1p-80)) == fbits(1.0f));
    assert_true(fbits(ds4_det_round_sum_f32(1.0 + 0x1p-24, 0.0)) == fbits(1.0f)); /* exact tie: even */
    /* -(1 + 1.5*2^-23) is a tie that would go to the even -(1 + 2^-22); a
     * nudge toward zero puts it below the tie. */
    assert_true(fbits(ds4_det_round_sum_f32(-1.0 - 3 * 0x1p-24, 0.0)) == fbits(-1.0f - 0x1p-22f));
    assert_true(fbits(ds4_det_round_sum_f32(-1.0 - 3 * 0x1p-24, 0x1p-90)) == fbits(-1.0f - 0x1p-23f));
    /* Below a power of two: 2 - 2^-24 is the tie between 2 - 2^-23 and 2
     * (even: 2); a nudge down makes it round down. */
    assert_true(fbits(ds4_det_round_sum_f32(2.0 - 0x1p-24, 0.0)) == fbits(2.0f));
    assert_true(fbits(ds4_det_round_sum_f32(2.0 - 0x1p-24, -0x1p-90)) == fbits(2.0f - 0x1p-23f));
    assert_true(fbits(ds4_det_round_sum_f32(2.0 - 0x1p-24, 0x1p-90)) == fbits(2.0f));
    assert_true(fbits(ds4_det_round_sum_f32(3.0, -3.0)) == fbits(0.0f));
    assert_true(fbits(ds4_det_round_sum_f32(1e300, 1e300)) == fbits(INFINITY));

    /* Random sums against long double, which holds them exactly when the
     * exponents are within 11 of each other (53 + 11 <= 64 bits). */
    if (!have_long_double())
        return;
    for (int i = 0; i < N_RANDOM; i++) {
        double a = uni(-1.0, 1.0) * exp2((double)(int)(rnd() % 60) - 30);
        double b = ldexp(uni(-1.0, 1.0), ilogb(a) - (int)(rnd() % 10));
        long double exact = (long double)a + b;
        assert_true((long double)a + b - a == b); /* the sum really is exact */
        float want = (float)exact;
        if (fbits(ds4_det_round_sum_f32(a, b)) != fbits(want)) {
            print_error("round_sum(%a, %a) = %a, want %a\n", a, b, ds4_det_round_sum_f32(a, b), want);
            fail();
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_tables),
        cmocka_unit_test(test_activation_tables),
        cmocka_unit_test(test_sincos_matches_sin_cos),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_vs_long_double),
        cmocka_unit_test(test_pow_vs_long_double),
        cmocka_unit_test(test_pow_f32),
        cmocka_unit_test(test_f32_round_sum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
