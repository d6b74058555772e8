"""Tensor creation on ``tt``: ``full``, ``arange``, ``linspace``, ``logspace``, ``eye``, ``scalar_tensor``.

Every value is made on the card by an IR creation op (``kohakutt.ir.defs.movement``) and stored in the output's
dtype as the packer rounds it; sizes and dtypes follow PyTorch (its meta kernels). ``zeros`` / ``ones`` /
``empty_like`` / ``new_*`` reach the card through PyTorch's own decompositions into ``empty`` and ``fill_``.
A value that does not fit an integer dtype (``full((2,), 2**33, dtype=torch.int32)``, an int32 ``arange`` past
int32) raises :class:`~kohakutt.errors.IntegerOverflowError`; int64 creation is exact.
"""

from __future__ import annotations

from typing import Any

import torch
from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.frontends.torch import tensors
from kohakutt.frontends.torch.aten.core import fill_scalar
from kohakutt.frontends.torch.aten.movement import nonzero_rows
from kohakutt.frontends.torch.aten.registry import ir, kernel, resize_out, scratch, to_meta

aten = torch.ops.aten


def _check_layout(layout: Any, op: str) -> None:
    if layout not in (None, torch.strided):
        raise KohakuTTUnsupportedOperator(f"{op}: tt tensors are strided (dense); layout={layout} is not supported")


def _meta_out(out: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=out.dtype, device="meta")


