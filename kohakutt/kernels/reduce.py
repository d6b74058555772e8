"""The reduce family: the simulator's models of TT-NN's reduce kernels (provider "ttnn"), the host's computations
for the calls TT-NN's kernels refuse (provider "host": float32 sums under ``fp32_reduce="exact"``; var / std and
vector norms always, as TT-NN squares unscaled values), and the real-card TT-NN calls.

The host computations sum float32 data with float32 adds on the SFPU (the data copied into an fp32 DST unchanged, tiles
added element-wise, then SFPU column sums; the order of the adds is left to the model: NumPy's pairwise float32 sum)
unless the numerics say ``fp32_reduce="tf32"``: then float32 data takes the FPU reduce, which reads it as TF32.
Other float formats always take the FPU reduce, whose products with a 1.0 scaler are exact for them.

What the "ttnn" models follow (tt-metal / TT-NN 0.81.1, ``ttnn/operations/reduction/generic``):
- A float sum or mean is a chain of TT-NN steps. Over H and / or W only (the last two dims): one program. Otherwise
  a bf16 / bfp8 sum first adds whole tiles along the other dims (``fast_reduce_nc``: one DST addition per tile, in
  order), then reduces H / W; any other case reduces one dim at a time from the last (dims before H are transposed
  into H). Between steps the partial result is stored in the input dtype, except a bf16 sum over some but not all
  dims, which keeps fp32 between steps (TT-NN's "sum precision chain").
- One H or W step is ``reduce_tile``: the data (SrcA) times a scaler tile (SrcB) under the fidelity, 32-element
  partial sums per tile, the tiles accumulated in DST (``cardmath.reduce_sum``). The scaler tile is fp32 for fp32
  inputs, else bf16 written by TRUNCATING the fp32 value (``float_to_scaler_bits``: ``bits >> 16``). A mean puts 1/N
  there, so TT-NN's bf16 mean of 3 values scales by 0.33203125. An H-and-W step (``REDUCE_SCALAR``) applies the
  scaler twice, so it is given sqrt(1/N) (truncated too) and the mean is scaled by that value squared.
- max / min: the tile's padding is filled with -inf (+inf for min), then GMPOOL takes the maximum of the source
  register values (min is -max(-x)); integers go through the SFPU exactly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.reduce import one_dim, reduced_dims
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels import cost
from kohakutt.kernels.registry import SimCall, declare, float32_exact, host, sim, ttnn, unscaled_squares
from kohakutt.kernels.ttnn_io import STORED

TILE = 32

TTNN_NAMES = (
    "sum", "mean", "max", "min", "argmax", "prod", "var", "std", "cumsum", "cumprod", "moreh_norm", "typecast",
    "neg", "ne", "exp", "log", "subtract", "add", "multiply", "where", "isinf", "reshape", "permute",
    "sqrt", "init_device_compute_kernel_config",
    "MathFidelity.LoFi", "MathFidelity.HiFi2", "MathFidelity.HiFi3", "MathFidelity.HiFi4",
    "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16", "uint8",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------- basics
def storage(dt: DType) -> str:
    """The cardmath format a float dtype's values are stored in on the card (block floats compute as bf16)."""
    return "float32" if dt is DType.FLOAT32 else "bfloat16"


def scaler_tile(value: float, fmt: str) -> np.float32:
    """``value`` as TT-NN's reduce reader writes it into the scaler tile: fp32 bits for an fp32 input, else the top
    16 bits of the fp32 value (truncation, not rounding)."""
    v = np.array(value, dtype=np.float32)
    if fmt != "float32":
        v = (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.float32(v[()])


def fidelity_of(num: Numerics) -> Fidelity:
    return num.fidelity if num.fidelity is not None else Fidelity.HiFi4


def fp32_acc_of(num: Numerics, default: bool = True) -> bool:
    """The scope's fp32_acc, or ``default`` when unset."""
    return default if num.fp32_acc is None else bool(num.fp32_acc)


def cast(x: np.ndarray, to: DType) -> np.ndarray:
    """``x`` converted to ``to`` as the card's typecast does (float -> int truncates and saturates, NaN -> 0)."""
    if to.is_float:
        return cm.round_to(np.asarray(x, dtype=np.float32), storage(to))
    if to is DType.BOOL:
        return np.asarray(x) != 0
    if np.issubdtype(np.asarray(x).dtype, np.floating):
        info = np.iinfo(to.compute)
        x = np.clip(np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0), info.min, info.max)
    return np.asarray(x).astype(to.compute)


@dataclass
class Reduction:
    """One call's input, reduced dims and output spec, with the input converted to ``dtype`` when asked."""

    x: np.ndarray
    dims: tuple[int, ...]
    out: TensorSpec
    src: DType  # the dtype x now holds

    @property
    def count(self) -> int:
        return math.prod(self.x.shape[d] for d in self.dims)

    @property
    def fmt(self) -> str:
        return storage(self.src)

    def shaped(self, y: np.ndarray) -> np.ndarray:
        """A keepdims result in the output's shape."""
        return np.asarray(y).reshape(self.out.shape)

    def empty(self, identity: float | None) -> np.ndarray | None:
        """The result when nothing is reduced or nothing is left: ``identity`` for an empty reduction."""
        if self.out.numel == 0:
            return np.zeros(self.out.shape, self.out.dtype.compute)
        if self.count == 0:
            return np.full(self.out.shape, identity, self.out.dtype.compute)
        return None


def reduction(call: SimCall, convert: bool = True) -> Reduction:
    spec = call.in_specs[0]
    x = np.asarray(call.inputs[0])
    dims = reduced_dims(spec.shape, call.attrs.get("dims"))
    src = spec.dtype
    if convert and call.attrs.get("dtype") is not None and call.out_specs[0].dtype is not src:
        src = call.out_specs[0].dtype
        x = cast(x, src)
    return Reduction(x, dims, call.out_specs[0], src)


def tile_axes(ndim: int) -> tuple[int, ...]:
    """The dims the card tiles: the last two (a 1-D tensor is one tile row: its dim is W)."""
    return tuple(range(max(ndim - 2, 0), ndim))


