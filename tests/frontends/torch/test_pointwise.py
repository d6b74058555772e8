"""Element-wise ops on tt (kohakutt/frontends/torch/aten/pointwise.py) against the CPU in float64: the compositions
(PReLU and its gradient, log-sigmoid's forward / backward pair, isposinf / isneginf, the Bessel function I0) and
PyTorch's arithmetic on bools. (The table-driven unary and binary ops are covered by the OpInfo conformance
subset, test_opinfo.py.)

The reference runs on exactly the values the card holds (bfloat16 inputs are rounded on the host first). Bounds, from
the element-wise family's numerics (kohakutt/ir/defs/elementwise.py):
- float32 arithmetic runs on the SFPU in IEEE fp32 (add, mul, where: one rounding each, 2^-24 relative) and its
  transcendental functions are modelled as correctly rounded fp32: a chain of a few such ops is within
  ``FP32 = 2^-20`` of the result's magnitude (about 8 ulp).
- bfloat16: each op's result is rounded to nearest into bf16, within its unit roundoff 2^-8 (8 significant bits); a
  chain of R bf16 roundings: ``R * 2^-8`` relative.
- a sum on the reduce unit (PReLU's weight gradient, which autograd sums over the non-channel dims) reads each fp32
  term truncated to SrcA's 10 significant bits (within 2^-9) and accumulates in fp32: ``2^-9 * S``, S = the sum of the
  terms' magnitudes; bf16 terms are exact in SrcA and the sum is rounded once into bf16 (2^-8 * S).
- I0 is a sum of 26 positive series terms (term k a chain of 3k fp32 roundings) below |x| = 15 and an fp32
  exp * rsqrt * 9-term asymptotic series above: about 100 roundings of 2^-24 at most, ``2^-17`` relative.
- comparisons, predicates, logic and ``where`` selections are exact. Results below fp32's smallest normal number
  (2^-126) are flushed to zero on the card.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tt_checks import gen, within

from kohakutt.errors import KohakuTTUnsupportedOperator

DEV = torch.device("tt", 0)
FP32 = 2.0**-20
BF16 = 2.0**-8
SRC_A = 2.0**-9
TINY = 2.0**-126  # the card flushes subnormal results to zero (exp(-100) included)


def rel(dtype: torch.dtype, roundings: int = 1) -> float:
    return FP32 if dtype == torch.float32 else roundings * BF16


def test_bool_arithmetic_is_logic():
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    at, bt = a.to(DEV), b.to(DEV)
    for name, fn in (("mul", torch.mul), ("add", torch.add), ("maximum", torch.maximum), ("minimum", torch.minimum)):
        got = fn(at, bt)
        assert got.dtype == torch.bool and torch.equal(got.cpu(), fn(a, b)), name
    c = at.clone()
    c.mul_(bt)
    assert torch.equal(c.cpu(), a & b), "in place"
    # what PyTorch's own compositions do with them
    x = torch.tensor([1.0, math.inf, -math.inf, math.nan, -2.5])
    assert torch.equal(torch.isfinite(x.to(DEV)).cpu(), torch.isfinite(x))
    y = torch.tensor([1.0 + 1e-6, math.inf, math.inf, math.nan, -2.0])
    for nan in (False, True):
        assert torch.equal(torch.isclose(x.to(DEV), y.to(DEV), equal_nan=nan).cpu(), torch.isclose(x, y, equal_nan=nan))
    got = torch.combinations(torch.arange(5.0).to(DEV), r=3)
    assert torch.equal(got.cpu(), torch.combinations(torch.arange(5.0), r=3))


def test_isposinf_isneginf():
    x = torch.tensor([0.0, math.inf, -math.inf, math.nan, -1.0, 3.4e38])
    for dtype in (torch.float32, torch.bfloat16):
        xt = x.to(dtype).to(DEV)
        assert torch.equal(torch.isposinf(xt).cpu(), torch.isposinf(x.to(dtype)))
        assert torch.equal(torch.isneginf(xt).cpu(), torch.isneginf(x.to(dtype)))
    ints = torch.tensor([0, -5, 7], dtype=torch.int32)
    assert not torch.isposinf(ints.to(DEV)).cpu().any() and not torch.isneginf(ints.to(DEV)).cpu().any()
    out = torch.empty(6, dtype=torch.bool).to(DEV)
    torch.isneginf(x.to(DEV), out=out)
    assert torch.equal(out.cpu(), torch.isneginf(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prelu_forward_backward(dtype):
    x = torch.randn(4, 3, 5, 6, generator=gen(1)).to(dtype)
    for w in (torch.randn(3, generator=gen(2)).to(dtype), torch.tensor([0.25]).to(dtype)):
        xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
        ref = F.prelu(xr, wr)
        g = torch.randn(ref.shape, generator=gen(3)).to(dtype)
        ref.backward(g.double())
        xt, wt = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
        got = F.prelu(xt, wt)
        assert got.dtype == dtype
        within(got, ref, rel(dtype) * ref.abs(), "prelu")
        got.backward(g.to(DEV))
        within(xt.grad, xr.grad, rel(dtype) * xr.grad.abs(), "input gradient")
        s = (x.double() * g.double()).abs().transpose(0, 1).reshape(3, -1).sum(1)  # per channel
        s = s if w.numel() == 3 else s.sum().reshape(1)
        tol = SRC_A + FP32 if dtype == torch.float32 else 2 * BF16  # the products' roundings, then the sum
        within(wt.grad, wr.grad, tol * s, "weight gradient")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_log_sigmoid_forward_backward(dtype):
    x = (torch.randn(5, 7, generator=gen(4)) * 6).to(dtype)
    x[0, :3] = torch.tensor([-100.0, 100.0, 0.0]).to(dtype)
    xr = x.double().requires_grad_()
    ref = F.logsigmoid(xr)
    g = torch.randn(ref.shape, generator=gen(5)).to(dtype)
    ref.backward(g.double())
    xt = x.to(DEV).requires_grad_()
    got = F.logsigmoid(xt)
    assert got.dtype == dtype
    within(got, ref, rel(dtype) * ref.abs() + 1e-30, "logsigmoid")
    got.backward(g.to(DEV))
    within(xt.grad, xr.grad, rel(dtype, 2) * xr.grad.abs() + 1e-30, "gradient")
    out, buffer = torch.ops.aten.log_sigmoid_forward(x.to(DEV))  # the buffer holds exp(-|x|), as the CPU's
    within(out, ref.detach(), rel(dtype) * ref.detach().abs() + 1e-30, "log_sigmoid_forward")
    e = torch.exp(-x.double().abs())
    within(buffer, e, rel(dtype, 2) * e + TINY, "buffer")
    # multilabel_soft_margin_loss is built on it
    y = (torch.rand(5, 7, generator=gen(6)) > 0.5).to(dtype)
    ref = F.multilabel_soft_margin_loss(x.double(), y.double())
    got = F.multilabel_soft_margin_loss(x.to(DEV), y.to(DEV))
    s = F.multilabel_soft_margin_loss(x.double(), y.double(), reduction="none").abs().sum() / 5
    within(got, ref, (3 * SRC_A if dtype == torch.float32 else 4 * BF16) * s, "multilabel_soft_margin_loss")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_i0(dtype):
    x = torch.cat([torch.linspace(-40, 40, 801), torch.tensor([0.0, 14.999, 15.0, 15.001, 80.0, -88.0])]).to(dtype)
    ref = torch.special.i0(x.double())
    got = torch.i0(x.to(DEV))
    assert got.dtype == dtype
    within(got, ref, (2.0**-17 + (0 if dtype == torch.float32 else BF16)) * ref, "i0")
    assert torch.isnan(torch.i0(torch.tensor([math.nan]).to(DEV)).cpu()).all()
    assert torch.isinf(torch.special.i0(torch.tensor([100.0]).to(DEV)).cpu()).all(), "overflows as float32 does"
    y = x.to(DEV).clone()
    y.i0_()
    assert torch.equal(y.cpu(), got.cpu())


def test_heaviside_sgn_angle_are_exact():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, math.nan, math.inf])
    v = torch.tensor([0.5, 0.5, 7.0, 0.5, 0.5, 0.5])
    for got, ref in (
        (torch.heaviside(x.to(DEV), v.to(DEV)), torch.heaviside(x, v)),
        (torch.sgn(x.to(DEV)), torch.sgn(x)),
        (torch.angle(x.to(DEV)), torch.angle(x)),
    ):
        got = got.cpu()
        assert got.dtype == ref.dtype and torch.equal(got.isnan(), ref.isnan())
        assert torch.equal(got[~ref.isnan()], ref[~ref.isnan()]), (got, ref)


def _one(x: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(x)


def _sinc_terms(x: torch.Tensor) -> torch.Tensor:  # (pi x cos(pi x) - sin(pi x)) / (pi x^2): its terms' size
    return (math.pi * x.abs() + 1) / (math.pi * x * x)


UNARY_COMPOSITES = [  # name, function, input range, float32 relative bound, bfloat16 roundings, gradient terms
    ("hardshrink", lambda x: F.hardshrink(x, 0.7), 3.0, 0.0, 0, _one),
    ("softshrink", lambda x: F.softshrink(x, 0.7), 3.0, FP32, 1, _one),
    ("logit", torch.logit, None, FP32, 3, lambda x: 1 / (x * (1 - x))),
    ("logit eps", lambda x: torch.logit(x, eps=0.2), None, FP32, 3, lambda x: 1 / (x * (1 - x))),
    ("sinc", torch.sinc, 3.0, FP32, 3, _sinc_terms),
    ("entr", torch.special.entr, None, FP32, 3, lambda x: 1 + x.log().abs()),
]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name,fn,scale,tol,roundings,terms", UNARY_COMPOSITES, ids=[u[0] for u in UNARY_COMPOSITES])
def test_unary_compositions_forward_backward(name, fn, scale, tol, roundings, terms, dtype):
    # the compositions are a few SFPU ops (FP32 relative in float32; bfloat16: one rounding per stored step); their
    # gradients are PyTorch's formulas over the same ops, within a few roundings of the size of their terms
    # (|grad| times ``terms(x)``). Bounds are relative to those magnitudes, plus an absolute floor of the same size
    # at the function's zeros.
    u = torch.rand(64, generator=gen(7))
    x = ((u * 2 - 1) * scale if scale is not None else u * 0.9 + 0.05).to(dtype)
    xr = x.double().requires_grad_()
    ref = fn(xr)
    g = torch.randn(ref.shape, generator=gen(8)).to(dtype)
    ref.backward(g.double())
    xt = x.to(DEV).requires_grad_()
    got = fn(xt)
    assert got.dtype == dtype
    rel_tol = tol if dtype == torch.float32 else roundings * BF16 + FP32
    within(got, ref, rel_tol * (ref.abs() + 1), name)
    got.backward(g.to(DEV))
    grad_tol = 4 * FP32 if dtype == torch.float32 else (roundings + 2) * BF16
    within(xt.grad, xr.grad, grad_tol * g.double().abs() * (terms(x.double()) + 1), f"{name} gradient")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_glu_forward_backward(dtype):
    x = torch.randn(3, 8, 5, generator=gen(9)).to(dtype)
    for dim in (1, -1) if x.shape[-1] % 2 == 0 else (1,):
        xr = x.double().requires_grad_()
        ref = F.glu(xr, dim)
        g = torch.randn(ref.shape, generator=gen(10)).to(dtype)
        ref.backward(g.double())
        xt = x.to(DEV).requires_grad_()
        got = F.glu(xt, dim)
        tol = FP32 if dtype == torch.float32 else 2 * BF16
        within(got, ref, tol * ref.abs() + 1e-30, "glu")
        got.backward(g.to(DEV))
        within(xt.grad, xr.grad, 2 * tol * (xr.grad.abs() + g.double().abs().max()), "glu gradient")


def test_xlog1py():
    x = torch.tensor([0.0, 0.0, 2.0, -1.5, 3.0])
    y = torch.tensor([math.nan, 5.0, 0.5, 2.0, -1.0])
    ref = torch.special.xlog1py(x.double(), y.double())
    got = torch.special.xlog1py(x.to(DEV), y.to(DEV)).cpu().double()
    assert torch.equal(got.isnan(), ref.isnan()) and torch.equal(got.isinf(), ref.isinf())
    finite = torch.isfinite(ref)
    assert torch.allclose(got[finite], ref[finite], rtol=FP32, atol=0)
    ref = torch.special.xlog1py(2.0, y.double())
    got = torch.special.xlog1py(2.0, y.to(DEV)).cpu().double()
    assert torch.allclose(got, ref, rtol=FP32, atol=0, equal_nan=True)


ZERO_DIM_FNS = {
    "erfc": torch.special.erfc, "erfinv": torch.erfinv, "lgamma": torch.lgamma, "digamma": torch.digamma,
    "gelu": F.gelu, "erf": torch.erf, "exp": torch.exp, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ZERO_DIM_FNS))
def test_zero_dim_inputs_forward_backward(name):
    """A 0-d tensor through the float64-modelled special functions (erfc, erfinv, lgamma, digamma, gelu's gradient)
    once failed inside the queued command; forward and gradient now equal the CPU's within fp32 rounding."""
    fn = ZERO_DIM_FNS[name]
    x = torch.tensor(0.5, device=DEV, requires_grad=True)
    ref_x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    y, ref = fn(x), fn(ref_x)
    assert y.shape == ()
    within(y, ref, FP32 * max(1.0, abs(ref.item())), f"{name}(0-d)")
    y.backward()
    ref.backward()
    assert x.grad.shape == ()
    within(x.grad, ref_x.grad, FP32 * max(1.0, abs(ref_x.grad.item())), f"{name}'(0-d)")


def test_digamma_gradient_is_trigamma():
    """digamma's gradient (PyTorch's autograd calls polygamma(1, x)) against CPU float64, gradcheck-style: the
    analytic gradient on tt, the float64 one, and a float64 central difference of digamma agree; float32 results are
    within fp32 rounding of the float64 values, bfloat16 within one bf16 rounding."""
    xs = torch.tensor([1e-3, 0.25, 0.5, 1.0, 2.0, 3.5, 10.0, 1e3, 1e6, -0.5, -1.5, -2.75])
    x = xs.to(DEV).requires_grad_()
    torch.digamma(x).backward(torch.arange(1.0, 13.0, device=DEV))
    ref_x = xs.double().requires_grad_()
    torch.digamma(ref_x).backward(torch.arange(1.0, 13.0, dtype=torch.float64))
    torch.testing.assert_close(x.grad.cpu().double(), ref_x.grad, rtol=4 * FP32, atol=0)
    h = 1e-6 * xs.double().abs().clamp(min=1.0)
    numeric = (torch.digamma(xs.double() + h) - torch.digamma(xs.double() - h)) / (2 * h) * torch.arange(1.0, 13.0)
    torch.testing.assert_close(ref_x.grad, numeric.double(), rtol=1e-5, atol=0)
    xb = xs.to(torch.bfloat16)
    gb = xb.to(DEV).requires_grad_()
    torch.digamma(gb).sum().backward()
    torch.testing.assert_close(gb.grad.cpu().double(), torch.polygamma(1, xb.double()).to(torch.bfloat16).double(),
                               rtol=2.0**-7, atol=0)  # fmt: skip
    # a second derivative: polygamma(1)'s gradient is polygamma(2)
    x2 = xs.to(DEV).requires_grad_()
    (g,) = torch.autograd.grad(torch.digamma(x2).sum(), x2, create_graph=True)
    g.sum().backward()
    torch.testing.assert_close(x2.grad.cpu().double(), torch.polygamma(2, xs.double()), rtol=4 * FP32, atol=0)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10])
