"""The fused family (bias + GELU, silu_mul / swiglu, rotary embedding, and backwards) against torch float64 references
computed from the same device-stored inputs, for both simulator providers; the own programs against the fast path.

Tolerances, per element, from the formats (u = 2^-8: one bf16 round-to-nearest is within u relative; float32: 2^-24):
- bias_gelu: the ttnn chain stores x + b (u |s|), gelu' <= 1.13, then rounds gelu once: u |ref| + 1.13 u |s|
  (s = x + b); TT-NN's approximate (LUT) gelu adds 0.0234. ktt keeps the sum in an fp32 DST and rounds once:
  u |ref| (+ 2^-22 for the fp32 sum). float32: 2^-23 (|ref| + |s|). The backward: s stored (u |s|), |gelu''| <= 0.8,
  then one rounding: u |ref| + 0.8 u |g s|.
- silu(gate) * up: ttnn stores silu (u) then rounds the exact product (u): 2.01 u |ref|. ktt (fp32 DST): sigmoid
  exact, gate * up exact, then the FPU product truncates sigmoid to SrcA's 10 bits (< 2^-9) and gate * up to TF32
  (< 2^-10), rounded once: 1.76 u |ref|. ktt with fp32_acc=False: bf16 DST and CBs, each FPU multiply rounded after
  each of its 4 fidelity phases: 9.1 u |ref|. float32 (TT-NN's SFPU): 2^-22 |ref|. Backward: both gradients take
  two roundings: 2.01 u |ref|.
- rotary: terms P = |x cos|, Q = |rot(x) sin|. ttnn (16-bit DST): each product rounded after each of 4 phases,
  then the sum rounded: 4.1 u (P + Q) + u |ref|; with fp32_acc: products exact, stored in bf16: u (P + Q) + u |ref|.
  ktt (fp32 CBs): the exact products are truncated to TF32 when read back (< 2^-10 each, twice in the matmul form's
  backward): 2^-9 (P + Q) + u |ref|. float32 data with fp32_acc: SrcA 10 bits, SrcB and the sum's operands TF32:
  2^-8 (P + Q) + 2^-23 |ref|.
The own programs (``run_program``) and the fast path give the same bits: compared exactly.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sim_modes import sim_kernels

from kohakutt import hal, numerics
from kohakutt import kernels as kk
from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator
from kohakutt.hal.card import P150A
from kohakutt.ir import DType, TensorSpec
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import Fidelity, Numerics, resolve
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import fused as kf
from kohakutt.kernels.programs import fused as pf

U = 2.0**-8
F32 = 2.0**-24
LUT_GELU = 0.0234
OPS = ["bias_gelu", "bias_gelu_backward", "silu_mul", "silu_mul_backward", "swiglu", "swiglu_backward",
       "rotary_embedding", "rotary_embedding_backward"]  # fmt: skip


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def put(dev, a, dtype="bfloat16", layout="tile"):
    t = kk.from_numpy(dev, np.asarray(a, np.float32), dtype, layout)
    return t, kk.to_numpy(t).astype(np.float64)


def run(op, inputs, attrs=None, provider=None):
    outs = kk.run(op, inputs, attrs or {}, provider=provider)
    got = [kk.to_numpy(o).astype(np.float64) for o in outs]
    return got if len(got) > 1 else got[0]


def within(got, ref, bound, what=""):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    err = np.abs(got - ref)
    bad = ~(err <= bound)
    if bad.any():
        i = np.flatnonzero(bad)[0]
        ratio = float(np.max(np.where(bound > 0, err / np.maximum(bound, 1e-300), np.inf)))
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} elements outside the bound (worst {ratio:.2f}x); "
                             f"first: got {got.flat[i]!r}, ref {ref.flat[i]!r}, bound {bound.flat[i]!r}")
    return float(np.max(err / np.maximum(bound, 1e-300))) if err.size else 0.0


def t64(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def randn(rng, shape, scale=2.0):
    return rng.standard_normal(shape) * scale


# ------------------------------------------------------------------------------------------- references (float64)
def gelu_ref(s, approximate):
    return F.gelu(t64(s), approximate=approximate).numpy()


def gelu_grad_ref(g, s, approximate):
    t = t64(s).requires_grad_()
    F.gelu(t, approximate=approximate).backward(t64(g))
    return t.grad.numpy()


def silu_mul_ref(gate, up):
    return (F.silu(t64(gate)) * t64(up)).numpy()


def silu_mul_grads(g, gate, up):
    a, b = t64(gate).requires_grad_(), t64(up).requires_grad_()
    (F.silu(a) * b).backward(t64(g))
    return a.grad.numpy(), b.grad.numpy()


def rot_ref(x, interleaved):
    x = np.asarray(x, np.float64)
    if interleaved:
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        return out
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rotary_ref(x, cos, sin, interleaved):
    return x * cos + rot_ref(x, interleaved) * sin


def rotary_grad_ref(g, x_shape, cos, sin, interleaved):
    """d/dx of sum(g * rotary(x)) by autograd (rot as a linear map in torch)."""
    x = torch.zeros(x_shape, dtype=torch.float64, requires_grad=True)
    if interleaved:
        pairs = x.reshape(*x_shape[:-1], -1, 2)
        r = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).reshape(x_shape)
    else:
        h = x_shape[-1] // 2
        r = torch.cat([-x[..., h:], x[..., :h]], -1)
    (x * t64(cos) + r * t64(sin)).backward(t64(g))
    return x.grad.numpy()


def rope_cache(seq, dim, interleaved, base=10000.0, offset=3):
    """cos / sin of a real RoPE cache (frequencies repeated over the halves, or over pairs)."""
    inv = base ** (-np.arange(0, dim // 2) * 2.0 / dim)
    ang = np.outer(np.arange(offset, offset + seq), inv)
    full = np.repeat(ang, 2, axis=-1) if interleaved else np.concatenate([ang, ang], axis=-1)
    return np.cos(full), np.sin(full)


# ---------------------------------------------------------------------------------------------------- bias_gelu
def gelu_bound(provider, dtype, ref, s, approx=False, fp32_acc=None):
    if dtype == "float32":
        return 2.0**-23 * (np.abs(ref) + np.abs(s))
    if provider == "ktt" and fp32_acc is not False:
        return U * np.abs(ref) + 2.0**-22 * (np.abs(ref) + np.abs(s))
    return U * np.abs(ref) + 1.13 * U * np.abs(s) + (LUT_GELU if approx else 0.0)


@pytest.mark.parametrize("provider", ["ttnn", "ktt"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu(dev, provider, dtype, approximate):
    rng = np.random.default_rng(1)
    x, xv = put(dev, randn(rng, (3, 17, 45)), dtype)
    b, bv = put(dev, randn(rng, (45,)), dtype)
    s = xv + bv
    got = run("bias_gelu", [x, b], {"approximate": approximate}, provider)
    ref = gelu_ref(s, approximate)
    within(got, ref, gelu_bound(provider, dtype, ref, s), f"bias_gelu {provider} {dtype}")


def test_bias_gelu_own_kernel_rounds_once_and_ttnn_twice(dev):
    rng = np.random.default_rng(2)
    x, xv = put(dev, randn(rng, (64, 96)))
    b, bv = put(dev, randn(rng, (96,)) * 0.01)  # a small bias: x + b rarely fits bf16, so the stored sum moves
    s = xv + bv
    ref = gelu_ref(s, "none")
    ktt = run("bias_gelu", [x, b], provider="ktt")
    tt = run("bias_gelu", [x, b], provider="ttnn")
    within(ktt, ref, U * np.abs(ref) + 2.0**-22 * np.abs(s), "ktt: one rounding")
    assert np.abs(tt - ref).max() > (U * np.abs(ref)).max() * 0.5  # the stored sum shows
    with numerics(fp32_acc=False):  # the own kernel with a bf16 DST rounds the sum too
        within(run("bias_gelu", [x, b], provider="ktt"), ref, gelu_bound("ttnn", "bfloat16", ref, s), "ktt bf16 DST")


def test_bias_gelu_approx_scope_is_ttnn_lut(dev):
    rng = np.random.default_rng(3)
    x, xv = put(dev, randn(rng, (40, 33)))
    b, bv = put(dev, randn(rng, (33,)))
    ref = gelu_ref(xv + bv, "none")
    with numerics(approx=True):
        got = run("bias_gelu", [x, b], provider="ttnn")
    err = within(got, ref, gelu_bound("ttnn", "bfloat16", ref, xv + bv, approx=True), "LUT gelu")
    assert np.abs(got - ref).max() > 1e-3 and err > 0  # really the LUT, not the exact model


def test_bias_gelu_block_float_input(dev):
    rng = np.random.default_rng(4)
    x, xv = put(dev, randn(rng, (2, 40, 64)), "bfloat8_b")
    b, bv = put(dev, randn(rng, (64,)), "bfloat16")
    (y,) = kk.run("bias_gelu", [x, b])
    assert y.dtype is DType.BFLOAT16
    got, ref = kk.to_numpy(y).astype(np.float64), gelu_ref(xv + bv, "none")
    within(got, ref, gelu_bound("ktt", "bfloat16", ref, xv + bv), "bfloat8_b x")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_backward(dev, dtype, approximate):
    """The backwards have TT-NN's kernels only (the op docs say so): the default lookup runs them."""
    rng = np.random.default_rng(5)
    g, gv = put(dev, randn(rng, (2, 9, 50)), dtype)
    x, xv = put(dev, randn(rng, (2, 9, 50)), dtype)
    b, bv = put(dev, randn(rng, (50,)), dtype)
    got = run("bias_gelu_backward", [g, x, b], {"approximate": approximate})
    s = xv + bv
    ref = gelu_grad_ref(gv, s, approximate)
    u = U if dtype == "bfloat16" else 2.0**-23
    within(got, ref, u * np.abs(ref) + 0.8 * u * np.abs(gv * s) + 1e-30, f"gelu backward {dtype}")


