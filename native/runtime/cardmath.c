/* The card's arithmetic, one copy: source registers, fidelity phases, FPU products into a BF16 or FP32 DST, the
 * reductions and the SFPU functions (exact and approximate modes). The simulator's host build of the kernel API
 * (native/kernel_api) runs every compute op through these functions; the Python models (kohakutt/kernels/cardmath.py,
 * the programs' Python twins) are tested equal to them. docs/concepts/numerics.md has the model and its sources.
 *
 * Built with -ffp-contract=off (see _native.CFLAGS): every float operation below rounds exactly as written, as NumPy's
 * element-wise operations do, so the Python models can agree to the bit.
 */
#include "ktt_runtime.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TILE 32
#define TILE_ELEMS (TILE * TILE)
#define MVMUL_K 16 /* products one MVMUL sums before adding them to DST */
#define PI 3.141592653589793 /* Python's math.pi */

#if defined(__GNUC__)
#define KTT_INLINE static inline __attribute__((always_inline))
#else
#define KTT_INLINE static inline
#endif

KTT_INLINE uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

KTT_INLINE float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

KTT_INLINE int finite(float f) { return (bits(f) & 0x7f800000u) != 0x7f800000u; }

/* float32 keeping its top `sig` significant bits (implicit one included), truncating: a source-register cut. */
KTT_INLINE float cut(float x, int sig) { return from_bits(bits(x) & (0xffffffffu << (24 - sig))); }

/* Round to bfloat16 as the packer and a 16-bit DST do (nearest even; every NaN becomes 0x7fc0; overflow -> Inf). */
KTT_INLINE float bf16(float x) {
    uint32_t u = bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return from_bits(0x7fc00000u);
    return from_bits(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
}

KTT_INLINE float to_dst(float x, int fp32_acc) { return fp32_acc ? x : bf16(x); }

/* ---- source registers and fidelity -------------------------------------------------------------------------- */

/* The multiplier's view of a source-register value in one fidelity phase (KTT_PHASE_ALL: every bit any phase
 * uses). SrcA keeps 10 significant bits (8 from a BF16 source) in two slices: even phases multiply its top 5, odd phases the rest. SrcB keeps 11 (8): phases 0-1
 * multiply its top 7, phases 2-3 the rest. Phase p pairs SrcA slice p & 1 with SrcB slice p >> 1. A slice is the
 * value of those bits alone (the low slice is full - high, exact). Inf and NaN take part in phase 0 only: in later
 * phases their slices are 0, so Inf * 1 stays Inf instead of meeting a 0 slice (Inf * 0 = NaN). */
KTT_INLINE int slice_bits(int operand, int high, int fp32_acc) {
    if (high) return operand == KTT_SRCA ? 5 : 7;
    return operand == KTT_SRCA ? (fp32_acc ? 10 : 8) : (fp32_acc ? 11 : 8);
}

KTT_INLINE float fidelity_slice(float x, int operand, int phase, int fp32_acc) {
    const int all = slice_bits(operand, 0, fp32_acc), high = slice_bits(operand, 1, fp32_acc);
    if (phase == KTT_PHASE_ALL) return cut(x, all);
    const int low_slice = operand == KTT_SRCA ? (phase & 1) : (phase >> 1);
    float full = cut(x, all), hi = cut(full, high);
    float v = low_slice ? (finite(full) ? full - hi : 0.0f) : hi;
    return (phase > 0 && !finite(v)) ? 0.0f : v;
}

void ktt_source_register(const float *x, float *out, size_t n, int fp32_acc) {
    for (size_t i = 0; i < n; i++) out[i] = cut(x[i], fp32_acc ? 11 : 8);
}

int ktt_slice_bits(int operand, int high, int fp32_acc) { return slice_bits(operand, high, fp32_acc); }

void ktt_fidelity_slice(const float *x, float *out, size_t n, int operand, int phase, int fp32_acc) {
    for (size_t i = 0; i < n; i++) out[i] = fidelity_slice(x[i], operand, phase, fp32_acc);
}

/* ---- FPU ---------------------------------------------------------------------------------------------------- */

/* ELWMUL: each phase's product (exact) is added to DST in turn, a 16-bit DST rounded after every addition. */
void ktt_fpu_mul(const float *srca, const float *srcb, float *dst, size_t n, int phases, int fp32_acc) {
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int p = 0; p < phases; p++) {
            float prod = fidelity_slice(srca[i], KTT_SRCA, p, fp32_acc) * fidelity_slice(srcb[i], KTT_SRCB, p, fp32_acc);
            acc = to_dst(p == 0 ? prod : acc + prod, fp32_acc);
        }
        dst[i] = acc;
    }
}

