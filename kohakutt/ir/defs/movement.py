"""IR ops that move data: views materialized, shapes changed, indexing, sorting, and tensor creation.

Values are moved exactly: the only rounding is the final store into the output's dtype (for a bfloat8_b output,
the re-quantization of each 16-value face row). Index operands are integer tensors (int32 on the card; the
frontends convert int64).

Data-dependent shapes (``nonzero``, ``masked_select``) follow one pattern: the op returns its result at an upper-bound
shape plus a 0-d int32 ``count``; the frontend reads ``count`` (a synchronization) and narrows the result with a
``slice``. The rows past ``count`` hold zeros.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kohakutt.errors import DtypeError, IntegerOverflowError
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, broadcast_shapes, define, norm_dim

INDEX_DTYPES = (DType.INT32, DType.INT64, DType.UINT32, DType.UINT16, DType.UINT8)  # int64 past int32: out of range
REDUCTIONS = (None, "sum", "prod", "mean", "amax", "amin")
PAD_MODES = ("constant", "reflect", "replicate", "circular")


# ----------------------------------------------------------------------------------------------------- helpers
def tensor_arg(inputs: Sequence[Spec], i: int, op: str, name: str = "x") -> TensorSpec:
    s = inputs[i]
    if not isinstance(s, TensorSpec):
        raise ShapeError(f"{op}: operand {name!r} must be a tensor, not the Python number {s}")
    return s


def index_arg(inputs: Sequence[Spec], i: int, op: str, name: str = "index") -> TensorSpec:
    s = tensor_arg(inputs, i, op, name)
    if s.dtype not in INDEX_DTYPES:
        raise DtypeError(
            f"{op}: {name!r} must be an integer tensor (int32 on the card), got {s.dtype.value}; "
            "convert int64 / float indices with typecast first"
        )
    return s


def like(x: TensorSpec, shape: Sequence[int], dtype: DType | None = None) -> TensorSpec:
    """A spec of ``shape`` in x's dtype (or ``dtype``) and layout; block floats are always tiles."""
    dt = dtype or x.dtype
    return TensorSpec(tuple(int(s) for s in shape), dt, Layout.TILE if dt.is_block else x.layout)


