"""The random family: numbers drawn on the device from the device's random stream.

The generator is Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC'11):
a counter-based generator on 32-bit words only (two 32x32 -> 64-bit multiplies per round, which a Tensix core does
as 16-bit partial products; NumPy's uint64 product here gives the same bits), so the card can run it and every core
can start anywhere in the stream. Key = the device seed (64 bits as two words); counter = (word block index, 0, the
op's stream offset low / high word). The runner gives every random op a fresh offset (``kohakutt.kernels.runner``),
so successive ops draw disjoint blocks and ``manual_seed`` replays them. NumPy's ``Philox`` (``SimCall.rng``) is
the 4x64 variant, which needs 64-bit multiplies; it is not used here.

Words become numbers as a card kernel would make them: a float in [0, 1) from the top 24 bits of a word, fp32
arithmetic (the SFPU's: log / sqrt / sin / cos through :mod:`cardmath`), then the store's rounding.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels import cardmath, cost
from kohakutt.kernels.registry import SimCall, sim, ttnn

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_U32 = np.uint64(0xFFFFFFFF)
_TWO_POW_M24 = np.float32(2.0**-24)


def philox4x32(counters: np.ndarray, key: tuple[int, int], rounds: int = 10) -> np.ndarray:
    """Philox4x32-``rounds`` of each row of ``counters`` (n, 4) uint32 under ``key`` (two 32-bit words): (n, 4)."""
    c = [np.asarray(counters[:, i], dtype=np.uint64) for i in range(4)]
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    for _ in range(rounds):
        p0, p1 = c[0] * m0, c[2] * m1  # < 2^64: the 32x32 -> 64 products
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & _U32, (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1),
             p0 & _U32]  # fmt: skip
        k0, k1 = (k0 + PHILOX_W[0]) & 0xFFFFFFFF, (k1 + PHILOX_W[1]) & 0xFFFFFFFF
    return np.stack(c, axis=1).astype(np.uint32)


def words(seed: tuple[int, int], n: int) -> np.ndarray:
    """The first ``n`` 32-bit words of the op whose stream position is ``seed`` = (device seed, offset)."""
    blocks = -(-n // 4)
    idx = np.arange(blocks, dtype=np.uint64)
    ctr = np.empty((blocks, 4), dtype=np.uint32)
    ctr[:, 0] = idx & _U32
    ctr[:, 1] = idx >> np.uint64(32)
    ctr[:, 2] = seed[1] & 0xFFFFFFFF
    ctr[:, 3] = (seed[1] >> 32) & 0xFFFFFFFF
    return philox4x32(ctr, (seed[0] & 0xFFFFFFFF, seed[0] >> 32)).ravel()[:n]


def unit(w: np.ndarray) -> np.ndarray:
    """Words as fp32 floats in [0, 1): the top 24 bits times 2^-24 (every value exact)."""
    return (w >> np.uint32(8)).astype(np.float32) * _TWO_POW_M24


def below(high: float, dtype: DType) -> np.float32:
    """The largest value of ``dtype`` (float32 or bfloat16) strictly below ``high``."""
    h = cardmath.round_to(np.float32(high), dtype.value)
    if float(h) < high:
        return np.float32(h)
    if dtype is DType.FLOAT32:
        return np.nextafter(np.float32(h), np.float32(-np.inf))
    bits = int(np.asarray(h, dtype=np.float32).view(np.uint32)) >> 16
    bits = 0x8001 if bits in (0, 0x8000) else bits - 1 if bits < 0x8000 else bits + 1
    return np.asarray(bits << 16, dtype=np.uint32).view(np.float32)[()]


def _stored(values: np.ndarray, dtype: DType) -> np.ndarray:
    return cardmath.round_to(values, "bfloat16") if dtype is DType.BFLOAT16 else np.asarray(values, np.float32)


def _out(call: SimCall) -> TensorSpec:
    return call.out_specs[0]


def _random_cost(k: float) -> Any:
    def estimate(ins: list, outs: list, attrs: dict, num: Numerics, card: Any) -> float:
        return cost.memory_bound(ins, outs, card, cost.SFPU_TILE_CYCLES * k)

    return estimate


# ------------------------------------------------------------------------------------------------- simulator
@sim("uniform", random=True, estimate=_random_cost(3))
def uniform(call: SimCall) -> np.ndarray:
    spec, a = _out(call), call.attrs
    u = unit(words(call.seed, spec.numel)).reshape(spec.shape)
    low, span = np.float32(a["low"]), np.float32(a["high"] - a["low"])
    v = _stored(low + span * u, spec.dtype)
    return np.where(v >= a["high"], below(a["high"], spec.dtype), v)


@sim("normal", random=True, estimate=_random_cost(8))
def normal(call: SimCall) -> np.ndarray:
    spec, a = _out(call), call.attrs
    pairs = -(-spec.numel // 2)
    w = words(call.seed, 2 * pairs).reshape(pairs, 2)
    u1 = ((w[:, 0] >> np.uint32(8)).astype(np.float32) + np.float32(1.0)) * _TWO_POW_M24  # (0, 1]: ln stays finite
    theta = np.float32(2.0 * math.pi) * unit(w[:, 1])
    r = cardmath.sfpu("sqrt", np.float32(-2.0) * cardmath.sfpu("log", u1))
    z = np.stack([r * cardmath.sfpu("cos", theta), r * cardmath.sfpu("sin", theta)], axis=1).ravel()[: spec.numel]
    return np.float32(a["mean"]) + np.float32(a["std"]) * z.reshape(spec.shape)


@sim("randint", random=True, estimate=_random_cost(2))
def randint(call: SimCall) -> np.ndarray:
    spec, a = _out(call), call.attrs
    w = words(call.seed, spec.numel).astype(np.uint64)
    q = (w * np.uint64(int(a["high"]) - int(a["low"]))) >> np.uint64(32)  # multiply-high: floor(w * range / 2^32)
    return (q.astype(np.int64) + int(a["low"])).astype(spec.dtype.compute).reshape(spec.shape)


@sim("randperm", random=True, estimate=_random_cost(16))
def randperm(call: SimCall) -> np.ndarray:
    spec = _out(call)
    return np.argsort(words(call.seed, spec.shape[0]), kind="stable").astype(spec.dtype.compute)


@sim("bernoulli", random=True, estimate=_random_cost(2))
def bernoulli(call: SimCall) -> np.ndarray:
    spec = _out(call)
    p = np.float32(call.attrs["p"]) if call.attrs["p"] is not None else np.asarray(call.inputs[0], np.float32)
    hit = unit(words(call.seed, spec.numel)).reshape(spec.shape) < p
    return hit.astype(np.float32) if spec.dtype.is_float else hit.astype(spec.dtype.compute)


@sim("dropout", random=True, estimate=_random_cost(2))
def dropout(call: SimCall) -> list[np.ndarray]:
    x = np.asarray(call.inputs[0], np.float32)
    p = float(call.attrs["p"])
    if not call.attrs["train"]:
        return [x, np.ones(x.shape, dtype=np.bool_)]
    keep = unit(words(call.seed, x.size)).reshape(x.shape) >= np.float32(p)
    scale = np.float32(1.0 / (1.0 - p)) if p < 1.0 else np.float32(0.0)
    return [np.where(keep, x * scale, np.float32(0.0)), keep]


@sim("multinomial", random=True, estimate=_random_cost(8))
def multinomial(call: SimCall) -> np.ndarray:
    w = np.atleast_2d(np.asarray(call.inputs[0], np.float64))
    rows, cats = w.shape
    n = int(call.attrs["num_samples"])
    if call.attrs["replacement"]:
        cdf = np.cumsum(w, axis=1)
        cdf = cdf / np.where(cdf[:, -1:] > 0, cdf[:, -1:], 1.0) + np.arange(rows)[:, None]
        u = unit(words(call.seed, rows * n)).reshape(rows, n) + np.arange(rows)[:, None]
        idx = np.searchsorted(cdf.ravel(), u.ravel(), side="right").reshape(rows, n) - np.arange(rows)[:, None] * cats
        out = np.minimum(idx, cats - 1)
    else:
        u = (words(call.seed, rows * cats).reshape(rows, cats) >> np.uint32(8)).astype(np.float64) + 1.0
        with np.errstate(divide="ignore"):
            keys = -np.log(u * 2.0**-24) / w  # exponential races: the first n arrivals are a weighted draw
        out = np.argsort(np.where(w > 0, keys, np.inf), axis=1, kind="stable")[:, :n]
    return out.reshape(_out(call).shape).astype(np.int32)


# ============================================================================================ TT-NN (a real card)
# A card draws with TT-NN's own generators (seeded from the same device stream): reproducible under manual_seed,
# but not the simulator's numbers. These take the device and the op's stream position as keywords.
TTNN_NAMES: tuple[str, ...] = (
    "rand", "randn", "bernoulli", "experimental.dropout", "full_like", "ones_like", "multiply", "add", "floor",
    "typecast", "ne", "sort", "reshape", "GetDefaultDevice", "float32", "bfloat16", "int32", "uint8", "TILE_LAYOUT",
    "ROW_MAJOR_LAYOUT",
)  # fmt: skip
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "rand": ("dtype", "layout", "low", "high", "seed"),
    "randn": ("device", "dtype", "layout", "seed"),
    "bernoulli": ("seed", "dtype"),
    "experimental.dropout": ("seed", "probability", "scale"),
    "full_like": ("tensor", "fill_value"),
    "sort": ("dim",),
    "ones_like": ("dtype",),
}


def tt_seed(seed: tuple[int, int]) -> int:
    """One nonzero 32-bit seed for TT-NN's generators from (device seed, offset)."""
    s = (seed[0] ^ (seed[0] >> 32) ^ (seed[1] * 0x9E3779B9)) & 0xFFFFFFFF
    return s or 0x9E3779B9


