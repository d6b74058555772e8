"""The softmax family against torch float64 references computed from the same (device-rounded) inputs.

Tolerances, from the formats: one bf16 rounding is at most 2^-8 relative; exp of a value carrying an absolute error
a has relative error about a, and a bf16 x - max of size |d| carries up to 2^-9 |d|; TT-NN's approximate exp
(Schraudolph) is within 3% (``cardmath.sfpu``), and softmax divides by a sum of such exps, so up to about 6%.
"""

from __future__ import annotations

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
from kohakutt.kernels import registry

BF16_U = 2.0**-8
APPROX_EXP = 0.03


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def put(dev, a, dtype="float32"):
    t = kk.from_numpy(dev, np.asarray(a, np.float32), dtype)
    return t, kk.to_numpy(t).astype(np.float64)


def run(op, inputs, attrs=None, provider=None):
    (out,) = kk.run(op, inputs, attrs or {}, provider=provider)
    return kk.to_numpy(out).astype(np.float64)


def reference(x: np.ndarray, dim: int):
    """(softmax, log_softmax, x - max) in float64."""
    tx = torch.from_numpy(x)
    d = (tx - tx.amax(dim, keepdim=True)).numpy()
    return torch.softmax(tx, dim).numpy(), torch.log_softmax(tx, dim).numpy(), d


def bounds(provider: str, dtype: str, attention: bool, y, logy, d, x):
    """Per-element error bounds for softmax and log_softmax (see the module docstring)."""
    ax = np.abs(x) + np.abs(x - d)  # |x| + |max|: what a TF32 / bf16 subtraction's truncation scales with
    if provider == "host":
        u = BF16_U if dtype == "bfloat16" else 2.0**-22
        return u * y + 2.0**-24 * (np.abs(d) + 4) * y, u * np.abs(logy) + 2.0**-22 * (np.abs(d) + 1)
    u = BF16_U if dtype == "bfloat16" else 2.0**-9  # bf16 intermediates, or TF32 operands in SrcA
    rel = u * (np.abs(d) + ax / 2 + 4) + (2 * APPROX_EXP if attention else 0)
    return rel * y, u * (np.abs(logy) + np.abs(d) + ax + 4)


CASES = [((3, 33, 45), -1), ((3, 33, 45), 1), ((3, 33, 45), 0), ((2, 3, 4, 37), -1), ((2, 3, 4, 37), -2),
         ((100,), 0), ((2, 1, 2, 3, 40), -1)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("shape", "dim"), CASES)
def test_forward_matches_torch(dev, dtype, shape, dim):
    t, x = put(dev, np.random.default_rng(len(shape) * 7 + dim).standard_normal(shape) * 3, dtype)
    y, logy, d = reference(x, dim)
    attention = len(shape) <= 4 and dim % len(shape) == len(shape) - 1
    err = {}
    for provider in ("ttnn", "host"):
        b_soft, b_log = bounds(provider, dtype, attention, y, logy, d, x)
        got = run("softmax", [t], {"dim": dim}, provider)
        err[provider] = np.abs(got - y)
        assert got.shape == shape and np.all(err[provider] <= b_soft), provider
        got = run("log_softmax", [t], {"dim": dim}, provider)
        assert np.all(np.abs(got - logy) <= b_log), provider
    assert err["host"].mean() < err["ttnn"].mean()  # the host math's fp32 statistics are better


@pytest.mark.parametrize("provider", ["ttnn", "host"])
def test_padding_never_leaks(dev, provider):
    rows = -100.0 - np.arange(33)[None, :] - 10 * np.arange(4)[:, None]  # all-negative rows of width 33
    for a, dim in ((rows, -1), (rows.T.copy(), 0), (rows[0], 0), (rows.reshape(2, 2, 33), -1)):
        t, x = put(dev, a, "bfloat16")
        y, logy, _ = reference(x, dim)
        got = run("softmax", [t], {"dim": dim}, provider)
        assert np.all(np.abs(got - y) <= (0.07 if provider == "ttnn" else BF16_U) * y + 1e-6), a.shape
        assert np.allclose(got.sum(axis=dim), 1, atol=0.05)
        assert np.all(np.abs(run("log_softmax", [t], {"dim": dim}, provider) - logy) <= 4 * BF16_U * np.abs(logy))


