// Flash attention forward, per unit of [start, start + count): online softmax over K chunks with an fp32 DST (the
// steps are listed in kohakutt/kernels/programs/attention.py).
// Compile-time args: causal, has_mask. Runtime args: first unit, units, then the shape block (common.h).
#include <cstdint>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "api/compute/eltwise_unary/eltwise_unary.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/eltwise_unary/recip.h"
#include "api/compute/matmul.h"
#include "api/compute/pack.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/reduce.h"
#include "api/compute/tile_move_copy.h"
#include "common.h"

constexpr uint32_t cb_q = tt::CBIndex::c_0, cb_k = tt::CBIndex::c_1, cb_v = tt::CBIndex::c_2;
constexpr uint32_t cb_mask = tt::CBIndex::c_3, cb_scaler = tt::CBIndex::c_4, cb_ones_row = tt::CBIndex::c_5;
constexpr uint32_t cb_floor = tt::CBIndex::c_6, cb_zero = tt::CBIndex::c_7;
constexpr uint32_t cb_out = tt::CBIndex::c_16, cb_lse = tt::CBIndex::c_17;
constexpr uint32_t cb_rcol = tt::CBIndex::c_19, cb_rbcast = tt::CBIndex::c_20;
constexpr uint32_t cb_sraw = tt::CBIndex::c_24, cb_s = tt::CBIndex::c_25, cb_p = tt::CBIndex::c_26;
constexpr uint32_t cb_mcol = tt::CBIndex::c_27, cb_m = tt::CBIndex::c_28, cb_alpha = tt::CBIndex::c_29;
constexpr uint32_t cb_l = tt::CBIndex::c_30, cb_o = tt::CBIndex::c_31;
constexpr uint32_t TINY_BITS = 0x0D800000;  // 2^-100

// Pack DST tile 0 into page `index` of the pages reserved in cb (the caller reserves and pushes).
inline void pack_dst0(uint32_t cb, uint32_t index) {
    tile_regs_commit();
    tile_regs_wait();
    pack_reconfig_data_format(cb);
    pack_tile<true>(0, cb, index);
    tile_regs_release();
}

// DST tile 0 = the column-0 tile at the front of cb_col broadcast along each row (times a ones-row tile).
inline void broadcast_column(uint32_t cb_col, uint32_t cb_dst) {
    cb_wait_front(cb_col, 1);
    tile_regs_acquire();
    reconfig_data_format<SrcOrder::Reverse>(cb_col, cb_ones_row);
    matmul_init(cb_col, cb_ones_row);
    matmul_tiles(cb_col, cb_ones_row, 0, 0, 0);
    cb_reserve_back(cb_dst, 1);
    pack_dst0(cb_dst, 0);
    cb_push_back(cb_dst, 1);
    cb_pop_front(cb_col, 1);
}

