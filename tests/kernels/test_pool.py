"""The pool family on the simulator against torch CPU float64 pooling of the same stored inputs.

Tolerances: max pooling is exact. An average is a window sum (exact for a few bf16 values in fp32, else within
window * 2^-24 relative of its magnitude) times a scale, then one rounding to the output dtype (bf16: 2^-8
relative; float32 outputs are checked to 1e-6). TT-NN's scale is bf16(1 / divisor), computed here independently.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, DtypeError, IndexOutOfRangeError, KohakuTTUnsupportedOperator
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir import DType, TensorSpec
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import numerics
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import pool as pool_kernels
from kohakutt.kernels import registry

BF16_REL = 2.0**-8
RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def bf16(*shape: int) -> np.ndarray:
    return round_bfloat16(RNG.standard_normal(shape).astype(np.float32))


def t64(x):
    return torch.as_tensor(np.asarray(x, np.float64))


def run(dev, op, inputs, attrs, provider=None, dtype="bfloat16", **num):
    ins = [kk.from_numpy(dev, x, dtype if np.asarray(x).dtype.kind == "f" else "int32") for x in inputs]
    with numerics(**num):
        outs = kk.run(op, ins, attrs, provider=provider)
    return [kk.to_numpy(o) for o in outs]


MAX_CASES = [
    ((2, 3, 17), {"kernel_size": (3,), "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True}),
    ((2, 3, 9, 11), {"kernel_size": (3, 3), "stride": (2, 2), "padding": 1, "ceil_mode": True}),
    ((2, 3, 9, 11), {"kernel_size": (2, 3), "stride": (1, 2), "dilation": (2, 1)}),
    ((3, 8, 8), {"kernel_size": (2, 2)}),  # unbatched, stride = kernel
    ((1, 2, 5, 6, 7), {"kernel_size": (2, 3, 2), "stride": 2, "padding": (1, 1, 0), "ceil_mode": True}),
    ((1, 1, 6, 6), {"kernel_size": (3, 3), "stride": 2, "ceil_mode": True}),  # a ceil window hangs off the end
    (
        (1, 1, 5, 5),
        {"kernel_size": (2, 2), "stride": 2, "padding": 1, "ceil_mode": True},
    ),  # ...or would start in padding
]


def _torch_max(x, a, indices=True):
    d = len(a["kernel_size"])
    fn = getattr(F, f"max_pool{d}d")
    return fn(
        x if isinstance(x, torch.Tensor) else t64(x),
        a["kernel_size"],
        a.get("stride") or a["kernel_size"],
        a.get("padding", 0),
        a.get("dilation", 1),
        a.get("ceil_mode", False),
        indices,
    )


@pytest.mark.parametrize("shape, attrs", MAX_CASES)
def test_max_pool_values_and_indices(dev, shape, attrs):
    x = bf16(*shape)
    rv, ri = _torch_max(x, attrs)
    providers = ["host"] + (["ttnn"] if len(attrs["kernel_size"]) < 3 else [])
    for provider in providers:
        v, i = run(dev, "max_pool", [x], {**attrs, "return_indices": True}, provider)
        assert v.shape == tuple(rv.shape) and i.dtype == np.int32
        np.testing.assert_array_equal(v, rv.numpy())
        np.testing.assert_array_equal(i, ri.numpy())


def test_max_pool_nan_and_fp32_source_registers(dev):
    x = bf16(1, 2, 4, 4)
    x[0, 0, 1, 1] = np.nan
    (v,) = run(dev, "max_pool", [x], {"kernel_size": (2, 2)})
    assert np.isnan(v[0, 0, 0, 0]) and np.isfinite(v[0, 0, 1:]).all() and np.isfinite(v[0, 1]).all()
    f = (RNG.standard_normal((1, 1, 4, 4)) * 3).astype(np.float32)
    (exact,) = run(dev, "max_pool", [f], {"kernel_size": (2, 2)}, "host", dtype="float32")
    (tt,) = run(dev, "max_pool", [f], {"kernel_size": (2, 2)}, "ttnn", dtype="float32")
    np.testing.assert_array_equal(exact, _torch_max(f, {"kernel_size": (2, 2)}, False).numpy())
    truncated = (exact.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)  # bf16 SrcA: low bits dropped
    np.testing.assert_array_equal(tt, truncated)
    (tt32,) = run(dev, "max_pool", [f], {"kernel_size": (2, 2)}, "ttnn", dtype="float32", fp32_acc=True)
    np.testing.assert_array_equal(tt32, (exact.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32))  # TF32


def _divisors(shape, k, s, p, ceil, cip, override):
    """PyTorch's avg_pool divisor per output position, computed from its window rule."""
    outs = []
    for i, kk_, ss, pp in zip(shape, k, s, p):
        o = (i + 2 * pp - kk_ + (ss - 1 if ceil else 0)) // ss + 1
        if ceil and (o - 1) * ss >= i + pp:
            o -= 1
        outs.append(o)
    div = np.empty(outs)
    for pos in itertools.product(*(range(o) for o in outs)):
        size = 1
        for j, o in enumerate(pos):
            start = o * s[j] - p[j]
            end = min(start + k[j], shape[j] + p[j])
            size *= (end - start) if cip else (min(end, shape[j]) - max(start, 0))
        div[pos] = override or size
    return div


