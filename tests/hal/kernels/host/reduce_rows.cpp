#include <cstdint>

#include "api/compute/reduce.h"

// Sums each row of Wt tiles of CB 0, scaled by CB 2's first value, into column 0 of one output tile.
void kernel_main() {
    const uint32_t Wt = get_arg_val<uint32_t>(0);
    constexpr auto cb_in = tt::CBIndex::c_0;
    constexpr auto cb_scaler = tt::CBIndex::c_2;
    constexpr auto cb_out = tt::CBIndex::c_16;

    compute_kernel_hw_startup(cb_in, cb_scaler, cb_out);
    reduce_init<PoolType::SUM, ReduceDim::REDUCE_ROW>(cb_in, cb_scaler, cb_out);
    cb_wait_front(cb_scaler, 1);
    tile_regs_acquire();
    for (uint32_t t = 0; t < Wt; ++t) {
        cb_wait_front(cb_in, 1);
        reduce_tile<PoolType::SUM, ReduceDim::REDUCE_ROW>(cb_in, cb_scaler, 0, 0, 0);
        cb_pop_front(cb_in, 1);
    }
    tile_regs_commit();
    cb_reserve_back(cb_out, 1);
    tile_regs_wait();
    pack_tile(0, cb_out);
    tile_regs_release();
    cb_push_back(cb_out, 1);
    cb_pop_front(cb_scaler, 1);
    reduce_uninit();
}
