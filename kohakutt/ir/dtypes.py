"""The IR's data types: what a device tensor can hold, and how they promote."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kohakutt.enums import Choice
from kohakutt.errors import DtypeError, IntegerOverflowError
from kohakutt.hal.layout import Format


class DType(Choice, error=DtypeError, message="the card has no dtype {value!r}; device tensors hold {choices}"):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"  # IEEE half, 2 bytes, row major only: computed in float32, rounded to half when stored
    BFLOAT8_B = "bfloat8_b"
    BFLOAT4_B = "bfloat4_b"
    INT32 = "int32"
    INT64 = "int64"  # 8 bytes per element (a pair of int32 words); exact or checked: see INT64_EXACT
    UINT32 = "uint32"
    UINT16 = "uint16"
    UINT8 = "uint8"
    BOOL = "bool"

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B)

    @property
    def is_block(self) -> bool:
        return self in (DType.BFLOAT8_B, DType.BFLOAT4_B)

    @property
    def format(self) -> Format:
        """The buffer format values of this dtype are stored in (bool and int64 as raw bytes, float16 as its 16 bits:
        TT-NN's DataType has no float16)."""
        return _FORMATS[self]

    @property
    def itemsize(self) -> int:
        return 8 if self is DType.INT64 else self.format.itemsize

    @property
    def compute(self) -> np.dtype:
        """The NumPy dtype the simulator computes this dtype in (float formats compute in float32)."""
        return np.dtype(_COMPUTE[self])


_FORMATS = {d: Format.UINT16 if d is DType.FLOAT16 else Format.UINT8 if d in (DType.BOOL, DType.INT64)
            else Format(d.value) for d in DType}  # fmt: skip
_COMPUTE = {
    DType.FLOAT32: np.float32,
    DType.BFLOAT16: np.float32,
    DType.FLOAT16: np.float32,
    DType.BFLOAT8_B: np.float32,
    DType.BFLOAT4_B: np.float32,
    DType.INT32: np.int32,
    DType.INT64: np.int64,
    DType.UINT32: np.uint32,
    DType.UINT16: np.uint16,
    DType.UINT8: np.uint8,
    DType.BOOL: np.bool_,
}

# Lower rank promotes to higher; block floats compute as bfloat16.
_RANK = {
    DType.BOOL: 0,
    DType.UINT8: 1,
    DType.UINT16: 2,
    DType.INT32: 3,
    DType.INT64: 3,
    DType.UINT32: 4,
    DType.BFLOAT4_B: 5,
    DType.BFLOAT8_B: 5,
    DType.BFLOAT16: 5,
    DType.FLOAT16: 5,
    DType.FLOAT32: 6,
}


def promote(*dtypes: DType) -> DType:
    """The dtype a result of mixed inputs takes (block floats promote to bfloat16; bfloat16 with float16 gives
    float32, as in PyTorch: neither holds the other)."""
    bf16 = any(d.is_block or d is DType.BFLOAT16 for d in dtypes)
    if bf16 and DType.FLOAT16 in dtypes:
        return DType.FLOAT32
    best = max(dtypes, key=lambda d: (_RANK[d], d is DType.INT64, d is DType.FLOAT16))
    return DType.BFLOAT16 if best.is_block else best


def from_numpy(dtype: np.dtype) -> DType:
    table = {
        np.dtype(np.float32): DType.FLOAT32,
        np.dtype(np.float16): DType.FLOAT16,
        np.dtype(np.int32): DType.INT32,
        np.dtype(np.int64): DType.INT64,
        np.dtype(np.uint32): DType.UINT32,
        np.dtype(np.uint16): DType.UINT16,
        np.dtype(np.uint8): DType.UINT8,
        np.dtype(np.bool_): DType.BOOL,
    }
    if np.dtype(dtype) not in table:
        raise DtypeError(f"NumPy dtype {dtype} has no device dtype; cast to float32, int32 or bool first")
    return table[np.dtype(dtype)]


# ------------------------------------------------------------------------------------------------ the int64 rule
# An int64 value is a pair of int32 words on the card (low word first: the int64's own little-endian bytes). Ops
# below compute on the pair, exactly (results wrap modulo 2**64, as PyTorch's CPU int64 does): data movement and
# creation move or build words; the element-wise ones are short word-pair programs (add / sub carry through the
# low word, compares are lexicographic, mul is 16-bit partial products); sum and cumsum add 8-bit limbs in int32.
# Every other op that takes or gives int64 runs in int32 on the card and is *checked*: each int64 operand must lie
# in the int32 range, and so must each int64 result; otherwise IntegerOverflowError (docs/concepts/numerics.md).
INT64_EXACT_FAMILIES = frozenset({"movement", "creation", "random"})
INT64_EXACT = frozenset({
    "copy", "embedding", "add", "sub", "neg", "abs", "sign", "mul", "square", "relu", "eq", "ne", "lt", "le", "gt",
    "ge", "maximum", "minimum", "fmax", "fmin", "clamp", "clamp_tensor", "where", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "logical_and", "logical_or", "logical_xor", "logical_not", "floor", "ceil", "trunc",
    "isnan", "isinf", "isfinite", "signbit", "nan_to_num", "sum", "cumsum", "all", "any", "count_nonzero",
})  # fmt: skip
INT64_ACCUMULATING = frozenset({"scatter_add"})  # movement ops that add: checked like arithmetic
SUM_LIMB_BITS = 8  # sum / cumsum add int64 values as 8 limbs of 8 bits, each limb total exact in int32 ...
SUM_MAX_TERMS = 2**23 - 1  # ... while at most this many terms meet: 255 * terms + the carry (< 2**23) < 2**31
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def check_int64_terms(op: str, shape: tuple[int, ...], dims: Any) -> None:
    """Raise IntegerOverflowError when an int64 ``sum`` / ``cumsum`` over ``dims`` of ``shape`` adds more than
    :data:`SUM_MAX_TERMS` values (the card's int32 limb totals would overflow)."""
    if dims is None:
        dims = range(len(shape))
    elif isinstance(dims, int):
        dims = [dims]
    terms = math.prod(shape[d] for d in dims) if shape else 1
    if terms > SUM_MAX_TERMS:
        raise IntegerOverflowError(
            f"{op}: {terms} int64 values meet in one total; the card adds int64 as 8-bit limbs in int32, exact for "
            f"up to {SUM_MAX_TERMS}: {op} in chunks (a reshape and two {op}s), or in float32"
        )


def int64_checked(op: str, family: str, dtypes: list[DType], attrs: dict | None = None) -> bool:
    """Whether op ``op`` (of IR family ``family``) over tensors of ``dtypes`` (inputs and outputs) is an int64 op
    the card computes in int32, so that its int64 operands and results must fit int32 (see :data:`INT64_EXACT`)."""
    if DType.INT64 not in dtypes:
        return False
    if op in ("typecast", "copy"):  # int <-> int64 moves words; a float <-> int64 conversion is checked
        return any(d.is_float for d in dtypes)
    if op == "index_put":
        return bool((attrs or {}).get("accumulate"))
    if op in INT64_ACCUMULATING:
        return True
    return not (family in INT64_EXACT_FAMILIES or op in INT64_EXACT)
