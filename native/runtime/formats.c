/* Host tile conversions: bfloat16 rounding, tilize / untilize, bfloat8_b / bfloat4_b packing.
 *
 * Byte layouts and rounding rules are TT-NN 0.81.1's host conversion (see notes/blackhole.md, "Tiles and formats").
 * A tile is 32 x 32 values stored as four 16 x 16 faces (F0 F1 / F2 F3), each face row-major, so a tile is 64
 * "face rows" of 16 values; face row k = face (k / 16), row (k % 16). Every conversion below works one face row at
 * a time: 16 contiguous row-major values <-> 16 contiguous tile values (plus one shared exponent for block floats).
 *
 * Speed: the face-row loops have fixed trip counts and no branches, so the compiler vectorizes them; the hot
 * functions are built for x86-64-v4 / v3 / baseline and picked at load time (no -march=native: the built library
 * may move between machines); inputs of a few MiB and more are split over threads.
 */
#include "ktt_runtime.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define KTT_RUNTIME_VERSION 1
#define TILE 32
#define FACE 16
#define FACE_ROWS 64 /* face rows in a tile */
#define MAX_THREADS 8
#define PARALLEL_MIN_BYTES (2u << 20)

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(KTT_NO_CLONES)
#define KTT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KTT_CLONES
#endif
/* GCC fully unrolls 16-trip loops before its loop vectorizer sees them, and the unrolled code then vectorizes
 * poorly; keeping them rolled lets them become a few vector instructions each. */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTOR_LOOP _Pragma("GCC unroll 1")
#else
#define VECTOR_LOOP
#endif
#if defined(__GNUC__)
#define KTT_INLINE static inline __attribute__((always_inline))
#else
#define KTT_INLINE static inline
#endif

int ktt_runtime_version(void) { return KTT_RUNTIME_VERSION; }

/* Internal twin of ktt_tile_bytes: an exported function cannot be inlined under -fPIC (it may be interposed). */
KTT_INLINE size_t tile_bytes(int kind) {
    switch (kind) {
    case KTT_TILE_RAW32: return 4096;
    case KTT_TILE_RAW16: return 2048;
    case KTT_TILE_BF16: return 2048;
    case KTT_TILE_BFP8: return 64 + 1024; /* 64 shared exponents, then a sign + 7-bit magnitude byte per value */
    case KTT_TILE_BFP4: return 64 + 512;  /* 64 shared exponents, then sign + 3-bit magnitude nibbles */
    default: return 0;
    }
}

size_t ktt_tile_bytes(int kind) { return tile_bytes(kind); }

/* ---- threads ------------------------------------------------------------------------------------------------- */

typedef void (*range_fn)(const void *ctx, size_t begin, size_t end);

struct part {
    range_fn fn;
    const void *ctx;
    size_t begin, end;
};

static void *part_main(void *arg) {
    const struct part *p = arg;
    p->fn(p->ctx, p->begin, p->end);
    return NULL;
}

static int pick_threads(int threads, size_t units, size_t bytes) {
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 4 ? 4 : (int)n;
    }
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (bytes < PARALLEL_MIN_BYTES) threads = 1;
    if ((size_t)threads > units) threads = (int)units;
    return threads < 1 ? 1 : threads;
}

/* Runs fn over [0, units) in contiguous parts, one per thread; the caller's thread takes the first part. A thread
 * that cannot be started has its part run by the caller, so this never fails. */
static void run_parallel(range_fn fn, const void *ctx, size_t units, size_t bytes, int threads) {
    int n = pick_threads(threads, units, bytes);
    if (n <= 1) {
        fn(ctx, 0, units);
        return;
    }
    struct part parts[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int i = 0; i < n; i++) {
        parts[i] = (struct part){fn, ctx, units * (size_t)i / (size_t)n, units * (size_t)(i + 1) / (size_t)n};
    }
    for (int i = 1; i < n; i++) started[i] = pthread_create(&tids[i], NULL, part_main, &parts[i]) == 0;
    part_main(&parts[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) {
            pthread_join(tids[i], NULL);
        } else {
            part_main(&parts[i]);
        }
    }
}

