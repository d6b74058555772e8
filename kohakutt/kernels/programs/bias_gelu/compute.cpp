// out = gelu(x + bias): the sum lands in DST (fp32 with fp32_dest_acc_en), gelu runs on it there (the tanh form when
// GELU_TANH is defined, else the erf form), one pack. Runtime args: tile count.
#include <cstdint>

#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/eltwise_unary/eltwise_unary.h"
#include "api/compute/eltwise_unary/gelu.h"

void kernel_main() {
    const uint32_t count = get_arg_val<uint32_t>(0);
    constexpr auto cb_x = tt::CBIndex::c_0;
    constexpr auto cb_bias = tt::CBIndex::c_1;
    constexpr auto cb_out = tt::CBIndex::c_16;

    compute_kernel_hw_startup(cb_x, cb_bias, cb_out);
    add_init(cb_x, cb_bias);
#ifdef GELU_TANH
    gelu_tanh_tile_init();
#else
    gelu_tile_init<false>();
#endif
    for (uint32_t i = 0; i < count; ++i) {
        cb_wait_front(cb_x, 1);
        cb_wait_front(cb_bias, 1);
        tile_regs_acquire();
        add_tiles(cb_x, cb_bias, 0, 0, 0);
#ifdef GELU_TANH
        gelu_tanh_tile(0);
#else
        gelu_tile<false>(0);
#endif
        tile_regs_commit();
        cb_pop_front(cb_x, 1);
        cb_pop_front(cb_bias, 1);

        cb_reserve_back(cb_out, 1);
        tile_regs_wait();
        pack_tile(0, cb_out);
        tile_regs_release();
        cb_push_back(cb_out, 1);
    }
}
