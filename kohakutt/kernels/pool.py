"""The pool family on each backend: the simulator's models of TT-NN's pooling kernels and of Kohaku-TT's own, and the
TT-NN calls.

torch's CPU pooling is the engine (window sums, maxima, indices); the card's arithmetic around it comes from
``cardmath``. TT-NN's average pool: each value times a bf16 scaler ``bf16(1 / divisor)`` in the reduce unit (data in
SrcA, scaler in SrcB, at the fidelity), summed in fp32 per reduction of up to 32 window rows; with a bf16 DST the
reductions of a large window accumulate with a bf16 rounding after each. Kohaku-TT's average pool divides the fp32
window sum by the divisor. TT-NN pools 2-d windows only (1-d runs as height-1 2-d); 3-d pooling and adaptive max
pooling with indices are Kohaku-TT's kernels only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from kohakutt.errors import IndexOutOfRangeError, KohakuTTUnsupportedOperator
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.pool import REDUCE_ROWS, PoolGeometry, adaptive_geometry, pool_geometry, pool_numerics
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import UNSET, Numerics
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath, cost
from kohakutt.kernels.matmul import FIDELITY_AND_DTYPE_NAMES, compute_config, ttnn_dtype
from kohakutt.kernels.registry import SimCall, host, sim, ttnn

TTNN_NAMES = (
    "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "permute", "reshape", "typecast",
    "to_layout", "to_memory_config", "DRAM_MEMORY_CONFIG", "ROW_MAJOR_LAYOUT", "int32",
    "init_device_compute_kernel_config",
    *FIDELITY_AND_DTYPE_NAMES,
)  # fmt: skip

WIDE_INDICES = 1 << 16  # input planes past this take 32-bit indices in TT-NN (and fp32 accumulation)


# ------------------------------------------------------------------------------------------------------ helpers
def _batched(x: np.ndarray, batched: bool) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t if batched else t.unsqueeze(0)


def _unbatched(t: torch.Tensor, batched: bool) -> np.ndarray:
    return (t if batched else t[0]).numpy()


def _as_2d(t: torch.Tensor, d: int) -> torch.Tensor:
    """A 1-d pool's (N, C, L) as a height-1 2-d one, as TT-NN runs it (torch's 1-d ops lack some options too)."""
    return t.unsqueeze(2) if d == 1 else t


def _pair(v: Sequence[int], d: int, fill: int) -> tuple[int, ...]:
    return (fill, *v) if d == 1 else tuple(v)


def _is_fp32(call: SimCall) -> bool:
    return call.in_specs[0].dtype is DType.FLOAT32  # type: ignore[union-attr]


def _window_sums(t: torch.Tensor, g: PoolGeometry) -> torch.Tensor:
    """Each window's sum (zero padding, windows clipped as PyTorch clips them), in fp32."""
    pool = F.avg_pool3d if g.d == 3 else F.avg_pool2d
    out = pool(
        _as_2d(t, g.d), _pair(g.kernel, g.d, 1), _pair(g.stride, g.d, 1), _pair(g.padding, g.d, 0), g.ceil_mode, True, 1
    )
    return out.squeeze(2) if g.d == 1 else out


def _window_chunks(t: torch.Tensor, g: PoolGeometry) -> list[torch.Tensor]:
    """Each window's sum split into the reductions of up to REDUCE_ROWS window elements the card runs one by one."""
    extra = [
        max(0, (o - 1) * s + k - (i + 2 * p))
        for o, s, k, i, p in zip(g.out_spatial, g.stride, g.kernel, g.spatial, g.padding)
    ]
    padded = F.pad(t, [v for p, e in zip(reversed(g.padding), reversed(extra)) for v in (p, p + e)])
    view = padded
    for dim, (k, s) in enumerate(zip(g.kernel, g.stride)):
        view = view.unfold(2 + dim, k, s)  # (N, C, *out, *kernel)
    view = view[(slice(None), slice(None), *(slice(0, o) for o in g.out_spatial))]
    flat = view.reshape(*view.shape[: 2 + g.d], -1)
    return [flat[..., i : i + REDUCE_ROWS].sum(-1) for i in range(0, flat.shape[-1], REDUCE_ROWS)]


