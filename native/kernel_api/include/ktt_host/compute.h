// The compute kernel API of TT-Metal 0.81.1 (api/compute/...), host build. Every api/compute header of the host
// build includes this one: a kernel gets the whole API whichever of them it includes (the card's toolchain, in the
// compile check, holds it to the exact headers). The three TRISCs run as one thread: MATH(...), PACK(...) and
// UNPACK(...) keep their argument; APPROX, DST_ACCUM_MODE and MATH_FIDELITY come from the kernel's compute config,
// as the JIT's generated descriptors define them.
#pragma once

#include <cstdint>

#include "ktt_host/common.h"

#define MATH(...) __VA_ARGS__
#define PACK(...) __VA_ARGS__
#define UNPACK(...) __VA_ARGS__

#ifndef KTT_APPROX
#define KTT_APPROX 0
#endif
#ifndef KTT_DST_ACCUM_MODE
#define KTT_DST_ACCUM_MODE 0
#endif
#ifndef KTT_MATH_FIDELITY
#define KTT_MATH_FIDELITY 4
#endif

constexpr bool APPROX = KTT_APPROX;
constexpr bool DST_ACCUM_MODE = KTT_DST_ACCUM_MODE;
constexpr int MATH_FIDELITY = KTT_MATH_FIDELITY;

