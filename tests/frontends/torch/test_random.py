"""Random numbers on tt: distributions, reproducibility under the seed, and typed errors.

The card draws from its own Philox stream, so its numbers are not the CPU generator's; each distribution is checked
against its exact law on n = 40000 draws (seeded, so deterministic): sample means within 5 standard errors
(sigma / sqrt(n)), and the Kolmogorov-Smirnov distance to the exact CDF below 1.95 / sqrt(n) (the 0.1% critical
value) plus, for bfloat16 draws, the largest spacing of bf16 values over the range (the CDF of a rounded draw steps by
that much). Values that involve no randomness once the draws are fixed are bit-exact: dropout's output is
x * float32(1 / (1 - p)) where kept (one fp32 rounding, as PyTorch's CPU kernel), its backward grad * mask * scale.
"""

from __future__ import annotations

import math

import pytest
import torch

from kohakutt.errors import DeviceError, DtypeError
from kohakutt.ir.ops import ShapeError

DEV = torch.device("tt", 0)
N = 40000
KS = 1.95 / math.sqrt(N)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(1234)


def ks(x: torch.Tensor, cdf) -> float:
    """The Kolmogorov-Smirnov distance of the sample ``x`` to ``cdf`` (both sides of each step)."""
    s = x.double().flatten().sort().values
    f = cdf(s)
    n = s.numel()
    hi = torch.arange(1, n + 1, dtype=torch.float64) / n
    return float(torch.maximum(hi - f, f - (hi - 1 / n)).max())


def moments_ok(x: torch.Tensor, mean: float, std: float) -> None:
    x = x.double().flatten()
    n = x.numel()
    assert abs(x.mean().item() - mean) <= 5 * std / math.sqrt(n), (x.mean().item(), mean)
    # the sample variance's standard error for a law with kurtosis <= 9 (uniform, normal, exponential): <= 2 var/sqrt(n)
    assert abs(x.var().item() - std**2) <= 5 * 2 * std**2 / math.sqrt(n), (x.var().item(), std**2)


def bf16_spacing(hi: float) -> float:
    return 2.0 ** (math.floor(math.log2(abs(hi))) - 7) if hi else 0.0


# ---------------------------------------------------------------------------------------------------- continuous
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lo, hi", [(0.0, 1.0), (-3.0, 5.0)])
def test_uniform(dtype, lo, hi):
    x = torch.empty(N, dtype=dtype, device=DEV).uniform_(lo, hi).cpu()
    assert x.dtype == dtype and (x >= lo).all() and (x < hi).all()
    slack = bf16_spacing(max(abs(lo), abs(hi))) / (hi - lo) if dtype == torch.bfloat16 else 0.0
    assert ks(x, lambda s: ((s - lo) / (hi - lo)).clamp(0, 1)) < KS + slack
    moments_ok(x, (lo + hi) / 2, (hi - lo) / math.sqrt(12))
    r = torch.rand(300, 200, device=DEV, dtype=dtype)
    assert r.shape == (300, 200) and r.device.type == "tt" and (r.cpu() < 1).all()


def test_uniform_edge_cases():
    same = torch.empty(5, device=DEV).uniform_(2.5, 2.5).cpu()
    assert (same == 2.5).all()
    view = torch.zeros(6, 8, device=DEV)
    view[:, ::2].uniform_(1, 2)
    host = view.cpu()
    assert (host[:, 1::2] == 0).all() and (host[:, ::2] >= 1).all()
    with pytest.raises(ShapeError, match=r"from=2\.0 > to=1\.0"):
        torch.empty(3, device=DEV).uniform_(2, 1)
    with pytest.raises(DtypeError):
        torch.empty(3, dtype=torch.int32, device=DEV).uniform_()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_normal(dtype):
    x = torch.empty(N, dtype=dtype, device=DEV).normal_(1.5, 2.0).cpu()
    assert x.dtype == dtype
    slack = bf16_spacing(8.0) / 2.0 if dtype == torch.bfloat16 else 0.0
    assert ks(x, lambda s: torch.special.ndtr((s - 1.5) / 2.0)) < KS + slack
    moments_ok(x, 1.5, 2.0)
    z = torch.randn(N, device=DEV).cpu()
    assert ks(z, torch.special.ndtr) < KS
    with pytest.raises(RuntimeError, match=r"std >= 0\.0"):
        torch.empty(3, device=DEV).normal_(0, -1)


