/* Kohaku-TT native runtime core: the C API the Python package loads with cffi (ABI mode).
 *
 * The block between KTT_CDEF_BEGIN and KTT_CDEF_END is read by kohakutt/hal/_native.py and handed to
 * cffi's cdef, so it holds plain declarations only: no macros, no attributes, no preprocessor lines.
 */
#ifndef KTT_RUNTIME_H
#define KTT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KTT_CDEF_BEGIN */
/* Tile kinds: what one 32 x 32 tile holds and what the row-major side of a conversion is.
 * RAW32: 4-byte elements copied (float32, int32, uint32); 4096 B per tile.
 * RAW16: 2-byte elements copied (bfloat16 bits, uint16); 2048 B per tile.
 * BF16:  row-major float32 <-> bfloat16 tiles (round to nearest even; every NaN -> 0x7fc0); 2048 B per tile.
 * BFP8:  row-major float32 <-> bfloat8_b tiles; 1088 B per tile.
 * BFP4:  row-major float32 <-> bfloat4_b tiles; 576 B per tile. */
enum ktt_tile_kind { KTT_TILE_RAW32 = 0, KTT_TILE_RAW16 = 1, KTT_TILE_BF16 = 2, KTT_TILE_BFP8 = 3, KTT_TILE_BFP4 = 4 };

/* Bumped whenever a signature or a byte layout changes. */
int ktt_runtime_version(void);

/* Bytes of one tile of `kind`, or 0 for an unknown kind. */
size_t ktt_tile_bytes(int kind);

/* Elementwise float32 -> bfloat16 bits (round to nearest even; NaN -> 0x7fc0; overflow -> Inf; subnormals and
 * -0.0 kept) and back. `threads` <= 0 picks a count; large inputs are split over threads. */
void ktt_f32_to_bf16(const void *src, void *dst, size_t n, int threads);
void ktt_bf16_to_f32(const void *src, void *dst, size_t n, int threads);

/* Row-major [batch, rows, cols] elements -> tiles. rows and cols are the logical sizes; each is padded up to a
 * multiple of 32 with the element whose bits are `pad_bits` (a float32's bits for BF16 / BFP8 / BFP4, the low
 * 16 bits for RAW16). Tiles are row-major over each batch's tile grid; inside a tile, faces F0 F1 / F2 F3, each
 * face row-major. `dst` must hold batch * ceil(rows/32) * ceil(cols/32) * ktt_tile_bytes(kind) bytes.
 * Returns 0, or -1 for an unknown kind. */
int ktt_pack_tiles(const void *src, void *dst, size_t batch, size_t rows, size_t cols, int kind, uint32_t pad_bits,
                   int threads);

/* Tiles -> row-major [batch, rows, cols] (padding dropped). Element type of `dst`: 4 bytes for RAW32, 2 bytes for
 * RAW16, float32 for BF16 / BFP8 / BFP4. Returns 0, or -1 for an unknown kind. */
int ktt_unpack_tiles(const void *src, void *dst, size_t batch, size_t rows, size_t cols, int kind, int threads);

/* ---- The card's arithmetic (cardmath.c): the one model the host build of the kernel API and the Python models
 * share. Arrays are float32 values; tiles are 32 x 32 row-major. ---- */
enum ktt_operand { KTT_SRCA = 0, KTT_SRCB = 1 };
enum ktt_phase { KTT_PHASE_ALL = -1 };
enum ktt_sfpu_op {
    KTT_SFPU_EXP = 0, KTT_SFPU_LOG = 1, KTT_SFPU_SQRT = 2, KTT_SFPU_RSQRT = 3, KTT_SFPU_RECIP = 4,
    KTT_SFPU_SIGMOID = 5, KTT_SFPU_TANH = 6, KTT_SFPU_GELU = 7, KTT_SFPU_GELU_TANH = 8, KTT_SFPU_SILU = 9,
    KTT_SFPU_SIN = 10, KTT_SFPU_COS = 11, KTT_SFPU_ERF = 12, KTT_SFPU_RELU = 13, KTT_SFPU_ABS = 14,
    KTT_SFPU_NEG = 15, KTT_SFPU_SQUARE = 16, KTT_SFPU_ADD = 17, KTT_SFPU_SUB = 18, KTT_SFPU_MUL = 19,
    KTT_SFPU_DIV = 20, KTT_SFPU_RSUB = 21, KTT_SFPU_COUNT = 22
};

int ktt_cardmath_version(void);

/* What the unpacker puts in SrcA / SrcB: float32 truncated to TF32 (fp32_acc, a 32-bit DST) or to BF16. */
void ktt_source_register(const float *x, float *out, size_t n, int fp32_acc);

/* The part of source-register values `x` the multiplier uses in fidelity `phase` (0..3; KTT_PHASE_ALL for every bit
 * any phase uses) as operand KTT_SRCA (top 5 bits in even phases, the next 5 in odd ones) or KTT_SRCB (top 7 bits in
 * phases 0-1, the next 4 in phases 2-3); Inf and NaN only in phase 0 (0 in later phases). */
void ktt_fidelity_slice(const float *x, float *out, size_t n, int operand, int phase, int fp32_acc);

/* The significant bits (implicit one included) operand KTT_SRCA / KTT_SRCB keeps in all (high = 0) or in its high
 * slice (high = 1, the part even phases of SrcA and phases 0-1 of SrcB multiply). */
int ktt_slice_bits(int operand, int high, int fp32_acc);

/* mul_tiles (ELWMUL): dst = the sum over `phases` (1 LoFi .. 4 HiFi4) of the slices' products, added to DST in turn
 * (rounded to BF16 after each addition unless fp32_acc). srca / srcb hold source-register values. */
void ktt_fpu_mul(const float *srca, const float *srcb, float *dst, size_t n, int phases, int fp32_acc);

/* matmul_tiles (MVMUL) on one tile: dst += in0 @ in1, in0 in SrcB, in1 in SrcA (source-register values). */
void ktt_fpu_matmul_tile(float *dst, const float *in0, const float *in1, int phases, int fp32_acc);

/* reduce_tile of one tile `x` (source-register values) times `scaler`: dim 0 sums rows into column 0, 1 columns
 * into row 0, 2 the whole tile into (0, 0); pool_max keeps the largest instead (fresh: DST held nothing yet). */
void ktt_fpu_reduce_tile(float *dst, const float *x, float scaler, int pool_max, int dim, int phases, int fp32_acc,
                         int fresh);

/* An SFPU op on DST values: out = op(x) (param: the scalar of ADD..RSUB), before storage rounding. approx selects the
 * LLK's approximate algorithm where the card has one (exp, recip, gelu, sigmoid). Returns 0, or -1 for an unknown
 * op. */
int ktt_sfpu(int op, const float *x, float *out, size_t n, int approx, float param);
/* KTT_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* KTT_RUNTIME_H */
