"""The random family on the simulator: the generator's known answers, reproducibility, and the distributions.

Statistical bounds are set for a fixed seed with a wide margin (5 standard errors, or the 0.1% Kolmogorov-Smirnov
critical value 1.95 / sqrt(n)), so they hold for this seed yet fail for a wrong mapping (a shifted mean, half the
variance, a biased bit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import DtypeError
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import random as rnd

N = 40_000


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def draw(dev, op, inputs=(), **attrs):
    outs = kk.run(op, list(inputs), attrs, device=dev)
    vals = [kk.to_numpy(o) for o in outs]
    return vals if len(vals) > 1 else vals[0]


def ks_stat(sample, cdf):
    """The Kolmogorov-Smirnov distance between ``sample`` and a continuous ``cdf``."""
    x = np.sort(np.asarray(sample, np.float64))
    f = cdf(x)
    n = x.size
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


# ---------------------------------------------------------------------------------------------- generator
@pytest.mark.parametrize(("ctr", "key", "out"), [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])  # fmt: skip
def test_philox4x32_10_known_answers(ctr, key, out):
    """Random123's published vectors (its kat_vectors file) for Philox4x32-10."""
    assert tuple(int(v) for v in rnd.philox4x32(np.array([ctr], np.uint32), key)[0]) == out


def test_words_are_indexed_by_block_and_op_offset():
    w = rnd.words((5, 9), 10)
    assert np.array_equal(w[:4], rnd.philox4x32(np.array([[0, 0, 9, 0]], np.uint32), (5, 0))[0])
    assert np.array_equal(w[4:8], rnd.philox4x32(np.array([[1, 0, 9, 0]], np.uint32), (5, 0))[0])
    assert np.array_equal(rnd.words((5, 9), 3), w[:3])  # a prefix: more elements never change earlier ones
    assert not np.array_equal(rnd.words((5, 10), 10), w)


# ------------------------------------------------------------------------------------------ reproducibility
@pytest.mark.parametrize("op", ["uniform", "normal", "randint", "randperm"])
def test_manual_seed_replays_and_successive_draws_differ(dev, op):
    attrs = {"n": 100} if op == "randperm" else {"shape": (7, 33), "high": 1000} if op == "randint" else {
        "shape": (7, 33)}  # fmt: skip
    kk.manual_seed(dev, 1234)
    first, second = draw(dev, op, **attrs), draw(dev, op, **attrs)
    kk.manual_seed(dev, 1234)
    assert np.array_equal(draw(dev, op, **attrs), first)
    assert np.array_equal(draw(dev, op, **attrs), second)
    assert not np.array_equal(first, second)
    kk.manual_seed(dev, 1235)
    assert not np.array_equal(draw(dev, op, **attrs), first)


def test_rng_state_round_trips(dev):
    kk.manual_seed(dev, 77)
    state = kk.rng_state(dev)
    a = draw(dev, "uniform", shape=(50,))
    kk.set_rng_state(dev, state)
    assert np.array_equal(draw(dev, "uniform", shape=(50,)), a)


def test_the_stream_position_not_the_shape_fixes_the_numbers(dev):
    kk.manual_seed(dev, 5)
    big = draw(dev, "uniform", shape=(64,))
    kk.manual_seed(dev, 5)
    assert np.array_equal(draw(dev, "uniform", shape=(8, 8)).ravel(), big)


# -------------------------------------------------------------------------------------------- distributions
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_uniform_range_moments_and_ks(dev, dtype):
    kk.manual_seed(dev, 1)
    u = draw(dev, "uniform", shape=(N,), dtype=dtype).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / N)
    if dtype == "float32":
        assert ks_stat(u, lambda x: x) < 1.95 / math.sqrt(N)
    else:
        assert np.array_equal(u, round_bfloat16(u.astype(np.float32)))
        assert ks_stat(u, lambda x: x) < 1.95 / math.sqrt(N) + 2.0**-8  # the bf16 grid is up to 2^-8 wide
    v = draw(dev, "uniform", shape=(N,), low=-3.0, high=5.0, dtype=dtype).astype(np.float64)
    assert v.min() >= -3.0 and v.max() < 5.0 and abs(v.mean() - 1.0) < 5 * 8 * math.sqrt(1 / 12 / N)


