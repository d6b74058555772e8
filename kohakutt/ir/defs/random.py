"""IR ops of the random family: numbers drawn on the device from the device's random stream.

Every op draws from a counter-based generator, Philox4x32-10 (Salmon et al., 2011: 32-bit words only, so a Tensix
core can run it), keyed by the device seed (``kohakutt.kernels.manual_seed``) and counted from the op's place in
the device's stream: the same seed gives the same numbers, successive ops give different ones, whatever the backend
thread or trace replay. Element i of an op uses the i-th 32-bit word of its counter block (normal uses two words per
pair of outputs), so a result does not depend on how the work is split over cores.

Shape-only ops (uniform, normal, randint, randperm) take no tensor operand: run them with ``device=``; ``*_like``
forms are the same ops with ``shape=x.shape``. Float outputs are computed in fp32 and rounded as stored, then kept
inside the documented range (a bf16 value that rounds up onto ``high`` is stepped down one bf16 ulp).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kohakutt.errors import DtypeError
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import SFPU_MATH, Infer, ShapeError, Spec, TensorSpec, define

FAMILY = "random"
GENERATOR = "Philox4x32-10 keyed by the device seed, counter = (word block, 0, op offset low, op offset high)"


def _shape(attrs: dict[str, Any], op: str) -> tuple[int, ...]:
    shape = attrs["shape"]
    if shape is None:
        raise ShapeError(f"{op} needs shape= (a tuple of sizes; use x.shape for a *_like form)")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ShapeError(f"{op}: sizes must be >= 0, got {shape}")
    return shape


def _stored(dt: DType) -> DType:
    """The dtype a draw is stored in: block floats give bfloat16 (a draw is not a tile of shared exponents)."""
    return DType.BFLOAT16 if dt.is_block else dt


def _dtype(attrs: dict[str, Any], op: str, *, floats: bool) -> DType:
    dt = DType.of(attrs["dtype"])
    if floats and not dt.is_float:
        raise DtypeError(f"{op} draws floats; dtype={dt.value} is not one (use randint for integers)")
    if not floats and (dt.is_float or dt is DType.BOOL):
        raise DtypeError(f"{op} draws integers; dtype={dt.value} is not one (use int32)")
    return _stored(dt)


def _check_uniform(attrs: dict[str, Any]) -> None:
    if not attrs["low"] < attrs["high"]:
        raise ShapeError(f"uniform needs low < high, got low={attrs['low']}, high={attrs['high']}")


def _check_normal(attrs: dict[str, Any]) -> None:
    if not attrs["std"] >= 0:
        raise ShapeError(f"normal needs std >= 0, got {attrs['std']}")


def _check_randint(attrs: dict[str, Any]) -> None:
    low, high = int(attrs["low"]), int(attrs["high"])
    if not low < high or high - low > 2**32:
        raise ShapeError(f"randint needs low < high and a range of at most 2**32 values, got [{low}, {high})")


def _fits_randint(attrs: dict[str, Any], dt: DType) -> None:
    low, high = int(attrs["low"]), int(attrs["high"])
    if not (low >= 0 or dt is DType.INT32) or high - 1 > (2**31 - 1 if dt is DType.INT32 else 2**32 - 1):
        raise DtypeError(f"randint: [{low}, {high}) does not fit {dt.value}")


def _check_randperm(attrs: dict[str, Any]) -> None:
    n = int(attrs["n"])
    if not 0 <= n < 2**31:
        raise ShapeError(f"randperm needs 0 <= n < 2**31, got {n}")


# Shape-only draws: name -> (floats?, attribute check, shape from attrs or None for shape=, dtype check or None).
_DRAWS: dict[str, tuple[bool, Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], tuple[int, ...]] | None,
                        Callable[[dict[str, Any], DType], None] | None]] = {
    "uniform": (True, _check_uniform, None, None),
    "normal": (True, _check_normal, None, None),
    "randint": (False, _check_randint, None, _fits_randint),
    "randperm": (False, _check_randperm, lambda attrs: (int(attrs["n"]),), None),
}  # fmt: skip


def _draw(op: str) -> Infer:
    """Infer for the shape-only draw ``op`` (see ``_DRAWS``): its attributes checked first; float draws then check
    the shape before the dtype, integer draws the dtype (and its range) before the shape."""
    floats, check, shape_of, fits = _DRAWS[op]

    def shape(attrs: dict[str, Any]) -> tuple[int, ...]:
        return _shape(attrs, op) if shape_of is None else shape_of(attrs)

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        check(attrs)
        if floats:
            return [TensorSpec(shape(attrs), _dtype(attrs, op, floats=True))]
        dt = _dtype(attrs, op, floats=False)
        if fits is not None:
            fits(attrs, dt)
        return [TensorSpec(shape(attrs), dt)]

    return infer


def _float_tensor(spec: Spec, op: str) -> TensorSpec:
    if not isinstance(spec, TensorSpec):
        raise ShapeError(f"{op} needs a tensor operand, not a Python number")
    return spec


def _bernoulli(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    x = _float_tensor(inputs[0], "bernoulli")
    p = attrs["p"]
    if p is not None and not 0.0 <= p <= 1.0:
        raise ShapeError(f"bernoulli needs 0 <= p <= 1, got p={p}")
    if p is None and not x.dtype.is_float:
        raise DtypeError(f"bernoulli reads probabilities from a float tensor, got {x.dtype.value}; or pass p=")
    dt = DType.of(attrs["dtype"]) if attrs["dtype"] is not None else x.dtype
    return [TensorSpec(x.shape, _stored(dt))]


def _dropout(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    x = _float_tensor(inputs[0], "dropout")
    if not 0.0 <= attrs["p"] <= 1.0:
        raise ShapeError(f"dropout needs 0 <= p <= 1, got p={attrs['p']}")
    if not x.dtype.is_float:
        raise DtypeError(f"dropout takes a float tensor, got {x.dtype.value}")
    return [TensorSpec(x.shape, _stored(x.dtype)), TensorSpec(x.shape, DType.BOOL)]


def _multinomial(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    w = _float_tensor(inputs[0], "multinomial")
    n = int(attrs["num_samples"])
    if w.ndim not in (1, 2) or not w.dtype.is_float:
        raise ShapeError(f"multinomial takes a 1-D or 2-D float tensor of weights, got {w}")
    if n < 0 or (not attrs["replacement"] and n > w.shape[-1]):
        raise ShapeError(f"multinomial: cannot draw {n} samples without replacement from {w.shape[-1]} categories")
    return [TensorSpec((*w.shape[:-1], n), DType.INT32)]


_NUM = "Drawn with " + GENERATOR + "; arithmetic in fp32 (SFPU), the result rounded to the output dtype as stored."

define(
    "uniform",
    FAMILY,
    [],
    _draw("uniform"),
    attrs={"shape": None, "low": 0.0, "high": 1.0, "dtype": "float32"},
    numerics=SFPU_MATH,
    doc="Values uniform on [low, high): u = (top 24 bits of a word) * 2^-24, low + (high - low) "
    "* u in fp32; values that round onto high are stepped down to the largest value below it. " + _NUM,
)
define(
    "normal",
    FAMILY,
    [],
    _draw("normal"),
    attrs={"shape": None, "mean": 0.0, "std": 1.0, "dtype": "float32"},
    numerics=SFPU_MATH,
    doc="Normal(mean, std) values by the Box-Muller transform: two words give u1 in (0, 1] and "
    "u2 in [0, 1), and a pair sqrt(-2 ln u1) * (cos, sin)(2 pi u2), scaled and shifted in fp32. " + _NUM,
)
define(
    "randint",
    FAMILY,
    [],
    _draw("randint"),
    attrs={"shape": None, "low": 0, "high": 2, "dtype": "int32"},
    numerics=SFPU_MATH,
    doc="Integers uniform on [low, high): low + floor(word * (high - low) / 2^32) (the "
    "multiply-high map; its bias is below (high - low) / 2^32). Drawn with " + GENERATOR + ".",
)
define(
    "randperm",
    FAMILY,
    [],
    _draw("randperm"),
    attrs={"n": 0, "dtype": "int32"},
    numerics=SFPU_MATH,
    doc="A random permutation of 0..n-1: the indices sorted by one random 32-bit key each (ties by index). "
    "Drawn with " + GENERATOR + ".",
)
define(
    "bernoulli",
    FAMILY,
    ["x"],
    _bernoulli,
    attrs={"p": None, "dtype": None},
    numerics=SFPU_MATH,
    doc="1 with probability x (or the number p, x then giving only the shape), else 0: u < p with u as in "
    "uniform. dtype defaults to x's. " + _NUM,
)
define(
    "dropout",
    FAMILY,
    ["x"],
    _dropout,
    attrs={"p": 0.5, "train": True},
    outputs=2,
    numerics=SFPU_MATH,
    doc="(out, mask): mask is True with probability 1 - p (u >= p, u as in uniform), out = x * 1/(1-p) where "
    "mask else 0, a dropped NaN included (all zeros at p = 1). train=False returns (x, all True) and uses no "
    "words (the stream still advances). The scale is an fp32 multiply on the SFPU, rounded to x's dtype as stored. "
    "Drawn with " + GENERATOR + ".",
)
define(
    "multinomial",
    FAMILY,
    ["weights"],
    _multinomial,
    attrs={"num_samples": 1, "replacement": False},
    numerics=SFPU_MATH,
    doc="Category indices drawn in proportion to the non-negative weights of each row. With "
    "replacement: inverse CDF of u over the fp32 running sum; without: the num_samples smallest exponential "
    "race keys -ln(u) / w (sampling without replacement by weight). Drawn with " + GENERATOR + ".",
)
