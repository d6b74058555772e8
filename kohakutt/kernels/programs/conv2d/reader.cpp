// For units [start, start + count) of (group, 32-pixel M tile): the KH im2col blocks (row-major, KRT pages each) into
// CB 0, then per block of NB output tiles the weight tiles (kernel row, K tile) into CB 2 and the bias tiles into
// CB 3. Input rows and sticks land in a scratch area (CB 4) at their NOC address's offset modulo 64 B, as a DRAM read
// on Blackhole needs, and are picked from there into the block.
// Compile-time args: the flags (common.h), TensorAccessorArgs of x (row-major, page size at run time), the weights
// (tiles) and the bias (row-major, page size at run time; also when there is no bias: then never used).
// Runtime args: x, weights and bias addresses (bias 0 when absent), first unit, units, x's and the bias's aligned
// page sizes, the scratch's slots (channels-last sticks read at once, at most MAX_SLOTS), then the shape block.
#include <cstdint>

#include "api/dataflow/dataflow_api.h"
#include "common.h"

constexpr uint32_t cb_act_rm = tt::CBIndex::c_0, cb_w = tt::CBIndex::c_2;
constexpr uint32_t cb_bias = tt::CBIndex::c_3, cb_span = tt::CBIndex::c_4, cb_bias_row = tt::CBIndex::c_5;

// Hands a scratch page reserved for the whole run back: every CB ends the program balanced.
inline void release_scratch(uint32_t cb) {
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 1);
}

inline void fill_zero(uint32_t l1, uint32_t bytes) {
    volatile tt_l1_ptr uint32_t* p = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
    for (uint32_t i = 0; i < bytes / 4; ++i) {
        p[i] = 0;
    }
}

// A bf16 DST takes its sources as bfloat16: float32 pages are truncated in L1 (a no-op for 16-bit pages).
inline void truncate_fp32(uint32_t cb, uint32_t l1, uint32_t pages) {
    if (FP32_ACC || get_tile_size(cb) != 4096) {
        return;
    }
    volatile tt_l1_ptr uint32_t* p = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
    for (uint32_t i = 0; i < pages * 1024; ++i) {
        p[i] &= 0xFFFF0000u;
    }
}

// Starts a read of `bytes` at NOC address src into the scratch area at `scratch` (64-aligned), at src's offset
// modulo 64 B; returns the L1 address the data lands at.
inline uint32_t read_aligned(uint64_t src, uint32_t scratch, uint32_t bytes) {
    const uint32_t l1 = scratch + (static_cast<uint32_t>(src) & (DRAM_ALIGN - 1));
    noc_async_read(src, l1, bytes);
    return l1;
}

