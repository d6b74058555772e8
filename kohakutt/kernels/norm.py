"""The norm family: the simulator's models of TT-NN 0.81.1's norm kernels (provider "ttnn"), Kohaku-TT's layer /
RMS norm program (provider "ktt", run when asked for by name: a card has no launcher for it yet), the host's
computations with fp32 statistics (provider "host", which every norm call takes by default: TT-NN's kernels square
unscaled values), the real-card TT-NN calls and the cost estimates.

What the "ttnn" models follow (the kernel sources TT-NN 0.81.1 ships, ``ttnn/cpp/ttnn/operations/normalization``
and ``.../moreh``):

- layer_norm / rms_norm / add_*: ``layernorm.cpp``. Row sums by ``reduce_tile`` against a 1.0 scaler (the data in
  SrcB, as the row reduce swaps operands), the last tile with a second scaler whose padded columns are 0, so padding
  never counts; the sum accumulates tile by tile in DST and is then scaled by fp32 ``1/W`` on the SFPU. The eps tile
  holds eps truncated to bfloat16 (``generate_bcast_col_scalar`` keeps the top 16 bits). Then ``x - E[x]``, its
  square and the products on the FPU, ``rsqrt`` exact; every intermediate packed in the intermediate format (fp32
  with an fp32 DST, else bfloat16). layer_norm defaults to an fp32 DST, rms_norm to a 16-bit one. The fused add
  keeps ``x + residual`` in the intermediate format; the ``s`` output is a separate ``ttnn.add`` (its rounding to
  the output dtype). ``ttnn.layer_norm`` returns no statistics: the ones modelled are the kernel's own E[x] and
  rstd tiles, which the card path recomputes in fp32 with ``ttnn.mean`` / ``ttnn.rsqrt``.
- group_norm: ``ttnn.moreh_group_norm`` (it takes (N, C, H, W) as is and returns mean and rstd; ``ttnn.group_norm``
  wants channels-last input masks and returns no statistics). HiFi4, 16-bit DST, intermediates in the input's
  format: the group's tiles are added one by one (each sum packed), padding masked to 0, then one REDUCE_SCALAR
  with the scaler ``1/sqrt(n)`` (truncated to bfloat16 for a bfloat16 input) applied twice; the same for the
  squared deviations; ``rsqrt`` exact; the affine on the FPU.
- batch_norm: TT-NN's composite: the batch mean by ``ttnn.mean`` over H, W, then N, ``var = mean(x^2) - mean^2``,
  each stored in the input dtype (x viewed as (N, C, H, W)); the normalize chain (sub, rsqrt of var + eps, mul, mul,
  add) in DST; the running update ``(1 - m) * old + m * batch`` with the biased batch var, as its
  running_statistics kernel does.
- backward: ``moreh_layer_norm_backward`` / ``moreh_group_norm_backward`` (HiFi4, 16-bit DST by default,
  intermediates in the input's format); rms_norm and batch_norm have no TT-NN backward, so theirs are composed of
  ``ttnn.multiply`` / ``ttnn.subtract`` / ``ttnn.mean`` / ``ttnn.sum`` (each output stored in the input dtype, the
  means and sums as the reduce family models TT-NN's).

Provider "ktt": layer_norm, rms_norm and the fused add variants are Kohaku-TT's Metalium program
(:mod:`kohakutt.kernels.programs.norm`; the fast path here runs its vectorized model, bit-exact with the program);
rows wider than its L1 budget go to TT-NN's kernel, as they would on a card. In that program float32 data enters
the FPU as TF32 (the fused add too), so its results carry about 2^-10 relative error (see the program's module
docstring): it takes float32 only under ``fp32_reduce="tf32"``, else :func:`sfpu_rowwise`. Provider "host": the row
norms are :func:`sfpu_rowwise` (every step a float32 op, the statistics float32 sums, one rounding when stored); the
other ops compute in fp32 with float64-accumulated sums (two-pass statistics) and round once to the output dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import Format
from kohakutt.ir.defs.norm import normalized, param_names
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics, replace
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels import cost
from kohakutt.kernels.programs.norm import NormConfig, max_width, rowwise_model
from kohakutt.kernels.reduce import (
    TILE,
    Reduction,
    as_dtype,
    fidelity_of,
    fp32_acc_of,
    kernel_config,
    pow2_exponent,
    scaled,
    scaler_tile,
    storage,
    ttnn_sum,
)
from kohakutt.kernels.registry import SimCall, declare, host, sim, ttnn, unscaled_squares

TTNN_NAMES = (
    "layer_norm", "rms_norm", "moreh_group_norm", "batch_norm", "moreh_layer_norm_backward",
    "moreh_group_norm_backward", "add", "subtract", "multiply", "mean", "sum", "rsqrt", "reshape", "typecast",
    "zeros_like", "zeros", "clone", "TILE_LAYOUT", "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32",
    "uint16", "uint8", "init_device_compute_kernel_config", "MathFidelity.LoFi", "MathFidelity.HiFi2",
    "MathFidelity.HiFi3", "MathFidelity.HiFi4",
)  # fmt: skip

# The keywords this module passes to TT-NN by name (checked with the names by tests/hal/test_ttnn_contract.py).
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "layer_norm": ("epsilon", "weight", "bias", "residual_input_tensor", "compute_kernel_config"),
    "rms_norm": ("epsilon", "weight", "bias", "residual_input_tensor", "compute_kernel_config"),
    "moreh_group_norm": ("eps", "gamma", "beta", "are_required_outputs", "compute_kernel_config"),
    "batch_norm": ("running_mean", "running_var", "training", "eps", "momentum", "weight", "bias",
                   "compute_kernel_config"),
    "moreh_layer_norm_backward": ("gamma", "input_grad", "gamma_grad", "beta_grad", "compute_kernel_config"),
    "moreh_group_norm_backward": ("are_required_outputs", "gamma", "compute_kernel_config"),
    "mean": ("dim", "keepdim", "compute_kernel_config"),
    "sum": ("dim", "keepdim", "compute_kernel_config"),
    "init_device_compute_kernel_config": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc"),
}  # fmt: skip

F32 = np.float32
ROW_L1 = P150A.l1_usable - 64 * 1024  # L1 the program's resident row may take (the small CBs keep the rest)


# ------------------------------------------------------------------------------------------------------- operands
def _params(call: SimCall, n_in: int, allowed: str = "wb") -> dict[str, np.ndarray]:
    names = param_names(call.attrs["params"], len(call.inputs) - n_in, call.op, allowed)
    return {c: np.asarray(v, F32) for c, v in zip(names, call.inputs[n_in:])}


def _rows_of(call: SimCall) -> tuple[int, int, int]:
    """(axis, R, W): the op's input seen as R rows of W normalized values."""
    shape = call.in_specs[0].shape
    axis = normalized(shape, call.attrs["normalized_shape"], call.op)
    return axis, math.prod(shape[:axis]), math.prod(shape[axis:])


def _eps(call: SimCall) -> float:
    """eps, or the input dtype's machine epsilon when None (RMS norm's PyTorch default)."""
    eps = call.attrs["eps"]
    if eps is not None:
        return float(eps)
    return float(np.finfo(np.float32).eps) if call.in_specs[0].dtype is DType.FLOAT32 else 2.0**-7