/* MVMUL over one 32 x 32 x 32 tile product: DST += in0 @ in1, in0 in SrcB and in1 in SrcA (already source-register
 * values). FP32 DST: every phase's products are summed exactly (in double; exact for all but extreme exponent
 * spreads) and added to DST with one rounding to FP32. BF16 DST: for each phase, each 16-wide K half is summed (in
 * double, then rounded once to FP32), added to DST and DST rounded to BF16: the LLK's order, phase by phase. */
void ktt_fpu_matmul_tile(float *dst, const float *in0, const float *in1, int phases, int fp32_acc) {
    float b[4][TILE_ELEMS], a[4][TILE_ELEMS];
    for (int p = 0; p < phases; p++) {
        /* a phase reuses slices: only compute the ones it has */
        for (int i = 0; i < TILE_ELEMS; i++) {
            b[p][i] = fidelity_slice(in0[i], KTT_SRCB, p, fp32_acc);
            a[p][i] = fidelity_slice(in1[i], KTT_SRCA, p, fp32_acc);
        }
    }
    if (fp32_acc) {
        double acc[TILE_ELEMS];
        for (int i = 0; i < TILE_ELEMS; i++) acc[i] = 0.0;
        for (int p = 0; p < phases; p++)
            for (int i = 0; i < TILE; i++)
                for (int k = 0; k < TILE; k++) {
                    const double bik = b[p][i * TILE + k];
                    const float *arow = &a[p][k * TILE];
                    double *crow = &acc[i * TILE];
                    for (int j = 0; j < TILE; j++) crow[j] += bik * (double)arow[j];
                }
        for (int i = 0; i < TILE_ELEMS; i++) dst[i] = (float)((double)dst[i] + acc[i]);
        return;
    }
    for (int p = 0; p < phases; p++)
        for (int h = 0; h < TILE; h += MVMUL_K) {
            double acc[TILE_ELEMS];
            for (int i = 0; i < TILE_ELEMS; i++) acc[i] = 0.0;
            for (int i = 0; i < TILE; i++)
                for (int k = h; k < h + MVMUL_K; k++) {
                    const double bik = b[p][i * TILE + k];
                    const float *arow = &a[p][k * TILE];
                    double *crow = &acc[i * TILE];
                    for (int j = 0; j < TILE; j++) crow[j] += bik * (double)arow[j];
                }
            for (int i = 0; i < TILE_ELEMS; i++) dst[i] = bf16(dst[i] + (float)acc[i]);
        }
}

/* NumPy's float32 pairwise sum (what ndarray.sum does along a contiguous axis): blocks of up to 128 values summed
 * with eight interleaved accumulators, larger runs split in halves at a multiple of 8. The Python models reduce
 * with ndarray.sum, so this order keeps them equal to the bit. */
static float pairwise(const float *a, size_t n, size_t stride) {
    if (n < 8) {
        float res = 0.0f;
        for (size_t i = 0; i < n; i++) res += a[i * stride];
        return res;
    }
    if (n <= 128) {
        float r[8];
        size_t i;
        for (int j = 0; j < 8; j++) r[j] = a[(size_t)j * stride];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[(i + (size_t)j) * stride];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i * stride];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2, stride) + pairwise(a + n2 * stride, n - n2, stride);
}

/* reduce_tile: sum / avg scale the data (SrcA) by the scaler (SrcB) at fidelity into an FP32 intermediate and sum
 * a row (dim 0: over W, into column 0), a column (dim 1: over H, into row 0) or the tile (dim 2, into (0, 0)); max
 * takes the largest scaled value (GMPOOL: no fidelity, exact in double). `dst` accumulates (sum) or keeps the larger
 * (max; `fresh` = DST held nothing there yet), rounded to the DST format. */