def test_uniform_never_rounds_onto_high(dev):
    kk.manual_seed(dev, 3)
    v = draw(dev, "uniform", shape=(N,), low=255.0, high=256.0, dtype="bfloat16")  # grid step 1: all round up
    assert v.max() < 256.0 and set(np.unique(v)) == {255.0}
    assert rnd.below(256.0, rnd.DType.BFLOAT16) == 255.0 and rnd.below(-1.0, rnd.DType.BFLOAT16) == -1.0078125
    assert rnd.below(0.1, rnd.DType.FLOAT32) < np.float32(0.1) <= 0.1 + 1e-8


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_normal_moments_and_ks(dev, dtype):
    kk.manual_seed(dev, 2)
    z = draw(dev, "normal", shape=(N,), dtype=dtype).astype(np.float64)
    assert abs(z.mean()) < 5 / math.sqrt(N)
    assert abs(z.var() - 1.0) < 5 * math.sqrt(2 / N)
    assert abs(np.mean(z**3)) < 5 * math.sqrt(15 / N)  # symmetric
    assert abs(np.mean(z**4) - 3.0) < 5 * math.sqrt(96 / N)  # normal kurtosis
    slack = 0.0 if dtype == "float32" else 2.0**-8  # bf16 moves each value by at most 2^-8 relative
    assert ks_stat(z, lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))) < 1.95 / math.sqrt(N) + slack
    w = draw(dev, "normal", shape=(N,), mean=3.0, std=0.5, dtype=dtype).astype(np.float64)
    assert abs(w.mean() - 3.0) < 5 * 0.5 / math.sqrt(N) and abs(w.std() - 0.5) < 0.01


def test_randint_is_uniform_on_its_range(dev):
    kk.manual_seed(dev, 4)
    k = draw(dev, "randint", shape=(N,), low=-5, high=7)
    assert k.dtype == np.int32 and k.min() == -5 and k.max() == 6
    counts = np.bincount(k + 5, minlength=12)
    chi2 = np.sum((counts - N / 12) ** 2 / (N / 12))
    assert chi2 < 31.3  # chi-square, 11 degrees of freedom, p = 0.001
    wide = draw(dev, "randint", shape=(N,), low=-(2**31), high=2**31 - 1)
    assert wide.min() < -(2**30) and wide.max() > 2**30


def test_randperm_is_a_permutation(dev):
    kk.manual_seed(dev, 8)
    p = draw(dev, "randperm", n=1000)
    assert p.dtype == np.int32 and np.array_equal(np.sort(p), np.arange(1000))
    assert draw(dev, "randperm", n=0).shape == (0,)
    firsts = np.array([draw(dev, "randperm", n=4)[0] for _ in range(400)])
    assert np.all(np.abs(np.bincount(firsts, minlength=4) - 100) < 5 * math.sqrt(400 * 0.25 * 0.75))


