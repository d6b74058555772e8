"""Matrix products on tt (kohakutt/frontends/torch/aten/linalg.py) against the CPU in float64.

The reference runs on exactly the values the card holds (bfloat16 inputs rounded on the host first). With ``S`` = the
same product on absolute values (|a| @ |b|, plus |beta * input| for the add forms), the bounds follow TT-NN's matmul
defaults as the matmul family models them (kohakutt/ir/defs/matmul.py):
- float32 operands: HiFi4 with fp32 accumulation; the source registers truncate to 10 (SrcA, within 2^-9) and 11
  (SrcB, within 2^-10) significant bits, so each product is within 3 * 2^-10 and the result within ``TF32 * S`` with
  TF32 = 3 * 2^-10 (the fp32 accumulation adds about K * 2^-24, negligible here); the add forms store the product and
  the scaled input in float32 between steps: 2^-22 more.
- bfloat16 operands: HiFi2: SrcB keeps 7 of bf16's 8 significant bits (within 2^-7), SrcA keeps all of them; a bf16
  DST is rounded once per 128-wide K block and the result once more, each rounding within bf16's unit roundoff 2^-8:
  ``(2^-7 + (R + 1) * 2^-8) * S`` for R blocks; ``mm(out_dtype=float32)`` accumulates in fp32: ``2^-7 * S``.
- ``kohakutt.numerics(fidelity="LoFi")``: one phase, SrcA keeps 5 significant bits (within 2^-4), SrcB 7: the bound
  grows to ``(2^-4 + 2^-6 + 2 * 2^-8) * S``, and the result must differ from HiFi4's.
- outer / addr: an element-wise multiply (the exact product rounded once to the output dtype: 2^-24 / 2^-8 relative),
  addr's scaled input and sum rounded too (three roundings).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import kohakutt
from kohakutt.errors import KohakuTTUnsupportedOperator

DEV = torch.device("tt", 0)
TF32 = 3 * 2.0**-10


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed)).to(dtype)


def bf16_bound(k: int) -> float:
    return 2.0**-7 + (math.ceil(k / 128) + 1) * 2.0**-8


def within(actual: torch.Tensor, ref: torch.Tensor, bound, what: str = "") -> None:
    actual, ref = actual.cpu().double(), ref.double()
    assert actual.shape == ref.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    err = (actual - ref).abs()
    excess = err - bound
    worst = int(torch.argmax(excess.reshape(-1))) if excess.numel() else 0
    assert bool((excess <= 0).all()), (
        f"{what}: error {err.reshape(-1)[worst].item():.3g} > bound "
        f"{torch.as_tensor(bound).expand_as(err).reshape(-1)[worst]:.3g} at {worst}"
    )


def check(fn, *xs: torch.Tensor, tol: float | None = None, what: str = "", mag=None) -> torch.Tensor:
    """``fn`` on tt against float64 on the CPU, bounded by ``tol * S`` with S = ``mag`` (default ``fn``) on |xs| (tol:
    TF32 for float32, the bf16 HiFi2 bound for bfloat16 with K = the last dim of the first operand)."""
    dt = xs[0].dtype
    if tol is None:
        tol = TF32 if dt == torch.float32 else bf16_bound(xs[0].shape[-1])
    r = fn(*(x.to(DEV) for x in xs))
    assert r.dtype == dt, f"{what}: dtype {r.dtype}"
    ref = fn(*(x.double() for x in xs))
    s = (mag or fn)(*(x.double().abs() for x in xs))
    within(r, ref, tol * s + 1e-6, what)
    return r


# -------------------------------------------------------------------------------------------------- products
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_bmm_matmul(dtype):
    a, b = randn(33, 70, seed=1, dtype=dtype), randn(70, 20, seed=2, dtype=dtype)
    check(torch.mm, a, b, what="mm")
    check(torch.matmul, randn(2, 3, 9, 70, seed=3, dtype=dtype), b, what="matmul broadcast")
    check(torch.bmm, randn(4, 9, 40, seed=4, dtype=dtype), randn(4, 40, 6, seed=5, dtype=dtype), what="bmm")
    check(lambda x, y: x.t() @ y, randn(70, 33, seed=6, dtype=dtype), b, what="mm of a transposed view")
    check(torch.mv, a, randn(70, seed=7, dtype=dtype), what="mv")
    check(torch.dot, randn(70, seed=8, dtype=dtype), randn(70, seed=9, dtype=dtype), what="dot")
    check(torch.vdot, randn(70, seed=10, dtype=dtype), randn(70, seed=11, dtype=dtype), what="vdot")


def test_large_k_bfloat16_blocks():
    a, b = randn(8, 300, seed=12, dtype=torch.bfloat16), randn(300, 8, seed=13, dtype=torch.bfloat16)
    check(torch.mm, a, b, what="mm K=300")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_family(dtype):
    c, a, b = randn(20, seed=14, dtype=dtype), randn(12, 30, seed=15, dtype=dtype), randn(30, 20, seed=16, dtype=dtype)
    tol = TF32 + 2.0**-22 if dtype == torch.float32 else bf16_bound(30) + 2 * 2.0**-8
    check(lambda x, y, z: torch.addmm(x, y, z, beta=0.5, alpha=2), c, a, b, tol=tol, what="addmm")
    check(lambda x, y, z: F.linear(y, z.t(), x), c, a, b, tol=tol, what="linear with bias")
    bc, b1, b2 = (
        randn(3, 12, 20, seed=17, dtype=dtype),
        randn(3, 12, 30, seed=18, dtype=dtype),
        randn(3, 30, 20, seed=19, dtype=dtype),
    )
    check(lambda x, y, z: torch.baddbmm(x, y, z, beta=-1, alpha=0.5), bc, b1, b2, tol=tol, what="baddbmm",
          mag=lambda x, y, z: torch.baddbmm(x, y, z, alpha=0.5))  # fmt: skip
    # addbmm: three products summed on the reduce unit (float32 SrcA truncation again: 2^-9 more)
    tol3 = tol + 2.0**-9 if dtype == torch.float32 else tol + 2.0**-8
    check(lambda x, y, z: torch.addbmm(x, y, z, beta=2, alpha=0.5), bc[0], b1, b2, tol=tol3, what="addbmm")
    v = randn(30, seed=20, dtype=dtype)
    check(lambda x, y, z: torch.addmv(x, y, z, beta=2, alpha=-1), randn(12, seed=21, dtype=dtype), a, v, tol=tol,
          what="addmv", mag=lambda x, y, z: torch.addmv(x, y, z, beta=2))  # fmt: skip
    check(lambda x, y, z: torch.addr(x, y, z, beta=0.5, alpha=3), randn(12, 30, seed=22, dtype=dtype), randn(
        12, seed=23, dtype=dtype), v, tol=2.0**-22 if dtype == torch.float32 else 3 * 2.0**-8, what="addr")  # fmt: skip
    check(torch.outer, randn(12, seed=24, dtype=dtype), v, tol=2.0**-23 if dtype == torch.float32 else 2.0**-8,
          what="outer")  # fmt: skip


def test_inplace_out_and_beta_zero():
    a, b = randn(6, 10, seed=25), randn(10, 4, seed=26)
    nan = torch.full((6, 4), float("nan"))
    r = torch.addmm(nan.to(DEV), a.to(DEV), b.to(DEV), beta=0)  # beta = 0 ignores the input, NaN included
    within(r, a.double() @ b.double(), TF32 * (a.double().abs() @ b.double().abs()), "addmm beta=0")
    c = randn(6, 4, seed=27)
    t = c.to(DEV)
    t.addmm_(a.to(DEV), b.to(DEV), alpha=0.5)
    ref = c.double() + 0.5 * (a.double() @ b.double())
    within(t, ref, TF32 * (c.double().abs() + a.double().abs() @ b.double().abs()) + 1e-6, "addmm_")
    out = torch.empty(0, device=DEV)
    torch.mm(a.to(DEV), b.to(DEV), out=out)
    within(out, a.double() @ b.double(), TF32 * (a.double().abs() @ b.double().abs()), "mm out=")
    v = randn(6, seed=28)
    tv = v.to(DEV)
    tv.addmv_(a.to(DEV), randn(10, seed=29).to(DEV))
    ref = v.double() + a.double() @ randn(10, seed=29).double()
    within(tv, ref, TF32 * (v.double().abs() + a.double().abs() @ randn(10, seed=29).double().abs()) + 1e-6, "addmv_")
    empty = torch.mm(torch.ones(4, 0).to(DEV), torch.ones(0, 3).to(DEV))
    assert torch.equal(empty.cpu(), torch.zeros(4, 3))


def test_addmm_activation_and_out_dtype():
    c, a, b = randn(8, seed=30), randn(5, 16, seed=31), randn(16, 8, seed=32)
    s = c.double().abs() + a.double().abs() @ b.double().abs()
    for gelu in (False, True):
        r = torch.ops.aten._addmm_activation(c.to(DEV), a.to(DEV), b.to(DEV), use_gelu=gelu)
        ref = torch.ops.aten._addmm_activation(c.double(), a.double(), b.double(), use_gelu=gelu)
        within(r, ref, TF32 * s + 1e-5, f"_addmm_activation gelu={gelu}")
    ab, bb = a.bfloat16(), b.bfloat16()
    r = torch.ops.aten.mm.dtype(ab.to(DEV), bb.to(DEV), torch.float32)
    assert r.dtype == torch.float32
    within(r, ab.double() @ bb.double(), 2.0**-7 * (ab.double().abs() @ bb.double().abs()), "mm out_dtype=float32")


def test_numerics_scope_reaches_the_matmul():
    a, b = randn(16, 64, seed=33, dtype=torch.bfloat16), randn(64, 16, seed=34, dtype=torch.bfloat16)
    s = a.double().abs() @ b.double().abs()
    with kohakutt.numerics(fidelity="HiFi4"):
        hi = torch.mm(a.to(DEV), b.to(DEV)).cpu()
    with kohakutt.numerics(fidelity="LoFi"):
        lo = torch.mm(a.to(DEV), b.to(DEV)).cpu()
    ref = a.double() @ b.double()
    within(hi, ref, 2 * 2.0**-8 * s, "HiFi4: exact bf16 products, two bf16 roundings")
    within(lo, ref, (2.0**-4 + 2.0**-6 + 2 * 2.0**-8) * s, "LoFi")
    assert not torch.equal(hi, lo), "LoFi dropped no bits: the numerics scope did not reach the op"
    assert (lo.double() - ref).abs().mean() > (hi.double() - ref).abs().mean()


def test_errors():
    with pytest.raises(KohakuTTUnsupportedOperator, match="matrix engine"):
        torch.mm(torch.ones(2, 2, dtype=torch.int32).to(DEV), torch.ones(2, 2, dtype=torch.int32).to(DEV))
    with pytest.raises(RuntimeError, match=r"reduction dim|cannot be multiplied"):
        torch.mm(torch.ones(2, 3).to(DEV), torch.ones(2, 3).to(DEV))
    with pytest.raises(RuntimeError, match=r"same device"):
        torch.mm(torch.ones(2, 3).to(DEV), torch.ones(3, 2))


# --------------------------------------------------------------------------------------------------- autograd
def test_linear_matmul_gradients():
    x, w, bias = randn(7, 24, seed=35), randn(10, 24, seed=36), randn(10, seed=37)
    m = randn(3, 10, 5, seed=38)
    g = randn(3, 7, 5, seed=39)

    def once(device, dtype, absolute=False):
        leaves = [(t.abs() if absolute else t).to(dtype).to(device).requires_grad_(True) for t in (x, w, bias, m)]
        h = F.linear(leaves[0], leaves[1], leaves[2])
        y = torch.matmul(h, leaves[3])
        y.backward((g.abs() if absolute else g).to(dtype).to(device))
        return [y.detach().cpu().double()] + [t.grad.cpu().double() for t in leaves]

    tt = once(DEV, torch.float32)
    ref = once("cpu", torch.float64)
    mag = once("cpu", torch.float64, absolute=True)
    for a, r, s, n in zip(tt, ref, mag, ("y", "x", "w", "bias", "m")):
        within(a, r, 2 * TF32 * s + 1e-5, f"grad {n}")  # two chained products, each within TF32 of its magnitude


# -------------------------------------------------------------------------------------------------- distances
# The p-norm distances sum non-negative fp32 terms on the reduce unit (SrcA keeps 10 significant bits: within 2^-9 of
# the sum, which is S here) after exact differences and an fp32 power (a few fp32 roundings), then take the 1/p-th
# power, which divides the relative error by p: ``(2^-9 + 2^-20) / p`` relative (p = 0 counts and p = inf maxima are
# exact). bfloat16 inputs are exact in fp32; the result is rounded once more into bf16 (2^-8). Their gradients sum
# signed terms g * (|diff| / dist)^(p - 1) over the other set's rows (each within 2^-9 + (p - 1) / p * 2^-9 from
# the distance's error) on the reduce unit (2^-9 of the sum of magnitudes): within ``3 * 2^-9 * S``, S the sum of
# the terms' magnitudes (bfloat16: 2^-8 more, the gradient's rounding).
DIST_P = [0.0, 0.5, 1.0, 2.0, 3.0, math.inf]


def _dist_bound(p: float, dtype: torch.dtype) -> float:
    rel = 0.0 if p == 0 or math.isinf(p) else (2.0**-9 + 2.0**-20) / p
    return rel + (2.0**-8 if dtype == torch.bfloat16 else 0.0)


def _grad_magnitudes(x1: torch.Tensor, x2: torch.Tensor, g: torch.Tensor, p: float):
    """S for the gradients of x1 and x2: sums over the other set of |g| * (|diff| / dist)^(p - 1) (1 for p = 1 and
    p = inf, where the terms are |g| times a sign), zero distances and differences left out as PyTorch does."""
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    dist = torch.cdist(x1, x2, p=p).unsqueeze(-1)
    ratio = torch.ones_like(diff) if p == 1 or math.isinf(p) else (diff / dist).pow(p - 1)
    terms = torch.where((dist == 0) | (diff == 0), 0.0, ratio) * g.abs().unsqueeze(-1)
    return terms.sum(-2), terms.sum(-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", DIST_P)
def test_cdist_pdist_forward_backward(p, dtype):
    x1, x2 = randn(2, 6, 5, seed=40, dtype=dtype), randn(2, 7, 5, seed=41, dtype=dtype)
    x2[0, 0] = x1[0, 0]  # a zero distance: no gradient through it
    r1, r2 = x1.double().requires_grad_(), x2.double().requires_grad_()
    ref = torch.cdist(r1, r2, p=p)
    g = randn(*ref.shape, seed=42, dtype=dtype)
    ref.backward(g.double())
    t1, t2 = x1.to(DEV).requires_grad_(), x2.to(DEV).requires_grad_()
    got = torch.cdist(t1, t2, p=p)
    assert got.dtype == dtype
    within(got, ref, _dist_bound(p, dtype) * ref.abs() + 1e-6, f"cdist p={p}")
    got.backward(g.to(DEV))
    grad_tol = 3 * 2.0**-9 + (2.0**-8 if dtype == torch.bfloat16 else 0.0)
    s1, s2 = _grad_magnitudes(x1.double(), x2.double(), g.double(), p)
    within(t1.grad, r1.grad, grad_tol * s1 + 1e-6, "cdist x1 gradient")
    within(t2.grad, r2.grad, grad_tol * s2 + 1e-6, "cdist x2 gradient")
    x = randn(8, 3, seed=43, dtype=dtype)
    r = x.double().requires_grad_()
    ref = F.pdist(r, p=p)
    gp = randn(*ref.shape, seed=44, dtype=dtype)
    ref.backward(gp.double())
    t = x.to(DEV).requires_grad_()
    got = F.pdist(t, p=p)
    within(got, ref, _dist_bound(p, dtype) * ref.abs() + 1e-6, f"pdist p={p}")
    got.backward(gp.to(DEV))
    full = torch.zeros(8, 8, dtype=torch.float64)
    full[tuple(torch.triu_indices(8, 8, 1))] = gp.double()
    s1, s2 = _grad_magnitudes(x.double(), x.double(), full, p)
    within(t.grad, r.grad, grad_tol * (s1 + s2) + 1e-6, "pdist gradient")


def test_cdist_large_and_broadcast():
    # past 25 rows PyTorch's CPU takes the matrix-product path; tt computes from differences either way
    x1, x2 = randn(40, 4, seed=45), randn(30, 4, seed=46)
    within(torch.cdist(x1.to(DEV), x2.to(DEV)), torch.cdist(x1.double(), x2.double()),
           _dist_bound(2, torch.float32) * torch.cdist(x1.double(), x2.double()), "euclidean")  # fmt: skip
    x1, x2 = randn(3, 1, 5, 4, seed=47), randn(1, 2, 6, 4, seed=48)
    ref = torch.cdist(x1.double(), x2.double(), p=1.0)
    within(torch.cdist(x1.to(DEV), x2.to(DEV), p=1.0), ref, _dist_bound(1, torch.float32) * ref, "broadcast batch")
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.cdist(x1.to(DEV), x2.to(DEV), p=-1.0)
