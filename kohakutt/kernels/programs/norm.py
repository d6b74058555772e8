"""Kohaku-TT's own layer norm / RMS norm program (with the fused residual add), and the vectorized model of the same
arithmetic that the op library's fast path runs.

One core normalizes whole tile rows (32 rows of the (R, W) view): the reader streams the row's W tiles into L1 once
(the residual add, when fused, is done on the way in and the sum kept as stored in the output dtype), then the
compute kernel takes three passes over the resident row:

1. the mean, as ``s_tile @ ones`` accumulated over the row in an fp32 DST: every column of the result holds the row
   sum, so the statistic is already broadcast across the tile; the last tile's ones have their padded rows zeroed,
   so tile padding never counts. Then ``* (1/W)`` on the SFPU (fp32).
2. ``(s - mean)^2`` (FPU subtract, SFPU square, fp32) into a resident fp32 row, summed the same way; ``* (1/W)``,
   ``+ eps`` and ``rsqrt`` on the SFPU in fp32. RMS norm skips pass 1 and squares ``s`` itself.
3. ``(s - mean) * rstd``, ``* gamma``, ``+ beta`` on the FPU, through fp32 circular buffers; one rounding, to the
   output dtype, when packed. The reader broadcasts row 0 of each gamma / beta tile down the tile.

Numerics follow the simulator's card model (``docs/concepts/numerics.md``): fp32 values re-entering the FPU are
truncated to TF32 (19 bits); a multiply's SrcA keeps 10 significant bits, its SrcB 11 (fewer below HiFi3); the
sums' products with 1.0 are exact; sums accumulate tile by tile in fp32 DST. :func:`rowwise_model` computes exactly
these steps for all rows at once (torch CPU as the engine). The row lives in L1 (the s row in its dtype plus an fp32
row of squares), so W is bounded by L1 (:func:`max_width`: about 7.5 K values for bfloat16); ``Program.validate``
names the circular buffers that do not fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kohakutt.hal import cardcore, formats
from kohakutt.hal.card import P150A
from kohakutt.hal.layout import TILE, Format
from kohakutt.hal.program import (
    CircularBuffer,
    CoreRange,
    Kernel,
    Program,
    Work,
    split_work,
    tensor_accessor_args,
)
from kohakutt.ir.numerics import Fidelity
from kohakutt.kernels.programs import SOURCE_DIR

# Circular buffers (tt::CBIndex values).
CB_X, CB_RES, CB_ONES, CB_GAMMA, CB_BETA = 0, 1, 2, 3, 4
CB_Y, CB_S_OUT, CB_MEAN_OUT, CB_RSTD_OUT = 16, 17, 18, 19
CB_S, CB_MEAN, CB_SQ, CB_RSTD, CB_D, CB_T1, CB_T2 = 24, 25, 26, 27, 28, 29, 30

# --------------------------------------------------------------------------------------------------- C++ sources
SOURCES = SOURCE_DIR / "layer_norm"  # reader.cpp, compute.cpp, writer.cpp (RMSNORM defined: RMS norm)


# ------------------------------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class NormConfig:
    """What one program instance computes: the op's variant, its width and formats, eps and the fidelity."""

    width: int  # W: the normalized values per row
    eps: float
    rms: bool = False
    fused: bool = False  # s = x + residual first
    gamma: bool = False
    beta: bool = False
    stats: bool = True
    fidelity: Fidelity = Fidelity.HiFi4
    x_fmt: Format = Format.BFLOAT16
    res_fmt: Format = Format.BFLOAT16
    gamma_fmt: Format = Format.BFLOAT16
    beta_fmt: Format = Format.BFLOAT16
    out_fmt: Format = Format.BFLOAT16

    @property
    def wt(self) -> int:
        return max(1, -(-self.width // TILE))

    @property
    def w_last(self) -> int:
        return self.width % TILE

    @property
    def tensors(self) -> tuple[str, ...]:
        ins = ("x",) + (("residual",) if self.fused else ()) + (("weight",) if self.gamma else ()) + (
            ("bias",) if self.beta else ())  # fmt: skip
        outs = ("y",) + (("s",) if self.fused else ()) + (("mean",) if self.stats and not self.rms else ()) + (
            ("rstd",) if self.stats else ())  # fmt: skip
        return ins + outs

    @property
    def defines(self) -> dict[str, str]:
        flags = {"RMSNORM": self.rms, "FUSE_PRE_ADD": self.fused, "FUSE_GAMMA": self.gamma, "FUSE_BETA": self.beta,
                 "WRITE_STATS": self.stats}  # fmt: skip
        return {k: "1" for k, on in flags.items() if on}


def f32_bits(v: float) -> int:
    """The fp32 bit pattern of ``v`` (how a float travels as a kernel argument)."""
    return int(np.array(v, dtype=np.float32).view(np.uint32))


# ------------------------------------------------------------------------------------------------ simulator twins
def _reader(k: Any) -> None:
    row_start, rows = k.get_arg_val(4), k.get_arg_val(5)
    wt_n, w_last = k.get_arg_val(6), k.get_arg_val(7)
    d = k.defines
    x = k.tensor_accessor("x")
    res = k.tensor_accessor("residual") if "FUSE_PRE_ADD" in d else None
    params = [(cb, k.tensor_accessor(name)) for cb, name, flag in
              ((CB_GAMMA, "weight", "FUSE_GAMMA"), (CB_BETA, "bias", "FUSE_BETA")) if flag in d]  # fmt: skip
    k.cb_reserve_back(CB_ONES, 2)
    ones = np.ones((TILE, TILE), np.float32)
    partial = ones.copy()
    partial[w_last or TILE :] = 0.0
    k.l1_write(k.get_write_ptr(CB_ONES), np.concatenate([formats.pack(ones, "bfloat16"),
                                                          formats.pack(partial, "bfloat16")]))  # fmt: skip
    k.cb_push_back(CB_ONES, 2)
    for row in range(row_start, row_start + rows):
        for wt in range(wt_n):
            k.cb_reserve_back(CB_X, 1)
            k.noc_async_read_tile(row * wt_n + wt, x, k.get_write_ptr(CB_X))
            if res is not None:
                k.cb_reserve_back(CB_RES, 1)
                k.noc_async_read_tile(row * wt_n + wt, res, k.get_write_ptr(CB_RES))
            k.noc_async_read_barrier()
            k.cb_push_back(CB_X, 1)
            if res is not None:
                k.cb_push_back(CB_RES, 1)
        for wt in range(wt_n):
            for cb, acc in params:
                k.cb_reserve_back(cb, 1)
                l1 = k.get_write_ptr(cb)
                k.noc_async_read_tile(wt, acc, l1)
                k.noc_async_read_barrier()
                size = k.get_tile_size(cb)
                k.l1_write(l1, broadcast_row0(k.l1_read(l1, size)))
                k.cb_push_back(cb, 1)


def broadcast_row0(tile: np.ndarray) -> np.ndarray:
    """A tile's bytes (bfloat16 or float32, face order) with row 0 copied into every row."""
    t = tile.view(np.uint32 if tile.size == 4096 else np.uint16).reshape(4, 16, 16).copy()
    t[0] = t[2] = t[0, 0]
    t[1] = t[3] = t[1, 0]
    return t.reshape(-1).view(np.uint8)


def _pack_to(c: Any, *cbs: int) -> None:
    for cb in cbs:
        c.cb_reserve_back(cb, 1)
    c.tile_regs_wait()
    for cb in cbs:
        c.pack_tile(0, cb)
    c.tile_regs_release()
    for cb in cbs:
        c.cb_push_back(cb, 1)


def _tile_pair(c: Any, op: str, a: int, b: int, *outs: int) -> None:
    """One tile of ``a`` and of ``b`` through ``add_tiles`` / ``mul_tiles`` into DST 0, popped, packed to ``outs``."""
    c.cb_wait_front(a, 1)
    c.cb_wait_front(b, 1)
    c.tile_regs_acquire()
    getattr(c, f"{op}_tiles_init")(a, b)
    getattr(c, f"{op}_tiles")(a, b, 0, 0, 0)
    c.tile_regs_commit()
    c.cb_pop_front(a, 1)
    c.cb_pop_front(b, 1)
    _pack_to(c, *outs)


def _row_sum(c: Any, cb: int, wt_n: int, w_last: int) -> None:
    c.mm_init_short(cb, CB_ONES)
    for wt in range(wt_n):
        c.matmul_tiles(cb, CB_ONES, wt, 1 if wt == wt_n - 1 and w_last else 0, 0)


def _compute(c: Any) -> None:
    rows = c.get_arg_val(0)
    wt_n, w_last, inv_w, eps = (c.get_arg_val(i) for i in range(1, 5))
    d = c.defines
    rms, fused, gamma, beta, stats = (f in d for f in ("RMSNORM", "FUSE_PRE_ADD", "FUSE_GAMMA", "FUSE_BETA",
                                                        "WRITE_STATS"))  # fmt: skip
    cb_s = CB_S if fused else CB_X
    c.compute_kernel_hw_startup(cb_s, CB_ONES, CB_Y)
    c.cb_wait_front(CB_ONES, 2)
    for _ in range(rows):
        if fused:
            for _wt in range(wt_n):
                _tile_pair(c, "add", CB_X, CB_RES, CB_S, CB_S_OUT)
        c.cb_wait_front(cb_s, wt_n)
        if not rms:
            c.tile_regs_acquire()
            _row_sum(c, cb_s, wt_n, w_last)
            c.binop_with_scalar_tile_init()
            c.mul_unary_tile(0, inv_w)
            c.tile_regs_commit()
            _pack_to(c, CB_MEAN, *([CB_MEAN_OUT] if stats else []))
            c.cb_wait_front(CB_MEAN, 1)
        for wt in range(wt_n):
            c.tile_regs_acquire()
            if rms:
                c.copy_tile_init(cb_s)
                c.copy_tile(cb_s, wt, 0)
            else:
                c.sub_tiles_init(cb_s, CB_MEAN)
                c.sub_tiles(cb_s, CB_MEAN, wt, 0, 0)
            c.square_tile_init()
            c.square_tile(0)
            c.tile_regs_commit()
            _pack_to(c, CB_SQ)
        c.cb_wait_front(CB_SQ, wt_n)
        c.tile_regs_acquire()
        _row_sum(c, CB_SQ, wt_n, w_last)
        c.binop_with_scalar_tile_init()
        c.mul_unary_tile(0, inv_w)
        c.add_unary_tile(0, eps)
        c.rsqrt_tile_init()
        c.rsqrt_tile(0)
        c.tile_regs_commit()
        c.cb_pop_front(CB_SQ, wt_n)
        _pack_to(c, CB_RSTD, *([CB_RSTD_OUT] if stats else []))
        c.cb_wait_front(CB_RSTD, 1)
        for wt in range(wt_n):
            if rms:
                src, idx = cb_s, wt
            else:
                c.tile_regs_acquire()
                c.sub_tiles_init(cb_s, CB_MEAN)
                c.sub_tiles(cb_s, CB_MEAN, wt, 0, 0)
                c.tile_regs_commit()
                _pack_to(c, CB_D)
                c.cb_wait_front(CB_D, 1)
                src, idx = CB_D, 0
            c.tile_regs_acquire()
            c.mul_tiles_init(src, CB_RSTD)
            c.mul_tiles(src, CB_RSTD, idx, 0, 0)
            c.tile_regs_commit()
            if not rms:
                c.cb_pop_front(CB_D, 1)
            _pack_to(c, CB_T1 if gamma or beta else CB_Y)
            if gamma:
                _tile_pair(c, "mul", CB_T1, CB_GAMMA, CB_T2 if beta else CB_Y)
            if beta:
                _tile_pair(c, "add", CB_T2 if gamma else CB_T1, CB_BETA, CB_Y)
        c.cb_pop_front(cb_s, wt_n)
        if not rms:
            c.cb_pop_front(CB_MEAN, 1)
        c.cb_pop_front(CB_RSTD, 1)
    c.cb_pop_front(CB_ONES, 2)


def _drain(k: Any, cb: int, tile: int, dst: Any) -> None:
    k.cb_wait_front(cb, 1)
    k.noc_async_write_tile(tile, dst, k.get_read_ptr(cb))
    k.noc_async_writes_flushed()
    k.cb_pop_front(cb, 1)


def _writer(k: Any) -> None:
    row_start, rows = k.get_arg_val(4), k.get_arg_val(5)
    wt_n = k.get_arg_val(6)
    d = k.defines
    y = k.tensor_accessor("y")
    s = k.tensor_accessor("s") if "FUSE_PRE_ADD" in d else None
    stats = "WRITE_STATS" in d
    mean = k.tensor_accessor("mean") if stats and "RMSNORM" not in d else None
    rstd = k.tensor_accessor("rstd") if stats else None
    for row in range(row_start, row_start + rows):
        if s is not None:
            for wt in range(wt_n):
                _drain(k, CB_S_OUT, row * wt_n + wt, s)
        if mean is not None:
            _drain(k, CB_MEAN_OUT, row, mean)
        if rstd is not None:
            _drain(k, CB_RSTD_OUT, row, rstd)
        for wt in range(wt_n):
            _drain(k, CB_Y, row * wt_n + wt, y)
    k.noc_async_write_barrier()


# ---------------------------------------------------------------------------------------------------- the program
def rowwise_program(cfg: NormConfig, rows: int, max_cores: int = 8) -> Program:
    """The program normalizing an (``rows``, ``cfg.width``) tile-layout tensor, its tile rows split over up to
    ``max_cores`` cores of the first grid row. Buffers, in order: ``cfg.tensors`` (x [, residual] [, weight]
    [, bias], then y [, s] [, mean] [, rstd]); weight and bias are (1, W) tile tensors, the statistics (rows, 1)
    float32 tile tensors."""
    ht = max(1, -(-rows // TILE))
    cores = CoreRange((0, 0), (min(ht, max_cores, P150A.grid[0]) - 1, 0))
    wt = cfg.wt
    f32 = Format.FLOAT32
    s_fmt = cfg.out_fmt if cfg.fused else cfg.x_fmt

    def cb(index: int, fmt: Format, pages: int) -> CircularBuffer:
        return CircularBuffer(index, fmt, fmt.tile_bytes, pages, cores)

    cbs = [cb(CB_X, cfg.x_fmt, 2 if cfg.fused else wt), cb(CB_ONES, Format.BFLOAT16, 2), cb(CB_Y, cfg.out_fmt, 2),
           cb(CB_SQ, f32, wt), cb(CB_RSTD, f32, 1)]  # fmt: skip
    if cfg.fused:
        cbs += [cb(CB_RES, cfg.res_fmt, 2), cb(CB_S, s_fmt, wt), cb(CB_S_OUT, cfg.out_fmt, 2)]
    if not cfg.rms:
        cbs += [cb(CB_MEAN, f32, 1), cb(CB_D, f32, 2)]
    if cfg.stats:
        cbs += [cb(CB_RSTD_OUT, f32, 2)] + ([] if cfg.rms else [cb(CB_MEAN_OUT, f32, 2)])
    if cfg.gamma or cfg.beta:
        cbs.append(cb(CB_T1, f32, 2))
    if cfg.gamma and cfg.beta:
        cbs.append(cb(CB_T2, f32, 2))
    if cfg.gamma:
        cbs.append(cb(CB_GAMMA, cfg.gamma_fmt, 2))
    if cfg.beta:
        cbs.append(cb(CB_BETA, cfg.beta_fmt, 2))
    names = cfg.tensors

    inv_w, eps = f32_bits(1.0 / max(cfg.width, 1)), f32_bits(cfg.eps)

    def args(bufs: Sequence[Any], rt: Any) -> dict:
        addr = {n: b.address for n, b in zip(names, bufs)}
        split = split_work(ht, cores)
        reader = [addr["x"], addr.get("residual", 0), addr.get("weight", 0), addr.get("bias", 0)]
        writer = [addr["y"], addr.get("s", 0), addr.get("mean", 0), addr.get("rstd", 0)]
        return {"reader": {c: [*reader, s, n, wt, cfg.w_last] for c, s, n in split},
                "compute": {c: [n, wt, cfg.w_last, inv_w, eps] for c, s, n in split},
                "writer": {c: [*writer, s, n, wt] for c, s, n in split}}  # fmt: skip

    fmts = {"x": cfg.x_fmt, "residual": cfg.res_fmt, "weight": cfg.gamma_fmt, "bias": cfg.beta_fmt, "y": cfg.out_fmt,
            "s": cfg.out_fmt, "mean": Format.FLOAT32, "rstd": Format.FLOAT32}  # fmt: skip

    def accessors(which: Sequence[str]) -> list[int]:  # interleaved DRAM tensors, in the order of cfg.tensors
        return [a for n in names if n in which for a in tensor_accessor_args(fmts[n].tile_bytes)]

    tiles = ht * wt
    work = Work(matmul_tiles=(1 if cfg.rms else 2) * tiles,
                fpu_tiles=tiles * (2 + (0 if cfg.rms else 2) + cfg.fused + cfg.gamma + cfg.beta),
                sfpu_tiles=tiles + 4 * ht)  # fmt: skip
    ins, outs = ("x", "residual", "weight", "bias"), ("y", "s", "mean", "rstd")
    return Program(
        "ktt_rms_norm" if cfg.rms else "ktt_layer_norm",
        [Kernel("reader", SOURCES / "reader.cpp", cores, _reader, compile_time_args=accessors(ins),
                defines=cfg.defines),
         Kernel("compute", SOURCES / "compute.cpp", cores, _compute, defines=cfg.defines,
                math_fidelity=cfg.fidelity, fp32_dest_acc_en=True),
         Kernel("writer", SOURCES / "writer.cpp", cores, _writer, compile_time_args=accessors(outs),
                defines=cfg.defines)],
        cbs, runtime_args=args, tensors=names, work=work,
    )  # fmt: skip


def run_rowwise_program(
    device: Any,
    cfg: NormConfig,
    x: np.ndarray,
    residual: np.ndarray | None = None,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Run :func:`rowwise_program` on ``device`` over (R, W) host values (stored as ``cfg``'s formats say); return
    the downloaded outputs by name (statistics as (R,) float32)."""
    rows = x.shape[0]
    given = {"x": (x, cfg.x_fmt), "residual": (residual, cfg.res_fmt), "weight": (weight, cfg.gamma_fmt),
             "bias": (bias, cfg.beta_fmt)}  # fmt: skip
    shapes = {"y": ((rows, cfg.width), cfg.out_fmt), "s": ((rows, cfg.width), cfg.out_fmt),
              "mean": ((rows, 1), Format.FLOAT32), "rstd": ((rows, 1), Format.FLOAT32)}  # fmt: skip
    bufs = []
    for name in cfg.tensors:
        if name in given:
            arr, fmt = given[name]
            arr = np.asarray(arr, np.float32)
            bufs.append(device.upload(arr.reshape(1, -1) if name in ("weight", "bias") else arr, fmt))
        else:
            shape, fmt = shapes[name]
            bufs.append(device.allocate(shape=shape, fmt=fmt, layout="tile"))
    try:
        device.run_program(rowwise_program(cfg, rows), bufs)
        return {n: device.download(b).reshape(-1) if n in ("mean", "rstd") else device.download(b)
                for n, b in zip(cfg.tensors, bufs) if n not in given}  # fmt: skip
    finally:
        for b in bufs:
            device.free(b)


# ------------------------------------------------------------------------------------------- the vectorized model
def cut(t: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 ``t`` truncated to ``bits`` significant bits (as the unpacker and the multiplier see it)."""
    return (t.contiguous().view(torch.int32) & cardcore.bits_mask(bits)).view(torch.float32)


def cut_(t: torch.Tensor, bits: int) -> torch.Tensor:
    """:func:`cut` in place (``t`` contiguous float32); returns ``t``."""
    t.view(torch.int32).bitwise_and_(cardcore.bits_mask(bits))
    return t


def _part(t: torch.Tensor, operand: int, part: str) -> torch.Tensor:
    """The card core's ``part`` of source-register values ``t`` as ``operand``, with an fp32 DST (a SrcB value is
    whole as it is: its register keeps every TF32 bit)."""
    if part == cardcore.LOW:
        return _part(t, operand, cardcore.ALL) - cut(t, cardcore.slice_bits(operand, cardcore.HIGH))
    if part == cardcore.ALL and operand == cardcore.SRCB:
        return t
    return cut(t, cardcore.slice_bits(operand, part))


def fpu_mul_(a: torch.Tensor, b: torch.Tensor, fidelity: Fidelity) -> torch.Tensor:
    """:func:`fpu_mul` into ``a`` (contiguous float32, overwritten); returns the product."""
    if fidelity != Fidelity.HiFi4:
        return fpu_mul(a, b, fidelity)
    return cut_(a, cardcore.slice_bits(cardcore.SRCA, cardcore.ALL)).mul_(b)


def fpu_mul(a: torch.Tensor, b: torch.Tensor, fidelity: Fidelity) -> torch.Tensor:
    """``mul_tiles`` with an fp32 DST on TF32 source values, a in SrcA and b in SrcB: the card core's folded phases
    (``cardcore.FOLDED_PHASES``), each one exact product, summed."""
    out = None
    for pa, pb in cardcore.FOLDED_PHASES[fidelity.phases]:
        p = _part(a, cardcore.SRCA, pa) * _part(b, cardcore.SRCB, pb)
        out = p if out is None else out + p
    assert out is not None
    return out


def _store(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    return t if fmt is Format.FLOAT32 else torch.from_numpy(formats.round_bfloat16(t.numpy()))


def _source(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Values of a CB in ``fmt`` as the unpacker puts them in a source register (only fp32 loses bits)."""
    return cut(t, 11) if fmt is Format.FLOAT32 else t


def _row_mean(src: torch.Tensor, width: int, fidelity: Fidelity) -> torch.Tensor:
    """Pass 1 / 2's statistic: tile by tile ``src @ ones`` into an fp32 DST (each tile's sum exact, then added to
    DST with one fp32 rounding), then ``* fp32(1/W)`` on the SFPU. ``src`` holds source-register values."""
    rows = src.shape[0]
    wt = max(1, -(-width // TILE))
    srcb = src  # the data sits in SrcB, the ones in SrcA: phases that take only SrcB's high part keep just that
    if all(pb == cardcore.HIGH for _, pb in cardcore.FOLDED_PHASES[fidelity.phases]):
        srcb = cut(src, cardcore.slice_bits(cardcore.SRCB, cardcore.HIGH))
    if width % TILE:
        srcb = torch.nn.functional.pad(srcb, (0, wt * TILE - width))
    # exact per-tile sums (NumPy's float64 reduce converts on the fly, far faster than a float64 copy)
    partial = np.add.reduce(srcb.numpy().reshape(rows, wt, TILE), axis=-1, dtype=np.float64)
    dst = np.zeros(rows, dtype=np.float32)
    for t in range(wt):
        dst = (dst + partial[:, t]).astype(np.float32)
    return torch.from_numpy(dst) * np.float32(1.0 / max(width, 1))


def rowwise_model(x: np.ndarray, residual: np.ndarray | None, weight: np.ndarray | None, bias: np.ndarray | None,
                  cfg: NormConfig, round_output: bool = True) -> dict[str, np.ndarray]:  # fmt: skip
    """What :func:`rowwise_program` computes, for all rows at once: ``{"y", "s", "mean", "rstd"}`` (the ones the
    config asks for), y and s rounded to ``cfg.out_fmt`` (y left in fp32 with ``round_output=False``: the caller's
    store rounds it the same way), statistics (R,) float32. Inputs are (R, W) values as stored (``weight`` /
    ``bias`` (W,))."""
    fid = cfg.fidelity
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    out: dict[str, np.ndarray] = {}
    if residual is not None:
        r = torch.from_numpy(np.ascontiguousarray(residual, dtype=np.float32))
        s = _store(_source(xt, cfg.x_fmt) + _source(r, cfg.res_fmt), cfg.out_fmt)
        out["s"] = s.numpy()
        ss = _source(s, cfg.out_fmt)
    else:
        ss = _source(xt, cfg.x_fmt)
    if cfg.rms:
        d = ss
    else:
        mean = _row_mean(ss, cfg.width, fid)
        d = ss - cut(mean, 11)[:, None]
        out["mean"] = mean.numpy()
    var = _row_mean(cut_(d * d, 11), cfg.width, fid)
    rstd = (1.0 / torch.sqrt((var + np.float32(cfg.eps)).double())).float()
    out["rstd"] = rstd.numpy()
    # in place from here on (d is dead after this product; a memory-bound model pays for every new array)
    y = d.clone() if cfg.rms else d  # RMS norm's d is s itself (the caller's array, or the s output)
    y = fpu_mul_(y, cut(rstd, 11)[:, None], fid)  # SrcA keeps 10 bits: d's TF32 cut is implied
    if weight is not None:
        g = _source(torch.from_numpy(np.asarray(weight, np.float32).reshape(1, -1)), cfg.gamma_fmt)
        y = fpu_mul_(y, g, fid)
    if bias is not None:
        y = cut_(y, 11).add_(_source(torch.from_numpy(np.asarray(bias, np.float32).reshape(1, -1)), cfg.beta_fmt))
    out["y"] = (_store(y, cfg.out_fmt) if round_output else y).numpy()
    if not cfg.stats:
        out.pop("mean", None)
        out.pop("rstd")
    return out


def max_width(x_fmt: Format, fused: bool, out_fmt: Format, l1_bytes: int) -> int:
    """The widest row whose resident CBs (s row + fp32 squares) fit ``l1_bytes`` (ignoring the small CBs)."""
    per_tile = (out_fmt if fused else x_fmt).tile_bytes + Format.FLOAT32.tile_bytes
    return math.floor(l1_bytes / per_tile) * TILE


__all__ = ["NormConfig", "cut", "fpu_mul", "max_width", "rowwise_model", "rowwise_program", "run_rowwise_program"]