def pad_tiles(x: np.ndarray, dims: Sequence[int], fill: float) -> np.ndarray:
    """``x`` with each reduced tile dim padded to a multiple of 32 with ``fill``, as the card's tile holds it."""
    pads = [(0, -x.shape[d] % TILE if d in dims and d in tile_axes(x.ndim) else 0) for d in range(x.ndim)]
    if not any(p for _, p in pads):
        return x
    return np.pad(x, pads, constant_values=fill)


def _bf16_running(steps: np.ndarray) -> np.ndarray:
    """Fold ``steps`` (K, ...) in order into a BF16 DST: round to bf16 after every addition."""
    acc = torch.zeros(steps.shape[1:], dtype=torch.bfloat16)
    for k in range(steps.shape[0]):
        torch.add(acc, torch.from_numpy(np.ascontiguousarray(steps[k])), out=acc)  # fp32 add, RNE into bf16
    return acc.float().numpy()


def _leading(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """``x`` with ``axes`` flattened into one leading axis (the rest keep their order)."""
    rest = [d for d in range(x.ndim) if d not in axes]
    return np.transpose(x, list(axes) + rest).reshape(-1, *[x.shape[d] for d in rest])


def _keep(y: np.ndarray, shape: Sequence[int], axes: Sequence[int]) -> np.ndarray:
    return y.reshape([1 if d in axes else n for d, n in enumerate(shape)])


# ---------------------------------------------------------------------------------------- TT-NN's sum / mean
@dataclass(frozen=True)
class Step:
    kind: str  # "nc" (whole-tile adds along non-tile dims), "row" (one H or W reduce), "hw" (H and W together)
    axes: tuple[int, ...]


def ttnn_steps(ndim: int, dims: Sequence[int], fast_nc: bool) -> list[Step]:
    """The programs TT-NN's generic reduction runs for ``dims`` (see the module docstring)."""
    hw = tuple(d for d in dims if d in tile_axes(ndim))
    rest = tuple(d for d in dims if d not in hw)
    last = [Step("hw" if len(hw) == 2 else "row", hw)] if hw else []
    if not rest:
        return last
    if fast_nc:
        return [Step("nc", rest), *last]
    return [Step("row", (d,)) for d in sorted(dims, reverse=True)]


def _nc_add(y: np.ndarray, axes: tuple[int, ...], fp32_acc: bool) -> np.ndarray:
    """fast_reduce_nc: add the tiles along ``axes`` one by one into DST (bf16-rounded after each when 16-bit)."""
    steps = cm.to_source_register(_leading(y, axes), fp32_acc=fp32_acc)
    out = steps.sum(axis=0, dtype=np.float32) if fp32_acc else _bf16_running(steps)
    return _keep(out, y.shape, axes)


def ttnn_sum(r: Reduction, num: Numerics, scale: float = 1.0, op: str = "sum") -> np.ndarray:
    """TT-NN's float sum (``scale`` 1) or mean (``scale`` 1/N) of ``r`` as its steps compute it (keepdims)."""
    fid, acc = fidelity_of(num), fp32_acc_of(num)
    fast_nc = op == "sum" and r.fmt == "bfloat16"
    steps = ttnn_steps(r.x.ndim, r.dims, fast_nc)
    chain = fast_nc and 1 < len(r.dims) < r.x.ndim
    between = "float32" if chain or r.fmt == "float32" else "bfloat16"
    y = r.x.astype(np.float32, copy=False)
    for i, st in enumerate(steps):
        s = scale if i == 0 else 1.0
        if st.kind == "nc":
            y = _nc_add(y, st.axes, acc)
        elif st.kind == "hw":
            tile = scaler_tile(math.sqrt(s), r.fmt)
            y = cm.reduce_sum(y, st.axes, acc, scaler=tile, fidelity=fid, keepdims=True)
            if tile != 1.0:  # REDUCE_SCALAR multiplies by the scaler again when it reduces the column of row sums
                y = cm.multiply(y, tile, fidelity=fid, fp32_acc=acc)
        else:
            y = cm.reduce_sum(y, st.axes, acc, scaler=scaler_tile(s, r.fmt), fidelity=fid, keepdims=True)
        if i < len(steps) - 1:
            y = cm.round_to(y, between)
    return y


def int_total(r: Reduction) -> np.ndarray:
    """An exact integer sum, wrapping in the output's 32-bit integer type (the SFPU's int32 adds)."""
    total = np.sum(r.x.astype(np.int64), axis=r.dims, keepdims=True)
    return total.astype(r.out.dtype.compute)


def pow2_exponent(m: np.ndarray, limit: float) -> np.ndarray:
    """Per group, the power of two ``e`` that brings the group's largest magnitude ``m`` into [1, 2) where ``m`` is
    finite and above ``limit`` or nonzero and below ``1 / limit``; 0 elsewhere.
    The host scales such a group by 2^-e before squaring or summing it (one SFPU multiply per element, exact:
    only values that fall below float32's normal range change, and those are negligible next to 2^e) and scale the
    result back, so ``x * x`` or a sum cannot overflow (or underflow) where the result itself is finite."""
    m = np.asarray(m, np.float64)
    with np.errstate(all="ignore"):
        need = np.isfinite(m) & ((m > limit) | ((m > 0) & (m < 1.0 / limit)))
    e = np.frexp(np.where(need, m, 1.0))[1] - 1
    return np.where(need, e, 0).astype(np.int32)


def scaled(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``x * 2^e`` in float32 (exact unless it leaves float32's normal range)."""
    with np.errstate(all="ignore"):
        return np.ldexp(np.asarray(x, np.float64), e).astype(np.float32)


# ---------------------------------------------------------------------------------------------- cost model
def reduce_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Launch + max(DRAM traffic, one reduce-tile op per input tile at the fidelity's matmul rate)."""
    traffic = sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs)
    cycles = cost.matmul_tile_cycles(card, num.fidelity) if num.fidelity is not None else cost.FPU_TILE_CYCLES
    work = sum(cost.tiles(s) for s in ins)
    return cost.LAUNCH_NS + max(cost.dram_ns(traffic, card), cost.compute_ns(work, cycles, card))


SFPU_SUM_CYCLES = cost.FPU_TILE_CYCLES + cost.SFPU_TILE_CYCLES  # a tile copied into DST, then one SFPU add
SFPU_COLUMN_CYCLES = 4 * cost.SFPU_TILE_CYCLES  # the SFPU's sums down a tile's columns (loads, adds, transposes)


def own_reduce_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """The host: float32 data summed as the SFPU would (a copy and an add per input tile, a column reduce per output
    tile) unless ``fp32_reduce="tf32"``; other formats (and "tf32") as :func:`reduce_cost`."""
    if not (exact_fp32(ins[0]) and num.exact_sums):
        return reduce_cost(ins, outs, attrs, num, card)
    traffic = sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs)
    busy = max(cost.compute_ns(cost.tiles(ins[0]), SFPU_SUM_CYCLES, card),
               cost.compute_ns(sum(cost.tiles(s) for s in outs), SFPU_COLUMN_CYCLES, card))  # fmt: skip
    return cost.LAUNCH_NS + max(cost.dram_ns(traffic, card), busy)


def exact_fp32(spec: Spec) -> bool:
    """Whether ``spec`` is float32 data (the host sums it with float32 adds unless ``fp32_reduce="tf32"``)."""
    return isinstance(spec, TensorSpec) and spec.dtype is DType.FLOAT32


def chain_cost(steps: int):
    """The cost of a composite of ``steps`` full passes over the input (TT-NN op chains)."""

    def estimate(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
        return steps * reduce_cost(ins, outs, attrs, num, card)

    return estimate


# --------------------------------------------------------------------------------------------- sum / mean
@sim("sum", estimate=reduce_cost)
def sum_(call: SimCall) -> np.ndarray:
    r = reduction(call)
    done = r.empty(0)
    if done is not None:
        return done
    if not r.out.dtype.is_float:
        return r.shaped(int_total(r))
    return r.shaped(ttnn_sum(r, call.numerics))


@sim("mean", estimate=reduce_cost)
def mean_ttnn(call: SimCall) -> np.ndarray:
    r = reduction(call)
    done = r.empty(np.nan)
    if done is not None:
        return done
    return r.shaped(ttnn_sum(r, call.numerics, scale=1.0 / r.count, op="mean"))


def fp32_total(r: Reduction, num: Numerics) -> np.ndarray:
    """The host's sum: fp32 inputs accumulate in fp32 (unless ``fp32_reduce="tf32"``); others on
    the FPU with a 1.0 scaler into an fp32 DST, over all dims in one program (no rounding between steps)."""
    x = r.x.astype(np.float32, copy=False)
    if r.fmt == "float32" and num.exact_sums:
        return np.sum(x, axis=r.dims, keepdims=True, dtype=np.float32)
    return cm.reduce_sum(x, r.dims, fp32_acc_of(num), fidelity=fidelity_of(num), keepdims=True)


@host("sum", estimate=own_reduce_cost)
def sum_host(call: SimCall) -> np.ndarray:
    r = reduction(call)
    done = r.empty(0)
    if done is not None:
        return done
    if not r.out.dtype.is_float:
        return r.shaped(int_total(r))
    return r.shaped(fp32_total(r, call.numerics))


@host("mean", estimate=own_reduce_cost)
def mean_host(call: SimCall) -> np.ndarray:
    r = reduction(call)
    done = r.empty(np.nan)
    if done is not None:
        return done
    return r.shaped(fp32_total(r, call.numerics) * np.float32(1.0 / r.count))  # one fp32 multiply on the SFPU


# ------------------------------------------------------------------------------------------------ max / min
def extreme(r: Reduction, num: Numerics, largest: bool) -> np.ndarray:
    """TT-NN's max / min (keepdims): pad the tile with the kernel's fill, GMPOOL max (min = -max(-x)), drop the pad."""
    if not r.src.is_float:
        return (np.max if largest else np.min)(r.x, axis=r.dims, keepdims=True)
    x = r.x if largest else -r.x
    y = cm.reduce_max(pad_tiles(x, r.dims, -np.inf), r.dims, fp32_acc_of(num), keepdims=True)
    return y if largest else -y


def _extreme_op(largest: bool):
    def fn(call: SimCall) -> np.ndarray:
        r = reduction(call)
        if r.out.numel == 0:
            return np.zeros(r.out.shape, r.out.dtype.compute)
        return r.shaped(extreme(r, call.numerics, largest))

    return fn


for _name, _largest in (("max", True), ("amax", True), ("min", False), ("amin", False)):
    sim(_name, estimate=reduce_cost)(_extreme_op(_largest))


# ---------------------------------------------------------------------------------------- arg-reductions
def _arg(x: np.ndarray, axis: int | None, largest: bool) -> np.ndarray:
    """First index of the maximum (minimum) along ``axis`` (None: flattened), NaN winning, keepdims."""
    if x.ndim == 0:
        return np.zeros((), np.int32)
    flat = x.reshape(-1) if axis is None else x
    idx = (np.argmax if largest else np.argmin)(flat, axis=0 if axis is None else axis, keepdims=True)
    return idx.astype(np.int32)


def _arg_op(largest: bool):
    def fn(call: SimCall) -> np.ndarray:
        x, spec = np.asarray(call.inputs[0]), call.in_specs[0]
        axis = None if call.attrs["dim"] is None else one_dim(spec.shape, call.attrs["dim"])
        if call.out_specs[0].numel == 0:
            return np.zeros(call.out_specs[0].shape, np.int32)
        return _arg(x, axis, largest).reshape(call.out_specs[0].shape)

    return fn


def _with_indices_op(largest: bool):
    def fn(call: SimCall) -> list[np.ndarray]:
        x, spec = np.asarray(call.inputs[0]), call.in_specs[0]
        vshape, ishape = call.out_specs[0].shape, call.out_specs[1].shape
        if call.out_specs[0].numel == 0:
            return [np.zeros(vshape, x.dtype), np.zeros(ishape, np.int32)]
        if x.ndim == 0:
            return [x.reshape(vshape), np.zeros(ishape, np.int32)]
        axis = one_dim(spec.shape, call.attrs["dim"])
        idx = _arg(x, axis, largest)
        return [np.take_along_axis(x, idx.astype(np.intp), axis).reshape(vshape), idx.reshape(ishape)]

    return fn


for _name, _largest in (("argmax", True), ("argmin", False)):
    sim(_name, estimate=reduce_cost)(_arg_op(_largest))
for _name, _largest in (("max_with_indices", True), ("min_with_indices", False)):
    sim(_name, estimate=reduce_cost)(_with_indices_op(_largest))


# ---------------------------------------------------------------------------------------------------- prod
def tree_product(steps: np.ndarray, num: Numerics) -> np.ndarray:
    """Multiply ``steps`` (K, ...) together with FPU multiplies (fidelity, source registers, DST rounding), pairwise:
    log2(K) vectorized levels."""
    fid, acc = fidelity_of(num), fp32_acc_of(num)
    y = steps.astype(np.float32, copy=False)
    while y.shape[0] > 1:
        if y.shape[0] % 2:
            y = np.concatenate([y, np.ones((1, *y.shape[1:]), np.float32)])
        y = cm.multiply(y[0::2], y[1::2], fidelity=fid, fp32_acc=acc)
    return y[0]


def _prod_op(own: bool):
    def fn(call: SimCall) -> np.ndarray:
        r = reduction(call)
        done = r.empty(1)
        if done is not None:
            return done
        if not r.out.dtype.is_float:
            return r.shaped(np.prod(r.x.astype(np.int64), axis=r.dims, keepdims=True).astype(r.out.dtype.compute))
        if not r.dims:
            return r.shaped(r.x)
        steps = _leading(r.x, r.dims)
        if own and r.fmt == "float32" and call.numerics.exact_sums:
            return r.shaped(_keep(sfpu_tree_product(steps), r.x.shape, r.dims))
        return r.shaped(_keep(tree_product(steps, call.numerics), r.x.shape, r.dims))

    return fn


def sfpu_tree_product(steps: np.ndarray) -> np.ndarray:
    """The host's float32 product of ``steps`` (K, ...): SFPU float32 multiplies (each rounded once), pairwise."""
    y = steps.astype(np.float32, copy=False)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        while y.shape[0] > 1:
            if y.shape[0] % 2:
                y = np.concatenate([y, np.ones((1, *y.shape[1:]), np.float32)])
            y = y[0::2] * y[1::2]
    return y[0]


sim("prod", estimate=reduce_cost)(_prod_op(False))
host("prod", estimate=own_reduce_cost)(_prod_op(True))


# ----------------------------------------------------------------------------------------------- var / std
def var_and_mean(r: Reduction, correction: float, num: Numerics) -> tuple[np.ndarray, np.ndarray]:
    """(var, mean) keepdims: two fp32 passes, the accumulators bf16-rounded when fp32_acc=False."""
    x = r.x.astype(np.float32, copy=False)
    n = np.float32(r.count)
    divisor = np.float32(max(r.count - correction, 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        if fp32_acc_of(num):
            mean = np.sum(x, axis=r.dims, keepdims=True, dtype=np.float32) / n
            dev = x - mean
            m2 = np.sum(dev * dev, axis=r.dims, keepdims=True, dtype=np.float32)
        else:
            mean = cm.round_to(cm.reduce_sum(x, r.dims, False, keepdims=True) / n, "bfloat16")
            dev2 = cm.round_to((x - mean) ** 2, "bfloat16")
            m2 = cm.reduce_sum(dev2, r.dims, False, keepdims=True)
        var = (m2 / divisor).astype(np.float32)
    return var, mean.astype(np.float32)


def _var_op(kind: str):
    def fn(call: SimCall) -> np.ndarray | list[np.ndarray]:
        r = reduction(call)
        outputs = 2 if kind.endswith("_mean") else 1
        done = r.empty(np.nan)
        if done is not None:
            return [done] * outputs if outputs == 2 else done
        var, mean = var_and_mean(r, float(call.attrs["correction"]), call.numerics)
        first = cm.sfpu("sqrt", var) if kind.startswith("std") else var
        return [r.shaped(first), r.shaped(mean)] if outputs == 2 else r.shaped(first)

    return fn


for _name in ("var", "std", "var_mean", "std_mean"):
    sim(_name, estimate=chain_cost(2))(_var_op(_name))

_SQUARE_SAFE = 2.0**60  # a group whose largest |x| is beyond this is scaled first: (x - mean)^2 stays finite


def _var_op_host(kind: str):
    """The host: TT-NN's two fp32 passes, on the group scaled by a power of two when its largest magnitude
    would overflow the squares (:func:`pow2_exponent`), so var of [3e38, 3e38] is 0 and std of [1e20, 0] is finite;
    the results are scaled back exactly (a var beyond float32 is inf, as it must be)."""

    def fn(call: SimCall) -> np.ndarray | list[np.ndarray]:
        r = reduction(call)
        outputs = 2 if kind.endswith("_mean") else 1
        done = r.empty(np.nan)
        if done is not None:
            return [done] * outputs if outputs == 2 else done
        x = r.x.astype(np.float32, copy=False)
        with np.errstate(invalid="ignore"):
            e = pow2_exponent(np.max(np.abs(x), axis=r.dims, keepdims=True), _SQUARE_SAFE)
        var, mean = var_and_mean(Reduction(scaled(x, -e), r.dims, r.out, r.src), float(call.attrs["correction"]),
                                 call.numerics)  # fmt: skip
        first = scaled(cm.sfpu("sqrt", var), e) if kind.startswith("std") else scaled(var, 2 * e)
        mean = scaled(mean, e)
        return [r.shaped(first), r.shaped(mean)] if outputs == 2 else r.shaped(first)

    return fn


for _name in ("var", "std", "var_mean", "std_mean"):
    host(_name, estimate=chain_cost(2))(_var_op_host(_name))


# ----------------------------------------------------------------------------------------------- logsumexp
def _safe_max(r: Reduction, num: Numerics) -> np.ndarray:
    """The exact maximum over the reduced dims (keepdims, fp32; NaN if the group holds one), 0 where it is +-inf
    (PyTorch's logsumexp guard). Exact, not the reduce unit's: GMPOOL compares float32 as TF32 (truncated), and
    ``x - max`` of a truncated max is up to 2^-10 |max| above 0, so exp overflows from |max| ~ 9e4 on. The own
    kernel takes the maximum on the SFPU (float32 compares); TT-NN's chain on a card takes it as argmax + gather
    (:func:`_card_exact_max`)."""
    m = np.max(r.x.astype(np.float32, copy=False), axis=r.dims, keepdims=True)
    return np.where(np.isinf(m), np.float32(0), m)


@sim("logsumexp", estimate=chain_cost(6))
def logsumexp_ttnn(call: SimCall) -> np.ndarray:
    r = reduction(call)
    done = r.empty(-np.inf)
    if done is not None:
        return done
    fmt = storage(r.out.dtype)  # each op of the chain stores its result in the output dtype
    x = r.x.astype(np.float32)
    m = cm.round_to(_safe_max(r, call.numerics), fmt)
    e = cm.round_to(cm.sfpu("exp", cm.round_to(x - m, fmt)), fmt)
    with np.errstate(invalid="ignore"):  # an inf exp meets a zero fidelity part in the FPU model
        s = cm.round_to(ttnn_sum(Reduction(e, r.dims, r.out, r.out.dtype), call.numerics), fmt)
    return r.shaped(cm.round_to(cm.sfpu("log", s), fmt) + m)


@host("logsumexp", estimate=chain_cost(2))
def logsumexp_host(call: SimCall) -> np.ndarray:
    r = reduction(call)
    done = r.empty(-np.inf)
    if done is not None:
        return done
    x = r.x.astype(np.float32)
    m = _safe_max(r, call.numerics)
    with np.errstate(invalid="ignore"):
        s = np.sum(cm.sfpu("exp", x - m), axis=r.dims, keepdims=True, dtype=np.float32)
    return r.shaped(cm.sfpu("log", s) + m)


# ---------------------------------------------------------------------------------------------- predicates
def _predicate(kind: str):
    def fn(call: SimCall) -> np.ndarray:
        r = reduction(call, convert=False)
        nz = np.asarray(r.x) != 0  # NaN != 0
        if kind == "count_nonzero":
            out = np.sum(nz, axis=r.dims, keepdims=True, dtype=np.int64).astype(np.int32)
        else:
            out = (np.all if kind == "all" else np.any)(nz, axis=r.dims, keepdims=True)
        return r.shaped(out)

    return fn


for _name in ("all", "any", "count_nonzero"):
    sim(_name, estimate=reduce_cost)(_predicate(_name))


# ---------------------------------------------------------------------------------------------------- scans
def float_scan(x: np.ndarray, dim: int, kind: str, num: Numerics) -> np.ndarray:
    """TT-NN's accumulation program: per step, the input tile and the running total are copied into DST and
    combined by an SFPU add / multiply (IEEE fp32); the total is kept at DST's width. fp32 sums use Kahan
    compensation (TT-NN's default for fp32), modelled as the exact sum rounded to fp32 once."""
    steps = np.moveaxis(x.astype(np.float32), dim, 0)
    if fp32_acc_of(num):
        f = np.cumsum if kind == "cumsum" else np.cumprod
        return np.moveaxis(f(steps, axis=0, dtype=np.float32), 0, dim)  # sequential fp32 arithmetic
    steps = cm.to_source_register(steps, fp32_acc=False)  # a 16-bit DST holds fp32 data truncated to bf16
    acc = torch.full(steps.shape[1:], 0.0 if kind == "cumsum" else 1.0, dtype=torch.bfloat16)
    result = np.empty_like(steps)
    for k in range(steps.shape[0]):  # sequential on the card too: one tile op per step along dim
        step = torch.from_numpy(np.ascontiguousarray(steps[k]))
        (torch.add if kind == "cumsum" else torch.mul)(acc, step, out=acc)  # fp32 op, RNE into the bf16 DST
        result[k] = acc.float().numpy()
    return np.moveaxis(result, 0, dim)


def _scan_op(kind: str):
    def fn(call: SimCall) -> np.ndarray:
        spec, out = call.in_specs[0], call.out_specs[0]
        x = np.asarray(call.inputs[0])
        if out.dtype is not spec.dtype:
            x = cast(x, out.dtype)
        if x.ndim == 0 or x.size == 0:
            return x.astype(out.dtype.compute)
        dim = one_dim(spec.shape, call.attrs["dim"])
        if not out.dtype.is_float:
            f = np.cumsum if kind == "cumsum" else np.cumprod
            return f(x.astype(np.int64), axis=dim).astype(out.dtype.compute)
        if kind == "cumsum" and out.dtype is DType.FLOAT32 and fp32_acc_of(call.numerics):
            return np.cumsum(x.astype(np.float64), axis=dim).astype(np.float32)  # Kahan: O(1) ulp of the result
        return float_scan(x, dim, kind, call.numerics)

    return fn


for _name in ("cumsum", "cumprod"):
    sim(_name, estimate=cost.eltwise)(_scan_op(_name))


# ----------------------------------------------------------------------------------------------- vector_norm
def _pow_sfpu(a: np.ndarray, p: float) -> np.ndarray:
    """``a ** p`` as the SFPU's exact power (correctly rounded float32, as the model's other exact SFPU ops)."""
    with np.errstate(all="ignore"):
        return np.power(a.astype(np.float64), p).astype(np.float32)


@host("vector_norm", estimate=chain_cost(2))
def vector_norm_host(call: SimCall) -> np.ndarray:
    """The host: float32 data as float32 ops (|x|, x * x or |x| ** p, each rounded once) summed with SFPU
    float32 adds, then the root (p = +-inf: the largest / smallest |x| by SFPU compares, exact); for p > 0 (not 1) a
    group whose largest |x| is beyond 2^(60/p) or below 2^(-60/p) is first scaled by a power of two
    (:func:`pow2_exponent`), so the norm of [3e38] is 3e38 and of [1e-30] is 1e-30. Other formats, and
    ``fp32_reduce="tf32"``, as TT-NN's ``moreh_norm``."""
    r = reduction(call)
    p = float(call.attrs["p"])
    if r.fmt != "float32" or not call.numerics.exact_sums:
        if not (p > 0 and p != 1 and math.isfinite(p)) or r.out.numel == 0 or r.count == 0:
            return vector_norm(call)
        with np.errstate(invalid="ignore"):  # the same power-of-two scaling around TT-NN's program (exact for bf16)
            e = pow2_exponent(np.max(np.abs(r.x.astype(np.float32)), axis=r.dims, keepdims=True), 2.0 ** (60 / p))
        inner = dataclasses.replace(call, inputs=[scaled(np.asarray(call.inputs[0], np.float32), -e)])
        return r.shaped(scaled(np.asarray(vector_norm(inner), np.float32).reshape(e.shape), e))
    done = r.empty(0)
    if done is not None:
        return done
    a = np.abs(r.x.astype(np.float32))
    if p == 0:
        return vector_norm(call)  # a count: exact on either path
    if math.isinf(p):  # the SFPU's compares keep the values (the FPU max reads them as TF32)
        return r.shaped((np.max if p > 0 else np.min)(a, axis=r.dims, keepdims=True))
    e = np.zeros((1,) * a.ndim, np.int32)
    if p > 0 and p != 1:  # |x|^p of a large (tiny) group overflows (underflows) where the norm does not: scale first
        with np.errstate(invalid="ignore"):
            e = pow2_exponent(np.max(a, axis=r.dims, keepdims=True), 2.0 ** (60 / max(p, 1.0)))
        a = scaled(a, -e)
    with np.errstate(over="ignore", invalid="ignore"):
        terms = a if p == 1 else a * a if p == 2 else _pow_sfpu(a, p)
        s = np.sum(terms, axis=r.dims, keepdims=True, dtype=np.float32)
        out = s if p == 1 else cm.sfpu("sqrt", s) if p == 2 else _pow_sfpu(s, 1.0 / p)
    return r.shaped(scaled(out, e))


@sim("vector_norm", estimate=chain_cost(2))
def vector_norm(call: SimCall) -> np.ndarray:
    r = reduction(call)
    p = float(call.attrs["p"])
    done = r.empty(0)
    if done is not None:
        return done
    fid, acc = fidelity_of(call.numerics), fp32_acc_of(call.numerics)
    inter = "float32" if acc else "bfloat16"
    a = np.abs(r.x.astype(np.float32))
    if math.isinf(p):
        return r.shaped(extreme(Reduction(a, r.dims, r.out, r.src), call.numerics, p > 0))
    if p == 0:
        return r.shaped(np.sum(a != 0, axis=r.dims, keepdims=True, dtype=np.float32))
    if p == 1:
        terms = a
    elif p == 2:
        terms = cm.round_to(cm.multiply(r.x, r.x, fidelity=fid, fp32_acc=acc), inter)
    else:
        with np.errstate(divide="ignore"):
            terms = cm.round_to(cm.sfpu("exp", np.float32(p) * cm.sfpu("log", a)), inter)
    s = cm.reduce_sum(terms, r.dims, acc, fidelity=fid, keepdims=True)
    if p == 1:
        return r.shaped(s)
    if p == 2:
        return r.shaped(cm.sfpu("sqrt", s))
    with np.errstate(divide="ignore"):
        return r.shaped(cm.sfpu("exp", np.float32(1.0 / p) * cm.sfpu("log", s)))


# ------------------------------------------------------------------------------------------ real card: TT-NN
# Each function below gets its operands and gives its results through kohakutt.kernels.ttnn_io.card_call: tiles,
# uint8 / uint16 widened to int32, results brought to the output spec's dtype and layout there.
_TTNN_DTYPE = STORED


def kernel_config(ttnn_: Any, x: Any, num: Numerics, *, fp32_acc: bool = True, approx: bool = False) -> Any:
    """TT-NN's compute kernel config for ``num`` (unset fields take the given TT-NN defaults)."""
    fid = fidelity_of(num)
    return ttnn_.init_device_compute_kernel_config(
        x.device().arch(),
        math_fidelity=getattr(ttnn_.MathFidelity, fid.name),
        math_approx_mode=approx if num.approx is None else bool(num.approx),
        fp32_dest_acc_en=fp32_acc if num.fp32_acc is None else bool(num.fp32_acc),
        packer_l1_acc=False,
    )


def ttnn_dtype(ttnn_: Any, dt: DType) -> Any:
    return getattr(ttnn_, _TTNN_DTYPE[dt])


def as_dtype(ttnn_: Any, t: Any, dt: DType) -> Any:
    """``t`` typecast to ``dt`` unless it already has that TT-NN dtype."""
    target = ttnn_dtype(ttnn_, dt)
    return t if t.dtype == target else ttnn_.typecast(t, target)


def _dims_arg(shape: Sequence[int], dims: Any) -> list[int] | None:
    d = reduced_dims(shape, dims)
    return None if len(d) == len(shape) else list(d)


def _finish(ttnn_: Any, t: Any, spec: TensorSpec) -> Any:
    """``t`` in the output's shape (its dtype is brought to the spec by ``card_call``: TT-NN reshapes no uint8)."""
    return ttnn_.reshape(t, list(spec.shape))


def _ttnn_reduce(name: str, converts: bool = True):
    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
        x = inputs[0]
        if converts and attrs.get("dtype") is not None:
            x = as_dtype(ttnn_, x, out_specs[0].dtype)
        shape = tuple(x.shape)
        y = getattr(ttnn_, name)(
            x, dim=_dims_arg(shape, attrs["dims"]), keepdim=True, compute_kernel_config=kernel_config(ttnn_, x, num)
        )
        return _finish(ttnn_, y, out_specs[0])

    return fn


for _name, _fn in (("sum", "sum"), ("mean", "mean"), ("max", "max"), ("amax", "max"), ("min", "min"),
                   ("amin", "min")):  # fmt: skip
    ttnn(_name)(_ttnn_reduce(_fn))


@ttnn("prod")
def prod_ttnn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    x = inputs[0]
    if attrs.get("dtype") is not None:
        x = as_dtype(ttnn_, x, out_specs[0].dtype)
    if x.dtype not in (ttnn_.bfloat16, ttnn_.float32, ttnn_.bfloat8_b, ttnn_.bfloat4_b):
        raise KohakuTTUnsupportedOperator(f"prod: TT-NN's prod takes bfloat16 / float32 tensors, not {x.dtype}")
    shape = tuple(x.shape)
    dims = reduced_dims(shape, attrs["dims"])
    if len(dims) == len(shape):
        return _finish(ttnn_, ttnn_.prod(x), out_specs[0])
    for d in dims:  # ttnn.prod takes one dim at a time (and no compute config: it runs TT-NN's default)
        x = ttnn_.prod(x, dim=d, keepdim=True)
    return _finish(ttnn_, x, out_specs[0])


def _ttnn_arg(largest: bool):
    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
        x = inputs[0]
        if x.dtype in (ttnn_.bfloat8_b, ttnn_.bfloat4_b):
            x = ttnn_.typecast(x, ttnn_.bfloat16)  # exact: a block float's values all fit bfloat16
        elif x.dtype not in (ttnn_.bfloat16, ttnn_.float32):  # float32 holds no int32 exactly above 2^24
            raise KohakuTTUnsupportedOperator(f"{'argmax' if largest else 'argmin'}: TT-NN's argmax takes bfloat16 "
                                              f"/ float32 tensors, not {x.dtype}")  # fmt: skip
        x = x if largest else ttnn_.neg(x)  # argmin = argmax(-x): first occurrence is kept
        shape = tuple(x.shape)
        if attrs["dim"] is None or len(shape) <= 1:  # over all values: TT-NN takes that in row-major layout only
            return _finish(ttnn_, ttnn_.argmax(ttnn_.to_layout(x, ttnn_.ROW_MAJOR_LAYOUT)), out_specs[0])
        d = one_dim(shape, attrs["dim"])
        perm = [i for i in range(len(shape)) if i != d] + [d]  # TT-NN's argmax works along the last dim
        y = ttnn_.argmax(ttnn_.permute(x, perm), dim=-1, keepdim=True)
        return _finish(ttnn_, y, out_specs[0])

    return fn


ttnn("argmax")(_ttnn_arg(True))
ttnn("argmin")(_ttnn_arg(False))


def _ttnn_with_indices(largest: bool):
    arg = _ttnn_arg(largest)

    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> list:
        x = inputs[0]
        d = one_dim(tuple(x.shape), attrs["dim"])
        if x.dtype == ttnn_.float32 and x.shape:  # ttnn.max / min compare TF32 (truncated): gather at the argmax
            values = _card_exact_max(ttnn_, x, [d]) if largest else ttnn_.neg(_card_exact_max(ttnn_, ttnn_.neg(x), [d]))
        else:
            values = (ttnn_.max if largest else ttnn_.min)(
                x, dim=d, keepdim=True, compute_kernel_config=kernel_config(ttnn_, x, num)
            )
        return [_finish(ttnn_, values, out_specs[0]), arg(ttnn_, inputs, attrs, num, out_specs[1:])]

    return fn


ttnn("max_with_indices")(_ttnn_with_indices(True))
ttnn("min_with_indices")(_ttnn_with_indices(False))


def _ttnn_var(kind: str):
    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
        x = inputs[0]
        shape = tuple(x.shape)
        dims = reduced_dims(shape, attrs["dims"])
        if x.dtype == ttnn_.float32 and num.fp32_acc is False:
            raise KohakuTTUnsupportedOperator(f"{kind}: TT-NN's var / std of float32 needs an fp32 DST; leave "
                                              "fp32_acc unset or True")  # fmt: skip
        cfg = kernel_config(ttnn_, x, num)
        c = float(attrs["correction"])
        dim_arg = _dims_arg(shape, attrs["dims"])
        var = ttnn_.var(x, dim=dim_arg, keepdim=True, correction=c == 1.0, compute_kernel_config=cfg)
        if c not in (0.0, 1.0):  # TT-NN takes Bessel's correction as a flag: rescale the population variance
            n = math.prod(shape[d] for d in dims)
            var = ttnn_.multiply(var, n / max(n - c, 0) if n > c else float("inf"))
        first = ttnn_.sqrt(var) if kind.startswith("std") else var
        if not kind.endswith("_mean"):
            return _finish(ttnn_, first, out_specs[0])
        mean = ttnn_.mean(x, dim=dim_arg, keepdim=True, compute_kernel_config=cfg)
        return [_finish(ttnn_, first, out_specs[0]), _finish(ttnn_, mean, out_specs[1])]

    return fn


for _name in ("var", "std", "var_mean", "std_mean"):
    ttnn(_name)(_ttnn_var(_name))


def _card_exact_max(ttnn_: Any, x: Any, dims: Sequence[int]) -> Any:
    """The exact maximum of float32 ``x`` over ``dims`` (keepdims) on a card: ``ttnn.max`` reads float32 as TF32
    (truncated), so each dim, last first, takes ``ttnn.argmax`` (float32 compares) and gathers the value there."""
    shape = list(x.shape)
    lead = max(2 - len(shape), 0)  # TT-NN's gather takes rank >= 2
    x = ttnn_.reshape(x, [1] * lead + shape) if lead else x
    for d in sorted((d + lead for d in dims), reverse=True):
        nd = len(x.shape)
        perm = [i for i in range(nd) if i != d] + [d]  # argmax and this gather work along the last dim
        moved = perm != list(range(nd))
        xp = ttnn_.permute(x, perm) if moved else x
        idx = ttnn_.argmax(xp, dim=-1, keepdim=True)
        idx = ttnn_.typecast(ttnn_.to_layout(idx, ttnn_.TILE_LAYOUT), ttnn_.uint32)
        v = ttnn_.gather(ttnn_.to_layout(xp, ttnn_.TILE_LAYOUT), -1, index=idx)
        x = ttnn_.permute(v, [perm.index(i) for i in range(nd)]) if moved else v
    return ttnn_.reshape(x, [1 if i in dims else n for i, n in enumerate(shape)]) if lead else x


@ttnn("logsumexp")
def logsumexp_ttnn_card(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    x = as_dtype(ttnn_, inputs[0], out_specs[0].dtype)
    shape = tuple(x.shape)
    dim_arg = _dims_arg(shape, attrs["dims"])
    cfg = kernel_config(ttnn_, x, num)
    if x.dtype == ttnn_.float32:  # the shift must be the exact max: x - max(TF32) can reach 2^-10 |max| (exp: inf)
        m = _card_exact_max(ttnn_, x, reduced_dims(shape, attrs["dims"]))
    else:  # bfloat16 values are whole in the source registers: ttnn.max is exact
        m = ttnn_.max(x, dim=dim_arg, keepdim=True, compute_kernel_config=cfg)
    m = ttnn_.where(ttnn_.isinf(m), 0.0, m)
    s = ttnn_.sum(ttnn_.exp(ttnn_.subtract(x, m)), dim=dim_arg, keepdim=True, compute_kernel_config=cfg)
    return _finish(ttnn_, ttnn_.add(ttnn_.log(s), m), out_specs[0])


def _ttnn_predicate(kind: str):
    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
        x = inputs[0]
        dim_arg = _dims_arg(tuple(x.shape), attrs["dims"])
        nz = ttnn_.typecast(ttnn_.ne(x, 0), ttnn_.bfloat16)
        if kind == "count_nonzero":
            y = ttnn_.sum(ttnn_.typecast(nz, ttnn_.float32), dim=dim_arg, keepdim=True)
        else:
            y = (ttnn_.min if kind == "all" else ttnn_.max)(nz, dim=dim_arg, keepdim=True)
        return _finish(ttnn_, y, out_specs[0])

    return fn


for _name in ("all", "any", "count_nonzero"):
    ttnn(_name)(_ttnn_predicate(_name))


def _ttnn_scan(name: str):
    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
        x = as_dtype(ttnn_, inputs[0], out_specs[0].dtype)
        d = one_dim(tuple(x.shape), attrs["dim"])
        return _finish(ttnn_, getattr(ttnn_, name)(x, d), out_specs[0])

    return fn


ttnn("cumsum")(_ttnn_scan("cumsum"))
ttnn("cumprod")(_ttnn_scan("cumprod"))


@ttnn("vector_norm")
def vector_norm_ttnn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    x = inputs[0]
    if not tuple(x.shape):  # TT-NN's reductions take rank >= 1: a scalar is a one-value vector
        x = ttnn_.reshape(x, [1])
    shape = tuple(x.shape)
    p = float(attrs["p"])
    if x.dtype == ttnn_.bfloat16:
        dims = list(reduced_dims(shape, attrs["dims"]))
        y = ttnn_.moreh_norm(x, p=p, dim=dims, keepdim=True, compute_kernel_config=kernel_config(ttnn_, x, num))
        return _finish(ttnn_, y, out_specs[0])
    # moreh_norm takes bfloat16 only: float32 as TT-NN's float32 reductions over |x| (ttnn.sum reads float32 as
    # TF32, as every float32 sum on the TT-NN path does; maxima are exact, by argmax and gather)
    dim_arg = _dims_arg(shape, attrs["dims"])
    cfg = kernel_config(ttnn_, x, num)
    a = ttnn_.abs(x)
    if p in (math.inf, -math.inf):
        dims = list(reduced_dims(shape, attrs["dims"]))
        y = _card_exact_max(ttnn_, a, dims) if p > 0 else ttnn_.neg(_card_exact_max(ttnn_, ttnn_.neg(a), dims))
    elif p == 0:
        y = ttnn_.sum(ttnn_.typecast(ttnn_.ne(x, 0.0), ttnn_.float32), dim=dim_arg, keepdim=True,
                      compute_kernel_config=cfg)  # fmt: skip
    elif p < 0:  # TT-NN's pow of a negative power is not checked at |x| = 0 (where the norm is 0)
        raise KohakuTTUnsupportedOperator(f"vector_norm: a float32 norm of negative order p={p} on TT-NN; use "
                                          "p >= 0, or bfloat16")  # fmt: skip
    elif p == 1:
        y = ttnn_.sum(a, dim=dim_arg, keepdim=True, compute_kernel_config=cfg)
    elif p == 2:
        y = ttnn_.sqrt(ttnn_.sum(ttnn_.multiply(x, x), dim=dim_arg, keepdim=True, compute_kernel_config=cfg))
    else:
        y = ttnn_.pow(ttnn_.sum(ttnn_.pow(a, p), dim=dim_arg, keepdim=True, compute_kernel_config=cfg), 1.0 / p)
    return _finish(ttnn_, y, out_specs[0])


def _ttnn_reduce_supports(op: str):
    """``supports`` of TT-NN's reductions: :func:`float32_exact`; integer data the op sums as float32 (``dtype=
    float32``, or an op whose integer input gives a float32 result), since the float32 cast reads as TF32 on the FPU
    too; and a prod of integers, which the ``@ttnn`` function refuses (var / std and vector norms refuse every
    call: :func:`unscaled_squares`)."""
    float_out = op == "logsumexp"

    def supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
        why = float32_exact(specs, attrs, num)
        x = specs[0] if specs else None
        if why is not None or not isinstance(x, TensorSpec):
            return why
        to = attrs.get("dtype")
        to = DType.of(to) if to is not None else None
        if num.exact_sums and not x.dtype.is_float and (to is DType.FLOAT32 or (to is None and float_out)):
            return ("TT-NN's kernel sums the float32 cast of integer data as TF32 on the FPU; fp32_reduce='exact' "
                    "asks for float32 adds")  # fmt: skip
        if op == "prod" and not (to or x.dtype).is_float:
            return f"TT-NN's prod takes bfloat16 / float32 tensors, not {(to or x.dtype).value}"
        return None

    return supports


# float32 data under fp32_reduce="exact": TT-NN's FPU sums read it as TF32, so these run on the host (float32 adds)
for _op in ("sum", "mean", "prod", "logsumexp"):
    declare((_op,), _ttnn_reduce_supports(_op))
# TT-NN's variance and norm kernels square unscaled values: wrong (not just imprecise) for large groups, so the host
declare(("var", "std", "var_mean", "std_mean", "vector_norm"), unscaled_squares)


def _arg_supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    x = specs[0]
    if isinstance(x, TensorSpec) and not x.dtype.is_float:
        return f"TT-NN's argmax takes bfloat16 / float32 tensors, not {x.dtype.value}"
    return None


# integer arguments (TT-NN's argmax takes floats, and float32 holds no int32 exactly above 2^24): the host
declare(("argmax", "argmin"), _arg_supports)
for _name, _largest in (("argmax", True), ("argmin", False)):
    host(_name, estimate=reduce_cost)(_arg_op(_largest))
