"""The boundary between the HAL's device tensors and the op library's TT-NN implementations (a real card).

An op's tensor operands come as ttnn device tensors of their IR specs: the shape, the dtype the HAL stores (bool and
uint8 as uint8, float16 as its uint16 bits, int64 as int32 word pairs of shape ``(*s, 2)``: see
:mod:`kohakutt.kernels.wide`) and the layout (row-major unless the IR says tile). TT-NN's compute ops take tiles,
and its tilize, reshape, pad and ternary ops take no uint8 (checked against TT-NN 0.81.1 on a mocked P150:
``tests/ttnn``), so :func:`card_call` hands each implementation its tensor operands in tile layout, uint8 and uint16
widened to int32 (exact), and brings each result to its IR output spec: dtype first (in tiles), then layout. An
implementation therefore sees only tile tensors of float32, bfloat16, bfloat8_b, bfloat4_b, int32 or uint32, and
may return any layout and dtype. An op with a float16 operand or result runs its implementation in float32 between
``wide.half_op``'s exact conversions; one with an int64 operand or result runs ``wide``'s word-pair program where the op
has one (``wide.card_impl``), takes int64 indices as their low words (:data:`INDEX_OPERANDS`), and is refused
otherwise (its checked int32 path needs overflow flags read back, which no TT-NN runner does yet).

Empty tensors never reach TT-NN (it cannot allocate them, and the HAL keeps no device tensor for an empty buffer):
an op whose outputs are all empty returns ``None`` for each; one with an empty operand but a non-empty result is
refused with :class:`KohakuTTUnsupportedOperator`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec

# Every TT-NN name used here (checked against 0.81.1 by tests/hal/test_ttnn_contract.py).
TTNN_NAMES: tuple[str, ...] = (
    "to_layout", "typecast", "TILE_LAYOUT", "ROW_MAJOR_LAYOUT", "float32", "bfloat16", "bfloat8_b", "bfloat4_b",
    "int32", "uint32", "uint16", "uint8", "Tensor.shape", "Tensor.dtype", "Tensor.layout", "to_torch", "from_torch",
    "Tensor.device", "GetDefaultDevice",
)  # fmt: skip

# The TT-NN dtype each IR dtype is stored in on the card.
STORED = {DType.FLOAT32: "float32", DType.BFLOAT16: "bfloat16", DType.BFLOAT8_B: "bfloat8_b",
          DType.BFLOAT4_B: "bfloat4_b", DType.INT32: "int32", DType.INT64: "int32", DType.UINT32: "uint32",
          DType.UINT16: "uint16", DType.UINT8: "uint8", DType.BOOL: "uint8", DType.FLOAT16: "uint16"}  # fmt: skip


_HOST = {DType.INT32: "int32", DType.UINT32: "uint32", DType.UINT16: "uint16", DType.UINT8: "uint8"}

# Ops whose operands at these positions are indices: an int64 index goes to TT-NN as its low word, exact for every
# index in range (the card checks no index of any width; the simulator raises IndexOutOfRangeError).
INDEX_OPERANDS: dict[str, tuple[int, ...]] = {
    "gather": (1,),
    "scatter": (1,),
    "index_select": (1,),
    "embedding": (1,),
    "embedding_backward": (1,),
}


def stored_dtype(tt: Any, dt: DType) -> Any:
    """The TT-NN dtype an IR dtype is stored in on the card."""
    return getattr(tt, STORED[dt])


def card_shape(spec: TensorSpec) -> tuple[int, ...]:
    """The shape of the TT-NN tensor holding a tensor of ``spec`` on the card (an int64 is a pair of int32 words)."""
    return (*spec.shape, 2) if spec.dtype is DType.INT64 else tuple(spec.shape)


def is_tensor(x: Any) -> bool:
    return x is not None and not isinstance(x, int | float | bool) and hasattr(x, "layout")


def operand(tt: Any, x: Any) -> Any:
    """A tensor operand as the implementations take it: tiles; uint8 / uint16 widened to int32."""
    if x.dtype == tt.uint8 or x.dtype == tt.uint16:
        x = tt.typecast(x, tt.int32)
    return x if x.layout == tt.TILE_LAYOUT else tt.to_layout(x, tt.TILE_LAYOUT)


def result(tt: Any, y: Any, spec: TensorSpec) -> Any:
    """An implementation's result in its IR output spec's dtype and layout (``None``: an output not computed)."""
    if y is None:
        return None
    want = stored_dtype(tt, spec.dtype)
    if y.dtype != want:
        if y.layout != tt.TILE_LAYOUT:
            y = tt.to_layout(y, tt.TILE_LAYOUT)
        y = tt.typecast(y, want)
    layout = tt.TILE_LAYOUT if spec.layout is Layout.TILE else tt.ROW_MAJOR_LAYOUT
    return y if y.layout == layout else tt.to_layout(y, layout)


def _host_value(tt: Any, x: Any, spec: Spec) -> Any:
    """A ttnn tensor operand read to the host as the simulator's kernels see values (float formats as float32)."""
    import numpy as np

    if not isinstance(spec, TensorSpec):
        return x
    if x is None:  # an empty operand (the card keeps no tensor for it)
        dt = np.float32 if spec.dtype.is_float else np.bool_ if spec.dtype is DType.BOOL else _HOST.get(spec.dtype)
        return np.zeros(spec.shape, dt or np.int64)
    v = tt.to_torch(x)
    if spec.dtype is DType.FLOAT16:
        return v.numpy().astype(np.uint16).view(np.float16).astype(np.float32)
    if spec.dtype.is_float:
        return v.float().numpy()
    if spec.dtype is DType.INT64:  # the (lo, hi) int32 word pairs of each value
        w = v.numpy().astype(np.int64)
        return (w[..., 0] & 0xFFFFFFFF) | (w[..., 1] << 32)
    a = v.numpy()
    return a.astype(np.bool_) if spec.dtype is DType.BOOL else a.astype(_HOST[spec.dtype])