AVG_CASES = [
    ((2, 3, 17), {"kernel_size": (3,), "stride": 2, "padding": 1}),
    ((2, 3, 9, 11), {"kernel_size": (3, 3), "stride": (2, 2), "padding": 1, "ceil_mode": True}),
    ((2, 3, 9, 11), {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    ((2, 3, 8, 8), {"kernel_size": (3, 3), "stride": 1, "divisor_override": 5}),
    ((1, 2, 5, 6, 7), {"kernel_size": (2, 3, 2), "stride": 2, "padding": (1, 1, 0), "count_include_pad": False}),
]


@pytest.mark.parametrize("shape, attrs", AVG_CASES)
def test_avg_pool(dev, shape, attrs):
    x = bf16(*shape)
    d = len(attrs["kernel_size"])
    a = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True, "divisor_override": None, **attrs}
    k, s, p = a["kernel_size"], a["stride"], a["padding"]
    s, p = (s,) * d if isinstance(s, int) else s, (p,) * d if isinstance(p, int) else p
    div = _divisors(shape[2:], k, s, p, a["ceil_mode"], a["count_include_pad"], a["divisor_override"])
    sums = getattr(F, f"avg_pool{max(d, 2)}d")(
        t64(x) if d > 1 else t64(x)[:, :, None],
        k if d > 1 else (1, *k),
        s if d > 1 else (1, *s),
        p if d > 1 else (0, *p),
        a["ceil_mode"],
        True,
        1,
    ).numpy()
    sums = sums if d > 1 else sums[:, :, 0]
    (host,) = run(dev, "avg_pool", [x], attrs, "host", dtype="float32")  # fp32 output: the arithmetic itself
    np.testing.assert_allclose(host, sums / div, rtol=1e-6, atol=1e-6)
    if d < 3:
        scale = round_bfloat16((1.0 / div).astype(np.float32))
        (tt,) = run(dev, "avg_pool", [x], attrs, "ttnn", dtype="float32", fp32_acc=True)
        np.testing.assert_allclose(tt, sums * scale, rtol=1e-6, atol=1e-6)
        if np.any(scale != 1.0 / div):
            assert np.abs(tt - host).max() > 1e-4  # TT-NN's bf16 scaler is visible on fp32 data
        (tt_default,) = run(dev, "avg_pool", [x], attrs, "ttnn", dtype="float32")  # TT-NN's bf16 DST for a small window
        expect = round_bfloat16((sums * scale).astype(np.float32))
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(expect), 1e-30))) - 7)
        assert np.mean(tt_default == expect) > 0.95 and np.all(np.abs(tt_default - expect) <= ulp)
    (b,) = run(dev, "avg_pool", [x], attrs, "host")
    assert np.all(np.abs(b - sums / div) <= BF16_REL * np.abs(sums / div) + 1e-7)