// Kernel row r of the im2col block of M tile mt, group g, into the zeroed pages at l1: row i = pixel mt * 32 + i,
// column kw_i * CG + c. Each run of pixels on one output row needs input columns [a, b] of one input row: per input
// channel one read of that span (channels-first), or per input pixel one read of the group's channels (channels-last,
// `slots` sticks at a time); then the kernel columns are picked with the stride.
template <typename T, typename Accessor>
inline void gather(const Shape& s, const Accessor& x, uint32_t scratch, uint32_t slots, uint32_t g, uint32_t mt,
                   uint32_t r, uint32_t l1) {
    constexpr uint32_t item = sizeof(T);
    volatile tt_l1_ptr T* block = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
    const uint32_t row_len = s.krt * TILE;
    const uint32_t slot_bytes = round_up(s.cg * item, DRAM_ALIGN) + DRAM_ALIGN;
    for_each_run(s, mt, [&](uint32_t i0, uint32_t n, uint32_t oh, uint32_t ow0, uint32_t len) {
        const int32_t ih = int32_t(oh) * s.sh - s.pt + int32_t(r) * s.dh;
        if (ih < 0 || ih >= s.h) {
            return;
        }
        const int32_t lo_w = int32_t(ow0) * s.sw - s.pl;
        const int32_t hi_w = int32_t(ow0 + len - 1) * s.sw - s.pl + int32_t(s.kw - 1) * s.dw;
        const int32_t a = lo_w < 0 ? 0 : lo_w, b = hi_w >= s.w ? s.w - 1 : hi_w;
        if (a > b) {
            return;
        }
        if constexpr (CHANNELS_LAST) {
            for (int32_t c0 = a; c0 <= b; c0 += int32_t(slots)) {  // sticks c0 .. c1 - 1
                const int32_t c1 = c0 + int32_t(slots) <= b + 1 ? c0 + int32_t(slots) : b + 1;
                uint32_t at[MAX_SLOTS];
                for (int32_t iw = c0; iw < c1; ++iw) {
                    const uint32_t stick = (n * uint32_t(s.h) + uint32_t(ih)) * uint32_t(s.w) + uint32_t(iw);
                    at[iw - c0] = read_aligned(x.get_noc_addr(stick, g * s.cg * item),
                                               scratch + uint32_t(iw - c0) * slot_bytes, s.cg * item);
                }
                noc_async_read_barrier();
                for (uint32_t j = 0; j < len; ++j) {
                    for (uint32_t q = 0; q < s.kw; ++q) {
                        const int32_t iw = int32_t(ow0 + j) * s.sw - s.pl + int32_t(q) * s.dw;
                        if (iw < c0 || iw >= c1) {
                            continue;
                        }
                        volatile tt_l1_ptr T* vals = reinterpret_cast<volatile tt_l1_ptr T*>(at[iw - c0]);
                        for (uint32_t c = 0; c < s.cg; ++c) {
                            block[(i0 + j) * row_len + q * s.cg + c] = vals[c];
                        }
                    }
                }
            }
        } else {
            for (uint32_t c = 0; c < s.cg; ++c) {
                const uint32_t row = (n * s.c + g * s.cg + c) * uint32_t(s.h) + uint32_t(ih);
                const uint32_t at =
                    read_aligned(x.get_noc_addr(row, uint32_t(a) * item), scratch, uint32_t(b - a + 1) * item);
                noc_async_read_barrier();
                volatile tt_l1_ptr T* vals = reinterpret_cast<volatile tt_l1_ptr T*>(at);
                for (uint32_t j = 0; j < len; ++j) {
                    for (uint32_t q = 0; q < s.kw; ++q) {
                        const int32_t iw = int32_t(ow0 + j) * s.sw - s.pl + int32_t(q) * s.dw;
                        if (iw >= a && iw <= b) {
                            block[(i0 + j) * row_len + q * s.cg + c] = vals[iw - a];
                        }
                    }
                }
            }
        }
    });
}

// The bias tile of output tile t of group g: its channels from the bias row (read once) in row 0, copied down.
template <typename T>
inline void bias_tile(const Shape& s, uint32_t bias_row, uint32_t g, uint32_t t, uint32_t l1) {
    volatile tt_l1_ptr T* src = reinterpret_cast<volatile tt_l1_ptr T*>(bias_row);
    volatile tt_l1_ptr T* p = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
    const uint32_t ch0 = t * TILE, valid = (s.kg - ch0) < TILE ? (s.kg - ch0) : TILE;
    for (uint32_t face = 0; face < 4; ++face) {
        for (uint32_t rr = 0; rr < 16; ++rr) {
            for (uint32_t cc = 0; cc < 16; ++cc) {
                const uint32_t col = (face & 1) * 16 + cc;
                p[face * 256 + rr * 16 + cc] = col < valid ? src[g * s.kg + ch0 + col] : T(0);
            }
        }
    }
}