/* ---- one value / one face row ----------------------------------------------------------------------------------- */

KTT_INLINE uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Round to nearest even on the top 16 bits; every NaN becomes 0x7fc0 (sign and payload lost). Overflow reaches
 * Inf through the carry into the exponent; subnormals and -0.0 round like any other value. */
KTT_INLINE uint16_t bf16_of(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
}

KTT_INLINE void bf16_row(const uint32_t *restrict s, uint16_t *restrict d) {
    VECTOR_LOOP for (int i = 0; i < FACE; i++) d[i] = bf16_of(s[i]);
}

KTT_INLINE void bf16_unrow(const uint16_t *restrict s, uint32_t *restrict d) {
    VECTOR_LOOP for (int i = 0; i < FACE; i++) d[i] = (uint32_t)s[i] << 16;
}

/* Block float, one 16-value row with `mbits` magnitude bits (7: bfloat8_b, 3: bfloat4_b). Writes sign << mbits |
 * magnitude per value (a byte each for bfloat8_b, a nibble each for bfloat4_b) and returns the shared exponent.
 *
 * - The shared exponent is the largest biased float32 exponent field in the row (zeros, subnormals and padding
 *   count too, as 0 or as their own exponent).
 * - A value's 24-bit significand (explicit leading 1) is shifted right by (shared - own exponent), truncating;
 *   the surviving bits are then rounded to mbits bits, nearest even, on the bits below the cut only. A carry out of
 *   the top is clamped (magnitude stays at 2^mbits - 1, the exponent is not bumped).
 * - Zeros and subnormals (exponent field 0) become magnitude 0; a value whose magnitude is 0 loses its sign, so
 *   -0.0 and tiny negatives become +0.
 * - Inf and NaN have exponent field 255, so one of them makes the shared exponent 255. Every ordinary value of that
 *   row is aligned to exponent 255: values below 2^121 (bfloat8_b) / 2^125 (bfloat4_b) are shifted out entirely and
 *   become 0; larger ones keep a coarse magnitude (2^127 stays 2^127), like any row whose largest exponent is 255.
 *   This is what TT-NN 0.81.1 does (checked against its packer). Other rows are unaffected.
 * - An Inf or NaN is not shifted; its significand 2^23 + payload rounds to a magnitude of at least 2^(mbits-1).
 *   Decoded with exponent 255 (bfp_unrow, below) a magnitude of exactly 2^(mbits-1) is Inf and a larger one is a
 *   NaN carrying the sign and the surviving payload bits. So Inf stays Inf; a NaN keeps its sign, but a NaN
 *   whose 23-bit payload is <= 0x10000 (bfloat8_b) or <= 0x100000 (bfloat4_b) -- set bits only in the part rounded
 *   away, or exactly the tie -- comes back as +-Inf. The canonical quiet NaN 0x7fc00000 comes back as itself. */
KTT_INLINE uint32_t bfp_row(const uint32_t *restrict s, uint8_t *restrict d, const int mbits) {
    const uint32_t cut = 24u - (uint32_t)mbits, below = (1u << (cut - 1)) - 1u, top = (1u << mbits) - 1u;
    uint32_t shared = 0;
    VECTOR_LOOP for (int i = 0; i < FACE; i++) {
        uint32_t e = (s[i] >> 23) & 0xffu;
        shared = e > shared ? e : shared;
    }
    uint32_t w[FACE]; /* computed at full width, narrowed after: keeps the loop in wide vectors */
    VECTOR_LOOP for (int i = 0; i < FACE; i++) {
        uint32_t u = s[i], e = (u >> 23) & 0xffu;
        uint32_t shift = shared - e;
        shift = shift > 31u ? 31u : shift;
        uint32_t m = ((u & 0x7fffffu) | 0x800000u) >> shift;
        uint32_t q = (m + below + ((m >> cut) & 1u)) >> cut;
        q = q > top ? top : q;
        q = e == 0 ? 0u : q;
        uint32_t sign = q == 0 ? 0u : u >> 31;
        w[i] = sign << mbits | q;
    }
    if (mbits == 7) {
        VECTOR_LOOP for (int i = 0; i < FACE; i++) d[i] = (uint8_t)w[i];
    } else {
        /* two values a byte, the even-index one in the low nibble */
        VECTOR_LOOP for (int i = 0; i < FACE / 2; i++) d[i] = (uint8_t)(w[2 * i] | w[2 * i + 1] << 4);
    }
    return shared;
}

