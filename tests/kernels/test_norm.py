"""The norm family against torch float64 references computed from the same (device-rounded) inputs.

Tolerances, from the formats (u = the relative error one step may add):
- bfloat16 storage rounds to nearest: u = 2^-9; a value re-entering the FPU is truncated to TF32 (11 significant
  bits, u = 2^-10), a multiply's SrcA keeps 10 bits (u = 2^-9); with a 16-bit DST everything is bfloat16 and a DST
  accumulation over T tiles adds up to T * 2^-9 of the running sum.
- A normalized output is bounded per element as ``a * (|y| + |xhat * w| + |b|) + c * (|x| + |mean|) * rstd * |w|``:
  ``a`` collects the relative steps (product truncations, intermediate and final roundings, about 8 u), ``c`` the
  absolute error of ``x - mean`` (mean and x truncated when they enter the FPU). Per kernel:
  fp32 intermediates (ktt, ttnn layer norm): a = 2^-7, c = 2^-9; bfloat16 intermediates (ttnn rms norm): a = 2^-9
  (8 + T) (T tiles summed in DST), c = 2^-7. TT-NN's group norm also scales its sums by a bfloat16-truncated
  1/sqrt(n) twice: a = 2^-6 + T 2^-10, c = 2^-6 + T 2^-9. TT-NN's batch norm takes var = E[x^2] - mean^2 from means
  stored in the input dtype: a = u (var + 2 mean^2) / var, c = u, with u = 2^-5 (bfloat16) or 2^-8 (float32).
  A mean off by e = c max|x| also moves the variance by e^2, so rstd by (e rstd)^2 / 2 (added to a).
  ktt's group and batch norm compute in fp32 with float64 sums: only the output rounding counts.
- Statistics: mean within c * max|x|, rstd within (2 a + (c max|x| rstd)^2) relative. Backward: grad_x within
  ``u (K + T) rstd (|g w| + mean|g w| + |xhat| mean|g w xhat|)``, grad_w / grad_b within ``u (K + T) sum|terms|``:
  TT-NN's kernels u = 2^-8 (bfloat16; 2^-7 for float32, whose 16-bit DST truncates it to bfloat16), K = 8 steps
  (+ T tiles and 8 for the truncated scalers of group / batch norm); ktt u = 2^-8 (bfloat16 output) or 2^-21, K = 2.
- The own program and its vectorized fast path agree bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fake_ttnn import FakeTTNN, names_used, run_ttnn
from sim_modes import sim_kernels

from kohakutt import hal, numerics
from kohakutt import kernels as kk
from kohakutt.errors import DtypeError, ProgramError
from kohakutt.hal.card import P150A
from kohakutt.hal.layout import Format
from kohakutt.ir import DType, TensorSpec
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import norm as norm_kernels
from kohakutt.kernels.programs.norm import NormConfig, rowwise_model, rowwise_program, run_rowwise_program

U16 = 2.0**-9  # one bfloat16 rounding
PROVIDERS = ("ttnn", "ktt")  # layer / RMS norm forward: TT-NN's kernel and the own program


def providers(op: str) -> list[str]:
    """The providers the simulator has for ``op``: TT-NN's kernel (its model), the own program where one exists and
    the host math (float32 statistics, as the own program's)."""
    return kk.providers(op, "sim")


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.synchronize()
    d.close()


def put(dev, a, dtype="bfloat16"):
    t = kk.from_numpy(dev, np.asarray(a, np.float32), dtype)
    return t, kk.to_numpy(t).astype(np.float64)


def run(op, inputs, attrs=None, provider=None):
    return [kk.to_numpy(o).astype(np.float64) for o in kk.run(op, inputs, attrs or {}, provider=provider)]


def t64(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def tf32(a):
    """float32 values truncated to TF32, as the unpacker puts them in a source register."""
    return (np.asarray(a, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def tiles(n: int) -> int:
    return -(-n // 32)


def coefficients(provider: str, op: str, dtype: str, width: int) -> tuple[float, float]:
    """(a, c) of the module docstring's output bound."""
    fp32_intermediates = provider != "ttnn" or op in ("layer_norm", "add_layer_norm")
    if fp32_intermediates:
        return 2.0**-7, 2.0**-9
    return U16 * (8 + tiles(width)), 2.0**-7


def bound(a, c, y, x, mean, rstd, w, b, xabs=None):
    """The module docstring's output bound; ``xabs`` the magnitude that enters the FPU (|x| + |residual| when
    fused). A mean off by e = c max|x| also changes the variance by e^2: rstd by (e rstd)^2 / 2."""
    xhat = (x - mean) * rstd
    xabs = np.abs(x) if xabs is None else xabs
    q = (c * np.max(xabs) * rstd) ** 2
    return ((a + q) * (np.abs(y) + np.abs(xhat * w) + np.abs(b)) + c * (xabs + np.abs(mean)) * rstd * np.abs(w)
            + 1e-30)  # fmt: skip


def rstd_bound(a, c, rstd, x):
    return rstd * (2 * a + (c * np.max(np.abs(x)) * rstd) ** 2)


# ------------------------------------------------------------------------------------ layer / RMS norm forward
ROW_CASES = [((6, 50), None), ((3, 4, 40), (4, 40)), ((2, 70, 96), 96), ((5,), None), ((2, 3, 33), (3, 33))]


def _row_reference(op, x, r, w, b, ns, eps):
    s = x + r if r is not None else x
    dims = tuple(range(-len(ns), 0))
    ts = t64(s)
    if op.endswith("rms_norm"):
        mean = np.zeros(s.shape[: s.ndim - len(ns)] + (1,) * len(ns))
        rstd = torch.rsqrt((ts * ts).mean(dims, keepdim=True) + eps).numpy()
    else:
        mean = ts.mean(dims, keepdim=True).numpy()
        rstd = torch.rsqrt(ts.var(dims, unbiased=False, keepdim=True) + eps).numpy()
    y = (s - mean) * rstd * (w if w is not None else 1) + (b if b is not None else 0)
    if not op.endswith("rms_norm"):
        assert np.allclose(y, F.layer_norm(ts, ns, None if w is None else t64(w), None if b is None else t64(b),
                                           eps).numpy())  # fmt: skip
    return s, y, mean, rstd


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("shape", "ns"), ROW_CASES)
@pytest.mark.parametrize("op", ["layer_norm", "add_layer_norm", "rms_norm", "add_rms_norm"])
def test_rowwise_forward_matches_torch(dev, op, shape, ns, dtype):
    rng = np.random.default_rng(len(shape) * 31 + shape[-1])
    ns = (shape[-1],) if ns is None else ((ns,) if isinstance(ns, int) else ns)
    fused = op.startswith("add_")
    xt, x = put(dev, rng.standard_normal(shape) * 2 + 0.7, dtype)
    rt, r = put(dev, rng.standard_normal(shape), dtype) if fused else (None, None)
    wt, w = put(dev, rng.standard_normal(ns), dtype)
    bt, b = put(dev, rng.standard_normal(ns) * 0.5, dtype)
    rms = op.endswith("rms_norm")
    eps = 1e-5 if not rms else (2.0**-7 if dtype == "bfloat16" else float(np.finfo(np.float32).eps))
    s, y, mean, rstd = _row_reference(op, x, r, w, b, ns, eps)
    inputs = [xt] + ([rt] if fused else []) + [wt, bt]
    for provider in providers(op):
        got = run(op, inputs, {"normalized_shape": ns}, provider)
        a, c = coefficients(provider, op, dtype, math.prod(ns))
        assert got[0].shape == shape
        err = np.abs(got[0] - y)
        xabs = np.abs(x) + (np.abs(r) if fused else 0)
        assert np.all(err <= bound(a, c, y, s, mean, rstd, w, b, xabs)), (provider, err.max())
        if fused:  # the next residual: x + residual as stored in the output dtype (float32 added on the SFPU by
            # TT-NN's separate ttnn.add and by the own kernel's float32 variant)
            want_s = kk.to_numpy(kk.from_numpy(dev, (x + r).astype(np.float32), dtype))
            assert np.array_equal(got[1], want_s), provider
        stats = got[1 + fused :]
        assert all(st.dtype == np.float64 and st.shape == rstd.shape for st in stats)
        if not rms:
            assert np.all(np.abs(stats[0] - mean) <= c * np.abs(s).max() + 1e-7), provider
        assert np.all(np.abs(stats[-1] - rstd) <= rstd_bound(a, c, rstd, xabs)), provider


@pytest.mark.parametrize("provider", ["ttnn", "ktt", "host"])
def test_padding_never_leaks(dev, provider):
    """Rows of 33 (and 1) nearly equal values: the padded zeros of the last tile would swamp mean and variance."""
    rng = np.random.default_rng(7)
    for width in (33, 1, 65):
        xt, x = put(dev, 40 + rng.standard_normal((40, width)) * 0.25, "float32")
        _, y, mean, rstd = _row_reference("layer_norm", x, None, None, None, (width,), 1e-5)
        got, gmean, grstd = run("layer_norm", [xt], {}, provider)
        assert np.all(np.abs(gmean - mean) <= 2.0**-9 * 40), (width, provider)
        assert np.all(np.abs(grstd - rstd) <= 2.0**-5 * rstd), (width, provider)
        assert np.all(np.abs(got - y) <= 2.0**-7 * np.abs(y) + 2.0**-9 * 80 * rstd + 1e-6), (width, provider)
        _, rms_y, _, rms_rstd = _row_reference("rms_norm", x, None, None, None, (width,), 1e-6)
        got, grstd = run("rms_norm", [xt], {"eps": 1e-6}, provider)
        assert np.allclose(grstd, rms_rstd, rtol=2.0**-6) and np.allclose(got, rms_y, rtol=2.0**-6)


def test_own_kernel_has_the_better_statistics(dev):
    """TT-NN's rms_norm keeps bfloat16 intermediates (16-bit DST); the own kernel's fp32 statistics do better."""
    rng = np.random.default_rng(3)
    xt, x = put(dev, rng.standard_normal((64, 1000)) * 3 + 2, "bfloat16")
    _, y, _, rstd = _row_reference("rms_norm", x, None, None, None, (1000,), 2.0**-7)
    err = {}
    for provider in providers("rms_norm"):
        got, grstd = run("rms_norm", [xt], {}, provider)
        err[provider] = (np.abs(grstd - rstd) / rstd).mean(), np.abs(got - y).mean()
    for fp32 in ("ktt", "host"):  # the host math keeps fp32 statistics too
        assert err[fp32][0] < err["ttnn"][0] / 4 and err[fp32][1] < err["ttnn"][1], fp32
    with numerics(fp32_acc=True):  # an fp32 DST for TT-NN's kernel closes most of the gap
        got, grstd = run("rms_norm", [xt], {}, "ttnn")
    assert (np.abs(grstd - rstd) / rstd).mean() < err["ttnn"][0] / 4


def test_stats_off_and_eps_defaults(dev):
    xt, x = put(dev, np.random.default_rng(1).standard_normal((4, 40)), "float32")
    for provider in providers("layer_norm"):
        y, mean, rstd = run("layer_norm", [xt], {"stats": False}, provider)
        assert mean.shape == rstd.shape == (0,) and y.shape == (4, 40)
        y_on = run("layer_norm", [xt], {}, provider)[0]
        assert np.array_equal(y, y_on)
        # rms_norm's eps=None is the dtype's machine epsilon (PyTorch's default)
        _, rms_y, _, _ = _row_reference("rms_norm", x, None, None, None, (40,), float(np.finfo(np.float32).eps))
        assert np.allclose(run("rms_norm", [xt], {}, provider)[0], rms_y, rtol=2.0**-6, atol=1e-6)


# ------------------------------------------------------------------------------------------- the own program
PROGRAM_CASES = [
    # (rows, width, rms, fused, gamma, beta, dtype, fidelity)
    (40, 70, False, False, False, False, "bfloat16", "HiFi4"),
    (33, 64, False, True, True, True, "bfloat16", "HiFi4"),
    (64, 45, True, False, True, False, "float32", "HiFi4"),
    (5, 100, False, True, True, True, "float32", "HiFi2"),
    (31, 33, True, True, False, True, "bfloat16", "LoFi"),
    (70, 32, False, False, True, True, "float32", "HiFi3"),
]


@pytest.mark.parametrize(("rows", "width", "rms", "fused", "gamma", "beta", "dtype", "fid"), PROGRAM_CASES)
def test_program_matches_fast_path_bit_for_bit(dev, rows, width, rms, fused, gamma, beta, dtype, fid):
    rng = np.random.default_rng(rows + width)
    fmt = Format(dtype)

    def stored(a):
        return kk.to_numpy(kk.from_numpy(dev, a.astype(np.float32), dtype))

    x = stored(rng.standard_normal((rows, width)) * 3 + 1)
    r = stored(rng.standard_normal((rows, width))) if fused else None
    w = stored(rng.standard_normal(width)) if gamma else None
    b = stored(rng.standard_normal(width)) if beta else None
    cfg = NormConfig(width, 1e-5, rms, fused, gamma, beta, True, Fidelity.of(fid), fmt, fmt, fmt, fmt, fmt)
    got = run_rowwise_program(dev, cfg, x, r, w, b)  # from the kernels' C++
    with sim_kernels("python"):
        twin = run_rowwise_program(dev, cfg, x, r, w, b)
    want = rowwise_model(x, r, w, b, cfg)
    assert sorted(got) == sorted(want) == sorted(n for n in cfg.tensors if n in ("y", "s", "mean", "rstd"))
    for name in got:
        assert np.array_equal(got[name], want[name]), name
        assert np.array_equal(got[name].view(np.uint32), twin[name].view(np.uint32)), f"{name}: C++ != twin"


def test_registered_kernel_is_the_program(dev):
    """kk.run with provider ktt gives exactly what the hal program computes on the same tensors."""
    rng = np.random.default_rng(11)
    xt, x = put(dev, rng.standard_normal((3, 11, 50)) * 2, "bfloat16")
    rt, r = put(dev, rng.standard_normal((3, 11, 50)), "bfloat16")
    wt, w = put(dev, rng.standard_normal(50), "bfloat16")
    y, s, mean, rstd = run("add_layer_norm", [xt, rt, wt], {}, "ktt")
    cfg = NormConfig(50, 1e-5, fused=True, gamma=True)
    prog = run_rowwise_program(dev, cfg, x.reshape(33, 50).astype(np.float32), r.reshape(33, 50).astype(np.float32),
                               w.astype(np.float32))  # fmt: skip
    assert np.array_equal(y.reshape(33, 50), prog["y"]) and np.array_equal(s.reshape(33, 50), prog["s"])
    assert np.array_equal(mean.reshape(-1), prog["mean"]) and np.array_equal(rstd.reshape(-1), prog["rstd"])
    impl = kk.lookup("add_layer_norm", "sim", "ktt")
    assert impl.program is not None
    built = impl.program(cfg, 33)
    assert {k.kind for k in built.kernels} == {"reader", "compute", "writer"}
    assert all("kernel_main" in k.source or "MAIN" in k.source for k in built.kernels)


def test_program_rows_too_wide_for_l1(dev):
    cfg = NormConfig(16384, 1e-5)
    prog = rowwise_program(cfg, 32)
    x = dev.allocate(shape=(32, 16384), fmt="bfloat16", layout="tile")
    outs = [dev.allocate(shape=s, fmt=f, layout="tile") for s, f in (((32, 16384), "bfloat16"), ((32, 1), "float32"),
                                                                     ((32, 1), "float32"))]  # fmt: skip
    with pytest.raises(ProgramError, match="circular buffers on core"):
        dev.run_program(prog, [x, *outs])
    for b in (x, *outs):
        dev.free(b)
    # the op itself stays usable: rows too wide for the program run TT-NN's kernel, as on a card
    xt, _ = put(dev, np.random.default_rng(2).standard_normal((2, 8192)), "bfloat16")
    assert all(np.array_equal(a, b) for a, b in zip(run("layer_norm", [xt], {}, "ktt"),
                                                    run("layer_norm", [xt], {}, "ttnn")))  # fmt: skip


def test_provider_follows_the_knob(dev, knobs):
    """rms_norm's own program has no launcher on a card yet: KTT_CUSTOM_KERNELS leaves TT-NN's kernel chosen on both
    backends (explicitly asked for, the program still runs); TT-NN's kernel squares unscaled values, so every call
    passes on to the host (registry.unscaled_squares)."""
    xt, _ = put(dev, np.random.default_rng(5).standard_normal((8, 64)) * 4 + 3, "bfloat16")
    ft, _ = put(dev, np.random.default_rng(5).standard_normal((8, 64)) * 4 + 3, "float32")
    for custom in (0, 1):
        knobs(KTT_CUSTOM_KERNELS=custom)
        assert kk.lookup("rms_norm", "sim").provider == kk.lookup("rms_norm", "ttnn").provider == "ttnn"
        assert np.array_equal(run("rms_norm", [xt])[0], run("rms_norm", [xt], provider="host")[0])
        assert np.array_equal(run("rms_norm", [ft])[0], run("rms_norm", [ft], provider="host")[0])
    assert not np.array_equal(run("rms_norm", [xt], provider="ttnn")[1], run("rms_norm", [xt], provider="ktt")[1])


# -------------------------------------------------------------------------------------------- group / batch norm
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 5, 7), 3), ((3, 4, 40), 2), ((4, 8), 4), ((1, 4, 3, 2, 5), 1)])
def test_group_norm_matches_torch(dev, shape, groups, dtype):
    rng = np.random.default_rng(sum(shape) + groups)
    xt, x = put(dev, rng.standard_normal(shape) * 2 + 1, dtype)
    c = shape[1]
    wt, w = put(dev, rng.standard_normal(c), dtype)
    bt, b = put(dev, rng.standard_normal(c) * 0.5, dtype)
    y = F.group_norm(t64(x), groups, t64(w), t64(b), 1e-5).numpy()
    xg = t64(x).reshape(shape[0], groups, -1)
    mean, rstd = xg.mean(-1).numpy(), torch.rsqrt(xg.var(-1, unbiased=False) + 1e-5).numpy()
    n, spatial = shape[0], math.prod(shape[2:])
    chan = (1, c) + (1,) * (len(shape) - 2)
    expand = (n, groups, c // groups * spatial)
    m_full, r_full = (np.broadcast_to(v[..., None], expand).reshape(shape) for v in (mean, rstd))
    h = math.prod(shape[2:-1]) if len(shape) > 3 else 1
    t = c // groups * tiles(h) * tiles(shape[-1] if len(shape) > 2 else 1)
    for provider in providers("group_norm"):
        got, gmean, grstd = run("group_norm", [xt, wt, bt], {"num_groups": groups}, provider)
        if provider == "host":
            a, cc = (U16 if dtype == "bfloat16" else 2.0**-22), 2.0**-22
        else:
            a, cc = 2.0**-6 + t * 2.0**-10, 2.0**-6 + t * U16
        err = np.abs(got - y)
        tol = bound(a, cc, y, x, m_full, r_full, w.reshape(chan), b.reshape(chan))
        assert np.all(err <= tol), (provider, err.max())
        assert gmean.shape == grstd.shape == (n, groups)
        assert np.all(np.abs(gmean - mean) <= cc * np.abs(x).max() + 1e-7), provider
        assert np.all(np.abs(grstd - rstd) <= rstd_bound(a, cc, rstd, x)), provider


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape", [(4, 3, 5, 7), (6, 5), (2, 4, 33)])
def test_batch_norm_training_matches_torch(dev, shape, dtype):
    rng = np.random.default_rng(sum(shape))
    xt, x = put(dev, rng.standard_normal(shape) * 2 + 1, dtype)
    c = shape[1]
    wt, w = put(dev, rng.standard_normal(c), dtype)
    bt, b = put(dev, rng.standard_normal(c) * 0.5, dtype)
    mt, rm = put(dev, rng.standard_normal(c), "float32")
    vt, rv = put(dev, rng.uniform(0.5, 2, c), "float32")
    axes = (0, *range(2, len(shape)))
    chan = (1, c) + (1,) * (len(shape) - 2)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    count = x.size // c
    rmt, rvt = t64(rm).clone(), t64(rv).clone()  # batch_norm updates them in place
    y = F.batch_norm(t64(x), rmt, rvt, t64(w), t64(b), True, 0.1, 1e-5).numpy()
    rstd = 1 / np.sqrt(var + 1e-5)
    for provider in providers("batch_norm"):
        got, smean, sinv, new_m, new_v = run("batch_norm", [xt, wt, bt, mt, vt], {}, provider)
        if provider == "host":
            a, cc = (U16 if dtype == "bfloat16" else 2.0**-22), 2.0**-22
            want_v = rvt.numpy()  # PyTorch's update: the unbiased batch var
        else:
            u = 2.0**-5 if dtype == "bfloat16" else 2.0**-8
            a = u * (var + 2 * mean**2) / var  # E[x^2] - mean^2 cancels
            a, cc = a.reshape(chan), u
            want_v = 0.9 * rv + 0.1 * var  # TT-NN's running_statistics: the biased batch var
        m_full, r_full = np.broadcast_to(mean.reshape(chan), shape), np.broadcast_to(rstd.reshape(chan), shape)
        err = np.abs(got - y)
        tol = bound(a, cc, y, x, m_full, r_full, w.reshape(chan), b.reshape(chan))
        assert np.all(err <= tol), (provider, err.max())
        ca = np.max(a)
        assert np.all(np.abs(smean - mean) <= cc * np.abs(x).max() + 1e-7)
        assert np.all(np.abs(sinv - rstd) <= rstd_bound(ca, cc, rstd, x))
        assert np.allclose(new_m, rmt.numpy(), rtol=2 * ca, atol=cc * np.abs(x).max())
        assert np.allclose(new_v, want_v, rtol=4 * ca), (provider, np.abs(new_v - want_v).max())
    assert count > 1


@pytest.mark.parametrize("provider", ["ttnn", "host"])
def test_batch_norm_evaluation_and_without_running(dev, provider):
    rng = np.random.default_rng(9)
    xt, x = put(dev, rng.standard_normal((3, 4, 6, 6)), "float32")
    mt, rm = put(dev, rng.standard_normal(4) * 0.1, "float32")
    vt, rv = put(dev, rng.uniform(0.5, 2, 4), "float32")
    y = F.batch_norm(t64(x), t64(rm), t64(rv), None, None, False, 0.1, 1e-5).numpy()
    got = run("batch_norm", [xt, mt, vt], {"training": False, "params": "mv"}, provider)
    assert np.allclose(got[0], y, rtol=2.0**-8, atol=2.0**-8) and all(o.shape == (0,) for o in got[1:])
    got = run("batch_norm", [xt], {}, provider)  # training without running statistics
    assert got[3].shape == got[4].shape == (0,) and got[1].shape == (4,)
    assert np.allclose(got[0], F.batch_norm(t64(x), None, None, training=True).numpy(), rtol=2.0**-8, atol=2.0**-8)


# ------------------------------------------------------------------------------------------------------ backward
def _bwd_bound(u, k, rstd, gw, xhat, axis_dims):
    mg = np.abs(gw).mean(axis=axis_dims, keepdims=True)
    mgx = np.abs(gw * xhat).mean(axis=axis_dims, keepdims=True)
    return u * k * rstd * (np.abs(gw) + mg + np.abs(xhat) * mgx) + 1e-30


def _units(provider, dtype):
    """u and K of the module docstring's backward bounds."""
    if provider != "ttnn":
        return (2.0**-8 if dtype == "bfloat16" else 2.0**-21), 2
    return (2.0**-8 if dtype == "bfloat16" else 2.0**-7), 8  # fp32 under a 16-bit DST: bfloat16 source registers


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(
    ("op", "shape", "ns"),
    [
        ("layer_norm", (5, 70), (70,)),
        ("layer_norm", (2, 3, 40), (3, 40)),
        ("rms_norm", (6, 33), (33,)),
        ("rms_norm", (2, 4, 20), (20,)),
    ],
)
def test_rowwise_backward_matches_autograd(dev, op, shape, ns, dtype):
    rng = np.random.default_rng(sum(shape))
    xt, x = put(dev, rng.standard_normal(shape) * 2 + 0.5, dtype)
    gt, g = put(dev, rng.standard_normal(shape), dtype)
    wt, w = put(dev, rng.standard_normal(ns), dtype)
    bt, _ = put(dev, rng.standard_normal(ns), dtype)
    dims = tuple(range(-len(ns), 0))
    eps = 1e-5
    tx, tw = t64(x).requires_grad_(), t64(w).requires_grad_()
    tb = torch.zeros(ns, dtype=torch.float64, requires_grad=True)
    if op == "layer_norm":
        mean = tx.detach().mean(dims, keepdim=True)
        rstd = torch.rsqrt(tx.detach().var(dims, unbiased=False, keepdim=True) + eps)
        out = F.layer_norm(tx, ns, tw, tb, eps)
        stats = [put(dev, mean.numpy(), "float32")[0], put(dev, rstd.numpy(), "float32")[0]]
    else:
        mean = torch.zeros(())
        rstd = torch.rsqrt((tx.detach() ** 2).mean(dims, keepdim=True) + eps)
        out = tx * torch.rsqrt((tx * tx).mean(dims, keepdim=True) + eps) * tw + tb
        stats = [put(dev, rstd.numpy(), "float32")[0]]
    out.backward(t64(g))
    xhat = ((t64(x) - mean) * rstd).numpy()
    gw = g * w
    rows = math.prod(shape[: len(shape) - len(ns)])
    width = math.prod(ns)
    lead = tuple(range(len(shape) - len(ns)))
    for provider in providers(f"{op}_backward"):
        u, k = _units(provider, dtype)
        dx, dw, db = run(f"{op}_backward", [gt, xt, *stats, wt, bt], {"normalized_shape": ns}, provider)
        tol = _bwd_bound(u, k + tiles(width), rstd.numpy(), gw, xhat, dims)
        assert np.all(np.abs(dx - tx.grad.numpy()) <= tol), (provider, np.abs(dx - tx.grad.numpy()).max())
        for got, want, terms in ((dw, tw.grad.numpy(), g * xhat), (db, tb.grad.numpy(), g)):
            tol = u * (k + tiles(rows)) * np.abs(terms).sum(axis=lead) + 1e-30
            assert got.shape == ns and np.all(np.abs(got - want) <= tol), provider
        masked = run(
            f"{op}_backward",
            [gt, xt, *stats, wt, bt],
            {"normalized_shape": ns, "output_mask": (True, False, False)},
            provider,
        )
        assert np.array_equal(masked[0], dx) and masked[1].shape == masked[2].shape == (0,)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("shape", "groups"), [((2, 6, 5, 7), 3), ((3, 4, 40), 2)])
