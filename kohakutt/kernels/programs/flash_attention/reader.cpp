// Streams, per unit of [start, start + count) (a batch x head, Q tile pair): the Q tile row, then per K chunk the K
// tiles (kt major, dt minor), a mask tile for each score tile that needs one, and the V tiles (kt major, dvt minor).
// Compile-time args: causal, has_mask, TensorAccessorArgs of q, k, v and mask (a float32 tile tensor's, also when
// there is no mask: the accessor is then never used).
// Runtime args: q, k, v and mask addresses (mask 0 when absent), first unit, units, then the shape block (common.h).
#include <cstdint>

#include "api/dataflow/dataflow_api.h"
#include "common.h"

template <typename T>
inline void fill(uint32_t l1, uint32_t n, T value) {
    volatile tt_l1_ptr T* p = reinterpret_cast<volatile tt_l1_ptr T*>(l1);
    for (uint32_t i = 0; i < n; ++i) {
        p[i] = value;
    }
}

// Reads `tiles` consecutive pages of `src` from page `first` into the pages at l1.
template <typename Accessor>
inline void read_tiles(const Accessor& src, uint32_t first, uint32_t tiles, uint32_t l1, uint32_t tile_bytes) {
    for (uint32_t i = 0; i < tiles; ++i) {
        noc_async_read_page(first + i, src, l1 + i * tile_bytes);
    }
}

void kernel_main() {
    const uint32_t q_addr = get_arg_val<uint32_t>(0);
    const uint32_t k_addr = get_arg_val<uint32_t>(1);
    const uint32_t v_addr = get_arg_val<uint32_t>(2);
    const uint32_t mask_addr = get_arg_val<uint32_t>(3);
    const uint32_t start = get_arg_val<uint32_t>(4);
    const uint32_t count = get_arg_val<uint32_t>(5);
    const Shape s = shape_args(6);
    constexpr uint32_t cb_q = tt::CBIndex::c_0, cb_k = tt::CBIndex::c_1, cb_v = tt::CBIndex::c_2;
    constexpr uint32_t cb_mask = tt::CBIndex::c_3, cb_scaler = tt::CBIndex::c_4, cb_ones_row = tt::CBIndex::c_5;
    constexpr uint32_t cb_floor = tt::CBIndex::c_6, cb_zero = tt::CBIndex::c_7;

    constexpr auto q_args = TensorAccessorArgs<2>();
    constexpr auto k_args = TensorAccessorArgs<q_args.next_compile_time_args_offset()>();
    constexpr auto v_args = TensorAccessorArgs<k_args.next_compile_time_args_offset()>();
    constexpr auto mask_args = TensorAccessorArgs<v_args.next_compile_time_args_offset()>();
    const auto q = TensorAccessor(q_args, q_addr);
    const auto k = TensorAccessor(k_args, k_addr);
    const auto v = TensorAccessor(v_args, v_addr);
    const auto mask = TensorAccessor(mask_args, mask_addr);
    const uint32_t tq = get_tile_size(cb_q), tk = get_tile_size(cb_k), tv = get_tile_size(cb_v);

    // Constant tiles, pushed once: the reduce scaler (1.0), a ones row (the column broadcast), -FLT_MAX and zeros.
    cb_reserve_back(cb_scaler, 1);
    fill<uint16_t>(get_write_ptr(cb_scaler), TILE * TILE, 0x3F80);
    cb_push_back(cb_scaler, 1);
    cb_reserve_back(cb_ones_row, 1);
    fill<uint16_t>(get_write_ptr(cb_ones_row), TILE * TILE, 0);
    volatile tt_l1_ptr uint16_t* row = reinterpret_cast<volatile tt_l1_ptr uint16_t*>(get_write_ptr(cb_ones_row));
    for (uint32_t c = 0; c < TILE; ++c) {
        row[face_index(0, c)] = 0x3F80;
    }
    cb_push_back(cb_ones_row, 1);
    cb_reserve_back(cb_floor, 1);
    fill<uint32_t>(get_write_ptr(cb_floor), TILE * TILE, 0xFF7FFFFF);
    cb_push_back(cb_floor, 1);
    cb_reserve_back(cb_zero, 1);
    fill<uint32_t>(get_write_ptr(cb_zero), TILE * TILE, 0);
    cb_push_back(cb_zero, 1);

    for (uint32_t u = start; u < start + count; ++u) {
        const uint32_t bh = u / s.sqt, qt = u % s.sqt;
        const uint32_t b = bh / s.hq, h = bh % s.hq;
        const uint32_t kv = b * s.hkv + h / (s.hq / s.hkv);
        cb_reserve_back(cb_q, s.dt);
        read_tiles(q, (bh * s.sqt + qt) * s.dt, s.dt, get_write_ptr(cb_q), tq);
        noc_async_read_barrier();
        cb_push_back(cb_q, s.dt);

        const uint32_t kend = key_tiles(s, qt);
        for (uint32_t kt0 = 0; kt0 < kend; kt0 += K_CHUNK_TILES) {
            const uint32_t nk = (kend - kt0 < K_CHUNK_TILES) ? kend - kt0 : K_CHUNK_TILES;
            cb_reserve_back(cb_k, K_CHUNK_TILES * s.dt);  // whole chunks, so the ring never wraps inside one
            read_tiles(k, (kv * s.skvt + kt0) * s.dt, nk * s.dt, get_write_ptr(cb_k), tk);
            noc_async_read_barrier();
            cb_push_back(cb_k, K_CHUNK_TILES * s.dt);

            for (uint32_t j = 0; j < nk; ++j) {
                const uint32_t kt = kt0 + j;
                if (!needs_mask(s, qt, kt)) {
                    continue;
                }
                cb_reserve_back(cb_mask, 1);
                const uint32_t l1 = get_write_ptr(cb_mask);
                if constexpr (has_mask) {
                    const uint32_t plane = b * s.mask_b_stride + h * s.mask_h_stride;
                    noc_async_read_page((plane * s.sqt + qt) * s.skvt + kt, mask, l1);
                    noc_async_read_barrier();
                } else {
                    fill<uint32_t>(l1, TILE * TILE, 0);
                }
                volatile tt_l1_ptr uint32_t* m = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(l1);
                for (uint32_t r = 0; r < TILE; ++r) {
                    for (uint32_t c = 0; c < TILE; ++c) {
                        const int32_t key = kt * TILE + c, qrow = qt * TILE + r;
                        if (key >= s.skv || (causal && key > qrow + s.offset)) {
                            m[face_index(r, c)] = 0xFF800000;  // -inf
                        }
                    }
                }
                cb_push_back(cb_mask, 1);
            }

            cb_reserve_back(cb_v, K_CHUNK_TILES * s.dvt);
            read_tiles(v, (kv * s.skvt + kt0) * s.dvt, nk * s.dvt, get_write_ptr(cb_v), tv);
            noc_async_read_barrier();
            cb_push_back(cb_v, K_CHUNK_TILES * s.dvt);
        }
    }
}
