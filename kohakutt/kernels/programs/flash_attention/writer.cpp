#include <cstdint>
#include "dataflow_api.h"
#include "common.h"
inline uint32_t face_index(uint32_t r, uint32_t c) {
    return ((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15);
}

// Drains the out tiles of units [start, start + count) and column 0 of each lse tile (one 32-float page per unit).
void kernel_main() {
    const uint32_t out_addr = get_arg_val<uint32_t>(0);
    const uint32_t lse_addr = get_arg_val<uint32_t>(1);
    const uint32_t start = get_arg_val<uint32_t>(2);
    const uint32_t count = get_arg_val<uint32_t>(3);
    constexpr uint32_t cb_out = tt::CBIndex::c_16, cb_lse = tt::CBIndex::c_17, cb_lse_row = tt::CBIndex::c_18;

    const InterleavedAddrGenFast<true> out = {
        .bank_base_address = out_addr, .page_size = get_tile_size(cb_out), .data_format = get_dataformat(cb_out)};
    const InterleavedAddrGen<true> lse = {.bank_base_address = lse_addr, .page_size = TILE * sizeof(float)};
    cb_reserve_back(cb_lse_row, 1);  // a scratch page for the gathered column, kept for the whole run
    volatile tt_l1_ptr uint32_t* row = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_write_ptr(cb_lse_row));

    for (uint32_t u = start; u < start + count; ++u) {
        for (uint32_t t = 0; t < dvt; ++t) {
            cb_wait_front(cb_out, 1);
            noc_async_write_tile(u * dvt + t, out, get_read_ptr(cb_out));
            noc_async_writes_flushed();
            cb_pop_front(cb_out, 1);
        }
        cb_wait_front(cb_lse, 1);
        volatile tt_l1_ptr uint32_t* tile = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_read_ptr(cb_lse));
        for (uint32_t r = 0; r < TILE; ++r) row[r] = tile[face_index(r, 0)];
        noc_async_write(get_write_ptr(cb_lse_row), get_noc_addr(u, lse), TILE * sizeof(float));
        noc_async_write_barrier();
        cb_pop_front(cb_lse, 1);
    }
    noc_async_write_barrier();
}