void ktt_fpu_reduce_tile(float *dst, const float *x, float scaler, int pool_max, int dim, int phases, int fp32_acc,
                         int fresh) {
    float red[TILE];
    int count = dim == 2 ? 1 : TILE;
    if (pool_max) {
        for (int r = 0; r < count; r++) {
            double best = -INFINITY;
            int nan = 0;
            for (int t = 0; t < (dim == 2 ? TILE_ELEMS : TILE); t++) {
                int idx = dim == 0 ? r * TILE + t : dim == 1 ? t * TILE + r : t;
                double v = (double)x[idx] * (double)scaler;
                if (v != v) nan = 1;
                best = v > best ? v : best;
            }
            red[r] = nan ? NAN : (float)best;
        }
    } else {
        float scaled[TILE_ELEMS], sc[TILE_ELEMS];
        for (int i = 0; i < TILE_ELEMS; i++) sc[i] = scaler;
        ktt_fpu_mul(x, sc, scaled, TILE_ELEMS, phases, 1);
        for (int r = 0; r < count; r++) {
            if (dim == 0) {
                red[r] = 0.0f + pairwise(scaled + r * TILE, TILE, 1);
            } else if (dim == 1) {
                float s = 0.0f; /* NumPy sums a strided axis row after row */
                for (int t = 0; t < TILE; t++) s += scaled[t * TILE + r];
                red[r] = s;
            } else {
                red[r] = 0.0f + pairwise(scaled, TILE_ELEMS, 1);
            }
        }
    }
    for (int r = 0; r < count; r++) {
        int idx = dim == 0 ? r * TILE : dim == 1 ? r : 0;
        float v;
        if (pool_max) {
            float old = dst[idx];
            v = fresh ? red[r] : (old != old || red[r] != red[r]) ? NAN : (old > red[r] ? old : red[r]);
        } else {
            v = dst[idx] + red[r];
        }
        dst[idx] = to_dst(v, fp32_acc);
    }
}

/* ---- SFPU --------------------------------------------------------------------------------------------------- */

static double sigmoid64(double x) {
    double e = exp(-fabs(x)); /* no cancellation on either side */
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}


/* Exact modes: double math rounded once to float32 (a correctly rounded FP32 result for all practical purposes). */
static double exact(int op, double x, double param) {
    switch (op) {
    case KTT_SFPU_EXP: return exp(x);
    case KTT_SFPU_LOG: return log(x);
    case KTT_SFPU_SQRT: return sqrt(x);
    case KTT_SFPU_RSQRT: return 1.0 / sqrt(x);
    case KTT_SFPU_RECIP: return 1.0 / x;
    case KTT_SFPU_SIGMOID: return sigmoid64(x);
    case KTT_SFPU_TANH: return tanh(x);
    case KTT_SFPU_GELU: return 0.5 * x * erfc(-x / 1.4142135623730951);
    case KTT_SFPU_GELU_TANH: return x * sigmoid64(2.0 * sqrt(2.0 / PI) * (x + 0.044715 * pow(x, 3.0)));
    case KTT_SFPU_SILU: return x * sigmoid64(x);
    case KTT_SFPU_SIN: return sin(x);
    case KTT_SFPU_COS: return cos(x);
    case KTT_SFPU_ERF: return erf(x);
    case KTT_SFPU_RELU: return x >= 0.0 ? x : (x == x ? 0.0 : x); /* NumPy's maximum(x, 0): -0.0 and NaN kept */
    case KTT_SFPU_ABS: return fabs(x);
    case KTT_SFPU_NEG: return -x;
    case KTT_SFPU_SQUARE: return x * x;
    case KTT_SFPU_ADD: return x + param;
    case KTT_SFPU_SUB: return x - param;
    case KTT_SFPU_MUL: return x * param;
    case KTT_SFPU_DIV: return x / param;
    case KTT_SFPU_RSUB: return param - x;
    default: return NAN;
    }
}

/* Schraudolph's exp (tt-llk FAST_APPROX with CLAMP_NEGATIVE): clamp at -88.5, one FP32 MAD t = A*x + (B - C), |t|
 * rounded to an unsigned 16-bit integer (ties away, saturating), shifted into the exponent and top mantissa. */
