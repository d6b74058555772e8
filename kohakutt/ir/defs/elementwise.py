"""IR ops of the element-wise family: unary math and activations, binary arithmetic, comparisons and logic, ternary
selects and blends, and the backward helpers autograd needs where a short composite would round too often.

Dtype rules (the IR's own, frontend-neutral):
- Operands broadcast as in NumPy. A Python number (``ScalarSpec``) is weakly typed: it takes the tensor operands'
  dtype, except that a float number with integer / bool tensors makes the op compute in float32, and an int number
  with bool tensors makes it int32. An int number must fit the integer dtype it meets (else ``IntegerOverflowError``).
- Tensor dtypes promote with :func:`kohakutt.ir.dtypes.promote`; block floats (bfloat8_b, bfloat4_b) compute and
  return bfloat16.
- "same" ops keep the promoted dtype, integers included (int32 arithmetic wraps); bool operands are refused where
  arithmetic on them has no meaning (cast to int32 first). "float" ops return the promoted float dtype, and float32
  for integer / bool operands (``div`` of two int32 tensors is float32, as in TT-NN and PyTorch). Comparisons,
  predicates and logical ops return bool. Bitwise ops and shifts take integers (bitwise ops also bool), never floats.
- The output keeps the layout of the first tensor operand (bool outputs are row-major: the card tiles no bytes).

Numerics (the card's, modelled by the simulator; TT-NN 0.81.1 defaults, read from tt-metal's binary_ng and unary
program factories): element-wise programs run at HiFi4 with ``fp32_dest_acc_en`` on exactly when an operand or the
output is a 32-bit format, and with approximate SFPU modes off. bfloat16 add / sub run on the FPU (exact fp32 sum,
rounded once). bfloat16 mul at HiFi4 (the default) is TT-NN's accurate multiply (the exact product rounded once); a
lower fidelity runs the FPU multiply with that many phases, each accumulated into DST (a bf16 DST rounds after each
phase unless fp32_acc). float32 and int32 operands take TT-NN's SFPU path: IEEE fp32 (or wrapping int32)
arithmetic, fidelity plays no part.
Every other op is an SFPU program: fp32 math on DST values (modelled as the correctly rounded fp32 result), rounded
to the output dtype as stored (bf16: to nearest, ties to even). A Python number operand is first stored in the
compute format (a bf16 op sees ``round_bf16(0.1)``); attributes are fp32. ``numerics(approx=True)`` selects the
SFPU's approximate algorithms where the card has them (exp, reciprocal, sigmoid, gelu) and TT-NN's fast division.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kohakutt.errors import DtypeError, IntegerOverflowError, KohakuTTUnsupportedOperator
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.ops import (
    FPU_MATH,
    SFPU_MATH,
    Infer,
    ScalarSpec,
    ShapeError,
    Spec,
    TensorSpec,
    broadcast_shapes,
    define,
    tensor_dtypes,
)

FAMILY = "elementwise"
SFPU_NOTE = "SFPU: fp32 math on the DST value, rounded to the output dtype as stored."
FPU_NOTE = "bfloat16: FPU, the exact fp32 sum rounded once; 32-bit dtypes: SFPU fp32 / int32 arithmetic."


# ---------------------------------------------------------------------------------------------------- dtype rules
def _is_bool(v: Any) -> bool:
    return isinstance(v, bool | np.bool_)


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not _is_bool(v)


def operand_dtype(inputs: Sequence[Spec], op: str = "op") -> DType:
    """The dtype an element-wise op computes in: the tensors' promoted dtype with Python numbers weakly typed."""
    dts = tensor_dtypes(inputs)
    values = [s.value for s in inputs if isinstance(s, ScalarSpec)]
    if not dts:
        if not values:
            raise ShapeError(f"{op} needs at least one operand")
        dt = (
            DType.BOOL
            if all(map(_is_bool, values))
            else DType.INT32
            if all(_is_int(v) or _is_bool(v) for v in values)
            else DType.FLOAT32
        )
    else:
        dt = promote(*dts)
        if not dt.is_float and any(not (_is_int(v) or _is_bool(v)) for v in values):
            dt = DType.FLOAT32
        elif dt is DType.BOOL and any(map(_is_int, values)):
            dt = DType.INT32
    if not dt.is_float and dt is not DType.BOOL:
        info = np.iinfo(dt.compute)
        for v in values:
            if _is_int(v) and not info.min <= int(v) <= info.max:
                raise IntegerOverflowError(
                    f"{op}: the number {v} does not fit {dt.value} [{info.min}, {info.max}]; "
                    "pass a float or cast the tensor to a wider dtype (int64) first"
                )
    return dt


