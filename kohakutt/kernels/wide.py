"""int64 and float16 on a real card, through TT-NN 0.81.1, whose DataType has neither.

**int64** is a pair of int32 words, low word first (the int64's own little-endian bytes): on a card an int64 tensor
of shape ``s`` is an int32 TT-NN tensor of shape ``(*s, 2)``. The ops that :data:`kohakutt.ir.dtypes.INT64_EXACT`
names run here as short word-pair programs of TT-NN int32 ops, exact modulo 2**64 as PyTorch's CPU int64 is:

- add / sub: the low words added wrapping, the carry (an unsigned compare of the sum with an operand) added into the
  high words; neg is 0 - x; compares are lexicographic (signed high words, then unsigned low words: an unsigned
  compare is a signed compare after flipping both sign bits); min / max / clamp / where select both words;
- mul: 16-bit limbs, each product of two limbs exact in 32 bits, the column sums split into 16-bit halves so that
  no partial sum leaves int32, then one carry chain (10 int32 multiplies);
- sum / cumsum: 8 limbs of 8 bits, each limb summed (or scanned) in int32, exact while at most
  :data:`~kohakutt.ir.dtypes.SUM_MAX_TERMS` terms meet, then one carry chain.

Every other int64 op is *checked*: :func:`narrow` takes the low words after testing that each high word is its low
word's sign (else the value is outside int32), the op runs in int32, and :func:`overflowed` tests its int32 result
against a float32 shadow of the same op: when the true result R lies in int32, |float(r) - shadow| stays far below
2**31; when it does not, the int32 result r differs from R by a multiple of 2**32 and the difference is at least
2**31 (exact for any shadow within a quarter of R, which a float32 evaluation of one op is). Both tests leave a flag
tensor on the card, read at the next synchronization, which raises IntegerOverflowError naming the op.

**float16** is stored as its 16 bits (a uint16 TT-NN tensor, bit for bit). :func:`half_to_float` widens it to
float32 exactly (integer ops on the bits, then a bitcast), the op runs in float32, and :func:`float_to_half` packs
the result back with round to nearest, ties to even, overflow to +-inf, NaN kept quiet with its top payload bits:
the same rounding the simulator's store does (NumPy's float32 -> float16).

``tests/kernels/test_wide.py`` runs every function here on a NumPy stand-in of these TT-NN calls (int32 arithmetic
wrapping, compares giving 0 / 1) against NumPy's int64 and float16; the contract test checks the names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kohakutt.ir.dtypes import SUM_LIMB_BITS, DType
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import Spec, TensorSpec

# fmt: off
TTNN_NAMES: tuple[str, ...] = (
    "slice", "concat", "reshape", "add", "subtract", "multiply", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "bitwise_left_shift", "bitwise_right_shift", "lt", "gt", "eq", "ne", "ge", "logical_and",
    "logical_or", "logical_not", "where", "typecast", "bitcast", "sum", "cumsum", "max", "abs", "full_like", "int32",
    "uint32", "uint16", "float32",
)
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "sum": ("dim", "keepdim"), "max": ("dim", "keepdim"), "cumsum": ("dim",), "concat": ("dim",),
    "typecast": ("dtype",), "bitcast": ("dtype",),
}
# fmt: on

MIN32 = -(2**31)
Words = tuple[Any, Any]  # (low, high) int32 TT-NN tensors of the logical shape


# --------------------------------------------------------------------------------------------------- word pairs
def words(tt: Any, x: Any) -> Words:
    """The (low, high) words of an int64 tensor held as an int32 tensor of shape ``(*s, 2)``."""
    shape = list(x.shape)
    s, ends = shape[:-1], [*shape[:-1], 1]
    lo = tt.slice(x, [0] * len(shape), ends)
    hi = tt.slice(x, [*[0] * len(s), 1], [*s, 2])
    return tt.reshape(lo, s), tt.reshape(hi, s)


def join(tt: Any, w: Words) -> Any:
    """The int32 ``(*s, 2)`` tensor holding the int64 values whose words are ``w``."""
    lo, hi = w
    s = [*list(lo.shape), 1]
    return tt.concat([tt.reshape(lo, s), tt.reshape(hi, s)], dim=-1)


def widen(tt: Any, x: Any) -> Words:
    """An int32 tensor as int64 words: the high word is the sign (arithmetic shift by 31)."""
    return x, tt.bitwise_right_shift(x, 31)


def scalar_words(v: int) -> tuple[int, int]:
    """A Python int as its (low, high) int32 words, modulo 2**64."""
    v &= 2**64 - 1
    lo, hi = v & 0xFFFFFFFF, v >> 32
    return lo - 2**32 if lo >= 2**31 else lo, hi - 2**32 if hi >= 2**31 else hi


def _i32(tt: Any, mask: Any) -> Any:
    """A compare's 0 / 1 result as int32."""
    return mask if mask.dtype == tt.int32 else tt.typecast(mask, dtype=tt.int32)


