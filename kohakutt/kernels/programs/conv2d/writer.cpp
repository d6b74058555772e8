#include <cstdint>
#include "dataflow_api.h"

#include "common.h"

constexpr uint32_t cb_out = tt::CBIndex::c_16, cb_stage = tt::CBIndex::c_26;

// Each output tile (32 pixels x 32 channels of group g, face order) is rearranged into rows in the staging page
// (channels-last: one row per pixel; channels-first: one row per channel), then written to the row-major output.
template <typename T>
inline void write_tile(const InterleavedAddrGen<true>& out, uint32_t g, uint32_t mt, uint32_t t, uint32_t src,
                       uint32_t stage) {
    constexpr uint32_t item = sizeof(T);
    volatile tt_l1_ptr T* tile = reinterpret_cast<volatile tt_l1_ptr T*>(src);
    volatile tt_l1_ptr T* rows = reinterpret_cast<volatile tt_l1_ptr T*>(stage);
    for (uint32_t i = 0; i < TILE; ++i) {
        for (uint32_t j = 0; j < TILE; ++j) {
            rows[CHANNELS_LAST ? i * TILE + j : j * TILE + i] = tile[face_index(i, j)];
        }
    }
    const uint32_t ch0 = t * TILE, valid = (KG - ch0) < TILE ? (KG - ch0) : TILE;
    const uint32_t m_end = (mt + 1) * TILE < M ? (mt + 1) * TILE : M;
    uint32_t m = mt * TILE;
    while (m < m_end) {
        const uint32_t n = m / (OH * OW), oh = (m / OW) % OH, ow0 = m % OW;
        const uint32_t len = (OW - ow0) < (m_end - m) ? (OW - ow0) : (m_end - m);
        const uint32_t i0 = m - mt * TILE;
        if constexpr (CHANNELS_LAST) {
            for (uint32_t j = 0; j < len; ++j) {
                noc_async_write(stage + (i0 + j) * TILE * item, get_noc_addr(m + j, out, (g * KG + ch0) * item),
                                valid * item);
            }
        } else {
            for (uint32_t j = 0; j < valid; ++j) {
                const uint32_t row = (n * K + g * KG + ch0 + j) * OH + oh;
                noc_async_write(stage + (j * TILE + i0) * item, get_noc_addr(row, out, ow0 * item), len * item);
            }
        }
        m += len;
    }
    noc_async_writes_flushed();  // the staging page is reused for the next tile
}

void kernel_main() {
    const uint32_t out_addr = get_arg_val<uint32_t>(0);
    const uint32_t start = get_arg_val<uint32_t>(1);
    const uint32_t count = get_arg_val<uint32_t>(2);
    const uint32_t item = get_tile_size(cb_out) / (TILE * TILE);
    const InterleavedAddrGen<true> out = {
        .bank_base_address = out_addr, .page_size = (CHANNELS_LAST ? K : OW) * item};
    cb_reserve_back(cb_stage, 1);  // scratch, never pushed
    const uint32_t stage = get_write_ptr(cb_stage);
    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t g = u / MT, mt = u % MT;
        for (uint32_t t = 0; t < NT; ++t) {
            cb_wait_front(cb_out, 1);
            if (item == 4) {
                write_tile<uint32_t>(out, g, mt, t, get_read_ptr(cb_out), stage);
            } else {
                write_tile<uint16_t>(out, g, mt, t, get_read_ptr(cb_out), stage);
            }
            cb_pop_front(cb_out, 1);
        }
    }
    noc_async_write_barrier();
}