def test_numeric_stable_flag(dev):
    t, x = put(dev, 90 + np.random.default_rng(3).uniform(0, 8, (4, 64)), "bfloat16")
    y, _, _ = reference(x, -1)
    stable = run("softmax", [t], {"numeric_stable": True}, "ttnn")
    assert np.all(np.abs(stable - y) <= 0.07 * y + 1e-6)
    naive = run("softmax", [t], {"numeric_stable": False}, "ttnn")
    assert not np.allclose(naive, y, atol=0.01)  # exp(98) overflows fp32: the unshifted exps are garbage
    assert np.array_equal(run("softmax", [t], {"numeric_stable": False}, "host"), run("softmax", [t], {}, "host"))


def test_scope_changes_ttnn_numerics(dev):
    t, x = put(dev, np.random.default_rng(4).standard_normal((4, 2048)) * 2, "bfloat16")
    y, _, _ = reference(x, -1)

    def err(provider, **scope):
        with numerics(**scope):
            return (np.abs(run("softmax", [t], {}, provider) - y) / y).mean()

    default = err("ttnn")  # the family's default: an fp32 DST and exact exp (ir/defs/softmax.py)
    assert default == err("ttnn", approx=False, fp32_acc=True)
    tt_own = err("ttnn", approx=True, fp32_acc=False)  # TT-NN's own defaults
    assert err("ttnn", approx=False, fp32_acc=False) < tt_own  # its approximate exp adds to its error...
    assert default < err("ttnn", approx=False, fp32_acc=False) / 4  # ...but its 16-bit DST (x - max, exps) costs more
    assert err("ttnn", fidelity="LoFi") > default  # the final multiply sees 5 bits of each exp
    assert err("host") < err("host", approx=True)  # an explicit scope reaches the host math too
    assert err("host") <= BF16_U / 2


def test_nan_and_infinite_rows_follow_torch(dev):
    x = np.array([[np.nan, 1.0, 2.0], [-np.inf, -np.inf, -np.inf], [1.0, 2.0, -np.inf]], np.float32)
    t, _ = put(dev, x)
    want = torch.softmax(torch.from_numpy(x), -1).numpy()
    want_log = torch.log_softmax(torch.from_numpy(x), -1).numpy()
    for provider, dim in (("host", -1), ("ttnn", 0)):  # dim 0 of a 2-D tensor: TT-NN's moreh path, exact exp
        xt, _ = put(dev, x if dim == -1 else x.T.copy())
        got = run("softmax", [xt], {"dim": dim}, provider)
        got = got if dim == -1 else got.T
        assert np.array_equal(np.isnan(got), np.isnan(want)), provider
        assert np.allclose(got[2], want[2], rtol=4 * 2.0**-9 if provider == "ttnn" else 1e-6) and got[2, 2] == 0
        log = run("log_softmax", [xt], {"dim": dim}, provider)
        log = log if dim == -1 else log.T
        assert np.array_equal(np.isnan(log), np.isnan(want_log)) and log[2, 2] == -np.inf
    assert t.shape == (3, 3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("shape", "dim"), [((5, 33), -1), ((5, 33), 0), ((3, 4, 40), 1)])
def test_backward_matches_torch(dev, dtype, shape, dim):
    rng = np.random.default_rng(sum(shape) + dim)
    x = torch.from_numpy(rng.standard_normal(shape) * 2)
    yt, y = put(dev, torch.softmax(x, dim).numpy(), dtype)
    lt, logy = put(dev, torch.log_softmax(x, dim).numpy(), dtype)
    gt, g = put(dev, rng.standard_normal(shape), dtype)
    tg, ty, tl = torch.from_numpy(g), torch.from_numpy(y), torch.from_numpy(logy)
    want = torch._softmax_backward_data(tg, ty, dim, torch.float64).numpy()
    want_log = torch._log_softmax_backward_data(tg, tl, dim, torch.float64).numpy()
    scale = y * (np.abs(g) + np.sum(np.abs(y * g), axis=dim, keepdims=True))
    scale_log = np.abs(g) + np.exp(logy) * np.sum(np.abs(g), axis=dim, keepdims=True)
    for provider in ("ttnn", "host"):
        u = BF16_U if dtype == "bfloat16" else (2.0**-9 if provider == "ttnn" else 2.0**-22)
        k = 4 if provider == "ttnn" else 1  # TT-NN stores y * g, the sum and g - sum in the intermediate format
        got = run("softmax_backward", [gt, yt], {"dim": dim}, provider)
        assert np.all(np.abs(got - want) <= k * u * scale + BF16_U * np.abs(want)), provider
        got = run("log_softmax_backward", [gt, lt], {"dim": dim}, provider)
        assert np.all(np.abs(got - want_log) <= k * u * scale_log + BF16_U * np.abs(want_log)), provider


