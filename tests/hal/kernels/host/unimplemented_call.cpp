#include <cstdint>

#include "api/compute/compute_kernel_api.h"

// exp2_tile is in TT-Metal 0.81.1's compute API but not in the host build: the build must fail naming it.
void kernel_main() {
    compute_kernel_hw_startup(tt::CBIndex::c_0, tt::CBIndex::c_16);
    exp2_tile_init();
    tile_regs_acquire();
    exp2_tile(0);
    tile_regs_commit();
    tile_regs_wait();
    tile_regs_release();
}
