"""The movement and creation families: simulator kernels, device-time estimates and TT-NN calls.

Moving values does no arithmetic, so the simulator returns the moved float32 / int values and the store rounds them
into the output dtype (exact for a same-dtype move). The ops that do arithmetic are the scatter reductions and
``index_put(accumulate=True)``: both add in fp32 in index order, as the RISC-V loops of TT-NN's scatter do.

Providers: ``ttnn`` where the card runs TT-NN ops (a single op or a short chain, see the ``@ttnn`` functions);
``host`` where TT-NN has no such op or falls short of torch's semantics (scatter's mean / include_self / range
check, sort's NaN order and dtypes): the host CPU computes it (counted). An out-of-range index raises
:class:`IndexOutOfRangeError` on the worker; it surfaces at the next synchronization as a ``CommandError`` naming
the op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kohakutt.errors import DtypeError, IndexOutOfRangeError, KohakuTTUnsupportedOperator
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs import movement as mdefs
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, norm_dim
from kohakutt.kernels import cost
from kohakutt.kernels.registry import SimCall, declare, host, sim, ttnn

# fmt: off
TTNN_NAMES: tuple[str, ...] = (
    "permute", "reshape", "slice", "concat", "stack", "pad", "expand", "repeat", "repeat_interleave", "roll",
    "tril", "triu", "gather", "scatter", "sort", "topk", "where", "eq", "unsqueeze", "typecast", "to_layout",
    "to_device", "full", "zeros", "ones", "arange", "GetDefaultDevice", "Tensor", "Tensor.device", "Tensor.shape",
    "Tensor.dtype", "Tensor.layout",
    "TILE_LAYOUT", "ROW_MAJOR_LAYOUT", "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16",
    "uint8",
)
# fmt: on

RISCV_ELEMENT_CYCLES = 20  # one element of an index-driven loop on a data-movement RISC-V: read index, address, copy
TRANSPOSE_WH_TILE_CYCLES = 64  # a 32x32 tile transpose through the unpacker and DST (transpose_wh_tile)
SORT_STAGE_TILE_CYCLES = 2 * cost.SFPU_TILE_CYCLES  # one bitonic compare-exchange stage over a value and index tile


# ------------------------------------------------------------------------------------------------ helpers
def check_range(idx: np.ndarray, size: int, op: str, what: str = "index") -> None:
    """Raise :class:`IndexOutOfRangeError` naming the first entry of ``idx`` outside [0, size)."""
    if idx.size:
        bad = (idx < 0) | (idx >= size)
        if bad.any():
            v = int(idx.ravel()[int(np.argmax(bad.ravel()))])
            raise IndexOutOfRangeError(
                f"{op}: {what} {v} is out of range for a dim of size {size} "
                f"({int(bad.sum())} entr{'y' if bad.sum() == 1 else 'ies'} out of range)"
            )


def wrap_negative(idx: np.ndarray, size: int) -> np.ndarray:
    """Negative indices counted from the end, as torch's advanced indexing does."""
    idx = idx.astype(np.int64)
    return np.where(idx < 0, idx + size, idx)


def last_occurrence(dest: np.ndarray) -> np.ndarray:
    """Positions in ``dest`` of the last occurrence of each distinct value (the write that wins)."""
    _, first_rev = np.unique(dest[::-1], return_index=True)
    return dest.size - 1 - first_rev


def occurrence_rounds(dest: np.ndarray) -> list[np.ndarray]:
    """Positions of ``dest`` grouped by occurrence rank: round r holds the r-th occurrence of each distinct value,
    so within a round every destination is distinct and rounds run in index order (for order-dependent sums)."""
    if not dest.size:
        return []
    order = np.argsort(dest, kind="stable")
    sd = dest[order]
    starts = np.flatnonzero(np.r_[True, sd[1:] != sd[:-1]])
    rank = np.arange(sd.size) - np.repeat(starts, np.diff(np.r_[starts, sd.size]))
    by_rank = np.argsort(rank, kind="stable")
    counts = np.bincount(rank)
    return np.split(order[by_rank], np.cumsum(counts)[:-1])


def sequential(
    acc: np.ndarray, dest: np.ndarray, vals: np.ndarray, fn: Callable[[np.ndarray, np.ndarray], Any]
) -> None:
    """``acc[dest[i]] = fn(acc[dest[i]], vals[i])`` for i in order, vectorized by occurrence rounds."""
    for pos in occurrence_rounds(dest):
        d = dest[pos]
        acc[d] = fn(acc[d], vals[pos])


def flat_destinations(shape: Sequence[int], index: np.ndarray, dim: int) -> np.ndarray:
    """Row-major flat positions in a tensor of ``shape`` that scatter / gather index ``index`` names along ``dim``
    (its coordinate elsewhere); ``index`` is already in range."""
    strides = [int(np.prod(shape[k + 1 :], dtype=np.int64)) for k in range(len(shape))]
    dest = index.astype(np.int64) * strides[dim]
    for k, n in enumerate(index.shape):
        if k != dim:
            dest = dest + (np.arange(n, dtype=np.int64) * strides[k]).reshape(
                [-1 if j == k else 1 for j in range(index.ndim)]
            )
    return dest


def leading(x: np.ndarray, extent: Sequence[int], skip: int | None = None) -> np.ndarray:
    """``x`` cut to the first ``extent[k]`` entries of each dim (all of dim ``skip``)."""
    return x[tuple(slice(None) if k == skip else slice(0, n) for k, n in enumerate(extent))]


def compute_dtype(spec: TensorSpec) -> np.dtype:
    return spec.dtype.compute


def _attrs_dim(call: SimCall, ndim: int, key: str = "dim") -> int:
    return norm_dim(call.attrs[key], ndim, call.op) if ndim else 0


# ------------------------------------------------------------------------------------------------ estimates
def _traffic(ins: Sequence[Spec], outs: Sequence[TensorSpec]) -> float:
    return sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs)