def test_normal_tensor_overloads():
    mean = torch.linspace(-5, 5, N).reshape(200, 200)
    std = torch.linspace(0.5, 3, 200)
    for got, m, s in [
        (torch.normal(mean.to(DEV), std.to(DEV)), mean, std),
        (torch.normal(mean.to(DEV), 2.0), mean, torch.tensor(2.0)),
        (torch.normal(3.0, std.expand(200, 200).to(DEV)), torch.tensor(3.0), std),
    ]:
        assert got.shape == (200, 200) and got.device.type == "tt"
        z = (got.cpu() - m) / s
        assert ks(z, torch.special.ndtr) < KS
    out = torch.empty(0, device=DEV)
    torch.normal(mean.to(DEV), 1.0, out=out)
    assert out.shape == mean.shape
    assert ks(out.cpu() - mean, torch.special.ndtr) < KS
    ff = torch.normal(2.0, 0.5, (N,), device=DEV).cpu()
    moments_ok(ff, 2.0, 0.5)


def test_exponential_lognormal_cauchy_geometric():
    e = torch.empty(N, device=DEV).exponential_(2.0).cpu()
    assert (e >= 0).all() and torch.isfinite(e).all()
    assert ks(e, lambda s: 1 - torch.exp(-2.0 * s)) < KS
    moments_ok(e, 0.5, 0.5)
    ln = torch.empty(N, device=DEV).log_normal_(0.5, 0.75).cpu()
    assert (ln > 0).all() and ks(ln.log(), lambda s: torch.special.ndtr((s - 0.5) / 0.75)) < KS
    c = torch.empty(N, device=DEV).cauchy_(1.0, 2.0).cpu()
    assert ks(c, lambda s: 0.5 + torch.atan((s - 1.0) / 2.0) / math.pi) < KS
    geo = torch.empty(N, device=DEV).geometric_(0.25).cpu()
    assert (geo >= 1).all() and (geo == geo.round()).all()
    for k in range(1, 8):  # P(X = k) = p (1 - p)^(k - 1)
        pk = 0.25 * 0.75 ** (k - 1)
        assert abs((geo == k).double().mean().item() - pk) <= 5 * math.sqrt(pk * (1 - pk) / N)
    moments_ok(geo, 4.0, math.sqrt(0.75) / 0.25)
    with pytest.raises(RuntimeError, match=r"lambda > 0\.0"):
        torch.empty(3, device=DEV).exponential_(-1.0)


