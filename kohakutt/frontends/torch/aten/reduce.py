"""Reductions, scans, norms and softmax on ``tt``: each aten overload runs one IR op of the reduce or softmax family.

Output sizes and dtypes are PyTorch's (its meta kernels); the IR computes in the card's dtypes and the result is
stored into PyTorch's output dtype. Where the two differ:
- integer sums and scans whose PyTorch result is int64 (an int32 ``sum``, say) accumulate in int64: exact, as int64
  sums are on the card; products of int64 are checked against int32 (IntegerOverflowError); indices (argmax,
  max.dim, ...) and counts are int32 on the card, stored as int64;
- float reductions run at the reduce family's numerics (TT-NN's defaults: HiFi4, fp32 accumulation), so a float32 sum
  reads its data as TF32 (see ``kohakutt/ir/defs/reduce.py``); a ``kohakutt.numerics(...)`` scope changes them;
- float32 maxima and minima (amax, amin, max, min, aminmax) run the exact max / min_with_indices, so the result is an
  element of the input, as PyTorch's gradients of these ops assume (the reduce unit's own maximum is TF32-truncated).
Intermediate device tensors are freed as soon as the op that reads them is queued (:func:`release`).

A few are compositions of tt ops: ``equal`` (eq, all, one host read of the answer); ``median`` / ``nanmedian`` /
``kthvalue`` (an on-card stable sort with NaN as +inf, then gathers); ``cummax`` / ``cummin`` / ``logcumsumexp``
(log-step scans of element-wise combines: exact for the extremes, fp32 log-sum-exps); a negative variance
``correction`` (the population statistic rescaled by N / (N - c)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from kohakutt.frontends.torch import tensors
from kohakutt.frontends.torch.aten.registry import Args, computed, ir, kernel, release

Impl = Callable[[Args, list[torch.Tensor]], None]


def _dims(dim: Any) -> Any:
    """A torch ``dim`` argument as the IR's ``dims`` (None or an empty list: every dim)."""
    if dim is None or isinstance(dim, int):
        return dim
    return [int(d) for d in dim]


def _dtype(dt: torch.dtype | None) -> str | None:
    return None if dt is None else tensors.check_dtype(dt).value


def _scalar(x: Any) -> Any:
    return x.item() if isinstance(x, torch.Tensor) else x


# ------------------------------------------------------------------------------------- sum, mean, prod, min, max
def _wider_int(x: torch.Tensor, out: torch.Tensor) -> torch.dtype | None:
    """int64 when PyTorch accumulates an integer / bool ``x`` into an int64 ``out`` (so the card does too)."""
    narrower = not x.dtype.is_floating_point and x.dtype != torch.int64
    return torch.int64 if narrower and out.dtype == torch.int64 else None


def _accumulate(op: str) -> Impl:
    """sum / mean / prod over ``dim`` (``dim`` absent: every dim), accumulating in ``dtype`` when given."""

    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        dtype = _dtype(a.get("dtype") or _wider_int(a.self, outs[0]))
        attrs = {"dims": _dims(a.get("dim")), "keepdim": bool(a.get("keepdim", False)), "dtype": dtype}
        ir(op, [a.self], attrs, outs, a._index)

    return impl


computed("sum", "sum.dim_IntList", "sum.IntList_out", "sum.out", ir=("sum",))(_accumulate("sum"))
computed("mean", "mean.dim", "mean.out", "mean.dtype_out", ir=("mean",))(_accumulate("mean"))
computed("prod", "prod.dim_int", "prod.int_out", "prod.out", ir=("prod",))(_accumulate("prod"))