def _tt_dtype(tt: Any, dtype: DType) -> Any:
    return tt.uint8 if dtype is DType.BOOL else getattr(tt, dtype.value)


def _device(tt: Any, device: Any) -> Any:
    """The card to make values on: ``device``, else TT-NN's default device (the ttnn backend sets it at open)."""
    return device if device is not None else tt.GetDefaultDevice()


@ttnn("uniform", random=True)
def tt_uniform(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec], *,
               device: Any = None, seed: tuple[int, int] = (0, 0)) -> Any:  # fmt: skip
    spec = out_specs[0]
    return tt.rand(list(spec.shape), _device(tt, device), dtype=_tt_dtype(tt, spec.dtype), layout=tt.TILE_LAYOUT,
                   low=attrs["low"], high=attrs["high"], seed=tt_seed(seed))  # fmt: skip


@ttnn("normal", random=True)
def tt_normal(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec], *,
              device: Any = None, seed: tuple[int, int] = (0, 0)) -> Any:  # fmt: skip
    spec = out_specs[0]
    z = tt.randn(list(spec.shape), device=_device(tt, device), dtype=_tt_dtype(tt, spec.dtype), layout=tt.TILE_LAYOUT,
                 seed=tt_seed(seed))  # fmt: skip
    return tt.add(tt.multiply(z, attrs["std"]), attrs["mean"])


