"""Kohaku-TT's own fused programs: bias + GELU, the SiLU-gated product (silu_mul, swiglu) and rotary embedding, each
one reader / compute / writer program over circular buffers, written as Metalium C++ and as the simulator's twin.

Every program streams the output's tiles, split over cores as TT-NN's ``split_work_to_cores`` does; the reader
brings each output tile's operand tiles into L1, the compute kernel works on one tile in DST at a time, the writer
sends the result back. The arithmetic (what is rounded where) is in the op docs (``kohakutt/ir/defs/fused.py``) and
in the vectorized model that ``kernels.run`` executes (``kohakutt/kernels/fused.py``); the tests check that the two
give the same bits. :func:`run_program` runs an op's program on a device over tile-layout tensors.

What the programs take: operands in tile layout, bfloat16 or a block float (bfloat8_b / bfloat4_b); a bias, cos and
sin in bfloat16. float32 operands go to TT-NN's SFPU path instead (the FPU truncates float32 to TF32).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal import formats
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.layout import TILE, Format, Layout, padded_shape
from kohakutt.hal.program import (
    CircularBuffer,
    CoreRangeSet,
    Kernel,
    Program,
    Work,
    split_work,
    tensor_accessor_args,
    worker_cores,
)
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics, resolve
from kohakutt.ir.ops import ShapeError, TensorSpec, norm_dim
from kohakutt.kernels.programs import SOURCE_DIR
from kohakutt.kernels.tensor import DeviceTensor, empty

CB_A, CB_B, CB_COS, CB_SIN, CB_ROT = 0, 1, 2, 3, 4  # inputs: x / gate, bias / up / swapped x, cos, sin, +-1 tile
CB_OUT = 16
CB_IM0, CB_IM1, CB_IM2 = 24, 25, 26  # intermediates
ONE, NEG_ONE = 0x3F80, 0xBF80  # bfloat16 bits of 1.0 and -1.0

# --------------------------------------------------------------------------------------------- shared kernels
TILE_WRITER = SOURCE_DIR / "shared" / "tile_writer.cpp"  # drains CB 16 into tiles [start, start + count)
BIAS_GELU, GLU, ROTARY = (SOURCE_DIR / n for n in ("bias_gelu", "glu", "rotary_embedding"))  # reader / compute.cpp


def writer(k: Any) -> None:
    start, count = k.get_arg_val(1), k.get_arg_val(2)
    dst = k.tensor_accessor("out")
    for t in range(start, start + count):
        k.cb_wait_front(CB_OUT, 1)
        k.noc_async_write_tile(t, dst, k.get_read_ptr(CB_OUT))
        k.noc_async_writes_flushed()
        k.cb_pop_front(CB_OUT, 1)
    k.noc_async_write_barrier()


def _pack_step(c: Any, cb: int) -> None:
    """Commit DST, pack tile 0 into one reserved page of ``cb``, push it (the compute kernels' common tail)."""
    c.tile_regs_commit()
    c.cb_reserve_back(cb, 1)
    c.tile_regs_wait()
    c.pack_tile(0, cb)
    c.tile_regs_release()
    c.cb_push_back(cb, 1)


# ------------------------------------------------------------------------------------------------- bias_gelu
def broadcast_row0(tile: np.ndarray) -> np.ndarray:
    """A bfloat16 tile's bytes (2048, face order) with row 0 copied to every row, as the reader does in L1."""
    faces = tile.view(np.uint16).reshape(4, 16, 16).copy()
    faces[0::2] = faces[0, 0]  # faces 0 and 2 hold columns 0-15
    faces[1::2] = faces[1, 0]  # faces 1 and 3 hold columns 16-31
    return faces.view(np.uint8).reshape(-1)


def bias_gelu_reader(k: Any) -> None:
    start, count, wt = k.get_arg_val(2), k.get_arg_val(3), k.get_arg_val(4)
    x, bias = k.tensor_accessor("x"), k.tensor_accessor("bias")
    for t in range(start, start + count):
        k.cb_reserve_back(CB_A, 1)
        k.cb_reserve_back(CB_B, 1)
        bias_l1 = k.get_write_ptr(CB_B)
        k.noc_async_read_tile(t, x, k.get_write_ptr(CB_A))
        k.noc_async_read_tile(t % wt, bias, bias_l1)
        k.noc_async_read_barrier()
        k.l1_write(bias_l1, broadcast_row0(k.l1_read(bias_l1, k.get_tile_size(CB_B))))
        k.cb_push_back(CB_A, 1)
        k.cb_push_back(CB_B, 1)


def bias_gelu_compute(c: Any) -> None:
    count = c.get_arg_val(0)
    tanh = "GELU_TANH" in c.defines
    c.binary_op_init_common(CB_A, CB_B, CB_OUT)
    c.add_tiles_init(CB_A, CB_B)
    if tanh:
        c.gelu_tanh_tile_init()
    else:
        c.gelu_tile_init()
    for _ in range(count):
        c.cb_wait_front(CB_A, 1)
        c.cb_wait_front(CB_B, 1)
        c.tile_regs_acquire()
        c.add_tiles(CB_A, CB_B, 0, 0, 0)
        if tanh:
            c.gelu_tanh_tile(0, approx=False)
        else:
            c.gelu_tile(0, approx=False)
        c.tile_regs_commit()
        c.cb_pop_front(CB_A, 1)
        c.cb_pop_front(CB_B, 1)
        c.cb_reserve_back(CB_OUT, 1)
        c.tile_regs_wait()
        c.pack_tile(0, CB_OUT)
        c.tile_regs_release()
        c.cb_push_back(CB_OUT, 1)


# ------------------------------------------------------------------------------------------ silu_mul / swiglu
def glu_tiles(t: int, half: int, inner: int, split: bool) -> tuple[int, int]:
    """(gate tile, up tile) of output tile ``t``: the same tile of two tensors, or the two halves of one."""
    if not split:
        return t, t
    o, ir = divmod(t, half * inner)
    gate = o * 2 * half * inner + ir
    return gate, gate + half * inner


def glu_reader(k: Any) -> None:
    start, count, half, inner = (k.get_arg_val(i) for i in range(2, 6))
    split = "SPLIT" in k.defines
    a = k.tensor_accessor(0)
    b = a if split else k.tensor_accessor(1)
    for t in range(start, start + count):
        gate, up = glu_tiles(t, half, inner, split)
        k.cb_reserve_back(CB_A, 1)
        k.cb_reserve_back(CB_B, 1)
        k.noc_async_read_tile(gate, a, k.get_write_ptr(CB_A))
        k.noc_async_read_tile(up, b, k.get_write_ptr(CB_B))
        k.noc_async_read_barrier()
        k.cb_push_back(CB_A, 1)
        k.cb_push_back(CB_B, 1)


def glu_compute(c: Any) -> None:
    count = c.get_arg_val(0)
    c.binary_op_init_common(CB_A, CB_B, CB_OUT)
    for _ in range(count):
        c.cb_wait_front(CB_A, 1)
        c.cb_wait_front(CB_B, 1)
        c.tile_regs_acquire()
        c.copy_tile_to_dst_init_short(CB_A)
        c.copy_tile(CB_A, 0, 0)
        c.sigmoid_tile_init()
        c.sigmoid_tile(0)
        _pack_step(c, CB_IM0)
        c.tile_regs_acquire()
        c.mul_tiles_init(CB_A, CB_B)
        c.mul_tiles(CB_A, CB_B, 0, 0, 0)
        _pack_step(c, CB_IM1)
        c.cb_pop_front(CB_A, 1)
        c.cb_pop_front(CB_B, 1)
        c.cb_wait_front(CB_IM0, 1)
        c.cb_wait_front(CB_IM1, 1)
        c.tile_regs_acquire()
        c.mul_tiles_init(CB_IM0, CB_IM1)
        c.mul_tiles(CB_IM0, CB_IM1, 0, 0, 0)
        _pack_step(c, CB_OUT)
        c.cb_pop_front(CB_IM0, 1)
        c.cb_pop_front(CB_IM1, 1)


# ---------------------------------------------------------------------------------------------------- rotary
def rotation_matrix(head_dim: int, interleaved: bool, transpose: bool = False) -> np.ndarray:
    """The 32 x 32 +-1 tile R with ``rot(x) = x @ R`` for rows ``x`` of one tile (head_dim <= 32 for the half form;
    the interleaved form pairs adjacent columns of every tile), or its transpose."""
    r = np.zeros((TILE, TILE), np.float32)
    half = 0 if interleaved else head_dim // 2
    for j in range(TILE):
        if interleaved:
            i, v = j ^ 1, (1.0 if j & 1 else -1.0)
        elif j < head_dim:
            i, v = (j + half, -1.0) if j < half else (j - half, 1.0)
        else:
            continue
        r[i, j] = v
    return np.ascontiguousarray(r.T) if transpose else r


def rotary_reader(k: Any) -> None:
    start, count, ht, wt, per_matrix, half, transpose, head_dim = (k.get_arg_val(i) for i in range(3, 11))
    swap = "SWAP_HALVES" in k.defines
    x, cs, sn = k.tensor_accessor("x"), k.tensor_accessor("cos"), k.tensor_accessor("sin")
    if not swap:
        k.cb_reserve_back(CB_ROT, 1)
        tile = rotation_matrix(head_dim, half == 0, bool(transpose))
        k.l1_write(k.get_write_ptr(CB_ROT), formats.pack(tile, Format.BFLOAT16))
        k.cb_push_back(CB_ROT, 1)
    half_wt = wt // 2
    for t in range(start, start + count):
        col, row = t % wt, t // wt
        cs_row = row if per_matrix else row % ht
        for cb in (CB_A, CB_COS, CB_SIN):
            k.cb_reserve_back(cb, 1)
        k.noc_async_read_tile(t, x, k.get_write_ptr(CB_A))
        k.noc_async_read_tile(cs_row * wt + col, cs, k.get_write_ptr(CB_COS))
        if swap:
            other = col + half_wt if col < half_wt else col - half_wt
            k.cb_reserve_back(CB_B, 1)
            k.noc_async_read_tile(row * wt + other, x, k.get_write_ptr(CB_B))
            k.noc_async_read_tile(cs_row * wt + (other if transpose else col), sn, k.get_write_ptr(CB_SIN))
        else:
            k.noc_async_read_tile(cs_row * wt + col, sn, k.get_write_ptr(CB_SIN))
        k.noc_async_read_barrier()
        k.cb_push_back(CB_A, 1)
        if swap:
            k.cb_push_back(CB_B, 1)
        k.cb_push_back(CB_COS, 1)
        k.cb_push_back(CB_SIN, 1)


def _multiply(c: Any, a: int, b: int, out: int) -> None:
    c.tile_regs_acquire()
    c.mul_tiles_init(a, b)
    c.mul_tiles(a, b, 0, 0, 0)
    _pack_step(c, out)


def _rotate(c: Any, a: int, out: int) -> None:
    c.tile_regs_acquire()
    c.mm_init_short(a, CB_ROT)
    c.matmul_tiles(a, CB_ROT, 0, 0, 0)
    _pack_step(c, out)


def rotary_compute(c: Any) -> None:
    start, count, wt, backward = (c.get_arg_val(i) for i in range(4))
    swap = "SWAP_HALVES" in c.defines
    c.binary_op_init_common(CB_A, CB_COS, CB_OUT)
    if not swap:
        c.cb_wait_front(CB_ROT, 1)
    for t in range(start, start + count):
        for cb in (CB_A, CB_COS, CB_SIN):
            c.cb_wait_front(cb, 1)
        subtract = False
        if swap:
            c.cb_wait_front(CB_B, 1)
            _multiply(c, CB_B, CB_SIN, CB_IM2)
            c.cb_pop_front(CB_B, 1)
            subtract = ((t % wt) < wt // 2) != bool(backward)
        else:
            if backward:
                _multiply(c, CB_A, CB_SIN, CB_IM0)
                c.cb_wait_front(CB_IM0, 1)
                _rotate(c, CB_IM0, CB_IM2)
            else:
                _rotate(c, CB_A, CB_IM0)
                c.cb_wait_front(CB_IM0, 1)
                _multiply(c, CB_IM0, CB_SIN, CB_IM2)
            c.cb_pop_front(CB_IM0, 1)
        _multiply(c, CB_A, CB_COS, CB_IM1)
        for cb in (CB_A, CB_COS, CB_SIN):
            c.cb_pop_front(cb, 1)
        c.cb_wait_front(CB_IM1, 1)
        c.cb_wait_front(CB_IM2, 1)
        c.tile_regs_acquire()
        if subtract:
            c.sub_tiles_init(CB_IM1, CB_IM2)
            c.sub_tiles(CB_IM1, CB_IM2, 0, 0, 0)
        else:
            c.add_tiles_init(CB_IM1, CB_IM2)
            c.add_tiles(CB_IM1, CB_IM2, 0, 0, 0)
        _pack_step(c, CB_OUT)
        c.cb_pop_front(CB_IM1, 1)
        c.cb_pop_front(CB_IM2, 1)
    if not swap:
        c.cb_pop_front(CB_ROT, 1)


def rotary_form(head_dim: int, interleaved: bool) -> str | None:
    """How the own rotary program rotates: "matmul" (by the +-1 tile: interleaved, or half form with head_dim <= 32),
    "swap" (whole-tile halves: head_dim a multiple of 64), or None (the simulator's model only)."""
    if interleaved or head_dim <= TILE:
        return "matmul"
    return "swap" if head_dim % (2 * TILE) == 0 else None


# ------------------------------------------------------------------------------------------------- building
def _accessors(*tensors: DeviceTensor) -> list[int]:
    """The compile-time args of the kernel's TensorAccessorArgs, one set per tensor in order."""
    return [a for t in tensors for a in tensor_accessor_args(t.buffer.page_size, t.buffer.kind)]


def _compute(source: Path, sim: Callable[[Any], None], cores: CoreRangeSet, num: Numerics, fp32: bool,
             approx: bool = False, defines: Mapping[str, str] | None = None) -> Kernel:  # fmt: skip
    fid = num.fidelity if num.fidelity is not None else Fidelity.HiFi4
    return Kernel("compute", source, cores, sim, math_fidelity=fid.name, fp32_dest_acc_en=fp32,
                  math_approx_mode=approx, defines=dict(defines or {}))  # fmt: skip


def _cbs(cores: CoreRangeSet, formats_: Mapping[int, Format], pages: int = 2) -> list[CircularBuffer]:
    return [CircularBuffer(i, f, f.tile_bytes, pages, cores) for i, f in sorted(formats_.items())]


def _fmt(t: DeviceTensor) -> Format:
    return t.spec.dtype.format


def _work(tiles: int, ins: Sequence[DeviceTensor], outs: Sequence[DeviceTensor], reads_per_tile: float,
          fpu: int, sfpu: int, matmul: int = 0) -> Work:  # fmt: skip
    """DRAM bytes (each operand tile read ``reads_per_tile`` times per output tile, the output once) and tile ops."""
    out_bytes = sum(o.buffer.nbytes for o in outs)
    per_tile = sum(_fmt(t).tile_bytes for t in ins) * reads_per_tile
    return Work(dram_bytes=int(out_bytes + per_tile * tiles), fpu_tiles=fpu * tiles, sfpu_tiles=sfpu * tiles,
                matmul_tiles=matmul * tiles)  # fmt: skip


def bias_gelu_program(ins: Sequence[DeviceTensor], outs: Sequence[DeviceTensor], attrs: Mapping[str, Any],
                      num: Numerics, fp32: bool, max_cores: int | None = None) -> Program:  # fmt: skip
    """gelu(x + bias) over every tile of x (the bias tile of each column broadcast down its rows by the reader)."""
    x, bias = ins
    (out,) = outs
    tiles = out.buffer.num_pages
    wt = padded_shape(x.shape)[-1] // TILE
    cores = worker_cores(tiles, max_cores=max_cores)
    tanh = attrs["approximate"] == "tanh"

    def args(bufs: Sequence[Buffer], rt: Mapping[str, Any]) -> dict[str, Any]:
        split = split_work(tiles, cores)
        return {"reader": {c: [bufs[0].address, bufs[1].address, s, n, wt] for c, s, n in split},
                "compute": {c: [n] for c, s, n in split},
                "writer": {c: [bufs[2].address, s, n] for c, s, n in split}}  # fmt: skip

    return Program(
        "ktt_bias_gelu",
        [Kernel("reader", BIAS_GELU / "reader.cpp", cores, bias_gelu_reader,
                compile_time_args=_accessors(x, bias)),
         _compute(BIAS_GELU / "compute.cpp", bias_gelu_compute, cores, num, fp32, tanh,
                  defines={"GELU_TANH": "1"} if tanh else None),
         Kernel("writer", TILE_WRITER, cores, writer, compile_time_args=_accessors(out))],
        _cbs(cores, {CB_A: _fmt(x), CB_B: Format.BFLOAT16, CB_OUT: _fmt(out)}),
        runtime_args=args, tensors=("x", "bias", "out"),
        work=_work(tiles, ins, outs, 1, fpu=1, sfpu=2),
    )  # fmt: skip


def split_geometry(shape: Sequence[int], dim: int) -> tuple[int, int]:
    """(half, inner) for splitting a tile-layout tensor of ``shape`` in two along ``dim``: its tiles are
    (outer, 2 * half, inner) with the split running through the middle axis (half in tiles for one of the last two
    dims, in matrices for a leading dim). Raises when a half is not whole tiles."""
    nd = len(shape)
    d = norm_dim(dim, nd, "swiglu")
    p = padded_shape(shape)
    ht, wt = p[-2] // TILE, p[-1] // TILE
    half = shape[d] // 2
    if d >= nd - 2:
        if half % TILE:
            raise KohakuTTUnsupportedOperator(
                f"swiglu's own program splits whole tiles: dim {dim} of {tuple(shape)} splits into halves of {half}, "
                "not a multiple of 32; the simulator's model (kernels.run) computes this split"
            )
        return half // TILE, (wt if d == nd - 2 else 1)
    return half, math.prod(shape[d + 1 : nd - 2]) * ht * wt


def glu_program(ins: Sequence[DeviceTensor], outs: Sequence[DeviceTensor], attrs: Mapping[str, Any],
                num: Numerics, fp32: bool, max_cores: int | None = None) -> Program:  # fmt: skip
    """silu(gate) * up over every output tile: two tensors (silu_mul), or the halves of one along ``attrs['dim']``
    (swiglu)."""
    split = len(ins) == 1
    (out,) = outs
    tiles = out.buffer.num_pages
    half, inner = split_geometry(ins[0].shape, attrs["dim"]) if split else (1, 1)
    cores = worker_cores(tiles, max_cores=max_cores)
    im = Format.FLOAT32 if fp32 else Format.BFLOAT16

    def args(bufs: Sequence[Buffer], rt: Mapping[str, Any]) -> dict[str, Any]:
        sp = split_work(tiles, cores)
        a, b = bufs[0].address, bufs[0 if split else 1].address
        return {"reader": {c: [a, b, s, n, half, inner] for c, s, n in sp},
                "compute": {c: [n] for c, s, n in sp},
                "writer": {c: [bufs[-1].address, s, n] for c, s, n in sp}}  # fmt: skip

    return Program(
        "ktt_swiglu" if split else "ktt_silu_mul",
        [Kernel("reader", GLU / "reader.cpp", cores, glu_reader, compile_time_args=_accessors(ins[0], ins[-1]),
                defines={"SPLIT": "1"} if split else {}),
         _compute(GLU / "compute.cpp", glu_compute, cores, num, fp32),
         Kernel("writer", TILE_WRITER, cores, writer, compile_time_args=_accessors(out))],
        _cbs(cores, {CB_A: _fmt(ins[0]), CB_B: _fmt(ins[-1]), CB_IM0: im, CB_IM1: im, CB_OUT: _fmt(out)}),
        runtime_args=args, tensors=("x", "out") if split else ("gate", "up", "out"),
        work=_work(tiles, ins, outs, 2 if split else 1, fpu=3, sfpu=1),
    )  # fmt: skip


def rotary_program(ins: Sequence[DeviceTensor], outs: Sequence[DeviceTensor], attrs: Mapping[str, Any],
                   num: Numerics, fp32: bool, backward: bool = False,
                   max_cores: int | None = None) -> Program:  # fmt: skip
    """x * cos + rot(x) * sin (backward: grad * cos + rot^T(grad * sin)) over every tile of x."""
    x, cs, sn = ins
    (out,) = outs
    shape = x.shape
    head_dim, interleaved = shape[-1], bool(attrs["interleaved"])
    form = rotary_form(head_dim, interleaved)
    if form is None:
        raise KohakuTTUnsupportedOperator(
            f"the own rotary program takes a head_dim up to 32 or a multiple of 64 for the half form, got {head_dim}; "
            "the simulator's model (kernels.run) computes other widths"
        )
    p = padded_shape(shape)
    ht, wt = p[-2] // TILE, p[-1] // TILE
    matrices = math.prod(p[:-2])
    per_matrix = _cache_per_matrix(cs.shape, shape) and _cache_per_matrix(sn.shape, shape)
    tiles = out.buffer.num_pages
    cores = worker_cores(tiles, max_cores=max_cores)
    swap = form == "swap"
    half = 0 if interleaved else head_dim // 2
    im = Format.FLOAT32 if fp32 else Format.BFLOAT16
    if matrices and not per_matrix:
        for n, c in (("cos", cs), ("sin", sn)):
            if math.prod(padded_shape(c.shape)[:-2]) != 1:
                raise KohakuTTUnsupportedOperator(
                    f"the own rotary program takes {n} with one (seq, head_dim) matrix or one per matrix of x; got "
                    f"{c.shape} for x {shape}: expand it first, or use kernels.run"
                )

    def args(bufs: Sequence[Buffer], rt: Mapping[str, Any]) -> dict[str, Any]:
        sp = split_work(tiles, cores)
        a = [bufs[0].address, bufs[1].address, bufs[2].address]
        return {"reader": {c: [*a, s, n, ht, wt, int(per_matrix), half, int(backward), head_dim] for c, s, n in sp},
                "compute": {c: [s, n, wt, int(backward)] for c, s, n in sp},
                "writer": {c: [bufs[3].address, s, n] for c, s, n in sp}}  # fmt: skip

    defines = {"SWAP_HALVES": "1"} if swap else {}
    cb_formats = {CB_A: _fmt(x), CB_COS: _fmt(cs), CB_SIN: _fmt(sn), CB_IM0: im, CB_IM1: im, CB_IM2: im,
                  CB_OUT: _fmt(out)}  # fmt: skip
    if swap:
        cb_formats[CB_B] = _fmt(x)
    cbs = _cbs(cores, cb_formats)
    if not swap:
        cbs.append(CircularBuffer(CB_ROT, Format.BFLOAT16, Format.BFLOAT16.tile_bytes, 1, cores))
    return Program(
        "ktt_rotary_embedding" + ("_backward" if backward else ""),
        [Kernel("reader", ROTARY / "reader.cpp", cores, rotary_reader, compile_time_args=_accessors(*ins),
                defines=defines),
         _compute(ROTARY / "compute.cpp", rotary_compute, cores, num, fp32, defines=defines),
         Kernel("writer", TILE_WRITER, cores, writer, compile_time_args=_accessors(out))],
        cbs, runtime_args=args, tensors=("x", "cos", "sin", "out"),
        work=_work(tiles, ins, outs, 4 / 3 if swap else 1, fpu=3, sfpu=0, matmul=0 if swap else 1),
    )  # fmt: skip


def _cache_per_matrix(cache: Sequence[int], x: Sequence[int]) -> bool:
    """Whether a cos / sin of shape ``cache`` has one (seq, head_dim) matrix per matrix of x (leading dims equal
    once aligned on the right)."""
    lead, xlead = tuple(cache[:-2]), tuple(x[:-2])
    return math.prod(lead) == math.prod(xlead) and tuple(n for n in lead if n != 1) == tuple(n for n in xlead if n != 1)


BUILDERS: dict[str, Callable[..., Program]] = {
    "bias_gelu": bias_gelu_program,
    "silu_mul": glu_program,
    "swiglu": glu_program,
    "rotary_embedding": rotary_program,
    "rotary_embedding_backward": lambda *a, **k: rotary_program(*a, backward=True, **k),
}


def fp32_dst(num: Numerics) -> bool:
    """The own programs' DST: fp32 unless the scope sets ``fp32_acc=False``."""
    return True if num.fp32_acc is None else bool(num.fp32_acc)


def build(op: str, ins: Sequence[DeviceTensor], outs: Sequence[DeviceTensor], attrs: Mapping[str, Any],
          num: Numerics, max_cores: int | None = None) -> Program:  # fmt: skip
    """The own program of fused op ``op`` over these tensors (tile layout), checked for what the programs take."""
    if op not in BUILDERS:
        raise KohakuTTUnsupportedOperator(f"{op} has no own program; its ktt kernel is the simulator's model only")
    for t in (*ins, *outs):
        if t.spec.layout is not Layout.TILE:
            raise ShapeError(f"{op}'s own program runs over tile-layout tensors; got {t.spec}: convert it to tile "
                             "layout first")  # fmt: skip
        if t.dtype is DType.FLOAT32 or not t.dtype.is_float:
            raise KohakuTTUnsupportedOperator(
                f"{op}'s own program takes bfloat16 or block-float tensors, got {t.dtype.value}: float32 operands run "
                "TT-NN's SFPU path (kernels.run picks it), the FPU would truncate them to TF32"
            )
    small = {"bias_gelu": ins[1:], "rotary_embedding": ins[1:], "rotary_embedding_backward": ins[1:]}.get(op, ())
    for t in small:
        if t.dtype is not DType.BFLOAT16:
            raise KohakuTTUnsupportedOperator(f"{op}'s own program takes its bias / cos / sin in bfloat16, got "
                                              f"{t.dtype.value}: typecast them first")  # fmt: skip
    return BUILDERS[op](ins, outs, attrs, num, fp32_dst(num), max_cores=max_cores)


def run_program(op: str, inputs: Sequence[DeviceTensor], attrs: Mapping[str, Any] | None = None, *,
                max_cores: int | None = None) -> list[DeviceTensor]:  # fmt: skip
    """Run fused op ``op``'s own program on the inputs' device, tile by tile (``device.run_program``), with the
    numerics of the current scope; return the outputs (new tile-layout tensors). ``kernels.run`` computes the same
    bits with the vectorized model."""
    d = irops.get(op)
    d.check_arity(len(inputs))
    bound = d.bind_attrs(dict(attrs or {}))
    out_specs = d.infer([t.spec for t in inputs], bound)
    dev = inputs[0].device
    outs = [empty(dev, TensorSpec(s.shape, s.dtype, Layout.TILE)) for s in out_specs]
    program = build(op, inputs, outs, bound, resolve(d.numerics), max_cores)
    dev.run_program(program, [t.buffer for t in (*inputs, *outs)])
    return outs


__all__ = [
    "BUILDERS", "bias_gelu_program", "broadcast_row0", "build", "fp32_dst", "glu_program", "glu_tiles",
    "rotary_form", "rotary_program", "rotation_matrix", "run_program", "split_geometry", "worker_cores",
]  # fmt: skip
