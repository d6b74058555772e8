// Compile-time args: TensorAccessorArgs of y [, s (FUSE_PRE_ADD)] [, mean (WRITE_STATS, not RMSNORM)] [, rstd
// (WRITE_STATS)]. Runtime args: y, s, mean and rstd addresses (0 when absent), first tile row, tile rows, Wt.
#include <cstdint>

#include "api/dataflow/dataflow_api.h"

template <typename Accessor>
inline void drain(uint32_t cb, uint32_t tile, const Accessor& dst) {
    cb_wait_front(cb, 1);
    noc_async_write_page(tile, dst, get_read_ptr(cb));
    noc_async_writes_flushed();
    cb_pop_front(cb, 1);
}

// Per tile row, in the order compute produces them: the sum s (fused), the mean and rstd tiles (one per tile row,
// column 0 holds the statistic), then the row's Wt output tiles.
void kernel_main() {
    const uint32_t y_addr = get_arg_val<uint32_t>(0);
    const uint32_t s_addr = get_arg_val<uint32_t>(1);
    const uint32_t mean_addr = get_arg_val<uint32_t>(2);
    const uint32_t rstd_addr = get_arg_val<uint32_t>(3);
    const uint32_t row_start = get_arg_val<uint32_t>(4);
    const uint32_t rows = get_arg_val<uint32_t>(5);
    const uint32_t Wt = get_arg_val<uint32_t>(6);

    constexpr auto y_args = TensorAccessorArgs<0>();
    const auto y = TensorAccessor(y_args, y_addr);
    constexpr uint32_t after_y = y_args.next_compile_time_args_offset();
#ifdef FUSE_PRE_ADD
    constexpr auto s_args = TensorAccessorArgs<after_y>();
    const auto s = TensorAccessor(s_args, s_addr);
    constexpr uint32_t after_s = s_args.next_compile_time_args_offset();
#else
    constexpr uint32_t after_s = after_y;
#endif
#if defined(WRITE_STATS) && !defined(RMSNORM)
    constexpr auto mean_args = TensorAccessorArgs<after_s>();
    const auto mean = TensorAccessor(mean_args, mean_addr);
    constexpr uint32_t after_mean = mean_args.next_compile_time_args_offset();
#else
    constexpr uint32_t after_mean = after_s;
#endif
#ifdef WRITE_STATS
    constexpr auto rstd_args = TensorAccessorArgs<after_mean>();
    const auto rstd = TensorAccessor(rstd_args, rstd_addr);
#endif

    for (uint32_t row = row_start; row < row_start + rows; ++row) {
#ifdef FUSE_PRE_ADD
        for (uint32_t wt = 0; wt < Wt; ++wt) {
            drain(tt::CBIndex::c_17, row * Wt + wt, s);
        }
#endif
#ifdef WRITE_STATS
#ifndef RMSNORM
        drain(tt::CBIndex::c_18, row, mean);
#endif
        drain(tt::CBIndex::c_19, row, rstd);
#endif
        for (uint32_t wt = 0; wt < Wt; ++wt) {
            drain(tt::CBIndex::c_16, row * Wt + wt, y);
        }
    }
    noc_async_write_barrier();
}
