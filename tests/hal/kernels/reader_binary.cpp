#include <cstdint>
#include "dataflow_api.h"

// Streams tiles [start, start + count) of two interleaved tensors into CB 0 and CB 1, one tile at a time.
void kernel_main() {
    const uint32_t a_addr = get_arg_val<uint32_t>(0);
    const uint32_t b_addr = get_arg_val<uint32_t>(1);
    const uint32_t start = get_arg_val<uint32_t>(2);
    const uint32_t count = get_arg_val<uint32_t>(3);
    constexpr bool a_is_dram = get_compile_time_arg_val(0) == 1;
    constexpr bool b_is_dram = get_compile_time_arg_val(1) == 1;
    constexpr uint32_t cb_a = tt::CBIndex::c_0;
    constexpr uint32_t cb_b = tt::CBIndex::c_1;

    const InterleavedAddrGenFast<a_is_dram> a = {
        .bank_base_address = a_addr, .page_size = get_tile_size(cb_a), .data_format = get_dataformat(cb_a)};
    const InterleavedAddrGenFast<b_is_dram> b = {
        .bank_base_address = b_addr, .page_size = get_tile_size(cb_b), .data_format = get_dataformat(cb_b)};

    for (uint32_t i = start; i < start + count; ++i) {
        cb_reserve_back(cb_a, 1);
        cb_reserve_back(cb_b, 1);
        noc_async_read_tile(i, a, get_write_ptr(cb_a));
        noc_async_read_tile(i, b, get_write_ptr(cb_b));
        noc_async_read_barrier();
        cb_push_back(cb_a, 1);
        cb_push_back(cb_b, 1);
    }
}
