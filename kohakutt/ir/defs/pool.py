"""IR ops of the pool family: max / average / adaptive pooling over 1, 2 or 3 spatial dims, and their backward ops.

Layout: x is (N, C, *spatial) or unbatched (C, *spatial); the number of pooled dims is the length of
``kernel_size`` (or of ``output_size`` for adaptive pooling). Indices are int32 flat positions in each input plane
(``d * H * W + h * W + w``), as PyTorch's.

Numerics (TT-NN 0.81.1 defaults, from tt-metal ``pool_multi_core_program_factory.cpp``): HiFi4, approximate mode
off, ``fp32_dest_acc_en`` only for an average pool whose window exceeds one reduction (32 rows: "large kernel") or
for 32-bit indices (Kohaku-TT's own kernels also for float32 data); fp32_acc is left unset here and filled so by
:func:`pool_numerics`. Max pooling is exact (a
NaN in a window gives NaN). TT-NN's average pool multiplies each window by a bf16 scaler ``bf16(1 / divisor)``
in the reduce unit and sums in fp32 per reduction, accumulating reductions in DST; Kohaku-TT's own kernel divides
the fp32 window sum by the divisor. Backward ops are Kohaku-TT's kernels: fp32 arithmetic, one rounding as stored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kohakutt.errors import DtypeError
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, define, float_tensor

FAMILY = "pool"
POOL_DEFAULT = Numerics(Fidelity.HiFi4, None, False)
REDUCE_ROWS = 32  # window elements one reduction sums (a tile's rows): more makes a "large kernel"


def pool_numerics(
    num: Numerics, window: int, wide_indices: bool = False, avg: bool = True, wide_data: bool = False
) -> tuple[Fidelity, bool]:
    """Fidelity and fp32 accumulation of a pool: the scope's, else TT-NN's pool defaults (Kohaku-TT's own kernels
    also keep an fp32 DST for float32 data: ``wide_data``)."""
    acc = num.fp32_acc
    if acc is None:
        acc = (avg and window > REDUCE_ROWS) or wide_indices or wide_data
    return num.fidelity if num.fidelity is not None else Fidelity.HiFi4, bool(acc)


@dataclass(frozen=True)
class PoolGeometry:
    """A pooling window's shapes resolved from the input shape and the attributes."""

    d: int
    batched: bool
    lead: tuple[int, ...]  # (N, C) or (C,)
    spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool
    out_spatial: tuple[int, ...]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.lead, *self.out_spatial)

    @property
    def window(self) -> int:
        return math.prod(self.kernel)


def _ints(value: Any, d: int, name: str, op: str, minimum: int) -> tuple[int, ...]:
    vals = (value,) * d if isinstance(value, int) else tuple(value)
    if len(vals) != d or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in vals):
        raise ShapeError(f"{op}: {name} must be an int >= {minimum} or {d} of them, got {value!r}")
    return vals


def _dims(x: Sequence[int], d: int, op: str) -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    if d not in (1, 2, 3):
        raise ShapeError(f"{op}: pooling runs over 1, 2 or 3 dims, got {d}")
    if len(x) not in (d + 1, d + 2):
        raise ShapeError(
            f"{op}: {d}-d pooling takes a {d + 2}-D (N, C, *spatial) or {d + 1}-D (C, *spatial) "
            f"input, got shape {tuple(x)}"
        )
    return len(x) == d + 2, tuple(x[: len(x) - d]), tuple(x[len(x) - d :])


