"""Host-side tile conversions: what a tensor's bytes look like on the card, and what its values become there.

Layout: the last two dims are padded up to multiples of 32 and cut into 32 x 32 tiles, row-major over each matrix's
tile grid (leading dims are a batch of matrices); a tile is four 16 x 16 faces (F0 F1 / F2 F3), each face row-major.
A 1-D array of n values is one tile row (32 x ceil(n/32)*32, data in row 0); a 0-d array is one value in a tile.

Formats and their rounding are TT-NN 0.81.1's host conversion, bit for bit (``notes/blackhole.md``): bfloat16 rounds
to nearest even (every NaN becomes 0x7fc0); bfloat8_b / bfloat4_b share one exponent per 16-value face row, with
truncating alignment then nearest-even rounding, straight from float32. The work is done by the native runtime core
(``native/runtime/formats.c``), vectorized and split over threads for large inputs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from kohakutt.errors import FormatError
from kohakutt.hal import _native
from kohakutt.hal.layout import TILE, Format, Layout, nbytes, tile_count

__all__ = ["from_bfloat16", "pack", "quantize", "round_bfloat16", "tilize", "to_bfloat16", "unpack", "untilize"]

# What each format's row-major side holds, and which converter of the runtime core handles it.
_ELEMENT = {
    Format.FLOAT32: np.dtype(np.float32),
    Format.BFLOAT16: np.dtype(np.float32),
    Format.BFLOAT8_B: np.dtype(np.float32),
    Format.BFLOAT4_B: np.dtype(np.float32),
    Format.INT32: np.dtype(np.int32),
    Format.UINT32: np.dtype(np.uint32),
    Format.UINT16: np.dtype(np.uint16),
}
_KIND = {
    Format.FLOAT32: "KTT_TILE_RAW32",
    Format.INT32: "KTT_TILE_RAW32",
    Format.UINT32: "KTT_TILE_RAW32",
    Format.UINT16: "KTT_TILE_RAW16",
    Format.BFLOAT16: "KTT_TILE_BF16",
    Format.BFLOAT8_B: "KTT_TILE_BFP8",
    Format.BFLOAT4_B: "KTT_TILE_BFP4",
}
_RAW = {np.dtype(f.value): f for f in (Format.FLOAT32, Format.INT32, Format.UINT32, Format.UINT16)}


def pack(
    array: npt.ArrayLike, fmt: Format | str, pad_value: float = 0.0, *, out: np.ndarray | None = None
) -> np.ndarray:
    """The tile bytes of ``array`` in ``fmt``, as TT-NN lays them out (uint8, ``nbytes(shape, fmt, "tile")`` long).

    Float formats take any real array (converted to float32 first); int32 / uint32 / uint16 take integer arrays that
    convert safely. Padding is filled with ``pad_value``, which for block floats counts toward a row's shared exponent.
    ``out`` (uint8, C-contiguous, the right size) receives the bytes instead of a new array.
    """
    fmt = Format.of(fmt)
    kind = _kind(fmt)
    x = _elements(array, _ELEMENT[fmt], f"pack to {fmt.value}")
    dst = _output(out, (nbytes(x.shape, fmt, Layout.TILE),), np.dtype(np.uint8), f"pack to {fmt.value}")
    _tiles_call("ktt_pack_tiles", x, dst, x.shape, kind, _pad_bits(pad_value, _ELEMENT[fmt]))
    return dst


def unpack(
    packed: npt.ArrayLike | bytes,
    shape: tuple[int, ...] | list[int],
    fmt: Format | str,
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The values of tile bytes ``packed`` (as :func:`pack` makes them) as an array of logical ``shape``.

    float32 for float formats, int32 / uint32 / uint16 for those formats; padding is dropped. Raises FormatError
    when ``packed`` has not exactly ``nbytes(shape, fmt, "tile")`` bytes.
    """
    fmt = Format.of(fmt)
    kind = _kind(fmt)
    shape = tuple(int(s) for s in shape)
    expected = nbytes(shape, fmt, Layout.TILE)
    src = _bytes(packed)
    if src.size != expected:
        raise FormatError(
            f"unpack of shape {shape} as {fmt.value} expects {expected} bytes ({tile_count(shape)} tiles of "
            f"{fmt.tile_bytes} B), got {src.size}"
        )
    dst = _output(out, shape, _ELEMENT[fmt], f"unpack from {fmt.value}")
    _tiles_call("ktt_unpack_tiles", src, dst, shape, kind)
    return dst


