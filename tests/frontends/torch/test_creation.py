"""Tensor creation on tt against PyTorch's CPU results and exact references.

Tolerances. ``full`` / ``eye`` / ``zeros`` / ``ones`` / ``scalar_tensor`` / ``tril_indices`` and every integer
``arange`` / ``linspace`` store one value per element: bit-exact against the CPU. Float ``arange`` promises
start + i * step rounded once to the output dtype, and float ``linspace`` promises torch's symmetric formula
(start + i * step for the first half, end - (steps - 1 - i) * step for the second) rounded once; both are checked
against the exact rational value: within half an ulp in float32. bfloat16 results are rounded through float32 first
(two roundings): within one bf16 ulp. PyTorch's own CPU kernels compute float32 ``arange`` partly in float (its
vectorized path rounds twice), so against the CPU the bound is two float32 ulps of max(|start|, |end|) (its
intermediate is rounded at that magnitude, which dwarfs the ulp of a result near zero). ``logspace`` is base ** x on
the SFPU: the fp32 exponent carries |ln(base) * x| * 2^-24 of relative error into the result, the SFPU power a few
ulp more (rtol = (|ln(base) * x| + 4) * 2^-24). ``kaiser_window`` evaluates I0 at beta * sqrt(1 - r^2) in fp32: about
five roundings of the argument, which I0 turns into at most beta * 5 * 2^-24 relative (|I0'/I0| < 1) -- under 2^-17
for beta <= 20 --, plus I0's own error (2^-17, see test_pointwise.py) for the window and for the peak it divides
by: rtol = 2^-15.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from kohakutt.errors import IntegerOverflowError

DEV = torch.device("tt", 0)


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device.type == "tt"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert torch.equal(got, want), (got, want)


def ulp(x: torch.Tensor) -> torch.Tensor:
    """The spacing of x's dtype at each |x| (float64)."""
    bits = torch.finfo(x.dtype).eps
    e = torch.floor(torch.log2(x.double().abs().clamp_min(torch.finfo(x.dtype).tiny)))
    return torch.pow(2.0, e) * bits


def near_cpu(got: torch.Tensor, want: torch.Tensor, start: float, end: float) -> None:
    """|got - want| <= 2 ulp(max(|start|, |end|)) in got's dtype: PyTorch's CPU kernels round an intermediate of that
    magnitude."""
    scale = torch.tensor(max(abs(start), abs(end), 1e-30), dtype=want.dtype)
    assert ((got.cpu().double() - want.double()).abs() <= 2 * ulp(scale)).all(), (got, want)


def within_ulps(got: torch.Tensor, exact: list[Fraction], ulps: float) -> None:
    got = got.cpu()
    assert got.numel() == len(exact)
    gaps = [abs(Fraction(float(g)) - e) for g, e in zip(got.tolist(), exact)]
    limit = ulp(got) * ulps
    bad = [i for i, (gap, lim) in enumerate(zip(gaps, limit.tolist())) if gap > Fraction(lim)]
    assert not bad, [(i, got[i].item(), float(exact[i])) for i in bad[:5]]


# ---------------------------------------------------------------------------------------------------- arange
@pytest.mark.parametrize("dtype", [None, torch.int32, torch.int64, torch.float32, torch.bfloat16, torch.uint8])
def test_arange_integers(dtype):
    for args in [(7,), (2, 9), (10, -7, -3), (0, 250, 7), (5, 5)]:
        if dtype is torch.uint8 and args[-1] < 0:
            continue
        same(torch.arange(*args, dtype=dtype, device=DEV), torch.arange(*args, dtype=dtype))


def test_arange_out_resizes():
    out = torch.empty(0, dtype=torch.int64, device=DEV)
    torch.arange(3, 40, 4, out=out)
    same(out, torch.arange(3, 40, 4))
    out = torch.empty(0, device=DEV)
    torch.arange(0.5, 3.0, 0.25, out=out)
    same(out, torch.arange(0.5, 3.0, 0.25))


@pytest.mark.parametrize(
    "start, end, step", [(0, 1, 0.1), (-3, 1000.7, 0.37), (5.5, -2.25, -0.3), (1e6, 1e6 + 3, 0.125)]
)
def test_arange_float32_rounded_once(start, end, step):
    got = torch.arange(start, end, step, device=DEV)
    want = torch.arange(start, end, step)
    assert got.shape == want.shape and got.dtype == torch.float32
    exact = [Fraction(start) + i * Fraction(step) for i in range(want.numel())]
    within_ulps(got, exact, 0.5)
    near_cpu(got, want, start, end)


def test_arange_bfloat16():
    got = torch.arange(0, 30, 0.3, dtype=torch.bfloat16, device=DEV)
    exact = [Fraction(0.3) * i for i in range(got.numel())]
    assert got.numel() == torch.arange(0, 30, 0.3, dtype=torch.bfloat16).numel()
    within_ulps(got, exact, 1.0)


def test_arange_errors():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device=DEV)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        torch.arange(5, 0, 1, device=DEV)
    assert torch.equal(torch.arange(0, 2**33, 2**31, device=DEV).cpu(), torch.arange(0, 2**33, 2**31))  # int64
    with pytest.raises(IntegerOverflowError, match="int32"):
        torch.arange(0, 2**33, 2**31, dtype=torch.int32, device=DEV)