def test_group_norm_backward_matches_autograd(dev, shape, groups, dtype):
    rng = np.random.default_rng(sum(shape))
    xt, x = put(dev, rng.standard_normal(shape) * 2 + 1, dtype)
    gt, g = put(dev, rng.standard_normal(shape), dtype)
    c, n = shape[1], shape[0]
    wt, w = put(dev, rng.standard_normal(c), dtype)
    tx, tw = t64(x).requires_grad_(), t64(w).requires_grad_()
    tb = torch.zeros(c, dtype=torch.float64, requires_grad=True)
    F.group_norm(tx, groups, tw, tb, 1e-5).backward(t64(g))
    xg = t64(x).reshape(n, groups, -1)
    mean, rstd = xg.mean(-1), torch.rsqrt(xg.var(-1, unbiased=False) + 1e-5)
    mt, _ = put(dev, mean.numpy(), "float32")
    st, _ = put(dev, rstd.numpy(), "float32")
    chan = (1, c) + (1,) * (len(shape) - 2)
    r_full = np.broadcast_to(rstd.numpy()[..., None], xg.shape).reshape(shape)
    xhat = ((xg - mean[..., None]) * rstd[..., None]).reshape(shape).numpy()
    gw = g * w.reshape(chan)
    axes = (0, *range(2, len(shape)))
    t = c // groups * (tiles(shape[2]) * tiles(shape[3]) if len(shape) == 4 else tiles(shape[-1]))
    for provider in providers("group_norm_backward"):
        u, k = _units(provider, dtype)
        k = k if provider == "host" else k + t + 2**3  # tile sums in the group plus the truncated scaler (2^-6)
        dx, dw, db = run("group_norm_backward", [gt, xt, mt, st, wt], {"num_groups": groups}, provider)
        per_group = [np.broadcast_to(np.abs(v).reshape(n, groups, -1).mean(-1, keepdims=True),
                                     (n, groups, xg.shape[-1])).reshape(shape) for v in (gw, gw * xhat)]  # fmt: skip
        tol = u * k * r_full * (np.abs(gw) + per_group[0] + np.abs(xhat) * per_group[1])
        assert np.all(np.abs(dx - tx.grad.numpy()) <= tol), (provider, np.abs(dx - tx.grad.numpy()).max())
        for got, want, terms in ((dw, tw.grad.numpy(), g * xhat), (db, tb.grad.numpy(), g)):
            assert np.all(np.abs(got - want) <= u * (k + 8) * np.abs(terms).sum(axis=axes)), provider


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_backward_matches_autograd(dev, training, dtype):
    rng = np.random.default_rng(4)
    shape = (4, 3, 5, 7)
    xt, x = put(dev, rng.standard_normal(shape) * 2 + 1, dtype)
    gt, g = put(dev, rng.standard_normal(shape), dtype)
    wt, w = put(dev, rng.standard_normal(3), dtype)
    tx, tw = t64(x).requires_grad_(), t64(w).requires_grad_()
    tb = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    axes = (0, 2, 3)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        F.batch_norm(tx, None, None, tw, tb, True, 0.1, 1e-5).backward(t64(g))
        second = 1 / np.sqrt(var + 1e-5)
    else:
        mean, var = rng.standard_normal(3) * 0.1, rng.uniform(0.5, 2, 3)
        F.batch_norm(tx, t64(mean), t64(var), tw, tb, False, 0.1, 1e-5).backward(t64(g))
        second = var
    mt, _ = put(dev, mean, "float32")
    st, _ = put(dev, second, "float32")
    rstd = (1 / np.sqrt(var + 1e-5)).reshape(1, 3, 1, 1)
    xhat = (x - mean.reshape(1, 3, 1, 1)) * rstd
    gw = g * w.reshape(1, 3, 1, 1)
    for provider in providers("batch_norm_backward"):
        u, k = _units(provider, dtype)
        k = k if provider == "host" else k + 8  # the means' truncated scalers
        dx, dw, db = run("batch_norm_backward", [gt, xt, mt, st, wt], {"training": training}, provider)
        assert np.all(np.abs(dx - tx.grad.numpy()) <= _bwd_bound(u, k, rstd, gw, xhat, axes)), provider
        for got, want, terms in ((dw, tw.grad.numpy(), g * xhat), (db, tb.grad.numpy(), g)):
            assert np.all(np.abs(got - want) <= u * (k + 8) * np.abs(terms).sum(axis=axes)), provider


