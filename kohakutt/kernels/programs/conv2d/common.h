#pragma once

#include <cstdint>

constexpr uint32_t TILE = 32;
constexpr uint32_t DST_TILES = 4;
constexpr uint32_t N = get_compile_time_arg_val(0);
constexpr uint32_t C = get_compile_time_arg_val(1);
constexpr int32_t H = get_compile_time_arg_val(2);
constexpr int32_t W = get_compile_time_arg_val(3);
constexpr uint32_t K = get_compile_time_arg_val(4);
constexpr uint32_t G = get_compile_time_arg_val(5);
constexpr uint32_t KH = get_compile_time_arg_val(6);
constexpr uint32_t KW = get_compile_time_arg_val(7);
constexpr int32_t SH = get_compile_time_arg_val(8);
constexpr int32_t SW = get_compile_time_arg_val(9);
constexpr int32_t PT = get_compile_time_arg_val(10);
constexpr int32_t PL = get_compile_time_arg_val(11);
constexpr int32_t DH = get_compile_time_arg_val(12);
constexpr int32_t DW = get_compile_time_arg_val(13);
constexpr uint32_t OH = get_compile_time_arg_val(14);
constexpr uint32_t OW = get_compile_time_arg_val(15);
constexpr bool CHANNELS_LAST = get_compile_time_arg_val(16) == 1;
constexpr bool FP32_ACC = get_compile_time_arg_val(17) == 1;
constexpr bool HAS_BIAS = get_compile_time_arg_val(18) == 1;
constexpr bool OUT_BF16 = get_compile_time_arg_val(19) == 1;
constexpr bool W_RESIDENT = get_compile_time_arg_val(20) == 1;
constexpr uint32_t CG = C / G, KG = K / G;
constexpr uint32_t KRT = (KW * CG + TILE - 1) / TILE;  // K tiles per kernel row
constexpr uint32_t NT = (KG + TILE - 1) / TILE;        // output tiles per group
constexpr uint32_t NB = NT < DST_TILES ? NT : DST_TILES;
constexpr uint32_t M = N * OH * OW;
constexpr uint32_t MT = (M + TILE - 1) / TILE;
constexpr uint32_t W_TILES = KH * KRT * NT;  // weight tiles per group

inline uint32_t face_index(uint32_t r, uint32_t c) {
    return ((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15);
}
