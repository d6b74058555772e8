// Drains the out tiles of units [start, start + count) and column 0 of each lse tile, as one 32-float row page of
// the lse buffer per unit.
// Compile-time args: causal, has_mask, TensorAccessorArgs of out, lse.
// Runtime args: out and lse addresses, first unit, units, then the shape block (common.h).
#include <cstdint>

#include "api/dataflow/dataflow_api.h"
#include "common.h"

// Hands a scratch page reserved for the whole run back: every CB ends the program balanced.
inline void release_scratch(uint32_t cb) {
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 1);
}

void kernel_main() {
    const uint32_t out_addr = get_arg_val<uint32_t>(0);
    const uint32_t lse_addr = get_arg_val<uint32_t>(1);
    const uint32_t start = get_arg_val<uint32_t>(2);
    const uint32_t count = get_arg_val<uint32_t>(3);
    const Shape s = shape_args(4);
    constexpr uint32_t cb_out = tt::CBIndex::c_16, cb_lse = tt::CBIndex::c_17, cb_lse_row = tt::CBIndex::c_18;

    constexpr auto out_args = TensorAccessorArgs<2>();
    constexpr auto lse_args = TensorAccessorArgs<out_args.next_compile_time_args_offset()>();
    const auto out = TensorAccessor(out_args, out_addr);
    const auto lse = TensorAccessor(lse_args, lse_addr);
    cb_reserve_back(cb_lse_row, 1);  // a scratch page for the gathered column, kept for the whole run
    const uint32_t row_l1 = get_write_ptr(cb_lse_row);
    volatile tt_l1_ptr uint32_t* row = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(row_l1);

    for (uint32_t u = start; u < start + count; ++u) {
        for (uint32_t t = 0; t < s.dvt; ++t) {
            cb_wait_front(cb_out, 1);
            noc_async_write_page(u * s.dvt + t, out, get_read_ptr(cb_out));
            noc_async_writes_flushed();
            cb_pop_front(cb_out, 1);
        }
        cb_wait_front(cb_lse, 1);
        volatile tt_l1_ptr uint32_t* tile = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_read_ptr(cb_lse));
        for (uint32_t r = 0; r < TILE; ++r) {
            row[r] = tile[face_index(r, 0)];
        }
        noc_async_write_page(u, lse, row_l1);
        noc_async_write_barrier();
        cb_pop_front(cb_lse, 1);
    }
    noc_async_write_barrier();
    release_scratch(cb_lse_row);
}
