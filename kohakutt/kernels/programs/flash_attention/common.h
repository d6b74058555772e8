// Flash attention forward: what the reader, compute and writer kernels share (see
// kohakutt/kernels/programs/attention.py). Compile-time args 0-1: causal, has_mask (they choose code paths). Every size
// is a runtime arg: each kernel's own args, then the shape block below, so a new shape compiles nothing.
#pragma once

#include <cstdint>

constexpr uint32_t TILE = 32;
constexpr uint32_t K_CHUNK_TILES = 4;
constexpr bool causal = get_compile_time_arg_val(0) == 1;
constexpr bool has_mask = get_compile_time_arg_val(1) == 1;
constexpr uint32_t SHAPE_ARGS = 12;

struct Shape {
    uint32_t hq, hkv, sqt, skvt, dt, dvt;
    int32_t sq, skv, offset;
    uint32_t mask_b_stride, mask_h_stride, scale_bits;
};

// The shape block: runtime args first .. first + SHAPE_ARGS - 1 (the same words, in this order, in every kernel).
inline Shape shape_args(uint32_t first) {
    Shape s;
    s.hq = get_arg_val<uint32_t>(first + 0);
    s.hkv = get_arg_val<uint32_t>(first + 1);
    s.sqt = get_arg_val<uint32_t>(first + 2);
    s.skvt = get_arg_val<uint32_t>(first + 3);
    s.dt = get_arg_val<uint32_t>(first + 4);
    s.dvt = get_arg_val<uint32_t>(first + 5);
    s.sq = static_cast<int32_t>(get_arg_val<uint32_t>(first + 6));
    s.skv = static_cast<int32_t>(get_arg_val<uint32_t>(first + 7));
    s.offset = static_cast<int32_t>(get_arg_val<uint32_t>(first + 8));
    s.mask_b_stride = get_arg_val<uint32_t>(first + 9);
    s.mask_h_stride = get_arg_val<uint32_t>(first + 10);
    s.scale_bits = get_arg_val<uint32_t>(first + 11);
    return s;
}

// K tiles Q tile qt reads: all, or under the causal mask those up to the last key its last real row sees.
inline uint32_t key_tiles(const Shape& s, uint32_t qt) {
    if (!causal) {
        return s.skvt;
    }
    const int32_t last = int32_t(qt * TILE + TILE - 1);
    const int32_t last_key = (last < s.sq - 1 ? last : s.sq - 1) + s.offset;
    if (last_key < 0) {
        return 0;
    }
    const uint32_t n = uint32_t(last_key) / TILE + 1;
    return n < s.skvt ? n : s.skvt;
}

// Whether the (qt, kt) score tile gets a mask tile: the user's mask, padded keys, or keys past the causal diagonal.
inline bool needs_mask(const Shape& s, uint32_t qt, uint32_t kt) {
    return has_mask || (kt == s.skvt - 1 && (s.skv % TILE) != 0) ||
           (causal && int32_t(kt * TILE + TILE - 1) > int32_t(qt * TILE) + s.offset);
}

// Where element (r, c) of a 32 x 32 tile sits in its four 16 x 16 faces (F0 F1 / F2 F3, each row-major).
inline uint32_t face_index(uint32_t r, uint32_t c) {
    return ((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15);
}
