#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// Drains CB 16 into pages [start, start + count) of the output tensor. Compile-time args: its TensorAccessorArgs.
void kernel_main() {
    const uint32_t dst_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    constexpr uint32_t cb_out = tt::CBIndex::c_16;
    constexpr auto dst_args = TensorAccessorArgs<0>();
    const auto dst = TensorAccessor(dst_args, dst_addr);

    for (uint32_t i = start; i < start + count; ++i) {
        cb_wait_front(cb_out, 1);
        noc_async_write_page(i, dst, get_read_ptr(cb_out));
        noc_async_writes_flushed();
        cb_pop_front(cb_out, 1);
    }
    noc_async_write_barrier();
}
