"""Reductions, scans, norms and softmax on tt (kohakutt/frontends/torch/aten/reduce.py) against the CPU.

The reference is the same torch function on the CPU in float64 on exactly the values the card holds (bfloat16 inputs
are rounded on the host first). Bounds come from the reduce and softmax families' numerics (kohakutt/ir/defs/reduce.py,
softmax.py), with ``S`` = the reduction of |x| (the magnitude every rounding scales with):
- float32 sums (sum, nansum, prod's multiplies, the squares of a 2-norm) go through the FPU, whose SrcA register keeps
  10 significant bits of each fp32 value (truncation: within 2^-9), accumulated in fp32 DST: ``2^-9 * S`` for a sum;
  a product of K factors within ``K * 2^-9``; a 2-norm (x*x with SrcA and SrcB truncated, 3 * 2^-10, then the sum
  2^-9, then a square root that halves it): ``2^-8`` relative; the inf-norms compare truncated values: 2^-9.
- bfloat16 data is exact in the source registers; the sum is accumulated in fp32 and stored in bf16 (within bf16's
  unit roundoff 2^-8), TT-NN storing at most one bf16 partial between its steps: ``2 * 2^-8 * S``.
- Kohaku-TT's own kernels (mean, logsumexp, softmax, log_softmax and their gradients) and the SFPU's fp32 paths (var,
  std, cumsum, cumprod) keep fp32 throughout: a few fp32 roundings, ``FP32 = 2^-20`` of the magnitude (about 8 ulp).
  With TT-NN's kernels instead (KTT_CUSTOM_KERNELS=0) a float32 mean runs up to three TT-NN steps (dims before H,
  then H, then W), each reading its input through SrcA (2^-9): ``3 * 2^-9 * S``; and
  logsumexp's sum of exps is within 2^-9 relative (2^-9 absolute after the log); TT-NN's softmax uses an approximate
  exp (documented as up to ~3% per element), so the softmax tests check only Kohaku-TT's kernels.
- exact: max / min (with or without indices, amax / amin: float32 runs the exact max_with_indices, so the result is
  an element of x, as PyTorch's gradients need), argmax / argmin, any / all, count_nonzero, integer sums, products
  and scans.
"""

from __future__ import annotations

import math

import pytest
import torch

from kohakutt import config
from kohakutt.errors import DtypeError

DEV = torch.device("tt", 0)
FP32 = 2.0**-20
SRC_A = 2.0**-9  # an fp32 value truncated to SrcA's 10 significant bits
BF16_SUM = 2 * 2.0**-8
OWN = bool(config.get("KTT_CUSTOM_KERNELS"))  # Kohaku-TT's own mean / logsumexp / softmax kernels
MEAN = FP32 if OWN else 3 * SRC_A
own_kernels = pytest.mark.skipif(not OWN, reason="bounds of Kohaku-TT's own softmax kernels (KTT_CUSTOM_KERNELS=1)")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed)).to(dtype)


def within(actual: torch.Tensor, ref: torch.Tensor, bound, what: str = "") -> None:
    actual, ref = actual.cpu().double(), ref.double()
    assert actual.shape == ref.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    err = (actual - ref).abs()
    same_special = (actual.isnan() & ref.isnan()) | (actual == ref)
    excess = torch.where(same_special, torch.zeros_like(err), err - bound)
    worst = int(torch.argmax(excess.reshape(-1))) if excess.numel() else 0
    assert bool((excess <= 0).all()), (
        f"{what}: {actual.reshape(-1)[worst].item()} vs {ref.reshape(-1)[worst].item()}, error "
        f"{err.reshape(-1)[worst].item():.3g} > bound {torch.as_tensor(bound).expand_as(err).reshape(-1)[worst]:.3g}"
    )


def exact(actual: torch.Tensor, ref: torch.Tensor, what: str = "") -> None:
    actual = actual.cpu()
    assert actual.dtype == ref.dtype and actual.shape == ref.shape, f"{what}: {actual.dtype}{tuple(actual.shape)}"
    assert torch.equal(actual, ref) or torch.allclose(actual, ref, rtol=0, atol=0, equal_nan=True), what


