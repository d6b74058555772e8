#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// Drains CB 16 into tiles [start, start + count) of out. Compile-time args: out's TensorAccessorArgs.
// Runtime args: out's address, start, count.
void kernel_main() {
    const uint32_t out_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    constexpr auto cb_out = tt::CBIndex::c_16;
    constexpr auto out_args = TensorAccessorArgs<0>();
    const auto out = TensorAccessor(out_args, out_addr);

    for (uint32_t i = start; i < start + count; ++i) {
        cb_wait_front(cb_out, 1);
        noc_async_write_page(i, out, get_read_ptr(cb_out));
        noc_async_writes_flushed();
        cb_pop_front(cb_out, 1);
    }
    noc_async_write_barrier();
}