# ---------------------------------------------------------------------------------------------------- full
@kernel("full", ir=("full",))
def full(size: list[int], fill_value: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
         device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    _check_layout(layout, "full")
    meta = aten.full.default(size, fill_value, dtype=dtype, device="meta")
    return fill_scalar(tensors.new(meta.shape, None, meta.dtype, tensors.index_of(device)), fill_value)


@kernel("full.out", ir=("full",))
def full_out(size: list[int], fill_value: Any, *, out: torch.Tensor) -> torch.Tensor:
    resize_out(out, torch.empty(size, dtype=out.dtype, device="meta"))
    return fill_scalar(out, fill_value)


@kernel("full_like", ir=("full",))
def full_like(self: torch.Tensor, fill_value: Any, *, dtype: torch.dtype | None = None, layout: Any = None,
              device: Any = None, pin_memory: bool | None = None,
              memory_format: torch.memory_format | None = None) -> torch.Tensor:  # fmt: skip
    _check_layout(layout, "full_like")
    found: set[str] = set()
    meta = aten.full_like.default(to_meta(self, found), fill_value, dtype=dtype, memory_format=memory_format)
    index = tensors.index_of(device) if device is not None else (self.device.index or 0)
    return fill_scalar(tensors.new_like(meta, index), fill_value)


@kernel("scalar_tensor", ir=("full",))
def scalar_tensor(s: Any, *, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
                  pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    _check_layout(layout, "scalar_tensor")
    out = tensors.new([], None, dtype or torch.get_default_dtype(), tensors.index_of(device))
    return fill_scalar(out, s)


# ---------------------------------------------------------------------------------------------------- arange
def arange_into(start: Any, end: Any, step: Any, out: torch.Tensor) -> torch.Tensor:
    """``start, start + step, ...`` below ``end`` into ``out`` (resized to PyTorch's length)."""
    meta = aten.arange.start_out(start, end, step, out=_meta_out(out))  # PyTorch's checks and length
    resize_out(out, meta)
    n = out.numel()
    if not n:
        return out
    # the IR's arange checks that every value fits the dtype (IntegerOverflowError)
    attrs = {"start": start, "end": end, "step": step, "dtype": tensors.check_dtype(out.dtype).value}
    ir("arange", [], attrs, [out], out.device.index or 0)
    return out


@kernel("arange.start_out", ir=("arange",))
def arange_start_out(start: Any, end: Any, step: Any = 1, *, out: torch.Tensor) -> torch.Tensor:
    return arange_into(start, end, step, out)


@kernel("arange.out", ir=("arange",))
def arange_out(end: Any, *, out: torch.Tensor) -> torch.Tensor:
    return arange_into(0, end, 1, out)


@kernel("arange", "arange.start", "arange.start_step", ir=("arange",))
def arange(*args: Any, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
           pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    """``arange(end)``, ``arange(start, end)`` and ``arange(start, end, step)``."""
    _check_layout(layout, "arange")
    start, end, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    meta = aten.arange.start_step(start, end, step, dtype=dtype, device="meta")
    return arange_into(start, end, step, tensors.new([0], None, meta.dtype, tensors.index_of(device)))


# ---------------------------------------------------------------------------------------------- linspace, logspace
def _scalar(x: Any, op: str) -> Any:
    if isinstance(x, torch.Tensor):
        if x.dim():
            raise RuntimeError(f"{op}() expected 'start' and 'end' to be 0-dimensional tensors, got {x.dim()} dims")
        return x.item()
    return x


def linspace_into(start: Any, end: Any, steps: int, out: torch.Tensor) -> torch.Tensor:
    """``steps`` values from ``start`` to ``end`` inclusive into ``out``."""
    start, end = _scalar(start, "linspace"), _scalar(end, "linspace")
    resize_out(out, aten.linspace.out(start, end, steps, out=_meta_out(out)))
    if out.numel():
        attrs = {"start": start, "end": end, "steps": steps, "dtype": tensors.check_dtype(out.dtype).value}
        ir("linspace", [], attrs, [out], out.device.index or 0)
    return out


@kernel("linspace.out", "linspace.Tensor_Tensor_out", "linspace.Tensor_Scalar_out", "linspace.Scalar_Tensor_out",
        ir=("linspace",))  # fmt: skip
def linspace_out(start: Any, end: Any, steps: int, *, out: torch.Tensor) -> torch.Tensor:
    return linspace_into(start, end, steps, out)


@kernel("linspace", "linspace.Tensor_Tensor", "linspace.Tensor_Scalar", "linspace.Scalar_Tensor", ir=("linspace",))
def linspace(start: Any, end: Any, steps: int, *, dtype: torch.dtype | None = None, layout: Any = None,
             device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    _check_layout(layout, "linspace")
    if device is None:
        device = next((x.device for x in (start, end) if isinstance(x, torch.Tensor) and x.device.type == "tt"), None)
    out = tensors.new([0], None, dtype or torch.get_default_dtype(), tensors.index_of(device))
    return linspace_into(start, end, steps, out)


def logspace_into(start: Any, end: Any, steps: int, base: float, out: torch.Tensor) -> torch.Tensor:
    """``base ** linspace(start, end, steps)`` into ``out``: the exponents in float32, the power on the SFPU."""
    start, end = _scalar(start, "logspace"), _scalar(end, "logspace")
    resize_out(out, aten.logspace.out(start, end, steps, base, out=_meta_out(out)))
    if out.numel():
        index = out.device.index or 0
        exps = scratch((steps,), torch.float32, index)
        ir("linspace", [], {"start": start, "end": end, "steps": steps, "dtype": "float32"}, [exps], index)
        ir("pow", [float(base), exps], None, [out], index)
    return out


@kernel("logspace.out", "logspace.Tensor_Tensor_out", "logspace.Tensor_Scalar_out", "logspace.Scalar_Tensor_out",
        ir=("linspace", "pow"))  # fmt: skip
def logspace_out(start: Any, end: Any, steps: int, base: float = 10.0, *, out: torch.Tensor) -> torch.Tensor:
    return logspace_into(start, end, steps, base, out)


@kernel("logspace", "logspace.Tensor_Tensor", "logspace.Tensor_Scalar", "logspace.Scalar_Tensor",
        ir=("linspace", "pow"))  # fmt: skip
def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, dtype: torch.dtype | None = None,
             layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    _check_layout(layout, "logspace")
    if device is None:
        device = next((x.device for x in (start, end) if isinstance(x, torch.Tensor) and x.device.type == "tt"), None)
    out = tensors.new([0], None, dtype or torch.get_default_dtype(), tensors.index_of(device))
    return logspace_into(start, end, steps, base, out)


# ---------------------------------------------------------------------------------------------------- eye
def eye_into(n: int, m: int | None, out: torch.Tensor) -> torch.Tensor:
    m = n if m is None else m
    resize_out(out, aten.eye.m_out(n, m, out=_meta_out(out)))
    if out.numel():
        ir("eye", [], {"n": n, "m": m, "dtype": tensors.check_dtype(out.dtype).value}, [out], out.device.index or 0)
    return out


@kernel("eye.out", ir=("eye",))
def eye_out(n: int, *, out: torch.Tensor) -> torch.Tensor:
    return eye_into(n, None, out)


@kernel("eye.m_out", ir=("eye",))
def eye_m_out(n: int, m: int, *, out: torch.Tensor) -> torch.Tensor:
    return eye_into(n, m, out)


@kernel("eye", "eye.m", ir=("eye",))
def eye(n: int, m: int | None = None, *, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
        pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    _check_layout(layout, "eye")
    out = tensors.new([0], None, dtype or torch.get_default_dtype(), tensors.index_of(device))
    return eye_into(n, m, out)


# ------------------------------------------------------------------------------------------------ tril / triu indices
def _triangle_indices(op: str, row: int, col: int, offset: int, out: torch.Tensor) -> torch.Tensor:
    """The coordinates (2, N) of the lower / upper triangle of a row x col matrix, in row-major order: the
    non-zeros of tril / triu of a matrix of ones, on the card."""
    if row < 0 or col < 0:
        raise RuntimeError(f"{op}: row and col must be non-negative, got row={row}, col={col}")
    index = out.device.index or 0
    if not row or not col:
        out.resize_((2, 0))
        return out
    ones = scratch((row, col), torch.bool, index)
    fill_scalar(ones, True)
    ir(op.split("_")[0], [ones], {"diagonal": offset}, [ones], index)
    rows, count = nonzero_rows(ones, index)
    if tuple(out.shape) != (2, count):
        out.resize_((2, count))
    if count:
        out.copy_(rows.t())
    return out


def _triangle_kernels(op: str) -> None:
    def functional(row: int, col: int, offset: int = 0, *, dtype: torch.dtype | None = torch.int64,
                   layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
        _check_layout(layout, op)
        out = tensors.new([2, 0], None, dtype or torch.int64, tensors.index_of(device))
        return _triangle_indices(op, row, col, offset, out)

    def out_variant(row: int, col: int, offset: int = 0, *, out: torch.Tensor) -> torch.Tensor:
        return _triangle_indices(op, row, col, offset, out)

    kernel(op, kind="composite", ir=("full", op.split("_")[0], "nonzero", "copy"))(functional)
    kernel(f"{op}.out", kind="composite", ir=("full", op.split("_")[0], "nonzero", "copy"))(out_variant)


_triangle_kernels("tril_indices")
_triangle_kernels("triu_indices")


# ---------------------------------------------------------------------------------------------------- windows
@kernel("kaiser_window", "kaiser_window.periodic", "kaiser_window.beta", kind="composite", ir=("arange", "i0"))
def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype: torch.dtype | None = None,
                  layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> torch.Tensor:  # fmt: skip
    """I0(beta * sqrt(1 - ((n - a) / a)^2)) / I0(beta), a = (N - 1) / 2 over N = window_length (+ 1 when
    periodic, the last point dropped), computed in fp32 on the card (CPU's kaiser_window is a dispatch stub)."""
    _check_layout(layout, "kaiser_window")
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point:
        raise RuntimeError(f"kaiser_window expects floating point dtypes, got: {dtype}")
    index = tensors.index_of(device)
    if window_length <= 1:
        return torch.ones(max(window_length, 0), dtype=dtype, device=torch.device("tt", index))
    n = window_length + 1 if periodic else window_length
    alpha = (n - 1) / 2.0
    on = torch.device("tt", index)
    ramp = (torch.arange(window_length, dtype=torch.float32, device=on) - alpha) / alpha
    peak = torch.i0(torch.full((), beta, dtype=torch.float32, device=on))
    return (torch.i0(beta * torch.sqrt((1 - ramp * ramp).clamp_min(0))) / peak).to(dtype)