@ttnn("randint", random=True)
def tt_randint(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec], *,
               device: Any = None, seed: tuple[int, int] = (0, 0)) -> Any:  # fmt: skip
    spec = out_specs[0]
    u = tt.rand(list(spec.shape), _device(tt, device), dtype=tt.float32, layout=tt.TILE_LAYOUT, low=float(attrs["low"]),
                high=float(attrs["high"]), seed=tt_seed(seed))  # fmt: skip
    return tt.typecast(tt.floor(u), _tt_dtype(tt, spec.dtype))


@ttnn("randperm", random=True)
def tt_randperm(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec], *,
                device: Any = None, seed: tuple[int, int] = (0, 0)) -> Any:  # fmt: skip
    n = out_specs[0].shape[0]
    keys = tt.rand([1, n], _device(tt, device), dtype=tt.float32, layout=tt.TILE_LAYOUT, seed=tt_seed(seed))
    _, order = tt.sort(keys, dim=-1)
    return tt.reshape(tt.typecast(order, tt.int32), [n])


@ttnn("bernoulli", random=True)
def tt_bernoulli(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec], *,
                 device: Any = None, seed: tuple[int, int] = (0, 0)) -> Any:  # fmt: skip
    x = inputs[0]
    p = x if attrs["p"] is None else tt.full_like(x, fill_value=attrs["p"])
    return tt.bernoulli(p, seed=tt_seed(seed), dtype=_tt_dtype(tt, out_specs[0].dtype))


@ttnn("dropout", random=True)
def tt_dropout(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec], *,
               device: Any = None, seed: tuple[int, int] = (0, 0)) -> list[Any]:  # fmt: skip
    x, p = inputs[0], float(attrs["p"])
    if not attrs["train"]:
        return [x, tt.typecast(tt.ones_like(x), tt.uint8)]
    s = tt_seed(seed)
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    # the same draws give the mask; TT-NN's dropout returns bfloat16, so another dtype takes the mask in its own
    kept = tt.experimental.dropout(tt.ones_like(x, dtype=tt.bfloat16), seed=s, probability=p, scale=1.0)
    if x.dtype == tt.bfloat16:
        out = tt.experimental.dropout(x, seed=s, probability=p, scale=scale)
    else:
        out = tt.multiply(tt.multiply(x, tt.typecast(kept, x.dtype)), scale)
    return [out, tt.typecast(tt.ne(kept, 0.0), tt.uint8)]
