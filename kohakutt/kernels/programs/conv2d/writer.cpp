// Each output tile (32 pixels x 32 channels of group g, face order) is written to the row-major output: channels-last,
// one write per pixel (its stick's channels of the tile); channels-first, one write per (channel, run of pixels on
// one output row). Each write's data is first copied to a staging slot at the destination's offset modulo 16 B, as a
// NOC write on Blackhole needs.
// Compile-time args: the flags (common.h), TensorAccessorArgs of the output (row-major, page size at run time).
// Runtime args: output address, first unit, units, the output's aligned page size, then the shape block (common.h).
#include <cstdint>

#include "api/dataflow/dataflow_api.h"
#include "common.h"

constexpr uint32_t cb_out = tt::CBIndex::c_16, cb_stage = tt::CBIndex::c_26;

// Hands a scratch page reserved for the whole run back: every CB ends the program balanced.
inline void release_scratch(uint32_t cb) {
    cb_push_back(cb, 1);
    cb_wait_front(cb, 1);
    cb_pop_front(cb, 1);
}

template <typename T, typename Accessor>
inline void write_tile(const Shape& s, const Accessor& out, uint32_t g, uint32_t mt, uint32_t t, uint32_t src,
                       uint32_t stage) {
    constexpr uint32_t item = sizeof(T);
    constexpr uint32_t slot_bytes = TILE * item + WRITE_ALIGN;
    volatile tt_l1_ptr T* tile = reinterpret_cast<volatile tt_l1_ptr T*>(src);
    const uint32_t ch0 = t * TILE, valid = (s.kg - ch0) < TILE ? (s.kg - ch0) : TILE;
    for_each_run(s, mt, [&](uint32_t i0, uint32_t n, uint32_t oh, uint32_t ow0, uint32_t len) {
        if constexpr (CHANNELS_LAST) {
            for (uint32_t j = 0; j < len; ++j) {
                const uint64_t dst = out.get_noc_addr(mt * TILE + i0 + j, (g * s.kg + ch0) * item);
                const uint32_t l1 = stage + (i0 + j) * slot_bytes + (static_cast<uint32_t>(dst) & (WRITE_ALIGN - 1));
                volatile tt_l1_ptr T* row = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
                for (uint32_t c = 0; c < valid; ++c) {
                    row[c] = tile[face_index(i0 + j, c)];
                }
                noc_async_write(l1, dst, valid * item);
            }
        } else {
            for (uint32_t c = 0; c < valid; ++c) {
                const uint32_t page = (n * s.k + g * s.kg + ch0 + c) * s.oh + oh;
                const uint64_t dst = out.get_noc_addr(page, ow0 * item);
                const uint32_t l1 = stage + c * slot_bytes + (static_cast<uint32_t>(dst) & (WRITE_ALIGN - 1));
                volatile tt_l1_ptr T* col = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
                for (uint32_t j = 0; j < len; ++j) {
                    col[j] = tile[face_index(i0 + j, c)];
                }
                noc_async_write(l1, dst, len * item);
            }
        }
        noc_async_writes_flushed();  // the staging slots are reused by the next run
    });
}

void kernel_main() {
    const uint32_t out_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    const uint32_t out_page = get_arg_val<uint32_t>(3);
    const Shape s = shape_args(4);
    constexpr auto out_args = TensorAccessorArgs<FLAG_ARGS>();
    const auto out = TensorAccessor(out_args, out_addr, out_page);
    const uint32_t item = get_tile_size(cb_out) / (TILE * TILE);
    cb_reserve_back(cb_stage, 1);  // scratch: 32 slots, for the whole run
    const uint32_t stage = round_up(get_write_ptr(cb_stage), WRITE_ALIGN);
    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t g = u / s.mt, mt = u % s.mt;
        for (uint32_t t = 0; t < s.nt; ++t) {
            cb_wait_front(cb_out, 1);
            if (item == 4) {
                write_tile<uint32_t>(s, out, g, mt, t, get_read_ptr(cb_out), stage);
            } else {
                write_tile<uint16_t>(s, out, g, mt, t, get_read_ptr(cb_out), stage);
            }
            cb_pop_front(cb_out, 1);
        }
    }
    noc_async_write_barrier();
    release_scratch(cb_stage);
}
