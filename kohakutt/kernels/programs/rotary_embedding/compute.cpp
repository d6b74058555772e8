#include <cstdint>

#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/matmul.h"
#include "api/compute/reconfig_data_format.h"

// Matmul form: forward q = (x @ R) * sin, backward q = (x * sin) @ R^T; out = x * cos + q. Swap form (SWAP_HALVES):
// q = x_other * sin, out = x * cos - q in the first half of the forward (the second half of the backward), + q in
// the other. Every product goes through an intermediate CB (24-26: fp32 with fp32_dest_acc_en, else bf16).
// Runtime args: first tile, tile count, Wt, backward.

ALWI void pack_to(uint32_t cb) {
    tile_regs_commit();
    cb_reserve_back(cb, 1);
    tile_regs_wait();
    pack_tile(0, cb);
    tile_regs_release();
    cb_push_back(cb, 1);
}

ALWI void multiply(uint32_t a, uint32_t b, uint32_t out) {
    reconfig_data_format(a, b);
    pack_reconfig_data_format(out);
    tile_regs_acquire();
    mul_init(a, b);
    mul_tiles(a, b, 0, 0, 0);
    pack_to(out);
}

ALWI void rotate(uint32_t a, uint32_t out) {
    reconfig_data_format(tt::CBIndex::c_4, a);
    pack_reconfig_data_format(out);
    tile_regs_acquire();
    matmul_init(a, tt::CBIndex::c_4);
    matmul_tiles(a, tt::CBIndex::c_4, 0, 0, 0);
    pack_to(out);
}

void kernel_main() {
    const uint32_t start = get_arg_val<uint32_t>(0);
    const uint32_t count = get_arg_val<uint32_t>(1);
    const uint32_t Wt = get_arg_val<uint32_t>(2);
    const uint32_t backward = get_arg_val<uint32_t>(3);
    constexpr auto cb_x = tt::CBIndex::c_0, cb_xs = tt::CBIndex::c_1, cb_cos = tt::CBIndex::c_2;
    constexpr auto cb_sin = tt::CBIndex::c_3, cb_rot = tt::CBIndex::c_4, cb_out = tt::CBIndex::c_16;
    constexpr auto cb_r = tt::CBIndex::c_24, cb_p = tt::CBIndex::c_25, cb_q = tt::CBIndex::c_26;

    compute_kernel_hw_startup(cb_x, cb_cos, cb_out);
#ifndef SWAP_HALVES
    cb_wait_front(cb_rot, 1);
#endif
    for (uint32_t t = start; t < start + count; ++t) {
        cb_wait_front(cb_x, 1);
        cb_wait_front(cb_cos, 1);
        cb_wait_front(cb_sin, 1);
        bool subtract = false;
#ifdef SWAP_HALVES
        cb_wait_front(cb_xs, 1);
        multiply(cb_xs, cb_sin, cb_q);
        cb_pop_front(cb_xs, 1);
        subtract = ((t % Wt) < Wt / 2) != (backward != 0);
#else
        if (backward) {
            multiply(cb_x, cb_sin, cb_r);
            cb_wait_front(cb_r, 1);
            rotate(cb_r, cb_q);
        } else {
            rotate(cb_x, cb_r);
            cb_wait_front(cb_r, 1);
            multiply(cb_r, cb_sin, cb_q);
        }
        cb_pop_front(cb_r, 1);
#endif
        multiply(cb_x, cb_cos, cb_p);
        cb_pop_front(cb_x, 1);
        cb_pop_front(cb_cos, 1);
        cb_pop_front(cb_sin, 1);

        cb_wait_front(cb_p, 1);
        cb_wait_front(cb_q, 1);
        reconfig_data_format(cb_p, cb_q);
        pack_reconfig_data_format(cb_out);
        tile_regs_acquire();
        if (subtract) {
            sub_init(cb_p, cb_q);
            sub_tiles(cb_p, cb_q, 0, 0, 0);
        } else {
            add_init(cb_p, cb_q);
            add_tiles(cb_p, cb_q, 0, 0, 0);
        }
        pack_to(cb_out);
        cb_pop_front(cb_p, 1);
        cb_pop_front(cb_q, 1);
    }
#ifndef SWAP_HALVES
    cb_pop_front(cb_rot, 1);
#endif
}
