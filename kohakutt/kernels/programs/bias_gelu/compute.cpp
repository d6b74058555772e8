#include <cstdint>
#include "compute_kernel_api/eltwise_binary.h"
#include "compute_kernel_api/eltwise_unary/eltwise_unary.h"
#include "compute_kernel_api/eltwise_unary/gelu.h"

// out = gelu(x + bias): the sum lands in DST (fp32 with fp32_dest_acc_en), gelu runs on it there (APPROX: the
// kernel's math_approx_mode), one pack.
namespace NAMESPACE {
void MAIN {
    const uint32_t count = get_arg_val<uint32_t>(0);
    constexpr auto cb_x = tt::CBIndex::c_0;
    constexpr auto cb_bias = tt::CBIndex::c_1;
    constexpr auto cb_out = tt::CBIndex::c_16;

    binary_op_init_common(cb_x, cb_bias, cb_out);
    add_tiles_init(cb_x, cb_bias);
    gelu_tile_init<APPROX>();
    for (uint32_t i = 0; i < count; ++i) {
        cb_wait_front(cb_x, 1);
        cb_wait_front(cb_bias, 1);
        tile_regs_acquire();
        add_tiles(cb_x, cb_bias, 0, 0, 0);
        gelu_tile<APPROX>(0);
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
}  // namespace NAMESPACE