namespace ckernel {

enum class VectorMode : std::uint8_t { None = 0, R = 1, C = 2, RC = 4, RC_custom = 6, Invalid = 0xFF };
enum class ReduceDim : std::uint8_t { REDUCE_ROW, REDUCE_COL, REDUCE_SCALAR };
enum class PoolType : std::uint8_t { SUM, AVG, MAX, MIN };
enum class EltwiseBinaryType : std::uint8_t { ELWMUL, ELWDIV, ELWADD, ELWSUB, ELWLESS };
enum class EltwiseBinaryReuseDestType { NONE = 0, DEST_TO_SRCA = 1, DEST_TO_SRCB = 2 };
enum class BroadcastType : std::uint8_t { NONE = 0x0, COL = 0x1, ROW = 0x2, SCALAR = 0x3 };
enum class MathFidelity : std::uint8_t { LoFi = 0, HiFi2 = 2, HiFi3 = 3, HiFi4 = 4 };
enum class SrcOrder : uint8_t { Regular = 0, Reverse = 1 };
enum class InputClamping : uint8_t { ClampToNegative = 1, None = 0 };
enum class ReciprocalDestAcc { BF16, FP32 };
enum class ReciprocalApproxMode { Default, Precise, Approximate };
enum class RsqrtMode { Default, Fast };

namespace p_sfpu {
constexpr uint16_t kCONST_1_FP16B = 0x3F80;
}

// ------------------------------------------------------------------------------------ circular buffers (compute)
ALWI void cb_wait_front(uint32_t cbid, uint32_t ntiles, KTT_SITE) { ::ktt::host::cb_wait_front(cbid, ntiles, KTT_HERE); }
ALWI void cb_pop_front(uint32_t cbid, uint32_t ntiles, KTT_SITE) { ::ktt::host::cb_pop_front(cbid, ntiles, KTT_HERE); }
ALWI void cb_reserve_back(uint32_t cbid, uint32_t ntiles, KTT_SITE) {
    ::ktt::host::cb_reserve_back(cbid, ntiles, KTT_HERE);
}
ALWI void cb_push_back(uint32_t cbid, uint32_t ntiles, KTT_SITE) { ::ktt::host::cb_push_back(cbid, ntiles, KTT_HERE); }

// --------------------------------------------------------------------------------------------- DST handshakes
ALWI void tile_regs_acquire(KTT_SITE) {
    ::ktt::host::tile_regs(::ktt::host::Regs::Acquire, "tile_regs_acquire", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tile_regs_commit(KTT_SITE) {
    ::ktt::host::tile_regs(::ktt::host::Regs::Commit, "tile_regs_commit", KTT_HERE);
}
ALWI void tile_regs_wait(KTT_SITE) { ::ktt::host::tile_regs(::ktt::host::Regs::Wait, "tile_regs_wait", KTT_HERE); }
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tile_regs_release(KTT_SITE) {
    ::ktt::host::tile_regs(::ktt::host::Regs::Release, "tile_regs_release", KTT_HERE);
}
[[deprecated("Use tile_regs_acquire() instead")]] ALWI void acquire_dst(KTT_SITE) {
    ::ktt::host::tile_regs(::ktt::host::Regs::AcquireFull, "acquire_dst", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Use tile_regs_release() instead")]] ALWI void release_dst(KTT_SITE) {
    ::ktt::host::tile_regs(::ktt::host::Regs::ReleaseFull, "release_dst", KTT_HERE);
}

// ---------------------------------------------------------------------------------------- start-up and inits
template <SrcOrder src_order = SrcOrder::Regular>
ALWI void compute_kernel_hw_startup(uint32_t icb0, uint32_t icb1, uint32_t ocb, KTT_SITE) {
    ::ktt::host::hw_startup(icb0, icb1, ocb, KTT_HERE);
}
ALWI void compute_kernel_hw_startup(uint32_t icb0, uint32_t ocb, KTT_SITE) {
    ::ktt::host::hw_startup(icb0, icb0, ocb, KTT_HERE);
}

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void copy_init(std::uint32_t cbid, std::uint32_t transpose = 0, std::uint32_t transpose_within_16x16_face = false,
                    std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init(transpose ? "copy_transpose" : "copy", cbid, cbid, 0, "copy_init", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Renamed to copy_init(). This will be removed after 20-09-2026.")]] ALWI void copy_tile_init(
    std::uint32_t cbid, std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("copy", cbid, cbid, 0, "copy_tile_init", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Renamed to copy_init(). This will be removed after 20-09-2026.")]] ALWI void
copy_tile_to_dst_init_short(std::uint32_t cbid, std::uint32_t transpose = 0,
                            std::uint32_t transpose_within_16x16_face = false,
                            std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init(transpose ? "copy_transpose" : "copy", cbid, cbid, 0, "copy_tile_to_dst_init_short",
                          KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Use compute_kernel_hw_startup(icb, ocb) once at kernel start, then copy_init(icb).")]] ALWI void
unary_op_init_common(uint32_t icb, uint32_t ocb, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::hw_startup(icb, icb, ocb, KTT_HERE);
    ::ktt::host::fpu_init("copy", icb, icb, 0, "unary_op_init_common", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("Use compute_kernel_hw_startup(icb, ocb) once at kernel start, then copy_init(icb).")]] ALWI void
init_sfpu(uint32_t icb, uint32_t ocb, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::hw_startup(icb, icb, ocb, KTT_HERE);
    ::ktt::host::fpu_init("copy", icb, icb, 0, "init_sfpu", KTT_HERE);
}

ALWI void add_init(std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = false,
                   std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("add", icb0, icb1, acc_to_dest, "add_init", KTT_HERE);
}
ALWI void sub_init(std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = false,
                   std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("sub", icb0, icb1, acc_to_dest, "sub_init", KTT_HERE);
}
// acc_to_dest is unused on Blackhole for mul (0.81.1's eltwise_binary.h).
ALWI void mul_init(std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = true,
                   std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("mul", icb0, icb1, 0, "mul_init", KTT_HERE);
}
template <bool full_init, EltwiseBinaryType eltwise_binary_type>
ALWI void binary_tiles_init(std::uint32_t icb0, std::uint32_t icb1, bool acc_to_dest = false,
                            std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    constexpr const char *op = eltwise_binary_type == EltwiseBinaryType::ELWADD   ? "add"
                               : eltwise_binary_type == EltwiseBinaryType::ELWSUB ? "sub"
                               : eltwise_binary_type == EltwiseBinaryType::ELWMUL ? "mul"
                                                                                  : nullptr;
    static_assert(op != nullptr, "binary_tiles_init: the host build has ELWADD, ELWSUB and ELWMUL");
    ::ktt::host::fpu_init(op, icb0, icb1, eltwise_binary_type == EltwiseBinaryType::ELWMUL ? 0 : acc_to_dest,
                          "binary_tiles_init", KTT_HERE);
}

ALWI void matmul_init(std::uint32_t in0_cb_id, std::uint32_t in1_cb_id, const std::uint32_t transpose = 0,
                      std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("matmul", in0_cb_id, in1_cb_id, transpose, "matmul_init", KTT_HERE);
}
ALWI void mm_uninit(std::uint32_t in0_cb_id, std::uint32_t in1_cb_id) {}

template <PoolType reduce_type, ReduceDim reduce_dim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reduce_init(std::uint32_t icb, std::uint32_t icb_scaler, std::uint32_t ocb,
                      std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    static_assert(reduce_type != PoolType::MIN, "reduce_init: the host build has SUM, AVG and MAX");
    ::ktt::host::fpu_init("reduce", icb, icb_scaler, (static_cast<uint32_t>(reduce_type) << 4) | static_cast<uint32_t>(reduce_dim),
                          "reduce_init", KTT_HERE);
}
ALWI void reduce_uninit(std::uint32_t icb = 0, KTT_SITE) {
    ::ktt::host::fpu_init("reduce_uninit", icb, icb, 0, "reduce_uninit", KTT_HERE);
}

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void transpose_init(uint32_t icb, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("transpose", icb, icb, 0, "transpose_init", KTT_HERE);
}

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tilize_init(uint32_t icb, uint32_t block, uint32_t ocb, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("tilize", icb, ocb, block, "tilize_init", KTT_HERE);
}
ALWI void tilize_uninit(uint32_t icb, uint32_t ocb, KTT_SITE) {
    ::ktt::host::fpu_init("tilize_uninit", icb, ocb, 0, "tilize_uninit", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("unpack-based untilize is deprecated; use pack_untilize instead.")]] ALWI void untilize_init(
    uint32_t icb, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("untilize", icb, icb, 0, "untilize_init", KTT_HERE);
}
[[deprecated("unpack-based untilize is deprecated; use pack_untilize instead.")]] ALWI void untilize_uninit(
    uint32_t icb, KTT_SITE) {
    ::ktt::host::fpu_init("untilize_uninit", icb, icb, 0, "untilize_uninit", KTT_HERE);
}

ALWI void add_bcast_rows_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("add_bcast_rows", icb0, icb1, 0, "add_bcast_rows_init", KTT_HERE);
}
ALWI void sub_bcast_rows_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("sub_bcast_rows", icb0, icb1, 0, "sub_bcast_rows_init", KTT_HERE);
}
ALWI void add_bcast_cols_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("add_bcast_cols", icb0, icb1, 0, "add_bcast_cols_init", KTT_HERE);
}
ALWI void add_bcast_scalar_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("add_bcast_scalar", icb0, icb1, 0, "add_bcast_scalar_init", KTT_HERE);
}
ALWI void mul_bcast_scalar_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("mul_bcast_scalar", icb0, icb1, 0, "mul_bcast_scalar_init", KTT_HERE);
}
ALWI void mul_bcast_cols_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("mul_bcast_cols", icb0, icb1, 0, "mul_bcast_cols_init", KTT_HERE);
}
ALWI void mul_bcast_rows_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("mul_bcast_rows", icb0, icb1, 0, "mul_bcast_rows_init", KTT_HERE);
}
ALWI void sub_bcast_cols_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("sub_bcast_cols", icb0, icb1, 0, "sub_bcast_cols_init", KTT_HERE);
}
ALWI void sub_bcast_scalar_init(uint32_t icb0, uint32_t icb1, uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::fpu_init("sub_bcast_scalar", icb0, icb1, 0, "sub_bcast_scalar_init", KTT_HERE);
}
template <EltwiseBinaryType tBcastOp, BroadcastType tBcastDim>
ALWI void init_bcast(uint32_t icb0, uint32_t icb1, uint32_t ocb, KTT_SITE) {
    constexpr const char *op = tBcastOp == EltwiseBinaryType::ELWADD   ? "add"
                               : tBcastOp == EltwiseBinaryType::ELWSUB ? "sub"
                               : tBcastOp == EltwiseBinaryType::ELWMUL ? "mul"
                                                                       : nullptr;
    static_assert(op != nullptr, "init_bcast: the host build has ELWADD, ELWSUB and ELWMUL");
    constexpr const char *family[3][4] = {
        {"add", "add_bcast_cols", "add_bcast_rows", "add_bcast_scalar"},
        {"sub", "sub_bcast_cols", "sub_bcast_rows", "sub_bcast_scalar"},
        {"mul", "mul_bcast_cols", "mul_bcast_rows", "mul_bcast_scalar"}};
    constexpr int i = tBcastOp == EltwiseBinaryType::ELWADD ? 0 : tBcastOp == EltwiseBinaryType::ELWSUB ? 1 : 2;
    ::ktt::host::hw_startup(icb0, icb1, ocb, KTT_HERE);
    ::ktt::host::fpu_init(family[i][static_cast<int>(tBcastDim)], icb0, icb1, 0, "init_bcast", KTT_HERE);
}

// -------------------------------------------------------------------------------------------------- FPU ops
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void copy_tile(std::uint32_t in_cb_id, std::uint32_t in_tile_index, std::uint32_t dst_tile_index, KTT_SITE) {
    ::ktt::host::copy_tile(in_cb_id, in_tile_index, dst_tile_index, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void copy_block(std::uint32_t in_cb_id, std::uint32_t start_in_tile_index, std::uint32_t start_dst_tile_index,
                     std::uint32_t ntiles, KTT_SITE) {
    for (std::uint32_t i = 0; i < ntiles; ++i)
        ::ktt::host::copy_tile(in_cb_id, start_in_tile_index + i, start_dst_tile_index + i, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t itile0, std::uint32_t itile1,
                    std::uint32_t idst, KTT_SITE) {
    ::ktt::host::binary_tiles("add", icb0, icb1, itile0, itile1, idst, 0, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t itile0, std::uint32_t itile1,
                    std::uint32_t idst, KTT_SITE) {
    ::ktt::host::binary_tiles("sub", icb0, icb1, itile0, itile1, idst, 0, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t itile0, std::uint32_t itile1,
                    std::uint32_t idst, KTT_SITE) {
    ::ktt::host::binary_tiles("mul", icb0, icb1, itile0, itile1, idst, 0, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_block(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t start_itile0, std::uint32_t start_itile1,
                    std::uint32_t start_idst, std::uint32_t ntiles, KTT_SITE) {
    for (std::uint32_t i = 0; i < ntiles; ++i)
        ::ktt::host::binary_tiles("add", icb0, icb1, start_itile0 + i, start_itile1 + i, start_idst + i, 0, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_block(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t start_itile0, std::uint32_t start_itile1,
                    std::uint32_t start_idst, std::uint32_t ntiles, KTT_SITE) {
    for (std::uint32_t i = 0; i < ntiles; ++i)
        ::ktt::host::binary_tiles("sub", icb0, icb1, start_itile0 + i, start_itile1 + i, start_idst + i, 0, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_block(std::uint32_t icb0, std::uint32_t icb1, std::uint32_t start_itile0, std::uint32_t start_itile1,
                    std::uint32_t start_idst, std::uint32_t ntiles, KTT_SITE) {
    for (std::uint32_t i = 0; i < ntiles; ++i)
        ::ktt::host::binary_tiles("mul", icb0, icb1, start_itile0 + i, start_itile1 + i, start_idst + i, 0, KTT_HERE);
}

template <EltwiseBinaryType tBcastOp, BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void any_tiles_bcast(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, KTT_SITE) {
    constexpr const char *op = tBcastOp == EltwiseBinaryType::ELWADD   ? "add"
                               : tBcastOp == EltwiseBinaryType::ELWSUB ? "sub"
                               : tBcastOp == EltwiseBinaryType::ELWMUL ? "mul"
                                                                       : nullptr;
    static_assert(op != nullptr, "any_tiles_bcast: the host build has ELWADD, ELWSUB and ELWMUL");
    ::ktt::host::binary_tiles(op, icb0, icb1, itile0, itile1, idst, static_cast<int>(tBcastDim), KTT_HERE);
}
template <BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void add_tiles_bcast(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, KTT_SITE) {
    ::ktt::host::binary_tiles("add", icb0, icb1, itile0, itile1, idst, static_cast<int>(tBcastDim), KTT_HERE);
}
template <BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sub_tiles_bcast(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, KTT_SITE) {
    ::ktt::host::binary_tiles("sub", icb0, icb1, itile0, itile1, idst, static_cast<int>(tBcastDim), KTT_HERE);
}
template <BroadcastType tBcastDim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void mul_tiles_bcast(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, KTT_SITE) {
    ::ktt::host::binary_tiles("mul", icb0, icb1, itile0, itile1, idst, static_cast<int>(tBcastDim), KTT_HERE);
}
#define KTT_BCAST(name, op, dim)                                                                              \
    template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>                                                      \
    ALWI void name(uint32_t icb0, uint32_t icb1, uint32_t itile0, uint32_t itile1, uint32_t idst, KTT_SITE) { \
        ::ktt::host::binary_tiles(op, icb0, icb1, itile0, itile1, idst, static_cast<int>(dim), KTT_HERE);     \
    }
KTT_BCAST(add_tiles_bcast_rows, "add", BroadcastType::ROW)
KTT_BCAST(sub_tiles_bcast_rows, "sub", BroadcastType::ROW)
KTT_BCAST(mul_tiles_bcast_rows, "mul", BroadcastType::ROW)
KTT_BCAST(add_tiles_bcast_cols, "add", BroadcastType::COL)
KTT_BCAST(sub_tiles_bcast_cols, "sub", BroadcastType::COL)
KTT_BCAST(mul_tiles_bcast_cols, "mul", BroadcastType::COL)
KTT_BCAST(add_tiles_bcast_scalar, "add", BroadcastType::SCALAR)
KTT_BCAST(sub_tiles_bcast_scalar, "sub", BroadcastType::SCALAR)
KTT_BCAST(mul_tiles_bcast_scalar, "mul", BroadcastType::SCALAR)
#undef KTT_BCAST

ALWI void matmul_tiles(std::uint32_t in0_cb_id, std::uint32_t in1_cb_id, std::uint32_t in0_tile_index,
                       std::uint32_t in1_tile_index, std::uint32_t idst, KTT_SITE) {
    ::ktt::host::matmul_tiles(in0_cb_id, in1_cb_id, in0_tile_index, in1_tile_index, idst, KTT_HERE);
}

template <PoolType reduce_type, ReduceDim reduce_dim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reduce_tile(std::uint32_t icb, std::uint32_t icb_scaler, std::uint32_t itile, std::uint32_t itile_scaler,
                      std::uint32_t idst, KTT_SITE) {
    ::ktt::host::reduce_tile(static_cast<int>(reduce_type), static_cast<int>(reduce_dim), icb, icb_scaler, itile,
                             itile_scaler, idst, KTT_HERE);
}
template <PoolType reduce_type, ReduceDim reduce_dim, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reduce_block(std::uint32_t icb, std::uint32_t icb_scaler, std::uint32_t start_itile,
                       std::uint32_t itile_scaler, std::uint32_t start_idst, std::uint32_t ntiles, KTT_SITE) {
    for (std::uint32_t i = 0; i < ntiles; ++i)
        ::ktt::host::reduce_tile(static_cast<int>(reduce_type), static_cast<int>(reduce_dim), icb, icb_scaler,
                                 start_itile + i, itile_scaler, start_idst + i, KTT_HERE);
}

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void transpose_tile(uint32_t icb, uint32_t itile, uint32_t idst, KTT_SITE) {
    ::ktt::host::transpose_tile(icb, itile, idst, KTT_HERE);
}

template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tilize_block(uint32_t icb, uint32_t block, uint32_t ocb, uint32_t input_tile_index = 0,
                       uint32_t output_tile_index = 0, KTT_SITE) {
    ::ktt::host::tilize_block(icb, block, ocb, input_tile_index, output_tile_index, KTT_HERE);
}
template <uint32_t block_ct_dim = 1, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
[[deprecated("unpack-based untilize is deprecated; use pack_untilize instead.")]] ALWI void untilize_block(
    uint32_t icb, uint32_t full_ct_dim, uint32_t ocb, KTT_SITE) {
    ::ktt::host::untilize_block(icb, full_ct_dim, ocb, KTT_HERE);
}

// ------------------------------------------------------------------------------------------------------ pack
ALWI void pack_init(std::uint32_t ocb, std::uint32_t call_line = __builtin_LINE(), KTT_SITE) {
    ::ktt::host::reconfig(2, ocb, KTT_HERE);
}
template <bool out_of_order_output = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void pack_tile(std::uint32_t ifrom_dst, std::uint32_t icb, std::uint32_t output_tile_index = 0, KTT_SITE) {
    ::ktt::host::pack_tile(ifrom_dst, icb, output_tile_index, out_of_order_output, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void pack_block(std::uint32_t ifrom_dst, std::uint32_t icb, std::uint32_t ntiles, KTT_SITE) {
    for (std::uint32_t i = 0; i < ntiles; ++i) ::ktt::host::pack_tile(ifrom_dst + i, icb, i, false, KTT_HERE);
}

// ------------------------------------------------------------------------------- data-format reconfiguration
// The host build unpacks and packs each CB in its own format, so these only check their CBs.
// 0.81.1 takes the two sources in natural (icb0, icb1) order; SrcOrder::Reverse (matmul) puts icb0 in SrcB.
template <SrcOrder src_order = SrcOrder::Regular>
ALWI void reconfig_data_format(std::uint32_t icb0_new_operand, std::uint32_t icb1_new_operand, KTT_SITE) {
    constexpr bool reverse = src_order == SrcOrder::Reverse;
    ::ktt::host::reconfig(0, reverse ? icb1_new_operand : icb0_new_operand, KTT_HERE);
    ::ktt::host::reconfig(1, reverse ? icb0_new_operand : icb1_new_operand, KTT_HERE);
}
template <SrcOrder src_order = SrcOrder::Regular>
ALWI void reconfig_data_format(std::uint32_t icb0_old_operand, std::uint32_t icb0_new_operand,
                               std::uint32_t icb1_old_operand, std::uint32_t icb1_new_operand, KTT_SITE) {
    constexpr bool reverse = src_order == SrcOrder::Reverse;
    ::ktt::host::reconfig(0, reverse ? icb1_new_operand : icb0_new_operand, KTT_HERE);
    ::ktt::host::reconfig(1, reverse ? icb0_new_operand : icb1_new_operand, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reconfig_data_format_srca(std::uint32_t srca_new_operand, KTT_SITE) {
    ::ktt::host::reconfig(0, srca_new_operand, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reconfig_data_format_srca(std::uint32_t srca_old_operand, std::uint32_t srca_new_operand, KTT_SITE) {
    ::ktt::host::reconfig(0, srca_new_operand, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reconfig_data_format_srcb(std::uint32_t srcb_new_operand, KTT_SITE) {
    ::ktt::host::reconfig(1, srcb_new_operand, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void reconfig_data_format_srcb(std::uint32_t srcb_old_operand, std::uint32_t srcb_new_operand, KTT_SITE) {
    ::ktt::host::reconfig(1, srcb_new_operand, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void pack_reconfig_data_format(std::uint32_t new_operand, KTT_SITE) {
    ::ktt::host::reconfig(2, new_operand, KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void pack_reconfig_data_format(std::uint32_t old_operand, std::uint32_t new_operand, KTT_SITE) {
    ::ktt::host::reconfig(2, new_operand, KTT_HERE);
}

// ------------------------------------------------------------------------------------------------------ SFPU
#define KTT_SFPU_INIT(name, op) \
    ALWI void name(KTT_SITE) { ::ktt::host::sfpu_init(op, KTT_HERE); }
#define KTT_SFPU_OP(name, op) \
    ALWI void name(uint32_t idst, KTT_SITE) { ::ktt::host::sfpu_unary(op, idst, 0, 0.0f, KTT_HERE); }

template <bool approx = false, uint32_t scale = 0x3F800000, InputClamping input_clamping = InputClamping::ClampToNegative,
          bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void exp_tile_init(KTT_SITE) {
    static_assert(scale == 0x3F800000, "exp_tile_init: the host build has no scaled exp");
    ::ktt::host::sfpu_init("exp", KTT_HERE);
}
template <bool approx = false, bool scale_en = false, InputClamping input_clamping = InputClamping::ClampToNegative,
          int iterations = 8, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void exp_tile(uint32_t idst, VectorMode vector_mode = VectorMode::RC, uint16_t scale = p_sfpu::kCONST_1_FP16B,
                   KTT_SITE) {
    static_assert(!scale_en, "exp_tile: the host build has no scaled exp");
    ::ktt::host::sfpu_unary("exp", idst, approx, 0.0f, KTT_HERE);
}
template <bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void log_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("log", KTT_HERE);
}
template <bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void log_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("log", idst, fast_and_approx, 0.0f, KTT_HERE);
}
template <ReciprocalDestAcc dest_acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16,
          ReciprocalApproxMode approximation = ReciprocalApproxMode::Default>
ALWI void recip_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("reciprocal", KTT_HERE);
}
template <ReciprocalDestAcc dest_acc = DST_ACCUM_MODE ? ReciprocalDestAcc::FP32 : ReciprocalDestAcc::BF16,
          ReciprocalApproxMode approximation = ReciprocalApproxMode::Default>
ALWI void recip_tile(uint32_t idst, VectorMode vector_mode = VectorMode::RC, KTT_SITE) {
    constexpr int approx = approximation == ReciprocalApproxMode::Default       ? -1
                           : approximation == ReciprocalApproxMode::Approximate ? 1
                                                                                : 0;
    ::ktt::host::sfpu_unary("reciprocal", idst, approx, 0.0f, KTT_HERE);
}
KTT_SFPU_INIT(sqrt_tile_init, "sqrt")
template <bool FAST_APPROX = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sqrt_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("sqrt", idst, FAST_APPROX, 0.0f, KTT_HERE);
}
KTT_SFPU_INIT(rsqrt_tile_init, "rsqrt")
template <RsqrtMode mode = RsqrtMode::Default, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void rsqrt_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("rsqrt", idst, mode == RsqrtMode::Fast, 0.0f, KTT_HERE);
}
template <bool fast_and_approx = true, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void gelu_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("gelu", KTT_HERE);
}
template <bool fast_and_approx = true, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void gelu_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("gelu", idst, fast_and_approx, 0.0f, KTT_HERE);
}
template <bool fast = false>
ALWI void gelu_tanh_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("gelu_tanh", KTT_HERE);
}
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE, bool fast = false>
ALWI void gelu_tanh_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("gelu_tanh", idst, fast, 0.0f, KTT_HERE);
}
template <bool fast_and_approx = false>
ALWI void sigmoid_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("sigmoid", KTT_HERE);
}
template <VectorMode vec_mode = VectorMode::RC, bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void sigmoid_tile(uint32_t idst, KTT_SITE) {
    static_assert(vec_mode == VectorMode::RC, "sigmoid_tile: the host build runs on whole tiles (VectorMode::RC)");
    ::ktt::host::sfpu_unary("sigmoid", idst, fast_and_approx, 0.0f, KTT_HERE);
}
template <bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tanh_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("tanh", KTT_HERE);
}
template <bool fast_and_approx = false, bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
ALWI void tanh_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("tanh", idst, fast_and_approx, 0.0f, KTT_HERE);
}
KTT_SFPU_INIT(silu_tile_init, "silu")
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
KTT_SFPU_OP(silu_tile, "silu")
KTT_SFPU_INIT(square_tile_init, "square")
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
KTT_SFPU_OP(square_tile, "square")
KTT_SFPU_INIT(abs_tile_init, "abs")
KTT_SFPU_OP(abs_tile, "abs")
KTT_SFPU_INIT(negative_tile_init, "negative")
KTT_SFPU_OP(negative_tile, "negative")
KTT_SFPU_INIT(relu_tile_init, "relu")
KTT_SFPU_OP(relu_tile, "relu")
KTT_SFPU_INIT(sin_tile_init, "sin")
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
KTT_SFPU_OP(sin_tile, "sin")
KTT_SFPU_INIT(cos_tile_init, "cos")
template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>
KTT_SFPU_OP(cos_tile, "cos")
template <bool fast_and_approx = false>
ALWI void erf_tile_init(KTT_SITE) {
    ::ktt::host::sfpu_init("erf", KTT_HERE);
}
template <bool fast_and_approx = false>
ALWI void erf_tile(uint32_t idst, KTT_SITE) {
    ::ktt::host::sfpu_unary("erf", idst, fast_and_approx, 0.0f, KTT_HERE);
}

KTT_SFPU_INIT(binop_with_scalar_tile_init, "binop_with_scalar")
#define KTT_SFPU_SCALAR(name, op)                                                           \
    template <bool is_fp32_dest_acc_en = DST_ACCUM_MODE>                                    \
    ALWI void name(uint32_t idst, uint32_t param1, KTT_SITE) {                              \
        float p;                                                                            \
        std::memcpy(&p, &param1, 4);                                                        \
        ::ktt::host::sfpu_unary(op, idst, 0, p, KTT_HERE);                                  \
    }
KTT_SFPU_SCALAR(add_unary_tile, "add")
KTT_SFPU_SCALAR(sub_unary_tile, "sub")
KTT_SFPU_SCALAR(mul_unary_tile, "mul")
KTT_SFPU_SCALAR(div_unary_tile, "div")
KTT_SFPU_SCALAR(rsub_unary_tile, "rsub")
#undef KTT_SFPU_SCALAR

KTT_SFPU_INIT(fill_tile_init, "fill")
ALWI void fill_tile(uint32_t idst, float param0, KTT_SITE) { ::ktt::host::sfpu_fill(idst, param0, KTT_HERE); }
ALWI void fill_tile_bitcast(uint32_t idst, uint32_t param0, KTT_SITE) {
    float p;
    std::memcpy(&p, &param0, 4);
    ::ktt::host::sfpu_fill(idst, p, KTT_HERE);
}

KTT_SFPU_INIT(copy_dest_values_init, "copy_dest_values")
[[deprecated("Use copy_dest_values<DataFormat> instead")]] ALWI void copy_dest_values(uint32_t idst_in, uint32_t idst_out,
                                                                                      KTT_SITE) {
    ::ktt::host::copy_dest(idst_in, idst_out, KTT_HERE);
}
template <DataFormat DATA_FORMAT>
ALWI void copy_dest_values(uint32_t idst_in, uint32_t idst_out, KTT_SITE) {
    ::ktt::host::copy_dest(idst_in, idst_out, KTT_HERE);
}

#define KTT_SFPU_BINARY(init, name, op)                                                    \
    ALWI void init(KTT_SITE) { ::ktt::host::sfpu_init("binary_" op, KTT_HERE); }           \
    ALWI void name(uint32_t idst0, uint32_t idst1, uint32_t odst, KTT_SITE) {               \
        ::ktt::host::sfpu_binary(op, idst0, idst1, odst, KTT_HERE);                         \
    }
KTT_SFPU_BINARY(add_binary_tile_init, add_binary_tile, "add")
KTT_SFPU_BINARY(sub_binary_tile_init, sub_binary_tile, "sub")
KTT_SFPU_BINARY(mul_binary_tile_init, mul_binary_tile, "mul")
KTT_SFPU_BINARY(div_binary_tile_init, div_binary_tile, "div")
KTT_SFPU_BINARY(binary_max_tile_init, ktt_binary_max_tile, "max")
KTT_SFPU_BINARY(binary_min_tile_init, ktt_binary_min_tile, "min")
#undef KTT_SFPU_BINARY
ALWI void binary_max_tile(uint32_t idst0, uint32_t idst1, uint32_t odst, VectorMode vector_mode = VectorMode::RC,
                          KTT_SITE) {
    ::ktt::host::sfpu_binary("max", idst0, idst1, odst, KTT_HERE);
}
ALWI void binary_min_tile(uint32_t idst0, uint32_t idst1, uint32_t odst, VectorMode vector_mode = VectorMode::RC,
                          KTT_SITE) {
    ::ktt::host::sfpu_binary("min", idst0, idst1, odst, KTT_HERE);
}
#undef KTT_SFPU_INIT
#undef KTT_SFPU_OP

}  // namespace ckernel

using namespace ckernel;
