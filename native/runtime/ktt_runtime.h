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
/* KTT_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* KTT_RUNTIME_H */