def index_loop(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Launch + max(DRAM traffic, one RISC-V loop step per output element over the cores): gather, scatter and the
    indexing ops run element by element on the data-movement cores."""
    index = ins[1] if len(ins) > 1 and isinstance(ins[1], TensorSpec) else None
    elements = max(sum(s.numel for s in outs), index.numel if index is not None else 0, 1)
    return cost.LAUNCH_NS + max(
        cost.dram_ns(_traffic(ins, outs), card), cost.compute_ns(elements, RISCV_ELEMENT_CYCLES, card)
    )


def search_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Launch + max(DRAM traffic, one RISC-V loop step per probe): searchsorted's binary search reads
    ceil(log2(n + 1)) elements of the sorted sequence per value."""
    seq = ins[0]
    n = seq.shape[-1] if isinstance(seq, TensorSpec) and seq.ndim else 1
    probes = max(sum(s.numel for s in outs), 1) * max(1, int(n).bit_length())
    return cost.LAUNCH_NS + max(
        cost.dram_ns(_traffic(ins, outs), card), cost.compute_ns(probes, RISCV_ELEMENT_CYCLES, card)
    )


def permute_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """TT-NN's permute is one pass when the last dim stays (rows or tiles move whole) or only the last two swap (a
    tile transpose on the FPU); a permute that moves the last dim elsewhere runs as a chain (untilize, row-major
    permute, tilize): three passes, each with its launch."""
    x = ins[0]
    nd = x.ndim if isinstance(x, TensorSpec) else 0
    dims = tuple(norm_dim(d, nd, "permute") for d in attrs["dims"]) if nd else ()
    if not nd or dims[-1] == nd - 1:
        return cost.memory_bound(ins, outs, card)
    if nd >= 2 and dims == (*range(nd - 2), nd - 1, nd - 2):
        return cost.memory_bound(ins, outs, card, TRANSPOSE_WH_TILE_CYCLES)
    return 3 * cost.memory_bound(ins, outs, card)


def sort_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """A bitonic network along the (tile-padded, power-of-two) sort dim: log2(L)(log2(L)+1)/2 compare-exchange
    stages, each an SFPU pass over the value and index tiles."""
    x = ins[0]
    if not isinstance(x, TensorSpec) or not x.numel:
        return cost.LAUNCH_NS
    n = x.shape[norm_dim(attrs["dim"], x.ndim, "sort")] if x.ndim else 1
    length = 1 << max(6, (max(n, 1) - 1).bit_length())
    stages = np.log2(length) * (np.log2(length) + 1) / 2
    tile_stages = cost.tiles(x) * length / max(32 * -(-n // 32), 32) * stages
    return cost.LAUNCH_NS + max(
        cost.dram_ns(_traffic(ins, outs), card), cost.compute_ns(tile_stages, SORT_STAGE_TILE_CYCLES, card)
    )


def creation_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    return cost.memory_bound([], outs, card)


# ----------------------------------------------------------------------------------------- reshaping moves
@sim("permute", estimate=permute_cost)
def permute(call: SimCall) -> np.ndarray:
    x = call.inputs[0]
    return np.transpose(x, [norm_dim(d, x.ndim, "permute") for d in call.attrs["dims"]]) if x.ndim else x


@sim("reshape", estimate=cost.default)
def reshape(call: SimCall) -> np.ndarray:
    return call.inputs[0].reshape(call.out_specs[0].shape)


@sim("as_strided", estimate=index_loop)
def as_strided(call: SimCall) -> np.ndarray:
    flat = np.ascontiguousarray(call.inputs[0]).reshape(-1)
    a = call.attrs
    base = flat[int(a["offset"]) :]
    view = np.lib.stride_tricks.as_strided(base, tuple(a["size"]), tuple(s * flat.itemsize for s in a["stride"]))
    return view.copy()


@sim("expand", estimate=cost.default)
def expand(call: SimCall) -> np.ndarray:
    return np.broadcast_to(call.inputs[0], call.out_specs[0].shape)


@sim("slice", estimate=cost.default)
def slice_(call: SimCall) -> np.ndarray:
    x, a = call.inputs[0], call.attrs
    d = norm_dim(a["dim"], x.ndim, "slice")
    r = mdefs.slice_range(x.shape[d], a["start"], a["end"], int(a["step"]))
    return x[(slice(None),) * d + (slice(r.start, r.stop, r.step),)]


@sim("select", estimate=cost.default)
def select(call: SimCall) -> np.ndarray:
    x = call.inputs[0]
    d = norm_dim(call.attrs["dim"], x.ndim, "select")
    return np.take(x, int(call.attrs["index"]) % x.shape[d], axis=d)


@sim("concat", estimate=cost.default)
def concat(call: SimCall) -> np.ndarray:
    keep, d = mdefs.concat_parts(call.in_specs, call.attrs["dim"])
    dt = compute_dtype(call.out_specs[0])
    return np.concatenate([call.inputs[i].astype(dt, copy=False) for i in keep], axis=d)


@sim("stack", estimate=cost.default)
def stack(call: SimCall) -> np.ndarray:
    dt = compute_dtype(call.out_specs[0])
    d = norm_dim(call.attrs["dim"], call.inputs[0].ndim + 1, "stack")
    return np.stack([x.astype(dt, copy=False) for x in call.inputs], axis=d)


_NP_PAD = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@sim("pad", estimate=cost.default)
def pad(call: SimCall) -> np.ndarray:
    x, a = call.inputs[0], call.attrs
    widths = mdefs.pad_widths(x.shape, a["pads"], a["mode"])
    if not widths:
        return x.copy()  # a 0-d tensor: nothing to pad (np.pad reads an empty width list as floats)
    x = x[tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(x.shape, widths))]  # negative pads crop
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if a["mode"] == "constant":
        value = np.asarray(a["value"]).astype(x.dtype) if x.dtype != np.bool_ else bool(a["value"])
        return np.pad(x, grow, mode="constant", constant_values=value)
    return np.pad(x, grow, mode=_NP_PAD[a["mode"]])


@sim("flip", estimate=cost.default)
def flip(call: SimCall) -> np.ndarray:
    x = call.inputs[0]
    dims = mdefs.dims_of(call.attrs["dims"], x.ndim, "flip")
    return np.flip(x, dims) if dims else x


@sim("roll", estimate=cost.default)
def roll(call: SimCall) -> np.ndarray:
    x, a = call.inputs[0], call.attrs
    shifts = mdefs.ints(a["shifts"], "roll", "shifts")
    if a["dims"] is None:
        return np.roll(x, shifts[0])
    return np.roll(x, shifts, axis=mdefs.dims_of(a["dims"], x.ndim, "roll"))


@sim("repeat", estimate=cost.default)
def repeat(call: SimCall) -> np.ndarray:
    x = call.inputs[0]
    reps = mdefs.ints(call.attrs["repeats"], "repeat", "repeats")
    return np.tile(x.reshape((1,) * (len(reps) - x.ndim) + x.shape), reps)


@sim("repeat_interleave", estimate=index_loop)
def repeat_interleave(call: SimCall) -> np.ndarray:
    x, a = call.inputs[0], call.attrs
    if a["dim"] is None or not x.ndim:
        x, d = x.reshape(-1), 0
    else:
        d = norm_dim(a["dim"], x.ndim, "repeat_interleave")
    if len(call.inputs) == 2:
        reps = call.inputs[1].astype(np.int64).reshape(-1)
        if (reps < 0).any():
            raise ShapeError(f"repeat_interleave: repeats must be >= 0, got {int(reps.min())}")
        reps = np.broadcast_to(reps, (x.shape[d],))
        if int(reps.sum()) != int(a["output_size"]):
            raise ShapeError(
                f"repeat_interleave: repeats sum to {int(reps.sum())}, but output_size is {a['output_size']}"
            )
    else:
        reps = int(a["repeats"])
    return np.repeat(x, reps, axis=d)


@sim("tril", estimate=cost.eltwise)
def tril(call: SimCall) -> np.ndarray:
    return np.tril(call.inputs[0], int(call.attrs["diagonal"]))


@sim("triu", estimate=cost.eltwise)
def triu(call: SimCall) -> np.ndarray:
    return np.triu(call.inputs[0], int(call.attrs["diagonal"]))


@sim("diagonal", estimate=index_loop)
def diagonal(call: SimCall) -> np.ndarray:
    x, a = call.inputs[0], call.attrs
    d1, d2 = norm_dim(a["dim1"], x.ndim, "diagonal"), norm_dim(a["dim2"], x.ndim, "diagonal")
    return np.diagonal(x, int(a["offset"]), d1, d2).copy()


# ------------------------------------------------------------------------------------------------ indexing
@sim("gather", estimate=index_loop)
def gather(call: SimCall) -> np.ndarray:
    x, idx = call.inputs[0], call.inputs[1]
    if not x.ndim:
        check_range(idx, 1, "gather")
        return np.broadcast_to(x, idx.shape)
    d = norm_dim(call.attrs["dim"], x.ndim, "gather")
    check_range(idx, x.shape[d], "gather")
    return np.take_along_axis(leading(x, idx.shape, skip=d), idx.astype(np.intp), axis=d)


def _std_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(a < b, b, a)  # std::max(a, b): a NaN in b never wins, a NaN in a stays


def _std_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(b < a, b, a)


def _scatter(call: SimCall, strict: bool) -> np.ndarray:
    """torch.scatter_reduce on the simulator. ``strict`` (the host): out-of-range indices raise and NaN
    propagates through amax / amin; otherwise (TT-NN's RISC-V loop) they are skipped and max / min follow std::max."""
    x, idx, src = call.inputs
    a = call.attrs
    reduce, include_self = a["reduce"], a["include_self"]
    dt = compute_dtype(call.out_specs[0])
    out = np.array(x, dtype=dt).reshape(-1)
    if not idx.size:
        return out.reshape(x.shape)
    d = norm_dim(a["dim"], x.ndim, "scatter") if x.ndim else 0
    shape = x.shape or (1,)
    idx = idx.reshape(idx.shape or (1,)).astype(np.int64)
    if isinstance(src, np.ndarray) and src.ndim:
        vals = leading(src, idx.shape)
    else:
        vals = np.broadcast_to(np.asarray(src), idx.shape)
    vals = vals.astype(dt).reshape(-1)
    if strict:
        check_range(idx, shape[d], "scatter")
        keep = None
    else:
        keep = ((idx >= 0) & (idx < shape[d])).reshape(-1)  # TT-NN's loop skips an index past the row
        idx = np.clip(idx, 0, shape[d] - 1)
    dest = flat_destinations(shape, idx, d).reshape(-1)
    if keep is not None:
        dest, vals = dest[keep], vals[keep]
    if reduce is None:
        win = last_occurrence(dest)
        out[dest[win]] = vals[win]
        return out.reshape(x.shape)
    if not strict and (reduce == "mean" or not include_self):
        raise KohakuTTUnsupportedOperator(
            f"scatter: TT-NN's scatter has no reduce={reduce!r} with include_self={include_self}; the host runs it "
            "(the default; provider='host')"
        )
    touched = np.unique(dest)
    if not include_self:
        ident = {"sum": 0, "mean": 0, "prod": 1}.get(reduce)
        if ident is None:
            big = np.inf if dt.kind == "f" else np.iinfo(dt).max
            ident = -big if reduce == "amax" else big
        out[touched] = ident
    with np.errstate(over="ignore", invalid="ignore"):
        if reduce in ("sum", "mean"):
            np.add.at(out, dest, vals)  # fp32 (or int32) adds, one per duplicate, in index order
        elif reduce == "prod":
            np.multiply.at(out, dest, vals)
        elif strict:
            (np.maximum if reduce == "amax" else np.minimum).at(out, dest, vals)
        else:
            sequential(out, dest, vals, _std_max if reduce == "amax" else _std_min)
        if reduce == "mean":
            count = np.bincount(dest, minlength=out.size)[touched] + (1 if include_self else 0)
            if dt.kind == "f":
                out[touched] = out[touched] / count.astype(dt)
            else:
                out[touched] = np.floor_divide(out[touched], count).astype(dt)
    return out.reshape(x.shape)


@sim("scatter", estimate=index_loop)
def scatter_ttnn(call: SimCall) -> np.ndarray:
    return _scatter(call, strict=False)


@host("scatter", estimate=index_loop)
def scatter_ktt(call: SimCall) -> np.ndarray:
    return _scatter(call, strict=True)


@sim("index_select", estimate=index_loop)
def index_select(call: SimCall) -> np.ndarray:
    x, idx = call.inputs
    if not x.ndim:
        check_range(idx, 1, "index_select")
        return x.reshape(())
    d = norm_dim(call.attrs["dim"], x.ndim, "index_select")
    check_range(idx, x.shape[d], "index_select")
    return np.take(x, idx.reshape(-1).astype(np.intp), axis=d)


def _advanced(x_shape: Sequence[int], dims: Sequence[int], indices: Sequence[np.ndarray], op: str) -> tuple:
    key: list[Any] = [slice(None)] * len(x_shape)
    for d, i in zip(dims, indices):
        i = wrap_negative(i, x_shape[d])
        check_range(i, x_shape[d], op)
        key[d] = i
    return tuple(key)


@host("index", estimate=index_loop)
def index(call: SimCall) -> np.ndarray:
    x = call.inputs[0]
    dims = mdefs.dims_of(call.attrs["dims"], x.ndim, "index")
    return x[_advanced(x.shape, dims, call.inputs[1:], "index")]


@host("index_put", estimate=index_loop)
def index_put(call: SimCall) -> np.ndarray:
    x, values = call.inputs[0], call.inputs[1]
    dims = mdefs.dims_of(call.attrs["dims"], x.ndim, "index_put")
    dt = compute_dtype(call.out_specs[0])
    dest = np.arange(x.size, dtype=np.int64).reshape(x.shape)[_advanced(x.shape, dims, call.inputs[2:], "index_put")]
    vals = np.broadcast_to(np.asarray(values).astype(dt), dest.shape).reshape(-1)
    dest = dest.reshape(-1)
    out = np.array(x, dtype=dt).reshape(-1)
    if call.attrs["accumulate"]:
        with np.errstate(over="ignore", invalid="ignore"):
            np.add.at(out, dest, vals)  # fp32 adds in index order
    else:
        win = last_occurrence(dest)
        out[dest[win]] = vals[win]
    return out.reshape(x.shape)


@sim("masked_fill", estimate=cost.eltwise)
def masked_fill(call: SimCall) -> np.ndarray:
    x, mask, value = call.inputs
    dt = compute_dtype(call.out_specs[0])
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.asarray(value).astype(dt) if dt != np.bool_ else np.asarray(value) != 0
    return np.where(mask, v, x)


@host("masked_select", estimate=index_loop)
def masked_select(call: SimCall) -> list[np.ndarray]:
    x, mask = np.broadcast_arrays(*call.inputs)
    picked = x[mask]
    out = np.zeros(call.out_specs[0].shape, dtype=compute_dtype(call.out_specs[0]))
    out[: picked.size] = picked
    return [out, np.array(picked.size, dtype=np.int32)]


@host("nonzero", estimate=index_loop)
def nonzero(call: SimCall) -> list[np.ndarray]:
    x = call.inputs[0]
    coords = np.argwhere(x != 0) if x.ndim else np.zeros((int(x != 0), 0), np.int64)
    out = np.zeros(call.out_specs[0].shape, np.int32)
    out[: len(coords)] = coords
    return [out, np.array(len(coords), dtype=np.int32)]


@sim("one_hot", estimate=index_loop)
def one_hot_ttnn(call: SimCall) -> np.ndarray:
    """TT-NN has no one_hot: the card compares x with an arange of the classes, so a class out of range gives a row
    of zeros."""
    return (call.inputs[0][..., None] == np.arange(int(call.attrs["num_classes"]))).astype(np.int32)


@host("one_hot", estimate=index_loop)
def one_hot_ktt(call: SimCall) -> np.ndarray:
    check_range(call.inputs[0], int(call.attrs["num_classes"]), "one_hot", "class")
    return one_hot_ttnn(call)


# ---------------------------------------------------------------------------------------------- sort, topk
def stable_order(a: np.ndarray, descending: bool) -> np.ndarray:
    """Indices sorting ``a`` along its last axis in torch's order: NaN above +Inf, -0.0 equal to +0.0, equal
    elements in their original order (ascending or descending)."""
    if not descending:
        return np.argsort(a, axis=-1, kind="stable")
    n = a.shape[-1]
    rev = np.argsort(a[..., ::-1], axis=-1, kind="stable")  # ties: later originals first; NaN last
    return (n - 1 - rev)[..., ::-1]


def _sorted(x: np.ndarray, dim: Any, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    if not x.ndim:
        return x.copy(), np.zeros((), np.int32)
    d = norm_dim(dim, x.ndim, "sort")
    a = np.moveaxis(x, d, -1)
    order = stable_order(a, descending)
    vals = np.take_along_axis(a, order, axis=-1)
    return np.moveaxis(vals, -1, d), np.moveaxis(order.astype(np.int32), -1, d)


@sim("sort", estimate=sort_cost)
def sort_ttnn(call: SimCall) -> list[np.ndarray]:
    """TT-NN's sort: bfloat16 / float32 / uint16 only; the bfloat16 datapath turns NaN into same-sign Inf before
    comparing; a stable float32 sort returns -0.0 as +0.0. Unstable tie order is TT-NN's to pick: the model keeps
    the original order, one of the orders it may return."""
    x = call.inputs[0]
    dt = call.in_specs[0].dtype
    if dt not in (DType.BFLOAT16, DType.FLOAT32, DType.UINT16):
        raise DtypeError(
            f"sort: TT-NN's sort takes bfloat16, float32 or uint16, not {dt.value}; the host sorts it (the "
            "default; provider='host')"
        )
    if dt is DType.BFLOAT16:
        x = np.where(np.isnan(x), np.copysign(np.float32(np.inf), x), x)
    vals, order = _sorted(x, call.attrs["dim"], call.attrs["descending"])
    if dt is DType.FLOAT32 and call.attrs["stable"]:
        vals = vals + np.float32(0.0)  # -0.0 + 0.0 = +0.0: TT-NN's stable engines canonicalize signed zeros
    return [vals, order]


@host("sort", estimate=sort_cost)
def sort_host(call: SimCall) -> list[np.ndarray]:
    vals, order = _sorted(call.inputs[0], call.attrs["dim"], call.attrs["descending"])
    return [vals, order]


def _topk_supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    x = specs[0]
    if isinstance(x, TensorSpec) and x.dtype not in (DType.BFLOAT16, DType.FLOAT32, DType.BFLOAT8_B):
        return f"TT-NN's topk takes bfloat16 / bfloat8_b / float32 values, not {x.dtype.value}"
    return None


@sim("topk", estimate=sort_cost, supports=_topk_supports)
def topk(call: SimCall) -> list[np.ndarray]:
    x, a = call.inputs[0], call.attrs
    vals, order = _sorted(x, a["dim"], bool(a["largest"]))
    if not x.ndim:
        return [vals, order]
    d = norm_dim(a["dim"], x.ndim, "topk")
    cut = (slice(None),) * d + (slice(0, int(a["k"])),)
    return [vals[cut], order[cut]]


host("topk", estimate=sort_cost)(topk)  # what TT-NN's topk refuses (integer values)


@host("searchsorted", estimate=search_cost)
def searchsorted(call: SimCall) -> np.ndarray:
    """torch's binary search, step for step (so NaN in the sequence acts as it does on the CPU): start = 0, end = n;
    while start < end: mid = start + (end - start) // 2, go right when not (seq[mid] >= v) (right: not
    (seq[mid] > v)). All values run the same number of steps, as the card's lanes would."""
    seq, values = call.inputs[0], np.asarray(call.inputs[1])
    n = seq.shape[-1]
    if len(call.inputs) > 2:
        order = call.inputs[2].astype(np.int64)
        check_range(order, n, "searchsorted", "sorter index")
        seq = np.take_along_axis(seq, order, axis=-1)
    if not n or not values.size:
        return np.zeros(values.shape, np.int32)
    rows = seq.reshape(-1, n)
    vals = values.reshape(1, -1) if seq.ndim == 1 else values.reshape(rows.shape[0], -1)
    vals = vals.astype(rows.dtype, copy=False)
    start = np.zeros(vals.shape, np.int64)
    end = np.full(vals.shape, n, np.int64)
    r = np.arange(rows.shape[0])[:, None]
    right = bool(call.attrs["right"])
    active = start < end
    while active.any():
        mid = start + ((end - start) >> 1)
        probe = rows[r, np.minimum(mid, n - 1)]
        go = ~(probe > vals) if right else ~(probe >= vals)
        start = np.where(active & go, mid + 1, start)
        end = np.where(active & ~go, mid, end)
        active = start < end
    return start.reshape(values.shape).astype(np.int32)


# ---------------------------------------------------------------------------------------------- creation
def _filled(call: SimCall, value: float | int | bool) -> np.ndarray:
    spec = call.out_specs[0]
    dt = compute_dtype(spec)
    if dt == np.bool_:
        return np.full(spec.shape, bool(value))
    if dt.kind == "f":
        with np.errstate(over="ignore"):
            return np.full(spec.shape, np.float64(value).astype(np.float32))
    return np.full(spec.shape, np.int64(int(value)).astype(dt))  # ints truncate toward zero, then wrap


@sim("full", estimate=creation_cost)
def full(call: SimCall) -> np.ndarray:
    return _filled(call, call.attrs["value"])


@sim("zeros", estimate=creation_cost)
def zeros(call: SimCall) -> np.ndarray:
    return _filled(call, 0)


@sim("ones", estimate=creation_cost)
def ones(call: SimCall) -> np.ndarray:
    return _filled(call, 1)


@sim("arange", estimate=creation_cost)
def arange(call: SimCall) -> np.ndarray:
    start, _, step, n, dt = mdefs.arange_params(call.attrs)
    if not dt.is_float and all(isinstance(v, int) for v in (start, step)):
        return (start + step * np.arange(n, dtype=np.int64)).astype(dt.compute)
    # start + i * step rounded once, as torch's fused multiply-add gives it (x86 long double: 64-bit mantissa)
    vals = np.longdouble(start) + np.arange(n, dtype=np.longdouble) * np.longdouble(step)
    return vals.astype(np.float32) if dt.is_float else np.trunc(vals).astype(np.int64).astype(dt.compute)


@sim("linspace", estimate=creation_cost)
def linspace(call: SimCall) -> np.ndarray:
    a = call.attrs
    n, start, end = int(a["steps"]), float(a["start"]), float(a["end"])
    if n == 1:
        vals = np.array([start])
    else:
        i = np.arange(n, dtype=np.float64)
        step = (end - start) / max(n - 1, 1)
        vals = np.where(i < n // 2, start + i * step, end - (n - 1 - i) * step)  # torch: symmetric about the middle
    dt = call.out_specs[0].dtype
    return vals.astype(np.float32) if dt.is_float else np.trunc(vals).astype(np.int64).astype(dt.compute)


@sim("eye", estimate=creation_cost)
def eye(call: SimCall) -> np.ndarray:
    n, m = call.out_specs[0].shape
    return np.eye(n, m, dtype=np.float32).astype(compute_dtype(call.out_specs[0]))


# ----------------------------------------------------------------------------------------- the real card
# Each function below runs on a card through TT-NN 0.81.1: ``inputs`` are ttnn device tensors (int32 index tensors,
# bool as uint8) or Python numbers; the result is converted to the output spec's dtype and layout.
_TT_DTYPES = {DType.FLOAT32: "float32", DType.BFLOAT16: "bfloat16", DType.BFLOAT8_B: "bfloat8_b",
              DType.BFLOAT4_B: "bfloat4_b", DType.INT32: "int32", DType.UINT32: "uint32", DType.UINT16: "uint16",
              DType.UINT8: "uint8", DType.BOOL: "uint8", DType.INT64: "int32"}  # fmt: skip


def tt_dtype(tt: Any, dt: DType) -> Any:
    return getattr(tt, _TT_DTYPES[dt])


def tt_layout(tt: Any, spec: TensorSpec) -> Any:
    return tt.TILE_LAYOUT if spec.layout.value == "tile" else tt.ROW_MAJOR_LAYOUT


def tt_finish(tt: Any, t: Any, spec: TensorSpec) -> Any:
    """``t`` in ``spec``'s dtype and layout."""
    if t.dtype != tt_dtype(tt, spec.dtype):
        t = tt.typecast(tt.to_layout(t, tt.TILE_LAYOUT), tt_dtype(tt, spec.dtype))
    return tt.to_layout(t, tt_layout(tt, spec))


def tt_index(tt: Any, idx: Any) -> Any:
    """An index tensor as TT-NN's index ops take it: uint32 in tiles."""
    return tt.typecast(tt.to_layout(idx, tt.TILE_LAYOUT), tt.uint32)


def tt_host_index(tt: Any, device: Any, flat: np.ndarray) -> Any:
    """A [1, n] uint32 tile tensor on ``device`` holding the host-computed positions ``flat``."""
    host = tt.Tensor(np.ascontiguousarray(flat, dtype=np.uint32).reshape(1, -1), tt.uint32, None, tt.TILE_LAYOUT)
    return tt.to_device(host, device)


def tt_take(tt: Any, x: Any, flat: np.ndarray, spec: TensorSpec) -> Any:
    """out.flat = x.flat[flat] for positions known when the op is built: one TT-NN gather over x as a row."""
    row = tt.to_layout(tt.reshape(x, [1, int(np.prod(list(x.shape)))]), tt.TILE_LAYOUT)
    out = tt.gather(row, -1, index=tt_host_index(tt, x.device(), flat))
    return tt_finish(tt, tt.reshape(out, list(spec.shape)), spec)


def _flat_map(shape: Sequence[int], fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The flat source positions of a static move: ``fn`` applied to the ids of a tensor of ``shape``."""
    return np.ascontiguousarray(fn(np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape))).reshape(-1)


def _static_move(op: str) -> Callable[..., Any]:
    """A ttnn implementation that runs the simulator's kernel on position ids, then gathers by them on the card."""
    kernel = {"as_strided": as_strided, "flip": flip, "diagonal": diagonal, "pad": pad}[op]

    def run(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
        x = inputs[0]
        shape = list(x.shape)
        spec = TensorSpec(tuple(shape), DType.INT32)

        def positions(ids: np.ndarray) -> np.ndarray:
            return kernel(SimCall(op, [ids], [spec], attrs, numerics, out_specs))

        return tt_take(tt, x, _flat_map(shape, positions), out_specs[0])

    return run


@ttnn("permute")
def tt_permute(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    return tt_finish(tt, tt.permute(x, [norm_dim(d, len(x.shape), "permute") for d in attrs["dims"]]), out_specs[0])


@ttnn("reshape")
def tt_reshape(tt, inputs, attrs, numerics, out_specs):
    return tt_finish(tt, tt.reshape(inputs[0], list(out_specs[0].shape)), out_specs[0])


@ttnn("expand")
def tt_expand(tt, inputs, attrs, numerics, out_specs):
    return tt_finish(tt, tt.expand(inputs[0], list(out_specs[0].shape)), out_specs[0])


@ttnn("slice")
def tt_slice(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    shape = list(x.shape)
    d = norm_dim(attrs["dim"], len(shape), "slice")
    r = mdefs.slice_range(shape[d], attrs["start"], attrs["end"], int(attrs["step"]))
    starts, ends, steps = [0] * len(shape), list(shape), [1] * len(shape)
    starts[d], ends[d], steps[d] = r.start, max(r.stop, r.start), r.step
    return tt_finish(tt, tt.slice(x, starts, ends, steps), out_specs[0])


@ttnn("select")
def tt_select(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    shape = list(x.shape)
    d = norm_dim(attrs["dim"], len(shape), "select")
    i = int(attrs["index"]) % shape[d]
    starts, ends = [0] * len(shape), list(shape)
    starts[d], ends[d] = i, i + 1
    return tt_finish(
        tt, tt.reshape(tt.slice(x, starts, ends, [1] * len(shape)), list(out_specs[0].shape)), out_specs[0]
    )


@ttnn("concat")
def tt_concat(tt, inputs, attrs, numerics, out_specs):
    specs = [TensorSpec(tuple(t.shape), DType.FLOAT32) for t in inputs]
    keep, d = mdefs.concat_parts(specs, attrs["dim"])
    parts = [
        tt_finish(tt, inputs[i], TensorSpec(specs[i].shape, out_specs[0].dtype, out_specs[0].layout)) for i in keep
    ]
    return tt_finish(tt, tt.concat(parts, dim=d), out_specs[0])


@ttnn("stack")
def tt_stack(tt, inputs, attrs, numerics, out_specs):
    d = norm_dim(attrs["dim"], len(inputs[0].shape) + 1, "stack")
    parts = [tt_finish(tt, t, TensorSpec(tuple(t.shape), out_specs[0].dtype, out_specs[0].layout)) for t in inputs]
    return tt_finish(tt, tt.stack(parts, d), out_specs[0])


_tt_pad_by_gather = _static_move("pad")


@ttnn("pad")
def tt_pad(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    shape = list(x.shape)
    widths = mdefs.pad_widths(shape, attrs["pads"], attrs["mode"])
    if attrs["mode"] != "constant":
        return _tt_pad_by_gather(tt, inputs, attrs, numerics, out_specs)  # reflect / replicate / circular
    if any(lo < 0 or hi < 0 for lo, hi in widths):  # negative pads crop first
        starts = [max(-lo, 0) for lo, _ in widths]
        ends = [n - max(-hi, 0) for n, (_, hi) in zip(shape, widths)]
        x = tt.slice(x, starts, ends, [1] * len(shape))
    x = tt.to_layout(x, tt.ROW_MAJOR_LAYOUT)  # TT-NN pads the front of a dim in row-major layout only
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    return tt_finish(tt, tt.pad(x, grow, float(attrs["value"])), out_specs[0])


ttnn("as_strided")(_static_move("as_strided"))
ttnn("flip")(_static_move("flip"))
ttnn("diagonal")(_static_move("diagonal"))


@ttnn("roll")
def tt_roll(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    shifts = list(mdefs.ints(attrs["shifts"], "roll", "shifts"))
    if attrs["dims"] is None:
        flat = tt.roll(tt.reshape(x, [int(np.prod(list(x.shape)))]), shifts, [0])
        return tt_finish(tt, tt.reshape(flat, list(out_specs[0].shape)), out_specs[0])
    dims = list(mdefs.dims_of(attrs["dims"], len(x.shape), "roll"))
    return tt_finish(tt, tt.roll(x, shifts, dims), out_specs[0])


@ttnn("repeat")
def tt_repeat(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    reps = list(mdefs.ints(attrs["repeats"], "repeat", "repeats"))
    if not reps:  # no repeats of a scalar: the scalar (TT-NN's repeat takes rank >= 1)
        return tt_finish(tt, x, out_specs[0])
    x = tt.reshape(x, [1] * (len(reps) - len(x.shape)) + list(x.shape))
    return tt_finish(tt, tt.repeat(x, reps), out_specs[0])


@ttnn("repeat_interleave")
def tt_repeat_interleave(tt, inputs, attrs, numerics, out_specs):
    if len(inputs) == 2:
        raise KohakuTTUnsupportedOperator("repeat_interleave with a repeats tensor has no TT-NN op; pass an int")
    x = inputs[0]
    if attrs["dim"] is None or not len(x.shape):
        x, d = tt.reshape(x, [int(np.prod(list(x.shape)))]), 0
    else:
        d = norm_dim(attrs["dim"], len(x.shape), "repeat_interleave")
    return tt_finish(tt, tt.repeat_interleave(x, int(attrs["repeats"]), dim=d), out_specs[0])


@ttnn("tril")
def tt_tril(tt, inputs, attrs, numerics, out_specs):
    return tt_finish(tt, tt.tril(inputs[0], diagonal=int(attrs["diagonal"])), out_specs[0])


@ttnn("triu")
def tt_triu(tt, inputs, attrs, numerics, out_specs):
    return tt_finish(tt, tt.triu(inputs[0], diagonal=int(attrs["diagonal"])), out_specs[0])


@ttnn("gather")
def tt_gather(tt, inputs, attrs, numerics, out_specs):
    x, idx = inputs
    d = norm_dim(attrs["dim"], len(x.shape), "gather")
    return tt_finish(tt, tt.gather(tt.to_layout(x, tt.TILE_LAYOUT), d, index=tt_index(tt, idx)), out_specs[0])


_TT_REDUCE = {None: None, "sum": "add", "prod": "multiply"}  # TT-NN 0.81.1's scatter reduces by add or multiply


@ttnn("scatter")
def tt_scatter(tt, inputs, attrs, numerics, out_specs):
    x, idx, src = inputs
    if attrs["reduce"] not in _TT_REDUCE or (attrs["reduce"] is not None and not attrs["include_self"]):
        raise KohakuTTUnsupportedOperator(
            f"scatter: TT-NN's scatter has no reduce={attrs['reduce']!r} with include_self={attrs['include_self']}"
        )
    d = norm_dim(attrs["dim"], len(x.shape), "scatter")
    if x.dtype == tt.float32:  # TT-NN's scatter takes float32 in row-major layout only (input and source)
        x = tt.to_layout(x, tt.ROW_MAJOR_LAYOUT)
    if not hasattr(src, "shape"):
        src = tt.full(shape=list(idx.shape), fill_value=src, dtype=x.dtype, layout=x.layout, device=x.device())
    elif src.dtype == tt.float32:
        src = tt.to_layout(src, tt.ROW_MAJOR_LAYOUT)
    # a tiled int index has a length limit along dim: TT-NN takes the index row-major
    index = tt.to_layout(tt_index(tt, idx), tt.ROW_MAJOR_LAYOUT)
    out = tt.scatter(x, d, index, src, reduce=_TT_REDUCE[attrs["reduce"]])
    return tt_finish(tt, out, out_specs[0])


@ttnn("index_select")
def tt_index_select(tt, inputs, attrs, numerics, out_specs):
    x, idx = inputs
    shape = list(out_specs[0].shape)
    if len(shape) <= 1:  # TT-NN's gather and expand take rank >= 2: a vector (or scalar) gathers as one row
        n, m = max(1, int(np.prod(list(x.shape)))), max(1, int(np.prod(list(idx.shape))))
        row = tt.gather(tt.reshape(x, [1, n]), -1, index=tt_index(tt, tt.reshape(idx, [1, m])))
        return tt_finish(tt, tt.reshape(row, shape), out_specs[0])
    d = norm_dim(attrs["dim"], len(shape), "index_select")
    col = tt.reshape(idx, [shape[d] if k == d else 1 for k in range(len(shape))])
    return tt_finish(
        tt, tt.gather(tt.to_layout(x, tt.TILE_LAYOUT), d, index=tt_index(tt, tt.expand(col, shape))), out_specs[0]
    )


@ttnn("masked_fill")
def tt_masked_fill(tt, inputs, attrs, numerics, out_specs):
    x, mask, value = inputs
    cond = tt.typecast(tt.to_layout(mask, tt.TILE_LAYOUT), x.dtype)
    return tt_finish(tt, tt.where(cond, value, x), out_specs[0])


@ttnn("one_hot")
def tt_one_hot(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    classes = tt.arange(
        start=0, end=int(attrs["num_classes"]), step=1, dtype=tt.int32, device=x.device(), layout=tt.TILE_LAYOUT
    )
    return tt_finish(tt, tt.eq(tt.unsqueeze(x, -1), classes), out_specs[0])


@ttnn("sort")
def tt_sort(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    d = norm_dim(attrs["dim"], len(x.shape), "sort")
    if x.dtype not in (tt.bfloat16, tt.float32):  # float32 holds no int32 exactly above 2^24: refuse, not reorder
        raise KohakuTTUnsupportedOperator(f"sort: TT-NN's sort takes bfloat16 / float32 values, not {x.dtype}")
    vals, order = tt.sort(x, dim=d, descending=bool(attrs["descending"]), stable=bool(attrs["stable"]))
    return [tt_finish(tt, vals, out_specs[0]), tt_finish(tt, order, out_specs[1])]


@ttnn("topk", supports=_topk_supports)
def tt_topk(tt, inputs, attrs, numerics, out_specs):
    x = inputs[0]
    if x.dtype not in (tt.bfloat16, tt.float32, tt.bfloat8_b):  # float32 holds no int32 exactly above 2^24
        raise KohakuTTUnsupportedOperator(f"topk: TT-NN's topk takes bfloat16 / bfloat8_b / float32 values, "
                                          f"not {x.dtype}")  # fmt: skip
    shape = tuple(x.shape)
    if not shape:  # a scalar is its own top value, at index 0 (TT-NN's topk takes rank >= 1)
        x = tt.reshape(x, [1])
    d = norm_dim(attrs["dim"], len(x.shape), "topk")
    vals, order = tt.topk(
        tt.to_layout(x, tt.TILE_LAYOUT),
        int(attrs["k"]),
        dim=d,
        largest=bool(attrs["largest"]),
        sorted=bool(attrs["sorted"]),
    )
    if not shape:
        vals, order = tt.reshape(vals, []), tt.reshape(order, [])
    return [tt_finish(tt, vals, out_specs[0]), tt_finish(tt, order, out_specs[1])]


def _tt_device(tt: Any, device: Any) -> Any:
    return device if device is not None else tt.GetDefaultDevice()


@ttnn("full")
def tt_full(tt, inputs, attrs, numerics, out_specs, device=None):
    s = out_specs[0]
    return tt.full(
        shape=list(s.shape),
        fill_value=attrs["value"],
        dtype=tt_dtype(tt, s.dtype),
        layout=tt_layout(tt, s),
        device=_tt_device(tt, device),
    )


@ttnn("zeros")
def tt_zeros(tt, inputs, attrs, numerics, out_specs, device=None):
    s = out_specs[0]
    return tt.zeros(
        shape=list(s.shape), dtype=tt_dtype(tt, s.dtype), layout=tt_layout(tt, s), device=_tt_device(tt, device)
    )


@ttnn("ones")
def tt_ones(tt, inputs, attrs, numerics, out_specs, device=None):
    s = out_specs[0]
    return tt.ones(
        shape=list(s.shape), dtype=tt_dtype(tt, s.dtype), layout=tt_layout(tt, s), device=_tt_device(tt, device)
    )


@ttnn("arange")
def tt_arange(tt, inputs, attrs, numerics, out_specs, device=None):
    start, end, step, _, _ = mdefs.arange_params(attrs)
    s = out_specs[0]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)):
        # TT-NN's arange takes integer bounds only: fractional ones are made on the host, as the simulator does
        return _tt_upload(tt, arange(SimCall("arange", [], [], attrs, numerics, out_specs)), s, device)
    out = tt.arange(
        start=start,
        end=end,
        step=step,
        dtype=tt_dtype(tt, s.dtype),
        device=_tt_device(tt, device),
        layout=tt_layout(tt, s),
    )
    return tt_finish(tt, tt.reshape(out, list(s.shape)), s)


def _tt_upload(tt: Any, values: np.ndarray, spec: TensorSpec, device: Any) -> Any:
    """Host-computed values sent to the card (TT-NN has no linspace / eye): one host-to-device copy."""
    host_dtype = np.uint8 if spec.dtype is DType.BOOL else spec.dtype.compute
    values = np.ascontiguousarray(values, dtype=host_dtype)
    host = tt.Tensor(values, tt_dtype(tt, spec.dtype), None, tt_layout(tt, spec))
    return tt.to_device(host, _tt_device(tt, device))


@ttnn("linspace")
def tt_linspace(tt, inputs, attrs, numerics, out_specs, device=None):
    values = linspace(SimCall("linspace", [], [], attrs, numerics, out_specs))
    return _tt_upload(tt, values, out_specs[0], device)


@ttnn("eye")
def tt_eye(tt, inputs, attrs, numerics, out_specs, device=None):
    return _tt_upload(tt, eye(SimCall("eye", [], [], attrs, numerics, out_specs)), out_specs[0], device)


# What TT-NN's kernels refuse (the @ttnn functions above raise on it), declared so the sim and a card both pass such a
# call to the host
def _scatter_supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    reduce = attrs["reduce"]
    if reduce not in _TT_REDUCE or (reduce is not None and not attrs["include_self"]):
        return f"TT-NN's scatter has no reduce={reduce!r} with include_self={attrs['include_self']}"
    return None


def _sort_supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    x = specs[0]
    if isinstance(x, TensorSpec) and x.dtype not in (DType.BFLOAT16, DType.FLOAT32):
        return f"TT-NN's sort takes bfloat16 / float32 values, not {x.dtype.value}"
    if isinstance(x, TensorSpec) and x.dtype is DType.BFLOAT16:
        return "TT-NN's sort of bfloat16 turns NaN into an infinity of its sign (a wrong value)"
    if attrs.get("stable"):
        return "TT-NN's stable sort turns -0.0 into +0.0"
    return None


declare(("scatter",), _scatter_supports)
declare(("sort",), _sort_supports)


def _repeats_supports(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    return "TT-NN has no repeat_interleave with a repeats tensor" if len(specs) == 2 else None


declare(("repeat_interleave",), _repeats_supports)
host("repeat_interleave", estimate=index_loop)(repeat_interleave)  # what TT-NN lacks: a repeats tensor
