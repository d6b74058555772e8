"""Max unpooling, fractional max pooling, grid sampling and unfold / fold on tt
(kohakutt/frontends/torch/aten/sampling.py) against the CPU in float64, forward and backward (autograd through the tt
kernels).

The reference runs on exactly the values the card holds (bfloat16 inputs are rounded on the host first). Bounds:
- exact: max unpooling (a scatter of the values into zeros) and its gradient (a gather), fractional max pooling
  (values and indices, given the window offsets ``_random_samples``; gathers and an exact max). Its gradient adds
  the gradients of the windows that picked a position in fp32 (overlapping windows: a few adds, each within 2^-24)
  and rounds once into the result: ``FP32 * S`` (bfloat16: ``2^-8 * S``), S = the sum of those |gradients|.
- grid sampling computes coordinates, weights and the weighted sum in fp32 from exact values: a few dozen fp32
  roundings of terms no larger than ``S`` = sum |weight| * max|x| (bilinear, nearest: S <= max|x|; bicubic: the
  weights' absolute sum is at most 1.375^2 < 2), so ``FP32 * S`` with FP32 = 2^-20 (about 8 fp32 ulp, with the
  coordinate error times the interpolant's slope inside it); a bfloat16 result adds its one rounding, 2^-8 relative.
- its input gradient adds each read's weighted gradient in fp32 (scatter-add, in index order): at most one add per
  read lands on a position (16 * 56 here: under 2^10 adds, each within 2^-24 of the running sum), so
  ``2^-14 * S_g`` with S_g = max over channels of the sum of |grad| (times the weights' bound).
- its grid gradient sums over channels on the reduce unit, whose SrcA register keeps 10 significant bits of each
  fp32 term (within 2^-9), then scales: ``TF32 * B * max|x| * sum_c |grad|`` times the unnormalizing scale, with
  TF32 = 3 * 2^-10 (the truncation plus fp32 roundings) and B the weights' derivatives' absolute sum per read set
  (bilinear 2 per dim, bicubic < 5).
- unfold (im2col) moves values exactly; fold (col2im) adds the overlapping windows' values in fp32 (at most kh * kw
  adds per position, each within 2^-24) and rounds once: ``FP32 * S`` (bfloat16: ``2^-8 * S``), S = fold of |cols|.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from tt_checks import gen, within

DEV = torch.device("tt", 0)
FP32 = 2.0**-20
TF32 = 3 * 2.0**-10
BF16 = 2.0**-8
ADDS = 2.0**-14  # up to ~900 reads land on one input position here: that many fp32 adds, each within 2^-24


def channel_sum(g: torch.Tensor) -> float:
    """The largest sum of |grad| over one channel's outputs: what one input position's gradient can collect."""
    return g.abs().flatten(2).sum(-1).max().item()




# ------------------------------------------------------------------------------------------------ max unpool
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_unpool_1d_2d_3d_and_gradient(dtype):
    for d, shape in ((1, (2, 3, 12)), (2, (2, 3, 6, 8)), (3, (2, 2, 4, 6, 6))):
        x = torch.randn(shape, generator=gen(d)).to(dtype)
        pool = getattr(F, f"max_pool{d}d")
        unpool = getattr(F, f"max_unpool{d}d")
        y, idx = pool(x, 2, return_indices=True)
        ref = unpool(y, idx, 2)
        yt = y.to(DEV).requires_grad_()
        got = unpool(yt, idx.to(DEV), 2)
        assert got.dtype == dtype
        assert torch.equal(got.cpu(), ref), f"max_unpool{d}d"
        weights = torch.randn(ref.shape, generator=gen(10 + d)).to(dtype)
        (got * weights.to(DEV)).sum().backward()
        assert torch.equal(yt.grad.cpu(), weights.reshape(*ref.shape[:2], -1).gather(2, idx.flatten(2)).view_as(y))
    x = torch.randn(3, 6, 8, generator=gen(5))  # no batch dim, output_size given
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    ref = F.max_unpool2d(y, idx, 2, output_size=(7, 9))
    assert torch.equal(F.max_unpool2d(y.to(DEV), idx.to(DEV), 2, output_size=(7, 9)).cpu(), ref)


def test_max_unpool_bad_index_dtype():
    y = torch.randn(1, 1, 2, 2).to(DEV)
    with pytest.raises(Exception, match="int64"):
        torch.ops.aten.max_unpool2d(y, torch.zeros(1, 1, 2, 2, dtype=torch.float32).to(DEV), [4, 4])


# ---------------------------------------------------------------------------------------- fractional max pool
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("d", [2, 3])
def test_fractional_max_pool_matches_cpu_given_samples(d, dtype):
    shape, kernel, out = ((2, 3, 9, 11), (2, 3), (4, 5)) if d == 2 else ((2, 2, 7, 9, 8), (2, 2, 3), (3, 4, 5))
    x = torch.randn(shape, generator=gen(d)).to(dtype)
    u = torch.rand(shape[0], shape[1], d, generator=gen(20 + d)).to(dtype)
    fn = getattr(F, f"fractional_max_pool{d}d")
    ref, ridx = fn(x, kernel, output_size=out, return_indices=True, _random_samples=u)
    xt = x.to(DEV).requires_grad_()
    got, gidx = fn(xt, kernel, output_size=out, return_indices=True, _random_samples=u.to(DEV))
    assert torch.equal(got.cpu(), ref) and torch.equal(gidx.cpu(), ridx), f"fractional_max_pool{d}d"
    g = torch.randn(ref.shape, generator=gen(30 + d)).to(dtype)
    got.backward(g.to(DEV))
    xr = x.double().requires_grad_()
    fn(xr, kernel, output_size=out, _random_samples=u.double()).backward(g.double())
    s = torch.zeros_like(xr).flatten(2).scatter_add(2, ridx.flatten(2), g.double().abs().flatten(2)).view_as(xr)
    # overlapping windows can pick one position a few times: fp32 adds of those gradients, one final rounding
    within(xt.grad, xr.grad, (FP32 if dtype == torch.float32 else BF16) * s, "gradient")
    # no batch dim; output_ratio
    ratio = (0.5,) * d
    one, _ = fn(x[0], kernel, output_ratio=ratio, return_indices=True, _random_samples=u[:1])
    assert torch.equal(fn(x[0].to(DEV), kernel, output_ratio=ratio, _random_samples=u[:1].to(DEV)).cpu(), one)


def test_fractional_max_pool_draws_on_the_card_reproducibly():
    x = torch.randn(2, 3, 10, 10, generator=gen(3)).to(DEV)
    torch.manual_seed(7)
    a, ia = F.fractional_max_pool2d(x, 3, output_size=4, return_indices=True)
    torch.manual_seed(7)
    b, ib = F.fractional_max_pool2d(x, 3, output_size=4, return_indices=True)
    assert torch.equal(a.cpu(), b.cpu()) and torch.equal(ia.cpu(), ib.cpu())
    # every value is the maximum of the 3 x 3 window its index starts... at least an element of x at that index
    assert torch.equal(x.cpu().flatten(2).gather(2, ia.cpu().flatten(2)), a.cpu().flatten(2))


# ---------------------------------------------------------------------------------------------- grid sampling
MODES = list(itertools.product(("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection"), (False, True)))


def _weight_sum(mode: str) -> float:
    return 2.0 if mode == "bicubic" else 1.0


@pytest.mark.parametrize("mode,padding,align", MODES)
def test_grid_sample_2d_forward_backward(mode, padding, align):
    x = torch.randn(2, 3, 5, 6, generator=gen(1), dtype=torch.float64)
    grid = torch.rand(2, 7, 8, 2, generator=gen(2), dtype=torch.float64) * 3 - 1.5  # past the borders too
    grid = grid.float().double()
    xr, gr = x.float().double().requires_grad_(), grid.clone().requires_grad_()
    ref = F.grid_sample(xr, gr, mode=mode, padding_mode=padding, align_corners=align)
    go = torch.randn(ref.shape, generator=gen(3), dtype=torch.float64).float().double()
    ref.backward(go)
    xt, gt = x.float().to(DEV).requires_grad_(), grid.float().to(DEV).requires_grad_()
    got = F.grid_sample(xt, gt, mode=mode, padding_mode=padding, align_corners=align)
    assert got.dtype == torch.float32
    mx = x.abs().max().item()
    within(got, ref, FP32 * _weight_sum(mode) * mx + 1e-7, f"{mode}/{padding}/{align}")
    got.backward(go.float().to(DEV))
    within(xt.grad, xr.grad, ADDS * _weight_sum(mode) * channel_sum(go) + 1e-7, "input gradient")
    scale = max(5, 6) / 2
    per_point = go.abs().sum(1, keepdim=True).movedim(1, -1)  # sum_c |grad| at each output point
    b = 5.0 if mode == "bicubic" else 2.0
    within(gt.grad, gr.grad, TF32 * b * mx * per_point * scale + 1e-6, "grid gradient")


@pytest.mark.parametrize("mode,padding,align", [m for m in MODES if m[0] != "bicubic"])
def test_grid_sample_3d_forward_backward(mode, padding, align):
    x = torch.randn(2, 2, 4, 5, 6, generator=gen(4)).double()
    grid = (torch.rand(2, 3, 4, 5, 3, generator=gen(5)) * 3 - 1.5).double()
    xr, gr = x.clone().requires_grad_(), grid.clone().requires_grad_()
    ref = F.grid_sample(xr, gr, mode=mode, padding_mode=padding, align_corners=align)
    go = torch.randn(ref.shape, generator=gen(6)).double()
    ref.backward(go)
    xt, gt = x.float().to(DEV).requires_grad_(), grid.float().to(DEV).requires_grad_()
    got = F.grid_sample(xt, gt, mode=mode, padding_mode=padding, align_corners=align)
    mx = x.abs().max().item()
    within(got, ref, FP32 * mx + 1e-7, f"3d {mode}/{padding}/{align}")
    got.backward(go.float().to(DEV))
    within(xt.grad, xr.grad, ADDS * channel_sum(go) + 1e-7, "input gradient")
    per_point = go.abs().sum(1, keepdim=True).movedim(1, -1)
    within(gt.grad, gr.grad, TF32 * 2 * mx * per_point * 3 + 1e-6, "grid gradient")


def test_grid_sample_bfloat16_and_errors():
    x = torch.randn(1, 4, 6, 6, generator=gen(7)).bfloat16()
    grid = (torch.rand(1, 5, 5, 2, generator=gen(8)) * 2 - 1).bfloat16()
    ref = F.grid_sample(x.double(), grid.double(), align_corners=False)
    got = F.grid_sample(x.to(DEV), grid.to(DEV), align_corners=False)
    assert got.dtype == torch.bfloat16
    within(got, ref, BF16 * ref.abs() + FP32 * x.double().abs().max(), "bfloat16")
    with pytest.raises(RuntimeError, match="bicubic"):
        torch.ops.aten.grid_sampler_3d(torch.zeros(1, 1, 2, 2, 2).to(DEV), torch.zeros(1, 1, 1, 1, 3).to(DEV), 2, 0,
                                       False)  # fmt: skip


# ---------------------------------------------------------------------------------------------- unfold / fold
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "kernel,dilation,padding,stride", [((2, 3), 1, 0, 1), ((3, 3), (2, 1), (1, 2), (2, 1)), (1, 1, 0, 1)]
)
def test_unfold_fold_im2col_col2im(kernel, dilation, padding, stride, dtype):
    x = torch.randn(2, 3, 7, 8, generator=gen(11)).to(dtype)
    args = (kernel, dilation, padding, stride)
    xt = x.to(DEV).requires_grad_()
    cols = F.unfold(xt, *args)
    assert torch.equal(cols.detach().cpu(), F.unfold(x, *args)), "unfold moves values exactly"
    assert torch.equal(F.unfold(x[0].to(DEV), *args).cpu(), F.unfold(x[0], *args)), "unfold without a batch dim"
    g = torch.randn(cols.shape, generator=gen(12)).to(dtype)
    cols.backward(g.to(DEV))  # unfold's gradient is fold (col2im): overlapping windows add
    ref = F.fold(g.double(), (7, 8), *args)
    s = F.fold(g.double().abs(), (7, 8), *args)  # a position takes at most kh * kw adds, fp32, one final rounding
    within(xt.grad, ref, (FP32 if dtype == torch.float32 else BF16) * s, "fold")
