"""The softmax family: the simulator's models of TT-NN's softmax kernels (provider "ttnn"), the host's computation
with fp32 statistics (provider "host": the calls TT-NN's kernels refuse, float32 rows under
``fp32_reduce="exact"``), and the real-card TT-NN calls.

Padding never leaks: along a tiled dim (one of the last two) the row is padded to whole tiles with -inf before the
max and the exp, as TT-NN's attention program does (its -inf mask tile), the moreh kernels also zero the padding's
exps (their mask), and the padded columns are dropped before the result is stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.softmax import softmax_dim
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels import cost
from kohakutt.kernels.reduce import TILE, fidelity_of, fp32_acc_of, kernel_config, tile_axes
from kohakutt.kernels.registry import SimCall, declare, float32_exact, host, sim, ttnn

TTNN_NAMES = (
    "softmax", "moreh_logsoftmax", "moreh_softmax_backward", "moreh_logsoftmax_backward", "float32",
    "init_device_compute_kernel_config", "MathFidelity.LoFi", "MathFidelity.HiFi2", "MathFidelity.HiFi3",
    "MathFidelity.HiFi4", "typecast", "bfloat16",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------------- rows
class Rows:
    """A tensor seen as rows along the softmax dim (moved last), padded to whole tiles with ``fill`` when the dim is
    tiled on the card; :meth:`back` drops the padding and restores the layout."""

    def __init__(self, x: np.ndarray, dim: int, fill: float):
        self.scalar = x.ndim == 0
        x = x.reshape(1) if self.scalar else x
        self.dim, self.n = dim, x.shape[dim]
        self.tiled = dim in tile_axes(x.ndim)
        moved = np.moveaxis(x.astype(np.float32, copy=False), dim, -1)
        pad = -self.n % TILE if self.tiled else 0
        self.values = np.pad(moved, [(0, 0)] * (moved.ndim - 1) + [(0, pad)], constant_values=fill) if pad else moved

    def like(self, x: np.ndarray, fill: float) -> np.ndarray:
        """Another tensor of the same shape as rows padded with ``fill``."""
        return Rows(x, self.dim, fill).values

    def mask_padding(self, x: np.ndarray) -> np.ndarray:
        if x.shape[-1] > self.n:
            x = x.copy()
            x[..., self.n :] = 0.0
        return x

    def back(self, y: np.ndarray) -> np.ndarray:
        out = np.moveaxis(np.asarray(y, np.float32)[..., : self.n], -1, self.dim)
        return out.reshape(()) if self.scalar else out


def _setup(call: SimCall) -> tuple[int, bool, bool, str, Any]:
    """(dim, fp32_acc, approx, intermediate format, fidelity) for the ttnn models: TT-NN's defaults where unset."""
    spec = call.in_specs[-1]
    dim = softmax_dim(spec.shape, call.attrs["dim"])
    acc = fp32_acc_of(call.numerics, default=any(s.dtype is DType.FLOAT32 for s in call.in_specs))
    approx = True if call.numerics.approx is None else bool(call.numerics.approx)
    return dim, acc, approx, "float32" if acc else "bfloat16", fidelity_of(call.numerics)


def _empty(call: SimCall) -> np.ndarray | None:
    out = call.out_specs[0]
    return np.zeros(out.shape, np.float32) if out.numel == 0 else None


