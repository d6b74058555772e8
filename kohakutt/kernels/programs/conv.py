"""Kohaku-TT's own convolution as a Metalium program: an implicit GEMM over im2col rows gathered straight from DRAM,
with its reader / compute / writer C++ sources, their simulator twins, and :func:`run_conv_program`, which runs it
through ``device.run_program``.

The GEMM: per group g, rows are the output pixels (n, oh, ow) flattened (M = N * OH * OW, 32 to a tile), columns the
group's K/groups output channels, and the reduction runs over the kernel window times C/groups input channels, one
**kernel row** (kh index r) at a time: block r holds the kw x C/groups values of that row in (kw, c) order, zero
padded to whole tiles (Krt tiles). The weights are a (groups * KH * Krt * 32, Nt * 32) tile matrix in that order,
prepared on the host as TT-NN prepares conv weights (:func:`weight_matrix`).

Work: one unit per (group, 32-pixel M tile), split evenly over the cores.

- **reader**: per unit and kernel row, zero-fills Krt row-major pages of CB 0 and gathers the im2col block from the
  row-major input. Each run of pixels on one output row needs one span of input columns of one input row:
  channels-first (N, C, H, W), one NoC read of that span per input channel; channels-last (N, H, W, C), one read of
  the group's C/groups channels per input pixel of the span (up to 32 sticks before a barrier). Every read lands in a
  scratch page (CB 4) at its NoC address's offset modulo 64 B, as a DRAM read on Blackhole needs, and the kernel
  columns are picked from there with the stride. Taps in the padding stay 0. Then, per block of up to 4 output tiles,
  the weight tiles (kernel row, K tile) and the bias tile of each output tile (the group's channels of the bias row,
  read once per core into CB 5, in every row of the tile). With a bf16 DST (``fp32_acc`` off) float32 data is
  truncated to bfloat16 in L1, as the unpacker would for a 16-bit DST.
- **compute** (fp32 DST, the scope's fidelity; the input in SrcB, the weights in SrcA): tilizes the unit's KH
  blocks into CB 1 (resident for the unit), then per block of up to 4 output tiles runs ``matmul_tiles`` over every
  (kernel row, K tile). fp32 accumulation keeps DST across all of them. With ``fp32_acc`` off, each kernel row's
  products are summed in the fp32 DST on top of the running sum, which is then packed to a bfloat16 CB (rounded to
  nearest even) and copied back for the next row: the bf16 DST rounded once per kernel row that the op's numerics
  contract names. The bias is added after the sum is packed to the intermediate format (fp32 or bfloat16) with one
  FPU ``add_tiles``; the result is packed in the output format.
- **writer**: writes each output tile (32 pixels x 32 channels, face order) to the row-major output: channels-last,
  one write per pixel (the tile's valid channels); channels-first, one write per (channel, run of pixels on one output
  row). Each write's values are first copied to a staging slot (CB 26) at the destination's offset modulo 16 B, as a
  NoC write on Blackhole needs. Rearranging in the data mover keeps float32 exact.

Sizes are runtime arguments (the shape block, after each kernel's own; the row-major tensors' page sizes too, through
``TensorAccessor``'s runtime page size), the five flags compile-time ones: a new shape compiles nothing.

:func:`kohakutt.kernels.conv.conv_forward` is the vectorized model of the same arithmetic, the op library's fast path.
The two agree up to the order of float32 sums inside DST (torch's convolution sums in its own order, the program tile
by tile); where every float32 sum is exact they agree bit for bit (the tests check both). The C++ sources also carry
what the Python twins do not model (format reconfiguration between CBs, ``tilize_uninit``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kohakutt.errors import KohakuTTUnsupportedOperator, ProgramError
from kohakutt.hal.formats import quantize
from kohakutt.hal.layout import TILE, TILE_FACE_INDEX, Format, Layout
from kohakutt.hal.program import (
    CircularBuffer,
    Kernel,
    Program,
    Work,
    aligned_page_size,
    require_dram,
    split_work,
    tensor_accessor_args,
)
from kohakutt.ir.defs.conv import CONV_ATTRS, ConvGeometry, conv_geometry
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity
from kohakutt.kernels.programs import SOURCE_DIR
from kohakutt.kernels.programs.fused import worker_cores

DST_TILES = 4  # an fp32 DST in half-sync mode: the output tiles one block accumulates at once
DRAM_ALIGN, WRITE_ALIGN = 64, 16  # Blackhole NOC: DRAM reads' L1 / NOC addresses agree modulo 64 B, writes' 16 B
MAX_SLOTS = 32  # channels-last input sticks the reader reads before one barrier (common.h)
SCRATCH_BYTES = 64 * 1024  # at most this much L1 for those sticks
RESIDENT_WEIGHT_BYTES = 512 * 1024  # a group's weights up to this size stay in L1 for all of a core's units
BF16_MASK = 0xFFFF0000  # float32 bits kept by a truncation to bfloat16

# Circular buffers: inputs 0..7, output 16, intermediates 24..
CB_ACT_RM, CB_ACT, CB_W, CB_BIAS, CB_SPAN, CB_BIAS_ROW = 0, 1, 2, 3, 4, 5
CB_OUT = 16
CB_ACC, CB_INTERIM, CB_STAGE = 24, 25, 26


# ------------------------------------------------------------------------------------------------ the geometry
SIZE_NAMES = ("n", "c", "h", "w", "k", "groups", "kh", "kw", "sh", "sw", "pt", "pl", "dh", "dw", "oh", "ow")
FLAG_NAMES = ("channels_last", "fp32_acc", "has_bias", "out_bf16", "w_resident")
# Where the shape block starts in each kernel's runtime arguments, after the kernel's own: the reader's x, weights and
# bias addresses, first unit, units, x's and the bias's aligned page sizes and its scratch slots; the compute
# kernel's first unit and units; the writer's output address, first unit, units and the output's aligned page size.
SHAPE_AT = {"reader": 8, "compute": 2, "writer": 4}


@dataclass(frozen=True)
class ConvShape:
    """A 2-d convolution's sizes and flags, as the kernels take them: the sizes n..ow are the shape block of every
    kernel's runtime arguments (common.h's ``shape_args``, after the kernel's own, at ``SHAPE_AT``), the five flags
    are the compile-time arguments (they choose code paths). A 1-d convolution is one of height 1."""

    n: int
    c: int
    h: int
    w: int
    k: int
    groups: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int  # padding before, top / left (the after-padding only shows in OH / OW)
    pl: int
    dh: int
    dw: int
    oh: int
    ow: int
    channels_last: int
    fp32_acc: int
    has_bias: int
    out_bf16: int  # the output CB is bfloat16: the last bf16 DST rounding is the output's own
    w_resident: int  # a group's weights are read once per core and stay in CB 2 (else streamed per block)

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def kg(self) -> int:
        return self.k // self.groups

    @property
    def krt(self) -> int:
        """K tiles per kernel row: kw * C/groups values, zero padded to whole tiles."""
        return -(-self.kw * self.cg // TILE)

    @property
    def nt(self) -> int:
        """Output tiles per group: K/groups channels, zero padded to whole tiles."""
        return -(-self.kg // TILE)

    @property
    def m(self) -> int:
        return self.n * self.oh * self.ow

    @property
    def mt(self) -> int:
        return -(-self.m // TILE)

    @property
    def nb(self) -> int:
        """Output tiles per DST block (the last block of a group may have fewer)."""
        return min(DST_TILES, self.nt)

    @property
    def units(self) -> int:
        return self.groups * self.mt

    @property
    def w_tiles(self) -> int:
        """Weight tiles per group."""
        return self.kh * self.krt * self.nt

    def blocks(self) -> list[tuple[int, int]]:
        """(first output tile, tiles) of each DST block of a group."""
        return [(t, min(self.nb, self.nt - t)) for t in range(0, self.nt, self.nb)]

    def compile_time_args(self) -> list[int]:
        """The flags: channels_last, fp32_acc, has_bias, out_bf16, w_resident."""
        return [int(getattr(self, n)) for n in FLAG_NAMES]

    def shape_args(self) -> list[int]:
        """The shape block of the runtime arguments: n, c, h, w, k, groups, kh, kw, sh, sw, pt, pl, dh, dw, oh, ow."""
        return [int(getattr(self, n)) & 0xFFFFFFFF for n in SIZE_NAMES]

    @classmethod
    def of_kernel(cls, k: Any) -> ConvShape:
        """The shape as kernel ``k`` reads it: the sizes from its runtime arguments, the flags from its compile-time
        ones."""
        first = SHAPE_AT[k.kernel.kind]
        vals = {n: int(np.uint32(k.get_arg_val(first + i)).view(np.int32)) for i, n in enumerate(SIZE_NAMES)}
        vals |= {n: int(k.get_compile_time_arg_val(i)) for i, n in enumerate(FLAG_NAMES)}
        return cls(**vals)

    def scratch(self, item: int) -> tuple[int, int]:
        """(slots, bytes) of the reader's scratch page for ``item``-byte input values: channels-first, one input row;
        channels-last, up to ``MAX_SLOTS`` sticks of the group's channels (fewer when they would pass
        ``SCRATCH_BYTES``, one at least); room for aligning the page's start to 64 B as well."""
        if not self.channels_last:
            return 1, -(-self.w * item // DRAM_ALIGN) * DRAM_ALIGN + 2 * DRAM_ALIGN
        slot = -(-self.cg * item // DRAM_ALIGN) * DRAM_ALIGN + DRAM_ALIGN
        slots = max(1, min(MAX_SLOTS, self.w, SCRATCH_BYTES // slot))
        return slots, slots * slot + DRAM_ALIGN

    def runs(self, mt: int) -> list[tuple[int, int, int, int, int]]:
        """The valid pixels of M tile ``mt`` as runs on one output row: (first tile row, n, oh, first ow, length)."""
        out = []
        m0, m1 = mt * TILE, min(self.m, mt * TILE + TILE)
        m = m0
        while m < m1:
            n, rest = divmod(m, self.oh * self.ow)
            oh, ow = divmod(rest, self.ow)
            length = min(self.ow - ow, m1 - m)
            out.append((m - m0, n, oh, ow, length))
            m += length
        return out


@dataclass(frozen=True)
class ConvSpec:
    """What one program instance computes: the shape, the operands' formats and the fidelity."""

    shape: ConvShape
    x_fmt: Format
    w_fmt: Format
    bias_fmt: Format | None
    out_fmt: Format
    fidelity: Fidelity

    @property
    def tensors(self) -> tuple[str, ...]:
        return ("x", "weights", "bias", "out") if self.shape.has_bias else ("x", "weights", "out")


def _row_major_format(dtype: DType | str, what: str) -> Format:
    dt = DType.of(dtype)
    if dt not in (DType.BFLOAT16, DType.FLOAT32):
        raise KohakuTTUnsupportedOperator(
            f"the own conv program reads and writes row-major bfloat16 or float32; the {what} is {dt.value}: typecast "
            "it first, or use kernels.run (the fast path takes every float dtype)")  # fmt: skip
    return dt.format


def _weight_format(dtype: DType | str) -> Format:
    """Prepared weights keep the stored values: float32 stays float32; bfloat16 and the block floats (whose values
    bfloat16 holds exactly) become bfloat16, since regrouping block floats would change their shared exponents."""
    dt = DType.of(dtype)
    if not dt.is_float:
        raise KohakuTTUnsupportedOperator(f"the own conv program takes float weights, got {dt.value}")
    return Format.FLOAT32 if dt is DType.FLOAT32 else Format.BFLOAT16


def conv_spec(x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any] | None = None, *,
              x_dtype: DType | str = "bfloat16", w_dtype: DType | str = "bfloat16",
              bias_dtype: DType | str | None = None, out_dtype: DType | str | None = None,
              fidelity: Fidelity | str = Fidelity.HiFi4, fp32_acc: bool = False,
              w_resident: bool | None = None) -> ConvSpec:  # fmt: skip
    """The program configuration for conv ``attrs`` (the IR op's) over x / w of these shapes and dtypes; a bias when
    ``bias_dtype`` is given. ``out_dtype`` defaults to the promoted one. A group's weights stay resident in L1 when
    they take at most ``RESIDENT_WEIGHT_BYTES`` (``w_resident`` forces either way). Raises for what the program does
    not run."""
    g = conv_geometry(tuple(x_shape), tuple(w_shape), {**CONV_ATTRS, **dict(attrs or {})})
    if g.transposed or g.d == 3:
        raise KohakuTTUnsupportedOperator(
            "the own conv program runs 1-d and 2-d forward convolutions; transposed and 3-d ones run on the fast path "
            "(kernels.run)")  # fmt: skip
    dts = [DType.of(d) for d in (x_dtype, w_dtype, *(() if bias_dtype is None else (bias_dtype,)))]
    out = DType.of(out_dtype) if out_dtype is not None else (
        DType.FLOAT32 if DType.FLOAT32 in dts else DType.BFLOAT16)  # fmt: skip
    out_fmt = _row_major_format(out, "output")
    bias_fmt = None if bias_dtype is None else _row_major_format(bias_dtype, "bias")
    w_fmt = _weight_format(w_dtype)
    shape = _shape(g, fp32_acc, bias_dtype is not None, out_fmt is Format.BFLOAT16, w_fmt, w_resident)
    fid = Fidelity.of(fidelity)
    return ConvSpec(shape, _row_major_format(x_dtype, "input"), w_fmt, bias_fmt, out_fmt, fid)


def _shape(
    g: ConvGeometry, fp32_acc: bool, has_bias: bool, out_bf16: bool, w_fmt: Format, w_resident: bool | None
) -> ConvShape:
    two = (lambda v: (1, v[0])) if g.d == 1 else (lambda v: tuple(v))
    (h, w), (kh, kw), (sh, sw), (dh, dw), (oh, ow) = (two(v) for v in (g.spatial, g.kernel, g.stride, g.dilation,
                                                                        g.out_spatial))  # fmt: skip
    pads = ((0, 0), *g.padding) if g.d == 1 else g.padding
    cg, kg = g.c_in // g.groups, g.c_out // g.groups
    w_bytes = kh * -(-kw * cg // TILE) * -(-kg // TILE) * w_fmt.tile_bytes
    return ConvShape(g.n, g.c_in, h, w, g.c_out, g.groups, kh, kw, sh, sw, pads[0][0], pads[1][0], dh, dw, oh, ow,
                     int(g.channels_last), int(fp32_acc), int(has_bias), int(out_bf16),
                     int(w_bytes <= RESIDENT_WEIGHT_BYTES if w_resident is None else w_resident))  # fmt: skip


def weight_matrix(w: np.ndarray, s: ConvShape) -> np.ndarray:
    """The weights (K, C/groups, KH, KW) (or (K, C/groups, KW) for 1-d) as the program reads them: a
    (groups * KH * Krt * 32, Nt * 32) float32 matrix whose rows ``(g * KH + r) * Krt * 32 + kw_i * C/groups + c``
    hold w[g * K/groups + col, c, r, kw_i] in column ``col``; zeros elsewhere."""
    w4 = np.asarray(w, np.float32).reshape(s.k, s.cg, s.kh, s.kw)
    wg = w4.reshape(s.groups, s.kg, s.cg, s.kh, s.kw).transpose(0, 3, 4, 2, 1)  # (G, KH, KW, C/g, K/g)
    mat = np.zeros((s.groups, s.kh, s.krt * TILE, s.nt * TILE), np.float32)
    mat[:, :, : s.kw * s.cg, : s.kg] = wg.reshape(s.groups, s.kh, s.kw * s.cg, s.kg)
    return mat.reshape(-1, s.nt * TILE)


# --------------------------------------------------------------------------------------------------- the C++
SOURCES = SOURCE_DIR / "conv2d"  # reader.cpp, compute.cpp, writer.cpp (+ common.h)


# ---------------------------------------------------------------------------------------- simulator twins
def _words(fmt: Format) -> type:
    return np.uint32 if fmt is Format.FLOAT32 else np.uint16


def _truncate(k: Any, s: ConvShape, cb: int, l1: int, pages: int) -> None:
    """Twin of ``truncate_fp32``: float32 pages cut to bfloat16 in L1 when DST is 16-bit."""
    if s.fp32_acc or k.get_dataformat(cb) is not Format.FLOAT32:
        return
    words = k.l1_read(l1, pages * k.get_tile_size(cb)).view(np.uint32)
    k.l1_write(l1, words & np.uint32(BF16_MASK))


def _read_aligned(k: Any, src: Any, scratch: int, nbytes: int) -> int:
    """Twin of ``read_aligned``: the read lands in the scratch at its NOC address's offset modulo 64 B (a page starts
    64-aligned in its bank, so its offset in the page gives that); returns where the data is."""
    l1 = scratch + src.offset % DRAM_ALIGN
    k.noc_async_read(src, l1, nbytes)
    return l1


def _gather(k: Any, s: ConvShape, x: Any, scratch: int, slots: int, g: int, mt: int, r: int, fmt: Format) -> np.ndarray:
    """Twin of ``gather``: kernel row r of the im2col block of (g, mt), as the (32, KRT * 32) words of its pages."""
    item, words = fmt.itemsize, _words(fmt)
    block = np.zeros((TILE, s.krt * TILE), words)
    slot = -(-s.cg * item // DRAM_ALIGN) * DRAM_ALIGN + DRAM_ALIGN
    for i0, n, oh, ow0, length in s.runs(mt):
        ih = oh * s.sh - s.pt + r * s.dh
        if not 0 <= ih < s.h:
            continue
        lo_w, hi_w = ow0 * s.sw - s.pl, (ow0 + length - 1) * s.sw - s.pl + (s.kw - 1) * s.dw
        a, b = max(lo_w, 0), min(hi_w, s.w - 1)
        if a > b:
            continue
        iws = np.arange(ow0, ow0 + length)[:, None] * s.sw - s.pl + np.arange(s.kw)[None, :] * s.dw  # (pixel, col)
        if s.channels_last:
            for c0 in range(a, b + 1, slots):
                c1 = min(c0 + slots, b + 1)
                at = [_read_aligned(k, k.get_noc_addr((n * s.h + ih) * s.w + iw, x, g * s.cg * item),
                                    scratch + (iw - c0) * slot, s.cg * item) for iw in range(c0, c1)]  # fmt: skip
                k.noc_async_read_barrier()
                sticks = np.stack([k.l1_read(p, s.cg * item).view(words) for p in at])  # (sticks, C/groups)
                rows, qs = np.nonzero((iws >= c0) & (iws < c1))
                cols = qs[:, None] * s.cg + np.arange(s.cg)[None, :]
                block[i0 + rows[:, None], cols] = sticks[iws[rows, qs] - c0]
            continue
        rows, qs = np.nonzero((iws >= a) & (iws <= b))
        for c in range(s.cg):
            page = (n * s.c + g * s.cg + c) * s.h + ih
            at = _read_aligned(k, k.get_noc_addr(page, x, a * item), scratch, (b - a + 1) * item)
            k.noc_async_read_barrier()
            vals = k.l1_read(at, (b - a + 1) * item).view(words)
            block[i0 + rows, qs * s.cg + c] = vals[iws[rows, qs] - a]
    return block


def _bias_tile(k: Any, s: ConvShape, bias_row: np.ndarray, g: int, t: int, l1: int) -> None:
    """Twin of ``bias_tile``: the group's channels of output tile t from the bias row, in every row of the tile."""
    line = np.zeros(TILE, bias_row.dtype)
    ch0 = g * s.kg + t * TILE
    valid = min(TILE, s.kg - t * TILE)
    line[:valid] = bias_row[ch0 : ch0 + valid]
    tile = np.empty(TILE * TILE, bias_row.dtype)
    tile[TILE_FACE_INDEX] = line[None, :]
    k.l1_write(l1, tile)
    _truncate(k, s, CB_BIAS, l1, 1)


def reader(k: Any) -> None:
    """Twin of reader.cpp."""
    s = ConvShape.of_kernel(k)
    start, count, slots = k.get_arg_val(3), k.get_arg_val(4), min(max(k.get_arg_val(7), 1), MAX_SLOTS)
    x, w = k.tensor_accessor("x"), k.tensor_accessor("weights")
    fmt = k.get_dataformat(CB_ACT_RM)
    tw = k.get_tile_size(CB_W)
    k.cb_reserve_back(CB_SPAN, 1)
    scratch = -(-k.get_write_ptr(CB_SPAN) // DRAM_ALIGN) * DRAM_ALIGN
    bias_row = None
    if s.has_bias:
        bias = k.tensor_accessor("bias")
        k.cb_reserve_back(CB_BIAS_ROW, 1)
        row = k.get_write_ptr(CB_BIAS_ROW)
        k.noc_async_read_page(0, bias, row)
        k.noc_async_read_barrier()
        bias_row = k.l1_read(row, bias.page_size).view(_words(k.get_dataformat(CB_BIAS_ROW)))
    for u in range(start, start + count):
        g, mt = divmod(u, s.mt)
        for r in range(s.kh):
            k.cb_reserve_back(CB_ACT_RM, s.krt)
            l1 = k.get_write_ptr(CB_ACT_RM)
            k.l1_write(l1, _gather(k, s, x, scratch, slots, g, mt, r, fmt))
            _truncate(k, s, CB_ACT_RM, l1, s.krt)
            k.cb_push_back(CB_ACT_RM, s.krt)
        if s.w_resident and (u == start or mt == 0):
            k.cb_reserve_back(CB_W, s.w_tiles)
            l1 = k.get_write_ptr(CB_W)
            for i in range(s.w_tiles):
                k.noc_async_read_page(g * s.w_tiles + i, w, l1 + i * tw)
            k.noc_async_read_barrier()
            _truncate(k, s, CB_W, l1, s.w_tiles)
            k.cb_push_back(CB_W, s.w_tiles)
        for t0, nbw in s.blocks():
            for r in range(0 if s.w_resident else s.kh):
                for kt in range(s.krt):
                    k.cb_reserve_back(CB_W, s.nb)
                    l1 = k.get_write_ptr(CB_W)
                    for j in range(nbw):
                        k.noc_async_read_page(((g * s.kh + r) * s.krt + kt) * s.nt + t0 + j, w, l1 + j * tw)
                    k.noc_async_read_barrier()
                    _truncate(k, s, CB_W, l1, nbw)
                    k.cb_push_back(CB_W, s.nb)
            if bias_row is not None:
                k.cb_reserve_back(CB_BIAS, s.nb)
                for j in range(nbw):
                    _bias_tile(k, s, bias_row, g, t0 + j, k.get_write_ptr(CB_BIAS) + j * k.get_tile_size(CB_BIAS))
                k.cb_push_back(CB_BIAS, s.nb)
    _release_scratch(k, CB_SPAN)
    if bias_row is not None:
        _release_scratch(k, CB_BIAS_ROW)


def _release_scratch(k: Any, cb: int) -> None:
    """Twin of ``release_scratch``: the scratch page goes back, so every CB ends the program balanced."""
    k.cb_push_back(cb, 1)
    k.cb_wait_front(cb, 1)
    k.cb_pop_front(cb, 1)


def _pack_block(c: Any, cb: int, n: int) -> None:
    c.tile_regs_commit()
    c.cb_reserve_back(cb, n)
    c.tile_regs_wait()
    for j in range(n):
        c.pack_tile(j, cb, j)
    c.tile_regs_release()
    c.cb_push_back(cb, n)


def _accumulate(c: Any, s: ConvShape, r0: int, r1: int, t0: int, nbw: int) -> None:
    c.mm_init_short(CB_ACT, CB_W)
    for r in range(r0, r1):
        for kt in range(s.krt):
            a = r * s.krt + kt
            if s.w_resident:
                for j in range(nbw):
                    c.matmul_tiles(CB_ACT, CB_W, a, a * s.nt + t0 + j, j)
                continue
            c.cb_wait_front(CB_W, s.nb)
            for j in range(nbw):
                c.matmul_tiles(CB_ACT, CB_W, a, j, j)
            c.cb_pop_front(CB_W, s.nb)


def _copy_in(c: Any, cb: int, nbw: int) -> None:
    c.copy_tile_init(cb)
    for j in range(nbw):
        c.copy_tile(cb, j, j)


def _finish(c: Any, s: ConvShape, src: int, dst: int, nbw: int, bias: bool) -> None:
    c.cb_wait_front(src, nbw)
    c.tile_regs_acquire()
    if bias:
        c.cb_wait_front(CB_BIAS, s.nb)
        c.add_tiles_init(src, CB_BIAS)
        for j in range(nbw):
            c.add_tiles(src, CB_BIAS, j, j, j)
        c.cb_pop_front(CB_BIAS, s.nb)
    else:
        _copy_in(c, src, nbw)
    c.cb_pop_front(src, nbw)
    _pack_block(c, dst, nbw)


def compute(c: Any) -> None:
    """Twin of compute.cpp."""
    s = ConvShape.of_kernel(c)
    start, count = c.get_arg_val(0), c.get_arg_val(1)
    c.compute_kernel_hw_startup(CB_ACT, CB_W, CB_OUT)
    c.mm_init(CB_ACT, CB_W, CB_OUT)
    for u in range(start, start + count):
        for _r in range(s.kh):
            c.cb_wait_front(CB_ACT_RM, s.krt)
            c.cb_reserve_back(CB_ACT, s.krt)
            c.tilize_init(CB_ACT_RM, s.krt, CB_ACT)
            c.tilize_block(CB_ACT_RM, s.krt, CB_ACT)
            c.cb_push_back(CB_ACT, s.krt)
            c.cb_pop_front(CB_ACT_RM, s.krt)
        c.cb_wait_front(CB_ACT, s.kh * s.krt)
        if s.w_resident:
            c.cb_wait_front(CB_W, s.w_tiles)
        for t0, nbw in s.blocks():
            if s.fp32_acc:
                c.tile_regs_acquire()
                _accumulate(c, s, 0, s.kh, t0, nbw)
                if s.has_bias:
                    _pack_block(c, CB_INTERIM, nbw)
                    _finish(c, s, CB_INTERIM, CB_OUT, nbw, True)
                else:
                    _pack_block(c, CB_OUT, nbw)
                continue
            for r in range(s.kh):
                c.tile_regs_acquire()
                if r > 0:
                    c.cb_wait_front(CB_ACC, nbw)
                    _copy_in(c, CB_ACC, nbw)
                    c.cb_pop_front(CB_ACC, nbw)
                _accumulate(c, s, r, r + 1, t0, nbw)
                last_to_out = r == s.kh - 1 and s.out_bf16 and not s.has_bias
                _pack_block(c, CB_OUT if last_to_out else CB_ACC, nbw)
            if s.has_bias:
                _finish(c, s, CB_ACC, CB_OUT if s.out_bf16 else CB_ACC, nbw, True)
            if not s.out_bf16:
                _finish(c, s, CB_ACC, CB_OUT, nbw, False)
        c.cb_pop_front(CB_ACT, s.kh * s.krt)
        if s.w_resident and (u + 1 == start + count or (u + 1) % s.mt == 0):
            c.cb_pop_front(CB_W, s.w_tiles)


def writer(k: Any) -> None:
    """Twin of writer.cpp."""
    s = ConvShape.of_kernel(k)
    start, count = k.get_arg_val(1), k.get_arg_val(2)
    out = k.tensor_accessor("out")
    fmt = k.get_dataformat(CB_OUT)
    item, size = fmt.itemsize, k.get_tile_size(CB_OUT)
    slot = TILE * item + WRITE_ALIGN
    k.cb_reserve_back(CB_STAGE, 1)
    stage = -(-k.get_write_ptr(CB_STAGE) // WRITE_ALIGN) * WRITE_ALIGN
    for u in range(start, start + count):
        g, mt = divmod(u, s.mt)
        for t in range(s.nt):
            k.cb_wait_front(CB_OUT, 1)
            rows = k.l1_read(k.get_read_ptr(CB_OUT), size).view(_words(fmt))[TILE_FACE_INDEX]  # (pixel, channel)
            ch0 = t * TILE
            valid = min(TILE, s.kg - ch0)
            for i0, n, oh, ow0, length in s.runs(mt):
                if s.channels_last:
                    for j in range(i0, i0 + length):
                        dst = k.get_noc_addr(mt * TILE + j, out, (g * s.kg + ch0) * item)
                        l1 = stage + j * slot + dst.offset % WRITE_ALIGN
                        k.l1_write(l1, rows[j, :valid])
                        k.noc_async_write(l1, dst, valid * item)
                else:
                    for c in range(valid):
                        dst = k.get_noc_addr((n * s.k + g * s.kg + ch0 + c) * s.oh + oh, out, ow0 * item)
                        l1 = stage + c * slot + dst.offset % WRITE_ALIGN
                        k.l1_write(l1, np.ascontiguousarray(rows[i0 : i0 + length, c]))
                        k.noc_async_write(l1, dst, length * item)
                k.noc_async_writes_flushed()
            k.cb_pop_front(CB_OUT, 1)
    k.noc_async_write_barrier()
    _release_scratch(k, CB_STAGE)


# ------------------------------------------------------------------------------------------------ the program
def conv_program(spec: ConvSpec, max_cores: int | None = None) -> Program:
    """The program for ``spec`` over buffers ``spec.tensors``: x row-major (N, H, W, C) channels-last or (N, C, H,
    W) (a 1-d convolution's (N, L, C) / (N, C, L) are the same bytes with H = 1) in ``spec.x_fmt``; the weights as
    :func:`weight_matrix` lays them out, tile layout in ``spec.w_fmt``; the bias row-major (K,); the output row-major
    in the input's layout, in ``spec.out_fmt``. Units of (group, 32-pixel M tile) split over up to ``max_cores``."""
    s = spec.shape
    cores = worker_cores(s.units, max_cores=max_cores)
    nb = s.nb

    def cb(index: int, fmt: Format, pages: int, page_size: int | None = None) -> CircularBuffer:
        return CircularBuffer(index, fmt, page_size or fmt.tile_bytes, pages, cores)

    bf16 = Format.BFLOAT16
    x_item, out_item = spec.x_fmt.itemsize, spec.out_fmt.itemsize
    slots, scratch = s.scratch(x_item)
    stage = TILE * (TILE * out_item + WRITE_ALIGN) + WRITE_ALIGN  # 32 slots, each at most 16 B off its start
    cbs = [cb(CB_ACT_RM, spec.x_fmt, 2 * s.krt), cb(CB_ACT, spec.x_fmt, s.kh * s.krt),
           cb(CB_W, spec.w_fmt, s.w_tiles if s.w_resident else 2 * nb), cb(CB_OUT, spec.out_fmt, 2 * nb),
           cb(CB_SPAN, spec.x_fmt, 1, scratch), cb(CB_STAGE, spec.out_fmt, 1, stage)]  # fmt: skip
    # the row-major pages the kernels address: x's sticks or rows, the output's, the bias row
    pages = {"x": (s.c if s.channels_last else s.w) * x_item, "out": (s.k if s.channels_last else s.ow) * out_item}
    if s.has_bias:
        assert spec.bias_fmt is not None
        pages["bias"] = s.k * spec.bias_fmt.itemsize
        cbs += [cb(CB_BIAS, spec.bias_fmt, 2 * nb), cb(CB_BIAS_ROW, spec.bias_fmt, 1, aligned_page_size(pages["bias"]))]
        if s.fp32_acc:
            cbs.append(cb(CB_INTERIM, Format.FLOAT32, nb))
    if not s.fp32_acc:
        cbs.append(cb(CB_ACC, bf16, nb))
    ct = s.compile_time_args()
    runtime_page = tensor_accessor_args(None)  # row-major tensors: the page size is a runtime argument
    reader_ct = ct + runtime_page + tensor_accessor_args(spec.w_fmt.tile_bytes) + runtime_page
    tensors = spec.tensors
    sa = s.shape_args()

    def runtime_args(bufs: Sequence[Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
        by = dict(zip(tensors, bufs))
        require_dram("ktt_conv2d", by)
        for name, want in pages.items():
            if by[name].page_size != want:
                raise ProgramError(f"program 'ktt_conv2d': tensor {name!r} has {by[name].page_size} B pages, but the "
                                   f"program reads row-major rows of {want} B; upload it row-major in the op's "
                                   "layout")  # fmt: skip
        aligned = {n: aligned_page_size(p) for n, p in pages.items()}
        bias_addr = by["bias"].address if "bias" in by else 0
        split = split_work(s.units, cores)
        ins = [by["x"].address, by["weights"].address, bias_addr]
        return {"reader": {c: [*ins, s0, n, aligned["x"], aligned.get("bias", 0), slots, *sa] for c, s0, n in split},
                "compute": {c: [s0, n, *sa] for c, s0, n in split},
                "writer": {c: [by["out"].address, s0, n, aligned["out"], *sa] for c, s0, n in split}}  # fmt: skip

    k_tiles = s.kh * s.krt
    out_tiles = s.units * s.nt
    if s.w_resident:  # once per (core, group) its units touch
        w_reads = sum(len({u // s.mt for u in range(s0, s0 + n)}) for _, s0, n in split_work(s.units, cores))
    else:  # once per M tile
        w_reads = s.units
    dram = (
        s.units * TILE * s.kh * s.kw * s.cg * x_item  # every tap's sticks, once per unit
        + w_reads * s.w_tiles * spec.w_fmt.tile_bytes
        + s.m * s.k * out_item
        + (s.units * s.nt * TILE * (spec.bias_fmt.itemsize if spec.bias_fmt else 0))
    )
    extra = (1 if s.has_bias else 0) + (0 if s.fp32_acc else (s.kh - 1) + (0 if s.out_bf16 else 1))
    work = Work(dram_bytes=dram, matmul_tiles=out_tiles * k_tiles,
                fpu_tiles=s.units * k_tiles + out_tiles * extra)  # fmt: skip
    compute_kernel = Kernel(
        "compute",
        SOURCES / "compute.cpp",
        cores,
        compute,
        compile_time_args=ct,
        math_fidelity=spec.fidelity.name,
        fp32_dest_acc_en=True,
        math_approx_mode=False,
    )
    return Program(
        "ktt_conv2d",
        [Kernel("reader", SOURCES / "reader.cpp", cores, reader, compile_time_args=reader_ct), compute_kernel,
         Kernel("writer", SOURCES / "writer.cpp", cores, writer, compile_time_args=ct + runtime_page)],
        cbs, runtime_args=runtime_args, tensors=tensors, work=work,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------------ running
def run_conv_program(device: Any, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                     attrs: Mapping[str, Any] | None = None, *, x_dtype: DType | str = "bfloat16",
                     w_dtype: DType | str = "bfloat16", bias_dtype: DType | str | None = None,
                     out_dtype: DType | str | None = None, fidelity: Fidelity | str = Fidelity.HiFi4,
                     fp32_acc: bool = False, w_resident: bool | None = None,
                     max_cores: int | None = None) -> np.ndarray:  # fmt: skip
    """Run the program on ``device`` over host values: x in the op's own layout (batched or not; channels-last when
    ``attrs['channels_last']``), w (K, C/groups, *kernel), an optional bias (K,), stored in the given dtypes (block
    float weights keep their stored values). Returns the output (float32 holding the output dtype's values) in the
    op's layout."""
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    bdt = None if bias is None else (bias_dtype or x_dtype)
    spec = conv_spec(x.shape, w.shape, attrs, x_dtype=x_dtype, w_dtype=w_dtype, bias_dtype=bdt, out_dtype=out_dtype,
                     fidelity=fidelity, fp32_acc=fp32_acc, w_resident=w_resident)  # fmt: skip
    s = spec.shape
    g = conv_geometry(x.shape, w.shape, {**CONV_ATTRS, **dict(attrs or {})})
    x4 = x.reshape((s.n, s.h, s.w, s.c) if s.channels_last else (s.n, s.c, s.h, s.w))
    w_stored = quantize(w, DType.of(w_dtype).format)  # the values the op's weights hold
    bufs = []
    try:
        bufs.append(device.upload(x4, spec.x_fmt, layout=Layout.ROW_MAJOR))
        bufs.append(device.upload(weight_matrix(w_stored, s), spec.w_fmt, layout=Layout.TILE))
        if bias is not None:
            assert spec.bias_fmt is not None
            bufs.append(device.upload(np.asarray(bias, np.float32).reshape(s.k), spec.bias_fmt,
                                      layout=Layout.ROW_MAJOR))  # fmt: skip
        out_shape = (s.n, s.oh, s.ow, s.k) if s.channels_last else (s.n, s.k, s.oh, s.ow)
        bufs.append(device.allocate(shape=out_shape, fmt=spec.out_fmt, layout=Layout.ROW_MAJOR))
        device.run_program(conv_program(spec, max_cores), bufs)
        return device.download(bufs[-1]).reshape(g.out_shape)
    finally:
        for b in bufs:
            device.free(b)


__all__ = ["SOURCES", "ConvShape", "ConvSpec", "conv_program", "conv_spec",
           "run_conv_program", "weight_matrix"]  # fmt: skip