def ints(value: Any, op: str, what: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise ShapeError(f"{op}: {what} must be an int or a sequence of ints, got {value!r}") from None
    return out


def dims_of(dims: Any, ndim: int, op: str) -> tuple[int, ...]:
    """``dims`` normalized against ``ndim``, order kept; repeats are an error."""
    out = tuple(norm_dim(d, ndim, op) for d in ints(dims, op, "dims"))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: dims {dims!r} name a dimension twice")
    return out


def slice_range(size: int, start: int | None, end: int | None, step: int, op: str = "slice") -> range:
    """The indices ``x[start:end:step]`` takes along a dim of ``size``: Python's normalization (negative bounds
    count from the end, over-range bounds clamp). ``step`` must be positive, as in torch."""
    if step <= 0:
        raise ShapeError(f"{op}: step must be positive, got {step}; use flip for a reversed order")
    return range(*slice(start, end, step).indices(size))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def reshape_shape(shape: Any, numel: int, op: str = "reshape") -> tuple[int, ...]:
    """``shape`` with its one allowed -1 resolved for ``numel`` elements."""
    shape = ints(shape, op, "shape")
    if shape.count(-1) > 1 or any(s < -1 for s in shape):
        raise ShapeError(f"{op}: shape {shape} may hold one -1 and otherwise sizes >= 0")
    if -1 in shape:
        rest = _numel([s for s in shape if s != -1])
        if rest == 0 or numel % rest:
            raise ShapeError(f"{op}: cannot infer the -1 in {shape} for {numel} elements")
        shape = tuple(numel // rest if s == -1 else s for s in shape)
    if _numel(shape) != numel:
        raise ShapeError(f"{op}: shape {shape} holds {_numel(shape)} elements, the input has {numel}")
    return shape


def expand_shape(src: Sequence[int], shape: Any, op: str = "expand") -> tuple[int, ...]:
    """torch.expand's rule: -1 keeps a size, size-1 dims stretch, new dims go in front."""
    shape = ints(shape, op, "shape")
    if len(shape) < len(src):
        raise ShapeError(f"{op}: target {shape} has fewer dims than the input {tuple(src)}")
    lead = len(shape) - len(src)
    out = []
    for i, s in enumerate(shape):
        if i < lead:
            if s < 0:
                raise ShapeError(f"{op}: a new leading dim cannot be -1 (target {shape})")
            out.append(s)
            continue
        have = src[i - lead]
        if s == -1 or s == have:
            out.append(have)
        elif have == 1 and s >= 0:
            out.append(s)
        else:
            raise ShapeError(f"{op}: cannot expand size {have} to {s} at dim {i} (input {tuple(src)}, target {shape})")
    return tuple(out)


def pad_widths(shape: Sequence[int], pads: Any, mode: str, op: str = "pad") -> list[tuple[int, int]]:
    """torch.nn.functional.pad's flat list (last dim first: left, right, then the dim before...) as per-dim
    (before, after) pairs, checked for ``mode``."""
    pads = ints(pads, op, "pads")
    if len(pads) % 2 or len(pads) > 2 * len(shape):
        raise ShapeError(f"{op}: pads {pads} must have an even length of at most 2 x ndim = {2 * len(shape)}")
    if mode not in PAD_MODES:
        raise ShapeError(f"{op}: mode {mode!r} is not one of {PAD_MODES}")
    widths = [(0, 0)] * len(shape)
    for k in range(len(pads) // 2):
        widths[len(shape) - 1 - k] = (pads[2 * k], pads[2 * k + 1])
    for d, (lo, hi) in enumerate(widths):
        n = shape[d]
        if n + lo + hi < 0:
            raise ShapeError(f"{op}: pads ({lo}, {hi}) leave a negative size at dim {d} (size {n})")
        if mode != "constant" and (lo < 0 or hi < 0):
            raise ShapeError(f"{op}: negative pads crop, and only mode 'constant' crops; got {pads} with {mode!r}")
        if mode == "reflect" and (lo or hi) and (lo >= n or hi >= n):
            raise ShapeError(f"{op}: reflect pads ({lo}, {hi}) must be smaller than the size {n} of dim {d}")
        if mode == "replicate" and (lo or hi) and n == 0:
            raise ShapeError(f"{op}: replicate cannot pad the empty dim {d}")
        if mode == "circular" and (lo > n or hi > n):
            raise ShapeError(f"{op}: circular pads ({lo}, {hi}) cannot exceed the size {n} of dim {d}")
    return widths


def advanced_index_shape(
    x: Sequence[int], dims: Sequence[int], index_shapes: Sequence[Sequence[int]], op: str = "index"
) -> tuple[int, ...]:
    """The result shape of ``x[..]`` with index tensors at ``dims`` (slices elsewhere), by NumPy's / torch's rule:
    the broadcast index shape takes the place of adjacent indexed dims, or goes first when they are apart."""
    try:
        b = broadcast_shapes(*index_shapes)
    except ShapeError:
        raise ShapeError(f"{op}: index shapes {[tuple(s) for s in index_shapes]} do not broadcast") from None
    rest = [x[d] for d in range(len(x)) if d not in dims]
    adjacent = list(dims) == list(range(dims[0], dims[0] + len(dims)))
    if adjacent:
        return tuple(x[: dims[0]]) + b + tuple(x[dims[-1] + 1 :])
    return b + tuple(rest)


def _index_dims(op: str, x: TensorSpec, dims: Any, n: int) -> tuple[int, ...]:
    ds = dims_of(dims, x.ndim, op)
    if len(ds) != n or not n:
        raise ShapeError(f"{op}: give one index tensor per entry of dims; got {n} tensor(s) for dims {dims!r}")
    if list(ds) != sorted(ds):
        raise ShapeError(f"{op}: dims {dims!r} must be increasing (the frontend orders the index tensors)")
    return ds


# ------------------------------------------------------------------------------------------------- inference
def _permute(inputs, attrs):
    x = tensor_arg(inputs, 0, "permute")
    dims = dims_of(attrs["dims"], x.ndim, "permute")
    if len(dims) != x.ndim:
        raise ShapeError(f"permute: dims {attrs['dims']!r} is not a permutation of the {x.ndim} dims")
    return [like(x, [x.shape[d] for d in dims])]


def _transpose_decomp(b, x, dim0, dim1):
    nd = x.spec.ndim
    order = list(range(nd))
    if nd:
        d0, d1 = norm_dim(dim0, nd, "transpose"), norm_dim(dim1, nd, "transpose")
        order[d0], order[d1] = order[d1], order[d0]
    return b.add("permute", x, dims=tuple(order))


def _transpose(inputs, attrs):
    x = tensor_arg(inputs, 0, "transpose")
    shape = list(x.shape)
    if x.ndim:
        d0, d1 = norm_dim(attrs["dim0"], x.ndim, "transpose"), norm_dim(attrs["dim1"], x.ndim, "transpose")
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return [like(x, shape)]


def _reshape(inputs, attrs):
    x = tensor_arg(inputs, 0, "reshape")
    return [like(x, reshape_shape(attrs["shape"], x.numel))]


def _as_strided(inputs, attrs):
    x = tensor_arg(inputs, 0, "as_strided")
    size, stride = ints(attrs["size"], "as_strided", "size"), ints(attrs["stride"], "as_strided", "stride")
    off = int(attrs["offset"])
    if len(size) != len(stride) or any(s < 0 for s in size + stride) or off < 0:
        raise ShapeError(
            f"as_strided: size {size} and stride {stride} need equal lengths, and sizes, strides and "
            f"the offset {off} must be >= 0"
        )
    if _numel(size) and off + sum((n - 1) * s for n, s in zip(size, stride)) >= x.numel:
        raise ShapeError(
            f"as_strided: size {size}, stride {stride}, offset {off} reach past the input's {x.numel} elements"
        )
    return [like(x, size)]


def _expand(inputs, attrs):
    x = tensor_arg(inputs, 0, "expand")
    return [like(x, expand_shape(x.shape, attrs["shape"]))]


def _slice(inputs, attrs):
    x = tensor_arg(inputs, 0, "slice")
    if not x.ndim:
        raise ShapeError("slice: a 0-d tensor has no dim to slice")
    d = norm_dim(attrs["dim"], x.ndim, "slice")
    r = slice_range(x.shape[d], attrs["start"], attrs["end"], int(attrs["step"]))
    return [like(x, (*x.shape[:d], len(r), *x.shape[d + 1 :]))]


def _select(inputs, attrs):
    x = tensor_arg(inputs, 0, "select")
    if not x.ndim:
        raise ShapeError("select: a 0-d tensor has no dim to select from")
    d = norm_dim(attrs["dim"], x.ndim, "select")
    i = int(attrs["index"])
    if not -x.shape[d] <= i < x.shape[d]:
        raise ShapeError(f"select: index {i} is out of range for dim {d} of size {x.shape[d]}")
    return [like(x, x.shape[:d] + x.shape[d + 1 :])]


def concat_parts(inputs: Sequence[Spec], dim: int, op: str = "concat") -> tuple[list[int], int]:
    """The positions of the operands that take part (torch skips 1-D empty tensors) and the normalized dim."""
    specs = [tensor_arg(inputs, i, op, f"xs[{i}]") for i in range(len(inputs))]
    if not specs:
        raise ShapeError(f"{op} needs at least one tensor")
    keep = [i for i, s in enumerate(specs) if s.shape != (0,)] or [0]
    ref = specs[keep[0]]
    if not ref.ndim:
        raise ShapeError(f"{op}: 0-d tensors cannot be concatenated; reshape them to 1-D first")
    d = norm_dim(dim, ref.ndim, op)
    for i in keep:
        s = specs[i]
        if s.ndim != ref.ndim or any(a != b for k, (a, b) in enumerate(zip(s.shape, ref.shape)) if k != d):
            raise ShapeError(f"{op}: xs[{i}] has shape {s.shape}, which does not match {ref.shape} outside dim {d}")
    return keep, d


def _concat(inputs, attrs):
    keep, d = concat_parts(inputs, attrs["dim"])
    ref = inputs[keep[0]]
    shape = list(ref.shape)
    shape[d] = sum(inputs[i].shape[d] for i in keep)
    return [like(ref, shape, promote(*(s.dtype for s in inputs)))]


def _stack(inputs, attrs):
    specs = [tensor_arg(inputs, i, "stack", f"xs[{i}]") for i in range(len(inputs))]
    ref = specs[0]
    for i, s in enumerate(specs):
        if s.shape != ref.shape:
            raise ShapeError(f"stack: xs[{i}] has shape {s.shape}, xs[0] has {ref.shape}; all must match")
    d = norm_dim(attrs["dim"], ref.ndim + 1, "stack")
    return [like(ref, (*ref.shape[:d], len(specs), *ref.shape[d:]), promote(*(s.dtype for s in specs)))]


def split_sizes(size: int, split_size: Any, op: str = "split") -> list[int]:
    if isinstance(split_size, int) and not isinstance(split_size, bool):
        if split_size <= 0 and size:
            raise ShapeError(f"{op}: split_size must be positive, got {split_size}")
        if not size:
            return [0]
        return [min(split_size, size - s) for s in range(0, size, split_size)]
    sizes = list(ints(split_size, op, "split_size"))
    if sum(sizes) != size or any(s < 0 for s in sizes):
        raise ShapeError(f"{op}: sizes {sizes} must be >= 0 and sum to the dim's size {size}")
    return sizes


def _split(inputs, attrs):
    x = tensor_arg(inputs, 0, "split")
    if not x.ndim:
        raise ShapeError("split: a 0-d tensor has no dim to split")
    d = norm_dim(attrs["dim"], x.ndim, "split")
    return [like(x, (*x.shape[:d], n, *x.shape[d + 1 :])) for n in split_sizes(x.shape[d], attrs["split_size"])]


def _split_decomp(b, x, split_size, dim):
    shape = x.spec.shape
    d = norm_dim(dim, len(shape), "split")
    outs, start = [], 0
    for n in split_sizes(shape[d], split_size):
        outs.append(b.add("slice", x, dim=d, start=start, end=start + n, step=1))
        start += n
    return outs


def _pad(inputs, attrs):
    x = tensor_arg(inputs, 0, "pad")
    widths = pad_widths(x.shape, attrs["pads"], attrs["mode"])
    return [like(x, [n + lo + hi for n, (lo, hi) in zip(x.shape, widths)])]


def _flip(inputs, attrs):
    x = tensor_arg(inputs, 0, "flip")
    dims_of(attrs["dims"], x.ndim, "flip")
    return [like(x, x.shape)]


def _roll(inputs, attrs):
    x = tensor_arg(inputs, 0, "roll")
    shifts = ints(attrs["shifts"], "roll", "shifts")
    if attrs["dims"] is None:
        if len(shifts) != 1:
            raise ShapeError(f"roll: without dims, shifts must be one int (the flattened roll), got {shifts}")
    elif len(dims_of(attrs["dims"], x.ndim, "roll")) != len(shifts):
        raise ShapeError(f"roll: shifts {shifts} and dims {attrs['dims']!r} must have the same length")
    return [like(x, x.shape)]


def _repeat(inputs, attrs):
    x = tensor_arg(inputs, 0, "repeat")
    reps = ints(attrs["repeats"], "repeat", "repeats")
    if len(reps) < x.ndim or any(r < 0 for r in reps):
        raise ShapeError(f"repeat: repeats {reps} need one entry >= 0 per dim ({x.ndim} dims at least)")
    shape = (1,) * (len(reps) - x.ndim) + x.shape
    return [like(x, [s * r for s, r in zip(shape, reps)])]


def _repeat_interleave(inputs, attrs):
    x = tensor_arg(inputs, 0, "repeat_interleave")
    if attrs["dim"] is None:
        base, d = (x.numel,), 0
    elif not x.ndim:
        norm_dim(attrs["dim"], 0, "repeat_interleave")
        base, d = (1,), 0
    else:
        base, d = x.shape, norm_dim(attrs["dim"], x.ndim, "repeat_interleave")
    size = base[d]
    if len(inputs) > 2:
        raise ShapeError("repeat_interleave takes one repeats tensor at most")
    if len(inputs) == 2:
        r = index_arg(inputs, 1, "repeat_interleave", "repeats")
        if r.ndim > 1 or r.numel not in (1, size):
            raise ShapeError(f"repeat_interleave: repeats of shape {r.shape} must be 0-d, [1] or [{size}]")
        if attrs["output_size"] is None:
            raise ShapeError(
                "repeat_interleave with a repeats tensor needs output_size (the sum of repeats): "
                "the output shape depends on the data; read it once and pass it"
            )
        n = int(attrs["output_size"])
    else:
        reps = attrs["repeats"]
        if not isinstance(reps, int) or isinstance(reps, bool) or reps < 0:
            raise ShapeError(f"repeat_interleave: repeats must be an int >= 0 or a tensor operand, got {reps!r}")
        n = size * reps
    return [like(x, (*base[:d], n, *base[d + 1 :]))]


def _triangle(op):
    def infer(inputs, attrs):
        x = tensor_arg(inputs, 0, op)
        if x.ndim < 2:
            raise ShapeError(f"{op} needs a tensor of at least 2 dims, got shape {x.shape}")
        return [like(x, x.shape)]

    return infer


def _diagonal(inputs, attrs):
    x = tensor_arg(inputs, 0, "diagonal")
    if x.ndim < 2:
        raise ShapeError(f"diagonal needs at least 2 dims, got shape {x.shape}")
    d1, d2 = norm_dim(attrs["dim1"], x.ndim, "diagonal"), norm_dim(attrs["dim2"], x.ndim, "diagonal")
    if d1 == d2:
        raise ShapeError(f"diagonal: dim1 and dim2 must differ, both are {d1}")
    off = int(attrs["offset"])
    n = max(0, min(x.shape[d1] + min(off, 0), x.shape[d2] - max(off, 0)))
    rest = [s for k, s in enumerate(x.shape) if k not in (d1, d2)]
    return [like(x, [*rest, n])]


def _gather(inputs, attrs):
    x = tensor_arg(inputs, 0, "gather")
    idx = index_arg(inputs, 1, "gather")
    if idx.ndim != x.ndim:
        raise ShapeError(f"gather: index has {idx.ndim} dims, x has {x.ndim}; they must match")
    d = norm_dim(attrs["dim"], x.ndim, "gather")
    for k in range(x.ndim):
        if k != d and idx.shape[k] > x.shape[k]:
            raise ShapeError(f"gather: index size {idx.shape[k]} exceeds x's size {x.shape[k]} at dim {k}")
    return [like(x, idx.shape)]


def _scatter(inputs, attrs):
    x = tensor_arg(inputs, 0, "scatter")
    idx = index_arg(inputs, 1, "scatter")
    src = inputs[2]
    if idx.ndim != x.ndim:
        raise ShapeError(f"scatter: index has {idx.ndim} dims, x has {x.ndim}; they must match")
    d = norm_dim(attrs["dim"], x.ndim, "scatter")
    for k in range(x.ndim):
        if k != d and idx.shape[k] > x.shape[k]:
            raise ShapeError(f"scatter: index size {idx.shape[k]} exceeds x's size {x.shape[k]} at dim {k}")
        if isinstance(src, TensorSpec) and (src.ndim != x.ndim or idx.shape[k] > src.shape[k]):
            raise ShapeError(
                f"scatter: src of shape {src.shape} must have x's {x.ndim} dims and be at least as "
                f"large as index {idx.shape}"
            )
    if attrs["reduce"] not in REDUCTIONS:
        raise ShapeError(f"scatter: reduce {attrs['reduce']!r} is not one of {REDUCTIONS}")
    if attrs["reduce"] is not None and x.dtype is DType.BOOL:
        raise DtypeError(f"scatter: reduce={attrs['reduce']!r} on a bool tensor; cast it to int32 first")
    return [like(x, x.shape)]


def _scatter_add_decomp(b, x, index, src, dim):
    return b.add("scatter", x, index, src, dim=dim, reduce="sum", include_self=True)


def _index_select(inputs, attrs):
    x = tensor_arg(inputs, 0, "index_select")
    idx = index_arg(inputs, 1, "index_select")
    if idx.ndim > 1:
        raise ShapeError(f"index_select: index must be 0-d or 1-D, got shape {idx.shape}")
    if not x.ndim:
        return [like(x, ())]
    d = norm_dim(attrs["dim"], x.ndim, "index_select")
    return [like(x, (*x.shape[:d], idx.numel, *x.shape[d + 1 :]))]


def _index(inputs, attrs):
    x = tensor_arg(inputs, 0, "index")
    idx = [index_arg(inputs, i, "index", f"indices[{i - 1}]") for i in range(1, len(inputs))]
    dims = _index_dims("index", x, attrs["dims"], len(idx))
    return [like(x, advanced_index_shape(x.shape, dims, [s.shape for s in idx]))]


def _index_put(inputs, attrs):
    x = tensor_arg(inputs, 0, "index_put")
    values = inputs[1]
    idx = [index_arg(inputs, i, "index_put", f"indices[{i - 2}]") for i in range(2, len(inputs))]
    dims = _index_dims("index_put", x, attrs["dims"], len(idx))
    target = advanced_index_shape(x.shape, dims, [s.shape for s in idx], "index_put")
    if broadcast_shapes(values.shape, target) != target:
        raise ShapeError(f"index_put: values of shape {values.shape} do not broadcast to the indexed shape {target}")
    if attrs["accumulate"] and x.dtype is DType.BOOL:
        raise DtypeError("index_put: accumulate on a bool tensor; cast it to int32 first")
    return [like(x, x.shape)]


def _mask_arg(inputs, i, op):
    m = tensor_arg(inputs, i, op, "mask")
    if m.dtype is not DType.BOOL:
        raise DtypeError(f"{op}: mask must be a bool tensor, got {m.dtype.value}; compare it with 0 first")
    return m


def _masked_fill(inputs, attrs):
    x = tensor_arg(inputs, 0, "masked_fill")
    m = _mask_arg(inputs, 1, "masked_fill")
    v = inputs[2]
    if isinstance(v, TensorSpec) and v.ndim:
        raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got shape {v.shape}")
    if broadcast_shapes(x.shape, m.shape) != x.shape:
        raise ShapeError(f"masked_fill: mask of shape {m.shape} does not broadcast to x's shape {x.shape}")
    return [like(x, x.shape)]


def _masked_select(inputs, attrs):
    x = tensor_arg(inputs, 0, "masked_select")
    m = _mask_arg(inputs, 1, "masked_select")
    n = _numel(broadcast_shapes(x.shape, m.shape))
    return [like(x, (n,)), TensorSpec((), DType.INT32)]


def _nonzero(inputs, attrs):
    x = tensor_arg(inputs, 0, "nonzero")
    return [TensorSpec((x.numel, x.ndim), DType.INT32), TensorSpec((), DType.INT32)]


def _sort(inputs, attrs):
    x = tensor_arg(inputs, 0, "sort")
    if x.dtype.is_block:
        raise DtypeError(f"sort: {x.dtype.value} values cannot be moved singly; typecast to bfloat16 first")
    if x.ndim:
        norm_dim(attrs["dim"], x.ndim, "sort")
    return [like(x, x.shape), like(x, x.shape, DType.INT32)]


def _argsort(inputs, attrs):
    return _sort(inputs, attrs)[1:]


def _argsort_decomp(b, x, dim, descending, stable):
    return b.add("sort", x, dim=dim, descending=descending, stable=stable)[1]


def _topk(inputs, attrs):
    x = tensor_arg(inputs, 0, "topk")
    if x.dtype.is_block:
        raise DtypeError(f"topk: {x.dtype.value} values cannot be moved singly; typecast to bfloat16 first")
    k = int(attrs["k"])
    if not x.ndim:
        if k not in (0, 1):
            raise ShapeError(f"topk: k={k} is out of range for a 0-d tensor")
        return [like(x, ()), like(x, (), DType.INT32)]
    d = norm_dim(attrs["dim"], x.ndim, "topk")
    if not 0 <= k <= x.shape[d]:
        raise ShapeError(f"topk: k={k} is out of range for dim {d} of size {x.shape[d]}")
    shape = (*x.shape[:d], k, *x.shape[d + 1 :])
    return [like(x, shape), like(x, shape, DType.INT32)]


def _searchsorted(inputs, attrs):
    seq = tensor_arg(inputs, 0, "searchsorted", "sorted")
    values = inputs[1]
    if seq.dtype.is_block:
        raise DtypeError(f"searchsorted: {seq.dtype.value} values cannot be read singly; typecast to bfloat16 first")
    if not seq.ndim:
        raise ShapeError("searchsorted: the sorted sequence must have at least one dim, got a 0-d tensor")
    if isinstance(values, TensorSpec) and values.dtype is not seq.dtype:
        raise DtypeError(
            f"searchsorted: values are {values.dtype.value} and the sequence {seq.dtype.value}; typecast one so "
            "they match (comparisons run in one dtype)"
        )
    shape = tuple(values.shape)
    if seq.ndim > 1 and (len(shape) != seq.ndim or shape[:-1] != seq.shape[:-1]):
        raise ShapeError(
            f"searchsorted: an N-d sequence {seq.shape} needs values with the same leading dims, got {shape}"
        )
    if len(inputs) > 2:
        sorter = index_arg(inputs, 2, "searchsorted", "sorter")
        if sorter.shape != seq.shape:
            raise ShapeError(f"searchsorted: sorter {sorter.shape} must have the sequence's shape {seq.shape}")
    return [TensorSpec(shape, DType.INT32)]


def _one_hot(inputs, attrs):
    x = index_arg(inputs, 0, "one_hot", "x")
    n = int(attrs["num_classes"])
    if n <= 0:
        raise ShapeError(
            f"one_hot: num_classes must be given and > 0, got {n} (inferring it from the data would "
            "need a read of max(x); do that in the frontend)"
        )
    return [TensorSpec((*x.shape, n), DType.INT32, x.layout)]


# ------------------------------------------------------------------------------------------- creation ops
def _created(shape: Any, dtype: Any, layout: Any, op: str) -> TensorSpec:
    shape = ints(shape, op, "shape")
    if any(s < 0 for s in shape):
        raise ShapeError(f"{op}: sizes must be >= 0, got {shape}")
    dt = DType.of(dtype)
    lay = Layout.of(layout)
    if dt.is_block and lay is not Layout.TILE:
        raise ShapeError(f"{op}: {dt.value} exists only in tile layout; pass layout='tile'")
    return TensorSpec(tuple(shape), dt, lay)


def _fits(dt: DType, values: Sequence[Any], op: str) -> None:
    """Raise IntegerOverflowError when a value ``op`` would store in integer dtype ``dt`` does not fit it."""
    if dt.is_float or dt is DType.BOOL:
        return
    info = np.iinfo(dt.compute)
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            raise IntegerOverflowError(f"{op}: {v} has no {dt.value} value")
        if not info.min <= int(v) <= info.max:
            raise IntegerOverflowError(
                f"{op}: the value {v} does not fit {dt.value} [{info.min}, {info.max}]; use a wider dtype (int64) "
                "or a float dtype"
            )


def _full(inputs, attrs):
    spec = _created(attrs["shape"], attrs["dtype"], attrs["layout"], "full")
    _fits(spec.dtype, [attrs["value"]], "full")
    return [spec]


def _filled(op):
    def infer(inputs, attrs):
        return [_created(attrs["shape"], attrs["dtype"], attrs["layout"], op)]

    return infer


def arange_params(attrs: dict[str, Any]) -> tuple[float, float, float, int, DType]:
    """(start, end, step, length, dtype) of an arange: ``arange(end)`` when ``end`` is None, torch's length rule
    ceil((end - start) / step), int32 when every bound is an int."""
    start, end, step = attrs["start"], attrs["end"], attrs["step"]
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be 0")
    if (end - start) * step < 0:
        raise ShapeError(f"arange: the sign of step {step} does not lead from {start} to {end}")
    n = max(0, math.ceil((end - start) / step))
    if attrs["dtype"] is not None:
        dt = DType.of(attrs["dtype"])
    else:
        all_int = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step))
        dt = DType.INT32 if all_int else DType.FLOAT32
    return start, end, step, n, dt


def _arange(inputs, attrs):
    start, _, step, n, dt = arange_params(attrs)
    if n:
        _fits(dt, [start, start + (n - 1) * step], "arange")
    return [_created((n,), dt.value, attrs["layout"], "arange")]


def _linspace(inputs, attrs):
    n = int(attrs["steps"])
    if n < 0:
        raise ShapeError(f"linspace: steps must be >= 0, got {n}")
    return [_created((n,), attrs["dtype"], attrs["layout"], "linspace")]


def _eye(inputs, attrs):
    n = int(attrs["n"])
    m = n if attrs["m"] is None else int(attrs["m"])
    return [_created((n, m), attrs["dtype"], attrs["layout"], "eye")]


# --------------------------------------------------------------------------------------------- definitions
MOVED = "Values are moved exactly; the only rounding is the store into the output dtype."

# fmt: off
define("permute", "movement", ["x"], _permute, attrs={"dims": ()},
       doc=f"x with its dims reordered: out.shape[i] = x.shape[dims[i]] (negative dims allowed). {MOVED}")
define("transpose", "movement", ["x"], _transpose, attrs={"dim0": 0, "dim1": 1}, decomposition=_transpose_decomp,
       doc="x with dims dim0 and dim1 swapped; decomposes to permute.")
define("reshape", "movement", ["x"], _reshape, attrs={"shape": ()},
       doc=f"x's elements in row-major order, in a new shape (one -1 is inferred). Strided views are the "
           f"frontends' business: a view input is read in its logical order. {MOVED}")
define("as_strided", "movement", ["x"], _as_strided, attrs={"size": (), "stride": (), "offset": 0},
       doc=f"Materializes the strided view (size, stride, offset in elements) of x's elements in row-major "
           f"order: out[i...] = x.flat[offset + sum(i_k * stride_k)]; the view must stay inside x. {MOVED}")
define("expand", "movement", ["x"], _expand, attrs={"shape": ()},
       doc=f"x broadcast to shape as torch.expand does (-1 keeps a size, size-1 dims stretch, new dims lead), "
           f"materialized. {MOVED}")
define("broadcast_to", "movement", ["x"], _expand, attrs={"shape": ()},
       decomposition=lambda b, x, shape: b.add("expand", x, shape=shape),
       doc="x broadcast to shape; decomposes to expand.")
define("slice", "movement", ["x"], _slice, attrs={"dim": 0, "start": None, "end": None, "step": 1},
       doc=f"x[start:end:step] along dim, bounds normalized as Python does (negative from the end, over-range "
           f"clamped); step must be positive. {MOVED}")
define("select", "movement", ["x"], _select, attrs={"dim": 0, "index": 0},
       doc=f"x[index] along dim (negative index from the end), dim removed. {MOVED}")
define("concat", "movement", ["*xs"], _concat, attrs={"dim": 0},
       doc=f"The xs joined along dim; 1-D empty tensors are skipped (as torch.cat does); the dtype is the "
           f"promoted one. {MOVED}")
define("stack", "movement", ["*xs"], _stack, attrs={"dim": 0},
       doc=f"The equally shaped xs joined along a new dim. {MOVED}")
define("split", "movement", ["x"], _split, attrs={"split_size": 1, "dim": 0}, decomposition=_split_decomp,
       doc="x cut along dim into pieces of split_size (the last may be smaller) or of the listed sizes; one output "
           "per piece; decomposes to slice.")
define("pad", "movement", ["x"], _pad, attrs={"pads": (), "mode": "constant", "value": 0.0},
       doc=f"x padded as torch.nn.functional.pad: pads is the flat list (left, right) for the last dim, then the "
           f"dim before...; mode constant (value; negative pads crop), reflect, replicate or circular. {MOVED}")
define("flip", "movement", ["x"], _flip, attrs={"dims": ()}, doc=f"x reversed along dims. {MOVED}")
define("roll", "movement", ["x"], _roll, attrs={"shifts": 0, "dims": None},
       doc=f"x rolled by shifts along dims (a flattened roll when dims is None), as torch.roll. {MOVED}")
define("repeat", "movement", ["x"], _repeat, attrs={"repeats": ()},
       doc=f"x tiled repeats[i] times along each dim (extra leading repeats add dims), as torch.Tensor.repeat. "
           f"{MOVED}")
define("repeat_interleave", "movement", ["x", "*repeats"], _repeat_interleave,
       attrs={"repeats": None, "dim": None, "output_size": None},
       doc=f"Each element of x repeated along dim (x flattened when dim is None): `repeats` times, or per element "
           f"from an int repeats tensor operand, which needs output_size = sum(repeats) (a data-dependent shape: "
           f"the frontend reads it). {MOVED}")
define("tril", "movement", ["x"], _triangle("tril"), attrs={"diagonal": 0},
       doc=f"x with the elements above diagonal of the last two dims set to zero. {MOVED}")
define("triu", "movement", ["x"], _triangle("triu"), attrs={"diagonal": 0},
       doc=f"x with the elements below diagonal of the last two dims set to zero. {MOVED}")
define("diagonal", "movement", ["x"], _diagonal, attrs={"offset": 0, "dim1": 0, "dim2": 1},
       doc=f"The diagonal of dims dim1 / dim2 at offset, appended as the last dim (torch.diagonal), materialized. "
           f"{MOVED}")
define("gather", "movement", ["x", "index"], _gather, attrs={"dim": 0},
       doc=f"out[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (and so on): torch.gather. An index outside "
           f"[0, x.shape[dim]) raises IndexOutOfRangeError at the next sync (TT-NN's kernel returns unspecified "
           f"values there; the simulator refuses). {MOVED}")
define("scatter", "movement", ["x", "index", "src"], _scatter, attrs={"dim": 0, "reduce": None, "include_self": True},
       doc="x with src (a tensor, or a number) written at the positions index names along dim: torch.scatter / "
           "scatter_reduce. reduce None (duplicate indices: the last in row-major index order wins), sum, prod, "
           "mean, amax or amin, every duplicate counted, with x's values included when include_self. Numerics: "
           "reductions run in fp32 in index order (TT-NN's kernel: on the RISC-V cores; ours likewise), then one "
           "rounding to the output dtype; mean divides in fp32 (ints: floor). TT-NN's kernel skips out-of-range "
           "indices and has no mean / include_self=False; the ktt kernel raises IndexOutOfRangeError.")
define("scatter_add", "movement", ["x", "index", "src"],
       lambda inputs, attrs: _scatter(inputs, {**attrs, "reduce": "sum", "include_self": True}), attrs={"dim": 0},
       decomposition=_scatter_add_decomp,
       doc="torch.scatter_add: scatter with reduce='sum', include_self; every duplicate index accumulates.")
define("index_select", "movement", ["x", "index"], _index_select, attrs={"dim": 0},
       doc=f"x's slices along dim at the positions in the 0-d / 1-D index (torch.index_select; negative "
           f"indices are errors). {MOVED}")
define("index", "movement", ["x", "*indices"], _index, attrs={"dims": ()},
       doc=f"Advanced indexing x[..., i0, ..., i1, ...] with int index tensors at dims (full slices elsewhere), "
           f"torch semantics: the indices broadcast, negative ones count from the end, the broadcast shape replaces "
           f"adjacent indexed dims or leads when they are apart. Bool masks go through nonzero first. {MOVED}")
define("index_put", "movement", ["x", "values", "*indices"], _index_put, attrs={"dims": (), "accumulate": False},
       doc="x with values (broadcast to the indexed shape) written at x[indices] (as `index` reads). accumulate: "
           "every duplicate adds, in fp32 in index order, then one rounding to the output dtype; otherwise the "
           "last duplicate in index order wins.")
define("masked_fill", "movement", ["x", "mask", "value"], _masked_fill,
       doc=f"x with value (a number or a 0-d tensor, converted to x's dtype) where the bool mask (broadcast to x) "
           f"is true. {MOVED}")
define("masked_select", "movement", ["x", "mask"], _masked_select, outputs=2,
       doc="The elements of x (broadcast with the bool mask) where mask is true, in row-major order. A data-"
           "dependent shape: returns (values [numel] upper bound, count [] int32); the frontend reads count and "
           "narrows values with slice. Entries past count are 0.")
define("nonzero", "movement", ["x"], _nonzero, outputs=2,
       doc="The coordinates of x's non-zero elements in row-major order. A data-dependent shape: returns (indices "
           "[numel, ndim] int32 upper bound, count [] int32); the frontend reads count and narrows indices with "
           "slice. Rows past count are 0. NaN counts as non-zero, -0.0 as zero.")
define("sort", "movement", ["x"], _sort, attrs={"dim": -1, "descending": False, "stable": False}, outputs=2,
       doc="(values, indices int32) of x sorted along dim. ktt kernel: torch's order (NaN after +Inf ascending, "
           "first descending; -0.0 ties with +0.0; equal elements keep their order, stable or not). TT-NN's "
           "kernel: bfloat16 NaN is compared (and returned) as same-sign Inf, float32 -0.0 returns as +0.0 when "
           "stable, int32 is unsupported. Values are moved exactly.")
define("argsort", "movement", ["x"], _argsort, attrs={"dim": -1, "descending": False, "stable": False},
       decomposition=_argsort_decomp, doc="The int32 indices of sort(x); decomposes to sort.")
define("topk", "movement", ["x"], _topk, attrs={"k": 1, "dim": -1, "largest": True, "sorted": True}, outputs=2,
       doc="(values, indices int32) of the k largest (or smallest) elements along dim, in sorted order (also when "
           "sorted=False, which allows any order); NaN counts as the largest; equal values: lowest index first. "
           "Values are moved exactly.")
define("searchsorted", "movement", ["sorted", "values", "*sorter"], _searchsorted, attrs={"right": False},
       doc="The int32 insertion points of values in the last dim of sorted (ascending; 1-d: shared by all values, "
           "else its leading dims match values'), as torch.searchsorted: the first position whose element is not "
           "below the value (right: not at or below it); sorter (optional, int) is argsort(sorted). Each value is a "
           "binary search on the data-movement cores, the comparisons exact and in torch's order (a NaN value goes "
           "last; a NaN met in the sequence counts as below the value, as torch's loop has it). Operands share one "
           "dtype.")
define("one_hot", "movement", ["x"], _one_hot, attrs={"num_classes": -1},
       doc="int32 one-hot rows of the int tensor x (a new last dim of num_classes); a class outside "
           "[0, num_classes) raises IndexOutOfRangeError.")

CREATED = "A creation op: no operands (the runner takes device=); the value is stored in dtype as the packer rounds."
define("full", "creation", [], _full, attrs={"shape": (), "value": 0.0, "dtype": "float32", "layout": "row_major"},
       doc=f"A tensor of shape filled with value. {CREATED}")
define("zeros", "creation", [], _filled("zeros"), attrs={"shape": (), "dtype": "float32", "layout": "row_major"},
       doc=f"A tensor of shape filled with 0. {CREATED}")
define("ones", "creation", [], _filled("ones"), attrs={"shape": (), "dtype": "float32", "layout": "row_major"},
       doc=f"A tensor of shape filled with 1. {CREATED}")
define("arange", "creation", [], _arange,
       attrs={"start": 0, "end": None, "step": 1, "dtype": None, "layout": "row_major"},
       doc=f"start, start + step, ... below end (arange(end) when end is None); ceil((end - start) / step) values "
           f"computed as start + i * step rounded once (as torch does); dtype int32 when all bounds are ints, else "
           f"float32. {CREATED}")
define("linspace", "creation", [], _linspace,
       attrs={"start": 0.0, "end": 1.0, "steps": 50, "dtype": "float32", "layout": "row_major"},
       doc=f"steps values from start to end inclusive, computed in float64 as torch does (from start for the first "
           f"half, from end for the second). {CREATED}")
define("eye", "creation", [], _eye, attrs={"n": 1, "m": None, "dtype": "float32", "layout": "row_major"},
       doc=f"An n x m (m defaults to n) identity matrix. {CREATED}")
# fmt: on

__all__ = [
    "INDEX_DTYPES",
    "PAD_MODES",
    "REDUCTIONS",
    "advanced_index_shape",
    "arange_params",
    "concat_parts",
    "expand_shape",
    "pad_widths",
    "reshape_shape",
    "slice_range",
    "split_sizes",
]
