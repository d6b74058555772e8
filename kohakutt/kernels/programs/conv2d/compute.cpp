// Per unit of (group, M tile): tilizes the unit's KH im2col blocks (CB 0 -> CB 1, resident for the unit), then per
// block of up to NB output tiles accumulates act x weight tiles over every (kernel row, K tile) in an fp32 DST. With
// FP32_ACC off the running sum is packed to bfloat16 (CB 24) after every kernel row and copied back, the bf16 DST
// rounding the op's numerics name. The bias is added after the sum is packed (CB 25 or 24); the result is packed
// to the output CB 16.
// Compile-time args: the flags (common.h). Runtime args: first unit, units, then the shape block (common.h).
#include <cstdint>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/matmul.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"
#include "api/compute/tilize.h"
#include "common.h"

constexpr uint32_t cb_act_rm = tt::CBIndex::c_0, cb_act = tt::CBIndex::c_1, cb_w = tt::CBIndex::c_2;
constexpr uint32_t cb_bias = tt::CBIndex::c_3, cb_out = tt::CBIndex::c_16;
constexpr uint32_t cb_acc = tt::CBIndex::c_24, cb_interim = tt::CBIndex::c_25;

// Commit DST and pack its first n tiles into n reserved pages of cb.
inline void pack_block(uint32_t cb, uint32_t n) {
    tile_regs_commit();
    cb_reserve_back(cb, n);
    tile_regs_wait();
    pack_reconfig_data_format(cb);
    for (uint32_t j = 0; j < n; ++j) {
        pack_tile<true>(j, cb, j);
    }
    tile_regs_release();
    cb_push_back(cb, n);
}

// DST[j] += sum over the K tiles of kernel rows [r0, r1) of act tile x weight tile (t0 + j).
inline void accumulate(const Shape& s, uint32_t r0, uint32_t r1, uint32_t t0, uint32_t nbw) {
    reconfig_data_format<SrcOrder::Reverse>(cb_act, cb_w);
    matmul_init(cb_act, cb_w);
    for (uint32_t r = r0; r < r1; ++r) {
        for (uint32_t kt = 0; kt < s.krt; ++kt) {
            const uint32_t a = r * s.krt + kt;
            if constexpr (W_RESIDENT) {
                for (uint32_t j = 0; j < nbw; ++j) {
                    matmul_tiles(cb_act, cb_w, a, a * s.nt + t0 + j, j);
                }
            } else {
                cb_wait_front(cb_w, s.nb);
                for (uint32_t j = 0; j < nbw; ++j) {
                    matmul_tiles(cb_act, cb_w, a, j, j);
                }
                cb_pop_front(cb_w, s.nb);
            }
        }
    }
}

// dst = src + bias (with_bias) or src, one FPU op per tile into DST, packed to dst.
inline void finish(const Shape& s, uint32_t src, uint32_t dst, uint32_t nbw, bool with_bias) {
    cb_wait_front(src, nbw);
    tile_regs_acquire();
    if (with_bias) {
        cb_wait_front(cb_bias, s.nb);
        reconfig_data_format(src, cb_bias);
        add_init(src, cb_bias);
        for (uint32_t j = 0; j < nbw; ++j) {
            add_tiles(src, cb_bias, j, j, j);
        }
        cb_pop_front(cb_bias, s.nb);
    } else {
        reconfig_data_format_srca(src);
        copy_init(src);
        for (uint32_t j = 0; j < nbw; ++j) {
            copy_tile(src, j, j);
        }
    }
    cb_pop_front(src, nbw);
    pack_block(dst, nbw);
}

void kernel_main() {
    const uint32_t start = get_arg_val<uint32_t>(0);
    const uint32_t count = get_arg_val<uint32_t>(1);
    const Shape s = shape_args(2);
    compute_kernel_hw_startup(cb_act_rm, cb_act);
    for (uint32_t u = start; u < start + count; ++u) {
        for (uint32_t r = 0; r < s.kh; ++r) {  // the unit's im2col blocks to tiles, resident for the unit
            cb_wait_front(cb_act_rm, s.krt);
            cb_reserve_back(cb_act, s.krt);
            reconfig_data_format_srca(cb_act_rm);
            pack_reconfig_data_format(cb_act);
            tilize_init(cb_act_rm, s.krt, cb_act);
            tilize_block(cb_act_rm, s.krt, cb_act);
            tilize_uninit(cb_act_rm, cb_act);
            cb_push_back(cb_act, s.krt);
            cb_pop_front(cb_act_rm, s.krt);
        }
        cb_wait_front(cb_act, s.kh * s.krt);
        if (W_RESIDENT) {
            cb_wait_front(cb_w, s.w_tiles);
        }
        for (uint32_t t0 = 0; t0 < s.nt; t0 += s.nb) {
            const uint32_t nbw = (s.nt - t0) < s.nb ? (s.nt - t0) : s.nb;
            if constexpr (FP32_ACC) {  // one fp32 DST over the whole window
                tile_regs_acquire();
                accumulate(s, 0, s.kh, t0, nbw);
                if (HAS_BIAS) {
                    pack_block(cb_interim, nbw);
                    finish(s, cb_interim, cb_out, nbw, true);
                } else {
                    pack_block(cb_out, nbw);
                }
            } else {  // the running sum rounded to bfloat16 after every kernel row
                for (uint32_t r = 0; r < s.kh; ++r) {
                    tile_regs_acquire();
                    if (r > 0) {
                        cb_wait_front(cb_acc, nbw);
                        reconfig_data_format_srca(cb_acc);
                        copy_init(cb_acc);
                        for (uint32_t j = 0; j < nbw; ++j) {
                            copy_tile(cb_acc, j, j);
                        }
                        cb_pop_front(cb_acc, nbw);
                    }
                    accumulate(s, r, r + 1, t0, nbw);
                    pack_block(r == s.kh - 1 && OUT_BF16 && !HAS_BIAS ? cb_out : cb_acc, nbw);
                }
                if (HAS_BIAS) {
                    finish(s, cb_acc, OUT_BF16 ? cb_out : cb_acc, nbw, true);  // the sum rounded to bf16
                }
                if (!OUT_BF16) {
                    finish(s, cb_acc, cb_out, nbw, false);  // bf16 values into the output format
                }
            }
        }
        cb_pop_front(cb_act, s.kh * s.krt);
        if (W_RESIDENT && (u + 1 == start + count || (u + 1) % s.mt == 0)) {
            cb_pop_front(cb_w, s.w_tiles);
        }
    }
}
