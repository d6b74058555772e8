// The compute side of the host kernel API: the DST register file, unpack (a CB tile in its format to source-register
// values), the FPU and SFPU ops through the card's arithmetic core (native/runtime/cardmath.c), and pack (DST to a CB
// tile in its format, the packer's rounding). The three TRISCs run as one thread; the rules the Python twins' API
// (kohakutt/hal/backends/sim_compute.py) checks hold here too: a hardware start-up and the op's init before the op,
// math only between tile_regs_acquire and tile_regs_commit, pack only between tile_regs_wait and tile_regs_release,
// DST indices within the tiles DST holds, reads of waited-for pages and writes of reserved ones.
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "internal.h"
#include "ktt_runtime.h"

namespace ktt::sim {

constexpr int TILE = 32, TILE_ELEMS = TILE * TILE;

enum class RegState { Idle, Math, Committed, Pack, Full };

struct ComputeState {
    int dst_tiles = 8, phases = 4;
    bool fp32 = false, approx = false;
    std::vector<float> dst;
    std::vector<uint8_t> written;
    RegState regs = RegState::Idle;
    bool started = false;
    std::string fpu;  // the FPU op family the last init configured
    uint32_t flags = 0;
    std::string sfpu;  // the SFPU op the last *_tile_init configured
    bool reduce_mask = false;
    int reduce_dim = 0;
};

namespace {

std::string fmt(const char *f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

const char *state_name(RegState s) {
    switch (s) {
    case RegState::Idle: return "released";
    case RegState::Math: return "acquired by math";
    case RegState::Committed: return "committed";
    case RegState::Pack: return "held by the packer";
    case RegState::Full: return "acquired (acquire_dst)";
    }
    return "?";
}

const char *format_name(DataFormat f) {
    switch (f) {
    case DataFormat::Float32: return "float32";
    case DataFormat::Float16_b: return "bfloat16";
    case DataFormat::Bfp8_b: return "bfloat8_b";
    case DataFormat::Bfp4_b: return "bfloat4_b";
    case DataFormat::Int32: return "int32";
    case DataFormat::UInt32: return "uint32";
    case DataFormat::UInt16: return "uint16";
    case DataFormat::UInt8: return "uint8";
    default: return "an unknown format";
    }
}

struct Op {
    Kernel &k;
    ComputeState &s;
    std::unique_lock<std::mutex> lock;
    Op(Kernel &kernel) : k(kernel), s(*kernel.compute), lock(kernel.run->mu) {
        if (k.run->failed) throw Abort{};
    }
};

float round_dst(const ComputeState &s, float v) {
    if (s.fp32) return v;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        u = 0x7fc00000u;
    } else {
        u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
    }
    std::memcpy(&v, &u, 4);
    return v;
}

float *dst_tile(Op &o, uint32_t i, const char *call, Site at) {
    if (i >= static_cast<uint32_t>(o.s.dst_tiles)) {
        const bool full = o.s.dst_tiles > (o.s.fp32 ? 4 : 8);
        error(call, fmt("uses DST tile %u, but DST holds %d tiles (0..%d) with %s accumulation in %s mode; use fewer "
                        "tiles per acquire, or dst_full_sync_en / fp32_dest_acc_en=False for more",
                        i, o.s.dst_tiles, o.s.dst_tiles - 1, o.s.fp32 ? "fp32" : "bf16", full ? "full-sync" : "half-sync"),
              at);
    }
    return o.s.dst.data() + static_cast<size_t>(i) * TILE_ELEMS;
}

void store(Op &o, uint32_t i, const float *values) {
    float *d = o.s.dst.data() + static_cast<size_t>(i) * TILE_ELEMS;
    for (int j = 0; j < TILE_ELEMS; ++j) d[j] = round_dst(o.s, values[j]);
    o.s.written[i] = 1;
}

// A math op's preconditions: DST held by math, the hardware started, and (family != nullptr) the op's init.
void need_math(Op &o, const char *call, const char *family, const char *init, Site at) {
    if (o.s.regs != RegState::Math && o.s.regs != RegState::Full)
        error(call, fmt("outside tile_regs_acquire() / tile_regs_commit() (DST is %s): math may only write DST while "
                        "the math side holds it",
                        state_name(o.s.regs)),
              at);
    if (!o.s.started)
        error(call, "before the hardware start-up: call compute_kernel_hw_startup(icb0, icb1, ocb) once at the start "
                    "of the kernel",
              at);
    if (family != nullptr && o.s.fpu != family)
        error(call, fmt("needs %s first (the FPU is set up for %s): every op needs its init after any other op's",
                        init, o.s.fpu.empty() ? "nothing" : o.s.fpu.c_str()),
              at);
}

CB &float_cb(Op &o, uint32_t cb, const char *call, Site at) {
    CB &c = cb_of(o.k, static_cast<int32_t>(cb), call, at);
    if (c.tile_kind < 0)
        error(call, fmt("CB %u holds %s; the simulator's compute models the float formats (float32, bfloat16, "
                        "bfloat8_b, bfloat4_b)",
                        cb, format_name(c.fmt)),
              at);
    if (c.page_size < c.tile_bytes)
        error(call, fmt("CB %u has %u B pages, less than one %s tile (%u B); compute works on whole tiles, so the "
                        "page size must match the format",
                        cb, c.page_size, format_name(c.fmt), c.tile_bytes),
              at);
    return c;
}

// Tile `tile` of the front of CB `cb` as a source register holds it (row-major float32).
void unpack(Op &o, uint32_t cb, uint32_t tile, const char *call, float *out, Site at) {
    CB &c = float_cb(o, cb, call, at);
    if (tile >= c.waited)
        error(call, fmt("reads tile %u of CB %u, but the kernel waited for %s: call cb_wait_front(%u, %u) first", tile,
                        cb, plural(c.waited, "page").c_str(), cb, tile + 1),
              at);
    float raw[TILE_ELEMS];
    ktt_unpack_tiles(c.slot(c.popped + tile), raw, 1, TILE, TILE, c.tile_kind, 1);
    ktt_source_register(raw, out, TILE_ELEMS, o.s.fp32);
}

void pack(Op &o, const float *values, uint32_t cb, uint32_t tile, const char *call, Site at) {
    CB &c = float_cb(o, cb, call, at);
    if (tile >= c.reserved)
        error(call, fmt("writes tile %u of CB %u, but the kernel reserved %s: call cb_reserve_back(%u, %u) first", tile,
                        cb, plural(c.reserved, "page").c_str(), cb, tile + 1),
              at);
    ktt_pack_tiles(values, c.slot(c.pushed + tile), 1, TILE, TILE, c.tile_kind, 0, 1);
}

void transpose(float *t) {
    for (int r = 0; r < TILE; ++r)
        for (int c = r + 1; c < TILE; ++c) std::swap(t[r * TILE + c], t[c * TILE + r]);
}

int sfpu_code(const std::string &op) {
    static const char *names[] = {"exp",  "log",  "sqrt",     "rsqrt",  "reciprocal", "sigmoid", "tanh",   "gelu",
                                  "gelu_tanh", "silu", "sin", "cos", "erf", "relu", "abs", "negative", "square",
                                  "add",  "sub",  "mul",      "div",    "rsub"};
    for (int i = 0; i < KTT_SFPU_COUNT; ++i)
        if (op == names[i]) return i;
    return -1;
}

}  // namespace

Kernel::Kernel() = default;
Kernel::~Kernel() = default;  // here, where ComputeState is complete

void compute_create(Kernel &k) {
    auto s = std::make_unique<ComputeState>();
    s->dst_tiles = k.desc->dst_tiles;
    s->phases = k.desc->fidelity_phases;
    s->fp32 = k.desc->fp32_dest_acc != 0;
    s->approx = k.desc->approx != 0;
    s->dst.assign(static_cast<size_t>(s->dst_tiles) * TILE_ELEMS, 0.0f);
    s->written.assign(static_cast<size_t>(s->dst_tiles), 0);
    k.compute = std::move(s);
}

void compute_at_end(Kernel &k) {
    if (k.compute->regs != RegState::Idle)
        error("kernel_main returned", fmt("the kernel ended with DST %s: every tile_regs_acquire needs tile_regs_commit, "
                                          "tile_regs_wait and tile_regs_release",
                                          state_name(k.compute->regs)),
              Site{nullptr, 0});
}

}  // namespace ktt::sim

