// Layer norm / RMS norm of whole tile rows with fp32 statistics (see kohakutt/kernels/programs/norm.py).
// Runtime args: tile rows, Wt, w_last (valid columns of the last tile, 0 = all 32), fp32 bits of 1/W and of eps.
#include <cstdint>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "api/compute/eltwise_unary/eltwise_unary.h"
#include "api/compute/eltwise_unary/rsqrt.h"
#include "api/compute/matmul.h"
#include "api/compute/tile_move_copy.h"

constexpr auto cb_x = tt::CBIndex::c_0;
constexpr auto cb_res = tt::CBIndex::c_1;
constexpr auto cb_ones = tt::CBIndex::c_2;
constexpr auto cb_gamma = tt::CBIndex::c_3;
constexpr auto cb_beta = tt::CBIndex::c_4;
constexpr auto cb_y = tt::CBIndex::c_16;
constexpr auto cb_s_out = tt::CBIndex::c_17;
constexpr auto cb_mean_out = tt::CBIndex::c_18;
constexpr auto cb_rstd_out = tt::CBIndex::c_19;
constexpr auto cb_mean = tt::CBIndex::c_25;
constexpr auto cb_sq = tt::CBIndex::c_26;
constexpr auto cb_rstd = tt::CBIndex::c_27;
constexpr auto cb_d = tt::CBIndex::c_28;
constexpr auto cb_t1 = tt::CBIndex::c_29;
constexpr auto cb_t2 = tt::CBIndex::c_30;
#ifdef FUSE_PRE_ADD
constexpr auto cb_s = tt::CBIndex::c_24;
#else
constexpr auto cb_s = tt::CBIndex::c_0;
#endif

// DST[0] = sum over the row's tiles of cb @ ones: each column holds the row sum (padding masked by the ones).
inline void row_sum(uint32_t cb, uint32_t Wt, uint32_t w_last) {
    matmul_init(cb, cb_ones);
    for (uint32_t wt = 0; wt < Wt; ++wt) {
        matmul_tiles(cb, cb_ones, wt, (wt == Wt - 1 && w_last != 0) ? 1 : 0, 0);
    }
}

inline void pack_to(uint32_t cb) {
    cb_reserve_back(cb, 1);
    pack_tile(0, cb);
    cb_push_back(cb, 1);
}

