#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// A scaler tile of bfloat16 SCALER_BITS (runtime arg 1) everywhere into CB 2, then every page of the source
// tensor (runtime arg 0, arg 2 pages) into CB 0.
void kernel_main() {
    const uint32_t src_addr = get_arg_val<uint32_t>(0);
    const uint32_t bits = get_arg_val<uint32_t>(1);
    const uint32_t pages = get_arg_val<uint32_t>(2);
    constexpr uint32_t cb_in = tt::CBIndex::c_0;
    constexpr uint32_t cb_scaler = tt::CBIndex::c_2;
    constexpr auto src_args = TensorAccessorArgs<0>();
    const auto src = TensorAccessor(src_args, src_addr);

    cb_reserve_back(cb_scaler, 1);
    volatile tt_l1_ptr uint16_t* s = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(get_write_ptr(cb_scaler));
    for (uint32_t i = 0; i < 1024; ++i) {
        s[i] = static_cast<uint16_t>(bits);
    }
    cb_push_back(cb_scaler, 1);
    for (uint32_t p = 0; p < pages; ++p) {
        cb_reserve_back(cb_in, 1);
        noc_async_read_page(p, src, get_write_ptr(cb_in));
        noc_async_read_barrier();
        cb_push_back(cb_in, 1);
    }
}
