"""The IR's data types: what a device tensor can hold, and how they promote."""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from kohakutt.errors import DtypeError
from kohakutt.hal.layout import Format


class DType(StrEnum):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    BFLOAT8_B = "bfloat8_b"
    BFLOAT4_B = "bfloat4_b"
    INT32 = "int32"
    INT64 = "int64"  # storage only: 8 bytes per element in memory, computed as int32 on the card
    UINT32 = "uint32"
    UINT16 = "uint16"
    UINT8 = "uint8"
    BOOL = "bool"

    @classmethod
    def of(cls, value: DType | str) -> DType:
        try:
            return cls(value)
        except ValueError:
            raise DtypeError(
                f"the card has no dtype {value!r}; device tensors hold {', '.join(d.value for d in cls)}"
            ) from None

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.BFLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B)

    @property
    def is_block(self) -> bool:
        return self in (DType.BFLOAT8_B, DType.BFLOAT4_B)

    @property
    def format(self) -> Format:
        """The buffer format values of this dtype are stored in (bool and int64 as raw bytes)."""
        return Format.UINT8 if self in (DType.BOOL, DType.INT64) else Format(self.value)

    @property
    def itemsize(self) -> int:
        return 8 if self is DType.INT64 else self.format.itemsize

    @property
    def compute(self) -> np.dtype:
        """The NumPy dtype the simulator computes this dtype in (float formats compute in float32)."""
        return np.dtype(_COMPUTE[self])


_COMPUTE = {
    DType.FLOAT32: np.float32,
    DType.BFLOAT16: np.float32,
    DType.BFLOAT8_B: np.float32,
    DType.BFLOAT4_B: np.float32,
    DType.INT32: np.int32,
    DType.INT64: np.int32,
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
    DType.FLOAT32: 6,
}


def promote(*dtypes: DType) -> DType:
    """The dtype a result of mixed inputs takes (block floats promote to bfloat16)."""
    best = max(dtypes, key=lambda d: (_RANK[d], d is DType.INT64))
    return DType.BFLOAT16 if best.is_block else best


def from_numpy(dtype: np.dtype) -> DType:
    table = {
        np.dtype(np.float32): DType.FLOAT32,
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
