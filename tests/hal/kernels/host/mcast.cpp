#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// SENDER (core (0,0)): reads page 0 of the source and multicasts it into CB 0 of cores (1,0)..(2,0) once both
// have reserved room (semaphore 0 counts them), then flags them through semaphore 1. Receivers: reserve, report,
// wait for the flag, push. Runtime arg 0: the source address; compile-time args: its TensorAccessorArgs.
void kernel_main() {
    constexpr uint32_t cb = tt::CBIndex::c_0;
    volatile tt_l1_ptr uint32_t* ready = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0));
    volatile tt_l1_ptr uint32_t* valid = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(1));
#ifdef SENDER
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    constexpr auto src_args = TensorAccessorArgs<0>();
    const auto src = TensorAccessor(src_args, src_addr);
    cb_reserve_back(cb, 1);
    const uint32_t l1 = get_write_ptr(cb);
    noc_async_read_page(0, src, l1);
    noc_async_read_barrier();
    noc_semaphore_wait(ready, 2);
    noc_async_write_multicast(l1, get_noc_multicast_addr(1, 0, 2, 0, l1), 2048, 2);
    noc_semaphore_set(valid, 1);
    noc_semaphore_set_multicast(get_semaphore(1), get_noc_multicast_addr(1, 0, 2, 0, get_semaphore(1)), 2);
    noc_async_write_barrier();
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 1);
#else
    cb_reserve_back(cb, 1);
    noc_semaphore_inc(get_noc_addr(0, 0, get_semaphore(0)), 1);
    noc_semaphore_wait(valid, 1);
    cb_push_back(cb, 1);
#endif
}