def softmax_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Launch + max(DRAM traffic, per input tile: max and sum reduces, a subtract, exp, reciprocal, a multiply)."""
    fid = num.fidelity if num.fidelity is not None else Fidelity.HiFi4
    cycles = 2 * cost.matmul_tile_cycles(card, fid) + 2 * cost.SFPU_TILE_CYCLES + 2 * cost.FPU_TILE_CYCLES
    traffic = sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs)
    work = sum(cost.tiles(s) for s in ins)
    return cost.LAUNCH_NS + max(cost.dram_ns(traffic, card), cost.compute_ns(work, cycles, card))


# ----------------------------------------------------------------------------------------------- TT-NN models
def ttnn_forward(call: SimCall, log: bool) -> np.ndarray:
    """ttnn.softmax (attention-optimized program over the last dim of rank <= 4, else the moreh kernels) or
    ttnn.moreh_logsoftmax, as the card computes them."""
    done = _empty(call)
    if done is not None:
        return done
    x = np.asarray(call.inputs[0])
    dim, acc, approx, im, fid = _setup(call)
    rows = Rows(x, dim, -np.inf)
    v = rows.values
    attention = not log and x.ndim <= 4 and dim == max(x.ndim - 1, 0)
    with np.errstate(invalid="ignore", over="ignore"):
        if attention:
            stable = bool(call.attrs.get("numeric_stable", True))
            d = cm.sub(v, cm.reduce_max(v, -1, acc, keepdims=True), fp32_acc=acc) if stable else v
            e = cm.round_to(cm.sfpu("exp", d, approx=approx), im)  # sub and exp fused in DST, packed once
        else:
            d = cm.round_to(cm.sub(v, cm.reduce_max(v, -1, acc, keepdims=True), fp32_acc=acc), im)
            e = rows.mask_padding(cm.round_to(cm.sfpu("exp", d), im))  # moreh: exact exp, padding masked to 0
        s = cm.reduce_sum(e, -1, acc, fidelity=fid, keepdims=True)
        if log:
            y = cm.sub(d, cm.round_to(cm.sfpu("log", s), im), fp32_acc=acc)
        else:
            y = cm.multiply(e, cm.round_to(cm.sfpu("reciprocal", s), im), fidelity=fid, fp32_acc=acc)
    return rows.back(y)


def ttnn_backward(call: SimCall, log: bool) -> np.ndarray:
    """ttnn.moreh_softmax_backward / moreh_logsoftmax_backward as the card computes them."""
    done = _empty(call)
    if done is not None:
        return done
    g, y = (np.asarray(a) for a in call.inputs)
    dim, acc, _, im, fid = _setup(call)
    rows = Rows(y, dim, 0.0)
    yv, gv = rows.values, rows.like(g, 0.0)  # zero padding: the mask tile zeroes what would leak into the sums
    with np.errstate(invalid="ignore", over="ignore"):
        if log:
            s = cm.round_to(cm.reduce_sum(gv, -1, acc, fidelity=fid, keepdims=True), im)
            p = cm.round_to(cm.multiply(cm.round_to(cm.sfpu("exp", yv), im), s, fidelity=fid, fp32_acc=acc), im)
            dx = cm.sub(gv, p, fp32_acc=acc)
        else:
            yg = cm.round_to(cm.multiply(yv, gv, fidelity=fid, fp32_acc=acc), im)
            s = cm.round_to(cm.reduce_sum(yg, -1, acc, fidelity=fid, keepdims=True), im)
            dx = cm.multiply(yv, cm.round_to(cm.sub(gv, s, fp32_acc=acc), im), fidelity=fid, fp32_acc=acc)
    return rows.back(dx)


# ------------------------------------------------------------------------------------------ Kohaku-TT's kernel
def host_forward(call: SimCall, log: bool) -> np.ndarray:
    """The host: fp32 max, fp32 x - max, SFPU exp (exact unless the scope asks approx), fp32 row sums on the
    SFPU, then e * (1/sum) or (x - max) - log(sum) in fp32; one rounding, to the output dtype, when stored."""
    done = _empty(call)
    if done is not None:
        return done
    x = np.asarray(call.inputs[0])
    rows = Rows(x, softmax_dim(x.shape, call.attrs["dim"]), -np.inf)
    approx = bool(call.numerics.approx)  # unset means exact here
    with np.errstate(invalid="ignore", over="ignore"):
        d = rows.values - np.max(rows.values, axis=-1, keepdims=True)
        e = rows.mask_padding(cm.sfpu("exp", d, approx=approx))
        s = np.sum(e, axis=-1, keepdims=True, dtype=np.float32)
        y = d - cm.sfpu("log", s) if log else e * cm.sfpu("reciprocal", s)
    return rows.back(y)


def host_backward(call: SimCall, log: bool) -> np.ndarray:
    done = _empty(call)
    if done is not None:
        return done
    g, y = (np.asarray(a) for a in call.inputs)
    rows = Rows(y, softmax_dim(y.shape, call.attrs["dim"]), 0.0)
    yv, gv = rows.values, rows.like(g, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        if log:
            dx = gv - cm.sfpu("exp", yv) * np.sum(gv, axis=-1, keepdims=True, dtype=np.float32)
        else:
            dx = yv * (gv - np.sum(yv * gv, axis=-1, keepdims=True, dtype=np.float32))
    return rows.back(dx)


for _op, _log in (("softmax", False), ("log_softmax", True)):
    sim(_op, estimate=softmax_cost)(lambda call, _log=_log: ttnn_forward(call, _log))
    host(_op, estimate=softmax_cost)(lambda call, _log=_log: host_forward(call, _log))
for _op, _log in (("softmax_backward", False), ("log_softmax_backward", True)):
    sim(_op, estimate=softmax_cost)(lambda call, _log=_log: ttnn_backward(call, _log))
    host(_op, estimate=softmax_cost)(lambda call, _log=_log: host_backward(call, _log))


# ------------------------------------------------------------------------------------------ real card: TT-NN
def _config(ttnn_: Any, x: Any, num: Numerics) -> Any:
    return kernel_config(ttnn_, x, num, fp32_acc=x.dtype == ttnn_.float32, approx=True)


@ttnn("softmax")
def softmax_ttnn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    x = inputs[0]
    shape = tuple(x.shape)
    dim = softmax_dim(shape, attrs["dim"]) - max(len(shape), 1)  # negative: TT-NN reads a positive dim of a rank<4
    return ttnn_.softmax(x, dim=dim, compute_kernel_config=_config(ttnn_, x, num),
                         numeric_stable=bool(attrs["numeric_stable"]))  # fmt: skip


@ttnn("log_softmax")
def log_softmax_ttnn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    x = inputs[0]
    shape = tuple(x.shape)
    if not shape:  # moreh's softmax takes rank >= 1: a scalar is a one-value row
        x = ttnn_.reshape(x, [1])
    dim = softmax_dim(shape, attrs["dim"]) if shape else 0
    y = ttnn_.moreh_logsoftmax(x, dim, compute_kernel_config=_config(ttnn_, x, num))
    return ttnn_.reshape(y, list(shape)) if not shape else y


def _ttnn_backward(name: str):
    def fn(ttnn_: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
        grad, y = inputs
        if y.dtype not in (ttnn_.bfloat16, ttnn_.bfloat8_b):
            raise KohakuTTUnsupportedOperator(f"{name}: TT-NN's softmax backward takes bfloat16 / bfloat8_b "
                                              f"outputs, not {y.dtype}")  # fmt: skip
        shape = tuple(y.shape)
        if not shape:  # moreh's softmax backward takes rank >= 1: a scalar is a one-value row
            y, grad = ttnn_.reshape(y, [1]), ttnn_.reshape(grad, [1])
        dim = softmax_dim(shape, attrs["dim"]) if shape else 0
        dx = getattr(ttnn_, name)(y, grad, dim, compute_kernel_config=_config(ttnn_, y, num))
        return ttnn_.reshape(dx, []) if not shape else dx

    return fn


ttnn("softmax_backward")(_ttnn_backward("moreh_softmax_backward"))
ttnn("log_softmax_backward")(_ttnn_backward("moreh_logsoftmax_backward"))


def _backward_supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    """:func:`float32_exact`, and what TT-NN's moreh softmax backward refuses: outputs not bfloat16 / bfloat8_b."""
    why = float32_exact(specs, attrs, num)
    y = specs[1] if len(specs) > 1 else None
    if why is None and isinstance(y, TensorSpec) and y.dtype not in (DType.BFLOAT16, DType.BFLOAT8_B):
        why = f"TT-NN's softmax backward takes bfloat16 / bfloat8_b outputs, not {y.dtype.value}"
    return why


# float32 rows under fp32_reduce="exact": TT-NN's row sums read them as TF32, so these run on the host
declare(("softmax", "log_softmax"), float32_exact)
declare(("softmax_backward", "log_softmax_backward"), _backward_supports)
