// x tiles [start, start + count) into CB 0 and, for each, the bias tile of its column into CB 1 with row 0 copied
// to all 32 rows: a 1-D bias is one tile row, its values in row 0 of faces 0 and 1 (bfloat16, 16 values a face row).
// Compile-time args: TensorAccessorArgs of x, then of the bias. Runtime args: x address, bias address, first tile,
// tile count, Wt (tiles per row of x).
#include <cstdint>

#include "api/dataflow/dataflow_api.h"

void kernel_main() {
    const uint32_t x_addr = get_arg_val<uint32_t>(0);
    const uint32_t bias_addr = get_arg_val<uint32_t>(1);
    const uint32_t start = get_arg_val<uint32_t>(2);
    const uint32_t count = get_arg_val<uint32_t>(3);
    const uint32_t Wt = get_arg_val<uint32_t>(4);
    constexpr uint32_t cb_x = tt::CBIndex::c_0;
    constexpr uint32_t cb_bias = tt::CBIndex::c_1;
    constexpr uint32_t FACE_WORDS = 128;  // 16 x 16 bfloat16 values
    constexpr uint32_t ROW_WORDS = 8;     // 16 bfloat16 values
    constexpr auto x_args = TensorAccessorArgs<0>();
    constexpr auto bias_args = TensorAccessorArgs<x_args.next_compile_time_args_offset()>();
    const auto x = TensorAccessor(x_args, x_addr);
    const auto bias = TensorAccessor(bias_args, bias_addr);

    for (uint32_t t = start; t < start + count; ++t) {
        cb_reserve_back(cb_x, 1);
        cb_reserve_back(cb_bias, 1);
        const uint32_t bias_l1 = get_write_ptr(cb_bias);
        noc_async_read_page(t, x, get_write_ptr(cb_x));
        noc_async_read_page(t % Wt, bias, bias_l1);
        noc_async_read_barrier();
        volatile tt_l1_ptr uint32_t* b = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(bias_l1);
        for (uint32_t face = 0; face < 4; ++face) {
            const uint32_t src = (face & 1) * FACE_WORDS;  // row 0 of face 0 (columns 0-15) or face 1 (16-31)
            for (uint32_t row = face < 2 ? 1 : 0; row < 16; ++row) {
                for (uint32_t w = 0; w < ROW_WORDS; ++w) {
                    b[face * FACE_WORDS + row * ROW_WORDS + w] = b[src + w];
                }
            }
        }
        cb_push_back(cb_x, 1);
        cb_push_back(cb_bias, 1);
    }
}
