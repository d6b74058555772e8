"""The attention family against torch float64 references computed from the same (device-rounded) inputs, and
Kohaku-TT's flash attention program (run tile by tile by the simulator) against the op library's fast path.

Tolerances, from the formats. u(bf16) = 2^-9 (round to nearest), TF32 truncation 2^-10, SrcA's 10 bits 2^-9,
SrcB's 7 bits (HiFi2) 2^-7. Per query row i, with the float64 softmax weights w, output o and scores S:
W = sum_j w_j |v_j - o|, A = sum_j w_j |v_j|, R = sum_j w_j |S_j - max S|, dS = the score error (below).
A relative error e on every weight moves o by at most 2e W; an error e on a running sum or output moves it by e A.

- provider ktt forward: dS = 2^-10 max|S| (S and mask read back as TF32), plus 2^-8 scale max sum|q||k| for float32
  operands (TF32 q times 10-bit k). The bf16 P is the matmul operand and the row-sum term alike, so the weights move
  by at most 2^-8 + 2 dS; l and O are truncated to TF32 once per 128-key chunk (n chunks) and 1 / l to 10 bits:
  |out - ref| <= (2^-8 + 2 dS) W + (n + 3) 2^-10 A + u(out) |o| (+ 2^-9 A for float32 v).
  |lse - ref| <= 2 dS + 2^-9 + (n + 2) 2^-10 + 2^-22 |lse|.
- provider ttnn forward (HiFi2, bf16 intermediates, Schraudolph exp within 3%, 7-bit reciprocal): dS = 2^-7 scale max
  sum|q||k| + 3 * 2^-9 max|S| (three bf16 stores: QK^T, times scale, plus mask); per 32-key chunk (n of them) the
  running sum and output are stored bf16: |out - ref| <= (0.06 + 2^-7 + 2 dS) W + (n + 3) 2^-8 A + 2^-7 |o|;
  |lse - ref| <= dS + 2^-8 (|lse| + R + n + 3) (max, x - max, exp, the tile sums, log and the sum stored bf16).
- backward (out and lse given as the float64 results rounded to the device formats): with P the weights, dP = g v^T,
  D = rowsum(g o), dS = P (dP - D), the error of dS is bounded by e_P |dS| + P (u_dp |g||v| + u_D |g||o|), and each
  gradient by the same matmul over absolute values plus its own rounding: host e_P = u_dp = 2^-9 (bf16 P and dS
  operands; 2^-8 for float32 operands cut to TF32 / 10 bits), u_D = u(out); ttnn e_P = 2^-7 + 2 dS + 2^-8 |S - lse|
  (bf16 S, lse and exp input), u_dp = 2^-7 + (Dv / 16 + 2) 2^-9 (7-bit in0, bf16 DST rounded after each 16-wide K
  slice), u_D = 2^-7, and its dq / dk / dv matmuls add 2^-7 + (K / 16 + 3) 2^-9 of the absolute product.
- program vs fast path: the same arithmetic in the same order, except float32 summation order inside QK^T, P V and
  the tile row sums, and the last ulp of exp / log. A one-ulp difference matters only where it flips the bf16
  rounding of a P element, which moves out by at most 2^-8 max|v|; the rest is one ulp of the output format. On
  inputs whose sums are exact in any order (a coarse value grid, one K chunk) the two agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_ttnn import FakeTTNN, names_used, run_ttnn

from kohakutt import hal, numerics
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, DtypeError, KohakuTTUnsupportedOperator
from kohakutt.hal import formats
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, TensorSpec
from kohakutt.kernels import attention as att
from kohakutt.kernels.programs.attention import (
    flash_attention_program,
    run_flash_program,
    run_flash_varlen_program,
)

U = {"bfloat16": 2.0**-8, "float32": 2.0**-24}  # unit roundoff: 8 and 24 significant bits
PROVIDERS = ("ttnn", "ktt")  # the forwards: TT-NN's kernel and the own program
BWD_PROVIDERS = ("ttnn", "host")  # the backwards: TT-NN's kernel and the host math (the old "ktt" model's numerics)


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.synchronize()
    d.close()


def put(dev, a, dtype="bfloat16"):
    t = kk.from_numpy(dev, np.asarray(a), dtype)
    return t, kk.to_numpy(t).astype(np.float64)


def host(ts):
    return [kk.to_numpy(t).astype(np.float64) for t in ts]


# ----------------------------------------------------------------------------------------------- references
def additive(mask):
    if mask is None:
        return None
    return np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64)


def scores(q, k, mask, causal, scale, offset=0):
    """float64 scaled, masked scores (B, Hq, Sq, Skv), k's heads repeated for their query-head groups."""
    kk_ = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    s = scale * q @ np.swapaxes(kk_, -1, -2)
    m = additive(mask)
    if m is not None:
        s = s + m
    if causal:
        sq, skv = s.shape[-2:]
        s = np.where(np.arange(skv)[None, :] > np.arange(sq)[:, None] + offset, -np.inf, s)
    return s