# ------------------------------------------------------------------------------------------ errors, costs, TT-NN
@pytest.mark.parametrize(("op", "inputs", "attrs", "error", "match"), [
    ("layer_norm", [(4, 5)], {"normalized_shape": (4,)}, ShapeError, "trailing dims"),
    ("layer_norm", [(4, 5), (4,)], {}, ShapeError, "weight must have shape"),
    ("add_layer_norm", [(4, 5), (4, 6)], {}, ShapeError, "residual"),
    ("rms_norm", [(4, 5), (5,), (5,), (5,)], {}, ShapeError, "pass params="),
    ("group_norm", [(2, 6, 3)], {"num_groups": 4}, ShapeError, "num_groups"),
    ("group_norm", [(6,)], {"num_groups": 1}, ShapeError, r"\(N, C, \*\)"),
    ("batch_norm", [(2, 3, 4)], {"training": False}, ShapeError, "running_mean and running_var"),
    ("batch_norm", [(2, 3, 4), (3,)], {"params": "m"}, ShapeError, "both running_mean and running_var"),
    ("layer_norm_backward", [(4, 5), (4, 5), (4, 1), (3, 1)], {}, ShapeError, "rstd must have shape"),
    ("group_norm_backward", [(2, 4, 3), (2, 4, 3), (2, 2), (2, 2), (4,), (4,)], {"num_groups": 2}, ShapeError,
     "pass params="),
])  # fmt: skip
def test_bad_operands_raise_typed_errors(dev, op, inputs, attrs, error, match):
    tensors = [put(dev, np.ones(s), "float32")[0] for s in inputs]
    with pytest.raises(error, match=match):
        kk.run(op, tensors, attrs)