def float_of(dt: DType) -> DType:
    """The float dtype a float-valued op returns for operands of dtype ``dt``."""
    return promote(dt) if dt.is_float else DType.FLOAT32


def _layout(inputs: Sequence[Spec], dtype: DType) -> Layout:
    first = next((s for s in inputs if isinstance(s, TensorSpec)), None)
    if first is None or dtype in (DType.BOOL, DType.UINT8):
        return Layout.ROW_MAJOR
    return first.layout


def ew(
    kind: str = "same",
    *,
    bools: bool = False,
    ints: bool = True,
    operands: slice = slice(None),
    check: Callable[[dict[str, Any]], None] | None = None,
) -> Infer:
    """Inference for an element-wise op: every operand broadcasts; the dtype follows ``kind``:
    "same" (the computed dtype), "float", "bool" or "int" (integer / bool only). ``operands`` picks the operands whose
    dtypes count (``where`` leaves out its condition); ``bools`` / ``ints`` say whether such operands are taken."""

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        if check is not None:
            check(attrs)
        shape = broadcast_shapes(*(s.shape for s in inputs))
        dt = operand_dtype(list(inputs)[operands])
        if kind == "int":
            if dt.is_float or (dt is DType.BOOL and not bools):
                raise DtypeError(
                    f"this op takes integer{' or bool' if bools else ''} tensors, got {dt.value}; "
                    "cast with typecast first"
                )
            out = dt
        elif dt is DType.BOOL and not bools and kind != "bool":
            raise DtypeError("this op does no arithmetic on bool tensors; cast them to int32 or a float dtype first")
        elif not dt.is_float and not ints and kind != "bool":
            raise DtypeError(f"this op takes float tensors, got {dt.value}; cast with typecast first")
        else:
            out = {"same": dt, "float": float_of(dt), "bool": DType.BOOL}[kind]
        return [TensorSpec(shape, out, _layout(inputs, out))]

    return infer


def _one_of(name: str, allowed: Sequence[Any]) -> Callable[[dict[str, Any]], None]:
    def check(attrs: dict[str, Any]) -> None:
        if attrs[name] not in allowed:
            raise ShapeError(f"{name}={attrs[name]!r} is not one of {list(allowed)}")

    return check


def _clamp_check(attrs: dict[str, Any]) -> None:
    if attrs["min"] is None and attrs["max"] is None:
        raise ShapeError("clamp needs at least one of min / max")


def _polygamma_check(attrs: dict[str, Any]) -> None:
    if not 1 <= attrs["n"] <= 10:  # TT-NN's polygamma takes k = 1..10
        raise KohakuTTUnsupportedOperator(
            f"polygamma: n={attrs['n']} is outside 1..10, the orders the card computes; use digamma for n = 0 and "
            "the CPU for higher orders"
        )