def reference(q, k, v, mask, causal, scale, offset=0):
    """(out, lse, weights, scores) in float64: out from torch's F.scaled_dot_product_attention, and the pieces the
    error bounds are built from."""
    g = q.shape[1] // k.shape[1]
    s = scores(q, k, mask, causal, scale, offset)
    full = torch.from_numpy(np.where(np.isneginf(s), -np.inf, 0.0) if mask is None else np.where(
        np.isneginf(s), -np.inf, additive(mask) + np.zeros_like(s)))  # fmt: skip
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk.repeat_interleave(g, 1), tv.repeat_interleave(g, 1), attn_mask=full, scale=scale
    ).numpy()
    lse = torch.logsumexp(torch.from_numpy(s), -1).numpy()
    w = np.exp(s - np.where(np.isneginf(lse), 0.0, lse)[..., None])
    w = np.where(np.isneginf(lse)[..., None], 0.0, w)
    return out, lse, w, s


def row_stats(q, k, v, w, s, out, scale):
    vv = np.repeat(v, q.shape[1] // k.shape[1], axis=1)
    big_w = np.einsum("bhij,bhijd->bhid", w, np.abs(vv[:, :, None] - out[..., None, :])).max(-1)
    big_a = (w @ np.abs(vv)).max(-1)
    finite = np.isfinite(s)
    smax = np.where(finite, np.abs(s), 0.0).max(-1)
    mx = np.where(finite, s, -np.inf).max(-1, initial=-np.inf)
    r = (w * np.where(finite, np.abs(s - np.where(np.isfinite(mx), mx, 0.0)[..., None]), 0.0)).sum(-1)
    qk = scale * (np.abs(q) @ np.swapaxes(np.abs(np.repeat(k, q.shape[1] // k.shape[1], axis=1)), -1, -2)).max(-1)
    return big_w, big_a, smax, r, qk


def forward_bounds(provider, dtype, q, k, v, w, s, out, lse, scale):
    big_w, big_a, smax, r, qk = row_stats(q, k, v, w, s, out, scale)
    skv, f32 = k.shape[2], dtype == "float32"
    if provider == "ktt":
        n = -(-skv // 128)
        ds = 2.0**-10 * smax + (2.0**-8 if f32 else 2.0**-20) * qk
        b_out = (2.0**-7 + 2 * ds) * big_w + ((2 * n + 4) * 2.0**-10 + (2.0**-9 if f32 else 0)) * big_a
        b_lse = 2 * ds + 2.0**-8 + (n + 2) * 2.0**-10 + 2.0**-22 * np.abs(lse)
        return b_out[..., None] + U[dtype] * np.abs(out), b_lse
    n = -(-skv // 32)
    ds = (2.0**-6 + 2.0**-9 if f32 else 2.0**-7) * qk + 3 * 2.0**-8 * smax
    b_out = (0.06 + 2.0**-7 + 2 * ds) * big_w + (3 * n + 4) * 2.0**-8 * big_a
    b_lse = ds + 2.0**-8 * (np.abs(np.nan_to_num(lse, neginf=0.0)) + r + n + 3)
    return b_out[..., None] + 2.0**-6 * np.abs(out), b_lse


def check_forward(got_out, got_lse, out, lse, bounds, what):
    b_out, b_lse = bounds
    dead = np.isneginf(lse)
    assert np.all(got_out[dead] == 0) and np.all(np.isneginf(got_lse[dead])), f"{what}: rows without keys"
    err = np.abs(got_out - out)
    assert np.all(err <= b_out), f"{what}: out error {err.max():.3g}, worst error / bound {(err / b_out).max():.3g}"
    e_lse = np.abs(got_lse[~dead] - lse[~dead])
    assert np.all(e_lse <= b_lse[~dead]), f"{what}: lse error {e_lse.max():.3g}"


# ----------------------------------------------------------------------------------------------- forward
FWD_CASES = {  # (B, Hq, Hkv, Sq, Skv, D, Dv), causal, mask kind, scale
    "mha": ((1, 2, 2, 64, 64, 64, 64), False, None, None),
    "gqa causal sq<skv": ((2, 4, 2, 50, 170, 32, 32), True, None, None),
    "mqa causal sq>skv": ((1, 4, 1, 70, 40, 32, 48), True, None, 0.3),
    "bool mask, a dead row": ((1, 2, 2, 33, 150, 64, 32), False, "bool", None),
    "float mask per batch": ((2, 2, 1, 40, 40, 32, 32), False, "float", 0.25),
    "causal + mask": ((1, 2, 2, 48, 48, 32, 32), True, "bool", None),
}


def make_inputs(dev, case, dtype, seed=0):
    (b, hq, hkv, sq, skv, d, dv), causal, kind, scale = case
    rng = np.random.default_rng(seed)
    ts, xs = zip(*(put(dev, rng.standard_normal(shape), dtype)
                   for shape in ((b, hq, sq, d), (b, hkv, skv, d), (b, hkv, skv, dv))))  # fmt: skip
    mask = None
    if kind == "bool":
        mask = rng.random((sq, skv)) > 0.4
        mask[3] = False  # a row that sees no key
        mask[:, 0] = mask[:, 0] | causal  # keep rows alive under the causal mask too, except row 3
        mask[3] = False
    elif kind == "float":
        mask = (rng.standard_normal((b, 1, sq, skv)) * 2).astype(np.float32)
    tm = None if mask is None else kk.from_numpy(dev, mask, "bool" if mask.dtype == np.bool_ else "float32")
    return list(ts), list(xs), mask, tm, causal, scale


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", list(FWD_CASES))
def test_forward_matches_torch(dev, name, dtype):
    ts, (q, k, v), mask, tm, causal, scale = make_inputs(dev, FWD_CASES[name], dtype)
    sc = att.resolve_scale(scale, q.shape[-1])
    out, lse, w, s = reference(q, k, v, mask, causal, sc)
    err = {}
    for provider in PROVIDERS:
        got_out, got_lse = host(kk.run("scaled_dot_product_attention", ts + ([tm] if tm is not None else []),
                                       {"is_causal": causal, "scale": scale}, provider=provider))  # fmt: skip
        assert got_out.shape == out.shape and got_lse.shape == lse.shape
        check_forward(got_out, got_lse, out, lse, forward_bounds(provider, dtype, q, k, v, w, s, out, lse, sc),
                      f"{provider} {name} {dtype}")  # fmt: skip
        err[provider] = np.abs(got_out - out).mean()
    assert err["ktt"] < err["ttnn"]  # HiFi4 and fp32 statistics against HiFi2 and bf16 intermediates


def test_scope_fidelity_reaches_both_providers(dev):
    ts, (q, k, v), _, _, _, _ = make_inputs(dev, FWD_CASES["mha"], "bfloat16", seed=3)
    for provider in PROVIDERS:
        base = host(kk.run("scaled_dot_product_attention", ts, provider=provider))[0]
        with numerics(fidelity="LoFi"):
            lofi = host(kk.run("scaled_dot_product_attention", ts, provider=provider))[0]
        out = reference(q, k, v, None, False, 0.125)[0]
        assert np.abs(lofi - out).mean() > 2 * np.abs(base - out).mean(), provider


def test_empty_and_keyless(dev):
    for provider in PROVIDERS:
        q, _ = put(dev, np.ones((1, 2, 5, 32)))
        k, _ = put(dev, np.ones((1, 2, 0, 32)))
        v, _ = put(dev, np.ones((1, 2, 0, 16)))
        out, lse = host(kk.run("scaled_dot_product_attention", [q, k, v], provider=provider))
        assert out.shape == (1, 2, 5, 16) and np.all(out == 0) and np.all(np.isneginf(lse)), provider
        q0, _ = put(dev, np.ones((1, 2, 0, 32)))
        out, lse = host(kk.run("scaled_dot_product_attention", [q0, k, v], provider=provider))
        assert out.shape == (1, 2, 0, 16) and lse.shape == (1, 2, 0)


# ----------------------------------------------------------------------------------------------- backward
def reference_grads(q, k, v, g, mask, causal, scale, offset=0):
    """(dq, dk, dv) by float64 autograd through F.scaled_dot_product_attention."""
    grp = q.shape[1] // k.shape[1]
    s = scores(q, k, mask, causal, scale, offset)
    full = torch.from_numpy(np.where(np.isneginf(s), -np.inf, 0.0) + (0 if mask is None else np.where(
        np.isneginf(s), 0.0, additive(mask))))  # fmt: skip
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk.repeat_interleave(grp, 1), tv.repeat_interleave(grp, 1), attn_mask=full, scale=scale
    )
    out.backward(torch.from_numpy(g))
    return tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


def backward_bounds(provider, dtype, q, k, v, g, o, lse, w, s, scale):
    """Per-element bounds on (dq, dk, dv) (see the module docstring)."""
    grp = q.shape[1] // k.shape[1]
    kk_, vv = np.repeat(k, grp, axis=1), np.repeat(v, grp, axis=1)
    ag, av, ao = np.abs(g), np.abs(vv), np.abs(o)
    dp = g @ np.swapaxes(vv, -1, -2)
    dsc = w * (dp - (g * o).sum(-1, keepdims=True))
    gv, go = ag @ np.swapaxes(av, -1, -2), (ag * ao).sum(-1, keepdims=True)
    qk = scale * (np.abs(q) @ np.swapaxes(np.abs(kk_), -1, -2))
    f32 = dtype == "float32"
    finite = np.where(np.isfinite(s), s, 0.0)
    if provider == "host":
        e_p = (2.0**-8 if f32 else 2.0**-20) * qk  # S from TF32 q and 10-bit k (exact products for bf16)
        e_ds, e_pv = e_p + 2.0**-8, e_p + 2.0**-8  # dS and the dv operand P rounded to bf16
        u_dp, u_d, u_out = (2.0**-8 if f32 else 2.0**-20), U[dtype] + 2.0**-22, U[dtype]
        u_mm = 2.0**-9 if f32 else 2.0**-20  # the in1 operand cut to 10 bits
    else:
        cut0 = 2.0**-6 + 2.0**-9 if f32 else 2.0**-7  # in0 keeps 7 bits (and in1 10 for float32)
        ds = cut0 * qk + 3 * 2.0**-8 * np.abs(finite)
        lse0 = np.nan_to_num(lse, neginf=0.0)[..., None]
        e_p = 2.0**-7 + 2 * ds + 2.0**-8 * (np.abs(finite - lse0) + np.abs(lse0))  # bf16 lse, x - lse and P
        e_ds, e_pv = e_p + 2.0**-7, e_p  # dP - D and dS stored bf16
        u_dp = cut0 + (v.shape[-1] / 16 + 1) * 2.0**-8  # bf16 DST rounded after each 16-wide K slice, stored
        u_d, u_out = (v.shape[-1] / 32 + 2) * 2.0**-8 + U[dtype], 2.0**-8
        u_mm = cut0 + (max(q.shape[2], k.shape[2]) / 16 + 2) * 2.0**-8
    err_ds = e_ds * np.abs(dsc) + w * (u_dp * gv + u_d * go)
    b_dq = scale * (err_ds @ np.abs(kk_) + u_mm * np.abs(dsc) @ np.abs(kk_))
    b_dk = scale * (np.swapaxes(err_ds, -1, -2) @ np.abs(q) + u_mm * np.swapaxes(np.abs(dsc), -1, -2) @ np.abs(q))
    b_dv = np.swapaxes(e_pv * w, -1, -2) @ ag + u_mm * np.swapaxes(w, -1, -2) @ ag
    b, hkv = k.shape[:2]
    fold = lambda x: x.reshape(b, hkv, grp, *x.shape[2:]).sum(2)  # noqa: E731
    return b_dq, fold(b_dk), fold(b_dv), u_out


BWD_CASES = ["mha", "gqa causal sq<skv", "mqa causal sq>skv", "bool mask, a dead row", "float mask per batch"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("name", BWD_CASES)
def test_backward_matches_torch_autograd(dev, name, dtype):
    ts, (q, k, v), mask, tm, causal, scale = make_inputs(dev, FWD_CASES[name], dtype, seed=1)
    sc = att.resolve_scale(scale, q.shape[-1])
    out, lse, w, s = reference(q, k, v, mask, causal, sc)
    tg, g = put(dev, np.random.default_rng(9).standard_normal(out.shape), dtype)
    to, o = put(dev, out, dtype)
    tl, lse32 = put(dev, lse.astype(np.float32), "float32")
    want = reference_grads(q, k, v, g, mask, causal, sc)
    extra = [tm] if tm is not None else []
    for provider in BWD_PROVIDERS:
        got = host(kk.run("sdpa_backward", [tg, *ts, to, tl, *extra], {"is_causal": causal, "scale": scale},
                          provider=provider))  # fmt: skip
        *bounds, u_out = backward_bounds(provider, dtype, q, k, v, g, o, lse32, w, s, sc)
        for x, ref, bd, label in zip(got, want, bounds, ("dq", "dk", "dv")):
            assert x.shape == ref.shape, (provider, label)
            err, lim = np.abs(x - ref), bd + u_out * np.abs(ref) + 1e-30
            assert np.all(err <= lim), f"{provider} {name} {dtype} {label}: worst error / bound {(err / lim).max():.3g}"
        if mask is not None and mask.dtype == np.bool_:
            assert np.all(got[0][:, :, 3] == 0), provider  # a row that saw no key gets no gradient


# ------------------------------------------------------------------------------------------------- varlen
CU_Q, CU_K = [0, 20, 20, 57, 90], [0, 30, 45, 45, 100]  # an empty query range, a keyless one, Sq > Sk causal


def varlen_reference(provider, bwd_provider, q, k, v, g, causal, scale):
    """Per sequence, the float64 SDPA of (1, H, Sq, D) slices with the bottom-right causal mask, its gradients, and
    the error bounds of the forward and backward tests, packed back: (out, lse, grads, bounds)."""
    out, lse = np.zeros((q.shape[0], q.shape[1], v.shape[2])), np.full((q.shape[1], q.shape[0]), -np.inf)
    b_out, b_lse = np.zeros_like(out), np.zeros_like(lse)
    grads, b_grads = [np.zeros_like(x) for x in (q, k, v)], [np.zeros_like(x) for x in (q, k, v)]
    heads = lambda x: np.transpose(x, (1, 0, 2))[None]  # noqa: E731
    for i in range(len(CU_Q) - 1):
        q0, q1, k0, k1 = CU_Q[i], CU_Q[i + 1], CU_K[i], CU_K[i + 1]
        if q1 == q0 or k1 == k0:
            continue
        sl, off = [heads(x) for x in (q[q0:q1], k[k0:k1], v[k0:k1])], (k1 - k0) - (q1 - q0)
        o, ls, w, s = reference(*sl, None, causal, scale, off)
        bo, bl = forward_bounds(provider, "bfloat16", *sl, w, s, o, ls, scale)
        out[q0:q1], lse[:, q0:q1], b_out[q0:q1], b_lse[:, q0:q1] = heads(o[0]), ls[0], heads(bo[0]), bl[0]
        o_dev = formats.round_bfloat16(o.astype(np.float32)).astype(np.float64)
        parts = reference_grads(*sl, heads(g[q0:q1]), None, causal, scale, off)
        *bounds, u = backward_bounds(bwd_provider, "bfloat16", *sl, heads(g[q0:q1]), o_dev,
                                     ls.astype(np.float32), w, s, scale)  # fmt: skip
        for dst, bdst, part, bd, a in zip(grads, b_grads, parts, bounds, (q0, k0, k0)):
            dst[a : a + part.shape[2]] = heads(part[0])
            bdst[a : a + part.shape[2]] = heads(bd[0] + u * np.abs(part[0]))
    return out, lse, grads, (b_out, b_lse, b_grads)


@pytest.mark.parametrize("causal", [True, False])
def test_varlen_forward_and_backward(dev, causal):
    """Packed sequences (one without queries, one without keys, one with Sq > Sk, rows after the last sequence)
    against per-sequence float64 references, with the bounds of the dense tests per sequence."""
    rng = np.random.default_rng(4)
    tq, q = put(dev, rng.standard_normal((95, 4, 32)))
    tk, k = put(dev, rng.standard_normal((100, 2, 32)))
    tv, v = put(dev, rng.standard_normal((100, 2, 32)))
    tg, g = put(dev, rng.standard_normal((95, 4, 32)))
    cq, ck = (kk.from_numpy(dev, np.array(c, np.int32)) for c in (CU_Q, CU_K))
    attrs = {"max_seqlen_q": 37, "max_seqlen_k": 55, "is_causal": causal}
    sc = att.resolve_scale(None, 32)
    for provider, bwd_provider in zip(PROVIDERS, BWD_PROVIDERS):
        out, lse, grads, (b_out, b_lse, b_grads) = varlen_reference(provider, bwd_provider, q, k, v, g, causal, sc)
        dead = np.isneginf(lse)
        got_out, got_lse = host(kk.run("sdpa_varlen", [tq, tk, tv, cq, ck], attrs, provider=provider))
        assert np.all(np.abs(got_out - out) <= b_out), provider
        assert np.all(got_out[dead.T] == 0) and np.array_equal(np.isneginf(got_lse), dead), provider
        assert np.all(np.abs(got_lse[~dead] - lse[~dead]) <= b_lse[~dead]), provider
        to, _ = put(dev, out)
        tl, _ = put(dev, lse.astype(np.float32), "float32")
        got = host(kk.run("sdpa_varlen_backward", [tg, tq, tk, tv, to, tl, cq, ck], attrs, provider=bwd_provider))
        for x, ref, bd, label in zip(got, grads, b_grads, ("dq", "dk", "dv")):
            err = np.abs(x - ref)
            assert np.all(err <= bd + 1e-30), (
                f"{bwd_provider} varlen {label}: worst error / bound {(err / bd).max():.3g}"
            )
        assert np.all(got[0][90:] == 0) and np.all(got[1][30:45] == 0) and np.all(got[2][30:45] == 0), bwd_provider


def test_varlen_checks_cumulative_lengths(dev):
    t, _ = put(dev, np.ones((10, 2, 32)))
    good = kk.from_numpy(dev, np.array([0, 4, 10], np.int32))
    for cu, attrs, match in (([1, 4, 10], {}, "must start at 0"), ([0, 6, 4], {}, "never decrease"),
                             ([0, 4, 12], {}, "at most at the 10 packed"), ([0, 4, 10], {"max_seqlen_q": 5},
                                                                             "exceeds max_seqlen")):  # fmt: skip
        bad = kk.from_numpy(dev, np.array(cu, np.int32))
        full = {"max_seqlen_q": 10, "max_seqlen_k": 10} | attrs
        for provider in PROVIDERS:
            outs = kk.run("sdpa_varlen", [t, t, t, bad, good], full, provider=provider)
            with pytest.raises(CommandError) as ei:
                host(outs)
            assert isinstance(ei.value.cause, ShapeError) and match in str(ei.value.cause), (cu, provider)
    with pytest.raises(DtypeError, match="must be int32"):
        kk.run("sdpa_varlen", [t, t, t, kk.from_numpy(dev, np.array([0, 10], np.int64)), good],
               {"max_seqlen_q": 10, "max_seqlen_k": 10})  # fmt: skip


# ------------------------------------------------------------------------------------------- typed errors
def test_bad_shapes_and_attributes_raise_typed_errors(dev):
    def t(*shape, dtype="bfloat16"):
        return kk.from_numpy(dev, np.zeros(shape, np.float32), dtype)

    q, k = t(1, 4, 8, 32), t(1, 2, 8, 32)
    sdpa = "scaled_dot_product_attention"
    cases = [
        ([t(4, 8, 32), k, k], {}, ShapeError, "must be 4-D"),
        ([q, t(1, 3, 8, 32), t(1, 3, 8, 32)], {}, ShapeError, "not a multiple of 3"),
        ([q, k, t(1, 2, 9, 32)], {}, ShapeError, "must agree in batch, heads and length"),
        ([q, t(1, 2, 8, 16), k], {}, ShapeError, "head dims differ"),
        ([q, t(2, 2, 8, 32), t(2, 2, 8, 32)], {}, ShapeError, "has batch 1"),
        ([q, k, k, t(3, 8, 8)], {}, ShapeError, "does not broadcast"),
        ([q, k, k, kk.from_numpy(dev, np.zeros((8, 8), np.int32))], {}, DtypeError, "bool mask"),
        ([t(1, 4, 8, 32, dtype="int32"), k, k], {}, DtypeError, "typecast it first"),
        ([q, k, k], {"dropout_p": 0.1}, KohakuTTUnsupportedOperator, "dropout_p"),
        ([q, k, k], {"scale": "big"}, ShapeError, "scale must be a number"),
    ]
    for inputs, attrs, err, match in cases:
        with pytest.raises(err, match=match):
            kk.run(sdpa, inputs, attrs)
    o, lse = t(1, 4, 8, 32), t(1, 4, 8, dtype="float32")
    with pytest.raises(ShapeError, match="forward's output shape"):
        kk.run("sdpa_backward", [t(1, 4, 8, 16), q, k, k, o, lse])
    with pytest.raises(ShapeError, match="logsumexp"):
        kk.run("sdpa_backward", [o, q, k, k, o, t(1, 4, 9, dtype="float32")])


# --------------------------------------------------------------------------- the program vs the fast path
def bf16(x):
    return formats.round_bfloat16(np.asarray(x, np.float32))


def fast(q, k, v, mask, *, scale, causal, offset=0, fidelity="HiFi4", dtypes=("bfloat16",) * 3):
    return att.flash_forward(q, k, v, att.additive_mask(mask), scale=scale, causal=causal, offset=offset,
                             fidelity=Fidelity[fidelity], dtypes=tuple(DType.of(d) for d in dtypes))  # fmt: skip


def test_program_is_bit_exact_where_sums_are_exact(dev):
    """Values on a coarse grid make every float32 sum exact in any order, so only exp's last ulp could differ (it
    does not flip a bf16 rounding on this grid), and the program and the fast path agree bit for bit."""
    rng = np.random.default_rng(11)
    grid = lambda *s: rng.integers(-2, 3, s).astype(np.float32) / 4  # noqa: E731
    q, k, v = grid(2, 4, 40, 32), grid(2, 2, 100, 32), grid(2, 2, 100, 32)
    mask = rng.integers(-8, 1, (2, 1, 40, 100)).astype(np.float32) / 8
    mask[:, :, 5] = -np.inf  # a row without keys
    xs = np.arange(-64, 1) / 32  # every exp argument S - M on this grid: float32 exp gives float64's bf16 rounding
    assert np.array_equal(bf16(torch.exp(torch.tensor(xs, dtype=torch.float32)).numpy()), bf16(np.exp(xs)))
    for causal, m in ((False, mask), (True, None), (True, mask)):
        got = run_flash_program(dev, q, k, v, m, scale=0.125, causal=causal, max_cores=3)
        want = fast(q, k, v, m, scale=0.125, causal=causal)
        np.testing.assert_array_equal(got[0], bf16(want[0]))
        np.testing.assert_allclose(got[1], want[1], rtol=2.0**-23, atol=0)  # log's last ulp


PROGRAM_CASES = {  # q, k, v shapes, causal, offset, mask, fidelity, dtype
    "mha 1x2x64x64": (((1, 2, 64, 64), (1, 2, 64, 64), (1, 2, 64, 64)), False, 0, None, "HiFi4", "bfloat16"),
    "gqa causal, 2 chunks": (((1, 4, 70, 32), (1, 2, 150, 32), (1, 2, 150, 32)), True, 0, None, "HiFi4", "bfloat16"),
    "mqa bool mask": (((1, 2, 40, 64), (1, 1, 300, 64), (1, 1, 300, 32)), False, 0, "bool", "HiFi4", "bfloat16"),
    "float mask, float32": (((2, 2, 33, 32), (2, 2, 47, 32), (2, 2, 47, 32)), False, 0, "float", "HiFi4", "float32"),
    "bottom-right causal, LoFi": (((2, 2, 64, 64), (2, 2, 200, 64), (2, 2, 200, 48)), True, 136, None, "LoFi",
                                  "bfloat16"),
    "rows without keys, HiFi2": (((1, 2, 96, 32), (1, 2, 40, 32), (1, 2, 40, 32)), True, -50, None, "HiFi2",
                                 "bfloat16"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(PROGRAM_CASES))
def test_program_matches_the_fast_path(dev, name):
    shapes, causal, offset, kind, fid, dtype = PROGRAM_CASES[name]
    rng = np.random.default_rng(len(name))
    q, k, v = (formats.quantize(rng.standard_normal(s).astype(np.float32), dtype) for s in shapes)
    mask = None
    if kind == "bool":
        mask = rng.random((shapes[0][2], shapes[1][2])) > 0.3
    elif kind == "float":
        mask = (rng.standard_normal((shapes[0][0], 1, shapes[0][2], shapes[1][2])) * 3).astype(np.float32)
    scale = att.resolve_scale(0.3 if dtype == "float32" else None, shapes[0][3])
    kw = dict(scale=scale, causal=causal, offset=offset, fidelity=fid, dtypes=(dtype,) * 3)
    got_out, got_lse = run_flash_program(dev, q, k, v, mask, max_cores=4, **kw)
    want_out, want_lse = fast(q, k, v, mask, **kw)
    want_out = formats.quantize(want_out, dtype)
    lim = 2.0**-8 * np.abs(v).max() + 2 * U[dtype] * np.abs(want_out)
    assert np.all(np.abs(got_out - want_out) <= lim), name
    assert np.mean(got_out == want_out) >= 0.99, name  # most elements bit for bit
    dead = np.isneginf(want_lse)
    assert np.array_equal(np.isneginf(got_lse), dead) and np.all(got_out[dead] == 0), name
    assert np.all(np.abs(got_lse[~dead] - want_lse[~dead]) <= 2.0**-20 * (1 + np.abs(want_lse[~dead]))), name
    if name == "rows without keys, HiFi2":
        assert dead.any() and not dead.all()


@pytest.mark.parametrize("causal, masked", [(True, False), (False, True)])
def test_cpp_and_python_twins_agree_bit_for_bit(dev, knobs, causal, masked):
    """The program run from its C++ (the host build of the kernel API, the card's rules checked at every call) and
    from its Python twins gives the same bits, out and logsumexp, on normal data (GQA, a ragged key length)."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 40, 64), (1, 2, 150, 64), (1, 2, 150, 32)))
    mask = rng.standard_normal((1, 4, 40, 150)).astype(np.float32) if masked else None
    got = {}
    for mode in ("cpp", "python"):
        knobs(KTT_SIM_KERNELS=mode)
        got[mode] = run_flash_program(dev, q, k, v, mask, scale=0.125, causal=causal, max_cores=3)
    for a, b in zip(got["cpp"], got["python"]):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_varlen_program_matches_the_op(dev):
    rng = np.random.default_rng(8)
    q, k, v = (bf16(rng.standard_normal(s)) for s in ((95, 4, 32), (100, 2, 32), (100, 2, 32)))
    for causal in (False, True):
        got = run_flash_varlen_program(dev, q, k, v, np.array(CU_Q), np.array(CU_K), scale=att.resolve_scale(None, 32),
                                       causal=causal, max_cores=2)  # fmt: skip
        ts = [kk.from_numpy(dev, x, "bfloat16") for x in (q, k, v)]
        cq, ck = (kk.from_numpy(dev, np.array(c, np.int32)) for c in (CU_Q, CU_K))
        want = host(kk.run("sdpa_varlen", [*ts, cq, ck], {"max_seqlen_q": 37, "max_seqlen_k": 55,
                                                          "is_causal": causal}, provider="ktt"))  # fmt: skip
        assert np.all(np.abs(got[0] - want[0]) <= 2.0**-8 * np.abs(v).max()) and np.mean(got[0] == want[0]) > 0.99
        assert np.array_equal(np.isneginf(got[1]), np.isneginf(want[1]))


def test_program_is_a_valid_metalium_program(dev):
    prog = flash_attention_program((1, 8, 1024, 64), (1, 2, 1024, 64), (1, 2, 1024, 64), scale=0.125, causal=True,
                                   mask_shape=(1, 1, 1024, 1024))  # fmt: skip
    kinds = {kern.kind: kern for kern in prog.kernels}
    assert set(kinds) == {"reader", "writer", "compute"} and prog.tensors == ("q", "k", "v", "mask", "out", "lse")
    assert kinds["compute"].fp32_dest_acc_en and kinds["compute"].fidelity.name == "HiFi4"
    for src in ("matmul_tiles", "reduce_tile<PoolType::MAX", "exp_tile", "recip_tile", "log_tile"):
        assert src in kinds["compute"].source
    assert "noc_async_read_page" in kinds["reader"].source and "noc_async_write_page" in kinds["writer"].source
    assert len(prog.cores()) == dev.card.cores  # 8 heads x 32 Q tiles of work over the whole grid
    bufs = [dev.allocate(shape=s, fmt=f, layout="tile") for s, f in (((1, 8, 1024, 64), "bfloat16"),
            ((1, 2, 1024, 64), "bfloat16"), ((1, 2, 1024, 64), "bfloat16"), ((1, 1, 1024, 1024), "float32"),
            ((1, 8, 1024, 64), "bfloat16"))] + [dev.allocate(shape=(256, 32), fmt="float32")]  # fmt: skip
    prog.validate(dev.card, bufs, {})  # the hardware's rules: L1, CB ids, runtime args, entry points
    est = prog.estimate_ns(dev.card, bufs, {})
    spec = [TensorSpec(b.shape, DType.BFLOAT16) for b in bufs[:3]] + [TensorSpec((1, 1, 1024, 1024), DType.BOOL)]
    outs = irops.get("scaled_dot_product_attention").infer(spec, {"is_causal": True, "scale": None,
                                                                 "dropout_p": 0.0})  # fmt: skip
    # the op's estimate and the program's agree: both count K and V once per Q tile (DRAM-bound here)
    assert 0.8 < est / att.flash_cost(spec, outs, {"is_causal": True}, Numerics(), dev.card) < 1.25
    for b in bufs:
        dev.free(b)


# --------------------------------------------------------------------------------------------- TT-NN names
def test_ttnn_calls_use_only_declared_names():
    fake = FakeTTNN()
    q, kv = (1, 4, 8, 32), (1, 2, 8, 32)
    for causal in (False, True):
        a = {"is_causal": causal, "scale": None}
        run_ttnn(fake, "scaled_dot_product_attention", [q, kv, kv, (8, 8)], a)
        run_ttnn(fake, "sdpa_backward", [q, q, kv, kv, q, (1, 4, 8)], a)
        packed = [(12, 4, 32), (14, 2, 32), (14, 2, 32), (4,), (4,)]
        cu = {3: [0, 5, 5, 10], 4: [0, 6, 14, 14]}
        run_ttnn(fake, "sdpa_varlen", packed, a, values=cu)
        run_ttnn(fake, "sdpa_varlen_backward", [(12, 4, 32), *packed[:3], (12, 4, 32), (4, 12), (4,), (4,)], a,
                 values={6: cu[3], 7: cu[4]})  # fmt: skip
    log = names_used(fake, "attention.py")
    declared = set(att.TTNN_NAMES)
    undeclared = sorted(log - declared)
    assert not undeclared, f"TT-NN names used but not in TTNN_NAMES: {undeclared}"
    scoped = {f"MathFidelity.{f}" for f in ("LoFi", "HiFi2", "HiFi3", "HiFi4")}  # the default is HiFi4; scopes pick
    unused = sorted(declared - log - scoped)
    assert not unused, f"TTNN_NAMES lists names the calls never use: {unused}"


def test_fast_exp_gives_torch_exp_bit_for_bit():
    """The fast path's exp takes arguments below -87 (subnormal or zero results, -inf from masks) apart from the
    rest, for speed; every result must still be float32 exp's own."""
    special = torch.tensor([-np.inf, -3.4e38, -1e9, -87.0, -87.4, -103.9, -104.5])
    x = torch.cat([torch.linspace(-120, 5, 20000), special])
    x = x[torch.randperm(x.numel(), generator=torch.Generator().manual_seed(0))].reshape(1, -1)
    want = torch.exp(x)
    got = att._exp_(x.clone())
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert (want[x < -87] > 0).any() and (want[x < -87] == 0).any()  # both kinds of low arguments are there
