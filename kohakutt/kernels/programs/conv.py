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
  row-major input: channels-last (N, H, W, C) sticks give one NoC read of C/groups contiguous values per (pixel, kernel
  column); channels-first (N, C, H, W) rows give one read per (input channel, run of pixels on one output row) into a
  scratch page, from which the kernel columns are picked with the stride. Taps in the padding stay 0. Then, per block
  of up to 4 output tiles, the weight tiles (kernel row, K tile) and the bias tile of each output tile (the group's
  channels read into row 0, copied down the tile). With a bf16 DST (``fp32_acc`` off) float32 data is truncated to
  bfloat16 in L1, as the unpacker would for a 16-bit DST.
- **compute** (fp32 DST, the scope's fidelity; the input in SrcB, the weights in SrcA): tilizes the unit's KH
  blocks into CB 1 (resident for the unit), then per block of up to 4 output tiles runs ``matmul_tiles`` over every
  (kernel row, K tile). fp32 accumulation keeps DST across all of them. With ``fp32_acc`` off, each kernel row's
  products are summed in the fp32 DST on top of the running sum, which is then packed to a bfloat16 CB (rounded to
  nearest even) and copied back for the next row: the bf16 DST rounded once per kernel row that the op's numerics
  contract names. The bias is added after the sum is packed to the intermediate format (fp32 or bfloat16) with one
  FPU ``add_tiles``; the result is packed in the output format.
- **writer**: turns each output tile (32 pixels x 32 channels, face order) into rows in a staging page and writes
  them to the row-major output: channels-last, one write per pixel (the tile's valid channels); channels-first, one
  write per (channel, run of pixels on one output row). Rearranging in the data mover keeps float32 exact.

:func:`kohakutt.kernels.conv.conv_forward` is the vectorized model of the same arithmetic, the op library's fast path.
The two agree up to the order of float32 sums inside DST (torch's convolution sums in its own order, the program tile
by tile); where every float32 sum is exact they agree bit for bit (the tests check both). The C++ sources also carry
what the simulator does not model (format reconfiguration between CBs, ``tilize_uninit``) and what a card needs that
the simulator does not check (on a card, a stick read must start 16-byte aligned: C/groups * itemsize a multiple of 16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.formats import quantize
from kohakutt.hal.layout import TILE, Format, Layout
from kohakutt.hal.program import CircularBuffer, Kernel, Program, Work, split_work
from kohakutt.ir.defs.conv import CONV_ATTRS, ConvGeometry, conv_geometry
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity
from kohakutt.kernels.programs import SOURCE_DIR
from kohakutt.kernels.programs.fused import worker_cores

DST_TILES = 4  # an fp32 DST in half-sync mode: the output tiles one block accumulates at once
RESIDENT_WEIGHT_BYTES = 512 * 1024  # a group's weights up to this size stay in L1 for all of a core's units
BF16_MASK = 0xFFFF0000  # float32 bits kept by a truncation to bfloat16

# Circular buffers: inputs 0..7, output 16, intermediates 24..
CB_ACT_RM, CB_ACT, CB_W, CB_BIAS, CB_SPAN = 0, 1, 2, 3, 4
CB_OUT = 16
CB_ACC, CB_INTERIM, CB_STAGE = 24, 25, 26


def face_index(r: int, c: int) -> int:
    """Where element (r, c) of a 32 x 32 tile sits in its four 16 x 16 faces (F0 F1 / F2 F3, each row-major)."""
    return ((r >> 4) * 2 + (c >> 4)) * 256 + (r & 15) * 16 + (c & 15)


_TILE_INDEX = np.array([[face_index(r, c) for c in range(TILE)] for r in range(TILE)], dtype=np.int64)


# ------------------------------------------------------------------------------------------------ the geometry
@dataclass(frozen=True)
class ConvShape:
    """The program's compile-time arguments (the same order in the C++ sources): a 2-d convolution's sizes and
    flags. A 1-d convolution is one of height 1."""

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
        return [int(getattr(self, f.name)) for f in fields(self)]

    @classmethod
    def of_kernel(cls, k: Any) -> ConvShape:
        """The shape as a kernel reads it from its compile-time arguments."""
        return cls(*(k.get_compile_time_arg_val(i) for i in range(len(fields(cls)))))

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
    fid = Fidelity[fidelity] if isinstance(fidelity, str) else Fidelity(fidelity)
    return ConvSpec(shape, _row_major_format(x_dtype, "input"), w_fmt, bias_fmt, out_fmt, fid)


def _shape(g: ConvGeometry, fp32_acc: bool, has_bias: bool, out_bf16: bool, w_fmt: Format,
           w_resident: bool | None) -> ConvShape:
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


def _gather(k: Any, s: ConvShape, x: Any, g: int, mt: int, r: int, l1: int, fmt: Format) -> None:
    """Twin of ``gather``: kernel row r of the im2col block of (g, mt) into the zeroed pages at ``l1``."""
    item = fmt.itemsize
    row_len = s.krt * TILE
    block = None if s.channels_last else np.zeros((TILE, row_len), _words(fmt))
    for i0, n, oh, ow0, length in s.runs(mt):
        ih = oh * s.sh - s.pt + r * s.dh
        if not 0 <= ih < s.h:
            continue
        ows = np.arange(ow0, ow0 + length)
        if s.channels_last:
            for j, ow in enumerate(ows):
                for q in range(s.kw):
                    iw = int(ow) * s.sw - s.pl + q * s.dw
                    if 0 <= iw < s.w:
                        stick = (n * s.h + ih) * s.w + iw
                        k.noc_async_read(k.get_noc_addr(stick, x, g * s.cg * item),
                                         l1 + ((i0 + j) * row_len + q * s.cg) * item, s.cg * item)  # fmt: skip
            continue
        lo_w, hi_w = ow0 * s.sw - s.pl, (ow0 + length - 1) * s.sw - s.pl + (s.kw - 1) * s.dw
        a, b = max(lo_w, 0), min(hi_w, s.w - 1)
        if a > b:
            continue
        span = k.get_write_ptr(CB_SPAN)
        iws = ows[:, None] * s.sw - s.pl + np.arange(s.kw)[None, :] * s.dw  # (pixel, kernel column)
        ok = (iws >= a) & (iws <= b)
        rows, qs = np.nonzero(ok)
        for c in range(s.cg):
            page = (n * s.c + g * s.cg + c) * s.h + ih
            k.noc_async_read(k.get_noc_addr(page, x, a * item), span, (b - a + 1) * item)
            k.noc_async_read_barrier()
            vals = k.l1_read(span, (b - a + 1) * item).view(_words(fmt))
            block[i0 + rows, qs * s.cg + c] = vals[iws[rows, qs] - a]  # type: ignore[index]
    if block is not None:
        k.l1_write(l1, block)


def _bias_tile(k: Any, s: ConvShape, bias: Any, g: int, t: int, l1: int) -> None:
    """Twin of the bias part of reader.cpp: the group's channels of output tile t in row 0, copied down the tile."""
    fmt = k.get_dataformat(CB_BIAS)
    item, size = fmt.itemsize, k.get_tile_size(CB_BIAS)
    k.l1_write(l1, np.zeros(size, np.uint8))
    ch0 = t * TILE
    valid = min(TILE, s.kg - ch0)
    for half in range(0, -(-valid // 16)):
        n = min(16, valid - half * 16)
        k.noc_async_read(k.get_noc_addr(0, bias, (g * s.kg + ch0 + half * 16) * item), l1 + half * 256 * item,
                         n * item)  # fmt: skip
    k.noc_async_read_barrier()
    faces = k.l1_read(l1, size).view(_words(fmt)).reshape(4, 16, 16).copy()
    faces[0::2] = faces[0, 0]  # faces 0 and 2 hold columns 0-15
    faces[1::2] = faces[1, 0]  # faces 1 and 3 hold columns 16-31
    k.l1_write(l1, faces)
    _truncate(k, s, CB_BIAS, l1, 1)


def reader(k: Any) -> None:
    """Twin of reader.cpp."""
    s = ConvShape.of_kernel(k)
    start, count = k.get_arg_val(3), k.get_arg_val(4)
    x, w = k.tensor_accessor("x"), k.tensor_accessor("weights")
    bias = k.tensor_accessor("bias") if s.has_bias else None
    fmt = k.get_dataformat(CB_ACT_RM)
    tw = k.get_tile_size(CB_W)
    if not s.channels_last:
        k.cb_reserve_back(CB_SPAN, 1)
    for u in range(start, start + count):
        g, mt = divmod(u, s.mt)
        for r in range(s.kh):
            k.cb_reserve_back(CB_ACT_RM, s.krt)
            l1 = k.get_write_ptr(CB_ACT_RM)
            k.l1_write(l1, np.zeros(s.krt * k.get_tile_size(CB_ACT_RM), np.uint8))
            _gather(k, s, x, g, mt, r, l1, fmt)
            k.noc_async_read_barrier()
            _truncate(k, s, CB_ACT_RM, l1, s.krt)
            k.cb_push_back(CB_ACT_RM, s.krt)
        if s.w_resident and (u == start or mt == 0):
            k.cb_reserve_back(CB_W, s.w_tiles)
            l1 = k.get_write_ptr(CB_W)
            for i in range(s.w_tiles):
                k.noc_async_read_tile(g * s.w_tiles + i, w, l1 + i * tw)
            k.noc_async_read_barrier()
            _truncate(k, s, CB_W, l1, s.w_tiles)
            k.cb_push_back(CB_W, s.w_tiles)
        for t0, nbw in s.blocks():
            for r in range(0 if s.w_resident else s.kh):
                for kt in range(s.krt):
                    k.cb_reserve_back(CB_W, s.nb)
                    l1 = k.get_write_ptr(CB_W)
                    for j in range(nbw):
                        k.noc_async_read_tile(((g * s.kh + r) * s.krt + kt) * s.nt + t0 + j, w, l1 + j * tw)
                    k.noc_async_read_barrier()
                    _truncate(k, s, CB_W, l1, nbw)
                    k.cb_push_back(CB_W, s.nb)
            if bias is not None:
                k.cb_reserve_back(CB_BIAS, s.nb)
                for j in range(nbw):
                    _bias_tile(k, s, bias, g, t0 + j, k.get_write_ptr(CB_BIAS) + j * k.get_tile_size(CB_BIAS))
                k.cb_push_back(CB_BIAS, s.nb)


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
    k.cb_reserve_back(CB_STAGE, 1)
    stage = k.get_write_ptr(CB_STAGE)
    for u in range(start, start + count):
        g, mt = divmod(u, s.mt)
        for t in range(s.nt):
            k.cb_wait_front(CB_OUT, 1)
            rows = k.l1_read(k.get_read_ptr(CB_OUT), size).view(_words(fmt))[_TILE_INDEX]
            k.l1_write(stage, rows if s.channels_last else rows.T)
            ch0 = t * TILE
            valid = min(TILE, s.kg - ch0)
            for i0, n, oh, ow0, length in s.runs(mt):
                m = mt * TILE + i0
                if s.channels_last:
                    for j in range(length):
                        k.noc_async_write(stage + (i0 + j) * TILE * item,
                                          k.get_noc_addr(m + j, out, (g * s.kg + ch0) * item), valid * item)
                else:
                    for j in range(valid):
                        row = (n * s.k + g * s.kg + ch0 + j) * s.oh + oh
                        k.noc_async_write(stage + (j * TILE + i0) * item, k.get_noc_addr(row, out, ow0 * item),
                                          length * item)  # fmt: skip
            k.noc_async_writes_flushed()
            k.cb_pop_front(CB_OUT, 1)
    k.noc_async_write_barrier()


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
    cbs = [cb(CB_ACT_RM, spec.x_fmt, 2 * s.krt), cb(CB_ACT, spec.x_fmt, s.kh * s.krt),
           cb(CB_W, spec.w_fmt, s.w_tiles if s.w_resident else 2 * nb), cb(CB_OUT, spec.out_fmt, 2 * nb),
           cb(CB_STAGE, spec.out_fmt, 1)]  # fmt: skip
    if not s.channels_last:
        cbs.append(cb(CB_SPAN, spec.x_fmt, 1, -(-s.w * spec.x_fmt.itemsize // 16) * 16))
    if s.has_bias:
        assert spec.bias_fmt is not None
        cbs.append(cb(CB_BIAS, spec.bias_fmt, 2 * nb))
        if s.fp32_acc:
            cbs.append(cb(CB_INTERIM, Format.FLOAT32, nb))
    if not s.fp32_acc:
        cbs.append(cb(CB_ACC, bf16, nb))
    ct = s.compile_time_args()
    tensors = spec.tensors

    def runtime_args(bufs: Sequence[Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
        by = dict(zip(tensors, bufs))
        bias_addr = by["bias"].address if "bias" in by else 0
        split = split_work(s.units, cores)
        return {"reader": {c: [by["x"].address, by["weights"].address, bias_addr, s0, n] for c, s0, n in split},
                "compute": {c: [s0, n] for c, s0, n in split},
                "writer": {c: [by["out"].address, s0, n] for c, s0, n in split}}  # fmt: skip

    k_tiles = s.kh * s.krt
    out_tiles = s.units * s.nt
    x_item, out_item = spec.x_fmt.itemsize, spec.out_fmt.itemsize
    if s.w_resident:  # once per (core, group) its units touch
        w_reads = sum(len({u // s.mt for u in range(s0, s0 + n)}) for _, s0, n in split_work(s.units, cores))
    else:  # once per M tile
        w_reads = s.units
    dram = (s.units * TILE * s.kh * s.kw * s.cg * x_item  # every tap's sticks, once per unit
            + w_reads * s.w_tiles * spec.w_fmt.tile_bytes
            + s.m * s.k * out_item + (s.units * s.nt * TILE * (spec.bias_fmt.itemsize if spec.bias_fmt else 0)))
    extra = (1 if s.has_bias else 0) + (0 if s.fp32_acc else (s.kh - 1) + (0 if s.out_bf16 else 1))
    work = Work(dram_bytes=dram, matmul_tiles=out_tiles * k_tiles,
                fpu_tiles=s.units * k_tiles + out_tiles * extra)  # fmt: skip
    compute_kernel = Kernel("compute", SOURCES / "compute.cpp", cores, compute, compile_time_args=ct,
                            math_fidelity=spec.fidelity.name, fp32_dest_acc_en=True, math_approx_mode=False)
    return Program(
        "ktt_conv2d",
        [Kernel("reader", SOURCES / "reader.cpp", cores, reader, compile_time_args=ct), compute_kernel,
         Kernel("writer", SOURCES / "writer.cpp", cores, writer, compile_time_args=ct)],
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