def test_errors_and_edge_shapes(dev):
    ints = kk.from_numpy(dev, np.array([1, 2], np.int32))
    with pytest.raises(DtypeError, match="softmax needs float tensors"):
        kk.run("softmax", [ints])
    a, _ = put(dev, np.zeros((2, 3)))
    b, _ = put(dev, np.zeros((3, 2)))
    with pytest.raises(ShapeError, match="same shape"):
        kk.run("softmax_backward", [a, b])
    with pytest.raises(ShapeError, match="out of range"):
        kk.run("log_softmax", [a], {"dim": 2})
    with pytest.raises(ShapeError, match="must be a tensor"):
        kk.run("softmax", [1.0], device=dev)
    s, _ = put(dev, np.float32(3.0), "bfloat16")
    for provider in ("ttnn", "host"):
        assert run("softmax", [s], {"dim": 0}, provider) == 1.0  # a 0-d tensor is one element along dim 0
        assert run("log_softmax", [s], {"dim": -1}, provider) == 0.0
        one, _ = put(dev, np.float32(1.0))
        assert run("softmax_backward", [s, one], {}, provider) == 0.0
        empty, _ = put(dev, np.zeros((0, 5)))
        assert run("softmax", [empty], {"dim": 1}, provider).shape == (0, 5)
        assert run("log_softmax_backward", [empty, empty], {"dim": 0}, provider).shape == (0, 5)
    assert np.allclose(run("softmax", [a], {"dim": -1}), 1 / 3, rtol=BF16_U)


def test_provider_follows_the_knob(dev, knobs):
    """softmax has no own program a card can launch: KTT_CUSTOM_KERNELS does not change its provider (TT-NN's kernel,
    the card's choice too); float32 rows under fp32_reduce='exact' pass to the host math either way."""
    t, _ = put(dev, np.random.default_rng(5).standard_normal((8, 64)), "bfloat16")
    f, _ = put(dev, np.random.default_rng(5).standard_normal((8, 64)), "float32")
    for custom in (0, 1):
        knobs(KTT_CUSTOM_KERNELS=custom)
        assert kk.lookup("softmax", "sim").provider == kk.lookup("softmax", "ttnn").provider == "ttnn"
        assert np.array_equal(run("softmax", [t]), run("softmax", [t], provider="ttnn"))
        assert np.array_equal(run("softmax", [f]), run("softmax", [f], provider="host"))
    assert not np.array_equal(run("softmax", [t], provider="ttnn"), run("softmax", [t], provider="host"))


def test_graph_records_the_scope():
    g = Graph()
    x = g.input(TensorSpec((4, 33), DType.BFLOAT8_B))
    y = g.add("softmax", x)
    with numerics(approx=False, fp32_acc=True):
        g.add("log_softmax", y, dim=0)
    assert y.spec == TensorSpec((4, 33), DType.BFLOAT16)
    assert str(g.nodes[0]).endswith(
        "{dim=-1, numeric_stable=True; fidelity=HiFi4, fp32_acc=True, approx=False} : bfloat16[4, 33]")
    assert "fp32_acc=True, approx=False" in str(g.nodes[1])
    with numerics(approx=True):
        g.add("softmax", y)
    assert "fp32_acc=True, approx=True" in str(g.nodes[2])
    impl = kk.lookup("softmax", "sim", "host")
    assert impl.program is None and impl.estimate is not None


@pytest.mark.parametrize(("dtype", "fp32_reduce", "provider"), [
    ("bfloat16", None, "ttnn"),
    ("float32", None, "host"),  # float32 rows under fp32_reduce="exact"
    ("float32", "tf32", "host"),  # TT-NN's moreh softmax backward takes bfloat16 / bfloat8_b outputs only
])  # fmt: skip
def test_backward_refusals_run_on_the_host_on_both_backends(dtype, fp32_reduce, provider):
    specs = [TensorSpec((4, 33), DType(dtype))] * 2
    for op in ("softmax_backward", "log_softmax_backward"):
        bound = irops.get(op).bind_attrs({})
        for backend in ("sim", "ttnn"):
            impl = registry.fallback(registry.lookup(op, backend), specs, bound, Numerics(fp32_reduce=fp32_reduce))
            assert impl.provider == provider, (op, backend, impl)