def test_bernoulli_rates_from_a_tensor_and_a_number(dev):
    kk.manual_seed(dev, 6)
    probs = np.repeat(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), N // 5)
    p = kk.from_numpy(dev, probs, "float32")
    b = draw(dev, "bernoulli", [p])
    assert b.dtype == np.float32 and set(np.unique(b)) <= {0.0, 1.0}
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        rate = b[probs == q].mean()
        assert abs(rate - q) <= 5 * math.sqrt(q * (1 - q) / (N // 5)), (q, rate)
    x = kk.from_numpy(dev, np.zeros((N,), np.float32), "bfloat16")
    c = draw(dev, "bernoulli", [x], p=0.25)
    assert abs(c.mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / N)
    i = draw(dev, "bernoulli", [x], p=0.25, dtype="int32")
    assert i.dtype == np.int32 and set(np.unique(i)) <= {0, 1}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dropout_scales_kept_values_and_reports_its_mask(dev, dtype):
    kk.manual_seed(dev, 9)
    rng = np.random.default_rng(0)
    x = kk.from_numpy(dev, rng.normal(size=(200, 200)).astype(np.float32), dtype)
    xv = kk.to_numpy(x).astype(np.float64)
    out, mask = draw(dev, "dropout", [x], p=0.3)
    assert mask.dtype == np.bool_ and out.dtype == np.float32
    assert abs(mask.mean() - 0.7) < 5 * math.sqrt(0.21 / mask.size)
    scale = np.float32(1 / 0.7)
    kept = (xv * scale).astype(np.float32)  # the fp32 SFPU product, then the store
    want = np.where(mask, round_bfloat16(kept) if dtype == "bfloat16" else kept, 0.0)
    assert np.array_equal(out, want)
    kk.manual_seed(dev, 9)
    assert np.array_equal(draw(dev, "dropout", [x], p=0.3)[1], mask)


def test_dropout_edge_probabilities_and_eval(dev):
    x = kk.from_numpy(dev, np.arange(1, 11, dtype=np.float32), "float32")
    out, mask = draw(dev, "dropout", [x], p=0.0)
    assert np.array_equal(out, np.arange(1, 11)) and mask.all()
    out, mask = draw(dev, "dropout", [x], p=1.0)
    assert not out.any() and not mask.any()
    out, mask = draw(dev, "dropout", [x], p=0.9, train=False)
    assert np.array_equal(out, np.arange(1, 11)) and mask.all()


def test_multinomial_with_and_without_replacement(dev):
    kk.manual_seed(dev, 10)
    w = np.array([[1.0, 0.0, 3.0, 4.0], [0.0, 2.0, 0.0, 2.0]], np.float32)
    t = kk.from_numpy(dev, w, "float32")
    s = draw(dev, "multinomial", [t], num_samples=N // 4, replacement=True)
    assert s.shape == (2, N // 4) and s.dtype == np.int32
    for r in range(2):
        freq = np.bincount(s[r], minlength=4) / s.shape[1]
        p = w[r] / w[r].sum()
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / s.shape[1]) + 1e-12), (r, freq, p)
    firsts = []
    for _ in range(300):
        d = draw(dev, "multinomial", [t], num_samples=2)
        assert set(d[1]) == {1, 3} and len(set(d[0])) == 2 and 1 not in d[0]
        firsts.append(d[0, 0])
    freq = np.bincount(firsts, minlength=4) / 300  # the first draw follows the weights: 1/8, 0, 3/8, 4/8
    assert np.all(np.abs(freq - np.array([1, 0, 3, 4]) / 8) < 5 * math.sqrt(0.25 / 300))
    one = draw(dev, "multinomial", [kk.from_numpy(dev, np.array([0.0, 1.0, 0.0], np.float32))], num_samples=5,
               replacement=True)  # fmt: skip
    assert one.shape == (5,) and np.all(one == 1)


# -------------------------------------------------------------------------------------------------- errors
def test_bad_arguments_raise_typed_errors(dev):
    with pytest.raises(ShapeError, match="shape="):
        kk.run("uniform", [], {}, device=dev)
    with pytest.raises(ShapeError, match="low < high"):
        kk.run("uniform", [], {"shape": (2,), "low": 1.0, "high": 1.0}, device=dev)
    with pytest.raises(DtypeError, match="floats"):
        kk.run("normal", [], {"shape": (2,), "dtype": "int32"}, device=dev)
    with pytest.raises(DtypeError, match="does not fit"):
        kk.run("randint", [], {"shape": (2,), "low": -1, "high": 5, "dtype": "uint32"}, device=dev)
    x = kk.from_numpy(dev, np.ones(4, np.float32))
    with pytest.raises(ShapeError, match="0 <= p <= 1"):
        kk.run("dropout", [x], {"p": 1.5})
    with pytest.raises(ShapeError, match="without replacement"):
        kk.run("multinomial", [x], {"num_samples": 5})
    with pytest.raises(DtypeError, match="probabilities"):
        kk.run("bernoulli", [kk.from_numpy(dev, np.ones(4, np.int32))])
    assert draw(dev, "uniform", shape=(3,)).shape == (3,)  # the device is still usable


def test_random_ops_are_registered_as_random_with_a_cost_and_a_ttnn_call():
    for op in ("uniform", "normal", "randint", "randperm", "bernoulli", "dropout", "multinomial"):
        impl = kk.lookup(op, "sim")
        assert impl is not None and impl.random and impl.estimate is not None, op
    for op in ("uniform", "normal", "randint", "randperm", "bernoulli", "dropout"):
        assert kk.lookup(op, "ttnn").random, op