def _divisors(g: PoolGeometry, count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    """avg_pool's divisor for every output position (PyTorch's rule), shape out_spatial."""
    if divisor_override is not None:
        return np.full(g.out_spatial, float(divisor_override))
    sizes = []
    for o, s, k, i, p in zip(g.out_spatial, g.stride, g.kernel, g.spatial, g.padding):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, i + p)
        sizes.append(end - start if count_include_pad else np.minimum(end, i) - np.maximum(start, 0))
    out = sizes[0].astype(np.float64)
    for size in sizes[1:]:
        out = np.multiply.outer(out, size)
    return out


def _scaled_sums(x: np.ndarray, scale: np.ndarray, fid: Any, fp32_acc: bool, sums: Any) -> torch.Tensor:
    """TT-NN's reduce: sum over window elements of x * scale (data in SrcA, scale in SrcB at the fidelity, the
    phases' products summed in fp32); ``sums(part)`` gives a part's window sums (one tensor or per-reduction list)."""
    pairs = cardmath.fidelity_operands(x, scale, fid, op="eltwise", fp32_acc=fp32_acc)
    per_phase = [(sums(xa), torch.from_numpy(sb)) for xa, sb in pairs]
    chunks = len(per_phase[0][0]) if isinstance(per_phase[0][0], list) else 0
    if not chunks:
        return sum(s * sb for s, sb in per_phase)  # type: ignore[return-value]
    acc = None
    for c in range(chunks):  # bf16 DST: each reduction's sum added to DST, which is rounded after it
        part = sum(s[c] * sb for s, sb in per_phase)
        acc = part if acc is None else acc + part
        acc = acc.to(torch.bfloat16).float()
    return acc  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------------ forward
def _max_pool(call: SimCall, provider: str) -> np.ndarray | list[np.ndarray]:
    x = call.inputs[0]
    g = pool_geometry(x.shape, call.attrs, "max_pool")
    if provider == "ttnn":
        if g.d == 3:
            raise KohakuTTUnsupportedOperator(
                "max_pool: TT-NN has no 3-d max pool; the host runs it (the default; provider='host')"
            )
        _, acc = pool_numerics(call.numerics, g.window, math.prod(g.spatial) > WIDE_INDICES, avg=False)
        if _is_fp32(call):
            x = cardmath.to_source_register(x, fp32_acc=acc)  # the data passes through SrcA
    t = _batched(x, g.batched)
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[g.d]
    vals, idx = pool(t, g.kernel, g.stride, g.padding, g.dilation, g.ceil_mode, True)
    if not call.attrs["return_indices"]:
        return _unbatched(vals, g.batched)
    return [_unbatched(vals, g.batched), _unbatched(idx.to(torch.int32), g.batched)]


def _avg_pool(call: SimCall, provider: str) -> np.ndarray:
    x = call.inputs[0]
    g = pool_geometry(x.shape, call.attrs, "avg_pool")
    if provider == "ttnn" and g.d == 3:
        raise KohakuTTUnsupportedOperator(
            "avg_pool: TT-NN has no 3-d average pool; the host runs it (the default; provider='host')"
        )
    fid, acc = pool_numerics(call.numerics, g.window, wide_data=provider == "host" and _is_fp32(call))
    div = _divisors(g, call.attrs["count_include_pad"], call.attrs["divisor_override"])
    chunked = not acc and g.window > REDUCE_ROWS

    def sums(part: np.ndarray) -> Any:
        t = _batched(part, g.batched)
        return _window_chunks(t, g) if chunked else _window_sums(t, g)

    if provider == "ttnn":
        scale = cardmath.round_to(1.0 / div, "bfloat16")
        out = _scaled_sums(x, scale.astype(np.float32), fid, acc, sums)
    else:
        total = sums(x)
        if chunked:
            acc_t = None
            for c in total:
                acc_t = (c if acc_t is None else acc_t + c).to(torch.bfloat16).float()
            total = acc_t
        out = total / torch.from_numpy(div.astype(np.float32))
    if not acc:
        out = out.to(torch.bfloat16).float()  # a bf16 DST holds the result before it is stored
    return _unbatched(out, g.batched)