# ------------------------------------------------------------------------------------------------ float reductions
DIMS = [None, 0, -1, (0, 2), (1, 2), [0, 1, 2]]


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_float32(dim, keepdim):
    x = randn(3, 37, 45, seed=1)
    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    r = x.to(DEV).sum(**kw)
    assert r.dtype == torch.float32
    within(r, x.double().sum(**kw), SRC_A * x.double().abs().sum(**kw) + 1e-6, f"sum {dim}")


@pytest.mark.parametrize("dim", DIMS, ids=str)
def test_sum_mean_bfloat16(dim):
    x = randn(3, 37, 45, seed=2, dtype=torch.bfloat16)
    kw = {} if dim is None else {"dim": dim}
    for name in ("sum", "mean"):
        r = getattr(x.to(DEV), name)(**kw)
        assert r.dtype == torch.bfloat16
        ref = getattr(x.double(), name)(**kw)
        s = getattr(x.double().abs(), name)(**kw)
        within(r, ref, BF16_SUM * s + 1e-6, f"{name} {dim}")


@pytest.mark.parametrize("dim", DIMS, ids=str)
def test_mean_var_std_float32(dim):
    x = randn(4, 33, 40, seed=3) + 2.0
    xd, t = x.double(), x.to(DEV)
    kw = {} if dim is None else {"dim": dim}
    within(t.mean(**kw), xd.mean(**kw), MEAN * xd.abs().mean(**kw), "mean")
    msq = (xd * xd).mean(**kw)
    for corr in (0, 1, 2.5):
        within(t.var(**kw, correction=corr), xd.var(**kw, correction=corr), FP32 * 4 * msq, f"var {corr}")
        within(t.std(**kw, correction=corr), xd.std(**kw, correction=corr), FP32 * 4 * msq.sqrt(), f"std {corr}")
    kk = {"dim": (0, 1, 2) if dim is None else dim, "keepdim": True}
    v, m = torch.var_mean(t, **kk)
    rv, rm = torch.var_mean(xd, **kk)
    within(v, rv, FP32 * 4 * (xd * xd).mean(**kk), "var_mean var")
    within(m, rm, FP32 * xd.abs().mean(**kk), "var_mean mean")  # the Welford program, both providers
    s, m = torch.std_mean(t, **kw)
    within(s, torch.std(xd, **kw), FP32 * 4 * msq.sqrt(), "std_mean std")


@pytest.mark.parametrize("dim", [None, 1, (0, 2)], ids=str)
def test_amax_amin_max_min(dim):
    x = randn(5, 17, 40, seed=4)
    t = x.to(DEV)
    kw = {} if dim is None else {"dim": dim}
    for kd in (False, True):
        for name in ("amax", "amin"):
            exact(getattr(t, name)(**kw, keepdim=kd), getattr(x, name)(**kw, keepdim=kd), f"{name} keepdim={kd}")
    if dim is None:
        exact(t.max(), x.max(), "max")
        exact(t.min(), x.min(), "min")
        mn, mx = torch.aminmax(t)
        exact(mx, x.max(), "aminmax max")
        exact(mn, x.min(), "aminmax min")
        exact(t.permute(2, 0, 1).amax(), x.amax(), "amax of a permuted view")
    else:
        mn, mx = torch.aminmax(t, dim=dim if isinstance(dim, int) else dim[0], keepdim=True)
        exact(mx, torch.aminmax(x, dim=dim if isinstance(dim, int) else dim[0], keepdim=True).max, "aminmax dim")
    xb = x.bfloat16()
    exact(xb.to(DEV).amax(**kw), xb.amax(**kw), "bf16 amax")
    z = x.clone()
    z[1, 2, 3] = float("nan")
    exact(z.to(DEV).amax(**kw), z.amax(**kw), "amax with a NaN")


