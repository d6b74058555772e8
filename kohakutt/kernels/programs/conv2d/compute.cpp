#include <cstdint>
#include "compute_kernel_api/matmul.h"
#include "compute_kernel_api/tilize.h"
#include "compute_kernel_api/tile_move_copy.h"
#include "compute_kernel_api/eltwise_binary.h"

namespace NAMESPACE {
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
    for (uint32_t j = 0; j < n; ++j) pack_tile<true>(j, cb, j);
    tile_regs_release();
    cb_push_back(cb, n);
}

// DST[j] += sum over the K tiles of kernel rows [r0, r1) of act tile x weight tile (t0 + j).
inline void accumulate(uint32_t r0, uint32_t r1, uint32_t t0, uint32_t nbw) {
    reconfig_data_format(cb_w, cb_act);
    mm_init_short(cb_act, cb_w);
    for (uint32_t r = r0; r < r1; ++r) {
        for (uint32_t kt = 0; kt < KRT; ++kt) {
            const uint32_t a = r * KRT + kt;
            if constexpr (W_RESIDENT) {
                for (uint32_t j = 0; j < nbw; ++j) matmul_tiles(cb_act, cb_w, a, a * NT + t0 + j, j, false);
            } else {
                cb_wait_front(cb_w, NB);
                for (uint32_t j = 0; j < nbw; ++j) matmul_tiles(cb_act, cb_w, a, j, j, false);
                cb_pop_front(cb_w, NB);
            }
        }
    }
}

// dst = src + bias (with_bias) or src, one FPU op per tile into DST, packed to dst.
inline void finish(uint32_t src, uint32_t dst, uint32_t nbw, bool with_bias) {
    cb_wait_front(src, nbw);
    tile_regs_acquire();
    if (with_bias) {
        cb_wait_front(cb_bias, NB);
        reconfig_data_format(src, cb_bias);
        add_tiles_init(src, cb_bias);
        for (uint32_t j = 0; j < nbw; ++j) add_tiles(src, cb_bias, j, j, j);
        cb_pop_front(cb_bias, NB);
    } else {
        reconfig_data_format_srca(src);
        copy_tile_to_dst_init_short(src);
        for (uint32_t j = 0; j < nbw; ++j) copy_tile(src, j, j);
    }
    cb_pop_front(src, nbw);
    pack_block(dst, nbw);
}

void MAIN {
    const uint32_t start = get_arg_val<uint32_t>(0);
    const uint32_t count = get_arg_val<uint32_t>(1);
    compute_kernel_hw_startup(cb_act, cb_w, cb_out);
    mm_init(cb_act, cb_w, cb_out);
    for (uint32_t u = start; u < start + count; ++u) {
        for (uint32_t r = 0; r < KH; ++r) {  // the unit's im2col blocks to tiles, resident for the unit
            cb_wait_front(cb_act_rm, KRT);
            cb_reserve_back(cb_act, KRT);
            tilize_init(cb_act_rm, KRT, cb_act);
            tilize_block(cb_act_rm, KRT, cb_act);
            tilize_uninit(cb_act_rm, cb_act);
            cb_push_back(cb_act, KRT);
            cb_pop_front(cb_act_rm, KRT);
        }
        cb_wait_front(cb_act, KH * KRT);
        if (W_RESIDENT) cb_wait_front(cb_w, W_TILES);
        for (uint32_t t0 = 0; t0 < NT; t0 += NB) {
            const uint32_t nbw = (NT - t0) < NB ? (NT - t0) : NB;
            if constexpr (FP32_ACC) {  // one fp32 DST over the whole window
                tile_regs_acquire();
                accumulate(0, KH, t0, nbw);
                if (HAS_BIAS) {
                    pack_block(cb_interim, nbw);
                    finish(cb_interim, cb_out, nbw, true);
                } else {
                    pack_block(cb_out, nbw);
                }
            } else {  // the running sum rounded to bfloat16 after every kernel row
                for (uint32_t r = 0; r < KH; ++r) {
                    tile_regs_acquire();
                    if (r > 0) {
                        cb_wait_front(cb_acc, nbw);
                        reconfig_data_format_srca(cb_acc);
                        copy_tile_to_dst_init_short(cb_acc);
                        for (uint32_t j = 0; j < nbw; ++j) copy_tile(cb_acc, j, j);
                        cb_pop_front(cb_acc, nbw);
                    }
                    accumulate(r, r + 1, t0, nbw);
                    pack_block(r == KH - 1 && OUT_BF16 && !HAS_BIAS ? cb_out : cb_acc, nbw);
                }
                if (HAS_BIAS) finish(cb_acc, OUT_BF16 ? cb_out : cb_acc, nbw, true);  // the sum rounded to bf16
                if (!OUT_BF16) finish(cb_acc, cb_out, nbw, false);  // bf16 values into the output format
            }
        }
        cb_pop_front(cb_act, KH * KRT);
        if (W_RESIDENT && (u + 1 == start + count || (u + 1) % MT == 0)) cb_pop_front(cb_w, W_TILES);
    }
}
}  // namespace NAMESPACE