def ult(tt: Any, a: Any, b: Any) -> Any:
    """a < b with int32 words read as unsigned (both sign bits flipped, then a signed compare); 0 / 1 int32."""
    return _i32(tt, tt.lt(tt.bitwise_xor(a, MIN32), tt.bitwise_xor(b, MIN32)))


def add64(tt: Any, a: Words, b: Words) -> Words:
    lo = tt.add(a[0], b[0])
    return lo, tt.add(tt.add(a[1], b[1]), ult(tt, lo, a[0]))


def sub64(tt: Any, a: Words, b: Words) -> Words:
    return tt.subtract(a[0], b[0]), tt.subtract(tt.subtract(a[1], b[1]), ult(tt, a[0], b[0]))


def neg64(tt: Any, a: Words) -> Words:
    zero = tt.full_like(a[0], 0)
    return sub64(tt, (zero, zero), a)


def lt64(tt: Any, a: Words, b: Words) -> Any:
    """a < b as int64; 0 / 1 int32."""
    return tt.logical_or(_i32(tt, tt.lt(a[1], b[1])), tt.logical_and(_i32(tt, tt.eq(a[1], b[1])), ult(tt, a[0], b[0])))


def eq64(tt: Any, a: Words, b: Words) -> Any:
    return tt.logical_and(_i32(tt, tt.eq(a[0], b[0])), _i32(tt, tt.eq(a[1], b[1])))


def select(tt: Any, cond: Any, a: Words, b: Words) -> Words:
    return tt.where(cond, a[0], b[0]), tt.where(cond, a[1], b[1])


def _limbs(tt: Any, a: Words, bits: int) -> list[Any]:
    """The value's 64 bits as limbs of ``bits`` bits, lowest first, each a non-negative int32."""
    mask, per = (1 << bits) - 1, 32 // bits
    return [tt.bitwise_and(tt.bitwise_right_shift(w, bits * k), mask) if k else tt.bitwise_and(w, mask)
            for w in a for k in range(per)]  # fmt: skip


def _from_limbs(tt: Any, totals: Sequence[Any], bits: int) -> Words:
    """Words from limb totals (each a non-negative int32, possibly past ``bits`` bits): one carry chain, the last
    limb's carry dropped (modulo 2**64)."""
    mask, per = (1 << bits) - 1, 32 // bits
    limbs, carry = [], None
    for t in totals:
        t = t if carry is None else tt.add(t, carry)
        carry = tt.bitwise_right_shift(t, bits)
        limbs.append(tt.bitwise_and(t, mask))
    out = []
    for w in range(2):
        acc = limbs[w * per]
        for k in range(1, per):
            acc = tt.bitwise_or(acc, tt.bitwise_left_shift(limbs[w * per + k], bits * k))
        out.append(acc)
    return out[0], out[1]


