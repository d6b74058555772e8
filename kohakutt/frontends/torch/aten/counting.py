"""Ops whose results count or group values on ``tt``: ``unique`` (with and without ``dim``), ``unique_consecutive``,
``bincount`` and ``histc``.

Each is a composition of tt ops run on the card; those whose output size depends on the values read one number from
the card, a synchronization as ``nonzero`` does (CUDA does the same):

- ``unique``: a stable ``sort`` (rows sorted lexicographically by one stable sort per column, last column first, for
  ``dim``), a run boundary wherever a value differs from the one before it (``!=``, so every NaN is its own value, as
  on the CPU), ``nonzero`` of the boundaries (the synchronization: the number of distinct values), the values
  gathered at the run starts, counts as differences of the starts and the inverse as the running count of
  boundaries scattered back through the sort's permutation. ``unique_consecutive`` is the same without the sort.
  The CPU always sorts, ``sorted=False`` included, and so does tt. Values are moved exactly.
- ``bincount``: reads the input's min and max (the synchronization: the output length, and PyTorch's check that the
  input is non-negative), then ``scatter_add`` of ones (int64) or of the weights into zeros, in index order as the
  CPU adds them (fp32 weights: fp32 adds in that order; other float weights give a float64 result on the CPU, which
  the card does not hold: refused).
- ``histc``: the bin of x is ``trunc((x - min) * bins / (max - min))`` in fp32, rounded after each step as the CPU
  computes it for float32 (so float32 elements land in the CPU's bins, x == max in the last; for bfloat16 the CPU
  rounds each step to bfloat16, which moves elements near an edge: tt keeps fp32), elements outside [min, max]
  skipped, then a ``scatter_add`` of ones, exact in fp32 below 2^24 per bin (a bfloat16 histogram is rounded once at
  the end; the CPU adds in bfloat16, which stops counting at 256). ``min == max`` takes the data's range (one
  read: ``aminmax``, a synchronization, also the CPU's finiteness check).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from kohakutt.errors import DtypeError
from kohakutt.frontends.torch import tensors
from kohakutt.frontends.torch.aten.movement import nonzero_rows
from kohakutt.frontends.torch.aten.registry import kernel, resize_out

aten = torch.ops.aten
_I64 = torch.int64
_UNIQUE_IR = ("sort", "ne", "any", "nonzero", "index", "cumsum", "scatter", "sub", "concat", "copy")


def _device(x: torch.Tensor) -> int:
    return x.device.index or 0


def _empty(shape: Any, like: torch.Tensor, dtype: torch.dtype = _I64) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=like.device)


# ---------------------------------------------------------------------------------------------------------- unique
def _runs(new: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(start positions int64 (k,), run lengths int64 (k,)) of the runs whose first elements ``new`` flags (bool
    (n,), new[0] True): one read of k from the card."""
    rows, _ = nonzero_rows(new, _device(new))
    starts = rows[:, 0].to(_I64)
    ends = torch.cat([starts[1:], torch.full((1,), n, dtype=_I64, device=new.device)])
    return starts, ends - starts