def tilize(x: npt.ArrayLike, pad_value: float = 0.0, *, out: np.ndarray | None = None) -> np.ndarray:
    """The elements of ``x`` (float32, int32, uint32 or uint16) in tile order, as a flat array of the same dtype.

    Its length is ``tile_count(x.shape) * 1024``; padding is ``pad_value`` (cast to the dtype).
    """
    a = _contiguous(np.asarray(x))
    fmt = _raw_format(a.dtype, "tilize")
    dst = _output(out, (tile_count(a.shape) * TILE * TILE,), a.dtype, "tilize")
    _tiles_call("ktt_pack_tiles", a, dst, a.shape, _kind(fmt), _pad_bits(pad_value, a.dtype))
    return dst


def untilize(tiles: npt.ArrayLike, shape: tuple[int, ...] | list[int], *, out: np.ndarray | None = None) -> np.ndarray:
    """The inverse of :func:`tilize`: tile-ordered elements back to a row-major array of logical ``shape``."""
    t = _contiguous(np.asarray(tiles))
    fmt = _raw_format(t.dtype, "untilize")
    shape = tuple(int(s) for s in shape)
    expected = tile_count(shape) * TILE * TILE
    if t.size != expected:
        raise FormatError(
            f"untilize to shape {shape} expects {expected} elements ({tile_count(shape)} tiles), got {t.size}"
        )
    dst = _output(out, shape, t.dtype, "untilize")
    _tiles_call("ktt_unpack_tiles", t, dst, shape, _kind(fmt))
    return dst


def to_bfloat16(x: npt.ArrayLike, *, out: np.ndarray | None = None) -> np.ndarray:
    """bfloat16 bits (uint16, same shape) of ``x`` as float32: nearest even, overflow to Inf, subnormals and -0.0
    kept, every NaN 0x7fc0."""
    a = _elements(x, np.dtype(np.float32), "to_bfloat16")
    dst = _output(out, a.shape, np.dtype(np.uint16), "to_bfloat16")
    if a.size:
        n = _native.lib()
        n.lib.ktt_f32_to_bf16(n.ffi.from_buffer(a), n.ffi.from_buffer(dst), a.size, 0)
    return dst


def from_bfloat16(bits: npt.ArrayLike, *, out: np.ndarray | None = None) -> np.ndarray:
    """float32 values (same shape) of bfloat16 ``bits`` (uint16 or int16); exact."""
    a = _contiguous(np.asarray(bits))
    if a.dtype not in (np.dtype(np.uint16), np.dtype(np.int16)):
        raise FormatError(f"from_bfloat16 takes bfloat16 bits as uint16, got {a.dtype}; use to_bfloat16 to make them")
    dst = _output(out, a.shape, np.dtype(np.float32), "from_bfloat16")
    if a.size:
        n = _native.lib()
        n.lib.ktt_bf16_to_f32(n.ffi.from_buffer(a), n.ffi.from_buffer(dst), a.size, 0)
    return dst


def round_bfloat16(x: npt.ArrayLike) -> np.ndarray:
    """``x`` rounded to bfloat16 and back (float32): the values a bfloat16 buffer holds."""
    return from_bfloat16(to_bfloat16(x))


