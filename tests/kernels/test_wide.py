"""int64 and float16 on a card (kohakutt.kernels.wide): the word-pair programs and the float16 conversions, run on a
NumPy stand-in of the TT-NN calls they make (int32 arithmetic wraps, compares give 0 / 1, as TT-NN's int32 ops do),
checked against NumPy's int64 and float16, which is what PyTorch's CPU computes."""

from __future__ import annotations

import types

import numpy as np
import pytest

from kohakutt.ir.dtypes import SUM_MAX_TERMS, DType
from kohakutt.ir.ops import ScalarSpec, TensorSpec
from kohakutt.kernels import wide


class T:
    """A TT-NN tensor of the stand-in: a NumPy array and its TT-NN dtype name."""

    def __init__(self, a: np.ndarray, dtype: str):
        self.a, self.dtype = np.asarray(a), dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape


_NP = {"int32": np.int32, "uint32": np.uint32, "uint16": np.uint16, "float32": np.float32}


def fake_ttnn() -> types.SimpleNamespace:
    tt = types.SimpleNamespace(int32="int32", uint32="uint32", uint16="uint16", float32="float32")
    val = lambda v, like: v.a if isinstance(v, T) else np.asarray(v).astype(like.a.dtype)  # noqa: E731

    def binary(fn):
        def op(a, b):
            like = a if isinstance(a, T) else b
            with np.errstate(all="ignore"):
                return T(fn(val(a, like), val(b, like)).astype(like.a.dtype), like.dtype)

        return op

    def compare(fn):
        return lambda a, b: T(fn(a.a, val(b, a)).astype(np.int32), "int32")

    tt.add, tt.subtract, tt.multiply = binary(np.add), binary(np.subtract), binary(np.multiply)
    tt.bitwise_and, tt.bitwise_or = binary(np.bitwise_and), binary(np.bitwise_or)
    tt.bitwise_xor = binary(np.bitwise_xor)
    tt.bitwise_left_shift = binary(lambda a, n: np.left_shift(a, n))
    tt.bitwise_right_shift = binary(lambda a, n: np.right_shift(a, n))  # arithmetic on int32, as TT-NN's
    tt.bitwise_not = lambda a: T(~a.a, a.dtype)
    tt.lt, tt.gt, tt.eq = compare(np.less), compare(np.greater), compare(np.equal)
    tt.ne, tt.ge = compare(np.not_equal), compare(np.greater_equal)
    tt.logical_and = lambda a, b: T(((a.a != 0) & (b.a != 0)).astype(np.int32), "int32")
    tt.logical_or = lambda a, b: T(((a.a != 0) | (b.a != 0)).astype(np.int32), "int32")
    tt.logical_not = lambda a: T((a.a == 0).astype(np.int32), "int32")
    tt.abs = lambda a: T(np.abs(a.a), a.dtype)

    def where(c, x, y):
        like = x if isinstance(x, T) else y
        return T(np.where(c.a != 0, val(x, like), val(y, like)), like.dtype)

    tt.where = where
    tt.full_like = lambda like, v: T(np.full(like.shape, v, like.a.dtype), like.dtype)
    tt.typecast = lambda a, dtype: T(a.a.astype(_NP[dtype]), dtype)
    tt.bitcast = lambda a, dtype: T(a.a.view(_NP[dtype]), dtype)
    tt.reshape = lambda a, shape: T(a.a.reshape(shape), a.dtype)
    tt.slice = lambda a, start, end: T(a.a[tuple(slice(s, e) for s, e in zip(start, end))], a.dtype)
    tt.concat = lambda ts, dim: T(np.concatenate([t.a for t in ts], axis=dim), ts[0].dtype)

    def exact_int32(fn):  # TT-NN's int32 reductions: the int32 total (the limbs keep it in range)
        def op(a, dim=None, keepdim=False):
            r = fn(a.a.astype(np.int64), axis=dim, keepdims=keepdim)
            assert a.dtype != "int32" or (np.abs(r) < 2**31).all(), "an int32 partial sum left int32"
            return T(r.astype(a.a.dtype), a.dtype)

        return op

    tt.sum, tt.max = exact_int32(np.sum), exact_int32(np.max)
    tt.cumsum = lambda a, dim: exact_int32(lambda x, axis, keepdims: np.cumsum(x, axis=axis))(a, dim)
    return tt