def extreme(op: str, x: torch.Tensor, dim: Any, keepdim: bool, out: torch.Tensor, index: int) -> None:
    """amax / amin of ``x`` over ``dim`` into ``out``. A float32 maximum on the reduce unit compares (and returns) the
    values truncated to SrcA's TF32, which need not be elements of ``x``; PyTorch relies on them being elements (the
    gradients of amax and max select ``x == result``), so float32 runs the exact max_with_indices one dim at a time."""
    if x.dtype != torch.float32:
        ir(op, [x], {"dims": _dims(dim), "keepdim": keepdim}, [out], index)
        return
    nd = x.dim()
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    order = sorted({d % nd for d in dims} if dims else range(nd), reverse=True) if nd else [0]
    cur = x
    for k, d in enumerate(order):  # from the last dim down, so the dims still to reduce keep their positions
        shape = [1 if i == d else n for i, n in enumerate(cur.shape) if keepdim or i != d] if nd else []
        dst = out if k == len(order) - 1 else tensors.new(shape, None, x.dtype, index)
        indices = tensors.new(shape, None, torch.int32, index)
        ir(f"{'max' if op == 'amax' else 'min'}_with_indices", [cur], {"dim": d, "keepdim": keepdim}, [dst, indices],
           index)  # fmt: skip
        cur = dst


