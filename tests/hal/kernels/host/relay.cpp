#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// Two cores: (0,0) copies page 0 of the source to page 0 of the output, then increments semaphore 0 on core (1,0);
// (1,0) waits for it, then copies output page 0 to output page 1 (so it must see (0,0)'s write). Runtime args: the
// source and output addresses; compile-time args: their TensorAccessorArgs.
void kernel_main() {
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t dst_addr = get_arg_val<uint32_t>(1);
    constexpr uint32_t cb = tt::CBIndex::c_0;
    constexpr auto src_args = TensorAccessorArgs<0>();
    constexpr auto dst_args = TensorAccessorArgs<src_args.next_compile_time_args_offset()>();
    const auto src = TensorAccessor(src_args, src_addr);
    const auto dst = TensorAccessor(dst_args, dst_addr);
    const uint32_t sem = get_semaphore(0);

    cb_reserve_back(cb, 1);
    if (get_absolute_logical_x() == 0) {
        noc_async_read_page(0, src, get_write_ptr(cb));
        noc_async_read_barrier();
        noc_async_write_page(0, dst, get_write_ptr(cb));
        noc_async_write_barrier();
        noc_semaphore_inc(get_noc_addr(1, 0, sem), 1);
    } else {
        noc_semaphore_wait(reinterpret_cast<volatile tt_l1_ptr uint32_t*>(sem), 1);
        noc_async_read_page(0, dst, get_write_ptr(cb));
        noc_async_read_barrier();
        noc_async_write_page(1, dst, get_write_ptr(cb));
        noc_async_write_barrier();
    }
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 1);
}