TT = fake_ttnn()
EDGES = np.array([0, 1, -1, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 2**32 - 1, 2**32, 2**62 + 12345,
                  2**63 - 1, -(2**63), -(2**63) + 1, 0xFFFF, 0x10000, -0x10000, 123456789012345], np.int64)  # fmt: skip


def card(x: np.ndarray) -> T:
    """An int64 array as the card holds it: int32 (low, high) words, shape (*s, 2)."""
    return T(np.ascontiguousarray(x, np.int64).view(np.int32).reshape(*x.shape, 2), "int32")


def host(t: T) -> np.ndarray:
    return np.ascontiguousarray(t.a.astype(np.int32)).view(np.int64).reshape(t.shape[:-1])


def operands(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rand = np.concatenate([rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64, endpoint=True),
                           rng.integers(-(2**33), 2**33, n, dtype=np.int64)])  # fmt: skip
    a = np.concatenate([np.repeat(EDGES, EDGES.size), rand])
    b = np.concatenate([np.tile(EDGES, EDGES.size), rng.permutation(rand)])
    return a, b


def spec(x: np.ndarray, dt: DType = DType.INT64) -> TensorSpec:
    return TensorSpec(x.shape, dt)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"])
def test_int64_binary_word_programs_equal_cpu_int64(op):
    a, b = operands()
    want = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
            "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}[op]  # fmt: skip
    with np.errstate(over="ignore"):
        expected = want(a, b)
    out = wide.card_impl(op, [spec(a), spec(b)], [spec(a)])(TT, [card(a), card(b)], [spec(a), spec(b)], {}, [spec(a)])
    np.testing.assert_array_equal(host(out), expected)


@pytest.mark.parametrize("op", ["lt", "gt", "le", "ge", "eq", "ne"])
def test_int64_compares_are_lexicographic_on_the_words(op):
    a, b = operands()
    a = np.concatenate([a, a])  # equal pairs too
    b = np.concatenate([b, a[: b.size]])
    expected = getattr(np, {"lt": "less", "gt": "greater", "le": "less_equal", "ge": "greater_equal",
                            "eq": "equal", "ne": "not_equal"}[op])(a, b)  # fmt: skip
    out_spec = [TensorSpec(a.shape, DType.BOOL)]
    out = wide.card_impl(op, [spec(a), spec(b)], out_spec)(TT, [card(a), card(b)], [spec(a), spec(b)], {}, out_spec)
    np.testing.assert_array_equal(out.a != 0, expected)


def test_int64_with_python_numbers_and_int32_tensors():
    a, _ = operands(50)
    for v in (2**31, -(2**40) + 7, 2**63 - 1, 3):
        s = [spec(a), ScalarSpec(v)]
        out = wide.card_impl("mul", s, [spec(a)])(TT, [card(a), v], s, {}, [spec(a)])
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(host(out), a * np.int64(v))
    i32 = np.arange(-50, 50, dtype=np.int32) * 40_000_000
    s = [TensorSpec(i32.shape, DType.INT32), spec(a[:100])]
    out = wide.card_impl("add", s, [spec(a[:100])])(TT, [T(i32, "int32"), card(a[:100])], s, {}, [spec(a[:100])])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(host(out), i32.astype(np.int64) + a[:100])


@pytest.mark.parametrize("op", ["neg", "abs", "square", "sign", "bitwise_not"])
def test_int64_unary_word_programs(op):
    a, _ = operands()
    want = {"neg": np.negative, "abs": np.abs, "square": np.square, "sign": np.sign, "bitwise_not": np.invert}[op]
    with np.errstate(over="ignore"):
        expected = want(a)
    out = wide.card_impl(op, [spec(a)], [spec(a)])(TT, [card(a)], [spec(a)], {}, [spec(a)])
    np.testing.assert_array_equal(host(out), expected)


