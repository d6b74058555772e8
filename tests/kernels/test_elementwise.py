"""The element-wise family on the simulator, against float64 references (torch / NumPy) computed from the stored inputs.

Tolerances come from the formats: the simulator's result is the fp32 value of the op (correctly rounded) stored in
the output dtype, so against the float64 reference a float32 output is off by at most one fp32 rounding (relative
2^-24, checked at 2^-23), a bfloat16 output by one bf16 rounding of that (unit roundoff of an 8-bit significand:
relative 2^-8, plus the fp32 step). Ops whose model is exact (comparisons, integer ops, selects) are checked equal.
"""

from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import DtypeError, IntegerOverflowError
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics, numerics
from kohakutt.ir.ops import ShapeError, TensorSpec
from kohakutt.kernels import elementwise as ew_kernels

F32_RTOL = 2.0**-23
BF16_RTOL = 2.0**-8 + 2.0**-22
RTOL = {"float32": F32_RTOL, "bfloat16": BF16_RTOL}
SHAPE = (3, 37)  # not a multiple of 32: padding must not matter
aten = torch.ops.aten


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def put(dev, values, dtype, layout="row_major"):
    """A device tensor of ``values`` and the values it holds (float64, as stored)."""
    t = kk.from_numpy(dev, np.asarray(values, dtype=np.float32 if dtype not in ("int32", "bool") else None), dtype,
                      layout)  # fmt: skip
    return t, kk.to_numpy(t).astype(np.float64)


def run(op, inputs, attrs=None):
    outs = kk.run(op, inputs, attrs)
    return [kk.to_numpy(o) for o in outs] if len(outs) > 1 else kk.to_numpy(outs[0])