# ---------------------------------------------------------------------------------------------------------- unary
# name: (kind, formula, attrs); kinds as in ``ew``; "float" ops on integer tensors compute and return float32.
UNARY: dict[str, tuple[str, str, dict[str, Any]]] = {
    "abs": ("same", "|x|", {}),
    "neg": ("same", "-x", {}),
    "sign": ("same", "-1, 0 or 1 by the sign of x (0 for +-0, NaN for NaN)", {}),
    "signbit": ("bool", "True where the sign bit of x is set (-0.0 and negative NaN included)", {}),
    "square": ("same", "x * x", {}),
    "exp": ("float", "e^x", {}),
    "exp2": ("float", "2^x", {}),
    "expm1": ("float", "e^x - 1, accurate near 0", {}),
    "log": ("float", "ln x (-inf at 0, NaN below)", {}),
    "log2": ("float", "log2 x", {}),
    "log10": ("float", "log10 x", {}),
    "log1p": ("float", "ln(1 + x), accurate near 0", {}),
    "sqrt": ("float", "sqrt x (NaN below 0)", {}),
    "rsqrt": ("float", "1 / sqrt x (inf at 0)", {}),
    "reciprocal": ("float", "1 / x (+-inf at +-0)", {}),
    "sin": ("float", "sin x", {}),
    "cos": ("float", "cos x", {}),
    "tan": ("float", "tan x", {}),
    "asin": ("float", "arcsin x (NaN outside [-1, 1])", {}),
    "acos": ("float", "arccos x (NaN outside [-1, 1])", {}),
    "atan": ("float", "arctan x", {}),
    "sinh": ("float", "sinh x", {}),
    "cosh": ("float", "cosh x", {}),
    "tanh": ("float", "tanh x", {}),
    "asinh": ("float", "arsinh x", {}),
    "acosh": ("float", "arcosh x (NaN below 1)", {}),
    "atanh": ("float", "artanh x (+-inf at +-1, NaN outside)", {}),
    "sigmoid": ("float", "1 / (1 + e^-x)", {}),
    "logsigmoid": ("float", "ln sigmoid(x) = -softplus(-x), without overflow", {}),
    "relu": ("same", "max(x, 0) (NaN stays NaN)", {}),
    "relu6": ("float", "min(max(x, 0), 6)", {}),
    "leaky_relu": ("float", "x if x >= 0 else negative_slope * x", {"negative_slope": 0.01}),
    "elu": ("float", "x if x > 0 else alpha * (e^x - 1)", {"alpha": 1.0}),
    "selu": (
        "float",
        "scale * (x if x > 0 else alpha * (e^x - 1)) with PyTorch's constants "
        "(scale 1.0507009873554805, alpha 1.6732632423543772)",
        {},
    ),
    "celu": ("float", "max(0, x) + min(0, alpha * (e^(x / alpha) - 1))", {"alpha": 1.0}),
    "gelu": (
        "float",
        "x * Phi(x) (approximate='none', Phi the normal CDF via erf) or "
        "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (approximate='tanh')",
        {"approximate": "none"},
    ),
    "silu": ("float", "x * sigmoid(x)", {}),
    "mish": ("float", "x * tanh(softplus(x))", {}),
    "softplus": (
        "float",
        "ln(1 + e^(beta x)) / beta, and x where beta * x > threshold",
        {"beta": 1.0, "threshold": 20.0},
    ),
    "hardtanh": ("float", "min(max(x, min_val), max_val)", {"min_val": -1.0, "max_val": 1.0}),
    "hardsigmoid": ("float", "min(max(x / 6 + 1/2, 0), 1)", {}),
    "hardswish": ("float", "x * hardsigmoid(x)", {}),
    "threshold": ("same", "x if x > threshold else value", {"threshold": 0.0, "value": 0.0}),
    "erf": ("float", "the error function", {}),
    "erfc": ("float", "1 - erf(x), accurate for large x", {}),
    "erfinv": ("float", "the inverse error function (+-inf at +-1, NaN outside)", {}),
    "lgamma": ("float", "ln |Gamma(x)| (inf at 0 and the negative integers)", {}),
    "digamma": ("float", "d/dx ln Gamma(x) (-inf at 0, NaN at the negative integers)", {}),
    "polygamma": (
        "float",
        "the n-th derivative of digamma, n = 1..10 (trigamma at n = 1: digamma's gradient)",
        {"n": 1},
    ),
    "floor": ("same", "the largest integer <= x (integers unchanged)", {}),
    "ceil": ("same", "the smallest integer >= x (integers unchanged)", {}),
    "round": (
        "same",
        "x rounded to `decimals` decimal places, halves to even (integers unchanged at decimals=0)",
        {"decimals": 0},
    ),
    "trunc": ("same", "x rounded toward zero (integers unchanged)", {}),
    "frac": ("float", "x - trunc(x)", {}),
    "isnan": ("bool", "True where x is NaN", {}),
    "isinf": ("bool", "True where x is +-inf", {}),
    "isfinite": ("bool", "True where x is neither inf nor NaN", {}),
    "logical_not": ("bool", "x == 0", {}),
    "bitwise_not": ("int", "~x (two's complement; logical not for bool)", {}),
    "clamp": ("same", "min(max(x, min), max); a bound of None is left out", {"min": None, "max": None}),
    "nan_to_num": (
        "same",
        "x with NaN -> nan, +inf -> posinf, -inf -> neginf; a None bound is the output "
        "dtype's largest / smallest finite value",
        {"nan": 0.0, "posinf": None, "neginf": None},
    ),
}
APPROX_UNARY = {
    "exp": "approx=True: Schraudolph's exp (an FMA and a shift; <= 3% relative error)",
    "reciprocal": "approx=True: SFPARECIP's 7-bit table (<= 0.55% relative error)",
    "sigmoid": "approx=True: a 6-piece linear LUT (<= 0.018 absolute error)",
    "gelu": "approx=True: 0.5x + a 6-piece linear LUT, both variants (<= 0.024 absolute error)",
}
_CHECKS = {
    "gelu": _one_of("approximate", ("none", "tanh")),
    "clamp": _clamp_check,
    "polygamma": _polygamma_check,
}
_BOOL_OK = {"logical_not", "isnan", "isinf", "isfinite", "signbit", "bitwise_not", "floor", "ceil", "round", "trunc"}