/* Decodes a block-float row (bytes for mbits 7, nibbles for mbits 3): value = (-1)^sign * magnitude * 2^(e - 127 -
 * (mbits - 1)), built by integer exponent arithmetic on float(magnitude), so flush-to-zero / denormals-are-zero modes
 * the caller may have switched on cannot change it; exact for every e (results below 2^-126 are subnormal).
 * Rows with e = 255 need no special case: a magnitude of 2^(mbits-1) or more lands on exponent field 255 (never
 * beyond) with the magnitude's bits below its leading 1 as the top payload bits, so it decodes to Inf (none set) or
 * a NaN keeping its sign; smaller magnitudes there are the finite survivors (about 2^121 / 2^125 and up). This is
 * what TT-NN's unpacker returns for every row its packer makes. */
KTT_INLINE void bfp_unrow(uint32_t e, const uint8_t *restrict s, uint32_t *restrict d, const int mbits) {
    const uint32_t top = (1u << mbits) - 1u;
    const int weight = (int)e - (mbits - 1); /* biased exponent of the weight of magnitude 1 */
    const uint32_t rebias = (uint32_t)(weight - 127) * (1u << 23); /* added to float(q)'s exponent field */
    /* Results below 2^-126 (only for the smallest e) are subnormal: their bits are q shifted into place. */
    const uint32_t sub_shift = weight < 1 ? (uint32_t)(22 + weight) : 0, sub_limit = weight < 1 ? 1u << 23 : 0;
    /* Codes are read as little-endian words and shifted out (a variable vector shift), which keeps the loop in
     * full-width vectors; widening the bytes one by one goes through the stack. */
    const int width = mbits + 1, per_word = 32 / width;
    uint32_t words[FACE / 4];
    memcpy(words, s, (size_t)(FACE * width / 8));
    VECTOR_LOOP for (int i = 0; i < FACE; i++) {
        uint32_t code = (words[i / per_word] >> (width * (i % per_word))) & ((1u << width) - 1u);
        uint32_t q = code & top, sign = (code >> mbits) << 31;
        /* selects are written as masks: a ?: around the conversion would stay a branch and stop vectorizing */
        uint32_t normal = (bits_of((float)(int32_t)q) + rebias) & (0u - (uint32_t)(q != 0));
        uint32_t sub = q << sub_shift, is_sub = 0u - (uint32_t)(sub < sub_limit);
        d[i] = (sub & is_sub) | (normal & ~is_sub) | sign;
    }
}

/* ---- elementwise bfloat16 --------------------------------------------------------------------------------------- */

struct flat_job {
    const void *src;
    void *dst;
};

KTT_CLONES static void f32_to_bf16_range(const void *ctx, size_t begin, size_t end) {
    const struct flat_job *j = ctx;
    const uint32_t *restrict s = j->src;
    uint16_t *restrict d = j->dst;
    for (size_t i = begin; i < end; i++) d[i] = bf16_of(s[i]);
}

KTT_CLONES static void bf16_to_f32_range(const void *ctx, size_t begin, size_t end) {
    const struct flat_job *j = ctx;
    const uint16_t *restrict s = j->src;
    uint32_t *restrict d = j->dst;
    for (size_t i = begin; i < end; i++) d[i] = (uint32_t)s[i] << 16;
}

void ktt_f32_to_bf16(const void *src, void *dst, size_t n, int threads) {
    struct flat_job j = {src, dst};
    run_parallel(f32_to_bf16_range, &j, n, n * 6, threads);
}

void ktt_bf16_to_f32(const void *src, void *dst, size_t n, int threads) {
    struct flat_job j = {src, dst};
    run_parallel(bf16_to_f32_range, &j, n, n * 6, threads);
}

