#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// One reader per broken rule, chosen by a define; the simulator must stop each with a ProgramError naming this
// kernel, the call, the core and this file's line. Runtime arg 0: the address of a DRAM tensor of bfloat16 tiles.
// Compile-time args: its TensorAccessorArgs.
void kernel_main() {
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    constexpr uint32_t cb = tt::CBIndex::c_0;
    constexpr auto src_args = TensorAccessorArgs<0>();
    const auto src = TensorAccessor(src_args, src_addr);
#if defined(DRAM_READ_MISALIGNED)
    cb_reserve_back(cb, 1);
    noc_async_read(get_noc_addr(0, src) + 32, get_write_ptr(cb), 64);  // 32 B past a page start into a CB start
#elif defined(DRAM_WRITE_MISALIGNED)
    cb_reserve_back(cb, 1);
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    noc_async_write(get_read_ptr(cb) + 8, get_noc_addr(0, src), 64);
#elif defined(PUSH_UNRESERVED)
    cb_reserve_back(cb, 1);
    cb_push_back(cb, 2);
#elif defined(POP_UNWAITED)
    cb_reserve_back(cb, 2);
    cb_push_back(cb, 2);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 2);
#elif defined(READ_PAST_END)
    cb_reserve_back(cb, 1);
    noc_async_read_page(8, src, get_write_ptr(cb));  // the tensor has one page; page 8 is bank 0's second slot
#elif defined(NO_BARRIER)
    cb_reserve_back(cb, 1);
    noc_async_read_page(0, src, get_write_ptr(cb));
    cb_push_back(cb, 1);
#elif defined(WRITE_UNRESERVED)
    noc_async_read_page(0, src, get_write_ptr(cb));
#elif defined(WRITE_PAST_CB)
    cb_reserve_back(cb, 2);
    noc_async_read(get_noc_addr(0, src), get_write_ptr(cb) + 4096, 64);
#elif defined(TOO_BIG_REQUEST)
    cb_reserve_back(cb, 3);
#elif defined(UNFLUSHED_POP)
    cb_reserve_back(cb, 1);
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    noc_async_write_page(0, src, get_read_ptr(cb));
    cb_pop_front(cb, 1);
#elif defined(BAD_ARG)
    get_arg_val<uint32_t>(5);
#elif defined(UNBALANCED)
    cb_reserve_back(cb, 1);
    cb_push_back(cb, 1);  // nobody pops it
#elif defined(CROSS_RING_END)
    cb_reserve_back(cb, 2);
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 1);
    cb_reserve_back(cb, 2);
    cb_push_back(cb, 2);  // from page slot 1 of 2: crosses the ring's end
#elif defined(WAIT_NEVER_FED)
    cb_wait_front(cb, 1);
#elif defined(SEMAPHORE_NEVER_SET)
    noc_semaphore_wait(reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(3)), 1);
#elif defined(FEED_ONE)  // not a broken rule: one page for the compute kernel
    cb_reserve_back(cb, 1);
    noc_async_read_page(0, src, get_write_ptr(cb));
    noc_async_read_barrier();
    cb_push_back(cb, 1);
#elif defined(NOT_A_CB)
    noc_async_read(get_noc_addr(0, src), get_write_ptr(cb) - 0x1000, 64);
#elif defined(RESERVED_ONLY)
    cb_reserve_back(cb, 1);  // never pushed
#endif
}