def mul64(tt: Any, a: Words, b: Words) -> Words:
    """a * b modulo 2**64 from 16-bit limbs: every limb product fits 32 bits (as a wrapped int32 its bits are
    right), and each column adds 16-bit halves of products, at most 7 of them, far inside int32."""
    x, y = _limbs(tt, a, 16), _limbs(tt, b, 16)
    low = lambda p: tt.bitwise_and(p, 0xFFFF)  # noqa: E731
    high = lambda p: tt.bitwise_and(tt.bitwise_right_shift(p, 16), 0xFFFF)  # noqa: E731
    cols: list[list[Any]] = [[] for _ in range(4)]
    for i in range(4):
        for j in range(4 - i):
            p = tt.multiply(x[i], y[j])
            cols[i + j].append(low(p))
            if i + j + 1 < 4:
                cols[i + j + 1].append(high(p))
    totals = []
    for c in cols:
        t = c[0]
        for v in c[1:]:
            t = tt.add(t, v)
        totals.append(t)
    return _from_limbs(tt, totals, 16)


def sum64(tt: Any, a: Words, dim: int, keepdim: bool = True) -> Words:
    """The int64 sum over ``dim``: 8-bit limbs summed in int32 (exact for up to SUM_MAX_TERMS terms)."""
    return _from_limbs(tt, [tt.sum(v, dim=dim, keepdim=keepdim) for v in _limbs(tt, a, SUM_LIMB_BITS)],
                       SUM_LIMB_BITS)  # fmt: skip


def cumsum64(tt: Any, a: Words, dim: int) -> Words:
    return _from_limbs(tt, [tt.cumsum(v, dim=dim) for v in _limbs(tt, a, SUM_LIMB_BITS)], SUM_LIMB_BITS)


# ------------------------------------------------------------------------------------------------ checked ops
def narrow(tt: Any, a: Words) -> tuple[Any, Any]:
    """(the low words, a 0-d flag that is nonzero when some value lies outside int32: a high word that is not its
    low word's sign)."""
    bad = _i32(tt, tt.ne(a[1], tt.bitwise_right_shift(a[0], 31)))
    return a[0], tt.max(bad)


def overflowed(tt: Any, r: Any, shadow: Any) -> Any:
    """A 0-d flag, nonzero when the int32 result ``r`` of an op is not its true value, given ``shadow``, the same op
    evaluated in float32 (see the module notes: exact for any shadow within a quarter of the true value)."""
    gap = tt.abs(tt.subtract(tt.typecast(r, dtype=tt.float32), shadow))
    return tt.max(_i32(tt, tt.ge(gap, 2.0**31)))


# ------------------------------------------------------------------------------------- the int64 programs by op
def _pairs(inputs: Sequence[Any], specs: Sequence[Spec], tt: Any) -> list[Any]:
    """Each operand as words: int64 tensors split, int32 tensors widened, Python ints as scalar words."""
    out: list[Any] = []
    for v, s in zip(inputs, specs):
        if isinstance(s, TensorSpec):
            out.append(words(tt, v) if s.dtype is DType.INT64 else widen(tt, v))
        else:
            out.append(scalar_words(int(v)))
    return out


def _binary(fn: Callable[[Any, Words, Words], Any]) -> Callable[..., Any]:
    def run(tt: Any, inputs: list[Any], specs: list[Spec], attrs: dict[str, Any], out: list[TensorSpec]) -> Any:
        a, b = _pairs(inputs, specs, tt)
        a, b = _full(tt, a, b), _full(tt, b, a)
        r = fn(tt, a, b)
        return join(tt, r) if out[0].dtype is DType.INT64 else r

    return run


def _full(tt: Any, w: Words, like: Words) -> Words:
    """Scalar words as tensors shaped like ``like`` (a tensor operand's words); tensor words as they are."""
    if not isinstance(w[0], int):
        return w
    return tt.full_like(like[0], w[0]), tt.full_like(like[0], w[1])


def _cmp(kind: str) -> Callable[[Any, Words, Words], Any]:
    return {
        "lt": lambda tt, a, b: lt64(tt, a, b),
        "gt": lambda tt, a, b: lt64(tt, b, a),
        "le": lambda tt, a, b: tt.logical_not(lt64(tt, b, a)),
        "ge": lambda tt, a, b: tt.logical_not(lt64(tt, a, b)),
        "eq": lambda tt, a, b: eq64(tt, a, b),
        "ne": lambda tt, a, b: tt.logical_not(eq64(tt, a, b)),
    }[kind]


