// Per tile row: the row's Wt tiles of x (and of the residual) into CB 0 (1); then, when there are affine
// parameters, tile wt of gamma / beta with row 0 copied down the tile. Two ones tiles for the row sums first:
// all ones, and ones whose rows past the last tile's valid width are zero.
// Compile-time args: TensorAccessorArgs of x [, residual (FUSE_PRE_ADD)] [, gamma (FUSE_GAMMA)] [, beta (FUSE_BETA)].
// Runtime args: x, residual, gamma and beta addresses (0 when absent), first tile row, tile rows, Wt, w_last (valid
// columns of the last tile, 0 = all 32).
#include <cstdint>

#include "api/dataflow/dataflow_api.h"

inline void fill_ones(uint32_t l1, uint32_t valid_rows) {
    volatile tt_l1_ptr uint16_t* p = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(l1);
    for (uint32_t face = 0; face < 4; ++face) {
        for (uint32_t r = 0; r < 16; ++r) {
            const uint32_t row = r + (face >= 2 ? 16 : 0);
            for (uint32_t c = 0; c < 16; ++c) {
                p[face * 256 + r * 16 + c] = row < valid_rows ? 0x3F80 : 0;  // bfloat16 1.0
            }
        }
    }
}

template <typename T>
inline void broadcast_row0(uint32_t l1) {
    volatile tt_l1_ptr T* p = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
    for (uint32_t face = 0; face < 4; ++face) {
        const uint32_t src = (face & 1) * 256;  // row 0 of face 0 (columns 0-15) or face 1 (16-31)
        for (uint32_t r = (face < 2 ? 1 : 0); r < 16; ++r) {
            for (uint32_t c = 0; c < 16; ++c) {
                p[face * 256 + r * 16 + c] = p[src + c];
            }
        }
    }
}

template <typename Accessor>
inline void read_param(uint32_t cb, uint32_t tile, const Accessor& src) {
    cb_reserve_back(cb, 1);
    const uint32_t l1 = get_write_ptr(cb);
    noc_async_read_page(tile, src, l1);
    noc_async_read_barrier();
    if (get_tile_size(cb) == 4096) {
        broadcast_row0<uint32_t>(l1);
    } else {
        broadcast_row0<uint16_t>(l1);
    }
    cb_push_back(cb, 1);
}

void kernel_main() {
    const uint32_t x_addr = get_arg_val<uint32_t>(0);
    const uint32_t res_addr = get_arg_val<uint32_t>(1);
    const uint32_t gamma_addr = get_arg_val<uint32_t>(2);
    const uint32_t beta_addr = get_arg_val<uint32_t>(3);
    const uint32_t row_start = get_arg_val<uint32_t>(4);
    const uint32_t rows = get_arg_val<uint32_t>(5);
    const uint32_t Wt = get_arg_val<uint32_t>(6);
    const uint32_t w_last = get_arg_val<uint32_t>(7);

    constexpr auto x_args = TensorAccessorArgs<0>();
    const auto x = TensorAccessor(x_args, x_addr);
    constexpr uint32_t after_x = x_args.next_compile_time_args_offset();
#ifdef FUSE_PRE_ADD
    constexpr auto res_args = TensorAccessorArgs<after_x>();
    const auto res = TensorAccessor(res_args, res_addr);
    constexpr uint32_t after_res = res_args.next_compile_time_args_offset();
#else
    constexpr uint32_t after_res = after_x;
#endif
#ifdef FUSE_GAMMA
    constexpr auto gamma_args = TensorAccessorArgs<after_res>();
    const auto gamma = TensorAccessor(gamma_args, gamma_addr);
    constexpr uint32_t after_gamma = gamma_args.next_compile_time_args_offset();
#else
    constexpr uint32_t after_gamma = after_res;
#endif
#ifdef FUSE_BETA
    constexpr auto beta_args = TensorAccessorArgs<after_gamma>();
    const auto beta = TensorAccessor(beta_args, beta_addr);
#endif

    cb_reserve_back(tt::CBIndex::c_2, 2);
    fill_ones(get_write_ptr(tt::CBIndex::c_2), 32);
    fill_ones(get_write_ptr(tt::CBIndex::c_2) + 2048, w_last == 0 ? 32 : w_last);
    cb_push_back(tt::CBIndex::c_2, 2);

    for (uint32_t row = row_start; row < row_start + rows; ++row) {
        for (uint32_t wt = 0; wt < Wt; ++wt) {
            cb_reserve_back(tt::CBIndex::c_0, 1);
            noc_async_read_page(row * Wt + wt, x, get_write_ptr(tt::CBIndex::c_0));
#ifdef FUSE_PRE_ADD
            cb_reserve_back(tt::CBIndex::c_1, 1);
            noc_async_read_page(row * Wt + wt, res, get_write_ptr(tt::CBIndex::c_1));
#endif
            noc_async_read_barrier();
            cb_push_back(tt::CBIndex::c_0, 1);
#ifdef FUSE_PRE_ADD
            cb_push_back(tt::CBIndex::c_1, 1);
#endif
        }
        for (uint32_t wt = 0; wt < Wt; ++wt) {
#ifdef FUSE_GAMMA
            read_param(tt::CBIndex::c_3, wt, gamma);
#endif
#ifdef FUSE_BETA
            read_param(tt::CBIndex::c_4, wt, beta);
#endif
        }
    }
}
