#include <cstdint>
#include "dataflow_api.h"

void kernel_main() {
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    constexpr bool src_is_dram = get_compile_time_arg_val(0) == 1;
    constexpr uint32_t cb_in = tt::CBIndex::c_0;

    const InterleavedAddrGenFast<src_is_dram> src = {
        .bank_base_address = src_addr, .page_size = get_tile_size(cb_in), .data_format = get_dataformat(cb_in)};

    for (uint32_t i = start; i < start + count; ++i) {
        cb_reserve_back(cb_in, 1);
        noc_async_read_tile(i, src, get_write_ptr(cb_in));
        noc_async_read_barrier();
        cb_push_back(cb_in, 1);
    }
}