/* ---- tiles ------------------------------------------------------------------------------------------------------ */

struct tile_job {
    const uint8_t *src;
    uint8_t *dst;
    size_t rows, cols;   /* logical size of one batch plane */
    size_t trows, tcols; /* tile grid of one plane */
    int kind;
    uint32_t pad;
};

KTT_INLINE size_t row_major_itemsize(const int kind) { return kind == KTT_TILE_RAW16 ? 2 : 4; }

/* The 16 row-major values of face row (row, col .. col+15) of a plane: a pointer into the plane when they all lie
 * inside it, else `tmp` filled with the values that do and the pad value for the rest. */
KTT_INLINE const void *gather16(const struct tile_job *j, const uint8_t *plane, size_t row, size_t col,
                                const int kind, uint32_t *tmp32, uint16_t *tmp16) {
    const size_t es = row_major_itemsize(kind);
    if (row < j->rows && col + FACE <= j->cols) return plane + (row * j->cols + col) * es;
    const size_t n = row < j->rows && col < j->cols ? j->cols - col : 0;
    if (es == 2) {
        for (int i = 0; i < FACE; i++) tmp16[i] = (uint16_t)j->pad;
        if (n) memcpy(tmp16, plane + (row * j->cols + col) * 2, n * 2);
        return tmp16;
    }
    for (int i = 0; i < FACE; i++) tmp32[i] = j->pad;
    if (n) memcpy(tmp32, plane + (row * j->cols + col) * 4, n * 4);
    return tmp32;
}

/* Packs one strip (32 rows of one plane: one row of tiles); `kind` is a constant at every call site. */
KTT_INLINE void pack_strip(const struct tile_job *j, size_t strip, const int kind) {
    const size_t es = row_major_itemsize(kind), tb = tile_bytes(kind);
    const size_t b = strip / j->trows, tr = strip % j->trows;
    const uint8_t *plane = j->src + b * j->rows * j->cols * es;
    uint8_t *out = j->dst + strip * j->tcols * tb;
    uint32_t tmp32[FACE];
    uint16_t tmp16[FACE];
    for (size_t tc = 0; tc < j->tcols; tc++) {
        uint8_t *tile = out + tc * tb;
        for (int k = 0; k < FACE_ROWS; k++) {
            const size_t row = tr * TILE + (size_t)(k >> 5) * FACE + (size_t)(k & 15);
            const size_t col = tc * TILE + (size_t)((k >> 4) & 1) * FACE;
            const void *s = gather16(j, plane, row, col, kind, tmp32, tmp16);
            switch (kind) {
            case KTT_TILE_RAW32: memcpy(tile + k * 64, s, 64); break;
            case KTT_TILE_RAW16: memcpy(tile + k * 32, s, 32); break;
            case KTT_TILE_BF16: bf16_row(s, (uint16_t *)(tile + k * 32)); break;
            case KTT_TILE_BFP8: tile[k] = (uint8_t)bfp_row(s, tile + 64 + k * 16, 7); break;
            case KTT_TILE_BFP4: tile[k] = (uint8_t)bfp_row(s, tile + 64 + k * 8, 3); break;
            }
        }
    }
}