# ---------------------------------------------------------------------------------------------- linspace, logspace
def linspace_exact(start: float, end: float, steps: int) -> list[Fraction]:
    """torch's formula in exact arithmetic: from start for the first half, from end for the second."""
    if steps == 1:
        return [Fraction(start)]
    a, b = Fraction(start), Fraction(end)
    step = (b - a) / (steps - 1)
    return [a + i * step if i < steps // 2 else b - (steps - 1 - i) * step for i in range(steps)]


@pytest.mark.parametrize("start, end, steps", [(-2, 3.3, 101), (0, 1, 2), (-2, 3.3, 1), (1e3, -7.5, 64), (0, 1, 0)])
def test_linspace_float(start, end, steps):
    got = torch.linspace(start, end, steps, device=DEV)
    assert got.shape == (steps,) and got.dtype == torch.float32
    within_ulps(got, linspace_exact(start, end, steps), 0.5)
    near_cpu(got, torch.linspace(start, end, steps), start, end)
    gb = torch.linspace(start, end, steps, dtype=torch.bfloat16, device=DEV)
    within_ulps(gb, linspace_exact(start, end, steps), 1.0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_linspace_integers(dtype):
    for args in [(-2, 13, 7), (0, 100, 9), (10, -10, 6)]:
        same(torch.linspace(*args, dtype=dtype, device=DEV), torch.linspace(*args, dtype=dtype))


def test_linspace_tensor_bounds_and_out():
    start = torch.tensor(-1.5, device=DEV)
    same(torch.linspace(start, 2.5, 5), torch.linspace(-1.5, 2.5, 5))
    out = torch.empty(0, device=DEV)
    torch.linspace(0, 4, 9, out=out)
    same(out, torch.linspace(0, 4, 9))


@pytest.mark.parametrize("start, end, steps, base", [(-2, 3, 11, 10.0), (0, 1, 7, 2.0), (-1, 1, 5, math.e)])
def test_logspace(start, end, steps, base):
    got = torch.logspace(start, end, steps, base, device=DEV).cpu().double()
    x = torch.linspace(start, end, steps, dtype=torch.float64)
    want = torch.pow(base, x)
    rtol = (abs(math.log(base)) * x.abs() + 4) * 2.0**-24
    assert ((got - want).abs() <= rtol * want.abs()).all(), (got, want)


# ---------------------------------------------------------------------------------------------------- eye, full
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool])
def test_eye(dtype):
    same(torch.eye(5, dtype=dtype, device=DEV), torch.eye(5, dtype=dtype))
    same(torch.eye(3, 7, dtype=dtype, device=DEV), torch.eye(3, 7, dtype=dtype))
    same(torch.eye(0, 2, dtype=dtype, device=DEV), torch.eye(0, 2, dtype=dtype))
    out = torch.empty(0, dtype=dtype, device=DEV)
    torch.eye(4, 2, out=out)
    same(out, torch.eye(4, 2, dtype=dtype))


@pytest.mark.parametrize("value", [1.1, 7, True, -2.5e-3, float("inf")])
def test_full_infers_dtype(value):
    same(torch.full((2, 3), value, device=DEV), torch.full((2, 3), value))
    same(torch.full((4,), value, dtype=torch.bfloat16, device=DEV), torch.full((4,), value, dtype=torch.bfloat16))


def test_full_like_and_friends():
    x = torch.empty(2, 3, 4, 5, device=DEV).contiguous(memory_format=torch.channels_last)
    y = torch.full_like(x, 2.5)
    assert y.stride() == x.stride()
    same(y, torch.full((2, 3, 4, 5), 2.5).contiguous(memory_format=torch.channels_last))
    same(torch.full_like(x, 3, dtype=torch.int32), torch.full((2, 3, 4, 5), 3, dtype=torch.int32))
    same(torch.zeros_like(x), torch.zeros(2, 3, 4, 5))
    same(torch.ones(3, dtype=torch.int64, device=DEV), torch.ones(3, dtype=torch.int64))
    same(x.new_full((2,), -1.0), torch.full((2,), -1.0))
    same(x.new_zeros((2, 2), dtype=torch.bfloat16), torch.zeros(2, 2, dtype=torch.bfloat16))
    same(x.new_ones(3), torch.ones(3))
    same(torch.scalar_tensor(3.25, device=DEV), torch.scalar_tensor(3.25))
    same(torch.scalar_tensor(3, dtype=torch.int32, device=DEV), torch.scalar_tensor(3, dtype=torch.int32))
    same(torch.tensor([1, 2, 3], device=DEV), torch.tensor([1, 2, 3]))
    e = torch.empty_like(x)
    assert e.device == x.device and e.shape == x.shape and e.stride() == x.stride()
    out = torch.empty(0, device=DEV)
    torch.full((2, 2), 4.0, out=out)
    same(out, torch.full((2, 2), 4.0))


@pytest.mark.parametrize("op", [torch.tril_indices, torch.triu_indices])
def test_triangle_indices(op):
    for args in [(4, 5, 0), (4, 5, -2), (3, 3, 1), (5, 2, 4), (0, 3, 0), (6, 4, -10)]:
        same(op(*args, device=DEV), op(*args))
    same(op(4, 6, 1, dtype=torch.int32, device=DEV), op(4, 6, 1, dtype=torch.int32))


def test_full_refuses_sparse_layout():
    with pytest.raises(RuntimeError, match="sparse"):
        torch.full((2,), 1.0, layout=torch.sparse_coo, device=DEV)


@pytest.mark.parametrize("args", [(10,), (10, False), (7, True, 5.0), (33, False, 20.0), (1,), (0,)])
def test_kaiser_window(args):
    got = torch.kaiser_window(*args, device=DEV)
    assert got.device.type == "tt" and got.dtype == torch.float32
    ref = torch.kaiser_window(*args, dtype=torch.float64)
    assert got.shape == ref.shape
    assert torch.allclose(got.cpu().double(), ref, rtol=2.0**-15, atol=0), (got.cpu(), ref)
    assert torch.kaiser_window(5, device=DEV, dtype=torch.bfloat16).dtype == torch.bfloat16