def test_int64_sum_and_cumsum_add_8_bit_limbs_exactly():
    rng = np.random.default_rng(1)
    x = rng.integers(-(2**63), 2**63 - 1, (6, 300), dtype=np.int64, endpoint=True)
    x[0] = 2**63 - 1  # a row that wraps, as the CPU's int64 does
    x[1] = 2**40
    with np.errstate(over="ignore"):
        for dims, keep in ((1, False), (0, True), (None, False)):
            out_shape = np.sum(x, axis=dims, keepdims=keep).shape
            o = TensorSpec(out_shape, DType.INT64)
            got = wide.INT64_TTNN["sum"](TT, [card(x)], [spec(x)], {"dims": dims, "keepdim": keep}, [o])
            np.testing.assert_array_equal(host(got), np.sum(x, axis=dims, keepdims=keep))
        got = wide.INT64_TTNN["cumsum"](TT, [card(x)], [spec(x)], {"dim": 1}, [spec(x)])
        np.testing.assert_array_equal(host(got), np.cumsum(x, axis=1))
    assert SUM_MAX_TERMS * 255 + 2**23 < 2**31  # the limb totals plus the carry chain stay inside int32


def test_the_checks_flag_exactly_the_values_and_results_outside_int32():
    a = np.array([0, 2**31 - 1, -(2**31), 5], np.int64)
    lo, flag = wide.narrow(TT, wide.words(TT, card(a)))
    assert int(flag.a) == 0 and (lo.a == a).all()
    for bad in (2**31, -(2**31) - 1, 2**40):
        _, flag = wide.narrow(TT, wide.words(TT, card(np.append(a, bad))))
        assert int(flag.a) == 1, bad
    # overflow of an int32 result, judged against a float32 shadow of the same op (here: products)
    rng = np.random.default_rng(2)
    x = rng.integers(-(2**31), 2**31, 20000, dtype=np.int64)
    y = np.concatenate([rng.integers(-4, 5, 10000), rng.integers(-70000, 70000, 10000)]).astype(np.int64)
    true = x * y
    r = T((true & 0xFFFFFFFF).astype(np.uint32).view(np.int32), "int32")  # the wrapped int32 product
    shadow = T((x.astype(np.float32) * y.astype(np.float32)).astype(np.float32), "float32")
    for k in range(0, x.size, 1000):
        sl = slice(k, k + 1000)
        got = int(wide.overflowed(TT, T(r.a[sl], "int32"), T(shadow.a[sl], "float32")).a)
        assert got == int(((true[sl] < -(2**31)) | (true[sl] >= 2**31)).any())
    each = [int(wide.overflowed(TT, T(r.a[i : i + 1], "int32"), T(shadow.a[i : i + 1], "float32")).a)
            for i in range(0, 20000, 7)]  # fmt: skip
    assert each == [int(not -(2**31) <= true[i] < 2**31) for i in range(0, 20000, 7)]


def test_float16_widens_exactly_and_packs_as_the_simulator_stores():
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    f = wide.half_to_float(TT, T(every, "uint16")).a
    want = every.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(f.view(np.uint32), want.view(np.uint32))  # NaN payloads and -0.0 too
    rng = np.random.default_rng(3)
    bits = np.concatenate([rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32),
                           want.view(np.uint32), want.view(np.uint32) + 1, want.view(np.uint32) - 1,
                           (want.view(np.uint32) & ~np.uint32(0x1FFF)) | np.uint32(0x1000),  # exact ties
                           np.array([0x477FEFFF, 0x477FF000, 0x7F800000, 0xFF800000, 0x33000000, 0x33000001,
                                     0x387FFFFF, 0x38800000], np.uint32)])  # fmt: skip
    x = bits.view(np.float32)
    got = wide.float_to_half(TT, T(x, "float32")).a
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], ref[~nan])
    assert np.isnan(got[nan].view(np.float16)).all()


def test_a_float16_op_on_the_card_widens_computes_and_packs():
    calls = []

    def add(tt, inputs, attrs, numerics, out_specs):
        calls.append([s.dtype for s in out_specs])
        return tt.add(inputs[0], inputs[1])

    h = (np.arange(-20, 20, dtype=np.float32) / 7).astype(np.float16)
    s = [TensorSpec(h.shape, DType.FLOAT16), ScalarSpec(0.1)]
    out = wide.half_op(add)(TT, [T(h.view(np.uint16), "uint16"), np.float32(0.1)], s, {}, None,
                            [TensorSpec(h.shape, DType.FLOAT16)])  # fmt: skip
    assert calls == [[DType.FLOAT32]]
    np.testing.assert_array_equal(out.a.view(np.float16), (h.astype(np.float32) + np.float32(0.1)).astype(np.float16))
