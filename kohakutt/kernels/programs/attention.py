"""Kohaku-TT's flash attention forward as a Metalium program: reader / compute / writer C++ sources, their simulator
twins, and :func:`run_flash_program`, which runs it through ``device.run_program``.

Work: one unit per (batch x query head, 32-row Q tile), split evenly over the cores. Per unit the reader streams the
Q tile row (Dt tiles); then per K chunk (``K_CHUNK_TILES`` = 4 tiles, 128 keys) the K tiles (kt major, dt minor), one
additive fp32 mask tile per (Q tile, K tile) pair that hides anything (the user's mask tile with -inf written over
the causal triangle and the padded keys), and the V tiles (kt major, dvt minor). K and V come from key/value head
h // (Hq / Hkv) (GQA, MQA). K tiles past the last key that any row of the Q tile may see under the causal mask are
not read at all; a short last chunk still takes a whole chunk's pages, so no ring wraps inside a chunk. Key j is
visible to query i when j <= i + offset (offset 0: PyTorch's top-left causal mask; varlen sequences pass Skv - Sq,
flash-attn's bottom-right one).

Compute, with an fp32 DST at the kernel's fidelity (HiFi4 unless a numerics scope says otherwise), per K chunk:

- ``S_j = (Q K_j^T) * scale``: matmul_tiles against the transposed K tile, mul_unary_tile; packed fp32.
- ``S_j = S_j + mask_j`` where a mask tile exists: add_tiles of the packed S and the mask (both read as TF32).
- ``m = max(rowmax_j S_j, M_old)``: reduce_tile MAX over rows of each S tile and of the broadcast M_old.
- ``M = m`` broadcast along the rows: matmul_tiles of the column tile by a tile whose row 0 is ones; exact at
  HiFi3 / HiFi4, while at LoFi / HiFi2 SrcB keeps 7 bits of m, and the kernel then uses that M throughout.
- ``P_j = exp(S_j - M)``: sub_tiles, exp_tile; packed bf16 (the P @ V operand).
- ``alpha = exp(M_old - M)``: sub_tiles, exp_tile (not in the first chunk, where l and O start at 0).
- ``l = alpha * l + rowsum_j P_j``: mul_tiles (alpha in SrcA), then one reduce_tile SUM per P tile into that DST.
- ``O_t = alpha * O_t + sum_j P_j V_jt``: mul_tiles, then matmul_tiles accumulating in DST, one O tile at a time.

Then ``R = 1 / (l + 2^-100)`` (add_unary_tile, recip_tile) broadcast like M, ``out_t = R * O_t`` packed in the
output's format, and ``lse = M + log(l)`` (log_tile, then add_tiles with acc_to_dest over M and a zero tile). A row
that sees no key keeps l = 0 and M = -FLT_MAX, so it gives out = 0 and lse = -inf. The writer drains the out tiles
and column 0 of each lse tile, as one 32-float row page of the lse buffer.

``kohakutt.kernels.attention.flash_forward`` is the vectorized model of the same arithmetic (the op library's fast
path); the tests compare the two. The C++ sources also carry what the simulator does not model: the unpacker and
packer format reconfigurations between CBs of different formats (``reconfig_data_format`` /
``pack_reconfig_data_format``) and ``reduce_uninit``; the twins read every CB in its own format instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from kohakutt.hal.card import P150A
from kohakutt.hal.layout import TILE_FACE_INDEX, Format, face_index
from kohakutt.hal.program import (
    CircularBuffer,
    CoreRange,
    CoreRangeSet,
    Kernel,
    Program,
    Work,
    require_dram,
    split_work,
    tensor_accessor_args,
)
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels.programs import SOURCE_DIR

TILE = 32
K_CHUNK_TILES = 4  # 128 keys per K chunk
NEG_INF_BITS = 0xFF800000
FLOOR_BITS = 0xFF7FFFFF  # -FLT_MAX: the running max's start (finite, so M_old - M never makes a NaN)
TINY_BITS = 0x0D800000  # 2^-100, added to l before the reciprocal: a row that sees no key gives 0, not NaN
ONE_BF16 = 0x3F80

# Circular buffers: inputs 0..7, outputs 16..20, intermediates and running state 24..31.
CB_Q, CB_K, CB_V, CB_MASK, CB_SCALER, CB_ONES_ROW, CB_FLOOR, CB_ZERO = range(8)
CB_OUT, CB_LSE, CB_LSE_ROW, CB_RCOL, CB_RBCAST = range(16, 21)
CB_SRAW, CB_S, CB_P, CB_MCOL, CB_M, CB_ALPHA, CB_L, CB_O = range(24, 32)

# The shape block of runtime arguments, the same words in the three kernels (common.h's Shape, in this order), after
# each kernel's own: the reader's q, k, v, mask addresses, first unit and units; the compute kernel's first unit and
# units; the writer's out and lse addresses, first unit and units. causal and has_mask are compile-time args 0-1.
ARG_NAMES = ("hq", "hkv", "sqt", "skvt", "dt", "dvt", "sq", "skv", "offset", "mask_b_stride", "mask_h_stride",
             "scale_bits")  # fmt: skip
SHAPE_AT = {"reader": 6, "compute": 2, "writer": 4}


# --------------------------------------------------------------------------------------------------- the C++
SOURCES = SOURCE_DIR / "flash_attention"  # reader.cpp, compute.cpp, writer.cpp (+ common.h)


# ---------------------------------------------------------------------------------------------- shape helpers
@dataclass(frozen=True)
class FlashShape:
    """The shape of a flash attention program: the flags (compile-time args) and the shape block (runtime args)."""

    hq: int
    hkv: int
    sqt: int
    skvt: int
    dt: int
    dvt: int
    sq: int
    skv: int
    causal: bool
    offset: int
    has_mask: bool
    mask_b_stride: int
    mask_h_stride: int
    scale_bits: int

    def compile_time_args(self) -> list[int]:
        """The flags every kernel's compile-time arguments start with: causal, has_mask."""
        return [int(self.causal), int(self.has_mask)]

    def shape_args(self) -> list[int]:
        """The shape block of the runtime arguments (``ARG_NAMES``; signed values as their uint32 bits)."""
        return [int(getattr(self, n)) & 0xFFFFFFFF for n in ARG_NAMES]

    @classmethod
    def of_kernel(cls, k: Any) -> FlashShape:
        """The shape as kernel ``k`` reads it: the flags from its compile-time args, the rest from its runtime args."""
        first = SHAPE_AT[k.kernel.kind]
        vals = {n: int(k.get_arg_val(first + i)) for i, n in enumerate(ARG_NAMES)}
        for n in ("sq", "skv", "offset"):
            vals[n] = int(np.uint32(vals[n]).view(np.int32))
        flags = {"causal": bool(k.get_compile_time_arg_val(0)), "has_mask": bool(k.get_compile_time_arg_val(1))}
        return cls(**{f.name: (flags | vals)[f.name] for f in fields(cls)})

    def key_tiles(self, qt: int) -> int:
        """K tiles Q tile ``qt`` reads: all, or under the causal mask those up to its last real row's last key."""
        if not self.causal:
            return self.skvt
        last_key = min(qt * TILE + TILE - 1, self.sq - 1) + self.offset
        return 0 if last_key < 0 else min(self.skvt, last_key // TILE + 1)

    def needs_mask(self, qt: int, kt: int) -> bool:
        return (self.has_mask or (kt == self.skvt - 1 and self.skv % TILE != 0)
                or (self.causal and kt * TILE + TILE - 1 > qt * TILE + self.offset))  # fmt: skip

    def hidden(self, qt: int, kt: int) -> np.ndarray:
        """(32, 32) bool: the (row, key) positions of the (qt, kt) score tile that the kernel sets to -inf."""
        key = kt * TILE + np.arange(TILE)[None, :]
        row = qt * TILE + np.arange(TILE)[:, None]
        hide = np.broadcast_to(key >= self.skv, (TILE, TILE))
        return hide | (key > row + self.offset) if self.causal else hide.copy()

    def chunks(self, qt: int) -> list[tuple[int, int]]:
        """(first K tile, tiles) of each K chunk Q tile ``qt`` runs."""
        kend = self.key_tiles(qt)
        return [(kt0, min(K_CHUNK_TILES, kend - kt0)) for kt0 in range(0, kend, K_CHUNK_TILES)]


# ----------------------------------------------------------------------------------------- the Python twins
def reader(k: Any) -> None:
    """Twin of reader.cpp."""
    s = FlashShape.of_kernel(k)
    start, count = k.get_arg_val(4), k.get_arg_val(5)
    q, kk, v = k.tensor_accessor("q"), k.tensor_accessor("k"), k.tensor_accessor("v")
    mask = k.tensor_accessor("mask") if s.has_mask else None
    ones_row = np.zeros(TILE * TILE, np.uint16)
    ones_row[TILE_FACE_INDEX[0]] = ONE_BF16
    for cb, tile in ((CB_SCALER, np.full(TILE * TILE, ONE_BF16, np.uint16)), (CB_ONES_ROW, ones_row),
                     (CB_FLOOR, np.full(TILE * TILE, FLOOR_BITS, np.uint32)),
                     (CB_ZERO, np.zeros(TILE * TILE, np.uint32))):  # fmt: skip
        k.cb_reserve_back(cb, 1)
        k.l1_write(k.get_write_ptr(cb), tile)
        k.cb_push_back(cb, 1)
    tq, tk, tv = k.get_tile_size(CB_Q), k.get_tile_size(CB_K), k.get_tile_size(CB_V)
    for u in range(start, start + count):
        bh, qt = divmod(u, s.sqt)
        b, h = divmod(bh, s.hq)
        kv = b * s.hkv + h // (s.hq // s.hkv)
        k.cb_reserve_back(CB_Q, s.dt)
        for d in range(s.dt):
            k.noc_async_read_tile((bh * s.sqt + qt) * s.dt + d, q, k.get_write_ptr(CB_Q) + d * tq)
        k.noc_async_read_barrier()
        k.cb_push_back(CB_Q, s.dt)
        for kt0, nk in s.chunks(qt):
            k.cb_reserve_back(CB_K, K_CHUNK_TILES * s.dt)
            for j in range(nk):
                for d in range(s.dt):
                    k.noc_async_read_tile((kv * s.skvt + kt0 + j) * s.dt + d, kk,
                                          k.get_write_ptr(CB_K) + (j * s.dt + d) * tk)  # fmt: skip
            k.noc_async_read_barrier()
            k.cb_push_back(CB_K, K_CHUNK_TILES * s.dt)
            for j in range(nk):
                kt = kt0 + j
                if not s.needs_mask(qt, kt):
                    continue
                k.cb_reserve_back(CB_MASK, 1)
                l1 = k.get_write_ptr(CB_MASK)
                if mask is not None:
                    plane = b * s.mask_b_stride + h * s.mask_h_stride
                    k.noc_async_read_tile((plane * s.sqt + qt) * s.skvt + kt, mask, l1)
                    k.noc_async_read_barrier()
                    m = k.l1_read(l1, TILE * TILE * 4).view(np.uint32)
                else:
                    m = np.zeros(TILE * TILE, np.uint32)
                m[TILE_FACE_INDEX[s.hidden(qt, kt)]] = NEG_INF_BITS
                k.l1_write(l1, m)
                k.cb_push_back(CB_MASK, 1)
            k.cb_reserve_back(CB_V, K_CHUNK_TILES * s.dvt)
            for j in range(nk):
                for d in range(s.dvt):
                    k.noc_async_read_tile((kv * s.skvt + kt0 + j) * s.dvt + d, v,
                                          k.get_write_ptr(CB_V) + (j * s.dvt + d) * tv)  # fmt: skip
            k.noc_async_read_barrier()
            k.cb_push_back(CB_V, K_CHUNK_TILES * s.dvt)


def _pack_dst0(c: Any, cb: int, index: int) -> None:
    c.tile_regs_commit()
    c.tile_regs_wait()
    c.pack_tile(0, cb, index)
    c.tile_regs_release()


def _broadcast_column(c: Any, cb_col: int, cb_dst: int) -> None:
    c.cb_wait_front(cb_col, 1)
    c.tile_regs_acquire()
    c.mm_init_short(cb_col, CB_ONES_ROW)
    c.matmul_tiles(cb_col, CB_ONES_ROW, 0, 0, 0)
    c.cb_reserve_back(cb_dst, 1)
    _pack_dst0(c, cb_dst, 0)
    c.cb_push_back(cb_dst, 1)
    c.cb_pop_front(cb_col, 1)


def compute(c: Any) -> None:
    """Twin of compute.cpp."""
    s = FlashShape.of_kernel(c)
    start, count = c.get_arg_val(0), c.get_arg_val(1)
    c.compute_kernel_hw_startup(CB_Q, CB_K, CB_S)
    c.mm_init(CB_Q, CB_K, CB_S)
    for cb in (CB_SCALER, CB_ONES_ROW, CB_FLOOR, CB_ZERO):
        c.cb_wait_front(cb, 1)
    for u in range(start, start + count):
        qt = u % s.sqt
        chunks = s.chunks(qt)
        c.cb_wait_front(CB_Q, s.dt)
        for kt0, nk in chunks:
            first = kt0 == 0
            c.cb_wait_front(CB_K, K_CHUNK_TILES * s.dt)
            c.cb_reserve_back(CB_S, K_CHUNK_TILES)
            for j in range(nk):
                masked = s.needs_mask(qt, kt0 + j)
                c.tile_regs_acquire()
                c.mm_init_short(CB_Q, CB_K, 1)
                for d in range(s.dt):
                    c.matmul_tiles(CB_Q, CB_K, d, j * s.dt + d, 0, 1)
                c.binop_with_scalar_tile_init()
                c.mul_unary_tile(0, s.scale_bits)
                if not masked:
                    _pack_dst0(c, CB_S, j)
                else:
                    c.cb_reserve_back(CB_SRAW, 1)
                    _pack_dst0(c, CB_SRAW, 0)
                    c.cb_push_back(CB_SRAW, 1)
                    c.cb_wait_front(CB_SRAW, 1)
                    c.cb_wait_front(CB_MASK, 1)
                    c.tile_regs_acquire()
                    c.add_tiles_init(CB_SRAW, CB_MASK)
                    c.add_tiles(CB_SRAW, CB_MASK, 0, 0, 0)
                    _pack_dst0(c, CB_S, j)
                    c.cb_pop_front(CB_SRAW, 1)
                    c.cb_pop_front(CB_MASK, 1)
            c.cb_push_back(CB_S, K_CHUNK_TILES)
            c.cb_pop_front(CB_K, K_CHUNK_TILES * s.dt)

            c.cb_wait_front(CB_S, K_CHUNK_TILES)
            if not first:
                c.cb_wait_front(CB_M, 1)
            c.tile_regs_acquire()
            c.reduce_init(CB_S, CB_SCALER, CB_MCOL, pool="max", dim="row")
            c.reduce_tile(CB_FLOOR if first else CB_M, CB_SCALER, 0, 0, 0)
            for j in range(nk):
                c.reduce_tile(CB_S, CB_SCALER, j, 0, 0)
            c.cb_reserve_back(CB_MCOL, 1)
            _pack_dst0(c, CB_MCOL, 0)
            c.cb_push_back(CB_MCOL, 1)
            _broadcast_column(c, CB_MCOL, CB_M)
            m_new = 0 if first else 1
            c.cb_wait_front(CB_M, m_new + 1)

            c.cb_reserve_back(CB_P, K_CHUNK_TILES)
            for j in range(nk):
                c.tile_regs_acquire()
                c.sub_tiles_init(CB_S, CB_M)
                c.sub_tiles(CB_S, CB_M, j, m_new, 0)
                c.exp_tile_init()
                c.exp_tile(0)
                _pack_dst0(c, CB_P, j)
            c.cb_push_back(CB_P, K_CHUNK_TILES)
            c.cb_pop_front(CB_S, K_CHUNK_TILES)

            if not first:
                c.tile_regs_acquire()
                c.sub_tiles_init(CB_M, CB_M)
                c.sub_tiles(CB_M, CB_M, 0, 1, 0)
                c.exp_tile_init()
                c.exp_tile(0)
                c.cb_reserve_back(CB_ALPHA, 1)
                _pack_dst0(c, CB_ALPHA, 0)
                c.cb_push_back(CB_ALPHA, 1)
                c.cb_pop_front(CB_M, 1)
                c.cb_wait_front(CB_ALPHA, 1)
                c.cb_wait_front(CB_L, 1)

            c.cb_wait_front(CB_P, K_CHUNK_TILES)
            c.tile_regs_acquire()
            if not first:
                c.mul_tiles_init(CB_ALPHA, CB_L)
                c.mul_tiles(CB_ALPHA, CB_L, 0, 0, 0)
            c.reduce_init(CB_P, CB_SCALER, CB_L, pool="sum", dim="row")
            for j in range(nk):
                c.reduce_tile(CB_P, CB_SCALER, j, 0, 0)
            c.cb_reserve_back(CB_L, 1)
            _pack_dst0(c, CB_L, 0)
            c.cb_push_back(CB_L, 1)
            if not first:
                c.cb_pop_front(CB_L, 1)

            c.cb_wait_front(CB_V, K_CHUNK_TILES * s.dvt)
            if not first:
                c.cb_wait_front(CB_O, s.dvt)
            c.cb_reserve_back(CB_O, s.dvt)
            for t in range(s.dvt):
                c.tile_regs_acquire()
                if not first:
                    c.mul_tiles_init(CB_ALPHA, CB_O)
                    c.mul_tiles(CB_ALPHA, CB_O, 0, t, 0)
                c.mm_init_short(CB_P, CB_V)
                for j in range(nk):
                    c.matmul_tiles(CB_P, CB_V, j, j * s.dvt + t, 0)
                _pack_dst0(c, CB_O, t)
            c.cb_push_back(CB_O, s.dvt)
            if not first:
                c.cb_pop_front(CB_O, s.dvt)
                c.cb_pop_front(CB_ALPHA, 1)
            c.cb_pop_front(CB_P, K_CHUNK_TILES)
            c.cb_pop_front(CB_V, K_CHUNK_TILES * s.dvt)

        anykey = bool(chunks)
        cb_l, cb_m, cb_o = (CB_L, CB_M, CB_O) if anykey else (CB_ZERO, CB_FLOOR, CB_ZERO)
        if anykey:
            c.cb_wait_front(CB_L, 1)
            c.cb_wait_front(CB_M, 1)
            c.cb_wait_front(CB_O, s.dvt)
        c.tile_regs_acquire()
        c.copy_tile_init(cb_l)
        c.copy_tile(cb_l, 0, 0)
        c.binop_with_scalar_tile_init()
        c.add_unary_tile(0, TINY_BITS)
        c.recip_tile_init()
        c.recip_tile(0)
        c.cb_reserve_back(CB_RCOL, 1)
        _pack_dst0(c, CB_RCOL, 0)
        c.cb_push_back(CB_RCOL, 1)
        _broadcast_column(c, CB_RCOL, CB_RBCAST)
        c.cb_wait_front(CB_RBCAST, 1)
        for t in range(s.dvt):
            c.tile_regs_acquire()
            c.mul_tiles_init(CB_RBCAST, cb_o)
            c.mul_tiles(CB_RBCAST, cb_o, 0, t if anykey else 0, 0)
            c.cb_reserve_back(CB_OUT, 1)
            _pack_dst0(c, CB_OUT, 0)
            c.cb_push_back(CB_OUT, 1)
        c.tile_regs_acquire()
        c.copy_tile_init(cb_l)
        c.copy_tile(cb_l, 0, 0)
        c.log_tile_init()
        c.log_tile(0)
        c.add_tiles_init(cb_m, CB_ZERO, acc_to_dest=True)
        c.add_tiles(cb_m, CB_ZERO, 0, 0, 0)
        c.cb_reserve_back(CB_LSE, 1)
        _pack_dst0(c, CB_LSE, 0)
        c.cb_push_back(CB_LSE, 1)
        c.cb_pop_front(CB_RBCAST, 1)
        if anykey:
            c.cb_pop_front(CB_L, 1)
            c.cb_pop_front(CB_M, 1)
            c.cb_pop_front(CB_O, s.dvt)
        c.cb_pop_front(CB_Q, s.dt)
    for cb in (CB_SCALER, CB_ONES_ROW, CB_FLOOR, CB_ZERO):
        c.cb_pop_front(cb, 1)


_COL0 = TILE_FACE_INDEX[:, 0]


def writer(k: Any) -> None:
    """Twin of writer.cpp."""
    s = FlashShape.of_kernel(k)
    start, count = k.get_arg_val(2), k.get_arg_val(3)
    out, lse = k.tensor_accessor("out"), k.tensor_accessor("lse")
    k.cb_reserve_back(CB_LSE_ROW, 1)
    row = k.get_write_ptr(CB_LSE_ROW)
    for u in range(start, start + count):
        for t in range(s.dvt):
            k.cb_wait_front(CB_OUT, 1)
            k.noc_async_write_tile(u * s.dvt + t, out, k.get_read_ptr(CB_OUT))
            k.noc_async_writes_flushed()
            k.cb_pop_front(CB_OUT, 1)
        k.cb_wait_front(CB_LSE, 1)
        tile = k.l1_read(k.get_read_ptr(CB_LSE), TILE * TILE * 4).view(np.uint32)
        k.l1_write(row, tile[_COL0])
        k.noc_async_write(row, k.get_noc_addr(u, lse), TILE * 4)
        k.noc_async_write_barrier()
        k.cb_pop_front(CB_LSE, 1)
    k.noc_async_write_barrier()
    k.cb_push_back(CB_LSE_ROW, 1)  # the scratch page goes back: every CB ends the program balanced
    k.cb_wait_front(CB_LSE_ROW, 1)
    k.cb_pop_front(CB_LSE_ROW, 1)


# ------------------------------------------------------------------------------------------------ the program
def _cores(n: int, grid: tuple[int, int] = P150A.grid) -> CoreRangeSet:
    """The first ``n`` cores of the worker grid, row by row, as full rows plus one partial row."""
    n = max(1, min(n, grid[0] * grid[1]))
    rows, rest = divmod(n, grid[0])
    ranges = [CoreRange((0, 0), (grid[0] - 1, rows - 1))] if rows else []
    if rest:
        ranges.append(CoreRange((0, rows), (rest - 1, rows)))
    return CoreRangeSet(tuple(ranges))


def _tiles(n: int) -> int:
    return -(-n // TILE)


def _fmt(dtype: DType | str) -> Format:
    return DType.of(dtype).format


def flash_attention_program(q_shape: Sequence[int], k_shape: Sequence[int], v_shape: Sequence[int], *,
                            scale: float, causal: bool = False, offset: int = 0,
                            mask_shape: Sequence[int] | None = None, fidelity: Fidelity | str = Fidelity.HiFi4,
                            dtypes: Sequence[DType | str] = ("bfloat16",) * 3, out_dtype: DType | str | None = None,
                            max_cores: int = P150A.cores) -> Program:  # fmt: skip
    """The flash attention forward program for q (B, Hq, Sq, D), k (B, Hkv, Skv, D), v (B, Hkv, Skv, Dv).

    It runs over tile-layout buffers ``q, k, v[, mask], out, lse``: q / k / v in ``dtypes``; the mask (when
    ``mask_shape`` = (Bm, Hm, Sq, Skv) with Bm in (1, B), Hm in (1, Hq) is given) float32 and additive; out (B, Hq,
    Sq, Dv) in ``out_dtype`` (default: q's); lse row-major float32 of shape (B * Hq * ceil(Sq / 32), 32), one row per
    Q tile. ``scale`` is used as float32; key j is hidden from query i when ``causal`` and j > i + ``offset``.
    """
    b, hq, sq, d = (int(x) for x in q_shape)
    bk, hkv, skv, dk = (int(x) for x in k_shape)
    dv = int(v_shape[3])
    if bk != b or dk != d or tuple(v_shape[:3]) != (bk, hkv, skv) or hkv < 1 or hq % hkv:
        raise ShapeError(f"flash attention program: q {tuple(q_shape)}, k {tuple(k_shape)}, v {tuple(v_shape)} do "
                         "not fit (same batch, head dims and key lengths; Hq a multiple of Hkv)")  # fmt: skip
    if min(sq, skv, d, dv) < 1:
        raise ShapeError("flash attention program: empty q, k or v; the op library handles empty shapes itself")
    mb = mh = 0
    if mask_shape is not None:
        bm, hm, sm, km = (int(x) for x in mask_shape)
        if bm not in (1, b) or hm not in (1, hq) or (sm, km) != (sq, skv):
            raise ShapeError(f"flash attention program: mask shape {tuple(mask_shape)} must be (1 or {b}, 1 or {hq}, "
                             f"{sq}, {skv})")  # fmt: skip
        mh = 1 if hm > 1 else 0
        mb = hm if bm > 1 else 0
    shape = FlashShape(hq, hkv, _tiles(sq), _tiles(skv), _tiles(d), _tiles(dv), sq, skv, bool(causal), int(offset),
                       mask_shape is not None, mb, mh, int(np.float32(scale).view(np.uint32)))  # fmt: skip
    units = b * hq * shape.sqt
    cores = _cores(min(units, max_cores))
    q_fmt, k_fmt, v_fmt = (_fmt(x) for x in dtypes)
    out_fmt = _fmt(out_dtype if out_dtype is not None else dtypes[0])
    f32, bf16 = Format.FLOAT32, Format.BFLOAT16
    chunk_k, chunk_v = K_CHUNK_TILES * shape.dt, K_CHUNK_TILES * shape.dvt
    cb_spec = [
        (CB_Q, q_fmt, 2 * shape.dt), (CB_K, k_fmt, 2 * chunk_k), (CB_V, v_fmt, 2 * chunk_v), (CB_MASK, f32, 2),
        (CB_SCALER, bf16, 1), (CB_ONES_ROW, bf16, 1), (CB_FLOOR, f32, 1), (CB_ZERO, f32, 1),
        (CB_OUT, out_fmt, 2), (CB_LSE, f32, 1), (CB_RCOL, f32, 1), (CB_RBCAST, f32, 1),
        (CB_SRAW, f32, 1), (CB_S, f32, K_CHUNK_TILES), (CB_P, bf16, K_CHUNK_TILES), (CB_MCOL, f32, 1),
        (CB_M, f32, 2), (CB_ALPHA, f32, 1), (CB_L, f32, 2), (CB_O, f32, 2 * shape.dvt),
    ]  # fmt: skip
    cbs = [CircularBuffer(i, fmt, fmt.tile_bytes, n, cores) for i, fmt, n in cb_spec]
    cbs.append(CircularBuffer(CB_LSE_ROW, f32, TILE * 4, 1, cores))
    ct = shape.compile_time_args()
    # interleaved DRAM tensors: q, k, v and the mask (a float32 one's accessor also when there is none), out and lse
    reader_ct = ct + [a for f in (q_fmt, k_fmt, v_fmt, f32) for a in tensor_accessor_args(f.tile_bytes)]
    writer_ct = ct + tensor_accessor_args(out_fmt.tile_bytes) + tensor_accessor_args(TILE * 4)
    tensors = ("q", "k", "v", "mask", "out", "lse") if shape.has_mask else ("q", "k", "v", "out", "lse")
    sa = shape.shape_args()

    def runtime_args(bufs: Sequence[Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
        by = dict(zip(tensors, bufs))
        require_dram("flash_attention", by)
        mask_addr = by["mask"].address if "mask" in by else 0
        split = split_work(units, cores)
        q, k, v = by["q"].address, by["k"].address, by["v"].address
        return {
            "reader": {c: [q, k, v, mask_addr, s0, n, *sa] for c, s0, n in split},
            "compute": {c: [s0, n, *sa] for c, s0, n in split},
            "writer": {c: [by["out"].address, by["lse"].address, s0, n, *sa] for c, s0, n in split},
        }

    pairs = sum(shape.key_tiles(qt) for qt in range(shape.sqt)) * b * hq
    chunks = sum(len(shape.chunks(qt)) for qt in range(shape.sqt)) * b * hq
    masked = sum(shape.needs_mask(qt, kt) for qt in range(shape.sqt) for kt in range(shape.key_tiles(qt))) * b * hq
    dram = (
        units * (shape.dt * q_fmt.tile_bytes + shape.dvt * out_fmt.tile_bytes + TILE * 4)
        + masked * 4096
        + pairs * (shape.dt * k_fmt.tile_bytes + shape.dvt * v_fmt.tile_bytes)
    )  # K and V once per Q tile
    work = Work(dram_bytes=dram, matmul_tiles=pairs * (shape.dt + shape.dvt) + chunks + units,
                fpu_tiles=pairs * 3 + masked + chunks * (2 + shape.dvt) + units * (shape.dvt + 3),
                sfpu_tiles=pairs * 2 + chunks + units * 3)  # fmt: skip
    fid = Fidelity.of(fidelity)
    return Program(
        "flash_attention",
        [
            Kernel("reader", SOURCES / "reader.cpp", cores, reader, compile_time_args=reader_ct),
            Kernel(
                "compute",
                SOURCES / "compute.cpp",
                cores,
                compute,
                compile_time_args=ct,
                math_fidelity=fid.name,
                fp32_dest_acc_en=True,
                math_approx_mode=False,
            ),
            Kernel("writer", SOURCES / "writer.cpp", cores, writer, compile_time_args=writer_ct),
        ],
        cbs,
        runtime_args=runtime_args,
        tensors=tensors,
        work=work,
    )


# ------------------------------------------------------------------------------------------------------ running
def run_flash_program(device: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, *,
                      scale: float, causal: bool = False, offset: int = 0, fidelity: Fidelity | str = Fidelity.HiFi4,
                      dtypes: Sequence[DType | str] = ("bfloat16",) * 3, out_dtype: DType | str | None = None,
                      max_cores: int = P150A.cores) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Run the program on ``device`` (through ``device.run_program``) over q / k / v (float arrays, uploaded in
    ``dtypes``) and an optional mask (bool, True = attend, or additive float) broadcastable to (B, Hq, Sq, Skv).
    Returns (out (B, Hq, Sq, Dv) float32 holding the output format's values, logsumexp (B, Hq, Sq) float32)."""
    from kohakutt.kernels.attention import additive_mask

    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    b, hq, sq, _ = q.shape
    skv = k.shape[2]
    bufs = []
    try:
        bufs = [device.upload(x, _fmt(dt)) for x, dt in zip((q, k, v), dtypes)]
        mask_shape = None
        if mask is not None:
            m = additive_mask(np.asarray(mask))
            m = m.reshape((1,) * (4 - m.ndim) + m.shape)
            full = (m.shape[0], m.shape[1], sq, skv)
            m = np.ascontiguousarray(np.broadcast_to(m, full))
            mask_shape = m.shape
            bufs.append(device.upload(m, Format.FLOAT32))
        prog = flash_attention_program(q.shape, k.shape, v.shape, scale=scale, causal=causal, offset=offset,
                                       mask_shape=mask_shape, fidelity=fidelity, dtypes=dtypes, out_dtype=out_dtype,
                                       max_cores=max_cores)  # fmt: skip
        out_fmt = _fmt(out_dtype if out_dtype is not None else dtypes[0])
        sqt = -(-sq // TILE)
        bufs.append(device.allocate(shape=(b, hq, sq, v.shape[3]), fmt=out_fmt, layout="tile"))
        bufs.append(device.allocate(shape=(b * hq * sqt, TILE), fmt=Format.FLOAT32))
        device.run_program(prog, bufs)
        out = device.download(bufs[-2])
        lse = device.download(bufs[-1]).reshape(b, hq, sqt * TILE)[..., :sq]
        return out, np.ascontiguousarray(lse)
    finally:
        for buf in bufs:
            device.free(buf)


def run_flash_varlen_program(device: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, cu_seqlens_q: np.ndarray,
                             cu_seqlens_k: np.ndarray, *, scale: float, causal: bool = False,
                             **kw: Any) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The program over packed sequences (flash-attn's varlen layout: q (total_q, Hq, D), k / v (total_k, Hkv, D)),
    one run per sequence, causal aligned bottom-right. Returns (out (total_q, Hq, Dv), logsumexp (Hq, total_q))."""
    cq, ck = np.asarray(cu_seqlens_q, np.int64), np.asarray(cu_seqlens_k, np.int64)
    out = np.zeros((q.shape[0], q.shape[1], v.shape[2]), np.float32)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf, np.float32)
    for i in range(cq.size - 1):
        q0, q1, k0, k1 = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
        if q1 == q0 or k1 == k0:
            continue  # no queries, or no keys: out 0, lse -inf (as the op library gives)
        heads = [np.transpose(x, (1, 0, 2))[None] for x in (q[q0:q1], k[k0:k1], v[k0:k1])]
        o, ls = run_flash_program(device, *heads, scale=scale, causal=causal, offset=(k1 - k0) - (q1 - q0), **kw)
        out[q0:q1] = np.transpose(o[0], (1, 0, 2))
        lse[:, q0:q1] = ls[0]
    return out, lse


__all__ = ["SOURCES", "FlashShape", "face_index", "flash_attention_program",
           "run_flash_program", "run_flash_varlen_program"]  # fmt: skip
