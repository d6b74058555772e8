"""The element-wise family: the simulator's model of TT-NN's element-wise programs, and the TT-NN calls on a card.

What the model does (TT-NN 0.81.1; the op docs in ``kohakutt/ir/defs/elementwise.py`` state it per op):
- bfloat16 add / sub are FPU ops (:mod:`cardmath`), DST in fp32 only when an operand or the output is a 32-bit
  format or ``fp32_acc`` is set (``fp32_dest_acc_en``), else rounded to bf16 in DST. bfloat16 mul at HiFi4 is
  TT-NN's default accurate multiply (SFPU: the exact product, rounded once); below HiFi4 it is the FPU multiply at
  that fidelity (cardmath's phases into DST). float32 and int32 operands take TT-NN's SFPU path: IEEE fp32
  (wrapping int32) arithmetic, no fidelity.
- Every other op is SFPU math on DST values: cardmath's model for the ops it has (exact: the correctly rounded fp32
  result; ``approx``: the LLK's approximate algorithms for exp, reciprocal, sigmoid, gelu), and for the rest the
  same exact model (float64 math rounded once to fp32: the card's own polynomials are not modelled).
- A Python number operand is stored in the compute format first (bf16 for a bf16 op), as TT-NN packs it.
- The store rounds the fp32 result to the output dtype as the packer does. NaN stays NaN (the card may turn a
  bf16 NaN into Inf; not modelled), denormals are kept (the card flushes them; not modelled).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator
from kohakutt.ir.defs.elementwise import BACKWARD, BINARY, UNARY, float_of, operand_dtype
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels import cardmath, cost
from kohakutt.kernels.registry import Estimate, SimCall, sim, ttnn

_WIDE = (DType.FLOAT32, DType.INT32, DType.UINT32)


# ------------------------------------------------------------------------------------------------------ operands
def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _t64(fn: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray) -> np.ndarray:
    """A torch float64 special function (lgamma, digamma, erfinv, ...) on NumPy values of any shape, 0-d included (a
    NumPy scalar or 0-d array gives a 0-d array: ``np.ascontiguousarray`` would make it 1-d, and ``torch.from_numpy``
    refuses a NumPy scalar)."""
    a = np.asarray(x, dtype=np.float64)
    return fn(torch.from_numpy(a if a.flags.c_contiguous else a.copy())).numpy()


def compute_values(call: SimCall, dtype: DType, which: slice = slice(None)) -> list[np.ndarray]:
    """The operands as the op's program sees them in ``dtype``: tensors converted (an integer tensor in a bf16 op is
    rounded to bf16), Python numbers stored in the compute format (bf16-rounded for a bf16 op)."""
    out = []
    for v in call.inputs[which]:
        if dtype.is_float:
            a = _f32(v)
            out.append(cardmath.round_to(a, "bfloat16") if dtype is DType.BFLOAT16 else a)
        elif dtype is DType.BOOL:
            out.append(np.asarray(v).astype(np.bool_))
        else:
            out.append(
                np.asarray(v).astype(dtype.compute)
                if isinstance(v, np.ndarray)
                else np.asarray(int(v), dtype=dtype.compute)
            )
    return out


def fp32_dst(call: SimCall) -> bool:
    """Whether DST holds fp32: ``fp32_acc``, or any 32-bit operand / output format (TT-NN's rule)."""
    specs = [s for s in call.in_specs if isinstance(s, TensorSpec)] + list(call.out_specs)
    return bool(call.numerics.fp32_acc) or any(s.dtype in _WIDE for s in specs)


def _fid(num: Numerics) -> str:
    return (Fidelity.HiFi4 if num.fidelity is None else num.fidelity).name


def _exact(fn: Callable[..., np.ndarray], *args: np.ndarray) -> np.ndarray:
    """The SFPU exact model: float64 math on the operands, rounded once to fp32."""
    with np.errstate(all="ignore"):
        return _f32(fn(*(_f64(a) for a in args)))


def _sfpu_cost(k: float) -> Estimate:
    """The device time of an SFPU op about ``k`` times as long as a simple one (a polynomial, a few steps)."""

    def estimate(ins: list, outs: list, attrs: dict, num: Numerics, card: Any) -> float:
        return cost.memory_bound(ins, outs, card, cost.SFPU_TILE_CYCLES * k)

    return estimate


# --------------------------------------------------------------------------------------------------------- unary
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    bx = beta * x
    return np.where(bx > threshold, x, np.logaddexp(0.0, bx) / beta)


def _round(x: np.ndarray, decimals: int) -> np.ndarray:
    if decimals == 0:
        return np.rint(x)
    if decimals > 0:
        s = 10.0**decimals
        return np.rint(x * s) / s
    s = 10.0**-decimals
    return np.rint(x / s) * s


def _bound(v: float | None, default: float) -> float:
    return default if v is None else v


SELU_SCALE, SELU_ALPHA = 1.0507009873554805, 1.6732632423543772

# Float ops, float64 in, float64 out (rounded once to fp32 afterwards); ``a`` holds the op's attributes.
F64: dict[str, Callable[[np.ndarray, dict[str, Any]], np.ndarray]] = {
    "abs": lambda x, a: np.abs(x),
    "neg": lambda x, a: -x,
    "sign": lambda x, a: np.sign(x),
    "square": lambda x, a: x * x,
    "exp2": lambda x, a: np.exp2(x),
    "expm1": lambda x, a: np.expm1(x),
    "log2": lambda x, a: np.log2(x),
    "log10": lambda x, a: np.log10(x),
    "log1p": lambda x, a: np.log1p(x),
    "tan": lambda x, a: np.tan(x),
    "asin": lambda x, a: np.arcsin(x),
    "acos": lambda x, a: np.arccos(x),
    "atan": lambda x, a: np.arctan(x),
    "sinh": lambda x, a: np.sinh(x),
    "cosh": lambda x, a: np.cosh(x),
    "asinh": lambda x, a: np.arcsinh(x),
    "acosh": lambda x, a: np.arccosh(x),
    "atanh": lambda x, a: np.arctanh(x),
    "logsigmoid": lambda x, a: np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x))),
    "relu": lambda x, a: np.maximum(x, 0.0),
    "relu6": lambda x, a: np.minimum(np.maximum(x, 0.0), 6.0),
    "leaky_relu": lambda x, a: np.where(x >= 0, x, a["negative_slope"] * x),
    "elu": lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(x)),
    "selu": lambda x, a: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x)),
    "celu": lambda x, a: np.maximum(x, 0.0) + np.minimum(0.0, a["alpha"] * np.expm1(x / a["alpha"])),
    "mish": lambda x, a: x * np.tanh(_softplus(x)),
    "softplus": lambda x, a: _softplus(x, a["beta"], a["threshold"]),
    "hardtanh": lambda x, a: np.minimum(np.maximum(x, a["min_val"]), a["max_val"]),
    "hardsigmoid": lambda x, a: np.minimum(np.maximum(x / 6.0 + 0.5, 0.0), 1.0),
    "hardswish": lambda x, a: x * np.minimum(np.maximum(x / 6.0 + 0.5, 0.0), 1.0),
    "threshold": lambda x, a: np.where(x <= a["threshold"], a["value"], x),  # PyTorch's test: NaN is kept
    "erfc": lambda x, a: _t64(torch.special.erfc, x),
    "erfinv": lambda x, a: _t64(torch.special.erfinv, x),
    "lgamma": lambda x, a: _t64(torch.lgamma, x),
    "digamma": lambda x, a: _t64(torch.special.digamma, x),
    "polygamma": lambda x, a: _t64(lambda t: torch.special.polygamma(int(a["n"]), t), x),
    "floor": lambda x, a: np.floor(x),
    "ceil": lambda x, a: np.ceil(x),
    "round": lambda x, a: _round(x, int(a["decimals"])),
    "trunc": lambda x, a: np.trunc(x),
    "frac": lambda x, a: x - np.trunc(x),
    "clamp": lambda x, a: np.minimum(np.maximum(x, _bound(a["min"], -np.inf)), _bound(a["max"], np.inf)),
}
# Ops cardmath models (with their approximate modes); gelu picks its variant from the attribute.
CARDMATH = {"exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "silu", "sin", "cos", "erf", "gelu"}


def _nan_to_num(x: np.ndarray, a: dict[str, Any], out: DType) -> np.ndarray:
    if not out.is_float:
        return x
    big = 3.3895313892515355e38 if out is DType.BFLOAT16 else float(np.finfo(np.float32).max)
    y = np.where(np.isnan(x), a["nan"], x)
    y = np.where(np.isposinf(x), _bound(a["posinf"], big), y)
    return _f32(np.where(np.isneginf(x), _bound(a["neginf"], -big), y))


def _int_clamp(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    info = np.iinfo(x.dtype)
    lo = info.min if a["min"] is None else min(max(math.ceil(a["min"]), info.min), info.max)
    hi = info.max if a["max"] is None else min(max(math.floor(a["max"]), info.min), info.max)
    return np.minimum(np.maximum(x, np.asarray(lo, x.dtype)), np.asarray(hi, x.dtype))


def _int_round(x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    d = int(a["decimals"])
    if d >= 0 or x.dtype == np.bool_:
        return x
    info = np.iinfo(x.dtype)
    return np.clip(_round(x.astype(np.float64), d), info.min, info.max).astype(x.dtype)  # saturates


# Integer (and bool, where the IR lets them through) versions of the "same" ops.
INT: dict[str, Callable[[np.ndarray, dict[str, Any]], np.ndarray]] = {
    "abs": lambda x, a: np.abs(x),
    "neg": lambda x, a: -x,
    "sign": lambda x, a: np.sign(x),
    "square": lambda x, a: x * x,
    "relu": lambda x, a: np.maximum(x, 0).astype(x.dtype),
    "threshold": lambda x, a: np.where(x > math.trunc(a["threshold"]), x, np.asarray(int(a["value"])).astype(x.dtype)),
    "floor": lambda x, a: x,
    "ceil": lambda x, a: x,
    "trunc": lambda x, a: x,
    "round": _int_round,
    "clamp": _int_clamp,
    "nan_to_num": lambda x, a: x,
    "bitwise_not": lambda x, a: ~x,
}
PREDICATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "signbit": np.signbit,
    "logical_not": lambda x: x == 0,
}


def unary(call: SimCall) -> np.ndarray:
    """Every unary op: predicates on the stored values, integer ops in their dtype, float ops as SFPU math."""
    op, attrs, spec = call.op, call.attrs, call.in_specs[0]
    x = np.asarray(call.inputs[0])
    out = call.out_specs[0].dtype
    if op in PREDICATES:
        return PREDICATES[op](x if spec.dtype.is_float else x.astype(np.int64))
    if not out.is_float:
        return INT[op](x.astype(out.compute), attrs)
    (x,) = compute_values(call, out)
    if op == "nan_to_num":
        return _nan_to_num(x, attrs, out)
    if op in CARDMATH:
        name = "gelu_tanh" if op == "gelu" and attrs["approximate"] == "tanh" else op
        return cardmath.sfpu(name, x, approx=bool(call.numerics.approx))
    fn = F64[op]
    return _exact(lambda v: fn(v, attrs), x)


_HEAVY = {
    "erfinv": 4,
    "lgamma": 6,
    "digamma": 6,
    "polygamma": 8,
    "tan": 3,
    "asin": 3,
    "acos": 3,
    "atan": 3,
    "sinh": 2,
    "cosh": 2,
    "asinh": 3,
    "acosh": 3,
    "atanh": 3,
    "mish": 3,
    "erfc": 2,
    "expm1": 2,
    "log1p": 2,
    "logsigmoid": 3,
    "softplus": 2,
    "celu": 2,
    "elu": 2,
    "selu": 2,
    "gelu": 2,
}
for _op in UNARY:
    _k = _HEAVY.get(_op, 1)
    sim(_op, estimate=cost.sfpu if _k == 1 else _sfpu_cost(_k))(unary)


# -------------------------------------------------------------------------------------------------------- binary
def _int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer a ** b, wrapping; a negative exponent gives trunc(1 / a^|b|) (0 for a base of 0)."""
    a, b = np.broadcast_arrays(a, b)
    r = np.power(a, np.where(b < 0, 0, b).astype(b.dtype))
    neg = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0)).astype(a.dtype)
    return np.where(b < 0, neg, r)


def _int_div(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    """Integer division rounded by ``mode``; division by zero gives 0 (undefined on the card)."""
    a, b = np.broadcast_arrays(a, b)
    safe = np.where(b == 0, 1, b).astype(b.dtype)
    q = np.floor_divide(a, safe)
    if mode == "trunc":
        q = q + ((np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))).astype(q.dtype)
    return np.where(b == 0, 0, q).astype(a.dtype)


def _int_mod(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = np.broadcast_arrays(a, b)
        return np.where(b == 0, 0, fn(a, np.where(b == 0, 1, b).astype(b.dtype))).astype(a.dtype)

    return mod


def _shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    n = np.clip(b, 0, bits - 1).astype(a.dtype)
    if left:
        return np.where((b < 0) | (b >= bits), 0, np.left_shift(a, n)).astype(a.dtype)
    return np.where(b < 0, 0, np.right_shift(a, n)).astype(a.dtype)


def _xlogy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((a == 0) & ~np.isnan(b), 0.0, a * np.log(b))


def _heaviside(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    one, zero = np.ones((), a.dtype), np.zeros((), a.dtype)
    r = np.where(a < 0, zero, np.where(a > 0, one, b))
    return np.where(np.isnan(a), a, r) if a.dtype.kind == "f" else r


def _isclose(a: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    a, b = _f64(a), _f64(b)
    with np.errstate(all="ignore"):
        near = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= attrs["atol"] + attrs["rtol"] * np.abs(b))
    close = (a == b) | near
    return close | (np.isnan(a) & np.isnan(b)) if attrs["equal_nan"] else close


# Float ops on (a, b) in float64 (rounded once to fp32), and their integer / bool versions where they exist.
F64_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "floor_divide": np.floor_divide, "remainder": np.remainder, "fmod": np.fmod, "pow": np.power,
    "atan2": np.arctan2, "maximum": np.maximum, "minimum": np.minimum, "fmax": np.fmax, "fmin": np.fmin,
    "hypot": np.hypot, "logaddexp": np.logaddexp, "logaddexp2": np.logaddexp2, "copysign": np.copysign,
    "xlogy": _xlogy, "heaviside": _heaviside,
}  # fmt: skip
INT_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "floor_divide": lambda a, b: _int_div(a, b, "floor"), "remainder": _int_mod(np.remainder),
    "fmod": _int_mod(np.fmod), "pow": _int_pow, "maximum": np.maximum, "minimum": np.minimum, "fmax": np.maximum,
    "fmin": np.minimum, "heaviside": _heaviside, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "left_shift": lambda a, b: _shift(a, b, True),
    "right_shift": lambda a, b: _shift(a, b, False),
}  # fmt: skip
COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "logical_and": lambda a, b: (a != 0) & (b != 0),
    "logical_or": lambda a, b: (a != 0) | (b != 0), "logical_xor": lambda a, b: (a != 0) != (b != 0),
}  # fmt: skip


def _add_sub(call: SimCall, a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    sign = 1 if call.op == "add" else -1
    alpha = call.attrs["alpha"]
    if not dt.is_float:
        with np.errstate(all="ignore"):
            return a + (b * np.asarray(sign * int(alpha)).astype(dt.compute)).astype(dt.compute)
    if alpha != 1:  # TT-NN's addalpha / subalpha: one SFPU fp32 expression
        return _exact(lambda x, y: x + sign * alpha * y, a, b)
    if dt is DType.BFLOAT16:
        fn = cardmath.add if sign > 0 else cardmath.sub
        return fn(a, b, fp32_acc=fp32_dst(call))
    with np.errstate(all="ignore"):  # inf - inf is NaN on the card too, without a warning
        return a + b if sign > 0 else a - b


def _mul(call: SimCall, a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    fid = call.numerics.fidelity
    if dt is DType.BFLOAT16 and fid is not None and fid < Fidelity.HiFi4:  # the FPU's phases, DST as numerics say
        return cardmath.multiply(a, b, fidelity=fid.name, fp32_acc=fp32_dst(call))
    with np.errstate(all="ignore"):
        return a * b


def _div(call: SimCall, a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
    mode = call.attrs.get("rounding_mode", "floor")
    if not dt.is_float:
        return _int_div(a, b, mode)
    if mode == "floor":
        return _exact(np.floor_divide, a, b)
    if mode == "trunc":
        return _exact(lambda x, y: np.trunc(x / y), a, b)
    if call.numerics.approx and dt is DType.BFLOAT16:  # TT-NN's fast path: bf16 reciprocal, FPU multiply
        recip = cardmath.round_to(cardmath.sfpu("reciprocal", b, approx=True), "bfloat16")
        return cardmath.multiply(a, recip, fidelity=_fid(call.numerics), fp32_acc=fp32_dst(call))
    return _exact(np.divide, a, b)


SPECIAL = {"add": _add_sub, "sub": _add_sub, "mul": _mul, "div": _div, "floor_divide": _div}


def binary(call: SimCall) -> np.ndarray:
    """Every binary op: operands in the compute dtype (a bf16 op sees bf16 numbers), then the op's model."""
    op = call.op
    dt = operand_dtype(call.in_specs, op)
    if BINARY[op][0] == "float" and (op != "div" or call.attrs["rounding_mode"] is None):
        dt = float_of(dt)
    a, b = compute_values(call, dt)
    if op in SPECIAL:
        return SPECIAL[op](call, a, b, dt)
    if op in COMPARE:
        return COMPARE[op](a, b)
    if op == "isclose":
        return _isclose(a, b, call.attrs)
    if not dt.is_float:
        with np.errstate(all="ignore"):
            return INT_BINARY[op](a, b)
    return _exact(F64_BINARY[op], a, b)


_BINARY_COST = {"add": cost.eltwise, "sub": cost.eltwise, "mul": cost.eltwise, "pow": _sfpu_cost(4),
                "atan2": _sfpu_cost(4), "hypot": _sfpu_cost(2), "logaddexp": _sfpu_cost(4),
                "logaddexp2": _sfpu_cost(4), "xlogy": _sfpu_cost(2), "div": _sfpu_cost(2),
                "floor_divide": _sfpu_cost(3), "remainder": _sfpu_cost(3), "fmod": _sfpu_cost(3)}  # fmt: skip
for _op in BINARY:
    sim(_op, estimate=_BINARY_COST.get(_op, cost.sfpu))(binary)


# ------------------------------------------------------------------------------------------------------- ternary
@sim("where", estimate=cost.sfpu)
def where(call: SimCall) -> np.ndarray:
    dt = operand_dtype(call.in_specs[1:], "where")
    cond = np.asarray(call.inputs[0]) != 0
    a, b = compute_values(call, dt, slice(1, None))
    return np.where(cond, a, b)


def _int_value(value: float, op: str) -> int:
    if value != int(value):
        raise DtypeError(f"{op} on integer tensors needs an integral value, got {value}")
    return int(value)


@sim("addcmul", estimate=_sfpu_cost(2))
def addcmul(call: SimCall) -> np.ndarray:
    dt = call.out_specs[0].dtype
    x, t1, t2 = compute_values(call, dt)
    v = call.attrs["value"]
    if not dt.is_float:
        with np.errstate(all="ignore"):
            return x + np.asarray(_int_value(v, "addcmul")).astype(dt.compute) * t1 * t2
    return _exact(lambda a, b, c: a + v * b * c, x, t1, t2)


@sim("addcdiv", estimate=_sfpu_cost(3))
def addcdiv(call: SimCall) -> np.ndarray:
    x, t1, t2 = compute_values(call, call.out_specs[0].dtype)
    v = call.attrs["value"]
    return _exact(lambda a, b, c: a + v * b / c, x, t1, t2)


@sim("lerp", estimate=_sfpu_cost(2))
def lerp(call: SimCall) -> np.ndarray:
    s, e, w = compute_values(call, call.out_specs[0].dtype)
    return _exact(lambda a, b, c: np.where(c < 0.5, a + c * (b - a), b - (b - a) * (1.0 - c)), s, e, w)


@sim("clamp_tensor", estimate=cost.sfpu)
def clamp_tensor(call: SimCall) -> np.ndarray:
    x, lo, hi = compute_values(call, call.out_specs[0].dtype)
    return np.minimum(np.maximum(x, lo), hi)


# ------------------------------------------------------------------------------------------------------ backward
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_K, _C = math.sqrt(2.0 / math.pi), 0.044715


def _gelu_grad(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        t = np.tanh(_K * (x + _C * x**3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _K * (1.0 + 3.0 * _C * x * x)
    return 0.5 * (1.0 + _t64(torch.special.erf, x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / _SQRT_2PI


def _elu_grad(g: np.ndarray, x: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    neg_coef, pos_coef, in_scale = a["alpha"] * a["scale"], a["scale"], a["input_scale"]
    neg = in_scale * (x + neg_coef) if a["is_result"] else in_scale * neg_coef * np.exp(x * in_scale)
    return np.where(x <= 0, g * neg, g * pos_coef)


def _mish_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(_softplus(x))
    return t + x * _sigmoid(x) * (1.0 - t * t)


BACKWARD_F64: dict[str, Callable[[np.ndarray, np.ndarray, dict[str, Any]], np.ndarray]] = {
    "gelu_backward": lambda g, x, a: g * _gelu_grad(x, a["approximate"]),
    "silu_backward": lambda g, x, a: g * _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x))),
    "sigmoid_backward": lambda g, y, a: g * y * (1.0 - y),
    "tanh_backward": lambda g, y, a: g * (1.0 - y * y),
    "threshold_backward": lambda g, x, a: np.where(x <= a["threshold"], 0.0, g),  # NaN x passes g, as PyTorch
    "elu_backward": _elu_grad,
    "leaky_relu_backward": lambda g, x, a: np.where(x > 0, g, g * a["negative_slope"]),
    "hardtanh_backward": lambda g, x, a: np.where((x <= a["min_val"]) | (x >= a["max_val"]), 0.0, g),
    "softplus_backward": lambda g, x, a: np.where(x * a["beta"] > a["threshold"], g, g * _sigmoid(a["beta"] * x)),
    "mish_backward": lambda g, x, a: g * _mish_grad(x),
    "hardsigmoid_backward": lambda g, x, a: np.where((x > -3.0) & (x < 3.0), g / 6.0, 0.0),
    "hardswish_backward": lambda g, x, a: np.where(x <= -3.0, 0.0, np.where(x < 3.0, g * (x / 3.0 + 0.5), g)),
}


def backward(call: SimCall) -> np.ndarray:
    """A backward helper as one fused SFPU program: fp32 math (float64, rounded once), one output rounding."""
    g, x = compute_values(call, call.out_specs[0].dtype)
    fn = BACKWARD_F64[call.op]
    return _exact(lambda u, v: fn(u, v, call.attrs), g, x)


for _op in BACKWARD:
    sim(_op, estimate=_sfpu_cost(4))(backward)


# ============================================================================================ TT-NN (a real card)
# Every TT-NN name used below, as dotted paths from the ttnn module (checked against ttnn 0.81.1).
# fmt: off
TTNN_NAMES: tuple[str, ...] = (
    "abs", "neg", "sign", "signbit", "square", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
    "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "SigmoidMode.Accurate", "SigmoidMode.FastApproximate", "log_sigmoid", "relu", "relu6",
    "leaky_relu", "elu", "selu", "celu", "gelu", "GeluVariant.Accurate", "GeluVariant.Tanh", "GeluVariant.FastLut",
    "silu", "mish", "softplus", "hardtanh", "hardsigmoid", "hardswish", "threshold", "erf", "erfc", "erfinv",
    "lgamma", "digamma", "floor", "ceil", "round", "trunc", "frac", "isnan", "isinf", "isfinite", "isposinf",
    "isneginf", "logical_not", "bitwise_not", "clamp", "add", "subtract", "addalpha", "subalpha", "multiply",
    "divide", "remainder", "fmod", "pow", "atan2", "maximum", "minimum", "hypot", "logaddexp", "logaddexp2", "xlogy",
    "heaviside", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
    "logical_and", "logical_or", "logical_xor", "eq", "ne", "lt", "le", "gt", "ge", "isclose", "where", "addcmul",
    "addcdiv", "lerp", "rsub", "full_like", "full", "GetDefaultDevice", "TILE_LAYOUT", "typecast", "Tensor.dtype",
    "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16", "uint8", "gelu_bw", "silu_bw",
    "elu_bw", "leaky_relu_bw", "hardtanh_bw", "softplus_bw", "hardsigmoid_bw", "hardswish_bw", "clone",
)
# The keywords passed by name to each TT-NN callable.
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "exp": ("fast_and_approximate_mode",), "log": ("fast_and_approximate_mode",),
    "sqrt": ("fast_and_approximate_mode",), "rsqrt": ("fast_and_approximate_mode",),
    "tanh": ("fast_and_approximate_mode",), "erf": ("fast_and_approximate_mode",), "sigmoid": ("mode",),
    "gelu": ("variant",), "elu": ("alpha",), "celu": ("alpha",), "softplus": ("beta", "threshold"),
    "hardtanh": ("min_val", "max_val"), "clamp": ("min", "max"), "round": ("decimals",),
    "add": ("fast_and_approximate_mode",), "subtract": ("fast_and_approximate_mode",),
    "multiply": ("fast_and_approximate_mode",), "divide": ("rounding_mode", "fast_and_approximate_mode"),
    "isclose": ("rtol", "atol", "equal_nan"), "addcmul": ("value",), "addcdiv": ("value",),
    "full_like": ("tensor", "fill_value"), "full": ("shape", "fill_value", "dtype", "layout", "device"),
    "gelu_bw": ("variant",), "elu_bw": ("alpha",),
    "leaky_relu_bw": ("negative_slope",), "hardtanh_bw": ("min", "max"), "softplus_bw": ("beta", "threshold"),
}
# fmt: on

TtnnFn = Callable[..., Any]


def _tt_dtype(tt: Any, dtype: DType) -> Any:
    return tt.uint8 if dtype is DType.BOOL else getattr(tt, DType.BFLOAT16.value if dtype.is_block else dtype.value)


def _cast(tt: Any, y: Any, spec: TensorSpec) -> Any:
    """``y`` in the IR's output dtype (TT-NN returns comparisons as 1.0 / 0.0 in the operand dtype)."""
    want = _tt_dtype(tt, spec.dtype)
    return y if y.dtype == want else tt.typecast(y, want)


def _tensor(tt: Any, v: Any, like: Any) -> Any:
    """A Python number as a tensor shaped like ``like`` (for TT-NN ops that take tensors only)."""
    return tt.full_like(like, fill_value=v) if isinstance(v, int | float | bool) else v


def _like(inputs: Sequence[Any]) -> Any:
    return next(v for v in inputs if not isinstance(v, int | float | bool))


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | bool)


def _compute_dtype(tt: Any, inputs: Sequence[Any], spec: TensorSpec) -> Any:
    """The one dtype every tensor operand is brought to (TT-NN's binary and ternary ops take no mixed dtypes):
    a float result's own float dtype (bfloat16 for a block float), else the widest operand kind."""
    if spec.dtype.is_float:
        return tt.float32 if spec.dtype is DType.FLOAT32 else tt.bfloat16
    kinds = [v.dtype for v in inputs if not _is_number(v)]
    if tt.float32 in kinds:
        return tt.float32
    if any(k in (tt.bfloat16, tt.bfloat8_b, tt.bfloat4_b) for k in kinds):
        return tt.bfloat16
    return tt.uint32 if tt.uint32 in kinds else tt.int32


# On integer operands TT-NN's rounding ops do not run (they are the identity there), and the sign and class tests
# run on float32: exact, as int -> float32 keeps every value's sign and finiteness.
_INT_IDENTITY = ("floor", "ceil", "trunc", "round")
_INT_AS_FLOAT32 = ("sign", "signbit", "isnan", "isinf", "isfinite", "isposinf", "isneginf")
_INT_REFUSED = ("pow", "round")  # integer results TT-NN computes on no integer path (round: negative decimals)


def _from_numbers(tt: Any, op: str, inputs: list[Any], attrs: dict[str, Any], numerics: Numerics,
                  spec: TensorSpec) -> Any:  # fmt: skip
    """An op of Python numbers only: its value as the simulator's model of the card's op gives it, made on the host
    and filled on the card (there is no tensor for TT-NN to compute on)."""
    from kohakutt.ir.ops import ScalarSpec
    from kohakutt.kernels import registry

    model = registry.lookup(op, "sim", "ttnn")
    assert model is not None, op
    value = np.asarray(model.fn(SimCall(op, list(inputs), [ScalarSpec(v) for v in inputs], attrs, numerics, [spec])))
    fill = value.reshape(-1)[0].item() if value.size else 0
    return tt.full(shape=list(spec.shape), fill_value=fill, dtype=_tt_dtype(tt, spec.dtype), layout=tt.TILE_LAYOUT,
                   device=tt.GetDefaultDevice())  # fmt: skip


def _register_ttnn(op: str, fn: Callable[[Any, list[Any], dict[str, Any], Numerics], Any]) -> None:
    def run(tt: Any, inputs: list[Any], attrs: dict[str, Any], numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
        spec = out_specs[0]
        if all(_is_number(v) for v in inputs):
            return _from_numbers(tt, op, list(inputs), attrs, numerics, spec)
        dt = _compute_dtype(tt, inputs, spec)
        integer = dt in (tt.int32, tt.uint32)
        if integer and op in _INT_IDENTITY and attrs.get("decimals", 0) >= 0:
            return _cast(tt, inputs[0], spec)
        if integer and op in _INT_REFUSED:
            raise KohakuTTUnsupportedOperator(f"{op}: TT-NN runs it on floats only, and float32 holds no int32 "
                                              "exactly above 2^24; cast the operands to a float dtype")  # fmt: skip
        if integer and op in _INT_AS_FLOAT32:
            dt = tt.float32
        operands = [v if _is_number(v) or v.dtype == dt else tt.typecast(v, dt) for v in inputs]
        return _cast(tt, fn(tt, operands, attrs, numerics), spec)

    ttnn(op)(run)


def _approx(n: Numerics) -> dict[str, bool]:
    return {"fast_and_approximate_mode": bool(n.approx)}


# unary ops: op -> (ttnn name, keyword builder)
_PLAIN = ["abs", "neg", "sign", "signbit", "square", "exp2", "expm1", "log2", "log10", "log1p", "reciprocal", "sin",
          "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "relu", "relu6", "selu",
          "silu", "mish", "hardsigmoid", "hardswish", "erfc", "erfinv", "lgamma", "digamma", "floor", "ceil",
          "trunc", "frac", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not"]  # fmt: skip
for _op in _PLAIN:
    _register_ttnn(_op, lambda tt, i, a, n, _name=_op: getattr(tt, _name)(i[0]))
for _op in ("exp", "log", "sqrt", "rsqrt", "tanh", "erf"):
    _register_ttnn(_op, lambda tt, i, a, n, _name=_op: getattr(tt, _name)(i[0], **_approx(n)))
_register_ttnn("logsigmoid", lambda tt, i, a, n: tt.log_sigmoid(i[0]))
_register_ttnn(
    "sigmoid",
    lambda tt, i, a, n: tt.sigmoid(i[0], mode=tt.SigmoidMode.FastApproximate if n.approx else tt.SigmoidMode.Accurate),
)
_register_ttnn(
    "gelu",
    lambda tt, i, a, n: tt.gelu(
        i[0],
        variant=tt.GeluVariant.FastLut
        if n.approx
        else (tt.GeluVariant.Tanh if a["approximate"] == "tanh" else tt.GeluVariant.Accurate),
    ),
)
_register_ttnn("leaky_relu", lambda tt, i, a, n: tt.leaky_relu(i[0], a["negative_slope"]))
_register_ttnn("elu", lambda tt, i, a, n: tt.elu(i[0], alpha=a["alpha"]))
_register_ttnn("celu", lambda tt, i, a, n: tt.celu(i[0], alpha=a["alpha"]))
_register_ttnn("softplus", lambda tt, i, a, n: tt.softplus(i[0], beta=a["beta"], threshold=a["threshold"]))
_register_ttnn("hardtanh", lambda tt, i, a, n: tt.hardtanh(i[0], min_val=a["min_val"], max_val=a["max_val"]))
def _tt_threshold(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics) -> Any:
    x = i[0]
    if _is_float(tt, x):
        return tt.threshold(x, a["threshold"], a["value"])
    # TT-NN's threshold takes no integers; torch casts both numbers to the tensor's integer type (toward zero)
    return tt.where(tt.gt(x, math.trunc(a["threshold"])), x, int(a["value"]))


_register_ttnn("threshold", _tt_threshold)
_register_ttnn("round", lambda tt, i, a, n: tt.round(i[0], decimals=a["decimals"]))
_register_ttnn("clamp", lambda tt, i, a, n: tt.clamp(i[0], min=a["min"], max=a["max"]))


def _is_float(tt: Any, x: Any) -> bool:
    return x.dtype in (tt.bfloat16, tt.float32, tt.bfloat8_b, tt.bfloat4_b)


def _tt_nan_to_num(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics) -> Any:
    x = i[0]
    if not _is_float(tt, x):
        return tt.clone(x)  # integers hold no nan or inf (and TT-NN's isnan takes none)
    big = 3.3895313892515355e38 if x.dtype == tt.bfloat16 else float(np.finfo(np.float32).max)
    y = tt.where(tt.isnan(x), a["nan"], x)
    y = tt.where(tt.isposinf(x), _bound(a["posinf"], big), y)
    return tt.where(tt.isneginf(x), _bound(a["neginf"], -big), y)


_register_ttnn("nan_to_num", _tt_nan_to_num)


# binary ops
def _tt_add_sub(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics, *, sub: bool) -> Any:
    if a["alpha"] != 1:
        return (tt.subalpha if sub else tt.addalpha)(
            _tensor(tt, i[0], _like(i)), _tensor(tt, i[1], _like(i)), a["alpha"]
        )
    fn = tt.subtract if sub else tt.add
    return fn(i[0], i[1], fast_and_approximate_mode=True) if n.approx else fn(i[0], i[1])


def _tt_mul(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics) -> Any:
    # TT-NN's multiply takes no fidelity: below HiFi4 we ask for its FPU path, which runs at HiFi4 (see docs).
    fpu = bool(n.approx) or (n.fidelity is not None and n.fidelity < Fidelity.HiFi4)
    return tt.multiply(i[0], i[1], fast_and_approximate_mode=fpu)


_register_ttnn("add", lambda tt, i, a, n: _tt_add_sub(tt, i, a, n, sub=False))
_register_ttnn("sub", lambda tt, i, a, n: _tt_add_sub(tt, i, a, n, sub=True))
_register_ttnn("mul", _tt_mul)
_register_ttnn(
    "div",
    lambda tt, i, a, n: tt.divide(
        i[0], i[1], rounding_mode=a["rounding_mode"], fast_and_approximate_mode=bool(n.approx)
    ),
)
_register_ttnn("floor_divide", lambda tt, i, a, n: tt.divide(i[0], i[1], rounding_mode="floor"))
for _op, _name in {"remainder": "remainder", "fmod": "fmod", "pow": "pow", "maximum": "maximum",
                   "minimum": "minimum", "logaddexp": "logaddexp", "logaddexp2": "logaddexp2", "xlogy": "xlogy",
                   "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
                   "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift",
                   "logical_and": "logical_and", "logical_or": "logical_or", "logical_xor": "logical_xor",
                   "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}.items():  # fmt: skip
    _register_ttnn(_op, lambda tt, i, a, n, _name=_name: getattr(tt, _name)(i[0], i[1]))
for _op in ("atan2", "hypot"):
    _register_ttnn(
        _op, lambda tt, i, a, n, _name=_op: getattr(tt, _name)(_tensor(tt, i[0], _like(i)), _tensor(tt, i[1], _like(i)))
    )
_register_ttnn(
    "isclose",
    lambda tt, i, a, n: tt.isclose(
        _tensor(tt, i[0], _like(i)),
        _tensor(tt, i[1], _like(i)),
        rtol=a["rtol"],
        atol=a["atol"],
        equal_nan=a["equal_nan"],
    ),
)


def _tt_fmax_fmin(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics, *, fmax: bool) -> Any:
    x, y = _tensor(tt, i[0], _like(i)), _tensor(tt, i[1], _like(i))
    m = (tt.maximum if fmax else tt.minimum)(x, y)
    if not _is_float(tt, x):
        return m  # integers hold no nan (and TT-NN's isnan takes none)
    return tt.where(tt.isnan(x), y, tt.where(tt.isnan(y), x, m))


_register_ttnn("fmax", lambda tt, i, a, n: _tt_fmax_fmin(tt, i, a, n, fmax=True))
_register_ttnn("fmin", lambda tt, i, a, n: _tt_fmax_fmin(tt, i, a, n, fmax=False))
_register_ttnn(
    "copysign",
    lambda tt, i, a, n: tt.where(tt.signbit(_tensor(tt, i[1], _like(i))), tt.neg(tt.abs(i[0])), tt.abs(i[0])),
)
_register_ttnn(
    "heaviside",
    lambda tt, i, a, n: (
        tt.heaviside(i[0], i[1])
        if isinstance(i[1], int | float)
        else tt.where(tt.eq(i[0], 0.0), i[1], tt.where(tt.gt(i[0], 0.0), 1.0, 0.0))
    ),
)

# ternary ops
_register_ttnn("where", lambda tt, i, a, n: tt.where(_tensor(tt, i[0], _like(i)), i[1], i[2]))
_register_ttnn("addcmul", lambda tt, i, a, n: tt.addcmul(*(_tensor(tt, v, _like(i)) for v in i), value=a["value"]))
_register_ttnn("addcdiv", lambda tt, i, a, n: tt.addcdiv(*(_tensor(tt, v, _like(i)) for v in i), value=a["value"]))
_register_ttnn("lerp", lambda tt, i, a, n: tt.lerp(_tensor(tt, i[0], _like(i)), _tensor(tt, i[1], _like(i)), i[2]))
_register_ttnn(
    "clamp_tensor", lambda tt, i, a, n: tt.clamp(i[0], min=_tensor(tt, i[1], i[0]), max=_tensor(tt, i[2], i[0]))
)


# backward helpers: TT-NN's *_bw ops return a list of gradients; sigmoid / tanh take the forward output here.
def _bw(name: str, **kw: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    return lambda tt, i, a, n: getattr(tt, name)(i[0], i[1], **{k: f(a) for k, f in kw.items()})[0]


_register_ttnn(
    "gelu_backward",
    lambda tt, i, a, n: tt.gelu_bw(
        i[0], i[1], variant=(tt.GeluVariant.Tanh if a["approximate"] == "tanh" else tt.GeluVariant.Accurate)
    )[0],
)
_register_ttnn("silu_backward", _bw("silu_bw"))
_register_ttnn("leaky_relu_backward", _bw("leaky_relu_bw", negative_slope=lambda a: a["negative_slope"]))
_register_ttnn("hardtanh_backward", _bw("hardtanh_bw", min=lambda a: a["min_val"], max=lambda a: a["max_val"]))
_register_ttnn("softplus_backward", _bw("softplus_bw", beta=lambda a: a["beta"], threshold=lambda a: a["threshold"]))
_register_ttnn("hardsigmoid_backward", _bw("hardsigmoid_bw"))
_register_ttnn("hardswish_backward", _bw("hardswish_bw"))
_register_ttnn("sigmoid_backward", lambda tt, i, a, n: tt.multiply(i[0], tt.multiply(i[1], tt.rsub(i[1], 1.0))))
_register_ttnn("tanh_backward", lambda tt, i, a, n: tt.multiply(i[0], tt.rsub(tt.square(i[1]), 1.0)))
_register_ttnn("threshold_backward", lambda tt, i, a, n: tt.where(tt.gt(i[1], a["threshold"]), i[0], 0.0))


def _tt_elu_bw(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics) -> Any:
    g, x = i
    if a["scale"] == 1.0 and a["input_scale"] == 1.0 and not a["is_result"]:
        return tt.elu_bw(g, x, alpha=a["alpha"])[0]
    neg_coef, s = a["alpha"] * a["scale"], a["input_scale"]
    neg = (
        tt.multiply(tt.add(x, neg_coef), s) if a["is_result"] else tt.multiply(tt.exp(tt.multiply(x, s)), s * neg_coef)
    )
    return tt.multiply(g, tt.where(tt.le(x, 0.0), neg, a["scale"]))


def _tt_mish_bw(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics) -> Any:
    g, x = i
    t = tt.tanh(tt.softplus(x, beta=1.0, threshold=20.0))
    inner = tt.multiply(tt.multiply(x, tt.sigmoid(x)), tt.rsub(tt.square(t), 1.0))
    return tt.multiply(g, tt.add(t, inner))


_register_ttnn("elu_backward", _tt_elu_bw)
_register_ttnn("mish_backward", _tt_mish_bw)


def _tt_polygamma(tt: Any, i: list[Any], a: dict[str, Any], n: Numerics) -> Any:
    if i[0].dtype == tt.float32:  # TT-NN 0.81.1's polygamma takes bfloat16 only; a float32 result would lose bits
        raise KohakuTTUnsupportedOperator("polygamma: TT-NN's polygamma (digamma's gradient) takes bfloat16 tensors "
                                          "only; cast to bfloat16 or run it on the CPU")  # fmt: skip
    return tt.polygamma(i[0], int(a["n"]))


TTNN_NAMES += ("polygamma",)
_register_ttnn("polygamma", _tt_polygamma)
