"""A slow, obviously-correct NumPy model of the host tile formats, written from notes/blackhole.md ("Tiles and
formats") and independent of the native code: tiling by reshape / transpose, rounding by float64 arithmetic and
np.round (half to even) instead of the C code's integer tricks."""

from __future__ import annotations

import numpy as np

TILE, FACE = 32, 16
MBITS = {"bfloat8_b": 7, "bfloat4_b": 3}


def planes(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 0:
        return 1, 1, 1
    if len(shape) == 1:
        return 1, 1, shape[0]
    return int(np.prod(shape[:-2], dtype=np.int64)), shape[-2], shape[-1]


def _up(n: int) -> int:
    return -(-n // TILE) * TILE


def tile_order(x: np.ndarray, pad_value: float | int = 0) -> np.ndarray:
    """Elements of x (padded with pad_value) in tile order, flat."""
    b, h, w = planes(x.shape)
    full = np.full((b, _up(h), _up(w)), pad_value, dtype=x.dtype)
    full[:, :h, :w] = x.reshape(b, h, w)
    ht, wt = full.shape[1] // TILE, full.shape[2] // TILE
    # (batch, tile row, face row, row in face, tile col, face col, col in face) -> tiles, faces, rows, cols
    t = full.reshape(b, ht, 2, FACE, wt, 2, FACE).transpose(0, 1, 4, 2, 5, 3, 6)
    return t.reshape(-1)


def row_order(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of tile_order: tile-ordered flat elements back to `shape`, padding dropped."""
    b, h, w = planes(shape)
    ht, wt = _up(h) // TILE, _up(w) // TILE
    t = flat.reshape(b, ht, wt, 2, 2, FACE, FACE).transpose(0, 1, 3, 5, 2, 4, 6)
    return np.ascontiguousarray(t.reshape(b, ht * TILE, wt * TILE)[:, :h, :w]).reshape(shape)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits: keep the top half, round up when the dropped half is over half, or exactly half
    with an odd kept half; every NaN is 0x7fc0."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    kept, dropped = u >> 16, u & 0xFFFF
    up = (dropped > 0x8000) | ((dropped == 0x8000) & (kept % 2 == 1))
    out = kept + up
    out[np.isnan(np.asarray(x, dtype=np.float32))] = 0x7FC0
    return out.astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bfp_encode(rows: np.ndarray, mbits: int) -> tuple[np.ndarray, np.ndarray]:
    """16-value float32 rows -> (shared exponents uint8 [n], sign << mbits | magnitude uint8 [n, 16])."""
    u = rows.astype(np.float32).view(np.uint32)
    e = ((u >> 23) & 0xFF).astype(np.int64)
    shared = e.max(axis=1, keepdims=True)
    significand = ((u & 0x7FFFFF) | 0x800000).astype(np.float64)  # explicit leading 1 (Inf / NaN too)
    aligned = np.floor(significand / np.exp2((shared - e).astype(np.float64)))  # the alignment truncates
    magnitude = np.round(aligned / 2.0 ** (24 - mbits))  # then nearest even on what is left
    magnitude = np.minimum(magnitude, 2**mbits - 1)  # a carry out of the top clamps
    magnitude[e == 0] = 0  # zeros and subnormals
    sign = np.where(magnitude == 0, 0, u >> 31)  # a zero magnitude has no sign
    return shared[:, 0].astype(np.uint8), (sign.astype(np.int64) * 2**mbits + magnitude.astype(np.int64)).astype(
        np.uint8
    )


def bfp_decode(exps: np.ndarray, codes: np.ndarray, mbits: int) -> np.ndarray:
    """Inverse of bfp_encode (up to its rounding): magnitude * 2^(e - 127 - (mbits - 1)) with the sign; in a row of
    exponent 255 a magnitude of 2^(mbits-1) or more is Inf (nothing below its leading 1) or NaN (the rest as the
    top payload bits)."""
    e = exps.astype(np.int64)[:, None]
    magnitude = (codes & (2**mbits - 1)).astype(np.int64)
    negative = (codes >> mbits).astype(bool)
    value = magnitude * np.exp2((e - 127 - (mbits - 1)).astype(np.float64))
    with np.errstate(over="ignore"):
        out = np.where(negative, -value, value).astype(np.float32)
    lead = 2 ** (mbits - 1)
    special = (e == 255) & (magnitude >= lead)
    bits = (negative.astype(np.uint32) << 31) | 0x7F800000 | ((magnitude - lead) << (24 - mbits)).astype(np.uint32)
    out_bits = out.view(np.uint32)
    out_bits[special] = bits[special]
    return out


def pack(x: np.ndarray, fmt: str, pad_value: float = 0.0) -> np.ndarray:
    """The tile bytes of x in fmt (uint8)."""
    if fmt in ("float32", "int32", "uint32", "uint16"):
        return tile_order(x, pad_value).view(np.uint8)
    t = tile_order(np.asarray(x, dtype=np.float32), pad_value)
    if fmt == "bfloat16":
        return bf16_bits(t).view(np.uint8)
    mbits = MBITS[fmt]
    exps, codes = bfp_encode(t.reshape(-1, FACE), mbits)
    tiles = t.size // (TILE * TILE)
    exps, codes = exps.reshape(tiles, 64), codes.reshape(tiles, 64 * FACE)
    if mbits == 3:
        pairs = codes.reshape(tiles, -1, 2)
        codes = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).astype(np.uint8)
    return np.concatenate([exps, codes], axis=1).reshape(-1)


def unpack(packed: np.ndarray, shape: tuple[int, ...], fmt: str) -> np.ndarray:
    """The values of tile bytes `packed` in fmt, as an array of `shape`."""
    dtypes = {"float32": np.float32, "int32": np.int32, "uint32": np.uint32, "uint16": np.uint16}
    if fmt in dtypes:
        return row_order(packed.view(dtypes[fmt]), shape)
    if fmt == "bfloat16":
        return row_order(bf16_values(packed.view(np.uint16)), shape)
    mbits = MBITS[fmt]
    tile_bytes = {7: 64 + 1024, 3: 64 + 512}[mbits]
    per_tile = packed.reshape(-1, tile_bytes)
    exps, codes = per_tile[:, :64].reshape(-1), per_tile[:, 64:]
    if mbits == 3:
        codes = np.stack([codes & 15, codes >> 4], axis=-1)
    values = bfp_decode(exps, codes.reshape(-1, FACE), mbits)
    return row_order(values.reshape(-1), shape)


def quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if fmt == "bfloat16":
        return bf16_values(bf16_bits(x)).reshape(x.shape)
    return unpack(pack(x, fmt), x.shape, fmt)
