"""``F.interpolate`` on tt (kohakutt/frontends/torch/aten/upsample.py) against the CPU in float64, forward and backward.

Bounds. Nearest and nearest-exact pick values: exact, and so are their source indices (PyTorch's own fp32 formula,
computed the same way on the card). Linear and cubic modes resize one dim at a time: fp32 weights (a few roundings,
within 2^-22 each) times exact values, 2 or 4 taps summed in fp32, so each dim adds a few fp32 roundings of terms no
larger than sum |w| * max|x| (linear: 1; cubic: at most 1.375), compounding over the dims: ``FP32 * 2^d * max|x|``
with FP32 = 2^-20 (about 8 ulp); a bfloat16 result adds its one rounding, 2^-8 relative. The backward adds each
output's weighted gradient into its taps' sources in fp32 (index_add): at most a few hundred adds per input position
here, each within 2^-24 of the running sum: ``2^-14 * S_g``, S_g = the largest sum of |grad| over one channel.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tt_checks import gen, within

DEV = torch.device("tt", 0)
FP32 = 2.0**-20
BF16 = 2.0**-8
ADDS = 2.0**-14




MODES = [("nearest", 1), ("nearest", 2), ("nearest", 3), ("nearest-exact", 2), ("linear", 1), ("bilinear", 2),
         ("trilinear", 3), ("bicubic", 2)]  # fmt: skip
SIZES = [{"scale_factor": 2}, {"scale_factor": 0.6}, {"scale_factor": 1.7, "recompute_scale_factor": False}, "size"]


@pytest.mark.parametrize("mode,d", MODES)
@pytest.mark.parametrize("how", range(len(SIZES)))
def test_interpolate_forward_backward(mode, d, how):
    kw = {"size": (5, 7, 3)[:d]} if SIZES[how] == "size" else SIZES[how]
    aligns = [None] if "nearest" in mode else [False, True]
    for align in aligns:
        extra = {} if align is None else {"align_corners": align}
        x = torch.randn((2, 3, *(4, 6, 5)[:d]), generator=gen(d)).double()
        xr = x.clone().requires_grad_()
        ref = F.interpolate(xr, mode=mode, **kw, **extra)
        g = torch.randn(ref.shape, generator=gen(10 + d)).double()
        ref.backward(g)
        xt = x.float().to(DEV).requires_grad_()
        got = F.interpolate(xt, mode=mode, **kw, **extra)
        exact = "nearest" in mode
        within(got, ref, 0.0 if exact else FP32 * 2**d * x.abs().max(), f"{mode} {kw} {align}")
        got.backward(g.float().to(DEV))
        per_channel = g.abs().flatten(2).sum(-1).max()
        within(xt.grad, xr.grad, ADDS * per_channel, f"{mode} {kw} {align} gradient")


def test_interpolate_bfloat16_and_channels():
    x = torch.randn(1, 4, 5, 6, generator=gen(3)).bfloat16()
    for mode in ("nearest", "bilinear", "bicubic"):
        ref = F.interpolate(x.double(), scale_factor=1.5, mode=mode)
        got = F.interpolate(x.to(DEV), scale_factor=1.5, mode=mode)
        assert got.dtype == torch.bfloat16
        within(got, ref, BF16 * ref.abs() + FP32 * 4 * x.double().abs().max(), f"bfloat16 {mode}")
    up = torch.nn.Upsample(scale_factor=2, mode="nearest")
    y = torch.arange(6.0).reshape(1, 1, 2, 3)
    assert torch.equal(up(y.to(DEV)).cpu(), up(y))
