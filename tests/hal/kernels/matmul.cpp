#include <cstdint>

#include "api/compute/matmul.h"

// out tile = sum over K of A tile @ B tile, accumulated in DST.
void kernel_main() {
    const uint32_t count = get_arg_val<uint32_t>(0);
    const uint32_t Kt = get_arg_val<uint32_t>(1);
    constexpr auto cb_a = tt::CBIndex::c_0;
    constexpr auto cb_b = tt::CBIndex::c_1;
    constexpr auto cb_out = tt::CBIndex::c_16;

    compute_kernel_hw_startup<SrcOrder::Reverse>(cb_a, cb_b, cb_out);
    matmul_init(cb_a, cb_b);
    for (uint32_t t = 0; t < count; ++t) {
        tile_regs_acquire();
        for (uint32_t kt = 0; kt < Kt; ++kt) {
            cb_wait_front(cb_a, 1);
            cb_wait_front(cb_b, 1);
            matmul_tiles(cb_a, cb_b, 0, 0, 0);
            cb_pop_front(cb_a, 1);
            cb_pop_front(cb_b, 1);
        }
        tile_regs_commit();

        cb_reserve_back(cb_out, 1);
        tile_regs_wait();
        pack_tile(0, cb_out);
        tile_regs_release();
        cb_push_back(cb_out, 1);
    }
}