def test_prod_logsumexp_nansum():
    x = randn(6, 12, seed=5) * 0.5 + 1.0
    t, xd = x.to(DEV), x.double()
    ref = xd.prod(1)
    within(t.prod(1), ref, 12 * SRC_A * xd.abs().prod(1), "prod dim")
    within(t.prod(), xd.prod(), x.numel() * SRC_A * xd.abs().prod(), "prod all")
    y = randn(4, 50, seed=6) * 10
    for kw in ({"dim": 1}, {"dim": (0, 1), "keepdim": True}):
        ref = torch.logsumexp(y.double(), **kw)
        bound = FP32 * (ref.abs() + 1) if OWN else FP32 * ref.abs() + SRC_A
        within(torch.logsumexp(y.to(DEV), **kw), ref, bound, f"logsumexp {kw}")
    z = randn(4, 50, seed=7)
    z[1, 3] = z[2, 7] = float("nan")
    ref = z.double().nansum(1)
    within(z.to(DEV).nansum(1), ref, SRC_A * z.double().abs().nansum(1) + 1e-6, "nansum")
    m = randn(6, 9, seed=24)
    within(m.to(DEV).trace(), m.double().trace(), SRC_A * m.double().abs().trace() + 1e-6, "trace")
    i = torch.arange(20).reshape(4, 5)
    exact(i.to(DEV).t().trace(), i.trace(), "int trace of a view")


def test_logsumexp_infinities():
    x = torch.tensor([[float("inf"), 1.0], [float("-inf"), float("-inf")], [float("nan"), 0.0], [1.0, 2.0]])
    exact(torch.logsumexp(x.to(DEV), 1)[:3], torch.logsumexp(x, 1)[:3], "logsumexp specials")


@pytest.mark.parametrize("p", [2, 1, 3, math.inf, -math.inf, 0])
def test_vector_norm(p):
    x = randn(6, 40, seed=8)
    x[0, :5] = 0
    t, xd = x.to(DEV), x.double()
    for kw in ({}, {"dim": 1}, {"dim": (0, 1), "keepdim": True}):
        ref = torch.linalg.vector_norm(xd, p, **kw)
        tol = 0 if p == 0 else SRC_A if math.isinf(p) else 2.0**-8
        within(torch.linalg.vector_norm(t, p, **kw), ref, tol * ref.abs() + 1e-6, f"vector_norm p={p} {kw}")
    if p == 2:
        within(t.norm(), xd.norm(), 2.0**-8 * xd.norm(), "Tensor.norm")
        within(torch.norm(t, 1, dim=1), xd.norm(1, dim=1), 2.0**-8 * xd.norm(1, dim=1), "norm p=1 dim")
        xb = x.bfloat16()
        r = torch.norm(xb.to(DEV), 2, dim=1, dtype=torch.float32)
        assert r.dtype == torch.float32
        within(r, xb.double().norm(2, dim=1), 2.0**-8 * xb.double().norm(2, dim=1), "norm dtype=float32")


def test_cumsum_cumprod():
    x = randn(5, 30, seed=9)
    t, xd = x.to(DEV), x.double()
    for d in (0, 1, -1):
        within(t.cumsum(d), xd.cumsum(d), FP32 * xd.abs().cumsum(d) + 1e-7, f"cumsum {d}")
    y = 1 + 0.1 * randn(4, 20, seed=10)
    within(y.to(DEV).cumprod(1), y.double().cumprod(1), 20 * FP32 * y.double().abs().cumprod(1), "cumprod")
    c = t.clone()
    c.cumsum_(1)
    within(c, xd.cumsum(1), FP32 * xd.abs().cumsum(1) + 1e-7, "cumsum_")
    i = torch.arange(-7, 13, dtype=torch.int64).reshape(4, 5)
    exact(i.to(DEV).cumsum(1), i.cumsum(1), "int cumsum")
    exact(i.to(DEV).cumprod(0), i.cumprod(0), "int cumprod")
    exact(i.to(DEV).cumsum(0, dtype=torch.float32), i.cumsum(0, dtype=torch.float32), "cumsum dtype")


# ------------------------------------------------------------------------------------------------ exact reductions
def test_max_min_with_indices_and_args():
    x = randn(6, 25, 7, seed=11)
    x[2, 4, 1] = x[2, 9, 1]  # a tie: the first index wins
    x[3, 5, 2] = float("nan")  # NaN wins
    t = x.to(DEV)
    for d in (0, 1, -1):
        for kd in (False, True):
            for name in ("max", "min"):
                v, i = getattr(t, name)(d, keepdim=kd)
                rv, ri = getattr(x, name)(d, keepdim=kd)
                exact(v, rv, f"{name} values {d}")
                exact(i, ri, f"{name} indices {d}")
            exact(t.argmax(d, keepdim=kd), x.argmax(d, keepdim=kd), f"argmax {d}")
            exact(t.argmin(d, keepdim=kd), x.argmin(d, keepdim=kd), f"argmin {d}")
    y = randn(5, 8, seed=12)
    exact(y.to(DEV).argmax(), y.argmax(), "argmax flat")
    exact(y.to(DEV).argmin(keepdim=True), y.argmin(keepdim=True), "argmin flat keepdim")
    exact(y.to(DEV).t().argmax(0), y.t().argmax(0), "argmax of a transposed view")
    v, i = torch.max(y.to(DEV), 1, out=(torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)))
    exact(i, y.max(1).indices, "max out=")