void kernel_main() {
    const uint32_t start = get_arg_val<uint32_t>(0);
    const uint32_t count = get_arg_val<uint32_t>(1);
    const Shape s = shape_args(2);
    compute_kernel_hw_startup<SrcOrder::Reverse>(cb_q, cb_k, cb_s);
    cb_wait_front(cb_scaler, 1);
    cb_wait_front(cb_ones_row, 1);
    cb_wait_front(cb_floor, 1);
    cb_wait_front(cb_zero, 1);

    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t qt = u % s.sqt;
        const uint32_t kend = key_tiles(s, qt);
        cb_wait_front(cb_q, s.dt);
        for (uint32_t kt0 = 0; kt0 < kend; kt0 += K_CHUNK_TILES) {
            const uint32_t nk = (kend - kt0 < K_CHUNK_TILES) ? kend - kt0 : K_CHUNK_TILES;
            const bool first = kt0 == 0;
            // S_j = Q K_j^T * scale (+ mask_j), fp32
            cb_wait_front(cb_k, K_CHUNK_TILES * s.dt);
            cb_reserve_back(cb_s, K_CHUNK_TILES);
            for (uint32_t j = 0; j < nk; ++j) {
                const bool masked = needs_mask(s, qt, kt0 + j);
                tile_regs_acquire();
                reconfig_data_format<SrcOrder::Reverse>(cb_q, cb_k);
                matmul_init(cb_q, cb_k, 1);  // K transposed
                for (uint32_t d = 0; d < s.dt; ++d) {
                    matmul_tiles(cb_q, cb_k, d, j * s.dt + d, 0);
                }
                binop_with_scalar_tile_init();
                mul_unary_tile(0, s.scale_bits);
                if (!masked) {
                    pack_dst0(cb_s, j);
                } else {
                    cb_reserve_back(cb_sraw, 1);
                    pack_dst0(cb_sraw, 0);
                    cb_push_back(cb_sraw, 1);
                    cb_wait_front(cb_sraw, 1);
                    cb_wait_front(cb_mask, 1);
                    tile_regs_acquire();
                    reconfig_data_format(cb_sraw, cb_mask);
                    add_init(cb_sraw, cb_mask);
                    add_tiles(cb_sraw, cb_mask, 0, 0, 0);
                    pack_dst0(cb_s, j);
                    cb_pop_front(cb_sraw, 1);
                    cb_pop_front(cb_mask, 1);
                }
            }
            cb_push_back(cb_s, K_CHUNK_TILES);
            cb_pop_front(cb_k, K_CHUNK_TILES * s.dt);

            // m = max(rowmax S, M_old) in column 0, then M = m broadcast along rows
            cb_wait_front(cb_s, K_CHUNK_TILES);
            const uint32_t cb_mold = first ? cb_floor : cb_m;
            if (!first)
                cb_wait_front(cb_m, 1);
            tile_regs_acquire();
            reconfig_data_format(cb_s, cb_scaler);
            reduce_init<PoolType::MAX, ReduceDim::REDUCE_ROW>(cb_s, cb_scaler, cb_mcol);
            reduce_tile<PoolType::MAX, ReduceDim::REDUCE_ROW>(cb_mold, cb_scaler, 0, 0, 0);
            for (uint32_t j = 0; j < nk; ++j) {
                reduce_tile<PoolType::MAX, ReduceDim::REDUCE_ROW>(cb_s, cb_scaler, j, 0, 0);
            }
            reduce_uninit();
            cb_reserve_back(cb_mcol, 1);
            pack_dst0(cb_mcol, 0);
            cb_push_back(cb_mcol, 1);
            broadcast_column(cb_mcol, cb_m);
            const uint32_t m_new = first ? 0 : 1;
            cb_wait_front(cb_m, m_new + 1);

            // P_j = exp(S_j - M), bf16
            cb_reserve_back(cb_p, K_CHUNK_TILES);
            for (uint32_t j = 0; j < nk; ++j) {
                tile_regs_acquire();
                reconfig_data_format(cb_s, cb_m);
                sub_init(cb_s, cb_m);
                sub_tiles(cb_s, cb_m, j, m_new, 0);
                exp_tile_init<false>();
                exp_tile<false>(0);
                pack_dst0(cb_p, j);
            }
            cb_push_back(cb_p, K_CHUNK_TILES);
            cb_pop_front(cb_s, K_CHUNK_TILES);

            // alpha = exp(M_old - M); the old M leaves
            if (!first) {
                tile_regs_acquire();
                reconfig_data_format(cb_m, cb_m);
                sub_init(cb_m, cb_m);
                sub_tiles(cb_m, cb_m, 0, 1, 0);
                exp_tile_init<false>();
                exp_tile<false>(0);
                cb_reserve_back(cb_alpha, 1);
                pack_dst0(cb_alpha, 0);
                cb_push_back(cb_alpha, 1);
                cb_pop_front(cb_m, 1);
                cb_wait_front(cb_alpha, 1);
                cb_wait_front(cb_l, 1);
            }

            // l = alpha * l + rowsum P
            cb_wait_front(cb_p, K_CHUNK_TILES);
            tile_regs_acquire();
            if (!first) {
                reconfig_data_format(cb_alpha, cb_l);
                mul_init(cb_alpha, cb_l);
                mul_tiles(cb_alpha, cb_l, 0, 0, 0);
            }
            reconfig_data_format(cb_scaler, cb_p);  // a row sum runs as a matmul: the scaler in SrcA
            reduce_init<PoolType::SUM, ReduceDim::REDUCE_ROW>(cb_p, cb_scaler, cb_l);
            for (uint32_t j = 0; j < nk; ++j) {
                reduce_tile<PoolType::SUM, ReduceDim::REDUCE_ROW>(cb_p, cb_scaler, j, 0, 0);
            }
            reduce_uninit();
            cb_reserve_back(cb_l, 1);
            pack_dst0(cb_l, 0);
            cb_push_back(cb_l, 1);
            if (!first)
                cb_pop_front(cb_l, 1);

            // O_t = alpha * O_t + sum_j P_j V_jt
            cb_wait_front(cb_v, K_CHUNK_TILES * s.dvt);
            if (!first)
                cb_wait_front(cb_o, s.dvt);
            cb_reserve_back(cb_o, s.dvt);
            for (uint32_t t = 0; t < s.dvt; ++t) {
                tile_regs_acquire();
                if (!first) {
                    reconfig_data_format(cb_alpha, cb_o);
                    mul_init(cb_alpha, cb_o);
                    mul_tiles(cb_alpha, cb_o, 0, t, 0);
                }
                reconfig_data_format<SrcOrder::Reverse>(cb_p, cb_v);
                matmul_init(cb_p, cb_v);
                for (uint32_t j = 0; j < nk; ++j) {
                    matmul_tiles(cb_p, cb_v, j, j * s.dvt + t, 0);
                }
                pack_dst0(cb_o, t);
            }
            cb_push_back(cb_o, s.dvt);
            if (!first) {
                cb_pop_front(cb_o, s.dvt);
                cb_pop_front(cb_alpha, 1);
            }
            cb_pop_front(cb_p, K_CHUNK_TILES);
            cb_pop_front(cb_v, K_CHUNK_TILES * s.dvt);
        }

        // out = O * (1 / (l + 2^-100)), lse = M + log(l); a unit without keys uses l = 0, M = -FLT_MAX, O = 0
        const bool any = kend > 0;
        const uint32_t cb_lf = any ? cb_l : cb_zero, cb_mf = any ? cb_m : cb_floor, cb_of = any ? cb_o : cb_zero;
        if (any) {
            cb_wait_front(cb_l, 1);
            cb_wait_front(cb_m, 1);
            cb_wait_front(cb_o, s.dvt);
        }
        tile_regs_acquire();
        reconfig_data_format(cb_lf, cb_lf);
        copy_init(cb_lf);
        copy_tile(cb_lf, 0, 0);
        binop_with_scalar_tile_init();
        add_unary_tile(0, TINY_BITS);
        recip_tile_init();
        recip_tile(0);
        cb_reserve_back(cb_rcol, 1);
        pack_dst0(cb_rcol, 0);
        cb_push_back(cb_rcol, 1);
        broadcast_column(cb_rcol, cb_rbcast);
        cb_wait_front(cb_rbcast, 1);
        for (uint32_t t = 0; t < s.dvt; ++t) {
            tile_regs_acquire();
            reconfig_data_format(cb_rbcast, cb_of);
            mul_init(cb_rbcast, cb_of);
            mul_tiles(cb_rbcast, cb_of, 0, any ? t : 0, 0);
            cb_reserve_back(cb_out, 1);
            pack_dst0(cb_out, 0);
            cb_push_back(cb_out, 1);
        }
        tile_regs_acquire();
        reconfig_data_format(cb_lf, cb_lf);
        copy_init(cb_lf);
        copy_tile(cb_lf, 0, 0);
        log_tile_init();
        log_tile(0);
        reconfig_data_format(cb_mf, cb_zero);
        add_init(cb_mf, cb_zero, true);
        add_tiles(cb_mf, cb_zero, 0, 0, 0);
        cb_reserve_back(cb_lse, 1);
        pack_dst0(cb_lse, 0);
        cb_push_back(cb_lse, 1);
        cb_pop_front(cb_rbcast, 1);
        if (any) {
            cb_pop_front(cb_l, 1);
            cb_pop_front(cb_m, 1);
            cb_pop_front(cb_o, s.dvt);
        }
        cb_pop_front(cb_q, s.dt);
    }
    cb_pop_front(cb_scaler, 1);  // the constant tiles: every CB ends the program balanced
    cb_pop_front(cb_ones_row, 1);
    cb_pop_front(cb_floor, 1);
    cb_pop_front(cb_zero, 1);
}