def assert_close(y, ref, rtol, atol=0.0):
    """|y - ref| <= atol + rtol |ref| elementwise; NaN where ref is NaN, equal infinities."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    assert y.shape == ref.shape, f"shape {y.shape}, expected {ref.shape}"
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(y), nan), f"NaN at {np.argwhere(np.isnan(y) != nan)[:5].tolist()}"
    inf = np.isinf(ref)
    assert np.array_equal(y[inf], ref[inf]), f"infinities differ: {y[inf][:5]} vs {ref[inf][:5]}"
    fin = ~nan & ~inf
    err = np.abs(y[fin] - ref[fin])
    bound = atol + rtol * np.abs(ref[fin])
    if err.size and not np.all(err <= bound):
        i = int(np.argmax(err - bound))
        raise AssertionError(f"max excess at element {i}: got {y[fin][i]!r}, expected {ref[fin][i]!r} "
                             f"(|err| {err[i]:.3g} > {bound[i]:.3g}, rtol {rtol:.3g})")  # fmt: skip


def t64(fn):
    """A reference on float64 NumPy arrays from a torch function."""
    return lambda *xs: fn(*(torch.from_numpy(np.asarray(x, np.float64)) for x in xs)).numpy()


# ------------------------------------------------------------------------------------------------------ unary
# id: (op, attrs, reference, low, high)
UNARY_CASES = {
    "abs": ("abs", {}, t64(torch.abs), -10, 10),
    "neg": ("neg", {}, t64(torch.neg), -10, 10),
    "sign": ("sign", {}, t64(torch.sign), -2, 2),
    "square": ("square", {}, t64(torch.square), -20, 20),
    "exp": ("exp", {}, t64(torch.exp), -10, 10),
    "exp2": ("exp2", {}, t64(torch.exp2), -10, 10),
    "expm1": ("expm1", {}, t64(torch.expm1), -3, 3),
    "log": ("log", {}, t64(torch.log), 0.01, 100),
    "log2": ("log2", {}, t64(torch.log2), 0.01, 100),
    "log10": ("log10", {}, t64(torch.log10), 0.01, 100),
    "log1p": ("log1p", {}, t64(torch.log1p), -0.9, 10),
    "sqrt": ("sqrt", {}, t64(torch.sqrt), 0, 100),
    "rsqrt": ("rsqrt", {}, t64(torch.rsqrt), 0.01, 100),
    "reciprocal": ("reciprocal", {}, t64(torch.reciprocal), -10, 10),
    "sin": ("sin", {}, t64(torch.sin), -10, 10),
    "cos": ("cos", {}, t64(torch.cos), -10, 10),
    "tan": ("tan", {}, t64(torch.tan), -1.4, 1.4),
    "asin": ("asin", {}, t64(torch.asin), -0.999, 0.999),
    "acos": ("acos", {}, t64(torch.acos), -0.999, 0.999),
    "atan": ("atan", {}, t64(torch.atan), -10, 10),
    "sinh": ("sinh", {}, t64(torch.sinh), -5, 5),
    "cosh": ("cosh", {}, t64(torch.cosh), -5, 5),
    "tanh": ("tanh", {}, t64(torch.tanh), -5, 5),
    "asinh": ("asinh", {}, t64(torch.asinh), -10, 10),
    "acosh": ("acosh", {}, t64(torch.acosh), 1, 10),
    "atanh": ("atanh", {}, t64(torch.atanh), -0.99, 0.99),
    "sigmoid": ("sigmoid", {}, t64(torch.sigmoid), -10, 10),
    "logsigmoid": ("logsigmoid", {}, t64(F.logsigmoid), -30, 30),
    "relu": ("relu", {}, t64(F.relu), -5, 5),
    "relu6": ("relu6", {}, t64(F.relu6), -3, 9),
    "leaky_relu": ("leaky_relu", {"negative_slope": 0.2}, t64(lambda x: F.leaky_relu(x, 0.2)), -5, 5),
    "elu": ("elu", {"alpha": 0.7}, t64(lambda x: F.elu(x, 0.7)), -5, 5),
    "selu": ("selu", {}, t64(F.selu), -5, 5),
    "celu": ("celu", {"alpha": 1.3}, t64(lambda x: F.celu(x, 1.3)), -5, 5),
    "gelu": ("gelu", {}, t64(F.gelu), -6, 6),
    "gelu_tanh": ("gelu", {"approximate": "tanh"}, t64(lambda x: F.gelu(x, approximate="tanh")), -6, 6),
    "silu": ("silu", {}, t64(F.silu), -10, 10),
    "mish": ("mish", {}, t64(F.mish), -10, 10),
    "softplus": ("softplus", {"beta": 2.0, "threshold": 5.0}, t64(lambda x: F.softplus(x, 2.0, 5.0)), -6, 6),
    "hardtanh": ("hardtanh", {"min_val": -0.5, "max_val": 2.0}, t64(lambda x: F.hardtanh(x, -0.5, 2.0)), -4, 4),
    "hardsigmoid": ("hardsigmoid", {}, t64(F.hardsigmoid), -5, 5),
    "hardswish": ("hardswish", {}, t64(F.hardswish), -5, 5),
    "threshold": ("threshold", {"threshold": 0.5, "value": -2.0}, t64(lambda x: F.threshold(x, 0.5, -2.0)), -2, 2),
    "erf": ("erf", {}, t64(torch.erf), -3, 3),
    "erfc": ("erfc", {}, t64(torch.erfc), -3, 8),
    "erfinv": ("erfinv", {}, t64(torch.erfinv), -0.99, 0.99),
    "lgamma": ("lgamma", {}, t64(torch.lgamma), 0.1, 10),
    "digamma": ("digamma", {}, t64(torch.digamma), 0.1, 10),
    "trigamma": ("polygamma", {"n": 1}, t64(lambda x: torch.polygamma(1, x)), 0.1, 10),
    "polygamma_3": ("polygamma", {"n": 3}, t64(lambda x: torch.polygamma(3, x)), 0.5, 10),
    "floor": ("floor", {}, t64(torch.floor), -5, 5),
    "ceil": ("ceil", {}, t64(torch.ceil), -5, 5),
    "round": ("round", {}, t64(torch.round), -5, 5),
    "round_decimals": ("round", {"decimals": 1}, t64(lambda x: torch.round(x, decimals=1)), -5, 5),
    "trunc": ("trunc", {}, t64(torch.trunc), -5, 5),
    "frac": ("frac", {}, t64(torch.frac), -5, 5),
    "clamp": ("clamp", {"min": -0.5, "max": 1.5}, t64(lambda x: torch.clamp(x, -0.5, 1.5)), -3, 3),
    "clamp_min": ("clamp", {"min": 0.25}, t64(lambda x: torch.clamp(x, min=0.25)), -3, 3),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(UNARY_CASES))
def test_unary_against_float64(dev, case, dtype):
    op, attrs, ref, lo, hi = UNARY_CASES[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    x, xv = put(dev, rng.uniform(lo, hi, SHAPE), dtype)
    (y,) = kk.run(op, [x], attrs)
    assert y.dtype.value == dtype and y.shape == SHAPE
    assert_close(kk.to_numpy(y), ref(xv), RTOL[dtype])


def test_every_unary_op_is_checked_against_a_reference():
    checked = {c[0] for c in UNARY_CASES.values()}
    special = {"signbit", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not", "nan_to_num"}  # tests below
    assert set(ew_kernels.UNARY) - checked - special == set()


def test_round_is_half_to_even(dev):
    x, _ = put(dev, np.arange(-4, 4.5, 0.5), "bfloat16")
    assert np.array_equal(run("round", [x]), np.array([-4, -4, -3, -2, -2, -2, -1, 0, 0, 0, 1, 2, 2, 2, 3, 4, 4.0]))


def test_bfloat16_outputs_are_stored_bfloat16_values(dev):
    x, _ = put(dev, np.linspace(-3, 3, 101), "bfloat16")
    y = run("exp", [x])
    assert np.array_equal(y, round_bfloat16(y))
    x32, _ = put(dev, np.linspace(-3, 3, 101), "float32")
    assert not np.array_equal(run("exp", [x32]), round_bfloat16(run("exp", [x32])))


# ---------------------------------------------------------------------------------------------------- binary
def _pos(lo, hi):
    return ("pos", lo, hi)


# id: (op, attrs, reference, (a low, a high), (b low, b high)); a "nz" domain keeps b away from 0 with both signs.
BINARY_CASES = {
    "add": ("add", {}, np.add, (-10, 10), (-10, 10)),
    "add_alpha": ("add", {"alpha": 2.5}, lambda a, b: a + 2.5 * b, (-10, 10), (-10, 10)),
    "sub": ("sub", {}, np.subtract, (-10, 10), (-10, 10)),
    "sub_alpha": ("sub", {"alpha": -0.75}, lambda a, b: a + 0.75 * b, (-10, 10), (-10, 10)),
    "mul": ("mul", {}, np.multiply, (-10, 10), (-10, 10)),
    "div": ("div", {}, t64(torch.div), (-10, 10), "nz"),
    "div_trunc": (
        "div",
        {"rounding_mode": "trunc"},
        t64(lambda a, b: torch.div(a, b, rounding_mode="trunc")),
        (-10, 10),
        "nz",
    ),
    "div_floor": (
        "div",
        {"rounding_mode": "floor"},
        t64(lambda a, b: torch.div(a, b, rounding_mode="floor")),
        (-10, 10),
        "nz",
    ),
    "floor_divide": ("floor_divide", {}, t64(torch.floor_divide), (-10, 10), "nz"),
    "remainder": ("remainder", {}, t64(torch.remainder), (-10, 10), "nz"),
    "fmod": ("fmod", {}, t64(torch.fmod), (-10, 10), "nz"),
    "pow": ("pow", {}, t64(torch.pow), (0.1, 5), (-3, 3)),
    "atan2": ("atan2", {}, t64(torch.atan2), (-5, 5), (-5, 5)),
    "maximum": ("maximum", {}, t64(torch.maximum), (-5, 5), (-5, 5)),
    "minimum": ("minimum", {}, t64(torch.minimum), (-5, 5), (-5, 5)),
    "fmax": ("fmax", {}, t64(torch.fmax), (-5, 5), (-5, 5)),
    "fmin": ("fmin", {}, t64(torch.fmin), (-5, 5), (-5, 5)),
    "hypot": ("hypot", {}, t64(torch.hypot), (-100, 100), (-100, 100)),
    "logaddexp": ("logaddexp", {}, t64(torch.logaddexp), (-50, 50), (-50, 50)),
    "logaddexp2": ("logaddexp2", {}, t64(torch.logaddexp2), (-50, 50), (-50, 50)),
    "copysign": ("copysign", {}, t64(torch.copysign), (-5, 5), (-5, 5)),
    "xlogy": ("xlogy", {}, t64(torch.xlogy), (-5, 5), (0.01, 10)),
    "heaviside": ("heaviside", {}, t64(torch.heaviside), (-2, 2), (-1, 1)),
}


def _operand(rng, dom, shape):
    if dom == "nz":
        return rng.uniform(0.25, 4.0, shape) * rng.choice([-1.0, 1.0], shape)
    return rng.uniform(*dom, shape)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(BINARY_CASES))
def test_binary_against_float64(dev, case, dtype):
    op, attrs, ref, da, db = BINARY_CASES[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    a_np = _operand(rng, da, SHAPE)
    if case in ("heaviside",):
        a_np[0, :10] = 0.0  # the tie branch
    a, av = put(dev, a_np, dtype)
    b, bv = put(dev, _operand(rng, db, SHAPE), dtype)
    (y,) = kk.run(op, [a, b], attrs)
    assert y.dtype.value == dtype
    assert_close(kk.to_numpy(y), ref(av, bv), RTOL[dtype])


COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
           "logical_xor": np.logical_xor}  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "bool"])
@pytest.mark.parametrize("op", list(COMPARE))
def test_comparisons_and_logic_are_exact_and_bool(dev, op, dtype):
    rng = np.random.default_rng(7)
    a_np = rng.integers(-3, 4, SHAPE).astype(np.float64) / 2.0
    b_np = np.where(rng.random(SHAPE) < 0.3, a_np, rng.integers(-3, 4, SHAPE) / 2.0)
    if dtype in ("int32", "bool"):
        a_np, b_np = (np.round(a_np).astype(np.int32), np.round(b_np).astype(np.int32))
        if dtype == "bool":
            a_np, b_np = a_np != 0, b_np != 0
    a, av = put(dev, a_np, dtype)
    b, bv = put(dev, b_np, dtype)
    (y,) = kk.run(op, [a, b])
    assert y.dtype.value == "bool"
    assert np.array_equal(kk.to_numpy(y), COMPARE[op](av, bv))


def test_isclose_matches_torch(dev):
    a, av = put(dev, [1.0, 1.0, np.nan, np.nan, np.inf, np.inf, 1e-9, 100.0], "float32")
    b, bv = put(dev, [1.0 + 1e-6, 1.001, np.nan, 1.0, np.inf, -np.inf, 0.0, 100.0009], "float32")
    for equal_nan in (False, True):
        ref = torch.isclose(torch.from_numpy(av), torch.from_numpy(bv), rtol=1e-5, atol=1e-8, equal_nan=equal_nan)
        assert np.array_equal(run("isclose", [a, b], {"equal_nan": equal_nan}), ref.numpy())


# ------------------------------------------------------------------------------------------------- integers
INT_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floor_divide": lambda a, b: a // b, "remainder": lambda a, b: a % b,
    "fmod": lambda a, b: np.fmod(a, b), "maximum": np.maximum, "minimum": np.minimum,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
}  # fmt: skip


@pytest.mark.parametrize("op", list(INT_BINARY))
def test_int32_binary_is_exact_and_wraps(dev, op):
    rng = np.random.default_rng(3)
    a_np = rng.integers(-(2**31), 2**31 - 1, SHAPE, dtype=np.int64)
    b_np = rng.integers(-50, 50, SHAPE, dtype=np.int64)
    b_np[b_np == 0] = 7
    a, _ = put(dev, a_np.astype(np.int32), "int32")
    b, _ = put(dev, b_np.astype(np.int32), "int32")
    (y,) = kk.run(op, [a, b])
    assert y.dtype.value == "int32"
    ref = INT_BINARY[op](a_np, b_np)  # Python semantics in int64, then wrapped to 32 bits
    assert np.array_equal(kk.to_numpy(y), ref.astype(np.int32))


def test_int32_division_rounding_modes_and_promotion(dev):
    a, _ = put(dev, np.array([7, -7, 7, -7, 6, 0, 5], np.int32), "int32")
    b, _ = put(dev, np.array([2, 2, -2, -2, 3, 5, 0], np.int32), "int32")
    (q,) = kk.run("div", [a, b])
    assert q.dtype.value == "float32"
    with np.errstate(divide="ignore"):
        assert np.array_equal(kk.to_numpy(q), np.array([3.5, -3.5, -3.5, 3.5, 2, 0, np.inf], np.float32))
    assert np.array_equal(run("div", [a, b], {"rounding_mode": "trunc"}), [3, -3, -3, 3, 2, 0, 0])
    assert np.array_equal(run("div", [a, b], {"rounding_mode": "floor"}), [3, -4, -4, 3, 2, 0, 0])
    assert np.array_equal(run("remainder", [a, b]), [1, 1, -1, -1, 0, 0, 0])
    assert np.array_equal(run("fmod", [a, b]), [1, -1, 1, -1, 0, 0, 0])


def test_int32_pow_shifts_and_unary(dev):
    a, _ = put(dev, np.array([2, -3, 1, -1, 0, 5, -(2**31)], np.int32), "int32")
    e, _ = put(dev, np.array([10, 3, -2, -3, 0, -1, 1], np.int32), "int32")
    assert np.array_equal(run("pow", [a, e]), [1024, -27, 1, -1, 1, 0, -(2**31)])
    s, _ = put(dev, np.array([1, 2, 31, 32, -1, 0, 4], np.int32), "int32")
    with np.errstate(over="ignore"):
        assert np.array_equal(run("left_shift", [a, s]), [4, -12, -(2**31), 0, 0, 5, 0])
    assert np.array_equal(run("right_shift", [a, s]), [1, -1, 0, -1, 0, 5, -(2**27)])
    x, _ = put(dev, np.array([-7, 0, 5, 46341, -(2**31)], np.int32), "int32")
    assert np.array_equal(run("abs", [x]), [7, 0, 5, 46341, -(2**31)])  # |INT_MIN| wraps, as in two's complement
    assert np.array_equal(run("neg", [x]), [7, 0, -5, -46341, -(2**31)])
    assert np.array_equal(run("sign", [x]), [-1, 0, 1, 1, -1])
    assert np.array_equal(run("square", [x]), (np.array([-7, 0, 5, 46341, -(2**31)], np.int64) ** 2).astype(np.int32))
    assert np.array_equal(run("relu", [x]), [0, 0, 5, 46341, 0])
    assert np.array_equal(run("clamp", [x], {"min": -2.5, "max": 4.5}), [-2, 0, 4, 4, -2])
    assert np.array_equal(run("bitwise_not", [x]), ~np.array([-7, 0, 5, 46341, -(2**31)], np.int32))
    r, _ = put(dev, np.array([-15, 0, 4, 46345, 25, -(2**31)], np.int32), "int32")
    assert np.array_equal(run("round", [r], {"decimals": -1}), [-20, 0, 0, 46340, 20, -(2**31)])  # halves to even
    assert np.array_equal(run("floor", [x]), [-7, 0, 5, 46341, -(2**31)])
    assert run("exp", [x]).dtype == np.float32


# ------------------------------------------------------------------------------------- scalars and promotion
def test_a_number_operand_is_stored_in_the_compute_format(dev):
    x, xv = put(dev, np.linspace(1, 9, 257), "bfloat16")
    y = run("mul", [x, 0.1])
    tenth = float(round_bfloat16(np.float32(0.1)))
    assert np.array_equal(y, round_bfloat16((xv * tenth).astype(np.float32)))  # exact product, one rounding
    assert not np.array_equal(y, round_bfloat16((xv * 0.1).astype(np.float32)))  # not the unrounded 0.1
    x32, xv32 = put(dev, np.linspace(1, 9, 257), "float32")
    assert np.array_equal(run("mul", [x32, 0.1]), (xv32.astype(np.float32) * np.float32(0.1)))


def test_numbers_on_either_side_and_their_dtypes(dev):
    x, xv = put(dev, np.linspace(-2, 2, 9), "float32")
    assert_close(run("sub", [1.0, x]), 1.0 - xv, F32_RTOL)
    assert_close(run("pow", [2.0, x]), 2.0**xv, F32_RTOL)
    with np.errstate(divide="ignore"):
        assert_close(run("div", [3.0, x]), 3.0 / xv, F32_RTOL)
    i, iv = put(dev, np.arange(-4, 5, dtype=np.int32), "int32")
    (y,) = kk.run("add", [i, 3])
    assert y.dtype.value == "int32" and np.array_equal(kk.to_numpy(y), iv + 3)
    (y,) = kk.run("add", [i, 2.5])
    assert y.dtype.value == "float32" and np.array_equal(kk.to_numpy(y), iv + 2.5)
    (y,) = kk.run("mul", [2, 0.5], device=dev)
    assert y.dtype.value == "float32" and y.shape == () and kk.to_numpy(y) == 1.0
    with pytest.raises(IntegerOverflowError, match="does not fit int32"):
        kk.run("add", [i, 2**40])


@pytest.mark.parametrize(("a", "b", "op", "want"), [
    ("bfloat16", "float32", "mul", "float32"), ("int32", "bfloat16", "add", "bfloat16"),
    ("int32", "int32", "div", "float32"), ("bool", "bool", "maximum", "bool"), ("int32", "float32", "atan2", "float32"),
    ("bfloat8_b", "bfloat16", "add", "bfloat16"), ("bool", "int32", "add", "int32"),
])  # fmt: skip
def test_dtype_promotion(dev, a, b, op, want):
    layout = "tile" if "_b" in a else "row_major"
    x, _ = put(dev, np.ones(5), a, layout)
    y, _ = put(dev, np.ones(5), b)
    assert kk.run(op, [x, y])[0].dtype.value == want


def test_broadcasting_and_layout(dev):
    rng = np.random.default_rng(1)
    a, av = put(dev, rng.normal(size=(4, 1, 5)), "bfloat16", "tile")
    b, bv = put(dev, rng.normal(size=(3, 1)), "bfloat16")
    (y,) = kk.run("add", [a, b])
    assert y.shape == (4, 3, 5) and y.spec.layout.value == "tile"
    assert_close(kk.to_numpy(y), av + bv, BF16_RTOL)
    (m,) = kk.run("lt", [a, b])
    assert m.spec.layout.value == "row_major" and np.array_equal(kk.to_numpy(m), av < bv)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        kk.run("add", [a, put(dev, np.ones((3, 4)), "bfloat16")[0]])


def test_zero_d_empty_and_block_float_inputs(dev):
    s, _ = put(dev, np.float32(0.5), "float32")
    (y,) = kk.run("exp", [s])
    assert y.shape == () and kk.to_numpy(y) == np.float32(math.exp(0.5))
    e, _ = put(dev, np.zeros((0, 3)), "bfloat16")
    assert run("add", [e, 1.0]).shape == (0, 3) and run("sin", [e]).shape == (0, 3)
    q, qv = put(dev, np.linspace(-2, 2, 70).reshape(2, 35), "bfloat8_b", "tile")
    (y,) = kk.run("tanh", [q])
    assert y.dtype.value == "bfloat16"
    assert_close(kk.to_numpy(y), np.tanh(qv), BF16_RTOL)


# ---------------------------------------------------------------------------------------------- NaN and Inf
def test_special_values(dev):
    vals = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0])
    for dtype in ("float32", "bfloat16"):
        x, xv = put(dev, vals, dtype)
        assert np.array_equal(run("isnan", [x]), np.isnan(xv))
        assert np.array_equal(run("isinf", [x]), np.isinf(xv))
        assert np.array_equal(run("isfinite", [x]), np.isfinite(xv))
        assert np.array_equal(run("signbit", [x]), np.signbit(xv))
        assert np.array_equal(run("logical_not", [x]), xv == 0)
        with np.errstate(all="ignore"):
            assert_close(run("exp", [x]), np.exp(xv), RTOL[dtype])
            assert_close(run("log", [x]), np.log(xv), RTOL[dtype])
            assert_close(run("sqrt", [x]), np.sqrt(xv), RTOL[dtype])
            assert_close(run("reciprocal", [x]), 1.0 / xv, RTOL[dtype])
            assert_close(run("div", [x, 0.0]), xv / 0.0, 0)
        assert_close(run("relu", [x]), F.relu(torch.from_numpy(xv)).numpy(), 0)
        assert_close(run("maximum", [x, 0.5]), np.maximum(xv, 0.5), 0)
        assert_close(run("fmax", [x, 0.5]), np.fmax(xv, 0.5), 0)
        assert_close(run("fmin", [x, 0.5]), np.fmin(xv, 0.5), 0)
        assert np.array_equal(run("eq", [x, x]), xv == xv)
        big = 3.3895313892515355e38 if dtype == "bfloat16" else float(np.finfo(np.float32).max)
        assert np.array_equal(run("nan_to_num", [x]), [0, big, -big, 0, 0, 1, -1])
        assert np.array_equal(run("nan_to_num", [x], {"nan": 2.0, "posinf": 9.0, "neginf": -9.0}),
                              [2, 9, -9, 0, 0, 1, -1])  # fmt: skip


def test_predicates_on_integers(dev):
    x, _ = put(dev, np.array([0, -3, 7], np.int32), "int32")
    assert np.array_equal(run("isnan", [x]), [False] * 3)
    assert np.array_equal(run("isfinite", [x]), [True] * 3)
    assert np.array_equal(run("signbit", [x]), [False, True, False])
    b, _ = put(dev, np.array([True, False]), "bool")
    assert np.array_equal(run("bitwise_not", [b]), [False, True])
    assert np.array_equal(run("logical_not", [b]), [False, True])


# ------------------------------------------------------------------------------------------ ternary ops
def test_where_and_blends(dev):
    rng = np.random.default_rng(5)
    c, cv = put(dev, rng.random(SHAPE) < 0.5, "bool")
    a, av = put(dev, rng.normal(size=SHAPE), "bfloat16")
    b, bv = put(dev, rng.normal(size=(1, 37)), "float32")
    (y,) = kk.run("where", [c, a, b])
    assert y.dtype.value == "float32" and np.array_equal(kk.to_numpy(y), np.where(cv != 0, av, bv))
    fc, _ = put(dev, cv * 2.5, "bfloat16")
    assert np.array_equal(run("where", [fc, a, -1.0]), np.where(cv != 0, av, -1.0))
    t1, t1v = put(dev, rng.normal(size=SHAPE), "bfloat16")
    t2, t2v = put(dev, rng.uniform(0.5, 2, SHAPE), "bfloat16")
    ref = aten.addcmul(*(torch.from_numpy(v) for v in (av, t1v, t2v)), value=0.3).numpy()
    assert_close(run("addcmul", [a, t1, t2], {"value": 0.3}), ref, BF16_RTOL)
    ref = aten.addcdiv(*(torch.from_numpy(v) for v in (av, t1v, t2v)), value=-2.0).numpy()
    assert_close(run("addcdiv", [a, t1, t2], {"value": -2.0}), ref, BF16_RTOL)
    w, wv = put(dev, rng.random(SHAPE), "bfloat16")
    assert_close(run("lerp", [a, t1, w]), torch.lerp(*(torch.from_numpy(v) for v in (av, t1v, wv))).numpy(),
                 BF16_RTOL)  # fmt: skip
    assert_close(run("lerp", [a, t1, 0.75]), torch.lerp(torch.from_numpy(av), torch.from_numpy(t1v), 0.75).numpy(),
                 BF16_RTOL)  # fmt: skip
    lo, lov = put(dev, rng.normal(size=SHAPE) - 0.5, "bfloat16")
    hi, hiv = put(dev, lov + 1.0, "bfloat16")
    ref = torch.clamp(torch.from_numpy(av), torch.from_numpy(lov), torch.from_numpy(hiv)).numpy()
    assert np.array_equal(run("clamp_tensor", [a, lo, hi]), ref)
    i, iv = put(dev, np.arange(6, dtype=np.int32), "int32")
    assert np.array_equal(run("addcmul", [i, i, i], {"value": 2}), iv + 2 * iv * iv)


# ----------------------------------------------------------------------------------------------- backward
# id: (op, attrs, torch reference on (grad, x), x low, x high); sigmoid / tanh take the forward output.
BACKWARD_CASES = {
    "gelu": ("gelu_backward", {}, lambda g, x: aten.gelu_backward(g, x), -5, 5),
    "gelu_tanh": (
        "gelu_backward",
        {"approximate": "tanh"},
        lambda g, x: aten.gelu_backward(g, x, approximate="tanh"),
        -5,
        5,
    ),
    "silu": ("silu_backward", {}, aten.silu_backward, -8, 8),
    "sigmoid": ("sigmoid_backward", {}, aten.sigmoid_backward, 0, 1),
    "tanh": ("tanh_backward", {}, aten.tanh_backward, -1, 1),
    "threshold": ("threshold_backward", {"threshold": 0.25}, lambda g, x: aten.threshold_backward(g, x, 0.25), -1, 1),
    "elu": ("elu_backward", {"alpha": 0.5}, lambda g, x: aten.elu_backward(g, 0.5, 1.0, 1.0, False, x), -3, 3),
    "elu_result": (
        "elu_backward",
        {"alpha": 0.5, "scale": 1.5, "input_scale": 2.0, "is_result": True},
        lambda g, y: aten.elu_backward(g, 0.5, 1.5, 2.0, True, y),
        -0.7,
        3,
    ),
    "leaky_relu": (
        "leaky_relu_backward",
        {"negative_slope": 0.1},
        lambda g, x: aten.leaky_relu_backward(g, x, 0.1, False),
        -3,
        3,
    ),
    "hardtanh": (
        "hardtanh_backward",
        {"min_val": -0.5, "max_val": 1.5},
        lambda g, x: aten.hardtanh_backward(g, x, -0.5, 1.5),
        -3,
        3,
    ),
    "softplus": (
        "softplus_backward",
        {"beta": 2.0, "threshold": 4.0},
        lambda g, x: aten.softplus_backward(g, x, 2.0, 4.0),
        -5,
        5,
    ),
    "mish": ("mish_backward", {}, aten.mish_backward, -6, 6),
    "hardsigmoid": ("hardsigmoid_backward", {}, aten.hardsigmoid_backward, -5, 5),
    "hardswish": ("hardswish_backward", {}, aten.hardswish_backward, -5, 5),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(BACKWARD_CASES))
def test_backward_helpers_against_aten(dev, case, dtype):
    op, attrs, ref, lo, hi = BACKWARD_CASES[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    g, gv = put(dev, rng.normal(size=SHAPE), dtype)
    x, xv = put(dev, rng.uniform(lo, hi, SHAPE), dtype)
    (y,) = kk.run(op, [g, x], attrs)
    assert y.dtype.value == dtype
    assert_close(kk.to_numpy(y), ref(torch.from_numpy(gv), torch.from_numpy(xv)).numpy(), RTOL[dtype])


def test_every_backward_helper_is_checked():
    assert {c[0] for c in BACKWARD_CASES.values()} == set(ew_kernels.BACKWARD)


# --------------------------------------------------------------------------------------- numerics scope
def _cut(v, mask):
    return (np.asarray(v, np.float32).view(np.uint32) & np.uint32(mask)).view(np.float32).astype(np.float64)


def test_mul_fidelity_on_bfloat16(dev):
    rng = np.random.default_rng(11)
    a, av = put(dev, rng.uniform(-4, 4, (64, 64)), "bfloat16")
    b, bv = put(dev, rng.uniform(-4, 4, (64, 64)), "bfloat16")
    exact = round_bfloat16((av * bv).astype(np.float32))  # a bf16 x bf16 product fits fp32 exactly
    assert np.array_equal(run("mul", [a, b]), exact)  # TT-NN's default (HiFi4): exact product, one rounding
    with numerics(fidelity="HiFi4"):
        assert np.array_equal(run("mul", [a, b]), exact)
    with numerics(fidelity="LoFi"):
        lofi = run("mul", [a, b])
    # LoFi: one pass of a (SrcA) cut to 5 significant bits times b (SrcB) cut to 7
    assert np.array_equal(lofi, round_bfloat16((_cut(av, 0xFFF80000) * _cut(bv, 0xFFFE0000)).astype(np.float32)))
    assert np.mean(lofi != exact) > 0.3
    with numerics(fidelity="HiFi2", fp32_acc=True):  # phases 0-1 summed in an fp32 DST: all of a, b cut to 7 bits
        hifi2 = run("mul", [a, b])
    assert np.array_equal(hifi2, round_bfloat16((av * _cut(bv, 0xFFFE0000)).astype(np.float32)))
    a32, av32 = put(dev, av, "float32")
    with numerics(fidelity="LoFi"):  # float32 takes the SFPU path: no fidelity
        assert np.array_equal(run("mul", [a32, a32]), (av32 * av32).astype(np.float32))


def test_approx_mode_changes_exp_sigmoid_and_div(dev):
    x, xv = put(dev, np.linspace(-10, 10, 401), "bfloat16")
    exact = run("exp", [x])
    assert_close(exact, np.exp(xv), BF16_RTOL)
    with numerics(approx=True):
        (
            fast,
            sig,
        ) = run("exp", [x]), run("sigmoid", [x])
    assert not np.array_equal(fast, exact)
    assert_close(fast, np.exp(xv), 0.03 + BF16_RTOL)  # Schraudolph's exp: <= 3%
    assert_close(sig, 1 / (1 + np.exp(-xv)), BF16_RTOL, atol=0.018)
    d, dv = put(dev, np.linspace(0.3, 7, 401), "bfloat16")
    with numerics(approx=True):
        fast_div = run("div", [x, d])
    assert not np.array_equal(fast_div, run("div", [x, d]))
    assert_close(fast_div, xv / dv, 0.0055 + 2 * BF16_RTOL, atol=1e-30)  # SFPARECIP 0.55%, bf16 reciprocal, output


# ------------------------------------------------------------------------------------------------- errors
def test_bad_inputs_raise_typed_errors_and_the_device_stays_usable(dev):
    f, _ = put(dev, np.ones(4), "float32")
    bl, _ = put(dev, np.ones(4, bool), "bool")
    i, _ = put(dev, np.ones(4, np.int32), "int32")
    with pytest.raises(DtypeError, match="integer"):
        kk.run("bitwise_and", [f, f])
    with pytest.raises(DtypeError):
        kk.run("left_shift", [bl, bl])
    with pytest.raises(DtypeError, match="bool"):
        kk.run("add", [bl, bl])
    with pytest.raises(DtypeError, match="alpha"):
        kk.run("add", [i, i], {"alpha": 0.5})
    with pytest.raises(DtypeError, match="float"):
        kk.run("lerp", [i, i, i])
    with pytest.raises(ShapeError, match="min / max"):
        kk.run("clamp", [f])
    with pytest.raises(ShapeError, match="approximate"):
        kk.run("gelu", [f], {"approximate": "erf"})
    with pytest.raises(ShapeError, match="rounding_mode"):
        kk.run("div", [f, f], {"rounding_mode": "round"})
    with pytest.raises(ShapeError, match="no attribute"):
        kk.run("exp", [f], {"alpha": 1})
    with pytest.raises(ShapeError, match="operand"):
        kk.run("add", [f])
    assert np.array_equal(run("add", [f, 1.0]), [2.0] * 4)


# --------------------------------------------------------------------------------------- registry contract
def test_every_op_has_a_sim_model_a_ttnn_call_a_cost_and_a_numerics_doc():
    ops = [n for n, d in irops.all_ops().items() if d.family == "elementwise"]
    assert len(ops) > 100
    for name in ops:
        d = irops.get(name)
        assert kk.lookup(name, "sim") is not None and kk.lookup(name, "sim").estimate is not None, name
        assert kk.lookup(name, "ttnn") is not None, f"{name} has no TT-NN implementation"
        assert re.search(r"SFPU|FPU", d.doc), f"{name}'s doc does not state its numerics"


class Recorder:
    """A stand-in for the ttnn module and its tensors: records every attribute path the TT-NN code touches."""

    def __init__(self, log: set, path: str = ""):
        self._log, self._path = log, path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        path = f"{self._path}.{name}" if self._path else name
        self._log.add(path)
        return Recorder(self._log, path)

    def __call__(self, *args, **kwargs):
        return Recorder(self._log, "Tensor")

    def __getitem__(self, i):
        return Recorder(self._log, "Tensor")

    def __iter__(self):
        return iter([Recorder(self._log, "Tensor"), Recorder(self._log, "Tensor")])


def _fake_operands(name):
    d = irops.get(name)
    int_only = name in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "bitwise_not")
    dtype = DType.INT32 if int_only else DType.BFLOAT16
    return [TensorSpec((2, 3), dtype) for _ in d.inputs]


@pytest.mark.parametrize("num", [Numerics(Fidelity.HiFi4, False, False), Numerics(Fidelity.LoFi, True, True)])
def test_ttnn_calls_use_only_declared_ttnn_names(num):
    log: set = set()
    tt = Recorder(log)
    for name, d in irops.all_ops().items():
        if d.family != "elementwise":
            continue
        attrs = d.bind_attrs({"min": -1.0} if name == "clamp" else {})
        specs = _fake_operands(name)
        out_specs = d.infer(specs, attrs)
        kk.lookup(name, "ttnn").fn(tt, [Recorder(log, "Tensor") for _ in specs], attrs, num, out_specs)
    declared = set(ew_kernels.TTNN_NAMES)
    prefixes = {n.rsplit(".", 1)[0] for n in declared if "." in n}
    undeclared = sorted(p for p in log if p not in declared and p not in prefixes and not p.startswith("Tensor."))
    assert not undeclared, f"TT-NN names used but not in TTNN_NAMES: {undeclared}"
    assert {p for p in log if p.startswith("Tensor.")} <= declared
    assert {"multiply", "gelu", "where", "divide", "typecast"} <= log