def test_large_window_with_a_bf16_dst_rounds_per_reduction(dev):
    x = (RNG.standard_normal((2, 3, 7, 7)) * 10).astype(np.float32)
    attrs = {"kernel_size": (7, 7)}  # 49 values: two reductions of up to 32
    (fp32,) = run(dev, "avg_pool", [x], attrs, "host", dtype="float32")  # default: fp32 DST for a large window
    (bf,) = run(dev, "avg_pool", [x], attrs, "host", dtype="float32", fp32_acc=False)
    flat = x.reshape(2, 3, 49).astype(np.float64)
    acc = round_bfloat16(flat[..., :32].sum(-1).astype(np.float32)).astype(np.float64)
    acc = round_bfloat16((acc + flat[..., 32:].sum(-1)).astype(np.float32)).astype(np.float64)
    ref = round_bfloat16((acc / 49).astype(np.float32))
    ulp = 2.0 ** (np.floor(np.log2(np.abs(ref))) - 7)
    assert np.all(np.abs(bf[..., 0, 0] - ref) <= ulp)
    np.testing.assert_allclose(fp32[..., 0, 0], flat.mean(-1), rtol=1e-6, atol=49 * 2.0**-24 * np.abs(x).max())


def test_adaptive_pools(dev):
    x = bf16(2, 3, 10, 7)
    for out in [(4, 3), (1, 1), (None, 5), (10, 7)]:
        size = tuple(x.shape[2 + i] if o is None else o for i, o in enumerate(out))
        ref = F.adaptive_avg_pool2d(t64(x), size).numpy()
        for provider in ("host", "ttnn"):
            (got,) = run(dev, "adaptive_avg_pool", [x], {"output_size": out}, provider, dtype="float32")
            # TT-NN: window sum times bf16(1/count): within 2^-8 of the mean, and exact for power-of-two counts
            # (float32 data: the host math keeps fp32; TT-NN's small window rounds it to bf16 as well)
            tol = (1e-6 if provider == "host" else 2 * BF16_REL) * np.abs(ref) + 1e-6
            assert got.shape == ref.shape and np.all(np.abs(got - ref) <= tol)
        v, i = run(dev, "adaptive_max_pool", [x], {"output_size": out, "return_indices": True}, "host")
        rv, ri = F.adaptive_max_pool2d(t64(x), size, True)
        np.testing.assert_array_equal(v, rv.numpy())
        np.testing.assert_array_equal(i, ri.numpy())
    x1, x3 = bf16(2, 3, 11), bf16(1, 2, 5, 4, 6)
    # float32 data with windows of 2 and 3 values: TT-NN's pools take bfloat16 and one window size per dim, so the
    # default is the host math, on the sim as on a card
    (a1,) = run(dev, "adaptive_avg_pool", [x1], {"output_size": (4,)}, dtype="float32")
    np.testing.assert_allclose(a1, F.adaptive_avg_pool1d(t64(x1), 4).numpy(), rtol=1e-6)
    (a3,) = run(dev, "adaptive_max_pool", [x3], {"output_size": (2, 3, 4)})
    np.testing.assert_array_equal(a3, F.adaptive_max_pool3d(t64(x3), (2, 3, 4)).numpy())


@pytest.mark.parametrize(("op", "shape", "dtype", "attrs", "provider"), [
    ("max_pool", (1, 2, 4, 4), "bfloat16", {"kernel_size": (2, 2)}, "ttnn"),
    ("max_pool", (1, 2, 4, 4), "float32", {"kernel_size": (2, 2)}, "host"),  # TT-NN's pools take bfloat16
    ("avg_pool", (1, 2, 4, 4, 4), "bfloat16", {"kernel_size": (2, 2, 2)}, "host"),  # no 3-d pools
    ("adaptive_avg_pool", (1, 2, 6, 8), "bfloat16", {"output_size": (3, 4)}, "ttnn"),
    ("adaptive_avg_pool", (1, 2, 7, 8), "bfloat16", {"output_size": (3, 4)}, "host"),  # windows of 2 and 3 rows
    ("adaptive_max_pool", (1, 2, 6, 8), "bfloat16", {"output_size": (3, 4), "return_indices": True}, "host"),
])  # fmt: skip
def test_refused_calls_pass_to_the_host_on_both_backends(op, shape, dtype, attrs, provider):
    """What TT-NN's pools refuse on a card is declared (``supports``), so the sim and a card both take the host."""
    specs = [TensorSpec(shape, DType(dtype))]
    bound = irops.get(op).bind_attrs(attrs)
    for backend in ("sim", "ttnn"):
        impl = registry.fallback(registry.lookup(op, backend), specs, bound)
        assert impl.provider == provider, (backend, impl)