def _bitwise(name: str) -> Callable[[Any, Words, Words], Words]:
    return lambda tt, a, b: (getattr(tt, name)(a[0], b[0]), getattr(tt, name)(a[1], b[1]))


INT64_TTNN: dict[str, Callable[..., Any]] = {
    "add": _binary(lambda tt, a, b: add64(tt, a, b)),
    "sub": _binary(lambda tt, a, b: sub64(tt, a, b)),
    "mul": _binary(mul64),
    "maximum": _binary(lambda tt, a, b: select(tt, lt64(tt, a, b), b, a)),
    "minimum": _binary(lambda tt, a, b: select(tt, lt64(tt, b, a), b, a)),
    **{k: _binary(_cmp(k)) for k in ("lt", "gt", "le", "ge", "eq", "ne")},
    **{k: _binary(_bitwise(k)) for k in ("bitwise_and", "bitwise_or", "bitwise_xor")},
}
INT64_TTNN["fmax"], INT64_TTNN["fmin"] = INT64_TTNN["maximum"], INT64_TTNN["minimum"]


def _unary(fn: Callable[[Any, Words], Any]) -> Callable[..., Any]:
    def run(tt: Any, inputs: list[Any], specs: list[Spec], attrs: dict[str, Any], out: list[TensorSpec]) -> Any:
        (a,) = _pairs(inputs[:1], specs[:1], tt)
        r = fn(tt, a)
        return join(tt, r) if out[0].dtype is DType.INT64 else r

    return run


def _sign(tt: Any, a: Words) -> Words:
    neg = _i32(tt, tt.lt(a[1], 0))
    nonzero = _i32(tt, tt.ne(tt.bitwise_or(a[0], a[1]), 0))
    lo = tt.subtract(nonzero, tt.multiply(neg, 2))  # -1, 0 or 1
    return lo, tt.bitwise_right_shift(lo, 31)


INT64_TTNN.update({
    "neg": _unary(neg64),
    "abs": _unary(lambda tt, a: select(tt, _i32(tt, tt.lt(a[1], 0)), neg64(tt, a), a)),
    "square": _unary(lambda tt, a: mul64(tt, a, a)),
    "sign": _unary(_sign),
    "bitwise_not": _unary(lambda tt, a: (tt.bitwise_not(a[0]), tt.bitwise_not(a[1]))),
    "signbit": _unary(lambda tt, a: _i32(tt, tt.lt(a[1], 0))),
})  # fmt: skip


def _sum(tt: Any, inputs: list[Any], specs: list[Spec], attrs: dict[str, Any], out: list[TensorSpec]) -> Any:
    (a,) = _pairs(inputs[:1], specs[:1], tt)
    nd = len(specs[0].shape)
    dims = range(nd) if attrs.get("dims") is None else [d % nd for d in ([attrs["dims"]] if isinstance(
        attrs["dims"], int) else attrs["dims"])]  # fmt: skip
    for d in sorted(dims, reverse=True):
        a = sum64(tt, a, d, keepdim=True)
    return tt.reshape(join(tt, a), [*out[0].shape, 2])


def _cumsum(tt: Any, inputs: list[Any], specs: list[Spec], attrs: dict[str, Any], out: list[TensorSpec]) -> Any:
    (a,) = _pairs(inputs[:1], specs[:1], tt)
    return join(tt, cumsum64(tt, a, int(attrs["dim"]) % max(len(specs[0].shape), 1)))


INT64_TTNN.update({"sum": _sum, "cumsum": _cumsum})


def card_impl(op: str, in_specs: Sequence[Spec], out_specs: Sequence[TensorSpec]) -> Callable[..., Any] | None:
    """The word-pair program that computes ``op`` on a card when an operand or result is int64 (None: the op is
    data movement, done word by word, or a checked op, run in int32 between :func:`narrow` and :func:`overflowed`).
    Each takes ``(ttnn, inputs, in_specs, attrs, out_specs)``."""
    dts = [s.dtype for s in (*in_specs, *out_specs) if isinstance(s, TensorSpec)]
    return INT64_TTNN.get(op) if DType.INT64 in dts else None