# ---------------------------------------------------------------------------------------------------- discrete
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_bernoulli(dtype):
    for p in (0.0, 0.3, 1.0):
        x = torch.empty(N, dtype=dtype, device=DEV).bernoulli_(p).cpu()
        assert x.dtype == dtype and ((x == 0) | (x == 1)).all()
        freq = x.double().mean().item()
        assert abs(freq - p) <= 5 * math.sqrt(p * (1 - p) / N)
    probs = torch.cat([torch.full((N // 2,), 0.2), torch.full((N // 2,), 0.9)])
    y = torch.bernoulli(probs.to(DEV)).cpu()
    assert y.dtype == torch.float32
    for half, p in ((y[: N // 2], 0.2), (y[N // 2 :], 0.9)):
        assert abs(half.mean().item() - p) <= 5 * math.sqrt(p * (1 - p) / (N // 2))
    z = torch.empty(4, N // 4, dtype=dtype, device=DEV).bernoulli_(torch.tensor([0.0, 1.0, 0.5, 0.5]).to(DEV)[:, None])
    z = z.cpu().double()
    assert (z[0] == 0).all() and (z[1] == 1).all()


def test_random_integers():
    r = torch.randint(-5, 5, (N,), device=DEV).cpu()
    assert r.dtype == torch.int64 and r.min() == -5 and r.max() == 4
    counts = torch.bincount(r + 5, minlength=10).double()
    expect = N / 10
    assert ((counts - expect).abs() <= 5 * math.sqrt(expect * 0.9)).all()  # binomial(N, 1/10) per value
    moments_ok(r, -0.5, math.sqrt((10**2 - 1) / 12))
    f = torch.empty(N, device=DEV).random_().cpu()
    assert (f >= 0).all() and (f <= 2**24).all() and (f == f.round()).all()
    assert abs(f.double().mean().item() - 2**23) <= 5 * 2**24 / math.sqrt(12 * N)
    u8 = torch.empty(N, dtype=torch.uint8, device=DEV).random_().cpu()
    assert u8.min() == 0 and u8.max() == 255
    b = torch.empty(N, dtype=torch.bool, device=DEV).random_().cpu()
    assert abs(b.double().mean().item() - 0.5) <= 5 * 0.5 / math.sqrt(N)
    t = torch.empty(N, dtype=torch.int32, device=DEV).random_(7).cpu()
    assert t.min() == 0 and t.max() == 6
    big = torch.empty(N, dtype=torch.int64, device=DEV).random_(-(2**31), 2**31).cpu()
    assert big.min() < -(2**30) and big.max() > 2**30
    with pytest.raises(DtypeError, match="int32"):
        torch.empty(3, dtype=torch.int64, device=DEV).random_()
    with pytest.raises(ShapeError, match="from=5 >= to=5"):
        torch.empty(3, device=DEV).random_(5, 5)


def test_randperm():
    for n, dtype in ((1000, torch.int64), (37, torch.int32), (100, torch.float32), (0, torch.int64)):
        p = torch.randperm(n, dtype=dtype, device=DEV).cpu()
        assert p.dtype == dtype and torch.equal(p.sort().values, torch.arange(n, dtype=dtype))
    a, b = torch.randperm(1000, device=DEV).cpu(), torch.randperm(1000, device=DEV).cpu()
    assert not torch.equal(a, b)
    firsts = torch.stack([torch.randperm(4, device=DEV) for _ in range(400)]).cpu()[:, 0]
    counts = torch.bincount(firsts, minlength=4).double()
    assert ((counts - 100).abs() <= 5 * math.sqrt(100 * 0.75)).all()
    with pytest.raises(ShapeError):
        torch.randperm(300, dtype=torch.bfloat16, device=DEV)


def test_multinomial():
    w = torch.tensor([[0.1, 0.2, 0.7, 0.0], [1.0, 1.0, 1.0, 1.0]])
    s = torch.multinomial(w.to(DEV), N // 4, replacement=True).cpu()
    assert s.dtype == torch.int64 and s.shape == (2, N // 4)
    assert not (s[0] == 3).any()
    probs = w / w.sum(1, keepdim=True)
    for row in range(2):
        counts = torch.bincount(s[row], minlength=4).double() / (N // 4)
        assert ((counts - probs[row]).abs() <= 5 * (probs[row] * (1 - probs[row]) / (N // 4)).sqrt() + 1e-12).all()
    nr = torch.multinomial(torch.tensor([1.0, 1.0, 0.0, 1.0, 5.0]).to(DEV), 4).cpu()
    assert len(set(nr.tolist())) == 4 and 2 not in nr.tolist()
    with pytest.raises(ShapeError):
        torch.multinomial(torch.ones(3).to(DEV), 0)


# ---------------------------------------------------------------------------------------------------- dropout
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout(dtype):
    x = torch.randn(200, 200).to(dtype)
    p = 0.3
    out, mask = torch.ops.aten.native_dropout(x.to(DEV), p, True)
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool and abs(mask.double().mean().item() - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / N)
    want = (x.float() * torch.tensor(1 / (1 - p), dtype=torch.float32)).to(dtype) * mask
    assert torch.equal(out, want)
    g = torch.randn(200, 200).to(dtype)
    got = torch.ops.aten.native_dropout_backward(g.to(DEV), mask.to(DEV), 1 / (1 - p)).cpu()
    assert torch.equal(got, torch.ops.aten.native_dropout_backward(g, mask, 1 / (1 - p)))
    same, ones = torch.ops.aten.native_dropout(x.to(DEV), p, False)
    assert torch.equal(same.cpu(), x) and ones.cpu().all()
    zero, none = torch.ops.aten.native_dropout(x.to(DEV), 1.0, True)
    assert (zero.cpu() == 0).all() and not none.cpu().any()


def test_dropout_autograd():
    x = torch.randn(64, 64).to(DEV).requires_grad_()
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    y.sum().backward()
    kept = y.detach().cpu() != 0
    assert torch.equal(x.grad.cpu(), kept.float() * 2.0)
    assert torch.equal(torch.nn.functional.dropout(x, 0.5, training=False).detach().cpu(), x.detach().cpu())


# ---------------------------------------------------------------------------------------------------- reproducibility
def draws() -> list[torch.Tensor]:
    x = torch.ones(50, device=DEV)
    return [
        t.cpu()
        for t in (
            torch.rand(50, device=DEV),
            torch.randn(50, device=DEV, dtype=torch.bfloat16),
            torch.randint(0, 1000, (50,), device=DEV),
            torch.randperm(50, device=DEV),
            torch.nn.functional.dropout(x, 0.5),
            torch.bernoulli(x * 0.5),
            torch.multinomial(x, 10),
        )
    ]


def test_manual_seed_replays():
    torch.manual_seed(7)
    a = draws()
    torch.manual_seed(7)
    b = draws()
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    torch.tt.manual_seed(7)
    c = draws()
    assert all(torch.equal(u, v) for u, v in zip(a, c))
    torch.manual_seed(8)
    d = draws()
    assert not any(torch.equal(u, v) for u, v in zip(a[:3], d[:3]))
    assert not torch.equal(torch.rand(50, device=DEV).cpu(), torch.rand(50, device=DEV).cpu())


def test_rng_state_round_trip():
    state = torch.tt.get_rng_state()
    a = draws()
    torch.tt.set_rng_state(state)
    assert all(torch.equal(u, v) for u, v in zip(a, draws()))
    with torch.random.fork_rng(devices=[0], device_type="tt"):
        inside = torch.rand(10, device=DEV).cpu()
    assert torch.equal(inside, torch.rand(10, device=DEV).cpu())


def gen_draws(g: torch.Generator) -> list[torch.Tensor]:
    x = torch.ones(50, device=DEV)
    return [
        t.cpu()
        for t in (
            torch.rand(50, device=DEV, generator=g),
            torch.randn(50, device=DEV, dtype=torch.bfloat16, generator=g),
            torch.randint(0, 1000, (50,), device=DEV, generator=g),
            torch.randperm(50, device=DEV, generator=g),
            torch.bernoulli(x * 0.5, generator=g),
            torch.multinomial(x, 10, generator=g),
            torch.empty(50, device=DEV).exponential_(generator=g),
        )
    ]


def test_a_tt_generator_is_a_stream_of_its_own():
    g = torch.Generator(device="tt").manual_seed(7)
    assert g.device == DEV and g.initial_seed() == 7 and g.get_offset() == 0
    a = gen_draws(g)
    assert g.get_offset() > 0
    torch.rand(1000, device=DEV)  # the default stream moves; g's numbers do not depend on it
    g.manual_seed(7)
    assert all(torch.equal(u, v) for u, v in zip(a, gen_draws(g)))
    state = g.get_state()
    b = gen_draws(g)
    h = torch.Generator(device="tt")
    h.set_state(state)  # a copy of the state draws the same numbers
    assert all(torch.equal(u, v) for u, v in zip(b, gen_draws(h)))
    assert not any(torch.equal(u, v) for u, v in zip(a[:3], b[:3]))
    torch.manual_seed(1234)
    default = draws()
    torch.manual_seed(1234)
    gen_draws(g)  # draws from g leave the default stream where it was
    assert all(torch.equal(u, v) for u, v in zip(default, draws()))


def test_a_tt_generator_keeps_the_distributions():
    g = torch.Generator(device="tt").manual_seed(3)
    x = torch.empty(N, device=DEV).normal_(2.0, 3.0, generator=g).cpu()
    moments_ok(x, 2.0, 3.0)
    u = torch.rand(N, device=DEV, generator=g).cpu()
    assert ks(u, lambda s: s.clamp(0, 1)) < KS


def test_a_generator_of_another_device_is_refused():
    with pytest.raises(DeviceError, match="Generator\\(device='tt'\\)"):
        torch.rand(3, generator=torch.Generator(), device=DEV)
    x = torch.zeros(3, device=DEV)
    with pytest.raises(DeviceError):
        x.normal_(generator=torch.Generator())
    assert torch.equal(x.cpu(), torch.zeros(3))  # untouched
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.Generator(device="tt").set_state(torch.zeros(3, dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------------------- rrelu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rrelu_training_draws_slopes_on_the_card(dtype):
    """F.rrelu(training=True): each x <= 0 gets a slope from U(lower, upper) (the card's uniform law, KS-checked),
    kept in the noise tensor (1 for x > 0); the output is x * slope rounded once, the gradient grad * noise; the
    same seed replays the same slopes."""
    lo, hi = 0.1, 0.3
    x = -torch.rand(N, generator=torch.Generator().manual_seed(0)).add(0.5).to(dtype)
    x[::7] = -x[::7]
    noise = torch.empty(0, dtype=dtype, device=DEV)
    xt = x.to(DEV).requires_grad_()
    y = torch.ops.aten.rrelu_with_noise(xt, noise, lo, hi, True)
    g = torch.randn(N).to(dtype)
    y.backward(g.to(DEV))
    nz, yc = noise.cpu(), y.detach().cpu()
    neg = x <= 0
    assert torch.equal(nz[~neg], torch.ones_like(nz[~neg]))
    slopes = nz[neg].double()
    assert slopes.min() >= lo and slopes.max() <= hi
    step = bf16_spacing(hi) / (hi - lo) if dtype == torch.bfloat16 else 0.0
    assert ks(slopes, lambda s: ((s - lo) / (hi - lo)).clamp(0, 1)) <= KS + step
    assert torch.equal(yc, (x.double() * nz.double()).to(dtype))  # one rounding of the exact product
    assert torch.equal(xt.grad.cpu(), (g.double() * nz.double()).to(dtype))
    torch.manual_seed(1234)
    again = torch.nn.functional.rrelu(x.to(DEV), lo, hi, training=True).cpu()
    assert torch.equal(again, yc)


def test_rrelu_eval_and_in_place():
    """Eval: leaky ReLU with slope (lower + upper) / 2 (one fp32 rounding of x * slope), the noise untouched; in place
    on tt as on the CPU."""
    x = torch.randn(100, generator=torch.Generator().manual_seed(1))
    ref = torch.nn.functional.rrelu(x.double())
    assert torch.allclose(torch.nn.functional.rrelu(x.to(DEV)).cpu().double(), ref, rtol=2.0**-23, atol=0)
    t = x.to(DEV)
    torch.nn.functional.rrelu(t, 0.2, 0.4, training=True, inplace=True)
    assert bool(((t.cpu() == x) | ((t.cpu() / x >= 0.2 - 1e-6) & (t.cpu() / x <= 0.4 + 1e-6))).all())
    noise = torch.full((100,), 7.0, device=DEV)
    torch.ops.aten.rrelu_with_noise(x.to(DEV), noise, 0.125, 1 / 3, False)
    assert bool((noise.cpu() == 7.0).all())
    g = torch.Generator(device="tt").manual_seed(3)
    a = torch.nn.functional.rrelu(-x.abs().to(DEV), training=True).cpu()
    b = torch.ops.aten.rrelu_with_noise(-x.abs().to(DEV), torch.empty(0, device=DEV), 0.125, 1 / 3, True, g).cpu()
    g.manual_seed(3)
    c = torch.ops.aten.rrelu_with_noise(-x.abs().to(DEV), torch.empty(0, device=DEV), 0.125, 1 / 3, True, g).cpu()
    assert torch.equal(b, c) and a.shape == b.shape  # a tt generator replays its own stream