def test_integer_inputs_are_refused(dev):
    xi = kk.from_numpy(dev, np.ones((2, 3), np.int32), "int32")
    for op in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        with pytest.raises(DtypeError, match="typecast"):
            kk.run(op, [xi])


def test_costs_follow_size_and_fidelity():
    card = P150A
    for op in ("layer_norm", "rms_norm", "group_norm", "batch_norm", "layer_norm_backward", "batch_norm_backward"):
        d = irops.get(op)
        attrs = d.bind_attrs({})
        for provider in providers(op):
            est = kk.lookup(op, "sim", provider).estimate
            n_in = len(d.inputs) - 1 if op.endswith("backward") else 1

            def ns(shape, fid="HiFi4", _est=est, _n=n_in, _d=d, _attrs=attrs, op=op):
                specs = [TensorSpec(shape, DType.BFLOAT16)] * 2 if _n == 2 else [TensorSpec(shape, DType.BFLOAT16)]
                if op.startswith(("layer_norm_b", "batch_norm_b")):
                    stat = (shape[0], 1) if op.startswith("layer") else (shape[1],)
                    specs = [TensorSpec(shape, DType.BFLOAT16)] * 2 + [TensorSpec(stat, DType.FLOAT32)] * 2
                return _est(specs, _d.infer(specs, _attrs), _attrs, Numerics(Fidelity.of(fid)), card)

            small, big = ns((64, 256)), ns((8192, 4096))
            assert 0 < small < big, (op, provider)
            assert ns((8192, 4096), "LoFi") <= big


