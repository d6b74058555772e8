#pragma once

#include <cstdint>

constexpr uint32_t TILE = 32;
constexpr uint32_t K_CHUNK_TILES = 4;
constexpr uint32_t hq = get_compile_time_arg_val(0);
constexpr uint32_t hkv = get_compile_time_arg_val(1);
constexpr uint32_t sqt = get_compile_time_arg_val(2);
constexpr uint32_t skvt = get_compile_time_arg_val(3);
constexpr uint32_t dt = get_compile_time_arg_val(4);
constexpr uint32_t dvt = get_compile_time_arg_val(5);
constexpr int32_t sq = get_compile_time_arg_val(6);
constexpr int32_t skv = get_compile_time_arg_val(7);
constexpr bool causal = get_compile_time_arg_val(8) == 1;
constexpr int32_t offset = static_cast<int32_t>(get_compile_time_arg_val(9));
constexpr bool has_mask = get_compile_time_arg_val(10) == 1;
constexpr uint32_t mask_b_stride = get_compile_time_arg_val(11);
constexpr uint32_t mask_h_stride = get_compile_time_arg_val(12);
constexpr uint32_t scale_bits = get_compile_time_arg_val(13);

// K tiles Q tile qt reads: all, or under the causal mask those up to the last key its last real row sees.
inline uint32_t key_tiles(uint32_t qt) {
    if (!causal) return skvt;
    const int32_t last_row = (int32_t(qt * TILE + TILE - 1) < sq - 1) ? int32_t(qt * TILE + TILE - 1) : sq - 1;
    const int32_t last_key = last_row + offset;
    if (last_key < 0) return 0;
    const uint32_t n = uint32_t(last_key) / TILE + 1;
    return n < skvt ? n : skvt;
}

// Whether the (qt, kt) score tile gets a mask tile: the user's mask, padded keys, or keys past the causal diagonal.
inline bool needs_mask(uint32_t qt, uint32_t kt) {
    return has_mask || (kt == skvt - 1 && (skv % TILE) != 0) ||
           (causal && int32_t(kt * TILE + TILE - 1) > int32_t(qt * TILE) + offset);
}