def _to_card(tt: Any, values: Any, spec: TensorSpec, device: Any) -> Any:
    """Host values of output ``spec`` as a ttnn tensor of its stored dtype and layout on ``device``."""
    import numpy as np
    import torch

    if spec.numel == 0:
        return None
    a = np.broadcast_to(np.asarray(values), spec.shape)
    if spec.dtype is DType.FLOAT16:
        a = a.astype(np.float16).view(np.uint16).astype(np.int32)  # bits, as the card stores a half
    elif spec.dtype is DType.INT64:
        a = np.stack([a.astype(np.int64).astype(np.int32), (a.astype(np.int64) >> 32).astype(np.int32)], -1)
    elif spec.dtype.is_float:
        a = a.astype(np.float32)
    else:
        a = a.astype(np.int32 if spec.dtype is not DType.UINT32 else np.int64)
    layout = tt.TILE_LAYOUT if spec.layout is Layout.TILE or spec.dtype.is_block else tt.ROW_MAJOR_LAYOUT
    return tt.from_torch(torch.from_numpy(np.ascontiguousarray(a)), dtype=stored_dtype(tt, spec.dtype),
                         layout=layout, device=device)  # fmt: skip


def host_on_card(fn: Any, op: str) -> Any:
    """A host implementation (``fn(call: SimCall)``) as a card runs it: its operands read to the host, ``fn`` called
    on their values, its results written back to the card in the output specs (provider ``"host"``)."""

    def on_card(tt: Any, inputs: Sequence[Any], in_specs: Sequence[Spec], attrs: dict[str, Any],
                numerics: Numerics, out_specs: Sequence[TensorSpec]) -> Any:  # fmt: skip
        from kohakutt.kernels.registry import SimCall
        from kohakutt.kernels.runner import _as_float32

        device = next((x.device() for x in inputs if is_tensor(x)), None)
        if device is None:  # every operand empty or a number: the results go to the open device
            device = tt.GetDefaultDevice()
        values = [_host_value(tt, x, s) for x, s in zip(inputs, in_specs)]
        # a float16 op computes in float32 between exact conversions, as on the simulator (kernels.runner)
        half = any(isinstance(s, TensorSpec) and s.dtype is DType.FLOAT16 for s in (*in_specs, *out_specs))
        ins, outs_f = (_as_float32(in_specs), _as_float32(out_specs)) if half else (list(in_specs), list(out_specs))
        res = fn(SimCall(op, values, ins, dict(attrs), numerics, outs_f))
        outs = list(res) if isinstance(res, list | tuple) else [res]
        made = [_to_card(tt, v, s, device) for v, s in zip(outs, out_specs)]
        return made if len(out_specs) > 1 else made[0]

    return on_card