def test_ttnn_models_refuse_what_ttnn_cannot_run(dev):
    x = kk.from_numpy(dev, bf16(1, 2, 4, 4, 4), "bfloat16")
    for op, attrs in [
        ("max_pool", {"kernel_size": (2, 2, 2)}),
        ("avg_pool", {"kernel_size": (2, 2, 2)}),
        ("adaptive_avg_pool", {"output_size": (2, 2, 2)}),
    ]:
        kk.run(op, [x], attrs, provider="ttnn")
        with pytest.raises(CommandError, match="TT-NN has no 3-d"):
            dev.synchronize()
    x2 = kk.from_numpy(dev, bf16(1, 2, 4, 4), "bfloat16")
    kk.run("adaptive_max_pool", [x2], {"output_size": (2, 2), "return_indices": True}, provider="ttnn")
    with pytest.raises(CommandError, match="no indices"):
        dev.synchronize()
    assert kk.to_numpy(kk.run("max_pool", [x], {"kernel_size": (2, 2, 2)})[0]).shape == (1, 2, 2, 2, 2)


# ------------------------------------------------------------------------------------------------ backward
def _grad_of(fn, x, g):
    xt = t64(x).requires_grad_()
    (gx,) = torch.autograd.grad(fn(xt), xt, t64(g))
    return gx.numpy()


@pytest.mark.parametrize("shape, attrs", [MAX_CASES[i] for i in (0, 1, 2, 4)])
def test_max_pool_backward(dev, shape, attrs):
    x = bf16(*shape)
    rv, ri = _torch_max(x, attrs)
    g = bf16(*rv.shape)
    ref = _grad_of(lambda t: _torch_max(t, attrs, False), x, g)
    (with_idx,) = run(dev, "max_pool_backward", [g, x, ri.numpy().astype(np.int32)], attrs, dtype="float32")
    (found,) = run(dev, "max_pool_backward", [g, x], attrs, dtype="float32")
    np.testing.assert_allclose(with_idx, ref, rtol=1e-6, atol=1e-6)  # a few bf16 values added in fp32
    np.testing.assert_array_equal(found, with_idx)


@pytest.mark.parametrize("shape, attrs", AVG_CASES)
def test_avg_pool_backward(dev, shape, attrs):
    x = bf16(*shape)
    d = len(attrs["kernel_size"])
    a = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True, "divisor_override": None, **attrs}

    def fwd(t):
        kw = dict(
            kernel_size=a["kernel_size"],
            stride=a["stride"] or a["kernel_size"],
            padding=a["padding"],
            ceil_mode=a["ceil_mode"],
            count_include_pad=a["count_include_pad"],
        )
        if d == 1:
            return F.avg_pool1d(t, **kw)
        return getattr(F, f"avg_pool{d}d")(t, **kw, divisor_override=a["divisor_override"])

    g = bf16(*fwd(t64(x)).shape)
    (got,) = run(dev, "avg_pool_backward", [g, x], attrs, dtype="float32")
    np.testing.assert_allclose(got, _grad_of(fwd, x, g), rtol=1e-6, atol=1e-6)


