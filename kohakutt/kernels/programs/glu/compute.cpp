#include <cstdint>

#include "api/compute/compute_kernel_api.h"
#include "api/compute/compute_kernel_hw_startup.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/eltwise_unary/eltwise_unary.h"
#include "api/compute/reconfig_data_format.h"
#include "api/compute/tile_move_copy.h"

// out = sigmoid(gate) * (gate * up): sigmoid on the SFPU and gate * up on the FPU, each packed to an intermediate CB
// (24, 25: fp32 with fp32_dest_acc_en, else bf16), then their FPU product, packed once. Runtime args: tile count.
void kernel_main() {
    const uint32_t count = get_arg_val<uint32_t>(0);
    constexpr auto cb_gate = tt::CBIndex::c_0;
    constexpr auto cb_up = tt::CBIndex::c_1;
    constexpr auto cb_sig = tt::CBIndex::c_24;
    constexpr auto cb_gu = tt::CBIndex::c_25;
    constexpr auto cb_out = tt::CBIndex::c_16;

    compute_kernel_hw_startup(cb_gate, cb_up, cb_out);
    for (uint32_t i = 0; i < count; ++i) {
        cb_wait_front(cb_gate, 1);
        cb_wait_front(cb_up, 1);

        reconfig_data_format_srca(cb_gate);
        pack_reconfig_data_format(cb_sig);
        tile_regs_acquire();
        copy_init(cb_gate);
        copy_tile(cb_gate, 0, 0);
        sigmoid_tile_init();
        sigmoid_tile(0);
        tile_regs_commit();
        cb_reserve_back(cb_sig, 1);
        tile_regs_wait();
        pack_tile(0, cb_sig);
        tile_regs_release();
        cb_push_back(cb_sig, 1);

        reconfig_data_format(cb_gate, cb_up);
        pack_reconfig_data_format(cb_gu);
        tile_regs_acquire();
        mul_init(cb_gate, cb_up);
        mul_tiles(cb_gate, cb_up, 0, 0, 0);
        tile_regs_commit();
        cb_reserve_back(cb_gu, 1);
        tile_regs_wait();
        pack_tile(0, cb_gu);
        tile_regs_release();
        cb_push_back(cb_gu, 1);
        cb_pop_front(cb_gate, 1);
        cb_pop_front(cb_up, 1);

        cb_wait_front(cb_sig, 1);
        cb_wait_front(cb_gu, 1);
        reconfig_data_format(cb_sig, cb_gu);
        pack_reconfig_data_format(cb_out);
        tile_regs_acquire();
        mul_init(cb_sig, cb_gu);
        mul_tiles(cb_sig, cb_gu, 0, 0, 0);
        tile_regs_commit();
        cb_reserve_back(cb_out, 1);
        tile_regs_wait();
        pack_tile(0, cb_out);
        tile_regs_release();
        cb_push_back(cb_out, 1);
        cb_pop_front(cb_sig, 1);
        cb_pop_front(cb_gu, 1);
    }
}