static float exp_approx(float x) {
    const float a = 256.0f * 1.4426950408889634f;
    float xc = x > -88.5f ? x : -88.5f;
    if (x != x) xc = x;
    float t = (float)((double)xc * (double)a + 32500.818359375);
    double m = floor(fabs((double)t) + 0.5);
    uint32_t i = (m != m) ? 65535u : (m > 65535.0 ? 65535u : (uint32_t)m);
    return from_bits(i << 15);
}

/* SFPARECIP (Blackhole, about 7 bits): exponent 253 - e, a 7-bit mantissa from a 128-entry table of the reciprocals
 * of the interval midpoints; |x| < 2^-126 gives Inf, |x| >= 2^126 (and Inf, NaN) gives 0; the sign is kept. */
static float recip_approx(float x) {
    uint32_t u = bits(x), sign = u & 0x80000000u, mag = u & 0x7fffffffu;
    if (mag < 0x00800000u) return from_bits(0x7f800000u | sign);
    if (mag >= 0x7e800000u) return from_bits(sign);
    uint32_t e = mag >> 23, i = (mag >> 16) & 0x7fu;
    double q = floor(128.0 * (255.0 - 2.0 * i) / (257.0 + 2.0 * i) + 0.5);
    uint32_t m = q > 127.0 ? 127u : (uint32_t)q;
    return from_bits(((253u - e) << 23) | (m << 16) | sign);
}

/* SFPLUTFP32's 16-bit coefficient: FP16 layout, but exponent 0 is a normal number and exponent 31 means 0. */
static double lut16(uint16_t code) {
    int e = (code >> 10) & 0x1f, m = code & 0x3ff;
    if (e == 0x1f) return 0.0;
    return ((code >> 15) ? -1.0 : 1.0) * (1.0 + m / 1024.0) * ldexp(1.0, e - 15);
}

/* The 6-piece SFPLUTFP32: A_i * |x| + B_i in one FP32 MAD, the piece chosen by |x| against five cuts. */
static float lut6(float x, const double *cuts, const uint16_t *slopes, const uint16_t *offsets) {
    double ax = fabs((double)x);
    int piece = 0;
    while (piece < 5 && ax >= cuts[piece]) piece++;
    return (float)(lut16(slopes[piece]) * ax + lut16(offsets[piece]));
}

/* tt-llk ckernel_sfpu_gelu.h (_init_gelu_) and ckernel_sfpu_sigmoid.h (_init_sigmoid_) tables. */
static const double GELU_CUTS[5] = {0.5, 1.0, 1.5, 2.0, 3.0};
static const uint16_t GELU_A[6] = {0x322B, 0x37E7, 0x38F3, 0x38E1, 0x3852, 0x3800};
static const uint16_t GELU_B[6] = {0x86D8, 0xB122, 0xB479, 0xB437, 0xAFA4, 0x7C00};
static const double SIGMOID_CUTS[5] = {0.5, 1.0, 1.5, 2.0, 4.0};
static const uint16_t SIGMOID_A[6] = {0x33D9, 0x32F4, 0x318A, 0x300A, 0x2A35, 0x7C00};
static const uint16_t SIGMOID_B[6] = {0x9018, 0x23C8, 0x2BAA, 0x3027, 0x34CC, 0x37FF};

static int approx(int op, float x, float *out) {
    switch (op) {
    case KTT_SFPU_EXP: *out = exp_approx(x); return 1;
    case KTT_SFPU_RECIP: *out = recip_approx(x); return 1;
    case KTT_SFPU_GELU:
    case KTT_SFPU_GELU_TANH: *out = x * 0.5f + lut6(x, GELU_CUTS, GELU_A, GELU_B); return 1;
    case KTT_SFPU_SIGMOID: {
        float v = lut6(x, SIGMOID_CUTS, SIGMOID_A, SIGMOID_B);
        *out = copysignf(v, x) + 0.5f;
        return 1;
    }
    default: return 0;
    }
}

int ktt_sfpu(int op, const float *x, float *out, size_t n, int approx_mode, float param) {
    if (op < 0 || op >= KTT_SFPU_COUNT) return -1;
    for (size_t i = 0; i < n; i++) {
        float v;
        if (!(approx_mode && approx(op, x[i], &v))) v = (float)exact(op, (double)x[i], (double)param);
        out[i] = v;
    }
    return 0;
}

int ktt_cardmath_version(void) { return 1; }
