#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// For output tiles [start, start + count): the gate tile into CB 0 and the up tile into CB 1. Two tensors (silu_mul):
// tile t of each. One tensor split in halves (swiglu, SPLIT defined): x's tiles are (outer, 2 * half, inner) along
// the split dim, output tile (o, i, r) takes gate (o, i, r) and up (o, half + i, r).
// Compile-time args: TensorAccessorArgs of the gate tensor, then of the up tensor. Runtime args: gate address, up
// address, first tile, tile count, half, inner.
void kernel_main() {
    const uint32_t a_addr = get_arg_val<uint32_t>(0);
    const uint32_t b_addr = get_arg_val<uint32_t>(1);
    const uint32_t start = get_arg_val<uint32_t>(2);
    const uint32_t count = get_arg_val<uint32_t>(3);
    const uint32_t half = get_arg_val<uint32_t>(4);
    const uint32_t inner = get_arg_val<uint32_t>(5);
    constexpr uint32_t cb_gate = tt::CBIndex::c_0;
    constexpr uint32_t cb_up = tt::CBIndex::c_1;

    constexpr auto a_args = TensorAccessorArgs<0>();
    constexpr auto b_args = TensorAccessorArgs<a_args.next_compile_time_args_offset()>();
    const auto a = TensorAccessor(a_args, a_addr);
    const auto b = TensorAccessor(b_args, b_addr);

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
        noc_async_read_page(gate_tile, a, get_write_ptr(cb_gate));
        noc_async_read_page(up_tile, b, get_write_ptr(cb_up));
        noc_async_read_barrier();
        cb_push_back(cb_gate, 1);
        cb_push_back(cb_up, 1);
    }
}