void kernel_main() {
    const uint32_t rows = get_arg_val<uint32_t>(0);
    const uint32_t Wt = get_arg_val<uint32_t>(1);
    const uint32_t w_last = get_arg_val<uint32_t>(2);
    const uint32_t inv_w = get_arg_val<uint32_t>(3);  // fp32 bits of 1/W
    const uint32_t eps = get_arg_val<uint32_t>(4);    // fp32 bits

    compute_kernel_hw_startup(cb_s, cb_ones, cb_y);
    cb_wait_front(cb_ones, 2);
    for (uint32_t r = 0; r < rows; ++r) {
#ifdef FUSE_PRE_ADD
        for (uint32_t wt = 0; wt < Wt; ++wt) {  // s = x + residual, kept as stored in the output dtype
            cb_wait_front(cb_x, 1);
            cb_wait_front(cb_res, 1);
            tile_regs_acquire();
            add_init(cb_x, cb_res);
            add_tiles(cb_x, cb_res, 0, 0, 0);
            tile_regs_commit();
            cb_pop_front(cb_x, 1);
            cb_pop_front(cb_res, 1);
            cb_reserve_back(cb_s, 1);
            cb_reserve_back(cb_s_out, 1);
            tile_regs_wait();
            pack_tile(0, cb_s);
            pack_tile(0, cb_s_out);
            tile_regs_release();
            cb_push_back(cb_s, 1);
            cb_push_back(cb_s_out, 1);
        }
#endif
        cb_wait_front(cb_s, Wt);
#ifndef RMSNORM
        tile_regs_acquire();  // pass 1: mean
        row_sum(cb_s, Wt, w_last);
        binop_with_scalar_tile_init();
        mul_unary_tile(0, inv_w);
        tile_regs_commit();
        cb_reserve_back(cb_mean, 1);
#ifdef WRITE_STATS
        cb_reserve_back(cb_mean_out, 1);
#endif
        tile_regs_wait();
        pack_tile(0, cb_mean);
#ifdef WRITE_STATS
        pack_tile(0, cb_mean_out);
#endif
        tile_regs_release();
        cb_push_back(cb_mean, 1);
#ifdef WRITE_STATS
        cb_push_back(cb_mean_out, 1);
#endif
        cb_wait_front(cb_mean, 1);
#endif
        for (uint32_t wt = 0; wt < Wt; ++wt) {  // pass 2: squares of s - mean (of s for RMS norm)
            tile_regs_acquire();
#ifdef RMSNORM
            copy_init(cb_s);
            copy_tile(cb_s, wt, 0);
#else
            sub_init(cb_s, cb_mean);
            sub_tiles(cb_s, cb_mean, wt, 0, 0);
#endif
            square_tile_init();
            square_tile(0);
            tile_regs_commit();
            cb_reserve_back(cb_sq, 1);
            tile_regs_wait();
            pack_tile(0, cb_sq);
            tile_regs_release();
            cb_push_back(cb_sq, 1);
        }
        cb_wait_front(cb_sq, Wt);
        tile_regs_acquire();
        row_sum(cb_sq, Wt, w_last);
        binop_with_scalar_tile_init();
        mul_unary_tile(0, inv_w);
        add_unary_tile(0, eps);
        rsqrt_tile_init();
        rsqrt_tile(0);
        tile_regs_commit();
        cb_pop_front(cb_sq, Wt);
        cb_reserve_back(cb_rstd, 1);
#ifdef WRITE_STATS
        cb_reserve_back(cb_rstd_out, 1);
#endif
        tile_regs_wait();
        pack_tile(0, cb_rstd);
#ifdef WRITE_STATS
        pack_tile(0, cb_rstd_out);
#endif
        tile_regs_release();
        cb_push_back(cb_rstd, 1);
#ifdef WRITE_STATS
        cb_push_back(cb_rstd_out, 1);
#endif
        cb_wait_front(cb_rstd, 1);
        for (uint32_t wt = 0; wt < Wt; ++wt) {  // pass 3: normalize, scale, shift
#ifdef RMSNORM
            const uint32_t src = cb_s, idx = wt;
#else
            tile_regs_acquire();
            sub_init(cb_s, cb_mean);
            sub_tiles(cb_s, cb_mean, wt, 0, 0);
            tile_regs_commit();
            cb_reserve_back(cb_d, 1);
            tile_regs_wait();
            pack_tile(0, cb_d);
            tile_regs_release();
            cb_push_back(cb_d, 1);
            cb_wait_front(cb_d, 1);
            const uint32_t src = cb_d, idx = 0;
#endif
#if defined(FUSE_GAMMA) || defined(FUSE_BETA)
            constexpr uint32_t normed = cb_t1;
#else
            constexpr uint32_t normed = cb_y;
#endif
            tile_regs_acquire();
            mul_init(src, cb_rstd);
            mul_tiles(src, cb_rstd, idx, 0, 0);
            tile_regs_commit();
#ifndef RMSNORM
            cb_pop_front(cb_d, 1);
#endif
            tile_regs_wait();
            pack_to(normed);
            tile_regs_release();
#ifdef FUSE_GAMMA
#ifdef FUSE_BETA
            constexpr uint32_t scaled = cb_t2;
#else
            constexpr uint32_t scaled = cb_y;
#endif
            cb_wait_front(cb_t1, 1);
            cb_wait_front(cb_gamma, 1);
            tile_regs_acquire();
            mul_init(cb_t1, cb_gamma);
            mul_tiles(cb_t1, cb_gamma, 0, 0, 0);
            tile_regs_commit();
            cb_pop_front(cb_t1, 1);
            cb_pop_front(cb_gamma, 1);
            tile_regs_wait();
            pack_to(scaled);
            tile_regs_release();
#endif
#ifdef FUSE_BETA
#ifdef FUSE_GAMMA
            constexpr uint32_t shifted = cb_t2;
#else
            constexpr uint32_t shifted = cb_t1;
#endif
            cb_wait_front(shifted, 1);
            cb_wait_front(cb_beta, 1);
            tile_regs_acquire();
            add_init(shifted, cb_beta);
            add_tiles(shifted, cb_beta, 0, 0, 0);
            tile_regs_commit();
            cb_pop_front(shifted, 1);
            cb_pop_front(cb_beta, 1);
            tile_regs_wait();
            pack_to(cb_y);
            tile_regs_release();
#endif
        }
        cb_pop_front(cb_s, Wt);
#ifndef RMSNORM
        cb_pop_front(cb_mean, 1);
#endif
        cb_pop_front(cb_rstd, 1);
    }
    cb_pop_front(cb_ones, 2);
}
