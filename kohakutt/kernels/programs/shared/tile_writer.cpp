// Drains CB 16 into pages [start, start + count) of the output tensor, one tile at a time.
// Compile-time args: the output's TensorAccessorArgs. Runtime args: output address, first page, page count.
#include <cstdint>

#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    const uint32_t dst_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    constexpr uint32_t cb_out = tt::CBIndex::c_16;
    constexpr auto dst_args = TensorAccessorArgs<0>();
    const auto dst = TensorAccessor(dst_args, dst_addr);

    for (uint32_t t = start; t < start + count; ++t) {
        cb_wait_front(cb_out, 1);
        noc_async_write_page(t, dst, get_read_ptr(cb_out));
        noc_async_writes_flushed();
        cb_pop_front(cb_out, 1);
    }
    noc_async_write_barrier();
}