def test_integer_and_bool_reductions():
    i = torch.randint(-1000, 1000, (7, 9), generator=gen(13), dtype=torch.int32)
    t = i.to(DEV)
    for kw in ({}, {"dim": 1}, {"dim": 0, "keepdim": True}):
        exact(t.sum(**kw), i.sum(**kw), f"int32 sum {kw}")
        exact(t.amax(**kw), i.amax(**kw), f"int32 amax {kw}")
    exact(t.to(torch.int64).sum(0), i.long().sum(0), "int64 sum")
    small = torch.randint(-3, 4, (4, 5), generator=gen(14))
    exact(small.to(DEV).prod(1), small.prod(1), "int64 prod")
    exact(t.max(1).indices, i.max(1).indices, "int32 max indices")
    exact(t.sum(1, dtype=torch.float32), i.sum(1, dtype=torch.float32), "sum dtype=float32")
    b = torch.rand(6, 7, generator=gen(15)) > 0.6
    tb = b.to(DEV)
    exact(tb.sum(), b.sum(), "bool sum")
    exact(tb.sum(1), b.sum(1), "bool sum dim")
    exact(tb.amax(0), b.amax(0), "bool amax")
    for name in ("any", "all"):
        f = getattr(torch, name)
        exact(f(tb), f(b), name)
        exact(f(tb, 1), f(b, 1), f"{name} dim")
        exact(f(tb, dim=(0, 1), keepdim=True), f(b, dim=(0, 1), keepdim=True), f"{name} dims")
        exact(f(tb, dim=()), f(b, dim=()), f"{name} dim=()")
    u = torch.tensor([[0, 3], [0, 0]], dtype=torch.uint8)
    exact(u.to(DEV).any(1), u.any(1), "uint8 any keeps uint8")
    f = randn(5, 6, seed=16)
    f[f.abs() < 0.5] = 0
    exact((f.to(DEV) > 0).all(1), (f > 0).all(1), "all of a comparison")
    exact(torch.count_nonzero(f.to(DEV), 1), torch.count_nonzero(f, 1), "count_nonzero dim")
    exact(torch.count_nonzero(f.to(DEV)), torch.count_nonzero(f), "count_nonzero")


def test_empty_and_zero_dim():
    x = randn(4, 0, seed=17)
    t = x.to(DEV)
    exact(t.sum(1), x.sum(1), "empty sum")
    exact(t.prod(1), x.prod(1), "empty prod")
    exact(t.any(1), x.any(1), "empty any")
    exact(t.all(1), x.all(1), "empty all")
    assert t.mean(1).isnan().all().item()
    with pytest.raises(RuntimeError):
        t.amax(1)
    s = torch.tensor(2.5)
    exact(s.to(DEV).sum(), s.sum(), "0-d sum")
    v, i = s.to(DEV).max(0)
    exact(v, s, "0-d max")
    exact(i, torch.tensor(0), "0-d max index")


def test_out_variants_and_dtypes():
    x = randn(4, 6, seed=18)
    t = x.to(DEV)
    out = torch.empty(0, device=DEV)
    torch.sum(t, 1, out=out)
    within(out, x.double().sum(1), SRC_A * x.double().abs().sum(1) + 1e-6, "sum out=")
    out = torch.empty(0, device=DEV)
    torch.mean(t, 0, keepdim=True, out=out)
    within(out, x.double().mean(0, keepdim=True), MEAN * x.double().abs().mean(0, keepdim=True), "mean out=")
    xb = x.bfloat16()
    r = xb.to(DEV).sum(1, dtype=torch.float32)
    assert r.dtype == torch.float32
    within(r, xb.double().sum(1), 2.0**-20 * xb.double().abs().sum(1) + SRC_A * xb.double().abs().sum(1), "sum dtype")
    r = xb.to(DEV).mean(dtype=torch.float32)
    assert r.dtype == torch.float32
    within(r, xb.double().mean(), MEAN * xb.double().abs().mean(), "mean dtype")
    with pytest.raises(DtypeError):
        t.sum(dtype=torch.float64)
    with pytest.raises(RuntimeError, match="mean"):
        torch.arange(4).to(DEV).mean()