def _grouped(rows: torch.Tensor, consecutive: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct rows of ``rows`` (n, k), n > 0: (unique rows (u, k), inverse int64 (n,), counts int64 (u,), the row
    order used). Sorted lexicographically unless ``consecutive``."""
    n = rows.shape[0]
    perm = None
    if not consecutive:
        perm = torch.arange(n, device=rows.device)
        for j in reversed(range(rows.shape[1])):  # stable sorts from the last key to the first: lexicographic
            order = rows[:, j][perm].sort(stable=True).indices
            perm = perm[order]
        rows = rows[perm]
    differs = (rows[1:] != rows[:-1]).any(1)
    new = torch.cat([torch.ones(1, dtype=torch.bool, device=rows.device), differs])
    starts, counts = _runs(new, n)
    group = new.to(_I64).cumsum(0) - 1
    inverse = group if perm is None else torch.empty_like(group).scatter_(0, perm, group)
    return rows[starts], inverse, counts, starts


def _comparable(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.int32) if x.dtype == torch.bool else x  # the card sorts numbers


def _unique_flat(x: torch.Tensor, inverse: bool, counts: bool, consecutive: bool) -> tuple[torch.Tensor, ...]:
    flat = x.reshape(-1)
    if flat.numel() == 0:
        return flat.clone(), _empty(x.shape if inverse else (0,), x), _empty(0, x)
    if not consecutive:  # one key: sort values directly
        vals, perm = _comparable(flat).sort(stable=True)
        new = torch.cat([torch.ones(1, dtype=torch.bool, device=x.device), vals[1:] != vals[:-1]])
        starts, cnt = _runs(new, flat.numel())
        group = new.to(_I64).cumsum(0) - 1
        inv = torch.empty_like(group).scatter_(0, perm, group) if inverse else None
        values = vals[starts].to(x.dtype)
    else:
        rows, inv, cnt, _ = _grouped(_comparable(flat).unsqueeze(1), consecutive=True)
        values = rows[:, 0].to(x.dtype)
    return (
        values,
        inv.reshape(x.shape) if inverse else _empty(0, x),
        cnt if counts else _empty(0, x),
    )


def _unique_along(x: torch.Tensor, dim: int, consecutive: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """unique_dim / unique_dim_consecutive: the CPU returns inverse and counts whether asked for or not."""
    if x.dim() == 0:
        raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got {dim})")
    dim = dim % x.dim()
    if x.numel() == 0:
        zeros = [d for d, s in enumerate(x.shape) if s == 0]
        if len(zeros) > 1:
            raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
        if zeros[0] != dim:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")
        return x.clone(), _empty(0, x), _empty(0, x)
    moved = x.movedim(dim, 0)
    rows, inv, cnt, _ = _grouped(_comparable(moved).reshape(moved.shape[0], -1), consecutive)
    values = rows.to(x.dtype).reshape(-1, *moved.shape[1:]).movedim(0, dim).contiguous()
    return values, inv, cnt


@kernel("_unique2", kind="composite", ir=_UNIQUE_IR)
def unique2(self: torch.Tensor, sorted: bool = True, return_inverse: bool = False,
            return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _unique_flat(self, return_inverse, return_counts, consecutive=False)


@kernel("_unique", kind="composite", ir=_UNIQUE_IR)
def unique(self: torch.Tensor, sorted: bool = True, return_inverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    values, inv, _ = _unique_flat(self, return_inverse, False, consecutive=False)
    return values, inv


@kernel("unique_dim", kind="composite", ir=_UNIQUE_IR)
def unique_dim(self: torch.Tensor, dim: int, sorted: bool = True, return_inverse: bool = False,
               return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _unique_along(self, dim, consecutive=False)


@kernel("unique_consecutive", kind="composite", ir=_UNIQUE_IR)
def unique_consecutive(self: torch.Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    if dim is not None:
        return _unique_along(self, dim, consecutive=True)
    return _unique_flat(self, return_inverse, return_counts, consecutive=True)


@kernel("unique_dim_consecutive", kind="composite", ir=_UNIQUE_IR)
def unique_dim_consecutive(self: torch.Tensor, dim: int, return_inverse: bool = False,
                           return_counts: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _unique_along(self, dim, consecutive=True)


# -------------------------------------------------------------------------------------------------------- bincount
_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _bincount(x: torch.Tensor, weights: torch.Tensor | None, minlength: int) -> torch.Tensor:
    if x.dim() != 1 or x.dtype not in _INTEGRAL:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != x.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    if weights is None:
        dtype = _I64
    elif weights.dtype in (torch.float32, torch.float64):
        dtype = weights.dtype
    else:
        raise DtypeError(
            f"a tt tensor cannot be torch.float64: bincount with {weights.dtype} weights makes a float64 histogram "
            "(PyTorch's rule); pass float32 weights (weights.float()) for a float32 histogram"
        )
    if x.numel() == 0:
        return torch.zeros(minlength, dtype=dtype, device=x.device)
    lo, hi = torch.stack([x.min(), x.max()]).tolist()  # one read: the output length
    if lo < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    length = max(int(hi) + 1, minlength)
    out = torch.zeros(length, dtype=dtype, device=x.device)
    src = torch.ones(x.shape, dtype=dtype, device=x.device) if weights is None else weights
    return out.scatter_add_(0, x.to(_I64), src)


@kernel("bincount", kind="composite", ir=("amin", "amax", "concat", "full", "scatter"))
def bincount(self: torch.Tensor, weights: torch.Tensor | None = None, minlength: int = 0) -> torch.Tensor:
    return _bincount(self, weights, int(minlength))


@kernel("bincount.out", kind="composite", ir=("amin", "amax", "concat", "full", "scatter"))
def bincount_out(self: torch.Tensor, weights: torch.Tensor | None = None, minlength: int = 0, *,
                 out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    r = _bincount(self, weights, int(minlength))
    resize_out(out, r.to("meta"))
    return out.copy_(r)


# ----------------------------------------------------------------------------------------------------------- histc
def _edges(x: torch.Tensor, lo: float, hi: float) -> tuple[float, float]:
    """PyTorch's outer bin edges for histc: [min, max], the data's range when they are equal, widened by 1 each
    way when that is one point; both must be finite."""
    if lo == hi and x.numel() > 0:
        lo, hi = torch.stack([x.amin(), x.amax()]).to(torch.float32).tolist()  # one read, as the CPU's aminmax
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    if not lo < hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    return lo, hi


def _histc(x: torch.Tensor, bins: int, lo: float, hi: float, out: torch.Tensor) -> None:
    if not x.is_floating_point():
        raise DtypeError(f"histc: the input must be floating point (as on the CPU), got {x.dtype}; use x.float()")
    if bins <= 0:
        raise RuntimeError("torch.histc(): bins must be > 0")
    lo, hi = _edges(x, lo, hi)
    # the edges as the CPU holds them (linspace(lo, hi, bins + 1) in the input dtype, whose ends are lo and hi); the
    # bin of x computed in fp32, as the CPU does for float32 (its bfloat16 kernel rounds each step to bfloat16)
    flat = x.reshape(-1).to(torch.float32)
    left = torch.full((), lo, dtype=x.dtype, device=x.device).to(torch.float32)
    right = torch.full((), hi, dtype=x.dtype, device=x.device).to(torch.float32)
    inside = (flat >= left) & (flat <= right)
    pos = ((flat - left) * bins / (right - left)).trunc()
    pos = torch.where(inside, pos.clamp(0, bins - 1), 0).to(_I64)
    counts = torch.zeros(bins, dtype=torch.float32, device=x.device)
    counts.scatter_add_(0, pos, inside.to(torch.float32))
    out.copy_(counts)


@kernel("histc", kind="composite", ir=("amin", "amax", "sub", "mul", "div", "trunc", "where", "scatter"))
def histc(self: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> torch.Tensor:
    aten.histc.default(torch.empty(0, dtype=self.dtype, device="meta"), bins, min, max)  # PyTorch's own checks
    out = tensors.new([bins], None, self.dtype, _device(self))
    _histc(self, bins, float(min), float(max), out)
    return out


@kernel("histc.out", kind="composite", ir=("amin", "amax", "sub", "mul", "div", "trunc", "where", "scatter"))
def histc_out(self: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0, *, out: torch.Tensor) -> torch.Tensor:
    resize_out(out, torch.empty(bins, dtype=out.dtype, device="meta"))
    _histc(self, bins, float(min), float(max), out)
    return out
