#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// Streams pages [start, start + count) of one interleaved tensor into CB 0. Compile-time args: its
// TensorAccessorArgs.
void kernel_main() {
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    constexpr uint32_t cb_in = tt::CBIndex::c_0;
    constexpr auto src_args = TensorAccessorArgs<0>();
    const auto src = TensorAccessor(src_args, src_addr);

    for (uint32_t i = start; i < start + count; ++i) {
        cb_reserve_back(cb_in, 1);
        noc_async_read_page(i, src, get_write_ptr(cb_in));
        noc_async_read_barrier();
        cb_push_back(cb_in, 1);
    }
}