void kernel_main() {
    const uint32_t x_addr = get_arg_val<uint32_t>(0);
    const uint32_t w_addr = get_arg_val<uint32_t>(1);
    const uint32_t bias_addr = get_arg_val<uint32_t>(2);
    const uint32_t start = get_arg_val<uint32_t>(3);
    const uint32_t count = get_arg_val<uint32_t>(4);
    const uint32_t x_page = get_arg_val<uint32_t>(5);
    const uint32_t bias_page = get_arg_val<uint32_t>(6);
    const uint32_t slots_arg = get_arg_val<uint32_t>(7);
    const uint32_t slots = slots_arg < 1 ? 1 : (slots_arg > MAX_SLOTS ? MAX_SLOTS : slots_arg);
    const Shape s = shape_args(8);

    constexpr auto x_args = TensorAccessorArgs<FLAG_ARGS>();
    constexpr auto w_args = TensorAccessorArgs<x_args.next_compile_time_args_offset()>();
    constexpr auto bias_args = TensorAccessorArgs<w_args.next_compile_time_args_offset()>();
    const auto x = TensorAccessor(x_args, x_addr, x_page);
    const auto w = TensorAccessor(w_args, w_addr);
    const auto bias = TensorAccessor(bias_args, bias_addr, bias_page);
    const uint32_t x_item = get_tile_size(cb_act_rm) / (TILE * TILE);
    const uint32_t tw = get_tile_size(cb_w), tb = HAS_BIAS ? get_tile_size(cb_bias) : 0;

    cb_reserve_back(cb_span, 1);  // scratch for input rows or sticks, for the whole run
    const uint32_t scratch = round_up(get_write_ptr(cb_span), DRAM_ALIGN);
    uint32_t bias_row = 0;
    if constexpr (HAS_BIAS) {  // the bias row, read once, kept for the whole run
        cb_reserve_back(cb_bias_row, 1);
        bias_row = get_write_ptr(cb_bias_row);
        noc_async_read_page(0, bias, bias_row);
        noc_async_read_barrier();
    }

    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t g = u / s.mt, mt = u % s.mt;
        const bool new_group = u == start || mt == 0;
        for (uint32_t r = 0; r < s.kh; ++r) {
            cb_reserve_back(cb_act_rm, s.krt);
            const uint32_t l1 = get_write_ptr(cb_act_rm);
            fill_zero(l1, s.krt * get_tile_size(cb_act_rm));
            if (x_item == 4) {
                gather<uint32_t>(s, x, scratch, slots, g, mt, r, l1);
            } else {
                gather<uint16_t>(s, x, scratch, slots, g, mt, r, l1);
            }
            truncate_fp32(cb_act_rm, l1, s.krt);
            cb_push_back(cb_act_rm, s.krt);
        }
        if (W_RESIDENT && new_group) {  // after the unit's blocks: compute frees the last group's weights first
            cb_reserve_back(cb_w, s.w_tiles);
            const uint32_t l1 = get_write_ptr(cb_w);
            for (uint32_t i = 0; i < s.w_tiles; ++i) {
                noc_async_read_page(g * s.w_tiles + i, w, l1 + i * tw);
            }
            noc_async_read_barrier();
            truncate_fp32(cb_w, l1, s.w_tiles);
            cb_push_back(cb_w, s.w_tiles);
        }
        for (uint32_t t0 = 0; t0 < s.nt; t0 += s.nb) {
            const uint32_t nbw = (s.nt - t0) < s.nb ? (s.nt - t0) : s.nb;
            for (uint32_t r = 0; r < s.kh && !W_RESIDENT; ++r) {
                for (uint32_t kt = 0; kt < s.krt; ++kt) {
                    cb_reserve_back(cb_w, s.nb);  // whole blocks, so the ring never wraps inside one
                    const uint32_t l1 = get_write_ptr(cb_w);
                    for (uint32_t j = 0; j < nbw; ++j) {
                        noc_async_read_page(((g * s.kh + r) * s.krt + kt) * s.nt + t0 + j, w, l1 + j * tw);
                    }
                    noc_async_read_barrier();
                    truncate_fp32(cb_w, l1, nbw);
                    cb_push_back(cb_w, s.nb);
                }
            }
            if constexpr (HAS_BIAS) {
                cb_reserve_back(cb_bias, s.nb);
                for (uint32_t j = 0; j < nbw; ++j) {
                    const uint32_t l1 = get_write_ptr(cb_bias) + j * tb;
                    if (tb == 4096) {
                        bias_tile<uint32_t>(s, bias_row, g, t0 + j, l1);
                    } else {
                        bias_tile<uint16_t>(s, bias_row, g, t0 + j, l1);
                    }
                    truncate_fp32(cb_bias, l1, 1);
                }
                cb_push_back(cb_bias, s.nb);
            }
        }
    }
    release_scratch(cb_span);
    if constexpr (HAS_BIAS) {
        release_scratch(cb_bias_row);
    }
}