# ----------------------------------------------------------------------------------------------------- softmax
@own_kernels
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_backward(dim, log):
    x = randn(6, 33, 20, seed=19) * 3
    g = randn(6, 33, 20, seed=20)
    fn = torch.log_softmax if log else torch.softmax

    def once(device, dtype):
        leaf = x.to(dtype).to(device).requires_grad_(True)
        y = fn(leaf, dim)
        y.backward(g.to(dtype).to(device))
        return y.detach().cpu().double(), leaf.grad.cpu().double()

    yt, gt = once(DEV, torch.float32)
    yd, gd = once("cpu", torch.float64)
    within(yt, yd, FP32 * (yd.abs() + 1), f"{fn.__name__} forward")
    within(gt, gd, FP32 * 8 * (g.double().abs().amax(dim, keepdim=True) + 1), f"{fn.__name__} backward")


@own_kernels
def test_softmax_bfloat16_noncontiguous_and_dtype():
    x = randn(20, 9, seed=21, dtype=torch.bfloat16)
    t = x.to(DEV).t()
    ref = torch.softmax(x.double().t(), 1)
    # TT-NN's softmax: SFPU exp and reciprocal (each within 2^-9) and the store's bf16 rounding
    within(torch.softmax(t, 1), ref, 2.0**-7 * ref + 1e-6, "bf16 softmax of a transposed view")
    r = torch.softmax(x.to(DEV), 0, dtype=torch.float32)
    assert r.dtype == torch.float32
    within(r, torch.softmax(x.double(), 0), FP32, "softmax dtype=float32")
    row = torch.tensor([[float("-inf"), float("-inf")], [0.0, float("nan")]])
    assert torch.softmax(row.to(DEV), 1).isnan().all().item()


# ----------------------------------------------------------------------------------------------------- autograd
# name, function, bound relative to the largest magnitude: a reduction within 2^-9 of S plus the backward's own
# rounding (2^-8); prod's 9 factors each within 2^-9 (and its gradient's 8): 2^-5
GRADS = [
    ("sum", lambda x: x.sum(1), 2.0**-8),
    ("mean", lambda x: x.mean((0, 2)), 2.0**-8),
    ("var", lambda x: x.var(1), 2.0**-8),
    ("std", lambda x: x.std(-1, keepdim=True), 2.0**-8),
    ("logsumexp", lambda x: torch.logsumexp(x, 1), 2.0**-8),
    ("norm", lambda x: torch.linalg.vector_norm(x, dim=2), 2.0**-8),
    ("amax", lambda x: x.amax(1), 2.0**-8),
    ("max", lambda x: x.max(), 2.0**-8),
    ("max.dim", lambda x: x.max(1).values, 2.0**-8),
    ("prod", lambda x: x.prod(2), 2.0**-5),
    ("cumsum", lambda x: x.cumsum(1), 2.0**-8),
    ("sum_to_size", lambda x: x.sum_to_size(1, 7, 1), 2.0**-8),
]


@pytest.mark.parametrize("name,fn,tol", GRADS, ids=[g[0] for g in GRADS])
def test_reduction_gradients(name, fn, tol):
    x = randn(3, 7, 9, seed=22) + 0.5
    x[1, 2, 3] = x[1, 4, 3]  # a tie: amax's gradient is shared between them

    def once(device, dtype):
        leaf = x.to(dtype).to(device).requires_grad_(True)
        y = fn(leaf)
        g = torch.randn(y.shape, generator=gen(23)).to(dtype).to(device)
        y.backward(g)
        return y.detach().cpu().double(), leaf.grad.cpu().double()

    yt, gt = once(DEV, torch.float32)
    yd, gd = once("cpu", torch.float64)
    within(yt, yd, tol * (yd.abs().amax() + 1), f"{name} forward")
    within(gt, gd, tol * (gd.abs().amax() + 1), f"{name} backward")