@pytest.mark.parametrize("num", [Numerics(), Numerics(Fidelity.LoFi, True, True)])
def test_ttnn_calls_use_only_declared_names(num):
    calls = [
        ("layer_norm", [(4, 40), (40,), (40,)], {}), ("add_layer_norm", [(2, 3, 40), (2, 3, 40), (3, 40)],
                                                     {"normalized_shape": (3, 40), "params": "w"}),
        ("rms_norm", [(4, 40), (40,)], {"stats": False}), ("add_rms_norm", [(4, 40), (4, 40)], {}),
        ("layer_norm_backward", [(4, 40), (4, 40), (4, 1), (4, 1), (40,)], {}),
        ("rms_norm_backward", [(4, 40), (4, 40), (4, 1), (40,)], {"output_mask": (True, False, True)}),
        ("group_norm", [(2, 4, 5, 6), (4,), (4,)], {"num_groups": 2}),
        ("group_norm_backward", [(2, 4, 5), (2, 4, 5), (2, 2), (2, 2), (4,)], {"num_groups": 2}),
        ("batch_norm", [(2, 4, 5), (4,), (4,), (4,), (4,)], {}),
        ("batch_norm", [(2, 4, 5), (4,), (4,)], {"training": False, "params": "mv"}),
        ("batch_norm_backward", [(2, 4, 5), (2, 4, 5), (4,), (4,), (4,)], {"training": False}),
    ]  # fmt: skip
    fake = FakeTTNN()
    for op, shapes, attrs in calls:
        out = run_ttnn(fake, op, shapes, attrs, num)
        assert len(out) == len(irops.get(op).infer([TensorSpec(s, DType.BFLOAT16) for s in shapes],
                                                   irops.get(op).bind_attrs(attrs))), op  # fmt: skip
    log = names_used(fake, "norm.py")
    undeclared = sorted(log - set(norm_kernels.TTNN_NAMES))
    assert not undeclared, f"TT-NN names used but not in TTNN_NAMES: {undeclared}"
    assert {"layer_norm", "rms_norm", "moreh_group_norm", "batch_norm", "moreh_layer_norm_backward",
            "moreh_group_norm_backward"} <= log  # fmt: skip


def test_every_norm_op_runs_on_every_provider():
    """Each norm op has TT-NN's kernel and the host math on both backends; the layer / RMS norm forwards also have
    the own program (on the sim; a card does not launch it yet)."""
    rowwise = {"layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"}
    for op, d in irops.all_ops().items():
        if d.family == "norm":
            own = ["ktt"] if op in rowwise else []
            assert kk.providers(op, "sim") == ["ttnn", *own, "host"], op
            assert kk.providers(op, "ttnn") == ["ttnn", "host"], op
