// Convolution as an implicit GEMM: what the reader, compute and writer kernels share (see
// kohakutt/kernels/programs/conv.py). Compile-time args 0-4 are the flags below (they choose code paths); every size
// is a runtime arg: each kernel's own args, then the shape block, so a new shape compiles nothing.
#pragma once

#include <cstdint>

constexpr uint32_t TILE = 32;
constexpr uint32_t DST_TILES = 4;     // an fp32 DST in half-sync mode: the output tiles one block accumulates
constexpr uint32_t DRAM_ALIGN = 64;   // Blackhole: a DRAM read's L1 and NOC addresses agree modulo 64 B
constexpr uint32_t WRITE_ALIGN = 16;  // and a write's (to DRAM or L1) modulo 16 B
constexpr bool CHANNELS_LAST = get_compile_time_arg_val(0) == 1;
constexpr bool FP32_ACC = get_compile_time_arg_val(1) == 1;
constexpr bool HAS_BIAS = get_compile_time_arg_val(2) == 1;
constexpr bool OUT_BF16 = get_compile_time_arg_val(3) == 1;
constexpr bool W_RESIDENT = get_compile_time_arg_val(4) == 1;
constexpr uint32_t FLAG_ARGS = 5;
constexpr uint32_t MAX_SLOTS = 32;  // channels-last input sticks the reader reads before one barrier
constexpr uint32_t SHAPE_ARGS = 16;

struct Shape {
    uint32_t n, c;
    int32_t h, w;
    uint32_t k, g, kh, kw;
    int32_t sh, sw, pt, pl, dh, dw;
    uint32_t oh, ow;
    // derived
    uint32_t cg, kg, krt, nt, nb, m, mt, w_tiles;
};

// The shape block: runtime args first .. first + SHAPE_ARGS - 1 (the same words, in this order, in every kernel).
inline Shape shape_args(uint32_t first) {
    Shape s;
    uint32_t v[SHAPE_ARGS];
    for (uint32_t i = 0; i < SHAPE_ARGS; ++i) {
        v[i] = get_arg_val<uint32_t>(first + i);
    }
    s.n = v[0];
    s.c = v[1];
    s.h = int32_t(v[2]);
    s.w = int32_t(v[3]);
    s.k = v[4];
    s.g = v[5];
    s.kh = v[6];
    s.kw = v[7];
    s.sh = int32_t(v[8]);
    s.sw = int32_t(v[9]);
    s.pt = int32_t(v[10]);
    s.pl = int32_t(v[11]);
    s.dh = int32_t(v[12]);
    s.dw = int32_t(v[13]);
    s.oh = v[14];
    s.ow = v[15];
    s.cg = s.c / s.g;
    s.kg = s.k / s.g;
    s.krt = (s.kw * s.cg + TILE - 1) / TILE;  // K tiles per kernel row
    s.nt = (s.kg + TILE - 1) / TILE;          // output tiles per group
    s.nb = s.nt < DST_TILES ? s.nt : DST_TILES;
    s.m = s.n * s.oh * s.ow;
    s.mt = (s.m + TILE - 1) / TILE;
    s.w_tiles = s.kh * s.krt * s.nt;  // weight tiles per group
    return s;
}

// The pixels of M tile mt as runs on one output row: calls f(i0, n, oh, ow0, len) for each, i0 its first tile row.
template <typename F>
inline void for_each_run(const Shape& s, uint32_t mt, F f) {
    const uint32_t m_end = (mt + 1) * TILE < s.m ? (mt + 1) * TILE : s.m;
    uint32_t m = mt * TILE;
    while (m < m_end) {
        const uint32_t n = m / (s.oh * s.ow), oh = (m / s.ow) % s.oh, ow0 = m % s.ow;
        const uint32_t len = (s.ow - ow0) < (m_end - m) ? (s.ow - ow0) : (m_end - m);
        f(m - mt * TILE, n, oh, ow0, len);
        m += len;
    }
}

// Where element (r, c) of a 32 x 32 tile sits in its four 16 x 16 faces (F0 F1 / F2 F3, each row-major).
inline uint32_t face_index(uint32_t r, uint32_t c) {
    return ((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15);
}

inline uint32_t round_up(uint32_t v, uint32_t a) {
    return (v + a - 1) / a * a;
}