# ------------------------------------------------------------------------------------------ silu_mul / swiglu
def silu_bound(provider, dtype, ref, fp32_acc=None):
    if dtype == "float32":
        return 2.0**-22 * np.abs(ref)
    if provider == "ktt":
        return (9.1 if fp32_acc is False else 1.76) * U * np.abs(ref)
    return 2.01 * U * np.abs(ref)


@pytest.mark.parametrize("provider", ["ttnn", "ktt"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_silu_mul(dev, provider, dtype):
    rng = np.random.default_rng(6)
    gate, gv = put(dev, randn(rng, (5, 37)), dtype)
    up, uv = put(dev, randn(rng, (5, 37)), dtype)
    ref = silu_mul_ref(gv, uv)
    within(run("silu_mul", [gate, up], provider=provider), ref, silu_bound(provider, dtype, ref), "silu_mul")


@pytest.mark.parametrize("fp32_acc", [False, True])
def test_silu_mul_own_kernel_dst_modes(dev, fp32_acc):
    rng = np.random.default_rng(7)
    gate, gv = put(dev, randn(rng, (33, 70)))
    up, uv = put(dev, randn(rng, (33, 70)))
    ref = silu_mul_ref(gv, uv)
    with numerics(fp32_acc=fp32_acc):
        got = run("silu_mul", [gate, up], provider="ktt")
    within(got, ref, silu_bound("ktt", "bfloat16", ref, fp32_acc), f"ktt fp32_acc={fp32_acc}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_silu_mul_backward(dev, dtype):
    rng = np.random.default_rng(8)
    g, ggv = put(dev, randn(rng, (3, 21)), dtype)
    gate, gv = put(dev, randn(rng, (3, 21)), dtype)
    up, uv = put(dev, randn(rng, (3, 21)), dtype)
    d_gate, d_up = run("silu_mul_backward", [g, gate, up])
    ref_gate, ref_up = silu_mul_grads(ggv, gv, uv)
    u = 2.01 * U if dtype == "bfloat16" else 2.0**-22
    within(d_gate, ref_gate, u * np.abs(ref_gate), "d gate")
    within(d_up, ref_up, u * np.abs(ref_up), "d up")


@pytest.mark.parametrize("provider", ["ttnn", "ktt"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape,dim", [((7, 90), -1), ((6, 10, 8), 0), ((6, 10, 8), 1), ((4, 64, 40), -2)])
def test_swiglu(dev, provider, dtype, shape, dim):
    rng = np.random.default_rng(9)
    x, xv = put(dev, randn(rng, shape), dtype)
    a, b = np.split(xv, 2, axis=dim)
    ref = silu_mul_ref(a, b)
    within(run("swiglu", [x], {"dim": dim}, provider), ref, silu_bound(provider, dtype, ref), f"swiglu {shape}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape,dim", [((7, 90), -1), ((6, 10, 8), 1)])
def test_swiglu_backward(dev, dtype, shape, dim):
    rng = np.random.default_rng(10)
    x, xv = put(dev, randn(rng, shape), dtype)
    half = list(shape)
    half[dim] //= 2
    g, gv = put(dev, randn(rng, half), dtype)
    xt = t64(xv).requires_grad_()
    a, b = xt.chunk(2, dim)
    (F.silu(a) * b).backward(t64(gv))
    ref = xt.grad.numpy()
    got = run("swiglu_backward", [g, x], {"dim": dim})
    u = 2.01 * U if dtype == "bfloat16" else 2.0**-22
    within(got, ref, u * np.abs(ref), f"swiglu backward {shape}")


# ------------------------------------------------------------------------------------------------------- rotary
def rotary_bound(provider, dtype, p, q, ref, fp32_acc=None):
    if dtype == "float32":
        return 2.0**-8 * (p + q) + 2.0**-23 * np.abs(ref)
    if provider == "ktt" and fp32_acc is not False:
        return 2.0**-9 * (p + q) + U * np.abs(ref)
    return (1.0 if fp32_acc else 4.1) * U * (p + q) + U * np.abs(ref)


ROTARY_CASES = [((2, 3, 17, 40), False), ((1, 2, 9, 64), False), ((2, 17, 20), False), ((2, 17, 20), True),
                ((3, 40, 64), True)]  # fmt: skip


@pytest.mark.parametrize("provider", ["ttnn", "ktt"])
@pytest.mark.parametrize("shape,interleaved", ROTARY_CASES)
@pytest.mark.parametrize("fp32_acc", [None, True])
def test_rotary_embedding(dev, provider, shape, interleaved, fp32_acc):
    rng = np.random.default_rng(11)
    c, s = rope_cache(shape[-2], shape[-1], interleaved)
    x, xv = put(dev, randn(rng, shape))
    cos, cv = put(dev, c)
    sin, sv = put(dev, s)
    with numerics(fp32_acc=fp32_acc):
        got = run("rotary_embedding", [x, cos, sin], {"interleaved": interleaved}, provider)
    ref = rotary_ref(xv, cv, sv, interleaved)
    p, q = np.abs(xv * cv), np.abs(rot_ref(xv, interleaved) * sv)
    within(got, ref, rotary_bound(provider, "bfloat16", p, q, ref, fp32_acc), f"rotary {provider} {shape}")


@pytest.mark.parametrize("provider", ["ttnn", "ktt"])
@pytest.mark.parametrize("shape,interleaved", ROTARY_CASES[1:4])
def test_rotary_embedding_backward(dev, provider, shape, interleaved):
    rng = np.random.default_rng(12)
    c, s = rope_cache(shape[-2], shape[-1], interleaved)
    g, gv = put(dev, randn(rng, shape))
    cos, cv = put(dev, c)
    sin, sv = put(dev, s)
    got = run("rotary_embedding_backward", [g, cos, sin], {"interleaved": interleaved}, provider)
    ref = rotary_grad_ref(gv, shape, cv, sv, interleaved)
    p, q = np.abs(gv * cv), np.abs(rot_ref(gv * sv, interleaved))  # |rot^T(g sin)|, element by element
    within(got, ref, rotary_bound(provider, "bfloat16", p, q, ref), f"rotary backward {provider} {shape}")


@pytest.mark.parametrize("shape,interleaved", [((2, 17, 64), False), ((2, 17, 20), True), ((9, 40), False)])
def test_own_rotary_backward_takes_any_sin(dev, shape, interleaved):
    """The own kernel computes grad * cos + rot^T(grad * sin) for any sin, not only a RoPE cache."""
    rng = np.random.default_rng(13)
    g, gv = put(dev, randn(rng, shape))
    cos, cv = put(dev, randn(rng, shape[-2:]))
    sin, sv = put(dev, randn(rng, shape[-2:]))
    got = run("rotary_embedding_backward", [g, cos, sin], {"interleaved": interleaved}, "ktt")
    ref = rotary_grad_ref(gv, shape, cv, sv, interleaved)
    q = np.abs(rot_ref(gv * sv, interleaved))
    within(got, ref, rotary_bound("ktt", "bfloat16", np.abs(gv * cv), q, ref), "any sin")


def test_rotary_float32(dev):
    rng = np.random.default_rng(14)
    shape = (2, 17, 64)
    c, s = rope_cache(17, 64, False)
    x, xv = put(dev, randn(rng, shape), "float32")
    cos, cv = put(dev, c, "float32")
    sin, sv = put(dev, s, "float32")
    ref = rotary_ref(xv, cv, sv, False)
    p, q = np.abs(xv * cv), np.abs(rot_ref(xv, False) * sv)
    for provider in ("ttnn", "ktt"):  # the own kernel hands float32 to TT-NN's program
        with numerics(fp32_acc=True):
            got = run("rotary_embedding", [x, cos, sin], {}, provider)
        within(got, ref, rotary_bound(provider, "float32", p, q, ref), f"fp32 rotary {provider}")
    # TT-NN's default 16-bit DST: the unpacker truncates float32 operands to bf16, so the result is the same as
    # running on the truncated values.
    trunc = [put(dev, (v.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32), "float32")[0]
             for v in (xv, cv, sv)]  # fmt: skip
    np.testing.assert_array_equal(run("rotary_embedding", [x, cos, sin], {}, "ttnn"),
                                  run("rotary_embedding", trunc, {}, "ttnn"))


def test_rotary_caches_broadcast_over_heads(dev):
    rng = np.random.default_rng(15)
    x, xv = put(dev, randn(rng, (2, 3, 10, 32)))
    c, s = rope_cache(10, 32, False)
    cos, cv = put(dev, np.broadcast_to(c, (2, 1, 10, 32)) * rng.uniform(0.5, 1.0, (2, 1, 1, 1)))
    sin, sv = put(dev, np.broadcast_to(s, (2, 1, 10, 32)))
    ref = rotary_ref(xv, cv, sv, False)
    for provider in ("ttnn", "ktt"):
        within(run("rotary_embedding", [x, cos, sin], {}, provider), ref,
               rotary_bound(provider, "bfloat16", np.abs(xv * cv), np.abs(rot_ref(xv, False) * sv), ref), provider)


# ------------------------------------------------------------------------------------------- the own programs
def program_matches(op, inputs, attrs=None, **kw):
    """The program run from its C++ (the host build of the kernel API) and from its Python twin, and the vectorized
    model the op library runs: the same bits."""
    (fast,) = kk.run(op, inputs, attrs or {}, provider="ktt")[:1]
    (prog,) = pf.run_program(op, inputs, attrs, **kw)[:1]
    with sim_kernels("python"):
        (twin,) = pf.run_program(op, inputs, attrs, **kw)[:1]
    a, b, c = kk.to_numpy(fast), kk.to_numpy(prog), kk.to_numpy(twin)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=f"{op} {attrs}: program != model")
    np.testing.assert_array_equal(b.view(np.uint32), c.view(np.uint32), err_msg=f"{op} {attrs}: C++ != twin")
    return a


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("fp32_acc", [None, False])
def test_bias_gelu_program_matches_fast_path(dev, approximate, fp32_acc):
    rng = np.random.default_rng(20)
    x, _ = put(dev, randn(rng, (3, 40, 70)))
    b, _ = put(dev, randn(rng, (70,)))
    with numerics(fp32_acc=fp32_acc):
        program_matches("bias_gelu", [x, b], {"approximate": approximate})
    xb, _ = put(dev, randn(rng, (40, 70)), "bfloat8_b")
    program_matches("bias_gelu", [xb, b], max_cores=1)


@pytest.mark.parametrize("num", [Numerics(), Numerics(fp32_acc=False), Numerics(fidelity=Fidelity.LoFi)])
def test_silu_mul_program_matches_fast_path(dev, num):
    rng = np.random.default_rng(21)
    gate, _ = put(dev, randn(rng, (40, 70)))
    up, _ = put(dev, randn(rng, (40, 70)))
    with numerics(num.fidelity, num.fp32_acc):
        program_matches("silu_mul", [gate, up])


@pytest.mark.parametrize("shape,dim", [((33, 128), -1), ((2, 64, 40), -2), ((4, 33, 40), 0), ((2, 6, 20, 40), 1)])
def test_swiglu_program_matches_fast_path(dev, shape, dim):
    rng = np.random.default_rng(22)
    x, _ = put(dev, randn(rng, shape))
    program_matches("swiglu", [x], {"dim": dim})


@pytest.mark.parametrize("op", ["rotary_embedding", "rotary_embedding_backward"])
@pytest.mark.parametrize("shape,interleaved", [((2, 2, 40, 64), False), ((3, 10, 20), False), ((2, 40, 64), True),
                                               ((3, 10, 20), True)])  # fmt: skip
@pytest.mark.parametrize("num", [Numerics(), Numerics(fp32_acc=False), Numerics(fidelity=Fidelity.LoFi)])
def test_rotary_program_matches_fast_path(dev, op, shape, interleaved, num):
    rng = np.random.default_rng(23)
    x, _ = put(dev, randn(rng, shape))
    cos, _ = put(dev, randn(rng, shape[-2:]))
    sin, _ = put(dev, randn(rng, shape[-2:]))
    with numerics(num.fidelity, num.fp32_acc):
        program_matches(op, [x, cos, sin], {"interleaved": interleaved})


def test_rotary_program_with_a_cache_per_matrix(dev):
    rng = np.random.default_rng(24)
    x, _ = put(dev, randn(rng, (2, 3, 20, 64)))
    cos, _ = put(dev, randn(rng, (2, 3, 20, 64)))
    sin, _ = put(dev, randn(rng, (2, 3, 20, 64)))
    program_matches("rotary_embedding", [x, cos, sin])
    partial, _ = put(dev, randn(rng, (2, 1, 20, 64)))
    with pytest.raises(KohakuTTUnsupportedOperator, match="expand it first"):
        pf.run_program("rotary_embedding", [x, partial, partial])


def test_programs_spread_over_cores_and_estimate_time(dev):
    rng = np.random.default_rng(25)
    x, _ = put(dev, randn(rng, (256, 96)))
    b, _ = put(dev, randn(rng, (96,)))
    (out,) = kk.run("bias_gelu", [x, b], provider="ktt")
    d = irops.get("bias_gelu")
    prog = pf.build("bias_gelu", [x, b], [out], d.bind_attrs({}), resolve(d.numerics))
    assert len(prog.cores()) == 24  # 8 x 3 tiles, one per core
    for k in prog.kernels:
        assert re.search(r"kernel_main|MAIN", k.source) and k.sim is not None
    assert prog.estimate_ns(dev.card, [x.buffer, b.buffer, out.buffer], {}) > 2_000
    assert len(pf.build("bias_gelu", [x, b], [out], d.bind_attrs({}), Numerics(), max_cores=5).cores()) == 5
    program_matches("bias_gelu", [x, b])


def test_rotation_tile_and_bias_broadcast_helpers():
    r = pf.rotation_matrix(64, True)
    v = np.arange(32.0)
    np.testing.assert_array_equal(v @ r, rot_ref(v, True))
    np.testing.assert_array_equal(v[:20] @ pf.rotation_matrix(20, False)[:20, :20], rot_ref(v[:20], False))
    np.testing.assert_array_equal(pf.rotation_matrix(20, False, transpose=True), pf.rotation_matrix(20, False).T)
    tile = np.zeros((32, 32), np.float32)
    tile[0] = np.arange(32)
    from kohakutt.hal import formats

    packed = formats.pack(tile, "bfloat16")
    np.testing.assert_array_equal(formats.unpack(pf.broadcast_row0(packed), (32, 32), "bfloat16"),
                                  np.tile(np.arange(32.0), (32, 1)))  # fmt: skip


def test_programs_refuse_what_they_do_not_take(dev):
    rng = np.random.default_rng(26)
    x, _ = put(dev, randn(rng, (7, 90)))
    with pytest.raises(KohakuTTUnsupportedOperator, match="not a multiple of 32"):
        pf.run_program("swiglu", [x], {"dim": -1})
    x32, _ = put(dev, randn(rng, (32, 32)), "float32")
    with pytest.raises(KohakuTTUnsupportedOperator, match="float32"):
        pf.run_program("silu_mul", [x32, x32])
    xr, _ = put(dev, randn(rng, (4, 10, 48)))
    cs, _ = put(dev, randn(rng, (10, 48)))
    with pytest.raises(KohakuTTUnsupportedOperator, match="head_dim"):
        pf.run_program("rotary_embedding", [xr, cs, cs])
    rm, _ = put(dev, randn(rng, (32, 32)), layout="row_major")
    with pytest.raises(ShapeError, match="tile-layout"):
        pf.run_program("silu_mul", [rm, rm])
    b8, _ = put(dev, randn(rng, (32,)), "bfloat8_b")
    xb, _ = put(dev, randn(rng, (32, 32)))
    with pytest.raises(KohakuTTUnsupportedOperator, match="bfloat16"):
        pf.run_program("bias_gelu", [xb, b8])
    with pytest.raises(KohakuTTUnsupportedOperator, match="no own program"):
        pf.run_program("silu_mul_backward", [xb, xb, xb])


# --------------------------------------------------------------------------------------------- typed errors
def test_bad_inputs_raise_typed_errors(dev):
    rng = np.random.default_rng(30)
    x, _ = put(dev, randn(rng, (4, 6)))
    b5, _ = put(dev, randn(rng, (5,)))
    b2d, _ = put(dev, randn(rng, (1, 6)))
    odd, _ = put(dev, randn(rng, (4, 5)))
    i32 = kk.from_numpy(dev, np.arange(24, dtype=np.int32).reshape(4, 6), "int32")
    with pytest.raises(ShapeError, match="bias must be 1-D"):
        kk.run("bias_gelu", [x, b5])
    with pytest.raises(ShapeError, match="bias must be 1-D"):
        kk.run("bias_gelu", [x, b2d])
    with pytest.raises(ShapeError, match="approximate"):
        kk.run("bias_gelu", [x, put(dev, randn(rng, (6,)))[0]], {"approximate": "fast"})
    with pytest.raises(ShapeError, match="grad"):
        kk.run("bias_gelu_backward", [odd, x, put(dev, randn(rng, (6,)))[0]])
    with pytest.raises(ShapeError, match="odd size"):
        kk.run("swiglu", [odd])
    with pytest.raises(ShapeError, match="out of range"):
        kk.run("swiglu", [x], {"dim": 2})
    with pytest.raises(ShapeError, match="forward output's shape"):
        kk.run("swiglu_backward", [x, x])
    with pytest.raises(ShapeError, match="same shape"):
        kk.run("silu_mul", [x, odd])
    with pytest.raises(DtypeError, match="float tensors"):
        kk.run("silu_mul", [i32, i32])
    with pytest.raises(ShapeError, match="must be even"):
        kk.run("rotary_embedding", [odd, odd, odd])
    with pytest.raises(ShapeError, match="must end with"):
        kk.run("rotary_embedding", [x, b2d, b2d])
    with pytest.raises(ShapeError, match=r"\(\.\.\., seq, head_dim\)"):
        kk.run("rotary_embedding", [put(dev, randn(rng, (6,)))[0]] * 3)
    with pytest.raises(ShapeError, match="Python number"):
        kk.run("silu_mul", [x, 2.0])


# ------------------------------------------------------------------------------------ registry and contract
def test_every_fused_op_has_both_models_a_cost_and_a_card_call():
    own = {"bias_gelu", "silu_mul", "swiglu", "rotary_embedding", "rotary_embedding_backward"}
    assert {n for n, d in irops.all_ops().items() if d.family == "fused"} == set(OPS)
    for op in OPS:
        assert kk.lookup(op, "sim", "ttnn").estimate is not None, op
        assert kk.lookup(op, "ttnn", "ttnn") is not None, op
        impl = kk.lookup(op, "sim", "ktt")
        assert (impl is not None) == (op in own), op
        if impl is not None:
            assert impl.program is not None and impl.estimate is not None, op


def test_float32_calls_of_the_own_kernel_take_the_ttnn_model(dev):
    rng = np.random.default_rng(31)
    gate, _ = put(dev, randn(rng, (8, 40)), "float32")
    up, _ = put(dev, randn(rng, (8, 40)), "bfloat16")
    np.testing.assert_array_equal(run("silu_mul", [gate, up], provider="ktt"),
                                  run("silu_mul", [gate, up], provider="ttnn"))
    x, _ = put(dev, randn(rng, (8, 40)), "float32")
    b, _ = put(dev, randn(rng, (40,)), "float32")
    np.testing.assert_array_equal(run("bias_gelu", [x, b], provider="ktt"), run("bias_gelu", [x, b], provider="ttnn"))


def test_cost_estimates_favour_one_fused_pass():
    big = TensorSpec((4096, 4096), DType.BFLOAT16)
    bias = TensorSpec((4096,), DType.BFLOAT16)
    half = TensorSpec((4096, 2048), DType.BFLOAT16)
    num = Numerics(None, None, False)
    cases = [("bias_gelu", [big, bias], [big]), ("silu_mul", [big, big], [big]), ("swiglu", [big], [half])]
    for op, ins, outs in cases:
        attrs = irops.get(op).bind_attrs({})
        tt = kk.lookup(op, "sim", "ttnn").estimate(ins, outs, attrs, num, P150A)
        own = kk.lookup(op, "sim", "ktt").estimate(ins, outs, attrs, num, P150A)
        assert 0 < own < tt, (op, own, tt)
        traffic = sum(s.numel * 2 for s in (*ins, *outs)) / P150A.dram_bytes_per_s * 1e9
        assert own >= traffic  # memory bound at least
    f32 = TensorSpec((64, 64), DType.FLOAT32)
    attrs = irops.get("silu_mul").bind_attrs({})
    est = [kk.lookup("silu_mul", "sim", p).estimate([f32, f32], [f32], attrs, num, P150A) for p in ("ttnn", "ktt")]
    assert est[0] == est[1]


class Recorder:
    """A stand-in for ttnn and its tensors: records every attribute path the TT-NN code touches."""

    def __init__(self, log: set, path: str = "", shape: tuple = ()):
        self._log, self._path, self.shape = log, path, shape

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        path = f"{self._path}.{name}" if self._path else name
        self._log.add(path)
        return Recorder(self._log, path)

    def __call__(self, *args, **kwargs):
        shape = next((a.shape for a in args if isinstance(a, Recorder) and a.shape), ())  # typecast keeps it
        return Recorder(self._log, "Tensor", shape)

    def __getitem__(self, i):
        return Recorder(self._log, "Tensor", self.shape)


@pytest.mark.parametrize("num", [Numerics(), Numerics(Fidelity.LoFi, True, True)])
def test_ttnn_calls_use_only_declared_names(num):
    log: set = set()
    calls = [("bias_gelu", [(4, 64), (64,)], {}), ("bias_gelu_backward", [(4, 64), (4, 64), (64,)], {}),
             ("silu_mul", [(4, 64), (4, 64)], {}), ("silu_mul_backward", [(4, 64)] * 3, {}),
             ("swiglu", [(4, 64)], {"dim": -1}), ("swiglu_backward", [(4, 32), (4, 64)], {"dim": -1}),
             ("rotary_embedding", [(2, 3, 8, 64), (8, 64), (8, 64)], {}),
             ("rotary_embedding", [(2, 3, 8, 64), (8, 64), (8, 64)], {"interleaved": True}),
             ("rotary_embedding", [(2, 3, 8, 40), (8, 40), (8, 40)], {"interleaved": True}),
             ("rotary_embedding", [(2, 8, 40), (2, 8, 40), (2, 8, 40)], {}),
             ("rotary_embedding_backward", [(2, 3, 8, 64), (8, 64), (8, 64)], {})]  # fmt: skip
    for op, shapes, attrs in calls:
        d = irops.get(op)
        attrs = d.bind_attrs(attrs)
        specs = [TensorSpec(s, DType.BFLOAT16) for s in shapes]
        out = kk.lookup(op, "ttnn", "ttnn").fn(Recorder(log), [Recorder(log, "Tensor", s) for s in shapes], attrs, num,
                                       d.infer(specs, attrs))  # fmt: skip
        assert out is not None
    declared = set(kf.TTNN_NAMES)
    prefixes = {n.rsplit(".", 1)[0] for n in declared if "." in n}
    undeclared = sorted(p for p in log if p not in declared | prefixes and not p.startswith("Tensor"))
    assert not undeclared, f"TT-NN names used but not in TTNN_NAMES: {undeclared}"
    assert {"experimental.rotary_embedding_hf", "experimental.rotary_embedding_llama", "gelu", "silu_bw",
            "concat", "slice"} <= log  # fmt: skip


def test_zero_size_tensors(dev):
    x, _ = put(dev, np.zeros((0, 6)))
    b, _ = put(dev, np.zeros((6,)))
    for provider in ("ttnn", "ktt"):
        assert run("bias_gelu", [x, b], provider=provider).shape == (0, 6)
        assert run("swiglu", [x], {}, provider).shape == (0, 3)
        assert math.prod(run("silu_mul", [x, x], provider=provider).shape) == 0


@pytest.mark.parametrize("provider", ["ttnn", "ktt"])
def test_interleaved_rotation_spreads_a_non_finite_value_over_its_tile_row(dev, provider):
    """rot(x) of the interleaved form is an FPU matmul by the +-1 tile: Inf * 0 makes the whole tile row NaN."""
    rng = np.random.default_rng(32)
    xv = randn(rng, (1, 4, 64))
    xv[0, 1, 5] = np.inf
    x, _ = put(dev, xv)
    c, s = rope_cache(4, 64, True)
    cos, _ = put(dev, c)
    sin, _ = put(dev, s)
    got = run("rotary_embedding", [x, cos, sin], {"interleaved": True}, provider)
    assert np.isnan(got[0, 1, :32]).sum() >= 31  # column 5 itself is Inf * cos + NaN
    assert np.isfinite(got[0, 1, 32:]).all() and np.isfinite(got[0, [0, 2, 3]]).all()
