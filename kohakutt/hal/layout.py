"""Formats, layouts and memory kinds of device buffers, and the sizes they imply."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kohakutt.enums import Choice
from kohakutt.errors import FormatError

TILE = 32
FACE = 16


def face_index(r: int, c: int) -> int:
    """Where element (r, c) of a 32 x 32 tile sits in its four 16 x 16 faces (F0 F1 / F2 F3, each row-major)."""
    return ((r >> 4) * 2 + (c >> 4)) * FACE * FACE + (r & 15) * FACE + (c & 15)


# TILE_FACE_INDEX[r, c] = face_index(r, c): a tile's faced words indexed by row and column
TILE_FACE_INDEX = np.array([[face_index(r, c) for c in range(TILE)] for r in range(TILE)], dtype=np.int64)


class Format(Choice, error=FormatError, message="unknown format {value!r}; use one of {choices}"):
    """A buffer's data format, in TT-NN's names."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    BFLOAT8_B = "bfloat8_b"
    BFLOAT4_B = "bfloat4_b"
    INT32 = "int32"
    UINT32 = "uint32"
    UINT16 = "uint16"
    UINT8 = "uint8"

    @property
    def is_block(self) -> bool:
        return self in (Format.BFLOAT8_B, Format.BFLOAT4_B)

    @property
    def is_float(self) -> bool:
        return self in (Format.FLOAT32, Format.BFLOAT16, Format.BFLOAT8_B, Format.BFLOAT4_B)

    @property
    def itemsize(self) -> int:
        """Bytes per element in row-major layout (block formats have none: they exist only as tiles)."""
        if self.is_block:
            raise FormatError(f"{self.value} has no row-major form: it is stored only in tile layout")
        return _ITEMSIZE[self]

    @property
    def tile_bytes(self) -> int:
        """Bytes of one 32 x 32 tile in this format (block floats: shared exponents, then mantissas)."""
        return _TILE_BYTES[self]


_ITEMSIZE = {
    Format.FLOAT32: 4, Format.BFLOAT16: 2, Format.INT32: 4, Format.UINT32: 4, Format.UINT16: 2, Format.UINT8: 1,
}
_TILE_BYTES = {f: TILE * TILE * s for f, s in _ITEMSIZE.items()} | {Format.BFLOAT8_B: 1088, Format.BFLOAT4_B: 576}


class Layout(Choice, error=FormatError, message="unknown layout {value!r}; use one of {choices}"):
    ROW_MAJOR = "row_major"
    TILE = "tile"


class MemoryKind(Choice, error=FormatError, message="unknown memory kind {value!r}; use one of {choices}"):
    DRAM = "dram"
    L1 = "l1"


def padded_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The shape a tensor takes in tile layout: the last two dims rounded up to 32; a 1-D tensor is one tile row."""
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise FormatError(f"shape {shape} has a negative size")
    if len(shape) == 0:
        shape = (1, 1)
    elif len(shape) == 1:
        shape = (1, shape[0])
    return (*shape[:-2], _round_up(shape[-2], TILE), _round_up(shape[-1], TILE))


def tile_count(shape: Sequence[int]) -> int:
    """How many 32 x 32 tiles a tensor of ``shape`` occupies in tile layout."""
    p = padded_shape(shape)
    return math.prod(p[:-2]) * (p[-2] // TILE) * (p[-1] // TILE)


def nbytes(shape: Sequence[int], fmt: Format | str, layout: Layout | str) -> int:
    """Bytes a tensor of ``shape`` takes in ``fmt`` and ``layout``."""
    fmt, layout = Format.of(fmt), Layout.of(layout)
    if layout is Layout.TILE:
        return tile_count(shape) * fmt.tile_bytes
    if any(int(s) < 0 for s in shape):
        raise FormatError(f"shape {tuple(shape)} has a negative size")
    return math.prod(int(s) for s in shape) * fmt.itemsize


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m
