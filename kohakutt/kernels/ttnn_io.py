"""The boundary between the HAL's device tensors and the op library's TT-NN implementations (a real card).

An op's tensor operands come as ttnn device tensors of their IR specs: the shape, the dtype the HAL stores (bool and
uint8 as uint8, int64 as int32) and the layout (row-major unless the IR says tile). TT-NN's compute ops take tiles,
and its tilize, reshape, pad and ternary ops take no uint8 (checked against TT-NN 0.81.1 on a mocked P150:
``tests/ttnn``), so :func:`card_call` hands each implementation its tensor operands in tile layout, uint8 and uint16
widened to int32 (exact), and brings each result to its IR output spec: dtype first (in tiles), then layout. An
implementation therefore sees only tile tensors of float32, bfloat16, bfloat8_b, bfloat4_b, int32 or uint32, and
may return any layout and dtype.

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
from kohakutt.ir.ops import ShapeError, TensorSpec

# Every TT-NN name used here (checked against 0.81.1 by tests/hal/test_ttnn_contract.py).
TTNN_NAMES: tuple[str, ...] = (
    "to_layout", "typecast", "TILE_LAYOUT", "ROW_MAJOR_LAYOUT", "float32", "bfloat16", "bfloat8_b", "bfloat4_b",
    "int32", "uint32", "uint16", "uint8", "Tensor.shape", "Tensor.dtype", "Tensor.layout",
)  # fmt: skip

# The TT-NN dtype each IR dtype is stored in on the card.
STORED = {DType.FLOAT32: "float32", DType.BFLOAT16: "bfloat16", DType.BFLOAT8_B: "bfloat8_b",
          DType.BFLOAT4_B: "bfloat4_b", DType.INT32: "int32", DType.INT64: "int32", DType.UINT32: "uint32",
          DType.UINT16: "uint16", DType.UINT8: "uint8", DType.BOOL: "uint8"}  # fmt: skip


def stored_dtype(tt: Any, dt: DType) -> Any:
    """The TT-NN dtype an IR dtype is stored in on the card."""
    return getattr(tt, STORED[dt])


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


def card_call(impl: Any, tt: Any, inputs: Sequence[Any], attrs: dict[str, Any], numerics: Numerics,
              out_specs: Sequence[TensorSpec], **kw: Any) -> Any:  # fmt: skip
    """Run TT-NN implementation ``impl`` (a registry ``Impl``) on ``inputs`` (ttnn tensors of the IR operand specs,
    ``None`` for an empty one, or Python numbers): its result, or list of results, in the IR output specs."""
    if all(s.numel == 0 for s in out_specs):
        return None if len(out_specs) == 1 else [None] * len(out_specs)
    if any(x is None or (is_tensor(x) and math.prod(tuple(x.shape)) == 0) for x in inputs):
        raise KohakuTTUnsupportedOperator(
            f"{impl.op}: an operand is empty and TT-NN takes no empty tensors, but the result is not empty; "
            "run it on the host (KTT_CPU_FALLBACK=1) or avoid the empty operand"
        )
    try:
        res = impl.fn(tt, [operand(tt, x) if is_tensor(x) else x for x in inputs], dict(attrs), numerics,
                      list(out_specs), **kw)  # fmt: skip
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
