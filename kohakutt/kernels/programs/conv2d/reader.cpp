#include <cstdint>
#include "dataflow_api.h"

#include "common.h"

constexpr uint32_t cb_act_rm = tt::CBIndex::c_0, cb_w = tt::CBIndex::c_2;
constexpr uint32_t cb_bias = tt::CBIndex::c_3, cb_span = tt::CBIndex::c_4;

inline void fill_zero(uint32_t l1, uint32_t bytes) {
    volatile tt_l1_ptr uint32_t* p = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
    for (uint32_t i = 0; i < bytes / 4; ++i) p[i] = 0;
}

// A bf16 DST takes its sources as bfloat16: float32 pages are truncated in L1 (a no-op for 16-bit pages).
inline void truncate_fp32(uint32_t cb, uint32_t l1, uint32_t pages) {
    if (FP32_ACC || get_tile_size(cb) != 4096) return;
    volatile tt_l1_ptr uint32_t* p = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
    for (uint32_t i = 0; i < pages * 1024; ++i) p[i] &= 0xFFFF0000u;
}

// Kernel row r of the im2col block of M tile mt, group g: row i = pixel mt * 32 + i, column kw_i * CG + c.
template <typename T>
inline void gather(const InterleavedAddrGen<true>& x, uint32_t g, uint32_t mt, uint32_t r, uint32_t l1) {
    constexpr uint32_t item = sizeof(T);
    const uint32_t m_end = (mt + 1) * TILE < M ? (mt + 1) * TILE : M;
    uint32_t m = mt * TILE;
    while (m < m_end) {  // runs of pixels on one output row
        const uint32_t n = m / (OH * OW), oh = (m / OW) % OH, ow0 = m % OW;
        const uint32_t len = (OW - ow0) < (m_end - m) ? (OW - ow0) : (m_end - m);
        const uint32_t i0 = m - mt * TILE;
        const int32_t ih = int32_t(oh) * SH - PT + int32_t(r) * DH;
        if (ih >= 0 && ih < H) {
            if constexpr (CHANNELS_LAST) {
                for (uint32_t j = 0; j < len; ++j) {
                    for (uint32_t q = 0; q < KW; ++q) {
                        const int32_t iw = int32_t(ow0 + j) * SW - PL + int32_t(q) * DW;
                        if (iw < 0 || iw >= W) continue;
                        const uint32_t stick = (n * H + ih) * W + iw;
                        noc_async_read(get_noc_addr(stick, x, g * CG * item),
                                       l1 + ((i0 + j) * KRT * TILE + q * CG) * item, CG * item);
                    }
                }
            } else {
                const int32_t lo_w = int32_t(ow0) * SW - PL, hi_w = int32_t(ow0 + len - 1) * SW - PL + (KW - 1) * DW;
                const int32_t a = lo_w < 0 ? 0 : lo_w, b = hi_w >= W ? W - 1 : hi_w;
                if (a > b) { m += len; continue; }
                const uint32_t span = get_write_ptr(cb_span);
                volatile tt_l1_ptr T* vals = reinterpret_cast<volatile tt_l1_ptr T*>(span);
                volatile tt_l1_ptr T* block = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
                for (uint32_t c = 0; c < CG; ++c) {
                    const uint32_t row = ((n * C + g * CG + c) * H + ih);
                    noc_async_read(get_noc_addr(row, x, a * item), span, (b - a + 1) * item);
                    noc_async_read_barrier();
                    for (uint32_t j = 0; j < len; ++j) {
                        for (uint32_t q = 0; q < KW; ++q) {
                            const int32_t iw = int32_t(ow0 + j) * SW - PL + int32_t(q) * DW;
                            if (iw < a || iw > b) continue;
                            block[(i0 + j) * KRT * TILE + q * CG + c] = vals[iw - a];
                        }
                    }
                }
            }
        }
        m += len;
    }
}