def test_adaptive_backward(dev):
    x = bf16(2, 3, 10, 7)
    out = (4, 3)
    g = bf16(2, 3, 4, 3)
    (ga,) = run(dev, "adaptive_avg_pool_backward", [g, x], {"output_size": out}, dtype="float32")
    np.testing.assert_allclose(ga, _grad_of(lambda t: F.adaptive_avg_pool2d(t, out), x, g), rtol=1e-6, atol=1e-7)
    (gm,) = run(dev, "adaptive_max_pool_backward", [g, x], {"output_size": out}, dtype="float32")
    np.testing.assert_array_equal(gm, _grad_of(lambda t: F.adaptive_max_pool2d(t, out), x, g))
    x1, g1 = bf16(3, 11), bf16(3, 4)  # unbatched 1-d
    (g1a,) = run(dev, "adaptive_avg_pool_backward", [g1, x1], {"output_size": (4,)}, dtype="float32")
    np.testing.assert_allclose(g1a, _grad_of(lambda t: F.adaptive_avg_pool1d(t, 4), x1, g1), rtol=1e-6, atol=1e-7)
    a = {"kernel_size": (3, 3), "stride": 2, "padding": 1, "ceil_mode": True}
    gp = kk.from_numpy(dev, bf16(2, 3, 6, 4), "bfloat16")
    assert kk.run("avg_pool_backward", [gp, kk.from_numpy(dev, x, "bfloat16")], a)[0].dtype.value == "bfloat16"
    assert kk.run("avg_pool_backward", [gp, kk.from_numpy(dev, x, "float32")], a)[0].dtype.value == "float32"


# --------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "op, shape, attrs, err, match",
    [
        ("max_pool", (1, 2, 3, 3), {"kernel_size": (4, 4)}, ShapeError, "does not fit"),
        ("max_pool", (1, 2, 6, 6), {"kernel_size": (2, 2), "padding": 2}, ShapeError, "at most half"),
        ("max_pool", (1, 2, 6, 6), {"kernel_size": 2}, ShapeError, "one entry per pooled dim"),
        ("avg_pool", (2, 6), {"kernel_size": (2, 2)}, ShapeError, "takes a 4-D"),
        ("avg_pool", (1, 2, 6, 6), {"kernel_size": (2, 2), "divisor_override": 0}, ShapeError, "divisor_override"),
        ("adaptive_avg_pool", (1, 2, 6, 6), {"output_size": (0, 2)}, ShapeError, "positive ints"),
    ],
)
def test_bad_pools_raise_typed_errors(dev, op, shape, attrs, err, match):
    with pytest.raises(err, match=match):
        kk.run(op, [kk.from_numpy(dev, bf16(*shape), "bfloat16")], attrs)


def test_dtype_and_index_errors_leave_the_device_usable(dev):
    with pytest.raises(DtypeError, match="float tensors"):
        kk.run("max_pool", [kk.from_numpy(dev, np.ones((1, 1, 4, 4), np.int32))], {"kernel_size": (2, 2)})
    x, g = kk.from_numpy(dev, bf16(1, 1, 4, 4), "bfloat16"), kk.from_numpy(dev, bf16(1, 1, 2, 2), "bfloat16")
    bad = kk.from_numpy(dev, np.full((1, 1, 2, 2), 99, np.int32))
    kk.run("max_pool_backward", [g, x, bad], {"kernel_size": (2, 2)})
    with pytest.raises(CommandError) as info:
        dev.synchronize()
    assert isinstance(info.value.__cause__, IndexOutOfRangeError) or "outside the input plane" in str(info.value)
    with pytest.raises(ShapeError, match="grad has shape"):
        kk.run("max_pool_backward", [x, x], {"kernel_size": (2, 2)})
    assert kk.to_numpy(kk.run("max_pool", [x], {"kernel_size": (2, 2)})[0]).shape == (1, 1, 2, 2)


def test_ttnn_calls_use_only_declared_names():
    from test_matmul import check_ttnn_names

    log = check_ttnn_names(
        pool_kernels,
        [
            ("max_pool", [(2, 3, 8, 8)], {"kernel_size": (2, 2), "return_indices": True}),
            ("max_pool", [(3, 8)], {"kernel_size": (3,)}),
            ("avg_pool", [(2, 3, 8, 8)], {"kernel_size": (3, 3), "padding": 1}),
            ("adaptive_avg_pool", [(2, 3, 8, 8)], {"output_size": (1, 1)}),
            ("adaptive_max_pool", [(2, 3, 8, 8)], {"output_size": (2, 2)}),
        ],
    )
    assert {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"} <= log
    with pytest.raises(KohakuTTUnsupportedOperator):
        check_ttnn_names(pool_kernels, [("max_pool", [(1, 1, 4, 4, 4)], {"kernel_size": (2, 2, 2)})])
