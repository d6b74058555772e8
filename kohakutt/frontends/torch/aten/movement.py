"""Data movement and indexing on ``tt``: concatenation, padding, flips and rolls, gather / scatter, advanced
indexing, masks, sorting.

Each aten op runs IR movement ops (``kohakutt.ir.defs.movement``): values are moved exactly, the only rounding is
the store into the output's dtype, and the reductions of ``scatter_reduce`` / ``index_add`` / ``index_put(accumulate)``
add in fp32 in index order. Views (``permute``, ``narrow``, ``split_with_sizes``, ``unbind``, ``squeeze`` ...) stay
PyTorch's own and cost nothing; copies of them (``contiguous``, ``clone``, ``expand(...).contiguous()``, ``_to_copy``)
run the IR ``copy`` through ``_copy_from``.

Data-dependent shapes (``nonzero``, ``masked_select``, boolean-mask indexing, ``masked_scatter``,
``repeat_interleave`` of a tensor) read one count from the card: a synchronization, as on CUDA. Index tensors may be
int32 or int64 (the card computes them in 32 bits); indices of advanced indexing may live on the CPU, as CUDA allows.
An index out of range raises :class:`~kohakutt.errors.IndexOutOfRangeError` inside the queued op; it surfaces at the
next synchronization as a :class:`~kohakutt.errors.CommandError` naming the op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from kohakutt.errors import DtypeError
from kohakutt.frontends.torch import tensors
from kohakutt.frontends.torch.aten.registry import (
    KERNELS,
    Args,
    as_dtype,
    composite,
    computed,
    index_of,
    ir,
    kernel,
    overload,
    scratch,
    to_meta,
)
from kohakutt.ir.ops import ShapeError

aten = torch.ops.aten
_INDEX_DTYPES = (torch.int64, torch.int32)


# ---------------------------------------------------------------------------------------------------- helpers
def _start(a: Args, outs: list[torch.Tensor]) -> torch.Tensor:
    """The output of an op that updates a copy of ``self``: ``self`` itself in place, else ``outs[0]`` holding it."""
    dst = outs[0]
    if dst is not a.self:
        dst.copy_(a.self)
    return dst


def nonzero_rows(x: torch.Tensor, index: int) -> tuple[torch.Tensor, int]:
    """(the int32 coordinates [count, ndim] of x's non-zero elements in row-major order, count). Reads the count
    from the card: a synchronization."""
    if x.dim() == 0:
        rows, count = nonzero_rows(x.reshape(1), index)
        return rows[:, :0], count
    if x.numel() == 0:
        return scratch((0, x.dim()), torch.int32, index), 0
    rows = scratch((x.numel(), x.dim()), torch.int32, index)
    count = scratch((), torch.int32, index)
    ir("nonzero", [x], None, [rows, count], index)
    c = int(count.item())
    return rows[:c], c


def _check_index_dtype(t: torch.Tensor, op: str) -> None:
    if t.dtype not in _INDEX_DTYPES:
        raise DtypeError(f"{op}: indices must be an int64 or int32 tensor, got {t.dtype}; convert with .long()")


# ---------------------------------------------------------------------------------------------------- joining
@computed("cat", "cat.out", ir=("concat",))
def _cat(a: Args, outs: list[torch.Tensor]) -> None:
    dt = outs[0].dtype
    ir("concat", [as_dtype(t, dt) for t in a.tensors], {"dim": a.dim}, outs, a._index)


@computed("stack", "stack.out", ir=("stack",))
def _stack(a: Args, outs: list[torch.Tensor]) -> None:
    dt = outs[0].dtype
    ir("stack", [as_dtype(t, dt) for t in a.tensors], {"dim": a.dim}, outs, a._index)


# ---------------------------------------------------------------------------------------------------- padding
@computed("constant_pad_nd", "constant_pad_nd.out", ir=("pad",))
def _constant_pad(a: Args, outs: list[torch.Tensor]) -> None:
    ir("pad", [a.self], {"pads": tuple(a.pad), "mode": "constant", "value": a.value}, outs, a._index)


def pad_into(x: torch.Tensor, pads: Sequence[int], mode: str, out: torch.Tensor, index: int) -> None:
    """``F.pad(x, pads, mode)`` into ``out``. A negative reflect / replicate pad crops what the positive pads made
    (PyTorch's rule: out[j] = x[reflect(j - pad_left)]), so those pad first, then copy the cropped view."""
    pads = [int(p) for p in pads]
    if mode == "constant" or min(pads, default=0) >= 0:
        ir("pad", [x], {"pads": tuple(pads), "mode": mode}, [out], index)
        return
    grow = [max(p, 0) for p in pads]
    shape = list(x.shape)
    for k in range(len(pads) // 2):
        shape[-1 - k] += grow[2 * k] + grow[2 * k + 1]
    padded = scratch(shape, x.dtype, index)
    ir("pad", [x], {"pads": tuple(grow), "mode": mode}, [padded], index)
    view = padded
    for k in range(len(pads) // 2):
        lo, hi = max(-pads[2 * k], 0), max(-pads[2 * k + 1], 0)
        view = view.narrow(view.dim() - 1 - k, lo, shape[-1 - k] - lo - hi)
    out.copy_(view)


def _pad(mode: str) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        pad_into(a.self, a.padding, mode, outs[0], a._index)

    return impl


def _pad_backward(mode: str, k: int) -> Callable[[Args, list[torch.Tensor]], None]:
    """The gradient of a ``k``-d reflect / replicate pad: the source position of every padded element is the same
    pad applied to an arange of the input positions (on the card), and the gradient scatter-adds through it."""

    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        index, grad, x = a._index, a.grad_output, a.self
        sin, sout = list(x.shape[x.dim() - k :]), list(grad.shape[grad.dim() - k :])
        n_in, n_out = _numel(sin), _numel(sout)
        lead = _numel(grad.shape[: grad.dim() - k])
        if not n_in or not lead:
            outs[0].zero_()
            return
        ids = scratch([n_in], torch.int32, index)
        ir("arange", [], {"start": 0, "end": n_in, "step": 1, "dtype": "int32"}, [ids], index)
        pos = scratch(sout, torch.int32, index)
        pad_into(ids.view(sin), a.padding, mode, pos, index)
        acc = outs[0] if outs[0].is_contiguous() else scratch(x.shape, outs[0].dtype, index)
        flat = acc.view(lead, n_in)
        flat.zero_()
        src = grad.reshape(lead, n_out)
        ir(
            "scatter",
            [flat, pos.view(1, n_out).expand(lead, n_out), src],
            {"dim": 1, "reduce": "sum", "include_self": True},
            [flat],
            index,
        )
        if acc is not outs[0]:
            outs[0].copy_(acc)

    return impl


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


for _k in (1, 2, 3):
    for _mode, _aten in (("reflect", "reflection"), ("replicate", "replication")):
        computed(f"{_aten}_pad{_k}d", f"{_aten}_pad{_k}d.out", ir=("pad",))(_pad(_mode))
        composite(f"{_aten}_pad{_k}d_backward", f"{_aten}_pad{_k}d_backward.grad_input",
                  ir_ops=("arange", "pad", "scatter"))(_pad_backward(_mode, _k))  # fmt: skip


# ---------------------------------------------------------------------------------------------------- reordering
@computed("repeat", "repeat.out", ir=("repeat",))
def _repeat(a: Args, outs: list[torch.Tensor]) -> None:
    ir("repeat", [a.self], {"repeats": tuple(a.repeats)}, outs, a._index)


@computed("flip", "flip.out", ir=("flip",))
def _flip(a: Args, outs: list[torch.Tensor]) -> None:
    ir("flip", [a.self], {"dims": tuple(a.dims)}, outs, a._index)


@computed("roll", "roll.out", ir=("roll",))
def _roll(a: Args, outs: list[torch.Tensor]) -> None:
    dims = tuple(a.dims) if a.dims else None
    ir("roll", [a.self], {"shifts": tuple(a.shifts), "dims": dims}, outs, a._index)


def _triangle(op: str) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(op, [a.self], {"diagonal": a.diagonal}, outs, a._index)

    return impl


computed("tril", "tril.out", "tril_", ir=("tril",))(_triangle("tril"))
computed("triu", "triu.out", "triu_", ir=("triu",))(_triangle("triu"))


# ---------------------------------------------------------------------------------------------------- scatters of views
@composite("slice_scatter", "slice_scatter.out", ir_ops=("copy",))
def _slice_scatter(a: Args, outs: list[torch.Tensor]) -> None:
    aten.slice.Tensor(_start(a, outs), a.dim, a.start, a.end, a.step).copy_(a.src)


@composite("select_scatter", "select_scatter.out", ir_ops=("copy",))
def _select_scatter(a: Args, outs: list[torch.Tensor]) -> None:
    _start(a, outs).select(a.dim, a.index).copy_(a.src)


@composite("diagonal_scatter", "diagonal_scatter.out", ir_ops=("copy",))
def _diagonal_scatter(a: Args, outs: list[torch.Tensor]) -> None:
    _start(a, outs).diagonal(a.offset, a.dim1, a.dim2).copy_(a.src)


@composite("as_strided_scatter", "as_strided_scatter.out", ir_ops=("copy",))
def _as_strided_scatter(a: Args, outs: list[torch.Tensor]) -> None:
    _start(a, outs).as_strided(a.size, a.stride, a.storage_offset).copy_(a.src)


# ---------------------------------------------------------------------------------------------------- gather, scatter
def _as_1d(a: Args, outs: list[torch.Tensor], names: Sequence[str]) -> tuple[Args, list[torch.Tensor]]:
    """PyTorch lets gather / scatter mix 0-d and 1-d tensors (a 0-d tensor counts as one element along dim 0);
    the IR wants equal ranks, so such calls run on 1-d views."""
    ts = [a[n] for n in names if isinstance(a[n], torch.Tensor)]
    if all(t.dim() == ts[0].dim() for t in ts) or any(t.dim() > 1 for t in ts):
        return a, outs
    flat = {n: a[n].reshape(-1) for n in names if isinstance(a[n], torch.Tensor)}
    return Args(a, **flat, dim=0), [o.view(-1) for o in outs]


@computed("gather", "gather.out", ir=("gather",))
def _gather(a: Args, outs: list[torch.Tensor]) -> None:
    a, outs = _as_1d(a, outs, ("self", "index"))
    ir("gather", [a.self, a.index], {"dim": a.dim}, outs, a._index)


_SCATTER_REDUCE = {None: None, "add": "sum", "multiply": "prod"}


def _scatter(a: Args, outs: list[torch.Tensor]) -> None:
    a, outs = _as_1d(a, outs, ("self", "index", "src") if "src" in a else ("self", "index"))
    src = a["src"] if "src" in a else a["value"]
    reduce = a.get("reduce")
    if reduce not in _SCATTER_REDUCE:
        raise ShapeError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r} (scatter_reduce takes more)")
    ir("scatter", [a.self, a.index, src], {"dim": a.dim, "reduce": _SCATTER_REDUCE[reduce]}, outs, a._index)


computed(
    *(f"scatter{s}.{ov}" for s in ("", "_") for ov in ("src", "value", "reduce", "value_reduce")),
    *(f"scatter.{ov}_out" for ov in ("src", "value", "reduce", "value_reduce")),
    ir=("scatter",),
)(_scatter)


@computed("scatter_add", "scatter_add.out", "scatter_add_", ir=("scatter",))
def _scatter_add(a: Args, outs: list[torch.Tensor]) -> None:
    a, outs = _as_1d(a, outs, ("self", "index", "src"))
    ir("scatter", [a.self, a.index, a.src], {"dim": a.dim, "reduce": "sum", "include_self": True}, outs, a._index)


@computed("scatter_reduce.two", "scatter_reduce.two_out", "scatter_reduce_.two", ir=("scatter",))
def _scatter_reduce(a: Args, outs: list[torch.Tensor]) -> None:
    if a.reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ShapeError(f"scatter_reduce: reduce must be one of sum, prod, mean, amax, amin; got {a.reduce!r}")
    a, outs = _as_1d(a, outs, ("self", "index", "src"))
    attrs = {"dim": a.dim, "reduce": a.reduce, "include_self": bool(a.include_self)}
    ir("scatter", [a.self, a.index, a.src], attrs, outs, a._index)


# ---------------------------------------------------------------------------------------------------- advanced indexing
def prepare_indices(x: torch.Tensor, indices: Sequence[torch.Tensor | None], index: int,
                    op: str = "index") -> tuple[tuple[int, ...], list[torch.Tensor]]:  # fmt: skip
    """torch's ``indices`` list (None = a full slice; bool / uint8 masks; int tensors, on tt or the CPU) as the IR's
    (increasing dims, one int tensor on tt per dim). A mask becomes its nonzero coordinates (a synchronization)."""
    dims: list[int] = []
    out: list[torch.Tensor] = []
    d = 0
    for k, i in enumerate(indices):
        if i is None:
            d += 1
            continue
        if i.device.type == "cpu":
            i = i.to(torch.device("tt", index))
        elif i.device.type != "tt" or (i.device.index or 0) != index:
            raise RuntimeError(
                f"indices should be either on cpu or on the same device as the indexed tensor (tt:{index})"
            )
        if i.dtype in (torch.bool, torch.uint8):
            if i.dim() == 0:
                raise ShapeError(f"{op}: a 0-d boolean index reached the kernel; index with x[None][mask] instead")
            if d + i.dim() > x.dim() or tuple(i.shape) != tuple(x.shape[d : d + i.dim()]):
                raise IndexError(
                    f"The shape of the mask {list(i.shape)} at index {k} does not match the shape of the indexed "
                    f"tensor {list(x.shape)} at index {d}"
                )
            rows, _ = nonzero_rows(i, index)
            for j in range(i.dim()):
                dims.append(d + j)
                out.append(rows[:, j])
            d += i.dim()
            continue
        if i.dtype not in _INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        dims.append(d)
        out.append(i)
        d += 1
    if d > x.dim():
        raise IndexError(f"too many indices for tensor of dimension {x.dim()} (got {d})")
    return tuple(dims), out


def _meta_indices(dims: Sequence[int], idx: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """The int index list of (dims, idx) as meta tensors at their positions, for PyTorch's shape rules."""
    found: set[str] = set()
    out: list[torch.Tensor | None] = [None] * (max(dims) + 1 if dims else 0)
    for d, i in zip(dims, idx):
        out[d] = to_meta(i, found)
    return out


def index_tensor(
    x: torch.Tensor, indices: Sequence[torch.Tensor | None], out: torch.Tensor | None = None
) -> torch.Tensor:
    """``x[indices]`` (advanced indexing) into ``out`` or a new tt tensor."""
    index = x.device.index or 0
    dims, idx = prepare_indices(x, indices, index)
    found: set[str] = set()
    meta = aten.index.Tensor(to_meta(x, found), _meta_indices(dims, idx))
    if out is None:
        out = tensors.new_like(meta, index)
    elif out.shape != meta.shape:
        out.resize_(meta.shape)
    if not idx:
        out.copy_(x)
        return out
    ir("index", [x, *idx], {"dims": dims}, [out], index)
    return out


@kernel("index.Tensor", "_unsafe_index.Tensor", ir=("nonzero", "index"))
def index(self: torch.Tensor, indices: list[torch.Tensor | None]) -> torch.Tensor:
    return index_tensor(self, indices)


@kernel("index.Tensor_out", ir=("nonzero", "index"))
def index_out(self: torch.Tensor, indices: list[torch.Tensor | None], *, out: torch.Tensor) -> torch.Tensor:
    return index_tensor(self, indices, out)


def index_put_into(dst: torch.Tensor, indices: Sequence[torch.Tensor | None], values: torch.Tensor,
                   accumulate: bool) -> torch.Tensor:  # fmt: skip
    """``dst[indices] = values`` (``+=`` with ``accumulate``: every duplicate adds, fp32 in index order)."""
    index = index_of(dst, values)
    if values.dim() and values.dtype != dst.dtype:
        raise DtypeError(
            f"Index put requires the source and destination dtypes match, got {dst.dtype} for the destination "
            f"and {values.dtype} for the source"
        )
    if accumulate and dst.dtype == torch.bool:
        raise DtypeError("index_put with accumulate=True on a bool tensor: convert it to int32 first")
    dims, idx = prepare_indices(dst, indices, index, "index_put")
    found: set[str] = set()
    aten.index_put(to_meta(dst, found), _meta_indices(dims, idx), to_meta(values, found), accumulate)  # torch's checks
    values = as_dtype(values, dst.dtype)
    if not idx:
        if accumulate:
            dst.add_(values)
        else:
            dst.copy_(values)
        return dst
    ir("index_put", [dst, values, *idx], {"dims": dims, "accumulate": bool(accumulate)}, [dst], index)
    return dst


@kernel("index_put_", "_index_put_impl_", "_unsafe_index_put", ir=("nonzero", "index_put"))
def index_put_(self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor,
               accumulate: bool = False, unsafe: bool = False) -> torch.Tensor:  # fmt: skip
    return index_put_into(self, indices, values, accumulate)


@kernel("index_put", ir=("copy", "nonzero", "index_put"))
def index_put(self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor,
              accumulate: bool = False) -> torch.Tensor:  # fmt: skip
    return index_put_into(self.clone(), indices, values, accumulate)


@kernel("index_put.out", ir=("copy", "nonzero", "index_put"))
def index_put_out(self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor,
                  accumulate: bool = False, *, out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    if out.shape != self.shape:
        out.resize_(self.shape)
    out.copy_(self)
    return index_put_into(out, indices, values, accumulate)


@computed("index_select", "index_select.out", ir=("index_select",))
def _index_select(a: Args, outs: list[torch.Tensor]) -> None:
    _check_index_dtype(a.index, "index_select")
    ir("index_select", [a.self, a.index], {"dim": a.dim}, outs, a._index)


@computed("take", "take.out", ir=("index",))
def _take(a: Args, outs: list[torch.Tensor]) -> None:
    _check_index_dtype(a.index, "take")
    ir("index", [a.self.reshape(-1), a.index], {"dims": (0,)}, outs, a._index)


def _along(dst: torch.Tensor, dim: int, index: torch.Tensor, values: Any, accumulate: bool) -> None:
    """``dst`` with ``values`` put (or added) at positions ``index`` of dim ``dim``: index_copy / index_add /
    index_fill through the IR index_put."""
    _check_index_dtype(index, "index_add / index_copy / index_fill")
    if dst.dim() == 0:
        dst = dst.view(1)
        if isinstance(values, torch.Tensor) and values.dim() == 0:
            values = values.view(1)
    attrs = {"dims": (dim % dst.dim(),), "accumulate": accumulate}
    ir("index_put", [dst, values, index.reshape(-1)], attrs, [dst], dst.device.index or 0)


@computed("index_add", "index_add.out", "index_add_", ir=("mul", "index_put"))
def _index_add(a: Args, outs: list[torch.Tensor]) -> None:
    dst = _start(a, outs)
    alpha = a.get("alpha")
    src = a.source if alpha is None or alpha == 1 else a.source * alpha
    _along(dst, a.dim, a.index, as_dtype(src, dst.dtype), True)


@computed("index_copy", "index_copy.out", "index_copy_", ir=("index_put",))
def _index_copy(a: Args, outs: list[torch.Tensor]) -> None:
    dst = _start(a, outs)
    _along(dst, a.dim, a.index, as_dtype(a.source, dst.dtype), False)


@computed(
    "index_fill.int_Scalar", "index_fill.int_Tensor", "index_fill.int_Scalar_out", "index_fill.int_Tensor_out",
    "index_fill_.int_Scalar", "index_fill_.int_Tensor", ir=("index_put",),
)  # fmt: skip
def _index_fill(a: Args, outs: list[torch.Tensor]) -> None:
    dst = _start(a, outs)
    value = a.value
    if isinstance(value, torch.Tensor):
        if value.dim():
            raise ShapeError(f"index_fill_ only supports a 0-dimensional value tensor, got {value.dim()} dimensions")
        value = value.item() if value.device.type == "cpu" else as_dtype(value, dst.dtype)
    _along(dst, a.dim, a.index, value, False)


def _cpu_value_as_scalar(tensor_name: str, scalar_name: str) -> None:
    """Let the ``Tensor value`` overload ``tensor_name`` take a 0-d CPU value (as CUDA does) by calling the
    ``Scalar value`` overload ``scalar_name`` with its number; PyTorch's meta kernels refuse the CPU tensor."""
    tensor_fn, scalar_fn = KERNELS[tensor_name].fn, KERNELS[scalar_name].fn
    pos = [a.name for a in overload(tensor_name)._schema.arguments].index("value")

    def run(*args: Any, **kwargs: Any) -> Any:
        value = args[pos] if pos < len(args) else kwargs.get("value")
        if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() == 0:
            if pos < len(args):
                args = (*args[:pos], value.item(), *args[pos + 1 :])
            else:
                kwargs = {**kwargs, "value": value.item()}
            return scalar_fn(*args, **kwargs)
        return tensor_fn(*args, **kwargs)

    run.__name__ = tensor_fn.__name__
    KERNELS[tensor_name].fn = run


for _packet in ("index_fill", "index_fill_"):
    _cpu_value_as_scalar(f"{_packet}.int_Tensor", f"{_packet}.int_Scalar")
_cpu_value_as_scalar("index_fill.int_Tensor_out", "index_fill.int_Scalar_out")


# ---------------------------------------------------------------------------------------------------- masks
@computed(
    "masked_fill.Scalar", "masked_fill.Tensor", "masked_fill.Scalar_out", "masked_fill.Tensor_out",
    "masked_fill_.Scalar", "masked_fill_.Tensor", ir=("masked_fill",),
)  # fmt: skip
def _masked_fill(a: Args, outs: list[torch.Tensor]) -> None:
    if a.mask.dtype != torch.bool:
        raise DtypeError(f"masked_fill only supports boolean masks, but got mask with dtype {a.mask.dtype}")
    x = a.self if a.self.shape == outs[0].shape else a.self.expand(outs[0].shape)  # functional forms broadcast
    ir("masked_fill", [x, a.mask, a.value], None, outs, a._index)


for _packet, _ov in (("masked_fill", ""), ("masked_fill_", ""), ("masked_fill", "_out")):
    _cpu_value_as_scalar(f"{_packet}.Tensor{_ov}", f"{_packet}.Scalar{_ov}")


@composite("masked_scatter", "masked_scatter.out", "masked_scatter_", ir_ops=("nonzero", "index_put"))
def _masked_scatter(a: Args, outs: list[torch.Tensor]) -> None:
    if a.mask.dtype != torch.bool:
        raise DtypeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {a.mask.dtype}")
    if a.source.dtype != outs[0].dtype:
        raise DtypeError(f"masked_scatter: expected source of dtype {outs[0].dtype}, got {a.source.dtype}")
    dst = _start(a, outs)
    view = dst.view(1) if dst.dim() == 0 else dst
    mask = a.mask.reshape(1) if dst.dim() == 0 else a.mask.expand(view.shape)
    rows, count = nonzero_rows(mask, a._index)
    if count > a.source.numel():
        raise ShapeError(f"masked_scatter: the mask selects {count} elements, but source has only {a.source.numel()}")
    if not count:
        return
    values = a.source.reshape(-1)[:count]
    cols = [rows[:, j] for j in range(view.dim())]
    ir("index_put", [view, values, *cols], {"dims": tuple(range(view.dim()))}, [view], a._index)


def masked_select_into(x: torch.Tensor, mask: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """The elements of ``x`` (broadcast with ``mask``) where ``mask`` is true, as a new 1-D tensor (or in ``out``)."""
    index = index_of(x, mask)
    if mask.dtype != torch.bool:
        raise DtypeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    n = _numel(shape)
    values = scratch((n,), x.dtype, index)
    count = 0
    if n:
        cnt = scratch((), torch.int32, index)
        ir("masked_select", [x, mask], None, [values, cnt], index)
        count = int(cnt.item())
    if out is None:
        out = scratch((count,), x.dtype, index)
    elif tuple(out.shape) != (count,):
        out.resize_((count,))
    if count:
        out.copy_(values[:count])
    return out


@kernel("masked_select", ir=("masked_select", "copy"))
def masked_select(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_select_into(self, mask, None)


@kernel("masked_select.out", ir=("masked_select", "copy"))
def masked_select_out(self: torch.Tensor, mask: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return masked_select_into(self, mask, out)


@kernel("nonzero", ir=("nonzero", "copy"))
def nonzero(self: torch.Tensor) -> torch.Tensor:
    index = self.device.index or 0
    rows, count = nonzero_rows(self, index)
    out = scratch((count, self.dim()), torch.int64, index)
    if count and self.dim():
        out.copy_(rows)
    return out


@kernel("nonzero.out", ir=("nonzero", "copy"))
def nonzero_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    rows, count = nonzero_rows(self, self.device.index or 0)
    if tuple(out.shape) != (count, self.dim()):
        out.resize_((count, self.dim()))
    if count and self.dim():
        out.copy_(rows)
    return out


def _nonzero_static(self: torch.Tensor, size: int, fill_value: int, out: torch.Tensor | None) -> torch.Tensor:
    index = self.device.index or 0
    if size < 0:
        raise ShapeError(f"nonzero_static: 'size' must be an non-negative integer, got {size}")
    rows, count = nonzero_rows(self, index)
    if out is None:
        out = scratch((size, self.dim()), torch.int64, index)
    elif tuple(out.shape) != (size, self.dim()):
        out.resize_((size, self.dim()))
    if not self.dim() or not size:
        return out
    n = min(count, size)
    if n < size:
        out[n:].fill_(fill_value)
    if n:
        out[:n].copy_(rows[:n])
    return out


@kernel("nonzero_static", ir=("nonzero", "copy", "full"))
def nonzero_static(self: torch.Tensor, *, size: int, fill_value: int = -1) -> torch.Tensor:
    return _nonzero_static(self, size, fill_value, None)


@kernel("nonzero_static.out", ir=("nonzero", "copy", "full"))
def nonzero_static_out(self: torch.Tensor, *, size: int, fill_value: int = -1, out: torch.Tensor) -> torch.Tensor:
    return _nonzero_static(self, size, fill_value, out)


# ---------------------------------------------------------------------------------------------------- repeat_interleave
def _repeat_interleave(repeats: torch.Tensor, output_size: int | None, out: torch.Tensor | None) -> torch.Tensor:
    """``repeat_interleave(repeats)``: i repeated repeats[i] times (int64). The output size is read from the card
    (a synchronization) unless given."""
    index = repeats.device.index or 0
    if repeats.dim() != 1:
        raise ShapeError(f"repeat_interleave: repeats must be a 1-D tensor, got {repeats.dim()} dims")
    _check_index_dtype(repeats, "repeat_interleave")
    n = repeats.shape[0]
    if output_size is None:
        total = scratch((), torch.int64, index)
        if n:
            ir("sum", [repeats], {"dims": None}, [total], index)
        else:
            total.zero_()
        output_size = int(total.item())
    if out is None:
        out = scratch((output_size,), torch.int64, index)
    elif tuple(out.shape) != (output_size,):
        out.resize_((output_size,))
    if not n or not output_size:
        return out
    ids = scratch((n,), torch.int32, index)
    ir("arange", [], {"start": 0, "end": n, "step": 1, "dtype": "int32"}, [ids], index)
    ir("repeat_interleave", [ids, repeats], {"dim": 0, "output_size": output_size}, [out], index)
    return out


@kernel("repeat_interleave.Tensor", ir=("sum", "arange", "repeat_interleave"))
def repeat_interleave_tensor(repeats: torch.Tensor, *, output_size: int | None = None) -> torch.Tensor:
    return _repeat_interleave(repeats, output_size, None)


@kernel("repeat_interleave.Tensor_out", ir=("sum", "arange", "repeat_interleave"))
def repeat_interleave_tensor_out(repeats: torch.Tensor, *, output_size: int | None = None,
                                 out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    return _repeat_interleave(repeats, output_size, out)


# ---------------------------------------------------------------------------------------------------- sort, topk
@computed("sort", "sort.stable", "sort.values", "sort.values_stable", ir=("sort",))
def _sort(a: Args, outs: list[torch.Tensor]) -> None:
    attrs = {"dim": a.get("dim", -1), "descending": bool(a.get("descending")), "stable": bool(a.get("stable"))}
    ir("sort", [a.self], attrs, outs, a._index)


@computed("topk", "topk.values", ir=("topk",))
def _topk(a: Args, outs: list[torch.Tensor]) -> None:
    attrs = {"k": a.k, "dim": a.dim, "largest": bool(a.largest), "sorted": bool(a.sorted)}
    ir("topk", [a.self], attrs, outs, a._index)


# ---------------------------------------------------------------------------------------------------- channel_shuffle
@composite("channel_shuffle", "channel_shuffle.out", ir_ops=("permute", "copy"))
def _channel_shuffle(a: Args, outs: list[torch.Tensor]) -> None:
    """(N, C, *) -> (N, groups, C / groups, *) -> swap the two channel dims -> (N, C, *): one permuting copy."""
    x, g = a.self, int(a.groups)
    if outs[0].numel():
        outs[0].copy_(x.reshape(x.shape[0], g, x.shape[1] // g, *x.shape[2:]).transpose(1, 2).reshape(x.shape))
