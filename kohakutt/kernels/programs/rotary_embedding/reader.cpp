#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// For output tiles [start, start + count) of a (..., Ht * 32, Wt * 32) tensor: its x tile into CB 0, the cos and
// sin tiles of its (row, column) into CB 2 / CB 3 (of its matrix when cos / sin have one per matrix, else of the
// single one). Matmul form (SWAP_HALVES undefined): once, the +-1 rotation tile into CB 4, built here in L1.
// Swap form: also the x tile of the other half into CB 1 (and, for the backward, sin of the other half).
// Compile-time args: TensorAccessorArgs of x, cos and sin. Runtime args: x, cos and sin addresses, first tile, tile
// count, Ht, Wt, cos_per_matrix, half, transpose, head_dim.
void kernel_main() {
    const uint32_t x_addr = get_arg_val<uint32_t>(0);
    const uint32_t cos_addr = get_arg_val<uint32_t>(1);
    const uint32_t sin_addr = get_arg_val<uint32_t>(2);
    const uint32_t start = get_arg_val<uint32_t>(3);
    const uint32_t count = get_arg_val<uint32_t>(4);
    const uint32_t Ht = get_arg_val<uint32_t>(5);
    const uint32_t Wt = get_arg_val<uint32_t>(6);
    const uint32_t cos_per_matrix = get_arg_val<uint32_t>(7);
    const uint32_t half = get_arg_val<uint32_t>(8);       // matmul form: head_dim / 2 of the half form, 0: pairs
    const uint32_t transpose = get_arg_val<uint32_t>(9);  // 1 for the backward: the transposed rotation
    const uint32_t head_dim = get_arg_val<uint32_t>(10);
    constexpr uint32_t cb_x = tt::CBIndex::c_0, cb_xs = tt::CBIndex::c_1, cb_cos = tt::CBIndex::c_2;
    constexpr uint32_t cb_sin = tt::CBIndex::c_3, cb_rot = tt::CBIndex::c_4;

    constexpr auto x_args = TensorAccessorArgs<0>();
    constexpr auto cos_args = TensorAccessorArgs<x_args.next_compile_time_args_offset()>();
    constexpr auto sin_args = TensorAccessorArgs<cos_args.next_compile_time_args_offset()>();
    const auto x = TensorAccessor(x_args, x_addr);
    const auto cs = TensorAccessor(cos_args, cos_addr);
    const auto sn = TensorAccessor(sin_args, sin_addr);

#ifndef SWAP_HALVES
    // r = x @ R: r[j] = -x[j + half] (j < half), x[j - half] (half <= j < head_dim); pairs: r[2k] = -x[2k + 1],
    // r[2k + 1] = x[2k]. Entry (i, j) of R goes to face (i / 16) * 2 + j / 16; the backward writes R's transpose.
    cb_reserve_back(cb_rot, 1);
    volatile tt_l1_ptr uint16_t* rot = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(get_write_ptr(cb_rot));
    for (uint32_t e = 0; e < 1024; ++e) {
        rot[e] = 0;
    }
    for (uint32_t j = 0; j < 32; ++j) {
        uint32_t i;
        uint16_t v;
        if (half == 0) {
            i = j ^ 1;
            v = (j & 1) ? 0x3F80 : 0xBF80;
        } else {
            if (j >= head_dim)
                continue;
            i = j < half ? j + half : j - half;
            v = j < half ? 0xBF80 : 0x3F80;
        }
        const uint32_t r = transpose ? j : i, c = transpose ? i : j;
        rot[((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15)] = v;
    }
    cb_push_back(cb_rot, 1);
#endif

    const uint32_t half_wt = Wt / 2;
    for (uint32_t t = start; t < start + count; ++t) {
        const uint32_t col = t % Wt, row = t / Wt;
        const uint32_t cs_row = cos_per_matrix ? row : row % Ht;
        cb_reserve_back(cb_x, 1);
        cb_reserve_back(cb_cos, 1);
        cb_reserve_back(cb_sin, 1);
        noc_async_read_page(t, x, get_write_ptr(cb_x));
        noc_async_read_page(cs_row * Wt + col, cs, get_write_ptr(cb_cos));
#ifdef SWAP_HALVES
        const uint32_t other = col < half_wt ? col + half_wt : col - half_wt;
        cb_reserve_back(cb_xs, 1);
        noc_async_read_page(row * Wt + other, x, get_write_ptr(cb_xs));
        noc_async_read_page(cs_row * Wt + (transpose ? other : col), sn, get_write_ptr(cb_sin));
#else
        noc_async_read_page(cs_row * Wt + col, sn, get_write_ptr(cb_sin));
#endif
        noc_async_read_barrier();
        cb_push_back(cb_x, 1);
#ifdef SWAP_HALVES
        cb_push_back(cb_xs, 1);
#endif
        cb_push_back(cb_cos, 1);
        cb_push_back(cb_sin, 1);
    }
}