# -------------------------------------------------------------------------------------------------------- float16
def half_to_float(tt: Any, h16: Any) -> Any:
    """float16 bits (a uint16 tensor) as float32 values, exactly: sign, exponent rebiased by 112, mantissa shifted
    up 13; subnormals are mantissa * 2**-24 (exact in float32); Inf / NaN keep their mantissa."""
    h = tt.typecast(h16, dtype=tt.int32)
    sign = tt.bitwise_left_shift(tt.bitwise_and(h, 0x8000), 16)
    e = tt.bitwise_and(tt.bitwise_right_shift(h, 10), 0x1F)
    m = tt.bitwise_and(h, 0x3FF)
    m13 = tt.bitwise_left_shift(m, 13)
    normal = tt.bitwise_or(tt.bitwise_left_shift(tt.add(e, 112), 23), m13)
    special = tt.bitwise_or(m13, 0x7F800000)
    bits = tt.bitwise_or(sign, tt.where(_i32(tt, tt.eq(e, 31)), special, normal))
    f = tt.bitcast(tt.bitcast(bits, dtype=tt.uint32), dtype=tt.float32)
    sub = tt.multiply(tt.typecast(m, dtype=tt.float32), 2.0**-24)
    sub = tt.where(_i32(tt, tt.ne(sign, 0)), tt.multiply(sub, -1.0), sub)
    return tt.where(_i32(tt, tt.eq(e, 0)), sub, f)


def float_to_half(tt: Any, x: Any) -> Any:
    """float32 values as float16 bits (a uint16 tensor): round to nearest, ties to even; |x| >= 65520 gives Inf;
    NaN stays NaN (quiet, top payload bits kept); below 2**-14 the subnormal is rounded by adding 0.5 in float32,
    whose own rounding is the one wanted (the exponent of 0.5 leaves exactly the half's subnormal bits)."""
    bits = tt.bitcast(tt.bitcast(x, dtype=tt.uint32), dtype=tt.int32)
    sign = tt.bitwise_and(tt.bitwise_right_shift(bits, 16), 0x8000)
    a = tt.bitwise_and(bits, 0x7FFFFFFF)
    odd = tt.bitwise_and(tt.bitwise_right_shift(a, 13), 1)
    normal = tt.bitwise_right_shift(tt.add(tt.add(a, -(112 << 23) + 0xFFF), odd), 13)
    tiny = tt.bitcast(tt.bitcast(tt.add(tt.abs(x), 0.5), dtype=tt.uint32), dtype=tt.int32)
    sub = tt.subtract(tiny, 0x3F000000)
    nan = tt.bitwise_or(tt.bitwise_and(tt.bitwise_right_shift(a, 13), 0x3FF), 0x7E00)
    h = tt.where(_i32(tt, tt.lt(a, 0x38800000)), sub, normal)
    h = tt.where(_i32(tt, tt.ge(a, 0x477FF000)), 0x7C00, h)
    h = tt.where(_i32(tt, tt.gt(a, 0x7F800000)), nan, h)
    return tt.typecast(tt.bitwise_or(h, sign), dtype=tt.uint16)


def half_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A TT-NN implementation ``fn(tt, inputs, attrs, numerics, out_specs)`` for float16 operands and results: float16
    inputs widened with :func:`half_to_float`, float16 outputs packed with :func:`float_to_half`."""

    def run(tt: Any, inputs: list[Any], specs: list[Spec], attrs: dict[str, Any], numerics: Numerics,
            out_specs: list[TensorSpec]) -> Any:  # fmt: skip
        xs = [half_to_float(tt, v) if isinstance(s, TensorSpec) and s.dtype is DType.FLOAT16 else v
              for v, s in zip(inputs, specs)]  # fmt: skip
        wide = [TensorSpec(s.shape, DType.FLOAT32, s.layout) if s.dtype is DType.FLOAT16 else s for s in out_specs]
        y = fn(tt, xs, attrs, numerics, wide)
        ys = list(y) if isinstance(y, list | tuple) else [y]
        ys = [float_to_half(tt, v) if s.dtype is DType.FLOAT16 else v for v, s in zip(ys, out_specs)]
        return ys if isinstance(y, list | tuple) else ys[0]

    return run
