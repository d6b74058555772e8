#include <cstdint>

#include "api/compute/common.h"
#include "api/compute/eltwise_binary.h"
#include "api/compute/eltwise_unary/exp.h"
#include "api/compute/matmul.h"
#include "api/compute/tile_move_copy.h"

// One compute kernel per broken rule, chosen by a define (see rules_reader.cpp). CB 0 holds one input tile when the
// test feeds it; CB 16 is the output.
void kernel_main() {
    constexpr auto cb_in = tt::CBIndex::c_0;
    constexpr auto cb_out = tt::CBIndex::c_16;
#if defined(NO_STARTUP)
    copy_init(cb_in);
    tile_regs_acquire();
    copy_tile(cb_in, 0, 0);
#elif defined(COPY_WITHOUT_INIT)
    compute_kernel_hw_startup(cb_in, cb_out);
    tile_regs_acquire();
    copy_tile(cb_in, 0, 0);
#elif defined(ADD_AFTER_COPY_INIT)
    compute_kernel_hw_startup(cb_in, cb_in, cb_out);
    copy_init(cb_in);
    tile_regs_acquire();
    add_tiles(cb_in, cb_in, 0, 0, 0);
#elif defined(EXP_WITHOUT_INIT)
    compute_kernel_hw_startup(cb_in, cb_out);
    tile_regs_acquire();
    exp_tile(0);
#elif defined(MATMUL_WITHOUT_INIT)
    compute_kernel_hw_startup<SrcOrder::Reverse>(cb_in, cb_in, cb_out);
    add_init(cb_in, cb_in);
    cb_wait_front(cb_in, 1);
    tile_regs_acquire();
    matmul_tiles(cb_in, cb_in, 0, 0, 0);
#elif defined(MATH_OUTSIDE_ACQUIRE)
    compute_kernel_hw_startup(cb_in, cb_out);
    copy_init(cb_in);
    copy_tile(cb_in, 0, 0);
#elif defined(PACK_BEFORE_COMMIT)
    compute_kernel_hw_startup(cb_in, cb_out);
    tile_regs_acquire();
    pack_tile(0, cb_out);
#elif defined(PACK_UNRESERVED)
    compute_kernel_hw_startup(cb_in, cb_out);
    tile_regs_acquire();
    tile_regs_commit();
    tile_regs_wait();
    pack_tile(0, cb_out);
#elif defined(COPY_UNWAITED)
    compute_kernel_hw_startup(cb_in, cb_out);
    copy_init(cb_in);
    tile_regs_acquire();
    copy_tile(cb_in, 0, 0);
#elif defined(DST_TILE)
    // Copies the fed tile into DST tile DST_TILE - 1 (in range), then DST_TILE: past the end unless full sync.
    compute_kernel_hw_startup(cb_in, cb_out);
    copy_init(cb_in);
    cb_wait_front(cb_in, 1);
    tile_regs_acquire();
    copy_tile(cb_in, 0, DST_TILE - 1);
    copy_tile(cb_in, 0, DST_TILE);
    tile_regs_commit();
    tile_regs_wait();
    tile_regs_release();
    cb_pop_front(cb_in, 1);
#elif defined(ENDS_HOLDING_DST)
    compute_kernel_hw_startup(cb_in, cb_out);
    tile_regs_acquire();
#elif defined(WAIT_NEVER_FED)
    cb_wait_front(cb_in, 2);  // the reader feeds one page
#endif
}