def quantize(x: npt.ArrayLike, fmt: Format | str) -> np.ndarray:
    """What the values of ``x`` become when stored in float format ``fmt`` (float32, same shape).

    float32: unchanged; bfloat16: rounded; bfloat8_b / bfloat4_b: packed into tiles (padding 0.0, as the card
    pads) and unpacked, so each value depends on the 16-value face row it shares an exponent with.
    """
    fmt = Format.of(fmt)
    a = _elements(x, np.dtype(np.float32), f"quantize to {fmt.value}")
    if fmt is Format.FLOAT32:
        return a.copy()
    if fmt is Format.BFLOAT16:
        return round_bfloat16(a)
    if fmt.is_block:
        return unpack(pack(a, fmt), a.shape, fmt)
    raise FormatError(f"quantize works on float formats (float32, bfloat16, bfloat8_b, bfloat4_b), not {fmt.value}")


def _kind(fmt: Format) -> int:
    if fmt not in _KIND:
        raise FormatError(f"no host tile conversion for {fmt.value}; supported: {', '.join(f.value for f in _KIND)}")
    return int(getattr(_native.lib().lib, _KIND[fmt]))


def _planes(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(batch, rows, cols) of a shape as tiles see it: 0-d is 1 x 1, 1-D is one row."""
    if len(shape) == 0:
        return 1, 1, 1
    if len(shape) == 1:
        return 1, 1, shape[0]
    return math.prod(shape[:-2]), shape[-2], shape[-1]


def _tiles_call(fn: str, src: np.ndarray, dst: np.ndarray, shape: tuple[int, ...], kind: int, *pad: int) -> None:
    batch, rows, cols = _planes(tuple(shape))
    if batch * rows * cols == 0:
        return
    n = _native.lib()
    rc = getattr(n.lib, fn)(n.ffi.from_buffer(src), n.ffi.from_buffer(dst), batch, rows, cols, kind, *pad, 0)
    if rc != 0:
        raise FormatError(f"{fn} rejected tile kind {kind} (runtime core {n.path})")


def _elements(x: Any, dtype: np.dtype, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != dtype:
        converts = a.dtype.kind in "fiub" if dtype.kind == "f" else np.can_cast(a.dtype, dtype, casting="safe")
        if not converts:
            raise FormatError(
                f"{what} needs {dtype} values (or a dtype that converts to {dtype} safely), got {a.dtype}"
            )
        a = a.astype(dtype)
    return _contiguous(a)


def _raw_format(dtype: np.dtype, what: str) -> Format:
    if dtype not in _RAW:
        names = ", ".join(str(d) for d in _RAW)
        raise FormatError(f"{what} works on {names} elements, got {dtype}; cast the array or use pack / unpack")
    return _RAW[dtype]


def _pad_bits(pad_value: float, dtype: np.dtype) -> int:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if pad_value != int(pad_value) or not info.min <= int(pad_value) <= info.max:
            raise FormatError(f"pad value {pad_value!r} is not representable as {dtype}")
        pad = np.array(int(pad_value), dtype=dtype)
    else:
        pad = np.array(pad_value, dtype=dtype)
    return int(pad.view(np.uint32 if dtype.itemsize == 4 else np.uint16))


def _bytes(packed: Any) -> np.ndarray:
    a = np.frombuffer(packed, dtype=np.uint8) if isinstance(packed, bytes | bytearray | memoryview) else packed
    return _contiguous(np.asarray(a)).reshape(-1).view(np.uint8)


def _contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` as the C code reads it: C-contiguous and 4-byte aligned (np.ascontiguousarray would make 0-d 1-D)."""
    return a if a.flags.c_contiguous and _aligned(a) else a.copy(order="C")


def _aligned(a: np.ndarray) -> bool:
    return a.ctypes.data % 4 == 0 or a.size == 0


def _output(out: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray) or out.dtype != dtype or out.shape != tuple(shape):
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise FormatError(f"{what}: out must be a {dtype} array of shape {tuple(shape)}, got {got}")
    if not (out.flags.c_contiguous and out.flags.writeable and _aligned(out)):
        raise FormatError(f"{what}: out must be C-contiguous, writeable and 4-byte aligned")
    return out
