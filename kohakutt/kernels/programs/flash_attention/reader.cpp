#include <cstdint>
#include "dataflow_api.h"
#include "common.h"
inline uint32_t face_index(uint32_t r, uint32_t c) {
    return ((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15);
}

template <typename T>
inline void fill(uint32_t l1, uint32_t n, T value) {
    volatile tt_l1_ptr T* p = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
    for (uint32_t i = 0; i < n; ++i) p[i] = value;
}

// Streams Q, then per K chunk the K tiles, the mask tiles and the V tiles of units [start, start + count).
void kernel_main() {
    const uint32_t q_addr = get_arg_val<uint32_t>(0);
    const uint32_t k_addr = get_arg_val<uint32_t>(1);
    const uint32_t v_addr = get_arg_val<uint32_t>(2);
    const uint32_t mask_addr = get_arg_val<uint32_t>(3);
    const uint32_t start = get_arg_val<uint32_t>(4);
    const uint32_t count = get_arg_val<uint32_t>(5);
    constexpr uint32_t cb_q = tt::CBIndex::c_0, cb_k = tt::CBIndex::c_1, cb_v = tt::CBIndex::c_2;
    constexpr uint32_t cb_mask = tt::CBIndex::c_3, cb_scaler = tt::CBIndex::c_4, cb_ones_row = tt::CBIndex::c_5;
    constexpr uint32_t cb_floor = tt::CBIndex::c_6, cb_zero = tt::CBIndex::c_7;

    const InterleavedAddrGenFast<true> q = {
        .bank_base_address = q_addr, .page_size = get_tile_size(cb_q), .data_format = get_dataformat(cb_q)};
    const InterleavedAddrGenFast<true> k = {
        .bank_base_address = k_addr, .page_size = get_tile_size(cb_k), .data_format = get_dataformat(cb_k)};
    const InterleavedAddrGenFast<true> v = {
        .bank_base_address = v_addr, .page_size = get_tile_size(cb_v), .data_format = get_dataformat(cb_v)};
    const InterleavedAddrGenFast<true> mask = {
        .bank_base_address = mask_addr, .page_size = get_tile_size(cb_mask), .data_format = get_dataformat(cb_mask)};

    // Constant tiles, pushed once: the reduce scaler (1.0), a ones row (the column broadcast), -FLT_MAX and zeros.
    cb_reserve_back(cb_scaler, 1);
    fill<uint16_t>(get_write_ptr(cb_scaler), TILE * TILE, 0x3F80);
    cb_push_back(cb_scaler, 1);
    cb_reserve_back(cb_ones_row, 1);
    fill<uint16_t>(get_write_ptr(cb_ones_row), TILE * TILE, 0);
    {
        volatile tt_l1_ptr uint16_t* row = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(get_write_ptr(cb_ones_row));
        for (uint32_t c = 0; c < TILE; ++c) row[face_index(0, c)] = 0x3F80;
    }
    cb_push_back(cb_ones_row, 1);
    cb_reserve_back(cb_floor, 1);
    fill<uint32_t>(get_write_ptr(cb_floor), TILE * TILE, 0xFF7FFFFF);
    cb_push_back(cb_floor, 1);
    cb_reserve_back(cb_zero, 1);
    fill<uint32_t>(get_write_ptr(cb_zero), TILE * TILE, 0);
    cb_push_back(cb_zero, 1);

    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t bh = u / sqt, qt = u % sqt;
        const uint32_t b = bh / hq, h = bh % hq;
        const uint32_t kv = b * hkv + h / (hq / hkv);
        cb_reserve_back(cb_q, dt);
        for (uint32_t d = 0; d < dt; ++d) {
            noc_async_read_tile((bh * sqt + qt) * dt + d, q, get_write_ptr(cb_q) + d * get_tile_size(cb_q));
        }
        noc_async_read_barrier();
        cb_push_back(cb_q, dt);

        const uint32_t kend = key_tiles(qt);
        for (uint32_t kt0 = 0; kt0 < kend; kt0 += K_CHUNK_TILES) {
            const uint32_t nk = (kend - kt0 < K_CHUNK_TILES) ? kend - kt0 : K_CHUNK_TILES;
            cb_reserve_back(cb_k, K_CHUNK_TILES * dt);  // whole chunks, so the ring never wraps inside one
            for (uint32_t j = 0; j < nk; ++j) {
                for (uint32_t d = 0; d < dt; ++d) {
                    noc_async_read_tile((kv * skvt + kt0 + j) * dt + d, k,
                                        get_write_ptr(cb_k) + (j * dt + d) * get_tile_size(cb_k));
                }
            }
            noc_async_read_barrier();
            cb_push_back(cb_k, K_CHUNK_TILES * dt);

            for (uint32_t j = 0; j < nk; ++j) {
                const uint32_t kt = kt0 + j;
                if (!needs_mask(qt, kt)) continue;
                cb_reserve_back(cb_mask, 1);
                const uint32_t l1 = get_write_ptr(cb_mask);
                if (has_mask) {
                    const uint32_t plane = b * mask_b_stride + h * mask_h_stride;
                    noc_async_read_tile((plane * sqt + qt) * skvt + kt, mask, l1);
                    noc_async_read_barrier();
                } else {
                    fill<uint32_t>(l1, TILE * TILE, 0);
                }
                volatile tt_l1_ptr uint32_t* m = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
                for (uint32_t r = 0; r < TILE; ++r) {
                    for (uint32_t c = 0; c < TILE; ++c) {
                        const int32_t key = kt * TILE + c, row = qt * TILE + r;
                        if (key >= skv || (causal && key > row + offset)) m[face_index(r, c)] = 0xFF800000;
                    }
                }
                cb_push_back(cb_mask, 1);
            }

            cb_reserve_back(cb_v, K_CHUNK_TILES * dvt);
            for (uint32_t j = 0; j < nk; ++j) {
                for (uint32_t d = 0; d < dvt; ++d) {
                    noc_async_read_tile((kv * skvt + kt0 + j) * dvt + d, v,
                                        get_write_ptr(cb_v) + (j * dvt + d) * get_tile_size(cb_v));
                }
            }
            noc_async_read_barrier();
            cb_push_back(cb_v, K_CHUNK_TILES * dvt);
        }
    }
}