for _name, (_kind, _formula, _attrs) in UNARY.items():
    _numerics = f"{SFPU_NOTE} {APPROX_UNARY[_name]}." if _name in APPROX_UNARY else SFPU_NOTE
    define(
        _name,
        FAMILY,
        ["x"],
        ew(_kind, bools=_name in _BOOL_OK, check=_CHECKS.get(_name)),
        attrs=_attrs,
        numerics=SFPU_MATH,
        doc=f"{_formula}, element-wise. {_numerics}",
    )


# --------------------------------------------------------------------------------------------------------- binary
# name: (kind, formula, attrs, numerics); the operands are (a, b), either may be a Python number.
_DIV_MODES = (None, "trunc", "floor")
BINARY: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "add": ("same", "a + alpha * b", {"alpha": 1}, f"{FPU_NOTE} alpha != 1 scales b in fp32 on the SFPU first."),
    "sub": ("same", "a - alpha * b", {"alpha": 1}, f"{FPU_NOTE} alpha != 1 scales b in fp32 on the SFPU first."),
    "mul": (
        "same",
        "a * b",
        {},
        "bfloat16 at HiFi4 (the default): TT-NN's accurate multiply, the exact product rounded once. Below HiFi4: "
        "the FPU's phases (LoFi multiplies a cut to 5 significant bits, SrcA, by b cut to 7, SrcB), accumulated in "
        "DST (bf16 unless fp32_acc or a 32-bit format). 32-bit dtypes: SFPU fp32 / int32 arithmetic, no fidelity.",
    ),
    "div": (
        "float",
        "a / b (rounding_mode None), trunc(a / b) ('trunc') or floor(a / b) ('floor'); rounded modes "
        "keep integer dtypes (integer division by zero gives 0 here, undefined on the card)",
        {"rounding_mode": None},
        "SFPU fp32 division (TT-NN's accurate mode). approx=True on bfloat16: TT-NN's "
        "fast path, b's approximate reciprocal stored as bf16, then an FPU multiply at the scope's fidelity.",
    ),
    "floor_divide": (
        "same",
        "floor(a / b) with Python's semantics (div with rounding_mode='floor')",
        {},
        "SFPU fp32 / int32.",
    ),
    "remainder": ("same", "a - floor(a / b) * b: the sign of b (Python's %)", {}, "SFPU fp32 / int32."),
    "fmod": ("same", "a - trunc(a / b) * b: the sign of a (C's fmod)", {}, "SFPU fp32 / int32."),
    "pow": (
        "same",
        "a ** b; integer powers stay integer (wrapping; a negative exponent truncates 1 / a^|b| toward "
        "0, with 0 for a base of 0)",
        {},
        "SFPU fp32 power / int32.",
    ),
    "atan2": ("float", "the angle of (b, a) in (-pi, pi]", {}, "SFPU fp32."),
    "maximum": ("same", "the larger of a, b; NaN if either is NaN", {}, "SFPU fp32 / int32 (exact)."),
    "minimum": ("same", "the smaller of a, b; NaN if either is NaN", {}, "SFPU fp32 / int32 (exact)."),
    "fmax": ("same", "the larger of a, b, ignoring a NaN operand", {}, "SFPU fp32 / int32 (exact)."),
    "fmin": ("same", "the smaller of a, b, ignoring a NaN operand", {}, "SFPU fp32 / int32 (exact)."),
    "hypot": ("float", "sqrt(a^2 + b^2) without overflow", {}, "SFPU fp32."),
    "logaddexp": ("float", "ln(e^a + e^b) = max + ln1p(e^-|a-b|)", {}, "SFPU fp32 (TT-NN's stable form)."),
    "logaddexp2": ("float", "log2(2^a + 2^b)", {}, "SFPU fp32 (stable form)."),
    "copysign": ("float", "|a| with the sign of b", {}, "SFPU (exact)."),
    "xlogy": ("float", "a * ln b, 0 where a == 0 (unless b is NaN)", {}, "SFPU fp32."),
    "heaviside": ("same", "0 where a < 0, b where a == 0, 1 where a > 0 (NaN stays NaN)", {}, "SFPU (exact)."),
    "bitwise_and": ("int", "a & b", {}, "SFPU integer ops (exact)."),
    "bitwise_or": ("int", "a | b", {}, "SFPU integer ops (exact)."),
    "bitwise_xor": ("int", "a ^ b", {}, "SFPU integer ops (exact)."),
    "left_shift": ("int", "a << b (0 for b outside [0, 31])", {}, "SFPU integer ops (exact)."),
    "right_shift": ("int", "a >> b, arithmetic (sign-filled beyond 31)", {}, "SFPU integer ops (exact)."),
    "logical_and": ("bool", "a != 0 and b != 0", {}, "SFPU (exact)."),
    "logical_or": ("bool", "a != 0 or b != 0", {}, "SFPU (exact)."),
    "logical_xor": ("bool", "(a != 0) != (b != 0)", {}, "SFPU (exact)."),
    "eq": ("bool", "a == b (NaN is unequal to everything)", {}, "SFPU comparison of the stored values (exact)."),
    "ne": ("bool", "a != b", {}, "SFPU comparison of the stored values (exact)."),
    "lt": ("bool", "a < b", {}, "SFPU comparison of the stored values (exact)."),
    "le": ("bool", "a <= b", {}, "SFPU comparison of the stored values (exact)."),
    "gt": ("bool", "a > b", {}, "SFPU comparison of the stored values (exact)."),
    "ge": ("bool", "a >= b", {}, "SFPU comparison of the stored values (exact)."),
    "isclose": (
        "bool",
        "|a - b| <= atol + rtol * |b| (inf equal to itself; NaN equal to NaN if equal_nan)",
        {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False},
        "SFPU fp32.",
    ),
}
_INT_ONLY_BOOL = {"bitwise_and", "bitwise_or", "bitwise_xor"}
_BINARY_FLOAT_ONLY = {"atan2", "hypot", "logaddexp", "logaddexp2", "copysign", "xlogy"}
_BINARY_BOOL_OK = _INT_ONLY_BOOL | {
    "logical_and",
    "logical_or",
    "logical_xor",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
}