def out_size(size: int, k: int, s: int, p: int, dl: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size (a ceil-mode window must start inside the input or its left padding)."""
    span = size + 2 * p - dl * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def pool_geometry(x: Sequence[int], attrs: dict[str, Any], op: str) -> PoolGeometry:
    """Check a pooling window against the input; a typed error says what does not fit."""
    ks = attrs["kernel_size"]
    if isinstance(ks, int) or not ks:
        raise ShapeError(
            f"{op}: kernel_size must be a tuple with one entry per pooled dim, e.g. (3, 3) for 2-d pooling, got {ks!r}"
        )
    d = len(ks)
    batched, lead, spatial = _dims(x, d, op)
    kernel = _ints(ks, d, "kernel_size", op, 1)
    stride = kernel if attrs["stride"] in (None, (), []) else _ints(attrs["stride"], d, "stride", op, 1)
    padding = _ints(attrs["padding"], d, "padding", op, 0)
    dilation = _ints(attrs.get("dilation", 1), d, "dilation", op, 1)
    for k, p, dl in zip(kernel, padding, dilation):
        if p > (dl * (k - 1) + 1) // 2:
            raise ShapeError(f"{op}: padding {padding} must be at most half the (dilated) kernel {kernel}")
    ceil = bool(attrs["ceil_mode"])
    out = tuple(out_size(i, k, s, p, dl, ceil) for i, k, s, p, dl in zip(spatial, kernel, stride, padding, dilation))
    if any(o < 1 for o in out) or 0 in spatial:
        raise ShapeError(
            f"{op}: the kernel {kernel} (dilation {dilation}, padding {padding}) does not fit the "
            f"input {spatial}: the output would be {out}"
        )
    return PoolGeometry(d, batched, lead, spatial, kernel, stride, padding, dilation, ceil, out)


def adaptive_geometry(
    x: Sequence[int], output_size: Any, op: str
) -> tuple[bool, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(batched, lead dims, input spatial, output spatial) of an adaptive pool; None in output_size keeps a dim."""
    if isinstance(output_size, int) or not output_size:
        raise ShapeError(f"{op}: output_size must be a tuple with one entry per pooled dim, got {output_size!r}")
    d = len(output_size)
    batched, lead, spatial = _dims(x, d, op)
    out = tuple(s if o is None else o for o, s in zip(output_size, spatial))
    if not all(isinstance(o, int) and o >= 1 for o in out):
        raise ShapeError(f"{op}: output_size entries must be positive ints (or None), got {output_size!r}")
    if 0 in spatial:
        raise ShapeError(f"{op}: the input {tuple(x)} has an empty pooled dim")
    return batched, lead, spatial, out


def _out_dtype(s: TensorSpec) -> DType:
    return DType.BFLOAT16 if s.dtype.is_block else s.dtype


def _indices(s: TensorSpec, shape: Sequence[int], op: str) -> TensorSpec:
    if not isinstance(s, TensorSpec) or s.dtype not in (DType.INT32, DType.UINT32, DType.UINT16):
        raise DtypeError(f"{op}: indices must be an int32 tensor (as max_pool returns them)")
    if tuple(s.shape) != tuple(shape):
        raise ShapeError(f"{op}: indices have shape {s.shape} but grad has {tuple(shape)}")
    return s


def _max_pool(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    x = float_tensor(inputs[0], "max_pool", "x")
    g = pool_geometry(x.shape, attrs, "max_pool")
    out = [TensorSpec(g.out_shape, _out_dtype(x), x.layout)]
    return [*out, TensorSpec(g.out_shape, DType.INT32)] if attrs["return_indices"] else out


def _avg_pool(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    x = float_tensor(inputs[0], "avg_pool", "x")
    g = pool_geometry(x.shape, attrs, "avg_pool")
    div = attrs["divisor_override"]
    if div is not None and (not isinstance(div, int) or div == 0):
        raise ShapeError(f"avg_pool: divisor_override must be a non-zero int or None, got {div!r}")
    return [TensorSpec(g.out_shape, _out_dtype(x), x.layout)]


def _adaptive(op: str, with_indices: bool) -> Any:
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        x = float_tensor(inputs[0], op, "x")
        _, lead, _, out = adaptive_geometry(x.shape, attrs["output_size"], op)
        res = [TensorSpec((*lead, *out), _out_dtype(x), x.layout)]
        return [*res, TensorSpec((*lead, *out), DType.INT32)] if with_indices and attrs["return_indices"] else res

    return infer


def _grad_like_x(op: str, geometry: Any) -> Any:
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        grad, x = float_tensor(inputs[0], op, "grad"), float_tensor(inputs[1], op, "x")
        out_shape = geometry(x.shape, attrs, op)
        if tuple(grad.shape) != tuple(out_shape):
            raise ShapeError(f"{op}: grad has shape {grad.shape} but the forward pool's output is {out_shape}")
        if len(inputs) > 3:
            raise ShapeError(f"{op} takes grad, x and optionally indices, got {len(inputs)} operands")
        if len(inputs) == 3:
            _indices(inputs[2], grad.shape, op)  # type: ignore[arg-type]
        return [TensorSpec(x.shape, promote(grad.dtype, x.dtype), x.layout)]

    return infer


def _window_out(x: Sequence[int], attrs: dict[str, Any], op: str) -> tuple[int, ...]:
    return pool_geometry(x, attrs, op).out_shape


def _adaptive_out(x: Sequence[int], attrs: dict[str, Any], op: str) -> tuple[int, ...]:
    _, lead, _, out = adaptive_geometry(x, attrs["output_size"], op)
    return (*lead, *out)


WINDOW = {"kernel_size": (), "stride": None, "padding": 0}
MAX_ATTRS = {**WINDOW, "dilation": 1, "ceil_mode": False}
AVG_ATTRS = {**WINDOW, "ceil_mode": False, "count_include_pad": True, "divisor_override": None}

define(
    "max_pool",
    FAMILY,
    ["x"],
    _max_pool,
    attrs={**MAX_ATTRS, "return_indices": False},
    numerics=POOL_DEFAULT,
    doc="Max pooling over the last len(kernel_size) dims (1-3) of (N, C, *spatial) or (C, *spatial): kernel_size, "
    "stride (default: the kernel), padding (implicit -inf, at most half the kernel), dilation, ceil_mode as "
    "PyTorch; with return_indices=True also the int32 flat index of each maximum in its input plane. "
    "Numerics: exact (a NaN in a window gives NaN); TT-NN's kernel reads float32 input through bf16 "
    "source registers unless fp32 accumulation is on.",
)
define(
    "avg_pool",
    FAMILY,
    ["x"],
    _avg_pool,
    attrs=dict(AVG_ATTRS),
    numerics=POOL_DEFAULT,
    doc="Average pooling over the last len(kernel_size) dims (1-3): kernel_size, stride, padding (zeros), "
    "ceil_mode, count_include_pad, divisor_override as PyTorch. Numerics: TT-NN's kernel scales each value by "
    "bf16(1 / divisor) in the reduce unit (HiFi4) and sums in fp32 per 32-row reduction (fp32 DST across "
    "reductions for large windows, else bf16); Kohaku-TT's divides the fp32 sum by the divisor. Rounded to "
    "the output dtype.",
)
define(
    "adaptive_avg_pool",
    FAMILY,
    ["x"],
    _adaptive("adaptive_avg_pool", False),
    attrs={"output_size": ()},
    numerics=POOL_DEFAULT,
    doc="Adaptive average pooling to output_size (one entry per pooled dim, None keeps the input's): window i "
    "spans [floor(i*S/O), ceil((i+1)*S/O)). Numerics as avg_pool (TT-NN: bf16 scaler 1 / window size).",
)
define(
    "adaptive_max_pool",
    FAMILY,
    ["x"],
    _adaptive("adaptive_max_pool", True),
    attrs={"output_size": (), "return_indices": False},
    numerics=POOL_DEFAULT,
    doc="Adaptive max pooling to output_size (windows as adaptive_avg_pool), optionally with int32 indices "
    "(TT-NN's adaptive_max_pool2d returns none: the own kernel does). Numerics: exact.",
)
define(
    "max_pool_backward",
    FAMILY,
    ["grad", "x", "*indices"],
    _grad_like_x("max_pool_backward", _window_out),
    attrs=dict(MAX_ATTRS),
    numerics=POOL_DEFAULT,
    doc="The gradient of max_pool: each grad value added at its window's maximum (from the int32 indices "
    "max_pool returned, or found again from x when none are passed); overlapping windows add up. Numerics: "
    "Kohaku-TT's kernel, fp32 sums, rounded once to the output dtype (x's, float32 if grad or x is).",
)
define(
    "avg_pool_backward",
    FAMILY,
    ["grad", "x"],
    _grad_like_x("avg_pool_backward", _window_out),
    attrs=dict(AVG_ATTRS),
    numerics=POOL_DEFAULT,
    doc="The gradient of avg_pool (same attributes): grad / divisor spread over each window, overlaps added. "
    "Numerics: Kohaku-TT's kernel, fp32 arithmetic, rounded once to the output dtype.",
)
define(
    "adaptive_avg_pool_backward",
    FAMILY,
    ["grad", "x"],
    _grad_like_x("adaptive_avg_pool_backward", _adaptive_out),
    attrs={"output_size": ()},
    numerics=POOL_DEFAULT,
    doc="The gradient of adaptive_avg_pool: grad / window size spread over each window. Numerics: Kohaku-TT's "
    "kernel, fp32 arithmetic, rounded once to the output dtype.",
)
define(
    "adaptive_max_pool_backward",
    FAMILY,
    ["grad", "x", "*indices"],
    _grad_like_x("adaptive_max_pool_backward", _adaptive_out),
    attrs={"output_size": ()},
    numerics=POOL_DEFAULT,
    doc="The gradient of adaptive_max_pool: grad added at each window's maximum (indices given, or found from "
    "x). Numerics: Kohaku-TT's kernel, fp32 sums, rounded once to the output dtype.",
)
