"""Core IR ops every frontend needs: copy (with a cast to the output's dtype) and typecast."""

from __future__ import annotations

from typing import Any

from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, define, output_layout, same


def _typecast(inputs: list[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    src = inputs[0]
    if not isinstance(src, TensorSpec):
        raise ShapeError("typecast needs a tensor operand")
    dtype = DType.of(attrs["dtype"])
    return [TensorSpec(src.shape, dtype, output_layout(dtype, [src]))]


define("copy", "core", ["x"], same(), doc="The values of x in a new tensor (into `out`, cast to its dtype).")
define("typecast", "core", ["x"], _typecast, attrs={"dtype": "float32"},
       doc="x converted to `dtype` as the card's packer converts: bf16 round-to-nearest-even, block floats per face "
           "row, float to int truncating toward zero.")
