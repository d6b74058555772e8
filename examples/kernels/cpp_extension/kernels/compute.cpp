#include <cstdint>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary_sfpu.h"
#include "api/compute/tile_move_copy.h"

// out = silu(a) * b, one tile at a time in DST (a in slot 0, b in slot 1), every step on the SFPU.
// Runtime args: the tile count.
void kernel_main() {
    const uint32_t count = get_arg_val<uint32_t>(0);
    constexpr auto cb_a = tt::CBIndex::c_0;
    constexpr auto cb_b = tt::CBIndex::c_1;
    constexpr auto cb_out = tt::CBIndex::c_16;

    compute_kernel_hw_startup(cb_a, cb_b, cb_out);
    for (uint32_t i = 0; i < count; ++i) {
        cb_wait_front(cb_a, 1);
        cb_wait_front(cb_b, 1);
        tile_regs_acquire();
        copy_init(cb_a);
        copy_tile(cb_a, 0, 0);
        silu_tile_init();
        silu_tile(0);
        copy_init(cb_b);
        copy_tile(cb_b, 0, 1);
        mul_binary_tile_init();
        mul_binary_tile(0, 1, 0);
        tile_regs_commit();
        cb_pop_front(cb_a, 1);
        cb_pop_front(cb_b, 1);

        cb_reserve_back(cb_out, 1);
        tile_regs_wait();
        pack_tile(0, cb_out);
        tile_regs_release();
        cb_push_back(cb_out, 1);
    }
}