namespace ktt::host {

using namespace ktt::sim;

void tile_regs(Regs step, const char *call, Site at) {
    Op o(current());
    RegState &r = o.s.regs;
    auto need = [&](RegState want, const char *hint) {
        if (r != want) error(call, fmt("while DST is %s: %s", state_name(r), hint), at);
    };
    switch (step) {
    case Regs::Acquire:
    case Regs::AcquireFull:
        need(RegState::Idle, "release it first (tile_regs_release)");
        std::fill(o.s.dst.begin(), o.s.dst.end(), 0.0f);
        std::fill(o.s.written.begin(), o.s.written.end(), 0);
        r = step == Regs::Acquire ? RegState::Math : RegState::Full;
        break;
    case Regs::Commit:
        need(RegState::Math, "call tile_regs_acquire first");
        r = RegState::Committed;
        break;
    case Regs::Wait:
        need(RegState::Committed, "the math side must tile_regs_commit first");
        r = RegState::Pack;
        break;
    case Regs::Release:
        need(RegState::Pack, "call tile_regs_wait first");
        r = RegState::Idle;
        break;
    case Regs::ReleaseFull:
        need(RegState::Full, "call acquire_dst first");
        r = RegState::Idle;
        break;
    }
}

void hw_startup(int32_t icb0, int32_t icb1, int32_t ocb, Site at) {
    Op o(current());
    cb_of(o.k, icb0, "compute_kernel_hw_startup", at);
    cb_of(o.k, icb1, "compute_kernel_hw_startup", at);
    cb_of(o.k, ocb, "compute_kernel_hw_startup", at);
    o.s.started = true;
}

void fpu_init(const char *family, int32_t icb0, int32_t icb1, uint32_t flags, const char *call, Site at) {
    Op o(current());
    cb_of(o.k, icb0, call, at);
    cb_of(o.k, icb1, call, at);
    std::string f = family;
    if (f.size() > 7 && f.compare(f.size() - 7, 7, "_uninit") == 0) {
        o.s.fpu.clear();
        o.s.reduce_mask = false;
        return;
    }
    o.s.fpu = f;
    o.s.flags = flags;
    o.s.reduce_mask = f == "reduce";
    if (o.s.reduce_mask) o.s.reduce_dim = static_cast<int>(flags & 0xf);
}

void reconfig(int which, int32_t cb, Site at) {
    Op o(current());
    cb_of(o.k, cb, which == 2 ? "pack_reconfig_data_format" : "reconfig_data_format", at);
}

void copy_tile(uint32_t cb, uint32_t tile, uint32_t dst, Site at) {
    Op o(current());
    const bool t = o.s.fpu == "copy_transpose";
    need_math(o, "copy_tile", t ? nullptr : "copy", "copy_init(cb)", at);
    dst_tile(o, dst, "copy_tile", at);
    float v[TILE_ELEMS];
    unpack(o, cb, tile, "copy_tile", v, at);
    if (t) transpose(v);
    store(o, dst, v);
}

void binary_tiles(const char *op, uint32_t icb0, uint32_t icb1, uint32_t t0, uint32_t t1, uint32_t dst, int bcast,
                  Site at) {
    static const char *dims[] = {"", "_bcast_cols", "_bcast_rows", "_bcast_scalar"};
    Op o(current());
    const std::string family = std::string(op) + dims[bcast & 3];
    const std::string call = family == op ? std::string(op) + "_tiles" : std::string(op) + "_tiles" + dims[bcast & 3];
    const std::string init = bcast ? std::string(op) + dims[bcast & 3] + "_init / init_bcast"
                                   : std::string(op) + "_init(" + std::to_string(icb0) + ", " + std::to_string(icb1) + ")";
    need_math(o, call.c_str(), family.c_str(), init.c_str(), at);
    float *d = dst_tile(o, dst, call.c_str(), at);
    float a[TILE_ELEMS], b[TILE_ELEMS], r[TILE_ELEMS];
    unpack(o, icb0, t0, call.c_str(), a, at);
    unpack(o, icb1, t1, call.c_str(), b, at);
    if (bcast == 1) {  // COL: B's column 0 across each row
        for (int i = 0; i < TILE; ++i)
            for (int j = 1; j < TILE; ++j) b[i * TILE + j] = b[i * TILE];
    } else if (bcast == 2) {  // ROW: B's row 0 down each column
        for (int i = 1; i < TILE; ++i) std::memcpy(b + i * TILE, b, TILE * sizeof(float));
    } else if (bcast == 3) {
        for (int j = 1; j < TILE_ELEMS; ++j) b[j] = b[0];
    }
    const bool acc = (o.s.flags & 1) && op[0] != 'm';
    o.lock.unlock();
    if (op[0] == 'm') {
        ktt_fpu_mul(a, b, r, TILE_ELEMS, o.s.phases, o.s.fp32);
    } else {
        const bool add = op[0] == 'a';
        for (int j = 0; j < TILE_ELEMS; ++j) r[j] = add ? a[j] + b[j] : a[j] - b[j];
    }
    if (acc)
        for (int j = 0; j < TILE_ELEMS; ++j) r[j] = r[j] + d[j];
    store(o, dst, r);
}

void matmul_tiles(uint32_t in0, uint32_t in1, uint32_t t0, uint32_t t1, uint32_t dst, Site at) {
    Op o(current());
    need_math(o, "matmul_tiles", "matmul", "matmul_init(in0, in1)", at);
    float *d = dst_tile(o, dst, "matmul_tiles", at);
    float a[TILE_ELEMS], b[TILE_ELEMS];
    unpack(o, in0, t0, "matmul_tiles", a, at);
    unpack(o, in1, t1, "matmul_tiles", b, at);
    if (o.s.flags) transpose(b);
    o.lock.unlock();
    float r[TILE_ELEMS];
    std::memcpy(r, d, sizeof r);
    ktt_fpu_matmul_tile(r, a, b, o.s.phases, o.s.fp32);
    store(o, dst, r);
}

void reduce_tile(int pool, int dim, uint32_t icb, uint32_t scb, uint32_t t, uint32_t st, uint32_t dst, Site at) {
    Op o(current());
    need_math(o, "reduce_tile", "reduce", "reduce_init<pool, dim>(icb, icb_scaler, ocb)", at);
    const uint32_t want = (static_cast<uint32_t>(pool) << 4) | static_cast<uint32_t>(dim);
    if (want != o.s.flags)
        error("reduce_tile", "reduces with another PoolType / ReduceDim than reduce_init configured", at);
    float *d = dst_tile(o, dst, "reduce_tile", at);
    float x[TILE_ELEMS], sc[TILE_ELEMS];
    unpack(o, icb, t, "reduce_tile", x, at);
    unpack(o, scb, st, "reduce_tile", sc, at);
    const int fresh = o.s.written[dst] ? 0 : 1;
    o.lock.unlock();
    float r[TILE_ELEMS];
    std::memcpy(r, d, sizeof r);
    ktt_fpu_reduce_tile(r, x, sc[0], pool == 2, dim, o.s.phases, o.s.fp32, fresh);
    store(o, dst, r);
}

void transpose_tile(uint32_t cb, uint32_t tile, uint32_t dst, Site at) {
    Op o(current());
    need_math(o, "transpose_tile", "transpose", "transpose_init(icb)", at);
    dst_tile(o, dst, "transpose_tile", at);
    float v[TILE_ELEMS];
    unpack(o, cb, tile, "transpose_tile", v, at);
    transpose(v);
    store(o, dst, v);
}

namespace {
void block_window(Op &o, CB &c, uint32_t first, uint32_t block, bool waited, const char *call, Site at) {
    const uint32_t have = waited ? c.waited : c.reserved;
    if (first + block > have)
        error(call, fmt("needs pages %u..%u of CB %d but the kernel %s %s: call %s(%d, %u) first", first,
                        first + block - 1, c.index, waited ? "waited for" : "reserved", plural(have, "page").c_str(),
                        waited ? "cb_wait_front" : "cb_reserve_back", c.index, first + block),
              at);
    const uint64_t start = (waited ? c.popped : c.pushed) + first;
    if (start % c.num_pages + block > c.num_pages)
        error(call, fmt("%u pages of CB %d start at page slot %" PRIu64 " of %u, so the block wraps the ring's end; "
                        "make num_pages a multiple of the block",
                        block, c.index, start % c.num_pages, c.num_pages),
              at);
}

void need_idle(Op &o, const char *call, const char *family, const char *init, Site at) {
    if (o.s.regs != RegState::Idle)
        error(call, "manages DST itself: call it outside tile_regs_acquire / tile_regs_release", at);
    if (!o.s.started) error(call, "before the hardware start-up: call compute_kernel_hw_startup first", at);
    if (o.s.fpu != family)
        error(call, fmt("needs %s first (the FPU is set up for %s)", init, o.s.fpu.empty() ? "nothing" : o.s.fpu.c_str()),
              at);
}
}  // namespace

void tilize_block(uint32_t icb, uint32_t block, uint32_t ocb, uint32_t in_tile, uint32_t out_tile, Site at) {
    Op o(current());
    need_idle(o, "tilize_block", "tilize", "tilize_init(icb, block, ocb)", at);
    CB &src = cb_of(o.k, static_cast<int32_t>(icb), "tilize_block", at);
    CB &dst = float_cb(o, ocb, "tilize_block", at);
    if (src.fmt != DataFormat::Float16_b && src.fmt != DataFormat::Float32)
        error("tilize_block", fmt("reads row-major %s, which has no row-major form", format_name(src.fmt)), at);
    block_window(o, src, in_tile, block, true, "tilize_block", at);
    block_window(o, dst, out_tile, block, false, "tilize_block", at);
    const uint8_t *raw = src.slot(src.popped + in_tile);
    const bool bf16 = src.fmt == DataFormat::Float16_b;
    const size_t width = static_cast<size_t>(block) * TILE;
    for (uint32_t t = 0; t < block; ++t) {
        float v[TILE_ELEMS];
        for (int r = 0; r < TILE; ++r)
            for (int c = 0; c < TILE; ++c) {
                const size_t idx = static_cast<size_t>(r) * width + t * TILE + c;
                float x;
                if (bf16) {
                    uint16_t h;
                    std::memcpy(&h, raw + 2 * idx, 2);
                    uint32_t u = static_cast<uint32_t>(h) << 16;
                    std::memcpy(&x, &u, 4);
                } else {
                    std::memcpy(&x, raw + 4 * idx, 4);
                }
                v[r * TILE + c] = round_dst(o.s, x);
            }
        pack(o, v, ocb, out_tile + t, "tilize_block", at);
    }
}

void untilize_block(uint32_t icb, uint32_t block, uint32_t ocb, Site at) {
    Op o(current());
    need_idle(o, "untilize_block", "untilize", "untilize_init(icb)", at);
    float_cb(o, icb, "untilize_block", at);
    CB &dst = cb_of(o.k, static_cast<int32_t>(ocb), "untilize_block", at);
    if (dst.fmt != DataFormat::Float16_b && dst.fmt != DataFormat::Float32)
        error("untilize_block", fmt("writes row-major %s, which has no row-major form", format_name(dst.fmt)), at);
    CB &src = *o.k.core->cb_at_index[icb];
    block_window(o, src, 0, block, true, "untilize_block", at);
    block_window(o, dst, 0, block, false, "untilize_block", at);
    uint8_t *out = dst.slot(dst.pushed);
    const bool bf16 = dst.fmt == DataFormat::Float16_b;
    const size_t width = static_cast<size_t>(block) * TILE;
    for (uint32_t t = 0; t < block; ++t) {
        float v[TILE_ELEMS];
        unpack(o, icb, t, "untilize_block", v, at);
        for (int r = 0; r < TILE; ++r)
            for (int c = 0; c < TILE; ++c) {
                const size_t idx = static_cast<size_t>(r) * width + t * TILE + c;
                float x = round_dst(o.s, v[r * TILE + c]);
                if (bf16) {
                    uint16_t h;
                    ktt_f32_to_bf16(&x, &h, 1, 1);
                    std::memcpy(out + 2 * idx, &h, 2);
                } else {
                    std::memcpy(out + 4 * idx, &x, 4);
                }
            }
    }
}

void pack_tile(uint32_t dst, uint32_t ocb, uint32_t out_tile, bool out_of_order, Site at) {
    Op o(current());
    if (o.s.regs != RegState::Pack && o.s.regs != RegState::Full)
        error("pack_tile", fmt("outside tile_regs_wait() / tile_regs_release() (DST is %s): the packer may only read "
                               "DST after the math side commits it",
                               state_name(o.s.regs)),
              at);
    const float *d = dst_tile(o, dst, "pack_tile", at);
    if (!o.s.reduce_mask) {
        pack(o, d, ocb, out_tile, "pack_tile", at);
        return;
    }
    // After reduce_init the packer writes zeros outside the reduction's result (0.81.1's reduce.h).
    float v[TILE_ELEMS] = {};
    for (int i = 0; i < TILE; ++i) {
        const int idx = o.s.reduce_dim == 0 ? i * TILE : o.s.reduce_dim == 1 ? i : 0;
        v[idx] = d[idx];
    }
    pack(o, v, ocb, out_tile, "pack_tile", at);
}

void sfpu_init(const char *op, Site at) {
    Op o(current());
    o.s.sfpu = op;
}

void sfpu_unary(const char *op, uint32_t dst, int approx, float param, Site at) {
    Op o(current());
    const std::string name = op;
    const bool scalar = name == "add" || name == "sub" || name == "mul" || name == "div" || name == "rsub";
    const std::string call = scalar ? name + "_unary_tile" : (name == "reciprocal" ? "recip" : name) + "_tile";
    need_math(o, call.c_str(), nullptr, "", at);
    const std::string init = scalar ? "binop_with_scalar" : name;
    if (o.s.sfpu != init)
        error(call.c_str(), fmt("needs %s_tile_init() first (the SFPU is set up for %s)",
                                scalar ? "binop_with_scalar" : (name == "reciprocal" ? "recip" : name.c_str()),
                                o.s.sfpu.empty() ? "nothing" : o.s.sfpu.c_str()),
              at);
    float *d = dst_tile(o, dst, call.c_str(), at);
    const int code = sfpu_code(name);
    const bool ap = approx < 0 ? o.s.approx : approx != 0;
    o.lock.unlock();
    float r[TILE_ELEMS];
    ktt_sfpu(code, d, r, TILE_ELEMS, ap, param);
    store(o, dst, r);
}

void sfpu_binary(const char *op, uint32_t d0, uint32_t d1, uint32_t od, Site at) {
    Op o(current());
    const std::string name = op;
    const std::string call = (name == "max" || name == "min") ? "binary_" + name + "_tile" : name + "_binary_tile";
    need_math(o, call.c_str(), nullptr, "", at);
    if (o.s.sfpu != "binary_" + name)
        error(call.c_str(), fmt("needs %s_init() first (the SFPU is set up for %s)", call.c_str(),
                                o.s.sfpu.empty() ? "nothing" : o.s.sfpu.c_str()),
              at);
    const float *a = dst_tile(o, d0, call.c_str(), at), *b = dst_tile(o, d1, call.c_str(), at);
    dst_tile(o, od, call.c_str(), at);
    float r[TILE_ELEMS];
    for (int j = 0; j < TILE_ELEMS; ++j) {
        const float x = a[j], y = b[j];
        switch (name[0]) {
        case 'a': r[j] = x + y; break;
        case 's': r[j] = x - y; break;
        case 'd': r[j] = x / y; break;
        default:
            if (name == "mul") {
                r[j] = x * y;
            } else if (name == "max") {
                r[j] = (x != x || y != y) ? NAN : (x > y ? x : y);
            } else {
                r[j] = (x != x || y != y) ? NAN : (x < y ? x : y);
            }
        }
    }
    store(o, od, r);
}

void sfpu_fill(uint32_t dst, float value, Site at) {
    Op o(current());
    need_math(o, "fill_tile", nullptr, "", at);
    if (o.s.sfpu != "fill")
        error("fill_tile", fmt("needs fill_tile_init() first (the SFPU is set up for %s)",
                               o.s.sfpu.empty() ? "nothing" : o.s.sfpu.c_str()),
              at);
    dst_tile(o, dst, "fill_tile", at);
    float v[TILE_ELEMS];
    for (float &x : v) x = value;
    store(o, dst, v);
}

void copy_dest(uint32_t src, uint32_t dst, Site at) {
    Op o(current());
    need_math(o, "copy_dest_values", nullptr, "", at);
    if (o.s.sfpu != "copy_dest_values")
        error("copy_dest_values", "needs copy_dest_values_init() first", at);
    const float *s = dst_tile(o, src, "copy_dest_values", at);
    dst_tile(o, dst, "copy_dest_values", at);
    float v[TILE_ELEMS];
    std::memcpy(v, s, sizeof v);
    store(o, dst, v);
}

bool compute_fp32_dest_acc() { return current().compute->fp32; }
bool compute_approx() { return current().compute->approx; }

}  // namespace ktt::host