def card_call(impl: Any, tt: Any, inputs: Sequence[Any], in_specs: Sequence[Spec], attrs: dict[str, Any],
              numerics: Numerics, out_specs: Sequence[TensorSpec], **kw: Any) -> Any:  # fmt: skip
    """Run TT-NN implementation ``impl`` (a registry ``Impl``) on ``inputs`` (ttnn tensors of the IR operand specs
    ``in_specs``, ``None`` for an empty one, or Python numbers): its result, or list of results, in the IR output
    specs."""
    if all(s.numel == 0 for s in out_specs):
        return None if len(out_specs) == 1 else [None] * len(out_specs)
    if impl.provider == "host":  # the stored operands and their specs, read back: no TT-NN kernel constraints
        return impl.fn(tt, inputs, in_specs, dict(attrs), numerics, out_specs)
    if any(x is None or (is_tensor(x) and math.prod(tuple(x.shape)) == 0) for x in inputs):
        raise KohakuTTUnsupportedOperator(
            f"{impl.op}: an operand is empty and TT-NN takes no empty tensors, but the result is not empty; "
            "run it on the host (KTT_CPU_FALLBACK=1) or avoid the empty operand"
        )
    from kohakutt.kernels import wide

    operands = [operand(tt, x) if is_tensor(x) else x for x in inputs]
    if impl.op in INDEX_OPERANDS and not any(s.dtype is DType.INT64 for s in out_specs):
        for i in INDEX_OPERANDS[impl.op]:  # int64 indices: their low words (an index past int32 is out of range)
            if i < len(in_specs) and isinstance(in_specs[i], TensorSpec) and in_specs[i].dtype is DType.INT64:
                operands[i] = wide.words(tt, operands[i])[0]
                in_specs = [*in_specs[:i], TensorSpec(in_specs[i].shape, DType.INT32, in_specs[i].layout),
                            *in_specs[i + 1 :]]  # fmt: skip
    dts = {s.dtype for s in (*in_specs, *out_specs) if isinstance(s, TensorSpec)}
    try:
        if DType.INT64 in dts:
            program = wide.card_impl(impl.op, in_specs, out_specs)
            if program is None:
                raise KohakuTTUnsupportedOperator(
                    "int64 runs on TT-NN as word-pair programs (add, sub, mul, compares, min / max, bitwise, sums) "
                    "and takes int64 indices as their low words; this op's checked int32 path is not wired to the "
                    "ttnn backend yet"
                )
            res = program(tt, operands, list(in_specs), dict(attrs), list(out_specs))
        elif DType.FLOAT16 in dts:
            res = wide.half_op(impl.fn)(tt, operands, list(in_specs), dict(attrs), numerics, list(out_specs))
        else:
            res = impl.fn(tt, operands, dict(attrs), numerics, list(out_specs), **kw)
    except KohakuTTUnsupportedOperator as e:
        if str(e).startswith(f"{impl.op}:"):
            raise
        raise KohakuTTUnsupportedOperator(f"{impl.op}: {e}") from None  # name the op asked for, not a helper
    many = isinstance(res, list | tuple)
    outs = list(res) if many else [res]
    if len(outs) != len(out_specs):
        raise ShapeError(f"{impl.op}: its TT-NN implementation gave {len(outs)} results for {len(out_specs)} outputs")
    finished = [result(tt, y, s) for y, s in zip(outs, out_specs)]
    return finished if many else finished[0]
