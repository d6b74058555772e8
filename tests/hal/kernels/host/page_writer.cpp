#include <cstdint>

#include "api/dataflow/dataflow_api.h"

#ifndef OUT_CB
#define OUT_CB 0
#endif

// Writes the front page of CB OUT_CB (default 0) to page (runtime arg 1) of the output (runtime arg 0).
// Compile-time args: the output's TensorAccessorArgs.
void kernel_main() {
    const uint32_t dst_addr = get_arg_val<uint32_t>(0);
    const uint32_t page = get_arg_val<uint32_t>(1);
    constexpr uint32_t cb = OUT_CB;
    constexpr auto dst_args = TensorAccessorArgs<0>();
    const auto dst = TensorAccessor(dst_args, dst_addr);
    cb_wait_front(cb, 1);
    noc_async_write_page(page, dst, get_read_ptr(cb));
    noc_async_write_barrier();
    cb_pop_front(cb, 1);
}