KTT_INLINE void unpack_strip(const struct tile_job *j, size_t strip, const int kind) {
    const size_t es = row_major_itemsize(kind), tb = tile_bytes(kind);
    const size_t b = strip / j->trows, tr = strip % j->trows;
    uint8_t *plane = j->dst + b * j->rows * j->cols * es;
    const uint8_t *in = j->src + strip * j->tcols * tb;
    uint32_t tmp[FACE]; /* 64 bytes: room for 16 values of either size */
    for (size_t tc = 0; tc < j->tcols; tc++) {
        const uint8_t *tile = in + tc * tb;
        for (int k = 0; k < FACE_ROWS; k++) {
            const size_t row = tr * TILE + (size_t)(k >> 5) * FACE + (size_t)(k & 15);
            const size_t col = tc * TILE + (size_t)((k >> 4) & 1) * FACE;
            if (row >= j->rows || col >= j->cols) continue;
            const size_t n = j->cols - col < FACE ? j->cols - col : FACE;
            uint8_t *p = plane + (row * j->cols + col) * es;
            void *d = n == FACE ? (void *)p : (void *)tmp;
            switch (kind) {
            case KTT_TILE_RAW32: memcpy(d, tile + k * 64, 64); break;
            case KTT_TILE_RAW16: memcpy(d, tile + k * 32, 32); break;
            case KTT_TILE_BF16: bf16_unrow((const uint16_t *)(tile + k * 32), d); break;
            case KTT_TILE_BFP8: bfp_unrow(tile[k], tile + 64 + k * 16, d, 7); break;
            case KTT_TILE_BFP4: bfp_unrow(tile[k], tile + 64 + k * 8, d, 3); break;
            }
            if (n < FACE) memcpy(p, tmp, n * es);
        }
    }
}

/* One function per direction carries the per-CPU clones; the kind switch sits outside the strip loop so each case
 * is its own specialised, vectorized loop. */
KTT_CLONES static void pack_range(const void *ctx, size_t begin, size_t end) {
    const struct tile_job *j = ctx;
    switch (j->kind) {
    case KTT_TILE_RAW32: for (size_t s = begin; s < end; s++) pack_strip(j, s, KTT_TILE_RAW32); break;
    case KTT_TILE_RAW16: for (size_t s = begin; s < end; s++) pack_strip(j, s, KTT_TILE_RAW16); break;
    case KTT_TILE_BF16: for (size_t s = begin; s < end; s++) pack_strip(j, s, KTT_TILE_BF16); break;
    case KTT_TILE_BFP8: for (size_t s = begin; s < end; s++) pack_strip(j, s, KTT_TILE_BFP8); break;
    case KTT_TILE_BFP4: for (size_t s = begin; s < end; s++) pack_strip(j, s, KTT_TILE_BFP4); break;
    }
}

KTT_CLONES static void unpack_range(const void *ctx, size_t begin, size_t end) {
    const struct tile_job *j = ctx;
    switch (j->kind) {
    case KTT_TILE_RAW32: for (size_t s = begin; s < end; s++) unpack_strip(j, s, KTT_TILE_RAW32); break;
    case KTT_TILE_RAW16: for (size_t s = begin; s < end; s++) unpack_strip(j, s, KTT_TILE_RAW16); break;
    case KTT_TILE_BF16: for (size_t s = begin; s < end; s++) unpack_strip(j, s, KTT_TILE_BF16); break;
    case KTT_TILE_BFP8: for (size_t s = begin; s < end; s++) unpack_strip(j, s, KTT_TILE_BFP8); break;
    case KTT_TILE_BFP4: for (size_t s = begin; s < end; s++) unpack_strip(j, s, KTT_TILE_BFP4); break;
    }
}

static int tile_call(range_fn fn, const void *src, void *dst, size_t batch, size_t rows, size_t cols, int kind,
                     uint32_t pad, int threads) {
    if (tile_bytes(kind) == 0) return -1;
    struct tile_job j = {src, dst, rows, cols, (rows + TILE - 1) / TILE, (cols + TILE - 1) / TILE, kind, pad};
    const size_t strips = batch * j.trows;
    const size_t bytes = strips * j.tcols * (TILE * TILE * row_major_itemsize(kind) + tile_bytes(kind));
    if (strips == 0 || j.tcols == 0) return 0;
    run_parallel(fn, &j, strips, bytes, threads);
    return 0;
}

int ktt_pack_tiles(const void *src, void *dst, size_t batch, size_t rows, size_t cols, int kind, uint32_t pad_bits,
                   int threads) {
    return tile_call(pack_range, src, dst, batch, rows, cols, kind, pad_bits, threads);
}

int ktt_unpack_tiles(const void *src, void *dst, size_t batch, size_t rows, size_t cols, int kind, int threads) {
    return tile_call(unpack_range, src, dst, batch, rows, cols, kind, 0, threads);
}
