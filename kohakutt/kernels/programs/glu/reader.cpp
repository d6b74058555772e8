#include <cstdint>
#include "dataflow_api.h"

// For output tiles [start, start + count): the gate tile into CB 0 and the up tile into CB 1. Two tensors (silu_mul):
// tile t of each. One tensor split in halves (swiglu, SPLIT defined): x's tiles are (outer, 2 * half, inner) along
// the split dim, output tile (o, i, r) takes gate (o, i, r) and up (o, half + i, r).
void kernel_main() {
    const uint32_t a_addr = get_arg_val<uint32_t>(0);
    const uint32_t b_addr = get_arg_val<uint32_t>(1);
    const uint32_t start = get_arg_val<uint32_t>(2);
    const uint32_t count = get_arg_val<uint32_t>(3);
    const uint32_t half = get_arg_val<uint32_t>(4);
    const uint32_t inner = get_arg_val<uint32_t>(5);
    constexpr bool a_is_dram = get_compile_time_arg_val(0) == 1;
    constexpr bool b_is_dram = get_compile_time_arg_val(1) == 1;
    constexpr uint32_t cb_gate = tt::CBIndex::c_0;
    constexpr uint32_t cb_up = tt::CBIndex::c_1;

    const InterleavedAddrGenFast<a_is_dram> a = {
        .bank_base_address = a_addr, .page_size = get_tile_size(cb_gate), .data_format = get_dataformat(cb_gate)};
    const InterleavedAddrGenFast<b_is_dram> b = {
        .bank_base_address = b_addr, .page_size = get_tile_size(cb_up), .data_format = get_dataformat(cb_up)};

    for (uint32_t t = start; t < start + count; ++t) {
#ifdef SPLIT
        const uint32_t o = t / (half * inner), ir = t % (half * inner);
        const uint32_t gate_tile = o * 2 * half * inner + ir;
        const uint32_t up_tile = gate_tile + half * inner;
#else
        const uint32_t gate_tile = t, up_tile = t;
#endif
        cb_reserve_back(cb_gate, 1);
        cb_reserve_back(cb_up, 1);
        noc_async_read_tile(gate_tile, a, get_write_ptr(cb_gate));
        noc_async_read_tile(up_tile, b, get_write_ptr(cb_up));
        noc_async_read_barrier();
        cb_push_back(cb_gate, 1);
        cb_push_back(cb_up, 1);
    }
}