def test_equal():
    x = randn(3, 4, seed=50)
    xt = x.to(DEV)
    assert torch.equal(xt, x.clone().to(DEV))
    y = x.clone()
    y[2, 3] += 1
    assert not torch.equal(xt, y.to(DEV))
    assert not torch.equal(xt, x[:2].to(DEV)), "shapes differ"
    nan = torch.tensor([math.nan, 1.0]).to(DEV)
    assert not torch.equal(nan, nan), "NaN equals nothing, as on the CPU"
    assert torch.equal(torch.empty(0, 3).to(DEV), torch.empty(0, 3).to(DEV))
    assert torch.equal(x.t().to(DEV), x.to(DEV).t()), "strided views"
    ints = torch.arange(6, dtype=torch.int32)
    assert torch.equal(ints.to(DEV), ints.to(DEV)) and not torch.equal(ints.to(DEV), (ints + 1).to(DEV))


@pytest.mark.parametrize("correction", [-1, -2.5, 0, 2])
def test_var_std_any_correction(correction):
    # a negative correction is the population statistic times N / (N - c): one more fp32 multiply (and a square root
    # of the factor for std) after the SFPU's fp32 variance
    x = randn(4, 6, seed=51)
    for dim in (None, 1, (0, 1)):
        for fn in (torch.var, torch.std):
            ref = fn(x.double(), dim=dim, correction=correction)
            within(fn(x.to(DEV), dim=dim, correction=correction), ref, FP32 * ref.abs(), f"{fn.__name__} {dim}")
        var, mean = torch.var_mean(x.to(DEV), dim=dim, correction=correction)
        rv, rm = torch.var_mean(x.double(), dim=dim, correction=correction)
        within(var, rv, FP32 * rv.abs(), "var_mean")
        within(mean, rm, FP32 * x.double().abs().mean(), "var_mean's mean")


# order statistics (an on-card stable sort, then a gather) and log-step scans (element-wise combines) are exact in
# their values; indices of ties may differ from the CPU's (any index of an equal value is right), so those are
# checked through the values they select. logcumsumexp combines fp32 log-sum-exps in log2(n) rounds: a few fp32
# roundings per round, ``FP32 * log2(n)`` of the magnitude.
def _statistic(fn, t: torch.Tensor, dim: int, keep: bool):
    return torch.kthvalue(t, 3, dim, keep) if fn is None else fn(t, dim, keep)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_median_nanmedian_kthvalue(dtype):
    if dtype == torch.int32 and not OWN:
        pytest.skip("TT-NN's sort takes no int32 (a DtypeError on the card)")
    x = (randn(4, 7, seed=60) * 4).round().to(dtype)  # ties
    if dtype.is_floating_point:
        x[1, 2] = math.nan
        x[3] = math.nan
    for name, fn in (("median", torch.median), ("nanmedian", torch.nanmedian), ("kth", None)):
        if name == "nanmedian" and not dtype.is_floating_point:
            continue
        for dim, keep in ((1, False), (0, True), (-1, True)):
            v, i = _statistic(fn, x.to(DEV), dim, keep)
            rv, _ = _statistic(fn, x, dim, keep)
            exact(v, rv, f"{name} values dim={dim}")
            picked = torch.gather(x, dim, i.cpu() if keep else i.cpu().unsqueeze(dim))
            exact(picked if keep else picked.squeeze(dim), rv, f"{name} indices select the values")
        if fn is not None:
            exact(fn(x.to(DEV)), fn(x), f"{name} of all")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_cummax_cummin_logcumsumexp(dtype):
    x = (randn(3, 9, seed=61) * 3).round().to(dtype)
    if dtype.is_floating_point:
        x[2, 4] = math.nan
    for fn in (torch.cummax, torch.cummin):
        for dim in (0, 1):
            v, i = fn(x.to(DEV), dim)
            rv, ri = fn(x, dim)
            exact(v, rv, f"{fn.__name__} dim={dim}")
            exact(i, ri, f"{fn.__name__} indices (the last of equal values, as the CPU)")
    y = randn(3, 40, seed=62) * 10
    y[0, :5] = -math.inf
    ref = torch.logcumsumexp(y.double(), 1)
    within(torch.logcumsumexp(y.to(DEV), 1), ref, FP32 * math.log2(40) * (ref.abs() + 1), "logcumsumexp")