def test_polygamma_orders(n):
    xs = torch.tensor([[0.1, 0.75, 1.0, 4.5], [20.0, -0.5, -3.25, 0.0]])
    got = torch.polygamma(n, xs.to(DEV)).cpu().double()
    ref = torch.polygamma(n, xs.double()).float().double()
    torch.testing.assert_close(got, ref, rtol=4 * FP32, atol=0, equal_nan=True)
    torch.testing.assert_close(torch.special.polygamma(n, xs.to(DEV)).cpu().double(), ref, rtol=4 * FP32, atol=0,
                               equal_nan=True)  # fmt: skip


def test_polygamma_beyond_the_card_orders_is_refused():
    x = torch.ones(3, device=DEV)
    with pytest.raises(KohakuTTUnsupportedOperator, match="polygamma: n=11"):
        torch.polygamma(11, x)
    assert torch.equal(x.cpu(), torch.ones(3))  # the device stays usable


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(("th", "value"), [(-1.5, 7), (1.5, 9.7), (2, 0), (-0.5, -3.9)])
def test_integer_threshold_casts_its_numbers_as_torch_does(dtype, th, value):
    x = torch.tensor([-2, -1, 0, 1, 2, 3], dtype=dtype)
    assert torch.equal(torch.threshold(x.to("tt"), th, value).cpu(), torch.threshold(x, th, value))