// For units [start, start + count) of (group, M tile): the KH im2col blocks (row-major, KRT pages each) into CB 0,
// then per block of NB output tiles the weight tiles (kernel row, K tile) into CB 2 and the bias tiles into CB 3.
void kernel_main() {
    const uint32_t x_addr = get_arg_val<uint32_t>(0);
    const uint32_t w_addr = get_arg_val<uint32_t>(1);
    const uint32_t bias_addr = get_arg_val<uint32_t>(2);
    const uint32_t start = get_arg_val<uint32_t>(3);
    const uint32_t count = get_arg_val<uint32_t>(4);
    const uint32_t x_item = get_tile_size(cb_act_rm) / (TILE * TILE);
    const uint32_t bias_item = HAS_BIAS ? get_tile_size(cb_bias) / (TILE * TILE) : 0;
    const InterleavedAddrGen<true> x = {
        .bank_base_address = x_addr, .page_size = (CHANNELS_LAST ? C : uint32_t(W)) * x_item};
    const InterleavedAddrGenFast<true> w = {
        .bank_base_address = w_addr, .page_size = get_tile_size(cb_w), .data_format = get_dataformat(cb_w)};
    const InterleavedAddrGen<true> bias = {.bank_base_address = bias_addr, .page_size = K * bias_item};
    if constexpr (!CHANNELS_LAST) cb_reserve_back(cb_span, 1);  // scratch for one input row, never pushed

    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t g = u / MT, mt = u % MT;
        const bool new_group = u == start || mt == 0;
        for (uint32_t r = 0; r < KH; ++r) {
            cb_reserve_back(cb_act_rm, KRT);
            const uint32_t l1 = get_write_ptr(cb_act_rm);
            fill_zero(l1, KRT * get_tile_size(cb_act_rm));
            if (x_item == 4) gather<uint32_t>(x, g, mt, r, l1); else gather<uint16_t>(x, g, mt, r, l1);
            noc_async_read_barrier();
            truncate_fp32(cb_act_rm, l1, KRT);
            cb_push_back(cb_act_rm, KRT);
        }
        if (W_RESIDENT && new_group) {  // after the unit's blocks: compute frees the last group's weights first
            cb_reserve_back(cb_w, W_TILES);
            const uint32_t l1 = get_write_ptr(cb_w);
            for (uint32_t i = 0; i < W_TILES; ++i) {
                noc_async_read_tile(g * W_TILES + i, w, l1 + i * get_tile_size(cb_w));
            }
            noc_async_read_barrier();
            truncate_fp32(cb_w, l1, W_TILES);
            cb_push_back(cb_w, W_TILES);
        }
        for (uint32_t t0 = 0; t0 < NT; t0 += NB) {
            const uint32_t nbw = (NT - t0) < NB ? (NT - t0) : NB;
            for (uint32_t r = 0; r < KH && !W_RESIDENT; ++r) {
                for (uint32_t kt = 0; kt < KRT; ++kt) {
                    cb_reserve_back(cb_w, NB);  // whole blocks, so the ring never wraps inside one
                    const uint32_t l1 = get_write_ptr(cb_w);
                    for (uint32_t j = 0; j < nbw; ++j) {
                        noc_async_read_tile(((g * KH + r) * KRT + kt) * NT + t0 + j, w, l1 + j * get_tile_size(cb_w));
                    }
                    noc_async_read_barrier();
                    truncate_fp32(cb_w, l1, nbw);
                    cb_push_back(cb_w, NB);
                }
            }
            if constexpr (HAS_BIAS) {
                cb_reserve_back(cb_bias, NB);
                for (uint32_t j = 0; j < nbw; ++j) {
                    const uint32_t l1 = get_write_ptr(cb_bias) + j * get_tile_size(cb_bias);
                    fill_zero(l1, get_tile_size(cb_bias));
                    const uint32_t ch0 = (t0 + j) * TILE, valid = (KG - ch0) < TILE ? (KG - ch0) : TILE;
                    for (uint32_t half = 0; half * 16 < valid; ++half) {  // row 0 of face 0, then of face 1
                        const uint32_t n = (valid - half * 16) < 16 ? (valid - half * 16) : 16;
                        noc_async_read(get_noc_addr(0, bias, (g * KG + ch0 + half * 16) * bias_item),
                                       l1 + half * 256 * bias_item, n * bias_item);
                    }
                    noc_async_read_barrier();
                    for (uint32_t face = 0; face < 4; ++face) {  // row 0 copied down the tile
                        for (uint32_t rr = (face < 2 ? 1 : 0); rr < 16; ++rr) {
                            for (uint32_t cc = 0; cc < 16; ++cc) {
                                if (bias_item == 4) {
                                    volatile tt_l1_ptr uint32_t* p = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
                                    p[face * 256 + rr * 16 + cc] = p[(face & 1) * 256 + cc];
                                } else {
                                    volatile tt_l1_ptr uint16_t* p = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(l1);
                                    p[face * 256 + rr * 16 + cc] = p[(face & 1) * 256 + cc];
                                }
                            }
                        }
                    }
                    truncate_fp32(cb_bias, l1, 1);
                }
                cb_push_back(cb_bias, NB);
            }
        }
    }
}