def _adaptive_windows(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def _adaptive_avg(call: SimCall, provider: str) -> np.ndarray:
    x = call.inputs[0]
    batched, _, spatial, out = adaptive_geometry(x.shape, call.attrs["output_size"], "adaptive_avg_pool")
    d = len(spatial)
    if provider == "ttnn" and d == 3:
        raise KohakuTTUnsupportedOperator(
            "adaptive_avg_pool: TT-NN has no 3-d adaptive pool; the host runs it (the default; provider='host')"
        )
    ranges = [_adaptive_windows(s, o) for s, o in zip(spatial, out)]
    counts = np.ones(())
    for start, end in ranges:
        counts = np.multiply.outer(counts, end - start)
    fid, acc = pool_numerics(call.numerics, int(counts.max()), wide_data=provider == "host" and _is_fp32(call))

    def sums(part: np.ndarray) -> torch.Tensor:
        t = _batched(part, batched)
        for dim, (size, (start, end)) in enumerate(zip(spatial, ranges)):  # a 0/1 window matrix per pooled dim
            pos = np.arange(size)[:, None]
            sel = torch.from_numpy(((pos >= start) & (pos < end)).astype(np.float32))
            t = torch.movedim(cardmath.engine_matmul(torch.movedim(t, 2 + dim, -1), sel), -1, 2 + dim)
        return t

    if provider == "ttnn":
        scale = cardmath.round_to(1.0 / counts, "bfloat16").astype(np.float32)
        res = _scaled_sums(x, scale, fid, acc, sums)
    else:
        res = sums(x) / torch.from_numpy(counts.astype(np.float32))
    if not acc:
        res = res.to(torch.bfloat16).float()
    return _unbatched(res, batched)


def _adaptive_max(call: SimCall, provider: str) -> np.ndarray | list[np.ndarray]:
    x = call.inputs[0]
    batched, _, spatial, out = adaptive_geometry(x.shape, call.attrs["output_size"], "adaptive_max_pool")
    d = len(spatial)
    if provider == "ttnn" and (d == 3 or call.attrs["return_indices"]):
        why = "no 3-d adaptive max pool" if d == 3 else "no indices from adaptive_max_pool2d"
        raise KohakuTTUnsupportedOperator(
            f"adaptive_max_pool: TT-NN has {why}; the host runs it (the default; provider='host')"
        )
    pool = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[d]
    vals, idx = pool(_batched(x, batched), out, True)
    if not call.attrs["return_indices"]:
        return _unbatched(vals, batched)
    return [_unbatched(vals, batched), _unbatched(idx.to(torch.int32), batched)]


def _estimate_pool(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """One reduce per 32 channels of each output position and per 32 window rows, 16 cycles each, against traffic."""
    x = ins[0]
    window = (
        math.prod(attrs["kernel_size"])
        if "kernel_size" in attrs
        else max(
            1,
            math.prod(x.shape[-len(attrs["output_size"]) :])
            // max(1, math.prod(outs[0].shape[-len(attrs["output_size"]) :])),
        )
    )
    cycles = cost.FPU_TILE_CYCLES * 32 * -(-window // REDUCE_ROWS)
    return cost.memory_bound(ins, outs[:1], card, cycles)


_TTNN_POOL_DTYPES = (DType.BFLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B)


def _ttnn_pool_supports(specs: list, attrs: dict, num: Numerics = UNSET) -> str | None:
    """TT-NN pools 1-d and 2-d windows of bfloat16 (or block float) data only, its adaptive pools one window size per
    dim, and its adaptive max pool returns no indices (what the ``@ttnn`` functions below refuse)."""
    d = len(attrs["kernel_size"] if "kernel_size" in attrs else attrs["output_size"])
    if d == 3:
        return "TT-NN has no 3-d pools"
    if "output_size" in attrs and attrs.get("return_indices"):
        return "TT-NN's adaptive_max_pool2d returns no indices"
    x = specs[0]
    if isinstance(x, TensorSpec) and x.dtype not in _TTNN_POOL_DTYPES:
        return f"TT-NN's pools take and return bfloat16 only, not {x.dtype.value}"
    if "output_size" in attrs and isinstance(x, TensorSpec):
        _, _, spatial, out = adaptive_geometry(tuple(x.shape), attrs["output_size"], "adaptive pool")
        if any(i % o for i, o in zip(spatial, out)):
            return "TT-NN's adaptive pools need every input size divisible by its output size (one window per dim)"
    return None


for _op, _fn in (
    ("max_pool", _max_pool),
    ("avg_pool", _avg_pool),
    ("adaptive_avg_pool", _adaptive_avg),
    ("adaptive_max_pool", _adaptive_max),
):
    sim(_op, estimate=_estimate_pool, supports=_ttnn_pool_supports)(lambda call, _fn=_fn: _fn(call, "ttnn"))
    host(_op, estimate=_estimate_pool)(lambda call, _fn=_fn: _fn(call, "host"))


# ----------------------------------------------------------------------------------------------------- backward
def _scatter_max(grad: np.ndarray, idx: torch.Tensor, x_shape: Sequence[int], d: int) -> np.ndarray:
    lead = x_shape[: len(x_shape) - d]
    plane = math.prod(x_shape[len(x_shape) - d :])
    idx = idx.reshape(math.prod(lead), -1).to(torch.int64)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= plane):
        raise IndexOutOfRangeError(
            f"max pool backward: an index is outside the input plane of {plane} values; pass "
            "the indices max_pool returned for this x"
        )
    out = torch.zeros(math.prod(lead), plane, dtype=torch.float32)
    out.scatter_add_(1, idx, torch.from_numpy(np.ascontiguousarray(grad, dtype=np.float32)).reshape(idx.shape))
    return out.reshape(tuple(x_shape)).numpy()


@host("max_pool_backward", estimate=cost.default)
def max_pool_backward(call: SimCall) -> np.ndarray:
    grad, x = call.inputs[0], call.inputs[1]
    g = pool_geometry(x.shape, call.attrs, "max_pool_backward")
    if len(call.inputs) == 3:
        idx = torch.from_numpy(np.asarray(call.inputs[2]).astype(np.int64))
    else:
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[g.d]
        idx = pool(_batched(x, g.batched), g.kernel, g.stride, g.padding, g.dilation, g.ceil_mode, True)[1]
    return _scatter_max(grad, idx, x.shape, g.d)


@host("adaptive_max_pool_backward", estimate=cost.default)
def adaptive_max_pool_backward(call: SimCall) -> np.ndarray:
    grad, x = call.inputs[0], call.inputs[1]
    batched, _, spatial, out = adaptive_geometry(x.shape, call.attrs["output_size"], "adaptive_max_pool_backward")
    if len(call.inputs) == 3:
        idx = torch.from_numpy(np.asarray(call.inputs[2]).astype(np.int64))
    else:
        pool = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}[len(spatial)]
        idx = pool(_batched(x, batched), out, True)[1]
    return _scatter_max(grad, idx, x.shape, len(spatial))


@host("avg_pool_backward", estimate=cost.default)
def avg_pool_backward(call: SimCall) -> np.ndarray:
    grad, x = call.inputs[0], call.inputs[1]
    g = pool_geometry(x.shape, call.attrs, "avg_pool_backward")
    gt, xt = _as_2d(_batched(grad, g.batched), g.d), _as_2d(_batched(x, g.batched), g.d)
    fn = torch.ops.aten.avg_pool3d_backward if g.d == 3 else torch.ops.aten.avg_pool2d_backward
    res = fn(
        gt,
        xt,
        list(_pair(g.kernel, g.d, 1)),
        list(_pair(g.stride, g.d, 1)),
        list(_pair(g.padding, g.d, 0)),
        g.ceil_mode,
        bool(call.attrs["count_include_pad"]),
        call.attrs["divisor_override"],
    )
    return _unbatched(res.squeeze(2) if g.d == 1 else res, g.batched)


@host("adaptive_avg_pool_backward", estimate=cost.default)
def adaptive_avg_pool_backward(call: SimCall) -> np.ndarray:
    grad, x = call.inputs[0], call.inputs[1]
    batched, _, spatial, _ = adaptive_geometry(x.shape, call.attrs["output_size"], "adaptive_avg_pool_backward")
    d = len(spatial)
    gt, xt = _as_2d(_batched(grad, batched), d), _as_2d(_batched(x, batched), d)
    fn = torch.ops.aten._adaptive_avg_pool3d_backward if d == 3 else torch.ops.aten._adaptive_avg_pool2d_backward
    res = fn(gt, xt)
    return _unbatched(res.squeeze(2) if d == 1 else res, batched)


# ----------------------------------------------------------------------------------------------- TT-NN (a card)
def _to_rows(tt: Any, x: Any, lead: Sequence[int], spatial: Sequence[int], op: str = "pool"
             ) -> tuple[Any, int, int, int, int]:  # fmt: skip
    """NCHW (or CHW, NCL) to TT-NN's pooling input [1, 1, N*H*W, C]; returns it with (N, H, W, C). TT-NN's pools
    compute and return bfloat16 (or block floats) only: another dtype is refused, not rounded."""
    if x.dtype in (tt.bfloat8_b, tt.bfloat4_b):
        x = tt.typecast(x, tt.bfloat16)  # exact: a block float's values all fit bfloat16
    elif x.dtype != tt.bfloat16:
        raise KohakuTTUnsupportedOperator(f"{op}: TT-NN's pools take and return bfloat16 only, not {x.dtype}; "
                                          "cast the input to bfloat16")  # fmt: skip
    n, c = (lead[0], lead[1]) if len(lead) == 2 else (1, lead[0])
    h, w = (1, spatial[0]) if len(spatial) == 1 else spatial
    x = tt.reshape(x, (n, c, h, w))
    x = tt.permute(x, (0, 2, 3, 1))
    return tt.reshape(x, (1, 1, n * h * w, c)), n, h, w, c


def _from_rows(tt: Any, y: Any, lead: Sequence[int], n: int, c: int, out: Sequence[int]) -> Any:
    ho, wo = (1, out[0]) if len(out) == 1 else out
    y = tt.to_memory_config(y, tt.DRAM_MEMORY_CONFIG)  # pools return L1-sharded rows, which reshape cannot take
    y = tt.permute(tt.reshape(y, (n, ho, wo, c)), (0, 3, 1, 2))
    return tt.reshape(y, (*lead, *out))


@ttnn("max_pool", supports=_ttnn_pool_supports)
def max_pool_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    g = pool_geometry(tuple(inputs[0].shape), attrs, "max_pool")
    if g.d == 3:
        raise KohakuTTUnsupportedOperator("max_pool: TT-NN has no 3-d max pool")
    x, n, h, w, c = _to_rows(tt, inputs[0], g.lead, g.spatial, "max_pool")
    res = tt.max_pool2d(
        x,
        n,
        h,
        w,
        c,
        list(_pair(g.kernel, g.d, 1)),
        list(_pair(g.stride, g.d, 1)),
        list(_pair(g.padding, g.d, 0)),
        list(_pair(g.dilation, g.d, 1)),
        g.ceil_mode,
        return_indices=bool(attrs["return_indices"]),
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
    )
    if not attrs["return_indices"]:
        return _from_rows(tt, res, g.lead, n, c, g.out_spatial)
    vals, idx = res
    idx = tt.typecast(tt.to_layout(idx, tt.ROW_MAJOR_LAYOUT), tt.int32)
    return _from_rows(tt, vals, g.lead, n, c, g.out_spatial), _from_rows(tt, idx, g.lead, n, c, g.out_spatial)


@ttnn("avg_pool", supports=_ttnn_pool_supports)
def avg_pool_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    g = pool_geometry(tuple(inputs[0].shape), attrs, "avg_pool")
    if g.d == 3:
        raise KohakuTTUnsupportedOperator("avg_pool: TT-NN has no 3-d average pool")
    fid, acc = pool_numerics(numerics, g.window)
    x, n, h, w, c = _to_rows(tt, inputs[0], g.lead, g.spatial, "avg_pool")
    res = tt.avg_pool2d(
        x,
        n,
        h,
        w,
        c,
        list(_pair(g.kernel, g.d, 1)),
        list(_pair(g.stride, g.d, 1)),
        list(_pair(g.padding, g.d, 0)),
        g.ceil_mode,
        bool(attrs["count_include_pad"]),
        attrs["divisor_override"],
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
        compute_kernel_config=compute_config(tt, inputs[0].device(), fid, acc, packer_l1_acc=False),
    )
    return _from_rows(tt, res, g.lead, n, c, g.out_spatial)


def _uniform_windows(spatial: Sequence[int], out: Sequence[int], op: str) -> None:
    """TT-NN's adaptive pools run one window size and stride per dim: refuse sizes that need varying windows."""
    if any(o == 0 or i % o for i, o in zip(spatial, out)):
        raise KohakuTTUnsupportedOperator(
            f"{op}: TT-NN's adaptive pools need every input size divisible by its output size (one window per dim); "
            f"got {tuple(spatial)} -> {tuple(out)}"
        )


@ttnn("adaptive_avg_pool", supports=_ttnn_pool_supports)
def adaptive_avg_pool_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    _, lead, spatial, out = adaptive_geometry(tuple(inputs[0].shape), attrs["output_size"], "adaptive_avg_pool")
    if len(spatial) == 3:
        raise KohakuTTUnsupportedOperator("adaptive_avg_pool: TT-NN has no 3-d adaptive pool")
    _uniform_windows(spatial, out, "adaptive_avg_pool")
    fid, acc = pool_numerics(numerics, math.prod(spatial) // math.prod(out))
    x, n, h, w, c = _to_rows(tt, inputs[0], lead, spatial, "adaptive_avg_pool")
    res = tt.adaptive_avg_pool2d(
        x,
        n,
        h,
        w,
        c,
        list(_pair(out, len(out), 1)),
        compute_kernel_config=compute_config(tt, inputs[0].device(), fid, acc, packer_l1_acc=False),
    )
    return _from_rows(tt, res, lead, n, c, out)


@ttnn("adaptive_max_pool", supports=_ttnn_pool_supports)
def adaptive_max_pool_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    _, lead, spatial, out = adaptive_geometry(tuple(inputs[0].shape), attrs["output_size"], "adaptive_max_pool")
    if len(spatial) == 3 or attrs["return_indices"]:
        raise KohakuTTUnsupportedOperator("adaptive_max_pool: TT-NN runs 2-d windows without indices only")
    _uniform_windows(spatial, out, "adaptive_max_pool")
    x, n, h, w, c = _to_rows(tt, inputs[0], lead, spatial, "adaptive_max_pool")
    res = tt.adaptive_max_pool2d(x, n, h, w, c, list(_pair(out, len(out), 1)))
    return _from_rows(tt, res, lead, n, c, out)