def _extreme(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        extreme(op, a.self, a.get("dim"), bool(a.get("keepdim", False)), outs[0], a._index)

    return impl


computed("amax", "amax.out", "max", "max.unary_out", ir=("amax", "max_with_indices"))(_extreme("amax"))
computed("amin", "amin.out", "min", "min.unary_out", ir=("amin", "min_with_indices"))(_extreme("amin"))


def _with_indices(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(op, [a.self], {"dim": int(a.dim), "keepdim": bool(a.keepdim)}, outs, a._index)

    return impl


computed("max.dim", "max.dim_max", ir=("max_with_indices",))(_with_indices("max_with_indices"))
computed("min.dim", "min.dim_min", ir=("min_with_indices",))(_with_indices("min_with_indices"))


def _aminmax(a: Args, outs: list[torch.Tensor]) -> None:
    extreme("amin", a.self, a.get("dim"), bool(a.keepdim), outs[0], a._index)
    extreme("amax", a.self, a.get("dim"), bool(a.keepdim), outs[1], a._index)


computed("aminmax", "aminmax.out", ir=("amin", "amax", "min_with_indices", "max_with_indices"))(_aminmax)


def _arg(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(op, [a.self], {"dim": a.get("dim"), "keepdim": bool(a.keepdim)}, outs, a._index)

    return impl


computed("argmax", "argmax.out", ir=("argmax",))(_arg("argmax"))
computed("argmin", "argmin.out", ir=("argmin",))(_arg("argmin"))


def _trace(a: Args, outs: list[torch.Tensor]) -> None:
    ir("sum", [a.self.diagonal()], {"dims": None, "keepdim": False, "dtype": None}, outs, a._index)  # a strided view


computed("trace", "trace.out", ir=("sum",))(_trace)


def _nansum(a: Args, outs: list[torch.Tensor]) -> None:
    attrs = {"dims": _dims(a.get("dim")), "keepdim": bool(a.keepdim), "dtype": _dtype(a.get("dtype"))}
    if not a.self.is_floating_point():
        ir("sum", [a.self], attrs, outs, a._index)
        return
    nan = ir("isnan", [a.self], None, None, a._index)[0]
    zeroed = ir("where", [nan, 0.0, a.self], None, None, a._index)[0]
    ir("sum", [zeroed], attrs, outs, a._index)
    release(a._index, nan, zeroed)


computed("nansum", "nansum.out", ir=("isnan", "where", "sum"))(_nansum)


# ------------------------------------------------------------------------------------------ variance, logsumexp
def _variance(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        c = _scalar(a.get("correction"))
        c = 1 if c is None else c
        attrs = {"dims": _dims(a.get("dim")), "keepdim": bool(a.keepdim), "correction": c}
        if c >= 0:
            ir(op, [a.self], attrs, outs, a._index)
            return
        # a negative correction (N - c > N: PyTorch allows it) is the population statistic, rescaled
        ir(op, [a.self], {**attrs, "correction": 0}, outs, a._index)
        n = _count(a.self, a.get("dim"))
        factor = n / (n - c) if n else 1.0
        spread = outs[0]  # var / std (var_mean and std_mean return it first)
        ir("mul", [spread, factor if op.startswith("var") else math.sqrt(factor)], None, [spread], a._index)

    return impl


def _count(x: torch.Tensor, dim: Any) -> int:
    """How many elements of ``x`` one result of a reduction over ``dim`` (None or empty: all) takes."""
    dims = _dims(dim)
    if dims is None or (isinstance(dims, list) and not dims):
        return x.numel()
    return math.prod(x.shape[d] if x.dim() else 1 for d in ([dims] if isinstance(dims, int) else dims))


for _op in ("var", "std", "var_mean", "std_mean"):
    computed(f"{_op}.correction", f"{_op}.correction_out", ir=(_op,))(_variance(_op))


def _logsumexp(a: Args, outs: list[torch.Tensor]) -> None:
    ir("logsumexp", [a.self], {"dims": _dims(a.dim), "keepdim": bool(a.keepdim)}, outs, a._index)


computed("logsumexp", "logsumexp.out", ir=("logsumexp",))(_logsumexp)


def _scan(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        dtype = _dtype(a.get("dtype") or _wider_int(a.self, outs[0]))
        ir(op, [a.self], {"dim": int(a.dim), "dtype": dtype}, outs, a._index)

    return impl


computed("cumsum", "cumsum.out", "cumsum_", ir=("cumsum",))(_scan("cumsum"))
computed("cumprod", "cumprod.out", "cumprod_", ir=("cumprod",))(_scan("cumprod"))


# ------------------------------------------------------------------------------------------------ any, all, count
def _logical(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        dim = a.get("dim")
        if isinstance(dim, list | tuple) and not dim:  # any(x, dim=()) reduces nothing: x != 0 element-wise
            ir("ne", [a.self, 0], None, outs, a._index)
            return
        ir(op, [a.self], {"dims": _dims(dim), "keepdim": bool(a.get("keepdim", False))}, outs, a._index)

    return impl


for _op in ("any", "all"):
    computed(_op, f"{_op}.dim", f"{_op}.dims", f"{_op}.out", f"{_op}.all_out", f"{_op}.dims_out", ir=(_op, "ne"))(
        _logical(_op)
    )


@kernel("equal", ir=("eq", "all"))
def equal(self: torch.Tensor, other: torch.Tensor) -> bool:
    """True when both have the same shape and equal values (NaN equals nothing): ``all(self == other)`` on the card,
    then one host read (a synchronization)."""
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return bool(torch.eq(self, other).all().item())


def _count_nonzero(a: Args, outs: list[torch.Tensor]) -> None:
    ir("count_nonzero", [a.self], {"dims": _dims(a.get("dim")), "keepdim": False}, outs, a._index)


computed(
    "count_nonzero", "count_nonzero.dim_IntList", "count_nonzero.out", "count_nonzero.dim_IntList_out",
    ir=("count_nonzero",),
)(_count_nonzero)  # fmt: skip


# ------------------------------------------------------------------------------------------------------- norms
def _norm(p_name: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        p = _scalar(a.get(p_name))
        attrs = {"p": 2.0 if p is None else float(p), "dims": _dims(a.get("dim")), "keepdim": bool(a.get("keepdim"))}
        ir("vector_norm", [a.self], attrs, outs, a._index, a.get("dtype") or outs[0].dtype)

    return impl


computed("linalg_vector_norm", "linalg_vector_norm.out", ir=("vector_norm",))(_norm("ord"))
computed(
    "norm.Scalar", "norm.Scalar_out", "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dtype_out", "norm.dtype_out", "norm.out",
    ir=("vector_norm",),
)(_norm("p"))  # fmt: skip


# ------------------------------------------------------------------------------------------------------ softmax
def _softmax(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(op, [a.self], {"dim": int(a.dim)}, outs, a._index, outs[0].dtype)

    return impl


computed("_softmax", "_softmax.out", ir=("softmax",))(_softmax("softmax"))
computed("_log_softmax", "_log_softmax.out", ir=("log_softmax",))(_softmax("log_softmax"))


def _softmax_backward(op: str) -> Impl:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(op, [a.grad_output, a.output], {"dim": int(a.dim)}, outs, a._index)

    return impl


computed("_softmax_backward_data", "_softmax_backward_data.out", ir=("softmax_backward",))(
    _softmax_backward("softmax_backward")
)
computed("_log_softmax_backward_data", "_log_softmax_backward_data.out", ir=("log_softmax_backward",))(
    _softmax_backward("log_softmax_backward")
)


# ------------------------------------------------------------------------------- order statistics (by sorting)
def _order_statistic(x: torch.Tensor, dim: int, keepdim: bool, which: str, k: int = 1):
    """(values, indices) of the median ("median": NaN if the row has one), the median of the non-NaN values
    ("nanmedian") or the k-th smallest ("kth", NaN counting as the largest) along ``dim``: an on-card stable sort of
    the values with NaN as +inf (whatever the sort kernel does with NaN), then gathers."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    if x.is_floating_point():
        nan = torch.isnan(x)
        key = torch.where(nan, torch.inf, x)
        real = (~nan).sum(dim)
    else:
        nan, key = None, x
        real = torch.full(x.select(dim, 0).shape, n, dtype=torch.int64, device=x.device)
    _, order = torch.sort(key, dim=dim, stable=True)
    if which == "kth":
        at = torch.full_like(real, k - 1)
    elif which == "nanmedian":
        at = ((real - 1) // 2).clamp_min(0)
    else:
        at = torch.full_like(real, (n - 1) // 2)
    index = torch.gather(order, dim, at.clamp(0, n - 1).unsqueeze(dim)).squeeze(dim)
    if which == "median" and nan is not None:  # a NaN anywhere: the (first) NaN
        index = torch.where(real < n, torch.argmax(nan.to(torch.int32), dim), index)
    values = torch.gather(x, dim, index.unsqueeze(dim)).squeeze(dim)
    return (values.unsqueeze(dim), index.unsqueeze(dim)) if keepdim else (values, index)


def _order_impl(which: str):
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        x = a.self
        if "dim" not in a or a.get("dim") is None:  # over all elements: the value only
            if x.numel() == 0:
                outs[0].fill_(math.nan)
                return
            v, _ = _order_statistic(x.reshape(-1), 0, False, which)
            outs[0].copy_(v)
            return
        if x.numel() == 0:
            return
        v, i = _order_statistic(x, int(a.dim), bool(a.keepdim), which, int(a.get("k", 1)))
        outs[0].copy_(v)
        outs[1].copy_(i)

    return impl


_ORDER_IR = ("sort", "isnan", "sum", "gather")
computed("median", "median.out", "median.dim", "median.dim_values", ir=_ORDER_IR)(_order_impl("median"))
computed("nanmedian", "nanmedian.out", "nanmedian.dim", "nanmedian.dim_values", ir=_ORDER_IR)(_order_impl("nanmedian"))
computed("kthvalue", "kthvalue.values", ir=_ORDER_IR)(_order_impl("kth"))


# ------------------------------------------------------------------------------------------- log-step scans
def _shifted(x: torch.Tensor, dim: int, by: int) -> torch.Tensor:
    """x moved ``by`` places along ``dim`` (towards higher positions; the first ``by`` positions repeat x[0])."""
    head = x.narrow(dim, 0, 1).expand(*[by if d == dim else -1 for d in range(x.dim())])
    return torch.cat([head, x.narrow(dim, 0, x.shape[dim] - by)], dim=dim)


def _positions(x: torch.Tensor, dim: int) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[dim] = -1
    return torch.arange(x.shape[dim], dtype=torch.int64, device=x.device).view(shape).expand(x.shape)


def _scan(x: torch.Tensor, dim: int, step: Any) -> list[torch.Tensor]:
    """Hillis-Steele: after the rounds with shifts 1, 2, 4, ... every position holds the combination of all
    positions up to it (``step(left, right, has_left)`` combines, associatively)."""
    by = 1
    state = step.start(x, dim)
    pos = _positions(x, dim)
    while by < x.shape[dim]:
        left = [_shifted(s, dim, by) for s in state]
        state = step(left, state, pos >= by)
        by *= 2
    return state


class _Extreme:
    """cummax / cummin: the running extreme and the (last) position it came from; NaN wins and sticks, as PyTorch."""

    def __init__(self, largest: bool) -> None:
        self.largest = largest

    def start(self, x: torch.Tensor, dim: int) -> list[torch.Tensor]:
        return [x, _positions(x, dim)]

    def __call__(self, left: list[torch.Tensor], right: list[torch.Tensor], has_left: torch.Tensor):
        (lv, li), (rv, ri) = left, right
        if rv.is_floating_point():
            rn, ln = torch.isnan(rv), torch.isnan(lv)
            keep_right = rn | (~ln & (rv >= lv if self.largest else rv <= lv))
        else:
            keep_right = rv >= lv if self.largest else rv <= lv
        take = has_left & ~keep_right
        return [torch.where(take, lv, rv), torch.where(take, li, ri)]


def _cum_extreme(largest: bool):
    def helper(self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> None:
        if self.numel() == 0:
            return
        x = self if self.dim() else self.reshape(1)
        d = dim % x.dim()
        v, i = _scan(x, d, _Extreme(largest))
        values.copy_(v.reshape(values.shape))
        indices.copy_(i.reshape(indices.shape))

    return helper


kernel("_cummax_helper", kind="composite", ir=("isnan", "ge", "where", "concat"))(_cum_extreme(True))
kernel("_cummin_helper", kind="composite", ir=("isnan", "le", "where", "concat"))(_cum_extreme(False))


class _LogSumExp:
    def start(self, x: torch.Tensor, dim: int) -> list[torch.Tensor]:
        return [x]

    def __call__(self, left: list[torch.Tensor], right: list[torch.Tensor], has_left: torch.Tensor):
        a, b = left[0], right[0]
        top = torch.maximum(a, b)
        safe = torch.where(torch.isinf(top), 0.0, top)
        both = safe + torch.log(torch.exp(a - safe) + torch.exp(b - safe))
        return [torch.where(has_left, both, b)]


def logcumsumexp_fp32(x: torch.Tensor, dim: int) -> torch.Tensor:
    """log(cumsum(exp(x))) along ``dim`` in fp32: a log-step scan of element-wise log-sum-exps."""
    x32 = (x if x.dim() else x.reshape(1)).to(torch.float32)
    (result,) = _scan(x32, dim % x32.dim(), _LogSumExp())
    return result.reshape(x.shape)


@kernel("_logcumsumexp", kind="composite", ir=("maximum", "exp", "log", "add", "where", "concat"))
def _logcumsumexp(self: torch.Tensor, dim: int) -> torch.Tensor:  # (PyTorch has no meta kernel for it)
    if not self.is_floating_point():
        raise RuntimeError(f"logcumsumexp(): expected a floating point input, got {self.dtype}")
    if self.numel() == 0:
        return torch.empty_like(self)
    return logcumsumexp_fp32(self, dim).to(self.dtype)


@kernel("_logcumsumexp.out", kind="composite", ir=("maximum", "exp", "log", "add", "where", "concat"))
def _logcumsumexp_out(self: torch.Tensor, dim: int, *, out: torch.Tensor) -> torch.Tensor:
    out.resize_(self.shape)
    if self.numel():
        out.copy_(logcumsumexp_fp32(self, dim))
    return out
