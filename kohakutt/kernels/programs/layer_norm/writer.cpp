#include <cstdint>
#include "dataflow_api.h"

inline void drain(uint32_t cb, uint32_t tile, const InterleavedAddrGenFast<true>& dst) {
    cb_wait_front(cb, 1);
    noc_async_write_tile(tile, dst, get_read_ptr(cb));
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
    constexpr uint32_t Wt = get_compile_time_arg_val(0);

    const InterleavedAddrGenFast<true> y = {
        .bank_base_address = y_addr, .page_size = get_tile_size(tt::CBIndex::c_16),
        .data_format = get_dataformat(tt::CBIndex::c_16)};
    const InterleavedAddrGenFast<true> s = {
        .bank_base_address = s_addr, .page_size = get_tile_size(tt::CBIndex::c_17),
        .data_format = get_dataformat(tt::CBIndex::c_17)};
    const InterleavedAddrGenFast<true> mean = {
        .bank_base_address = mean_addr, .page_size = 4096, .data_format = DataFormat::Float32};
    const InterleavedAddrGenFast<true> rstd = {
        .bank_base_address = rstd_addr, .page_size = 4096, .data_format = DataFormat::Float32};

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