def _out_fmt(spec: TensorSpec) -> str:
    return storage(spec.dtype)


def _empty(spec: TensorSpec, fill: float = 0.0) -> np.ndarray:
    return np.full(spec.shape, fill, F32)


def _dst(v: np.ndarray, acc: bool) -> np.ndarray:
    """A value written into DST: rounded to bfloat16 unless the DST is fp32."""
    return np.asarray(v, F32) if acc else cm.round_to(v, "bfloat16")


def _bf16_running(partial: np.ndarray) -> np.ndarray:
    """Fold (..., T) partial sums in order into a bfloat16 DST (rounded after every addition)."""
    acc = torch.zeros(partial.shape[:-1], dtype=torch.bfloat16)
    for t in range(partial.shape[-1]):
        acc = (acc.float() + torch.from_numpy(np.ascontiguousarray(partial[..., t]))).bfloat16()
    return acc.float().numpy()


# ------------------------------------------------------------------------------------ TT-NN: layer / RMS norm
def _row_sum_ttnn(v: np.ndarray, acc: bool, fid: Fidelity) -> np.ndarray:
    """``reduce_tile`` row sums of (R, W) ``v`` against 1.0 (the data in SrcB), tile by tile into DST: (R,)."""
    rows, width = v.shape
    pairs = cm.fidelity_operands(F32(1.0), v, fid, op="eltwise", fp32_acc=acc)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = pairs[0][0] * pairs[0][1]
        for a, b in pairs[1:]:
            scaled = scaled + a * b
        wt = max(1, -(-width // TILE))
        padded = np.zeros((rows, wt * TILE), F32)
        padded[:, :width] = scaled
        partial = padded.reshape(rows, wt, TILE).sum(axis=-1, dtype=F32)
        return partial.sum(axis=-1, dtype=F32) if acc else _bf16_running(partial)


def ttnn_rowwise(call: SimCall, rms: bool, fused: bool) -> list[np.ndarray]:
    """ttnn.layer_norm / ttnn.rms_norm (with ``residual_input_tensor`` when fused) as the card computes them."""
    _, rows, width = _rows_of(call)
    x = np.asarray(call.inputs[0], F32)
    p = _params(call, 2 if fused else 1)
    outs = call.out_specs
    if x.size == 0 or width == 0:
        return [_empty(s, 0.0 if i < 1 + fused else np.nan) for i, s in enumerate(outs)]
    acc = fp32_acc_of(call.numerics, default=not rms)
    fid = fidelity_of(call.numerics)
    im = "float32" if acc else "bfloat16"
    out_fmt = _out_fmt(outs[0])
    inv = F32(1.0 / width)
    eps = scaler_tile(_eps(call), "bfloat16")
    xv = x.reshape(rows, width)
    result: list[np.ndarray] = []
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if fused:
            r = np.asarray(call.inputs[1], F32).reshape(rows, width)
            s = cm.round_to(cm.add(xv, r, fp32_acc=acc), im)
            s_out = cm.round_to(xv + r, out_fmt)  # on a card the next residual comes from ttnn.add
        else:
            s = xv
        if rms:
            xmm = s
        else:
            mean = cm.round_to(_dst(_row_sum_ttnn(s, acc, fid) * inv, acc), im)
            xmm = cm.round_to(cm.sub(s, mean[:, None], fp32_acc=acc), im)
        sq = cm.round_to(cm.multiply(xmm, xmm, fidelity=fid, fp32_acc=acc), im)
        var = cm.round_to(_dst(_row_sum_ttnn(sq, acc, fid) * inv, acc), im)
        rstd = cm.round_to(_dst(cm.sfpu("rsqrt", cm.add(var, eps, fp32_acc=acc)), acc), im)
        y = cm.multiply(xmm, rstd[:, None], fidelity=fid, fp32_acc=acc)
        if "w" in p:
            y = cm.multiply(cm.round_to(y, im), p["w"].reshape(1, width), fidelity=fid, fp32_acc=acc)
        if "b" in p:
            y = cm.add(cm.round_to(y, im), p["b"].reshape(1, width), fp32_acc=acc)
    result.append(cm.round_to(y, out_fmt).reshape(outs[0].shape))
    if fused:
        result.append(s_out.reshape(outs[1].shape))
    stats = [] if rms else [mean]
    stats.append(rstd)
    for spec, v in zip(outs[len(result) :], stats):
        result.append(v.reshape(spec.shape) if spec.numel else _empty(spec))
    return result


# --------------------------------------------------------------------------------------- Kohaku-TT: the program
def norm_config(call: SimCall, rms: bool, fused: bool) -> NormConfig:
    """The program configuration for a call (formats from the operands' dtypes, fidelity from the scope)."""
    _, _, width = _rows_of(call)
    names = param_names(call.attrs["params"], len(call.inputs) - (2 if fused else 1), call.op)
    specs = call.in_specs
    fmts = [s.dtype.format for s in specs]
    p = dict(zip(names, fmts[2 if fused else 1 :]))
    out = Format.FLOAT32 if _out_fmt(call.out_specs[0]) == "float32" else Format.BFLOAT16
    return NormConfig(width, _eps(call), rms, fused, "w" in p, "b" in p, bool(call.attrs["stats"]),
                      fidelity_of(call.numerics), fmts[0], fmts[1] if fused else fmts[0], p.get("w", fmts[0]),
                      p.get("b", fmts[0]), out)  # fmt: skip


def sfpu_rowwise(call: SimCall, rms: bool, fused: bool) -> list[np.ndarray]:
    """The own layer / RMS norm for float32 data: ``s = x (+ residual)`` (stored in the output dtype), the mean and
    the mean square of ``s - mean`` as float32 SFPU sums times fp32 ``1/W``, ``rstd = rsqrt(var + eps)`` correctly
    rounded, then ``(s - mean) * rstd * w + b`` as float32 SFPU ops; y left in fp32 for the store's rounding."""
    _, rows, width = _rows_of(call)
    outs = call.out_specs
    x = np.asarray(call.inputs[0], F32)
    if x.size == 0 or width == 0:
        return [_empty(s, 0.0 if i < 1 + fused else np.nan) for i, s in enumerate(outs)]
    p = _params(call, 2 if fused else 1)
    s = x.reshape(rows, width)
    result: dict[str, np.ndarray] = {}
    with np.errstate(over="ignore", invalid="ignore"):
        if fused:
            s = cm.round_to(s + np.asarray(call.inputs[1], F32).reshape(rows, width), _out_fmt(outs[1]))
            result["s"] = s
        inv_w = F32(1.0 / width)
        # a row whose largest |s| passes 2^60 would overflow d * d (rstd 0, y 0): it is scaled by 2^-e first, eps
        # by 2^-2e (not below float32's smallest normal, so a constant row still gives 0), and the statistics back
        e = pow2_exponent(np.max(np.abs(s), axis=1), 2.0**60)
        e = np.where(e > 0, e, 0)
        ss = scaled(s, -e[:, None])
        eps = np.where(e > 0, np.maximum(scaled(np.full(rows, _eps(call), F32), -2 * e), np.finfo(F32).tiny),
                       F32(_eps(call)))  # fmt: skip
        if rms:
            d = ss
        else:
            mean = np.sum(ss, axis=1, dtype=F32) * inv_w
            d = ss - mean[:, None]
            result["mean"] = scaled(mean, e)
        var = np.sum(d * d, axis=1, dtype=F32) * inv_w
        rstd = cm.sfpu("rsqrt", var + eps)
        result["rstd"] = scaled(rstd, -e)
        y = d * rstd[:, None]
        if "w" in p:
            y = y * p["w"].reshape(1, width)
        if "b" in p:
            y = y + p["b"].reshape(1, width)
    result["y"] = y
    names = ["y"] + (["s"] if fused else []) + ([] if rms else ["mean"]) + ["rstd"]
    return [result[n].reshape(sp.shape) if sp.numel else _empty(sp) for n, sp in zip(names, outs)]


def ktt_rowwise(call: SimCall, rms: bool, fused: bool) -> list[np.ndarray]:
    """Kohaku-TT's layer / RMS norm: float32 data on the SFPU (:func:`sfpu_rowwise`) unless ``fp32_reduce="tf32"``,
    else the program (its vectorized model): fp32 statistics, one rounding."""
    if call.numerics.exact_sums and any(sp.dtype is DType.FLOAT32 for sp in (*call.in_specs[: 1 + fused],
                                                                             call.out_specs[0])):  # fmt: skip
        return sfpu_rowwise(call, rms, fused)
    _, rows, width = _rows_of(call)
    cfg = norm_config(call, rms, fused)
    if width > max_width(cfg.x_fmt, fused, cfg.out_fmt, ROW_L1):
        return ttnn_rowwise(call, rms, fused)  # the row does not fit the program's L1: TT-NN's kernel runs
    outs = call.out_specs
    x = np.asarray(call.inputs[0], F32)
    if x.size == 0 or width == 0:
        return [_empty(s, 0.0 if i < 1 + fused else np.nan) for i, s in enumerate(outs)]
    p = _params(call, 2 if fused else 1)
    res = rowwise_model(x.reshape(rows, width), np.asarray(call.inputs[1], F32).reshape(rows, width) if fused else None,
                        p.get("w", None), p.get("b", None), cfg, round_output=False)  # fmt: skip
    names = ["y"] + (["s"] if fused else []) + ([] if rms else ["mean"]) + ["rstd"]
    return [res[n].reshape(s.shape) if n in res else _empty(s) for n, s in zip(names, outs)]


# ------------------------------------------------------------------------------- group norm: TT-NN (moreh) / ktt
def _nchw(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """(N, C, H, W): the card's 4-D view of (N, C, *) (spatial dims before the last folded into H)."""
    spatial = tuple(shape[2:])
    h = math.prod(spatial[:-1]) if len(spatial) > 1 else 1
    return shape[0], shape[1], h, spatial[-1] if spatial else 1


def _group_tiles(x: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(tiles (N*G, T, 32, 32), valid mask of the same shape): each group's channels' H x W planes in tiles, in
    the order the moreh kernel reads them (channel, tile row, tile column); padding is 0 and masked."""
    n, c, h, w = x.shape
    ht, wt = -(-h // TILE), -(-w // TILE)
    pad = np.zeros((n, c, ht * TILE, wt * TILE), F32)
    pad[:, :, :h, :w] = x
    mask = np.zeros((1, 1, ht * TILE, wt * TILE), bool)
    mask[..., :h, :w] = True

    def tiles(a: np.ndarray) -> np.ndarray:
        a = a.reshape(a.shape[0], a.shape[1], ht, TILE, wt, TILE).transpose(0, 1, 2, 4, 3, 5)
        return a.reshape(a.shape[0], a.shape[1] * ht * wt, TILE, TILE)

    t = tiles(pad.reshape(n, groups, c // groups * ht * TILE, wt * TILE).reshape(n * groups, c // groups,
                                                                                   ht * TILE, wt * TILE))  # fmt: skip
    m = np.broadcast_to(tiles(np.broadcast_to(mask, (1, c // groups, ht * TILE, wt * TILE))), t.shape)
    return t, m


def _untile(t: np.ndarray, shape4: tuple[int, int, int, int], groups: int) -> np.ndarray:
    n, c, h, w = shape4
    ht, wt = -(-h // TILE), -(-w // TILE)
    a = t.reshape(n * groups, c // groups, ht, wt, TILE, TILE).transpose(0, 1, 2, 4, 3, 5)
    return a.reshape(n, c, ht * TILE, wt * TILE)[:, :, :h, :w]


def _moreh_mean(tiles: np.ndarray, im: str, acc: bool, fid: Fidelity, scaler: np.float32) -> np.ndarray:
    """The moreh kernels' group statistic: tiles added one by one (each sum packed in ``im``), then REDUCE_SCALAR
    with ``scaler`` applied twice. ``tiles`` (G, T, 32, 32) -> (G,)."""
    total = tiles[:, 0]
    for t in range(1, tiles.shape[1]):
        total = cm.round_to(cm.add(total, tiles[:, t], fp32_acc=acc), im)
    red = cm.reduce_sum(total, (-2, -1), acc, scaler=scaler, fidelity=fid)
    return cm.round_to(_dst(cm.multiply(_dst(red, acc), scaler, fidelity=fid, fp32_acc=acc), acc), im)


def ttnn_group_norm(call: SimCall) -> list[np.ndarray]:
    """ttnn.moreh_group_norm as the card computes it (see the module docstring)."""
    x = np.asarray(call.inputs[0], F32)
    groups = int(call.attrs["num_groups"])
    p = _params(call, 1)
    outs = call.out_specs
    if x.size == 0:
        return [_empty(outs[0]), _empty(outs[1], np.nan), _empty(outs[2], np.nan)]
    shape4 = _nchw(x.shape)
    n, c, h, w = shape4
    acc, fid = fp32_acc_of(call.numerics, default=False), fidelity_of(call.numerics)
    im = storage(call.in_specs[0].dtype)
    f = F32(c / groups) * (F32(h) / F32(TILE)) * (F32(w) / F32(TILE))
    scaler = scaler_tile(F32(1.0) / (F32(TILE) * np.sqrt(f, dtype=F32)), im)
    eps = scaler_tile(float(call.attrs["eps"]), im)
    tiles, mask = _group_tiles(x.reshape(shape4), groups)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mean = _moreh_mean(tiles, im, acc, fid, scaler)
        xmm = np.where(mask, cm.round_to(cm.sub(tiles, mean[:, None, None, None], fp32_acc=acc), im), F32(0))
        sq = cm.round_to(cm.multiply(xmm, xmm, fidelity=fid, fp32_acc=acc), im)
        var = _moreh_mean(sq, im, acc, fid, scaler)
        rstd = cm.round_to(_dst(cm.sfpu("rsqrt", cm.add(var, eps, fp32_acc=acc)), acc), im)
        y = cm.round_to(cm.multiply(xmm, rstd[:, None, None, None], fidelity=fid, fp32_acc=acc), im)
        y = _untile(y, shape4, groups)
        chan = (1, c, 1, 1)
        if "w" in p:
            y = cm.round_to(cm.multiply(y, p["w"].reshape(chan), fidelity=fid, fp32_acc=acc), im)
        if "b" in p:
            y = cm.add(y, p["b"].reshape(chan), fp32_acc=acc)
    y = cm.round_to(y, _out_fmt(outs[0])).reshape(outs[0].shape)
    return [y, mean.reshape(n, groups), rstd.reshape(n, groups)]


def host_group_norm(call: SimCall) -> list[np.ndarray]:
    """Two-pass fp32 statistics per group (float64 sums), the affine in fp32, one rounding."""
    x = np.asarray(call.inputs[0], F32)
    groups = int(call.attrs["num_groups"])
    p = _params(call, 1)
    outs = call.out_specs
    if x.size == 0:
        return [_empty(outs[0]), _empty(outs[1], np.nan), _empty(outs[2], np.nan)]
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1).astype(np.float64)
    mean = g.mean(axis=-1).astype(F32)
    var = ((g - mean[..., None]) ** 2).mean(axis=-1)  # kept wide: a group of 1e20s has a var beyond float32
    rstd = (1.0 / np.sqrt(var + F32(call.attrs["eps"]))).astype(F32)
    y = ((x.reshape(n, groups, -1) - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    chan = (1, c) + (1,) * (x.ndim - 2)
    if "w" in p:
        y = y * p["w"].reshape(chan)
    if "b" in p:
        y = y + p["b"].reshape(chan)
    return [cm.round_to(y, _out_fmt(outs[0])), mean, rstd]


# ------------------------------------------------------------------------------------------------- batch norm
def _channel_mean_ttnn(v: np.ndarray, num: Numerics, dt: DType) -> np.ndarray:
    """``ttnn.mean`` over H and W, then over N, of an (N, C, H, W) tensor, each stored in ``dt``: (C,)."""
    n, c = v.shape[:2]
    hw = Reduction(v, (2, 3), TensorSpec((n, c, 1, 1), dt), dt)
    m = cm.round_to(ttnn_sum(hw, num, scale=1.0 / (v.shape[2] * v.shape[3]), op="mean"), storage(dt))
    over_n = Reduction(m, (0,), TensorSpec((1, c, 1, 1), dt), dt)
    return cm.round_to(ttnn_sum(over_n, num, scale=1.0 / n, op="mean"), storage(dt)).reshape(c)


def _running(call: SimCall, p: dict[str, np.ndarray], mean: np.ndarray, var: np.ndarray, unbiased: float,
             fmt: str, acc: bool | None = None, fid: Fidelity = Fidelity.HiFi4) -> list[np.ndarray]:  # fmt: skip
    """The new running statistics (empty without running tensors); ``acc`` None: PyTorch's update in float64."""
    outs = call.out_specs
    if "m" not in p or not call.attrs["training"]:
        return [_empty(outs[3]), _empty(outs[4])]
    mom = float(call.attrs["momentum"])
    new = []
    for old, batch in ((p["m"], mean), (p["v"], var * unbiased)):
        if acc is None:
            new.append(cm.round_to((1 - mom) * old.astype(np.float64) + mom * batch.astype(np.float64), fmt))
            continue
        m = scaler_tile(mom, fmt)
        keep = _dst(cm.sub(F32(1.0), m, fp32_acc=acc), acc)
        a = cm.multiply(keep, old, fidelity=fid, fp32_acc=acc)
        b = cm.multiply(m, batch, fidelity=fid, fp32_acc=acc)
        new.append(cm.round_to(cm.add(a, b, fp32_acc=acc), fmt))
    return new


def ttnn_batch_norm(call: SimCall) -> list[np.ndarray]:
    """TT-NN's batch_norm composite (training) or kernel (evaluation) as the card computes them."""
    x = np.asarray(call.inputs[0], F32)
    p = _params(call, 1, "wbmv")
    outs = call.out_specs
    dt = call.in_specs[0].dtype
    fmt = storage(dt)
    acc = fp32_acc_of(call.numerics, default=dt is DType.FLOAT32)
    fid = fidelity_of(call.numerics)
    num = replace(call.numerics, fidelity=fid, fp32_acc=acc)
    shape4 = _nchw(x.shape)
    x4 = x.reshape(shape4)
    c = shape4[1]
    training = bool(call.attrs["training"])
    if x.size == 0:
        return [_empty(outs[0])] + [_empty(s, np.nan) for s in outs[1:3]] + [_empty(outs[3]), _empty(outs[4])]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if training:
            mean = _channel_mean_ttnn(x4, num, dt)
            ex2 = _channel_mean_ttnn(cm.round_to(cm.multiply(x4, x4, fidelity=fid, fp32_acc=acc), fmt), num, dt)
            var = cm.round_to(cm.sub(ex2, cm.round_to(cm.multiply(mean, mean, fidelity=fid, fp32_acc=acc), fmt),
                                     fp32_acc=acc), fmt)  # fmt: skip
        else:
            mean, var = p["m"], p["v"]
        eps = scaler_tile(float(call.attrs["eps"]), fmt)
        den = cm.round_to(_dst(cm.sfpu("rsqrt", cm.add(var, eps, fp32_acc=acc)), acc), fmt)
        chan = (1, c, 1, 1)
        y = _dst(cm.sub(x4, mean.reshape(chan), fp32_acc=acc), acc)
        y = _dst(cm.multiply(y, den.reshape(chan), fidelity=fid, fp32_acc=acc), acc)
        if "w" in p:
            y = _dst(cm.multiply(y, p["w"].reshape(chan), fidelity=fid, fp32_acc=acc), acc)
        if "b" in p:
            y = cm.add(y, p["b"].reshape(chan), fp32_acc=acc)
    y = cm.round_to(y, _out_fmt(outs[0])).reshape(outs[0].shape)
    if not training:
        return [y, _empty(outs[1]), _empty(outs[2]), _empty(outs[3]), _empty(outs[4])]
    run_fmt = storage(outs[3].dtype) if outs[3].numel else "float32"
    return [y, mean.astype(F32), den.astype(F32), *_running(call, p, mean, var, 1.0, run_fmt, acc, fid)]


def host_batch_norm(call: SimCall) -> list[np.ndarray]:
    """Two-pass fp32 batch statistics (float64 sums), PyTorch's running update (unbiased var), one rounding."""
    x = np.asarray(call.inputs[0], F32)
    p = _params(call, 1, "wbmv")
    outs = call.out_specs
    if x.size == 0:
        return [_empty(outs[0])] + [_empty(s, np.nan) for s in outs[1:3]] + [_empty(outs[3]), _empty(outs[4])]
    c = x.shape[1]
    chan = (1, c) + (1,) * (x.ndim - 2)
    axes = (0, *range(2, x.ndim))
    count = x.size // c
    eps = float(F32(call.attrs["eps"]))
    if call.attrs["training"]:
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=axes).astype(F32)
        var64 = ((x64 - mean.reshape(chan)) ** 2).mean(axis=axes)  # wide: 1e20s have a var beyond float32
        with np.errstate(over="ignore"):
            var = var64.astype(F32)
    else:
        mean, var = p["m"], p["v"]
        var64 = var.astype(np.float64)
    invstd = (1.0 / np.sqrt(var64 + eps)).astype(F32)
    y = (x - mean.reshape(chan)) * invstd.reshape(chan)
    if "w" in p:
        y = y * p["w"].reshape(chan)
    if "b" in p:
        y = y + p["b"].reshape(chan)
    y = cm.round_to(y, _out_fmt(outs[0]))
    if not call.attrs["training"]:
        return [y, _empty(outs[1]), _empty(outs[2]), _empty(outs[3]), _empty(outs[4])]
    run_fmt = storage(outs[3].dtype) if outs[3].numel else "float32"
    unbiased = count / (count - 1) if count > 1 else math.inf
    return [y, mean, invstd, *_running(call, p, mean, var, unbiased, run_fmt)]


# ---------------------------------------------------------------------------------------------------- backward
def _masked_outputs(call: SimCall, values: Sequence[Callable[[], np.ndarray]]) -> list[np.ndarray]:
    """Each output computed only when its output_mask entry is set (empty otherwise), rounded to its dtype."""
    out = []
    for spec, fn in zip(call.out_specs, values):
        out.append(cm.round_to(fn(), _out_fmt(spec)).reshape(spec.shape) if spec.numel else _empty(spec))
    return out


def _row_backward_inputs(call: SimCall, n_stats: int) -> tuple[np.ndarray, ...]:
    _, rows, width = _rows_of(call)
    g = np.asarray(call.inputs[0], F32).reshape(rows, width)
    x = np.asarray(call.inputs[1], F32).reshape(rows, width)
    stats = [np.asarray(s, F32).reshape(rows, 1) for s in call.inputs[2 : 2 + n_stats]]
    return (g, x, *stats)


def host_row_backward(call: SimCall, rms: bool) -> list[np.ndarray]:
    """grad of layer / RMS norm: fp32 element-wise, float64-accumulated sums rounded to fp32."""
    g, x, *stats = _row_backward_inputs(call, 1 if rms else 2)
    rstd = stats[-1]
    p = _params(call, 4 if not rms else 3)
    width = x.shape[1]
    xhat = x * rstd if rms else (x - stats[0]) * rstd
    gw = g * p["w"].reshape(1, -1) if "w" in p else g

    def row_mean(v: np.ndarray) -> np.ndarray:
        return (v.astype(np.float64).sum(axis=1, keepdims=True) / max(width, 1)).astype(F32)

    def grad_x() -> np.ndarray:
        inner = gw - xhat * row_mean(gw * xhat)
        return rstd * (inner if rms else inner - row_mean(gw))

    def col_sum(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float64).sum(axis=0).astype(F32)

    return _masked_outputs(call, [grad_x, lambda: col_sum(g * xhat), lambda: col_sum(g)])


def ttnn_layer_norm_backward(call: SimCall) -> list[np.ndarray]:
    """ttnn.moreh_layer_norm_backward: each step packed in the input's format, sums by the reduce LLK."""
    g, x, mean, rstd = _row_backward_inputs(call, 2)
    p = _params(call, 4)
    acc, fid = fp32_acc_of(call.numerics, default=False), fidelity_of(call.numerics)
    im = storage(call.in_specs[1].dtype)
    width = x.shape[1]
    inv = scaler_tile(1.0 / max(width, 1), im)

    def st(v: np.ndarray) -> np.ndarray:
        return cm.round_to(v, im)

    def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return st(cm.multiply(a, b, fidelity=fid, fp32_acc=acc))

    def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return st(cm.sub(a, b, fp32_acc=acc))

    with np.errstate(invalid="ignore", over="ignore"):
        xhat = mul(sub(x, mean), rstd)
        gw = mul(g, p["w"].reshape(1, -1)) if "w" in p else g

        def grad_x() -> np.ndarray:
            mg = st(cm.reduce_sum(gw, 1, acc, scaler=inv, fidelity=fid, keepdims=True))
            mgx = st(cm.reduce_sum(mul(gw, xhat), 1, acc, scaler=inv, fidelity=fid, keepdims=True))
            return cm.multiply(sub(sub(gw, mg), mul(xhat, mgx)), rstd, fidelity=fid, fp32_acc=acc)

        return _masked_outputs(call, [grad_x, lambda: cm.reduce_sum(mul(g, xhat), 0, acc, fidelity=fid),
                                      lambda: cm.reduce_sum(g, 0, acc, fidelity=fid)])  # fmt: skip


def _ttnn_reduce(v: np.ndarray, dims: tuple[int, ...], dt: DType, num: Numerics, mean: bool) -> np.ndarray:
    """ttnn.sum / ttnn.mean over ``dims`` (keepdims) as the reduce family models them, stored in ``dt``."""
    out = tuple(1 if d in dims else s for d, s in enumerate(v.shape))
    r = Reduction(v, dims, TensorSpec(out, dt), dt)
    scale = 1.0 / max(r.count, 1) if mean else 1.0
    return cm.round_to(ttnn_sum(r, num, scale=scale, op="mean" if mean else "sum"), storage(dt))


def ttnn_rms_norm_backward(call: SimCall) -> list[np.ndarray]:
    """rms_norm's backward composed of TT-NN ops (TT-NN has no kernel for it), each output stored in the input
    dtype: xhat = x * rstd, g = grad * w, grad_x = (g - xhat * mean(g * xhat)) * rstd."""
    g, x, rstd = _row_backward_inputs(call, 1)
    p = _params(call, 3)
    dt = call.in_specs[1].dtype
    fmt = storage(dt)
    acc, fid = fp32_acc_of(call.numerics, default=dt is DType.FLOAT32), fidelity_of(call.numerics)
    num = replace(call.numerics, fidelity=fid, fp32_acc=acc)

    def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cm.round_to(cm.multiply(a, b, fidelity=fid, fp32_acc=acc), fmt)

    with np.errstate(invalid="ignore", over="ignore"):
        xhat = mul(x, rstd)
        gw = mul(g, p["w"].reshape(1, -1)) if "w" in p else g

        def grad_x() -> np.ndarray:
            m = _ttnn_reduce(mul(gw, xhat), (1,), dt, num, mean=True)
            return mul(cm.round_to(cm.sub(gw, mul(xhat, m), fp32_acc=acc), fmt), rstd)

        return _masked_outputs(call, [grad_x, lambda: _ttnn_reduce(mul(g, xhat), (0,), dt, num, mean=False),
                                      lambda: _ttnn_reduce(g, (0,), dt, num, mean=False)])  # fmt: skip


def _group_backward_inputs(call: SimCall) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    groups = int(call.attrs["num_groups"])
    g, x = (np.asarray(a, F32) for a in call.inputs[:2])
    n = x.shape[0]
    mean, rstd = (np.asarray(a, F32).reshape(n, groups, 1) for a in call.inputs[2:4])
    return g, x, mean, rstd, groups


def host_group_norm_backward(call: SimCall) -> list[np.ndarray]:
    g, x, mean, rstd, groups = _group_backward_inputs(call)
    p = _params(call, 4, "w")
    n, c = x.shape[:2]
    chan = (1, c) + (1,) * (x.ndim - 2)
    xhat = ((x.reshape(n, groups, -1) - mean) * rstd).reshape(x.shape)
    gw = g * p["w"].reshape(chan) if "w" in p else g
    axes = (0, *range(2, x.ndim))

    def group_mean(v: np.ndarray) -> np.ndarray:
        return v.reshape(n, groups, -1).astype(np.float64).mean(axis=-1, keepdims=True).astype(F32)

    def grad_x() -> np.ndarray:
        gg, xh = gw.reshape(n, groups, -1), xhat.reshape(n, groups, -1)
        return (rstd * (gg - group_mean(gw) - xh * group_mean(gw * xhat))).reshape(x.shape)

    def chan_sum(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float64).sum(axis=axes).astype(F32)

    return _masked_outputs(call, [grad_x, lambda: chan_sum(g * xhat), lambda: chan_sum(g)])


def ttnn_group_norm_backward(call: SimCall) -> list[np.ndarray]:
    """ttnn.moreh_group_norm_backward: each step packed in the input's format, group means by the moreh tile
    sums and REDUCE_SCALAR (as the forward), channel sums by the reduce LLK."""
    g, x, mean, rstd, groups = _group_backward_inputs(call)
    p = _params(call, 4, "w")
    acc, fid = fp32_acc_of(call.numerics, default=False), fidelity_of(call.numerics)
    im = storage(call.in_specs[1].dtype)
    shape4 = _nchw(x.shape)
    n, c, h, w = shape4
    f = F32(c / groups) * (F32(h) / F32(TILE)) * (F32(w) / F32(TILE))
    scaler = scaler_tile(F32(1.0) / (F32(TILE) * np.sqrt(f, dtype=F32)), im)
    chan = (1, c, 1, 1)

    def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cm.round_to(cm.multiply(a, b, fidelity=fid, fp32_acc=acc), im)

    def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cm.round_to(cm.sub(a, b, fp32_acc=acc), im)

    with np.errstate(invalid="ignore", over="ignore"):
        x4, g4 = x.reshape(shape4), g.reshape(shape4)
        rs = rstd.reshape(n, groups, 1, 1).repeat(c // groups, axis=1).reshape(n, c, 1, 1)
        mu = mean.reshape(n, groups, 1, 1).repeat(c // groups, axis=1).reshape(n, c, 1, 1)
        xhat = mul(sub(x4, mu), rs)
        gw = mul(g4, p["w"].reshape(chan)) if "w" in p else g4

        def group_mean(v: np.ndarray) -> np.ndarray:
            m = _moreh_mean(_group_tiles(v, groups)[0], im, acc, fid, scaler)
            return m.reshape(n, groups, 1, 1).repeat(c // groups, axis=1).reshape(n, c, 1, 1)

        def grad_x() -> np.ndarray:
            inner = sub(sub(gw, group_mean(gw)), mul(xhat, group_mean(mul(gw, xhat))))
            return cm.multiply(inner, rs, fidelity=fid, fp32_acc=acc)

        def chan_sum(v: np.ndarray) -> np.ndarray:
            return cm.reduce_sum(v, (0, 2, 3), acc, fidelity=fid)

        return _masked_outputs(call, [grad_x, lambda: chan_sum(mul(g4, xhat)), lambda: chan_sum(g4)])


def _batch_backward_inputs(call: SimCall) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    g, x = (np.asarray(a, F32) for a in call.inputs[:2])
    mean, second = (np.asarray(a, F32) for a in call.inputs[2:4])
    p = _params(call, 4, "w")
    if not call.attrs["training"]:  # second is running_var: invstd formed here
        second = (1.0 / np.sqrt(second.astype(np.float64) + F32(call.attrs["eps"]))).astype(F32)
    return g, x, mean, second, p


def host_batch_norm_backward(call: SimCall) -> list[np.ndarray]:
    g, x, mean, invstd, p = _batch_backward_inputs(call)
    c = x.shape[1]
    chan = (1, c) + (1,) * (x.ndim - 2)
    axes = (0, *range(2, x.ndim))
    xhat = (x - mean.reshape(chan)) * invstd.reshape(chan)
    scale = invstd.reshape(chan) * (p["w"].reshape(chan) if "w" in p else F32(1))

    def chan_mean(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float64).mean(axis=axes).astype(F32).reshape(chan)

    def grad_x() -> np.ndarray:
        if not call.attrs["training"]:
            return g * scale
        return scale * (g - chan_mean(g) - xhat * chan_mean(g * xhat))

    def chan_sum(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float64).sum(axis=axes).astype(F32)

    return _masked_outputs(call, [grad_x, lambda: chan_sum(g * xhat), lambda: chan_sum(g)])


def ttnn_batch_norm_backward(call: SimCall) -> list[np.ndarray]:
    """batch_norm's backward composed of TT-NN ops (no TT-NN kernel), each output stored in the input dtype."""
    g, x, mean, invstd, p = _batch_backward_inputs(call)
    dt = call.in_specs[1].dtype
    fmt = storage(dt)
    acc, fid = fp32_acc_of(call.numerics, default=dt is DType.FLOAT32), fidelity_of(call.numerics)
    num = replace(call.numerics, fidelity=fid, fp32_acc=acc)
    shape4 = _nchw(x.shape)
    c = shape4[1]
    chan = (1, c, 1, 1)

    def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cm.round_to(cm.multiply(a, b, fidelity=fid, fp32_acc=acc), fmt)

    def sub(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cm.round_to(cm.sub(a, b, fp32_acc=acc), fmt)

    with np.errstate(invalid="ignore", over="ignore"):
        x4, g4 = x.reshape(shape4), g.reshape(shape4)
        inv = cm.round_to(invstd, fmt).reshape(chan)
        scale = mul(inv, p["w"].reshape(chan)) if "w" in p else inv
        xhat = mul(sub(x4, cm.round_to(mean, fmt).reshape(chan)), inv)

        def grad_x() -> np.ndarray:
            if not call.attrs["training"]:
                return mul(g4, scale)
            mg = _ttnn_reduce(g4, (0, 2, 3), dt, num, mean=True)
            mgx = _ttnn_reduce(mul(g4, xhat), (0, 2, 3), dt, num, mean=True)
            return mul(sub(sub(g4, mg), mul(xhat, mgx)), scale)

        return _masked_outputs(call, [grad_x, lambda: _ttnn_reduce(mul(g4, xhat), (0, 2, 3), dt, num, mean=False),
                                      lambda: _ttnn_reduce(g4, (0, 2, 3), dt, num, mean=False)])  # fmt: skip


# ------------------------------------------------------------------------------------------------------- costs
def norm_cost(reduces: int, fpu: int, sfpu: int = 1, launches: int = 1) -> cost.Estimate:
    """Launches + max(DRAM traffic, per input tile ``reduces`` reduce / matmul tile ops at the fidelity's rate,
    ``fpu`` element-wise FPU ops and ``sfpu`` SFPU ops) over the cores."""

    def estimate(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
        fid = num.fidelity if num.fidelity is not None else Fidelity.HiFi4
        cycles = reduces * cost.matmul_tile_cycles(card, fid) + fpu * cost.FPU_TILE_CYCLES
        cycles += sfpu * cost.SFPU_TILE_CYCLES
        traffic = sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs)
        work = cost.tiles(ins[0]) if ins else 0
        busy = max(cost.dram_ns(traffic, card), cost.compute_ns(work, cycles, card))
        return launches * cost.LAUNCH_NS + busy * max(1, launches / 2)

    return estimate


# ------------------------------------------------------------------------------------------------ registration
def _program(*args: Any, **kw: Any) -> Any:
    from kohakutt.kernels.programs.norm import rowwise_program

    return rowwise_program(*args, **kw)


for _op, _rms, _fused in (("layer_norm", False, False), ("add_layer_norm", False, True), ("rms_norm", True, False),
                          ("add_rms_norm", True, True)):  # fmt: skip
    _fwd_cost = norm_cost(1 if _rms else 2, 3 + _fused + (0 if _rms else 1), 2)
    sim(_op, estimate=_fwd_cost)(lambda call, _r=_rms, _f=_fused: ttnn_rowwise(call, _r, _f))
    sim(_op, provider="ktt", estimate=_fwd_cost, program=_program)(
        lambda call, _r=_rms, _f=_fused: ktt_rowwise(call, _r, _f)
    )
    host(_op, estimate=_fwd_cost)(lambda call, _r=_rms, _f=_fused: sfpu_rowwise(call, _r, _f))

sim("layer_norm_backward", estimate=norm_cost(3, 7, 0, launches=2))(ttnn_layer_norm_backward)
host("layer_norm_backward", estimate=norm_cost(3, 7, 0))(lambda c: host_row_backward(c, False))
sim("rms_norm_backward", estimate=norm_cost(3, 5, 0, launches=9))(ttnn_rms_norm_backward)
host("rms_norm_backward", estimate=norm_cost(3, 5, 0))(lambda c: host_row_backward(c, True))
sim("group_norm", estimate=norm_cost(2, 7, 1))(ttnn_group_norm)
host("group_norm", estimate=norm_cost(2, 5, 1))(host_group_norm)
sim("group_norm_backward", estimate=norm_cost(4, 8, 0, launches=2))(ttnn_group_norm_backward)
host("group_norm_backward", estimate=norm_cost(4, 7, 0))(host_group_norm_backward)
sim("batch_norm", estimate=norm_cost(2, 6, 1, launches=8))(ttnn_batch_norm)
host("batch_norm", estimate=norm_cost(2, 5, 1))(host_batch_norm)
sim("batch_norm_backward", estimate=norm_cost(3, 7, 0, launches=10))(ttnn_batch_norm_backward)
host("batch_norm_backward", estimate=norm_cost(3, 6, 0))(host_batch_norm_backward)


# ------------------------------------------------------------------------------------------ real card: TT-NN
def _tt_params(tt: Any, inputs: list, attrs: dict, n_in: int, op: str, allowed: str, shape: tuple[int, ...]) -> dict:
    """The parameter operands by letter, reshaped to ``shape`` in tile layout."""
    names = param_names(attrs["params"], len(inputs) - n_in, op, allowed)
    return {c: tt.reshape(t, shape) for c, t in zip(names, inputs[n_in:])}


def _tt_eps(attrs: dict, x: Any, tt: Any) -> float:
    if attrs["eps"] is not None:
        return float(attrs["eps"])
    return float(np.finfo(np.float32).eps) if x.dtype == tt.float32 else 2.0**-7


def _tt_rowwise(op: str, rms: bool, fused: bool):
    def fn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
        x = inputs[0]
        shape = tuple(x.shape)
        axis = normalized(shape, attrs["normalized_shape"], op)
        width = math.prod(shape[axis:])
        flat = (*shape[:axis], width) if axis else (1, width)
        xr = tt.reshape(x, flat)
        rr = tt.reshape(inputs[1], flat) if fused else None
        p = _tt_params(tt, inputs, attrs, 2 if fused else 1, op, "wb", (1, width))
        eps = _tt_eps(attrs, x, tt)
        norm = tt.rms_norm if rms else tt.layer_norm
        y = norm(xr, epsilon=eps, weight=p.get("w"), bias=p.get("b"), residual_input_tensor=rr,
                 compute_kernel_config=kernel_config(tt, x, num, fp32_acc=not rms, approx=rms))  # fmt: skip
        outs = [tt.reshape(as_dtype(tt, y, out_specs[0].dtype), shape)]
        src = xr
        if fused:
            src = tt.add(xr, rr)
            outs.append(tt.reshape(as_dtype(tt, src, out_specs[1].dtype), shape))
        n_stats = 1 if rms else 2
        if not attrs["stats"]:
            return outs + [None] * n_stats
        cfg = kernel_config(tt, x, num, fp32_acc=True)
        d = tt.typecast(src, tt.float32)
        if not rms:  # ttnn.layer_norm returns no statistics: the same steps in fp32
            mean = tt.mean(d, dim=-1, keepdim=True, compute_kernel_config=cfg)
            d = tt.subtract(d, mean)
            outs.append(tt.reshape(mean, out_specs[-2].shape))
        var = tt.mean(tt.multiply(d, d), dim=-1, keepdim=True, compute_kernel_config=cfg)
        outs.append(tt.reshape(tt.rsqrt(tt.add(var, eps)), out_specs[-1].shape))
        return outs

    return fn


for _op, _rms, _fused in (("layer_norm", False, False), ("add_layer_norm", False, True), ("rms_norm", True, False),
                          ("add_rms_norm", True, True)):  # fmt: skip
    ttnn(_op)(_tt_rowwise(_op, _rms, _fused))


def _tt_bf16(tt: Any, op: str, **tensors: Any) -> dict[str, Any]:
    """The tensors (None kept) in bfloat16, which TT-NN's moreh norms take only: block floats widen exactly;
    float32 and integers are refused, not rounded."""
    out = {}
    for name, t in tensors.items():
        if t is not None and t.dtype in (tt.bfloat8_b, tt.bfloat4_b):
            t = tt.typecast(t, tt.bfloat16)
        elif t is not None and t.dtype != tt.bfloat16:
            raise KohakuTTUnsupportedOperator(f"{op}: TT-NN's kernel takes bfloat16 only; {name} is {t.dtype}")
        out[name] = t
    return out


def _tt_nchw(tt: Any, t: Any) -> Any:
    return tt.reshape(t, _nchw(tuple(t.shape)))


@ttnn("group_norm")
def group_norm_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
    x = inputs[0]
    c = x.shape[1]
    p = _tt_params(tt, inputs, attrs, 1, "group_norm", "wb", (1, 1, 1, c))
    t = _tt_bf16(tt, "group_norm", x=_tt_nchw(tt, x), w=p.get("w"), b=p.get("b"))
    y, mean, rstd = tt.moreh_group_norm(
        t["x"], int(attrs["num_groups"]), eps=float(attrs["eps"]), gamma=t["w"], beta=t["b"],
        are_required_outputs=[True, True, True], compute_kernel_config=kernel_config(tt, x, num, fp32_acc=False,
                                                                                     approx=True))  # fmt: skip
    stat = out_specs[1].shape
    return [
        tt.reshape(as_dtype(tt, y, out_specs[0].dtype), tuple(x.shape)),
        tt.reshape(tt.typecast(mean, tt.float32), stat),
        tt.reshape(tt.typecast(rstd, tt.float32), stat),
    ]


@ttnn("batch_norm")
def batch_norm_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
    x = inputs[0]
    c = x.shape[1]
    p = _tt_params(tt, inputs, attrs, 1, "batch_norm", "wbmv", (1, c, 1, 1))
    x4 = _tt_nchw(tt, x)
    training = bool(attrs["training"])
    eps = float(attrs["eps"])
    cfg = kernel_config(tt, x, num, fp32_acc=x.dtype == tt.float32)
    wide = tt.float32 if any(t.dtype == tt.float32 for t in p.values()) else tt.bfloat16
    p = {k: t if t.dtype == wide else tt.typecast(t, wide) for k, t in p.items()}  # one dtype for all parameters
    running = {k: tt.clone(p[k]) for k in "mv" if k in p and training}  # ttnn.batch_norm updates them in place
    y = tt.batch_norm(x4, running_mean=running.get("m", p.get("m")), running_var=running.get("v", p.get("v")),
                      training=training, eps=eps, momentum=float(attrs["momentum"]), weight=p.get("w"),
                      bias=p.get("b"), compute_kernel_config=cfg)  # fmt: skip
    outs = [tt.reshape(as_dtype(tt, y, out_specs[0].dtype), tuple(x.shape))]
    if not training:
        return outs + [None] * 4
    x32 = tt.typecast(x4, tt.float32)  # the batch statistics it used, for the backward
    mean = tt.mean(tt.mean(x32, dim=[2, 3], keepdim=True), dim=0, keepdim=True)
    d = tt.subtract(x32, mean)
    var = tt.mean(tt.mean(tt.multiply(d, d), dim=[2, 3], keepdim=True), dim=0, keepdim=True)
    outs += [tt.reshape(mean, (c,)), tt.reshape(tt.rsqrt(tt.add(var, eps)), (c,))]
    return outs + ([tt.reshape(running[k], (c,)) for k in "mv"] if running else [None, None])


@ttnn("layer_norm_backward")
def layer_norm_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
    g, x, mean, rstd = inputs[:4]
    shape = tuple(x.shape)
    axis = normalized(shape, attrs["normalized_shape"], "layer_norm_backward")
    p = _tt_params(tt, inputs, attrs, 4, "layer_norm_backward", "wb", shape[axis:] or (1,))
    mask = attrs["output_mask"]
    stat = shape[:axis] or (1,)  # TT-NN takes the statistics without the normalized dims' trailing 1s
    t = _tt_bf16(tt, "layer_norm_backward", g=g, x=x, mean=tt.reshape(mean, stat), rstd=tt.reshape(rstd, stat),
                 w=p.get("w"))  # fmt: skip
    g, x, mean, rstd, w = t["g"], t["x"], t["mean"], t["rstd"], t["w"]

    def grad(i: int) -> Any:  # the output buffer TT-NN writes grad i into
        if not mask[i]:
            return None
        if i == 0:
            return tt.zeros_like(x)
        return tt.zeros(shape=list(out_specs[i].shape), dtype=x.dtype, layout=tt.TILE_LAYOUT, device=x.device())

    return tt.moreh_layer_norm_backward(
        g, x, mean, rstd, len(shape) - axis, gamma=w, input_grad=grad(0), gamma_grad=grad(1), beta_grad=grad(2),
        compute_kernel_config=kernel_config(tt, x, num, fp32_acc=False, approx=True))  # fmt: skip


@ttnn("group_norm_backward")
def group_norm_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
    g, x, mean, rstd = inputs[:4]
    c = x.shape[1]
    p = _tt_params(tt, inputs, attrs, 4, "group_norm_backward", "w", (1, 1, 1, c))
    groups = int(attrs["num_groups"])
    stat = (1, 1, x.shape[0], groups)
    t = _tt_bf16(tt, "group_norm_backward", g=_tt_nchw(tt, g), x=_tt_nchw(tt, x), mean=tt.reshape(mean, stat),
                 rstd=tt.reshape(rstd, stat), w=p.get("w"))  # fmt: skip
    dx, dw, db = tt.moreh_group_norm_backward(
        t["g"], t["x"], t["mean"], t["rstd"],
        groups, are_required_outputs=list(attrs["output_mask"]), gamma=t["w"],
        compute_kernel_config=kernel_config(tt, x, num, fp32_acc=False, approx=True))  # fmt: skip
    return [None if t is None else tt.reshape(t, s.shape) for t, s in zip((dx, dw, db), out_specs)]


def _tt_rms_backward(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
    g, x, rstd = inputs[:3]
    shape = tuple(x.shape)
    axis = normalized(shape, attrs["normalized_shape"], "rms_norm_backward")
    width = math.prod(shape[axis:])
    flat = (math.prod(shape[:axis]), width)
    p = _tt_params(tt, inputs, attrs, 3, "rms_norm_backward", "wb", (1, width))
    g2, x2, r2 = (tt.reshape(t, s) for t, s in ((g, flat), (x, flat), (rstd, (flat[0], 1))))
    cfg = kernel_config(tt, x, num, fp32_acc=x.dtype == tt.float32)
    xhat = tt.multiply(x2, r2)
    gw = tt.multiply(g2, p["w"]) if "w" in p else g2
    mask = attrs["output_mask"]
    m = tt.mean(tt.multiply(gw, xhat), dim=-1, keepdim=True, compute_kernel_config=cfg)
    dx = tt.multiply(tt.subtract(gw, tt.multiply(xhat, m)), r2) if mask[0] else None
    dw = tt.sum(tt.multiply(g2, xhat), dim=0, compute_kernel_config=cfg) if mask[1] else None
    db = tt.sum(g2, dim=0, compute_kernel_config=cfg) if mask[2] else None
    return [None if t is None else tt.reshape(t, s.shape) for t, s in zip((dx, dw, db), out_specs)]


ttnn("rms_norm_backward")(_tt_rms_backward)


@ttnn("batch_norm_backward")
def batch_norm_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
    g, x, mean, second = inputs[:4]
    c = x.shape[1]
    p = _tt_params(tt, inputs, attrs, 4, "batch_norm_backward", "w", (1, c, 1, 1))
    chan = (1, c, 1, 1)
    g4, x4 = _tt_nchw(tt, g), _tt_nchw(tt, x)
    mean4 = tt.reshape(mean, chan)
    inv = tt.reshape(second, chan)
    if not attrs["training"]:
        inv = tt.rsqrt(tt.add(inv, float(attrs["eps"])))
    scale = tt.multiply(inv, p["w"]) if "w" in p else inv
    cfg = kernel_config(tt, x, num, fp32_acc=x.dtype == tt.float32)
    xhat = tt.multiply(tt.subtract(x4, mean4), inv)
    mask = attrs["output_mask"]
    dx = None
    if mask[0]:
        if attrs["training"]:
            mg = tt.mean(g4, dim=[0, 2, 3], keepdim=True, compute_kernel_config=cfg)
            mgx = tt.mean(tt.multiply(g4, xhat), dim=[0, 2, 3], keepdim=True, compute_kernel_config=cfg)
            dx = tt.multiply(tt.subtract(tt.subtract(g4, mg), tt.multiply(xhat, mgx)), scale)
        else:
            dx = tt.multiply(g4, scale)
    dw = tt.sum(tt.multiply(g4, xhat), dim=[0, 2, 3], compute_kernel_config=cfg) if mask[1] else None
    db = tt.sum(g4, dim=[0, 2, 3], compute_kernel_config=cfg) if mask[2] else None
    return [None if t is None else tt.reshape(t, s.shape) for t, s in zip((dx, dw, db), out_specs)]


# TT-NN's norm kernels square unscaled values: wrong (not just imprecise) for rows or channels past 2^60, so every
# call runs on the host, which scales them (registry.unscaled_squares)
declare(("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm", "layer_norm_backward", "rms_norm_backward",
         "group_norm", "group_norm_backward", "batch_norm", "batch_norm_backward"), unscaled_squares)  # fmt: skip