def integral_attr(infer: Infer, name: str) -> Infer:
    """``infer``, refusing a non-integral attribute ``name`` when the op computes in an integer dtype."""

    def checked(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        out = infer(inputs, attrs)
        v = attrs[name]
        if not out[0].dtype.is_float and float(v) != int(v):
            raise DtypeError(f"{name}={v} on {out[0].dtype.value} tensors: an integer op needs an integral {name}")
        return out

    return checked


def _div_infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    _one_of("rounding_mode", _DIV_MODES)(attrs)
    return ew("float" if attrs["rounding_mode"] is None else "same")(inputs, attrs)


for _name, (_kind, _formula, _attrs, _num) in BINARY.items():
    _infer = _div_infer if _name == "div" else ew(_kind, bools=_name in _BINARY_BOOL_OK)
    if _name in ("add", "sub"):
        _infer = integral_attr(_infer, "alpha")
    define(
        _name,
        FAMILY,
        ["a", "b"],
        _infer,
        attrs=_attrs,
        numerics=FPU_MATH if _name in ("add", "sub", "mul") else SFPU_MATH,
        doc=f"{_formula}, element-wise with broadcasting. {_num} Rounded to the output dtype.",
    )


# -------------------------------------------------------------------------------------------------------- ternary
define(
    "where",
    FAMILY,
    ["cond", "a", "b"],
    ew("same", bools=True, operands=slice(1, None)),
    numerics=SFPU_MATH,
    doc="a where cond is nonzero, else b; the dtype is a's and b's promoted one (cond may be any dtype). "
    "SFPU select: exact (a Python-number branch is first stored in the output format).",
)
define(
    "addcmul",
    FAMILY,
    ["x", "t1", "t2"],
    integral_attr(ew("same"), "value"),
    attrs={"value": 1.0},
    numerics=SFPU_MATH,
    doc="x + value * t1 * t2. SFPU fp32 (int32 wrapping for integers), rounded once to the output dtype.",
)
define(
    "addcdiv",
    FAMILY,
    ["x", "t1", "t2"],
    ew("float"),
    attrs={"value": 1.0},
    numerics=SFPU_MATH,
    doc="x + value * t1 / t2 (float only). SFPU fp32, rounded once to the output dtype.",
)
define(
    "lerp",
    FAMILY,
    ["start", "end", "weight"],
    ew("float", ints=False),
    numerics=SFPU_MATH,
    doc="start + weight * (end - start), weight a tensor or a number (float only). SFPU fp32, rounded once.",
)
define(
    "clamp_tensor",
    FAMILY,
    ["x", "min", "max"],
    ew("same"),
    numerics=SFPU_MATH,
    doc="min(max(x, min), max) with tensor (or number) bounds; NaN in x stays NaN. For one bound use maximum / "
    "minimum. SFPU (exact).",
)


# ------------------------------------------------------------------------------------------------------- backward
# name: (operands, formula, attrs); the gradient has grad's and x's promoted float dtype.
BACKWARD: dict[str, tuple[tuple[str, str], str, dict[str, Any]]] = {
    "gelu_backward": (("grad", "x"), "grad * d/dx gelu(x) for the `approximate` variant", {"approximate": "none"}),
    "silu_backward": (("grad", "x"), "grad * s * (1 + x (1 - s)), s = sigmoid(x)", {}),
    "sigmoid_backward": (("grad", "y"), "grad * y * (1 - y), y = sigmoid(x) the forward output", {}),
    "tanh_backward": (("grad", "y"), "grad * (1 - y^2), y = tanh(x) the forward output", {}),
    "threshold_backward": (
        ("grad", "x"),
        "grad where x > threshold else 0 (relu's backward at threshold 0)",
        {"threshold": 0.0},
    ),
    "elu_backward": (
        ("grad", "x"),
        "grad * (scale if v > 0 else ...) as PyTorch's elu_backward: with is_result, x "
        "is the forward output and the negative side is input_scale * (x + alpha * scale); else it is "
        "input_scale * alpha * scale * e^(x * input_scale)",
        {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0, "is_result": False},
    ),
    "leaky_relu_backward": (("grad", "x"), "grad where x > 0 else negative_slope * grad", {"negative_slope": 0.01}),
    "hardtanh_backward": (("grad", "x"), "grad where min_val < x < max_val else 0", {"min_val": -1.0, "max_val": 1.0}),
    "softplus_backward": (
        ("grad", "x"),
        "grad * sigmoid(beta x), and grad where beta * x > threshold",
        {"beta": 1.0, "threshold": 20.0},
    ),
    "mish_backward": (("grad", "x"), "grad * (tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2)), sp = softplus(x)", {}),
    "hardsigmoid_backward": (("grad", "x"), "grad / 6 where -3 < x < 3 else 0", {}),
    "hardswish_backward": (("grad", "x"), "grad * (0 if x <= -3, 1 if x >= 3, else x / 3 + 1/2)", {}),
}
_BW_NOTE = (
    "Modelled as one fused SFPU program: fp32 math, one rounding to the output dtype (TT-NN's *_bw "
    "composites store bf16 intermediates between their ops, so a card run through TT-NN may differ by a few "
    "bf16 ulps)."
)
for _name, (_ins, _formula, _attrs) in BACKWARD.items():
    define(
        _name,
        FAMILY,
        list(_ins),
        ew("float", check=_CHECKS["gelu"] if _name == "gelu_backward" else None),
        attrs=_attrs,
        numerics=SFPU_MATH,
        doc=f"{_formula}, element-wise. {_BW_NOTE}",
    )
