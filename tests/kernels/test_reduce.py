"""The reduce family against float64 references computed from the same (device-rounded) inputs.

Tolerances, from the formats: one bf16 rounding is at most 2^-8 relative (8 significant bits, round to nearest);
fp32 data enters the FPU truncated to TF32 and SrcA's multiplier uses 9 of its 10 mantissa bits: at most 2^-9
relative per element through a reduce's scaler multiply, 2^-10 through an add; a K-term fp32 sum
adds at most K * 2^-24 of the sum of magnitudes. A bf16 partial result stored between TT-NN's steps is one more bf16
rounding of a partial sum, bounded by 2^-8 of the sum of magnitudes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kohakutt import hal, numerics
from kohakutt import kernels as kk
from kohakutt.errors import DtypeError
from kohakutt.ir import DType, Graph, TensorSpec
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels import registry

BF16_U = 2.0**-8  # bf16 unit roundoff
TF32_U = 2.0**-10  # truncation to TF32 in a source register
SRCA_U = 2.0**-9  # what SrcA's multiplier keeps of a TF32 value


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def put(dev, a, dtype="float32", layout="row_major"):
    """The device tensor and the values it holds, as float64 (or the integer / bool array)."""
    t = kk.from_numpy(dev, np.asarray(a), dtype, layout)
    v = kk.to_numpy(t)
    return t, (v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v)


def run(op, inputs, attrs=None, provider=None):
    outs = kk.run(op, inputs, attrs or {}, provider=provider)
    return [kk.to_numpy(o) for o in outs] if len(outs) > 1 else kk.to_numpy(outs[0])


def np_axes(dims):
    return None if dims is None or dims == () else dims


RNG = np.random.default_rng(20261202)
X4 = RNG.standard_normal((2, 3, 33, 40)).astype(np.float32)


# ------------------------------------------------------------------------------------------------------- sum / mean
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("dims", [None, 0, -1, -2, (1, 2), (0, 2), (-1, -2), (0, 1, 3), ()])
def test_sum_and_mean_match_float64(dev, dtype, dims):
    t, x = put(dev, X4, dtype)
    ax = np_axes(dims)
    mag = np.abs(x).sum(axis=ax)
    n = x.size // mag.size
    # bf16: two bf16 roundings of partial sums at most; fp32: TF32 truncation of every element + fp32 accumulation
    tol = (2 * BF16_U if dtype == "bfloat16" else SRCA_U) * mag + n * 2.0**-24 * mag + 1e-30
    got = run("sum", [t], {"dims": dims})
    assert got.shape == x.sum(axis=ax).shape
    assert np.all(np.abs(got - x.sum(axis=ax)) <= tol)
    for provider in ("ttnn", "host"):
        # TT-NN's truncated bf16 1/N scaler adds up to 2^-7 relative (applied twice over H and W together)
        extra = (2 * 2.0**-7 if provider == "ttnn" and dtype == "bfloat16" else 2.0**-23) * mag / n
        got = run("mean", [t], {"dims": dims}, provider)
        assert np.all(np.abs(got - x.mean(axis=ax)) <= tol / n + extra), provider


def test_keepdim_and_negative_dims_shapes(dev):
    t, x = put(dev, X4, "bfloat16")
    for op, ref in (("sum", np.sum), ("amax", np.max), ("mean", np.mean), ("prod", np.prod), ("all", np.all)):
        for dims in ((-1,), (0, -2), None):
            got = run(op, [t], {"dims": dims, "keepdim": True})
            assert got.shape == ref(x, axis=np_axes(dims), keepdims=True).shape, (op, dims)
    assert run("sum", [t], {"dims": [3, -3]}).shape == (2, 33)


def test_mean_scaler_is_truncated_bf16_on_ttnn_and_exact_on_host(dev, knobs):
    t, _ = put(dev, [[3.0, 3.0, 3.0]], "bfloat16")
    s = np.float32(1 / 3).view(np.uint32) & np.uint32(0xFFFF0000)  # the reader keeps the top 16 bits
    scaler = float(s.view(np.float32))
    assert scaler == 0.33203125
    assert run("mean", [t], {"dims": -1}, "ttnn")[0] == cm.round_to(np.float32(9 * scaler))[()] == 2.984375
    assert run("mean", [t], {"dims": -1}, "host")[0] == 3.0
    for custom in (0, 1):  # no own program for mean: the knob leaves bf16 means on TT-NN's kernel, as on a card
        knobs(KTT_CUSTOM_KERNELS=custom)
        assert run("mean", [t], {"dims": -1})[0] == 2.984375
    # over H and W together TT-NN's scaler tile holds sqrt(1/N), truncated, and the LLK applies it twice
    ones, _ = put(dev, np.ones((3, 3), np.float32), "bfloat16")
    root = float((np.float32(math.sqrt(1 / 9)).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32))
    assert run("mean", [ones], {}, "ttnn") == cm.round_to(np.float32(9 * root * root))[()] == 0.9921875
    assert run("mean", [ones], {}, "host") == 1.0
    # on many width-3 rows the exact scaler is measurably better
    t, x = put(dev, RNG.uniform(1, 2, (256, 3)), "bfloat16")
    err = {p: np.abs(run("mean", [t], {"dims": 1}, p) - x.mean(1)).mean() for p in ("ttnn", "host")}
    assert err["host"] < err["ttnn"] / 2


def test_fp32_accumulation_beats_bf16_on_a_long_sum(dev):
    t, x = put(dev, RNG.standard_normal((16, 4096)), "bfloat16")
    ref = x.sum(-1)
    err = {}
    for acc in (True, False):  # the FPU reduce (float32 sums are SFPU adds unless fp32_reduce="tf32")
        with numerics(fp32_acc=acc, fp32_reduce="tf32"):
            err[acc] = np.abs(run("sum", [t], {"dims": -1, "dtype": "float32"}) - ref).mean()
    assert err[True] < 1e-3 < err[False]  # bf16 DST rounds the running total after every tile (~2^-9 of it)
    assert err[False] < 2 * BF16_U * np.abs(x).sum(-1).mean()


def test_fidelity_cuts_the_data_at_lofi(dev):
    t, x = put(dev, RNG.uniform(1, 2, (64, 256)), "bfloat16")
    ref = x.sum(-1)
    err = {}
    for fid in ("LoFi", "HiFi2", "HiFi4"):  # the FPU reduce, as above
        with numerics(fidelity=fid, fp32_reduce="tf32"):
            err[fid] = np.abs(run("sum", [t], {"dims": -1, "dtype": "float32"}) - ref).max()
    assert err["HiFi4"] <= 256 * 2.0**-24 * 512  # exact products, fp32 accumulation
    assert err["HiFi2"] == err["HiFi4"]  # bf16 data fits SrcA's two phases
    assert err["LoFi"] > 100 * err["HiFi4"]  # LoFi keeps 5 significant bits of SrcA
    assert err["LoFi"] <= 2.0**-4 * np.abs(x).sum(-1).max()


def test_sum_dtypes_and_integer_wrapping(dev):
    t, _ = put(dev, np.array([2**31 - 1, 1, 5], np.int32), "int32")
    (out,) = kk.run("sum", [t])
    assert out.dtype is DType.INT32 and kk.to_numpy(out) == -(2**31) + 5  # int32 arithmetic wraps
    b, _ = put(dev, np.array([[True, False, True], [True, True, True]]), "bool")
    (out,) = kk.run("sum", [b], {"dims": 1})
    assert out.dtype is DType.INT32 and kk.to_numpy(out).tolist() == [2, 3]
    u, _ = put(dev, np.array([200, 100], np.uint8), "uint8")
    assert run("sum", [u]) == 300
    big, _ = put(dev, np.array([2**30 + 1, 2**30, -5], np.int32), "int32")
    assert run("amax", [big]) == 2**30 + 1 and run("amin", [big]) == -5  # exact, not through a float
    assert run("prod", [big], {"dims": 0}) == np.int32(np.int64(2**30 + 1) * 2**30 * -5 % 2**32 - 2**32)
    l64, _ = put(dev, np.array([1, 2, 3], np.int64), "int64")
    (out,) = kk.run("sum", [l64])
    assert out.dtype is DType.INT64 and kk.to_numpy(out) == 6
    with pytest.raises(DtypeError, match=r"mean needs a float tensor, got int32.*dtype='float32'"):
        kk.run("mean", [big])
    assert run("mean", [big], {"dtype": "float32"}) == pytest.approx((2**31 - 4) / 3, rel=2**-20)
    # sum(dtype=float32) of bf16 data accumulates and returns fp32
    t, x = put(dev, RNG.standard_normal((4, 1000)), "bfloat16")
    (out,) = kk.run("sum", [t], {"dims": -1, "dtype": "float32"})
    assert out.dtype is DType.FLOAT32
    assert np.abs(kk.to_numpy(out) - x.sum(-1)).max() < np.abs(run("sum", [t], {"dims": -1}) - x.sum(-1)).max()


def test_block_float_input(dev):
    t, x = put(dev, RNG.standard_normal((40, 70)), "bfloat8_b", "tile")
    (out,) = kk.run("sum", [t], {"dims": -1})
    assert out.dtype is DType.BFLOAT16
    assert np.all(np.abs(kk.to_numpy(out) - x.sum(-1)) <= 2 * BF16_U * np.abs(x).sum(-1))


# ------------------------------------------------------------------------------------------------------ max / min
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_max_of_all_negative_rows_never_sees_the_padding(dev, dtype):
    rows = -(np.arange(1, 34, dtype=np.float32)[None, :] + 5 + np.arange(4, dtype=np.float32)[:, None] * 100)
    t, x = put(dev, rows.astype(np.int32) if dtype == "int32" else rows, dtype)  # width 33: one tile + 1 column
    for op in ("max", "amax"):
        assert run(op, [t], {"dims": -1}).tolist() == [-6, -106, -206, -306]
        assert run(op, [t], {"dims": 0}).tolist() == x.max(0).tolist()  # H = 4: 28 padded rows
        assert run(op, [t]) == -6
    assert run("min", [t], {"dims": -1}).tolist() == x.min(-1).tolist()
    assert run("amin", [t]) == -338
    pos, _ = put(dev, -rows.astype(np.int32) if dtype == "int32" else -rows, dtype)
    assert run("min", [pos], {"dims": -1}).tolist() == [6, 106, 206, 306]  # +inf padding for min
    col, _ = put(dev, rows.T.copy(), dtype)  # (33, 4): 33 rows over H
    assert run("max", [col], {"dims": 0}).tolist() == [-6, -106, -206, -306]
    one_d, _ = put(dev, rows[0], dtype)
    assert run("max", [one_d]) == -6


def test_max_nan_and_fp32_source_register(dev):
    t, _ = put(dev, [[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], "float32")
    got = run("max", [t], {"dims": 1})
    assert np.isnan(got[0]) and got[1] == 3.0
    assert np.isnan(run("amin", [t]))
    # GMPOOL compares the values SrcA holds: fp32 truncated to TF32 (bf16 with a 16-bit DST)
    fine, _ = put(dev, [1.0 + 2.0**-20, 1.0 + 2.0**-9], "float32")
    assert run("max", [fine]) == 1.0 + 2.0**-9
    one, _ = put(dev, [1.0 + 2.0**-20], "float32")
    assert run("max", [one]) == 1.0
    with numerics(fp32_acc=False):
        assert run("max", [fine]) == 1.0  # 2^-9 is below bf16's 7 mantissa bits


def test_max_bool(dev):
    t, _ = put(dev, np.array([[False, True], [False, False]]), "bool")
    assert run("max", [t], {"dims": 1}).tolist() == [True, False]


# --------------------------------------------------------------------------------------------- arg-reductions
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_argmax_argmin_match_torch_with_ties(dev, dtype):
    data = RNG.integers(-3, 4, (5, 37, 6))
    t, x = put(dev, data.astype(np.int32 if dtype == "int32" else np.float32), dtype)
    tx = torch.from_numpy(np.asarray(x))
    for op, ref in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        for dim in (0, 1, -1, None):
            for keep in (False, True):
                got = run(op, [t], {"dim": dim, "keepdim": keep})
                want = ref(tx, dim=dim, keepdim=keep).numpy()
                assert got.dtype == np.int32 and got.shape == want.shape and np.array_equal(got, want), (op, dim)


def test_arg_and_values_with_nan_match_torch(dev):
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, 1.0], [1.0, 1.0, 0.0, 0.0]], np.float32)
    t, _ = put(dev, x)
    tx = torch.from_numpy(x)
    assert run("argmax", [t], {"dim": 1}).tolist() == tx.argmax(1).tolist() == [1, 1, 0]
    assert run("argmin", [t], {"dim": 1}).tolist() == tx.argmin(1).tolist() == [1, 3, 2]
    assert run("argmax", [t]) == tx.argmax() == 1
    for op, ref in (("max_with_indices", torch.max), ("min_with_indices", torch.min)):
        for dim in (0, 1, -1):
            v, i = run(op, [t], {"dim": dim, "keepdim": dim == 0})
            rv, ri = ref(tx, dim, keepdim=dim == 0)
            assert np.array_equal(v, rv.numpy(), equal_nan=True) and np.array_equal(i, ri.numpy()), (op, dim)
            assert i.dtype == np.int32


# ------------------------------------------------------------------------------------------------------ empties
def test_empty_reductions(dev):
    e, _ = put(dev, np.zeros((0,), np.float32))
    assert run("sum", [e]) == 0 and run("prod", [e]) == 1 and np.isnan(run("mean", [e]))
    assert run("all", [e]) and not run("any", [e]) and run("count_nonzero", [e]) == 0
    assert run("logsumexp", [e]) == -np.inf and np.isnan(run("var", [e])) and run("vector_norm", [e]) == 0
    e2, _ = put(dev, np.zeros((2, 0), np.float32), "bfloat16")
    assert run("sum", [e2], {"dims": 1}).tolist() == [0, 0]
    assert run("amax", [e2], {"dims": 0}).shape == (0,)  # nothing reduced over an empty dim: empty result
    for op in ("max", "amin", "argmax"):
        with pytest.raises(ShapeError, match="size 0"):
            kk.run(op, [e2], {"dims": 1} if op != "argmax" else {"dim": 1})
    with pytest.raises(ShapeError, match="size 0"):
        kk.run("max", [e])
    with pytest.raises(ShapeError, match="empty dim"):
        kk.run("vector_norm", [e], {"p": float("inf")})
    assert run("sum", [e2], {"dims": 1}).shape == (2,)  # the device is still usable


def test_zero_d_and_one_d(dev):
    s, _ = put(dev, np.float32(2.5), "bfloat16")
    for op in ("sum", "mean", "amax", "amin", "prod", "logsumexp"):
        for dims in (None, 0, -1):
            got = run(op, [s], {"dims": dims})
            assert got.shape == () and got == 2.5, op  # logsumexp of one value is that value
    assert run("argmax", [s], {"dim": 0}) == 0 and run("cumsum", [s], {"dim": 0}) == 2.5
    assert np.isnan(run("var", [s])) and run("var", [s], {"correction": 0}) == 0
    v, i = run("max_with_indices", [s], {"dim": -1})
    assert v == 2.5 and i == 0
    t, x = put(dev, RNG.standard_normal(100), "bfloat16")
    assert abs(run("sum", [t]) - x.sum()) <= 2 * BF16_U * np.abs(x).sum()
    assert run("argmin", [t]) == x.argmin()


# -------------------------------------------------------------------------------------------------- prod / var
def test_prod_matches_float64(dev):
    t, x = put(dev, RNG.uniform(0.8, 1.25, (6, 35, 7)), "bfloat16")
    for dims in (0, 1, (0, 2), None):
        ref = np.prod(x, axis=dims)
        k = x.size // np.size(ref)
        # fp32 DST: each of the K-1 multiplies re-reads a partial product through SrcA (9 mantissa bits) and SrcB
        # (TF32); then one bf16 rounding of the result
        bound = (k - 1) * (2.0**-9 + 2.0**-10) + BF16_U
        err = np.abs(run("prod", [t], {"dims": dims}) - ref) / np.abs(ref)
        assert np.all(err <= bound), dims
        with numerics(fp32_acc=False):  # bf16 DST: each product rounded to bf16
            err16 = np.abs(run("prod", [t], {"dims": dims}) - ref) / np.abs(ref)
        assert np.all(err16 <= k * BF16_U), dims
    f32, x32 = put(dev, RNG.uniform(0.8, 1.25, (64, 8)), "float32")
    err = np.abs(run("prod", [f32], {"dims": 1}) - x32.prod(1)) / x32.prod(1)
    assert 2.0**-23 < err.max() <= 7 * (2.0**-9 + 2.0**-10)  # fp32 products are not IEEE on the FPU


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_var_std_and_their_means(dev, dtype):
    t, x = put(dev, RNG.standard_normal((4, 33, 50)) * 3 + 1, dtype)
    u = BF16_U if dtype == "bfloat16" else 2.0**-20
    for dims in ((2,), (1, 2), None):
        for c in (0, 1, 2):
            n = x.size // np.size(x.sum(axis=dims))
            var = x.var(axis=dims, ddof=c)
            assert np.all(np.abs(run("var", [t], {"dims": dims, "correction": c}) - var) <= (u + 1e-5) * var)
            s, m = run("std_mean", [t], {"dims": dims, "correction": c})
            assert np.all(np.abs(s - np.sqrt(var)) <= (u + 1e-5) * np.sqrt(var))
            mag = np.abs(x).sum(axis=dims) / n
            assert np.all(np.abs(m - x.mean(axis=dims)) <= (u + n * 2.0**-24) * mag)
            v2, m2 = run("var_mean", [t], {"dims": dims, "correction": c})
            assert np.array_equal(v2, run("var", [t], {"dims": dims, "correction": c})) and np.array_equal(m2, m)
    two, _ = put(dev, [3.0, 4.0], dtype)
    assert run("var", [two], {"correction": 2}) == np.inf and np.isnan(run("std", [put(dev, [3.0])[0]]))
    with numerics(fp32_acc=False):
        loose = run("var", [t], {"dims": 2})
    assert np.all(np.abs(loose - x.var(axis=2, ddof=1)) <= 4 * BF16_U * x.var(axis=2, ddof=1))
    with pytest.raises(DtypeError):
        kk.run("std", [put(dev, np.array([1, 2], np.int32), "int32")[0]])
    with pytest.raises(ShapeError, match="correction"):
        kk.run("var", [t], {"correction": -1})


# ---------------------------------------------------------------------------------------------------- logsumexp
def test_logsumexp_both_providers(dev):
    t, x = put(dev, RNG.standard_normal((8, 3000)) * 4, "bfloat16")
    ref = torch.logsumexp(torch.from_numpy(x), -1).numpy()
    err = {p: np.abs(run("logsumexp", [t], {"dims": -1}, p) - ref) for p in ("ttnn", "host")}
    assert np.all(err["host"] <= BF16_U * np.abs(ref) + 1e-5)  # one rounding, fp32 inside
    # the chain stores m, x - m, the exps, their sum and its log in bf16: log(1 + d) keeps each relative error
    assert np.all(err["ttnn"] <= BF16_U * np.abs(ref) + 4 * BF16_U * (np.abs(ref - np.log(3000)) + 1))
    t, x = put(dev, RNG.standard_normal((8, 3000)) * 4, "float32")
    ref = torch.logsumexp(torch.from_numpy(x), -1).numpy()
    err = {p: np.abs(run("logsumexp", [t], {"dims": -1}, p) - ref) for p in ("ttnn", "host")}
    assert np.all(err["host"] <= 1e-6 * np.abs(ref))  # exact SFPU exp, fp32 sums
    assert np.all(err["ttnn"] <= 2 * SRCA_U)  # the sum step reads the exps as TF32 in SrcA: log moves by <= 2^-9
    assert err["host"].max() * 100 < err["ttnn"].mean()
    special, _ = put(dev, [[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0], [1000.0, 1000.0]], "float32")
    for p in ("ttnn", "host"):
        got = run("logsumexp", [special], {"dims": 1}, p)
        # +inf: cardmath's FPU model turns inf * (a 0 fidelity part) into NaN in the ttnn chain's sum step
        assert got[0] == -np.inf and (got[1] == np.inf or p == "ttnn") and np.isnan(got[2])
        assert got[3] == pytest.approx(1000 + math.log(2), rel=2**-10)  # no overflow: the max is subtracted
    ints, _ = put(dev, np.array([[1, 2, 3]], np.int32), "int32")
    (out,) = kk.run("logsumexp", [ints], {"dims": 1})
    assert out.dtype is DType.FLOAT32 and kk.to_numpy(out)[0] == pytest.approx(math.log(math.e + math.e**2 + math.e**3))


# -------------------------------------------------------------------------------------------------- predicates
def test_all_any_count_nonzero(dev):
    data = np.array([[0.0, np.nan, 2.0], [0.0, 0.0, 0.0], [1.0, -1.0, 0.5]], np.float32)
    for dtype in ("float32", "bfloat16"):
        t, _ = put(dev, data, dtype)
        assert run("all", [t], {"dims": 1}).tolist() == [False, False, True]
        assert run("any", [t], {"dims": 1}).tolist() == [True, False, True]
        assert run("count_nonzero", [t], {"dims": 0}).tolist() == [1, 2, 2]
        assert run("any", [t], {"dims": 1, "keepdim": True}).shape == (3, 1)
    b, _ = put(dev, np.array([True, True]), "bool")
    assert run("all", [b]) and run("count_nonzero", [b]) == 2
    i, _ = put(dev, np.array([0, 7, 0], np.int32), "int32")
    assert not run("all", [i]) and run("any", [i]) and run("count_nonzero", [i]).dtype == np.int32


# ------------------------------------------------------------------------------------------------------- scans
def test_cumsum_cumprod(dev):
    t, x = put(dev, RNG.uniform(0, 1, (3, 512)), "bfloat16")
    ref = np.cumsum(x, -1)
    (out,) = kk.run("cumsum", [t], {"dim": -1, "dtype": "float32"})
    err32 = np.abs(kk.to_numpy(out) - ref)
    assert np.all(err32 <= 2 * 2.0**-24 * ref)  # Kahan-compensated fp32: about one ulp of the prefix sum
    with numerics(fp32_acc=False):
        err16 = np.abs(run("cumsum", [t], {"dim": -1, "dtype": "float32"}) - ref)
    assert np.all(err16 <= np.arange(1, 513) * 2.0**-9 * ref)  # one bf16 rounding of the running total per step
    assert err16[:, -1].min() > 1000 * err32[:, -1].max()
    got = run("cumsum", [t], {"dim": 0})
    assert np.all(np.abs(got - np.cumsum(x, 0)) <= 2 * BF16_U * np.cumsum(x, 0))
    p, xp = put(dev, RNG.uniform(0.9, 1.1, (40, 5)), "bfloat16")
    ref = np.cumprod(xp, 0)
    assert np.all(np.abs(run("cumprod", [p], {"dim": 0, "dtype": "float32"}) - ref) <= 40 * 2.0**-24 * ref)
    assert np.all(np.abs(run("cumprod", [p], {"dim": 0}) - ref) <= BF16_U * ref * 1.0001)
    ints, _ = put(dev, np.array([2**31 - 1, 1, 1], np.int32), "int32")
    assert run("cumsum", [ints], {"dim": 0}).tolist() == [2**31 - 1, -(2**31), -(2**31) + 1]
    b, _ = put(dev, np.array([[True, False, True]]), "bool")
    (out,) = kk.run("cumsum", [b], {"dim": 1})
    assert out.dtype is DType.INT32 and kk.to_numpy(out).tolist() == [[1, 1, 2]]


# -------------------------------------------------------------------------------------------------- vector_norm
@pytest.mark.parametrize("p", [2.0, 1.0, float("inf"), float("-inf"), 0.0, 3.0])
def test_vector_norm(dev, p):
    t, x = put(dev, RNG.standard_normal((5, 33, 20)), "bfloat16")
    for dims in ((2,), (1, 2), None):
        ref = torch.linalg.vector_norm(torch.from_numpy(x), p, dim=dims).numpy()
        assert np.all(np.abs(run("vector_norm", [t], {"p": p, "dims": dims}) - ref) <= 3 * BF16_U * ref), dims
    with pytest.raises(DtypeError):
        kk.run("vector_norm", [put(dev, np.array([3, 4], np.int32), "int32")[0]])


# ------------------------------------------------------------------------------------------ errors and graphs
def test_bad_attributes_raise_typed_errors_and_the_device_stays_usable(dev):
    t, x = put(dev, X4)
    with pytest.raises(ShapeError, match="appears more than once"):
        kk.run("sum", [t], {"dims": (1, -3)})
    with pytest.raises(ShapeError, match="out of range"):
        kk.run("amax", [t], {"dims": 4})
    with pytest.raises(ShapeError, match="dims must be"):
        kk.run("sum", [t], {"dims": "all"})
    with pytest.raises(ShapeError, match="no attribute"):
        kk.run("sum", [t], {"axis": 0})
    with pytest.raises(ShapeError, match="p must be a number"):
        kk.run("vector_norm", [t], {"p": "fro"})
    with pytest.raises(ShapeError, match="must be a tensor"):
        kk.run("sum", [2.0], device=dev)
    assert run("sum", [t], {"dims": (0, 1, 2, 3)}) == pytest.approx(x.sum(), abs=SRCA_U * np.abs(x).sum())


def test_ops_build_into_graphs():
    g = Graph()
    x = g.input(TensorSpec((4, 33, 40), DType.BFLOAT16))
    v, i = g.add("max_with_indices", x, dim=1)
    s = g.add("var_mean", x, dims=(0, 2), keepdim=True)
    assert v.spec == TensorSpec((4, 40), DType.BFLOAT16) and i.spec.dtype is DType.INT32
    assert [o.spec.shape for o in s] == [(1, 33, 1), (1, 33, 1)]
    assert "fidelity=HiFi4, fp32_acc=True" in str(g.nodes[1])


def test_cost_grows_with_the_input():
    impl = kk.lookup("sum", "sim", "ttnn")
    small = TensorSpec((32, 32), DType.BFLOAT16)
    big = TensorSpec((64, 4096, 4096), DType.BFLOAT16)
    from kohakutt.hal.card import P150A
    from kohakutt.ir.numerics import Fidelity, Numerics

    est = [impl.estimate([s], [TensorSpec((1,), DType.BFLOAT16)], {}, Numerics(Fidelity.HiFi4, True, False), P150A)
           for s in (small, big)]  # fmt: skip
    assert 0 < est[0] < est[1]


# ------------------------------------------------------------------------------------------------- providers
@pytest.mark.parametrize(("op", "dtype", "attrs", "num", "provider"), [
    ("sum", "bfloat16", {}, {}, "ttnn"),
    ("sum", "float32", {}, {}, "host"),  # fp32_reduce="exact": float32 adds, which TT-NN's FPU reduce does not do
    ("sum", "float32", {}, {"fp32_reduce": "tf32"}, "ttnn"),
    ("mean", "int32", {"dtype": "float32"}, {}, "host"),  # the float32 cast is summed: as float32 data
    ("logsumexp", "int32", {}, {}, "host"),
    ("prod", "int32", {}, {"fp32_reduce": "tf32"}, "host"),  # TT-NN's prod takes no integers
    # TT-NN's variance and norm kernels square unscaled values (inf / 0 / NaN past 2^60): the host, whatever the data
    ("var", "float32", {}, {"fp32_reduce": "tf32", "fp32_acc": False}, "host"),
    ("var", "float32", {}, {"fp32_reduce": "tf32"}, "host"),
    ("vector_norm", "float32", {"p": -1.0}, {"fp32_reduce": "tf32"}, "host"),
    ("vector_norm", "bfloat16", {"p": -1.0}, {}, "host"),
])  # fmt: skip
def test_what_ttnn_refuses_runs_on_the_host_on_both_backends(op, dtype, attrs, num, provider):
    specs = [TensorSpec((4, 40), DType(dtype))]
    bound = irops.get(op).bind_attrs(attrs)
    for backend in ("sim", "ttnn"):
        impl = registry.fallback(registry.lookup(op, backend), specs, bound, Numerics(**num))
        assert impl.provider == provider, (backend, impl)
