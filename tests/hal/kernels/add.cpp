#include <cstdint>

#include "api/compute/eltwise_binary.h"

// out = a + b, tile by tile; with BINARY_SUB or BINARY_MUL defined, a - b or a * b (mul at the kernel's fidelity).
void kernel_main() {
    const uint32_t count = get_arg_val<uint32_t>(0);
    constexpr auto cb_a = tt::CBIndex::c_0;
    constexpr auto cb_b = tt::CBIndex::c_1;
    constexpr auto cb_out = tt::CBIndex::c_16;

    compute_kernel_hw_startup(cb_a, cb_b, cb_out);
#if defined(BINARY_SUB)
    sub_init(cb_a, cb_b);
#elif defined(BINARY_MUL)
    mul_init(cb_a, cb_b);
#else
    add_init(cb_a, cb_b);
#endif
    for (uint32_t i = 0; i < count; ++i) {
        cb_wait_front(cb_a, 1);
        cb_wait_front(cb_b, 1);
        tile_regs_acquire();
#if defined(BINARY_SUB)
        sub_tiles(cb_a, cb_b, 0, 0, 0);
#elif defined(BINARY_MUL)
        mul_tiles(cb_a, cb_b, 0, 0, 0);
#else
        add_tiles(cb_a, cb_b, 0, 0, 0);
#endif
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
