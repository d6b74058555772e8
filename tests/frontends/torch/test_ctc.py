"""The CTC loss on tt (kohakutt/frontends/torch/aten/ctc.py) against the CPU in float64, forward and backward.

Bounds. The recursions run in fp32 on the SFPU (max, exp, add, log: each correctly rounded, 2^-24 relative): a step
adds a few roundings of the log-values it touches, whose size grows to |nll| at the end, so after T steps the
log-likelihood is within ``4 * T * 2^-24 * |nll|`` plus the log-softmax inputs' own fp32 rounding (``2^-24`` of each
|log p|, T of them along a path): ``FP32_STEPS = 8 * T * 2^-24`` relative to |nll| (at most ~2^-14 here). Reductions
of the loss over the batch (``reduction="sum"``) go through the reduce unit, whose SrcA keeps 10 significant bits of
each fp32 term (within 2^-9): ``2^-9 * sum |nll|``; ``"mean"`` first divides each loss by its target length
(SFPU) and is Kohaku-TT's fp32 mean (a few roundings; with TT-NN's kernels, KTT_CUSTOM_KERNELS=0, up to three
reduce steps each reading fp32 through SrcA: ``3 * 2^-9``). The gradient is exp(lp) minus a scatter-add of at most
2L + 1 occupancy terms, each within ``exp(FP32_STEPS * |nll|) - 1`` relative of its value (the error of its
log), and both are at most 1: within ``2 * FP32_STEPS * max|nll| * |grad|`` per element.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tt_checks import gen, within

from kohakutt import config

DEV = torch.device("tt", 0)
T, N, C, S = 12, 4, 6, 5
STEPS = 8 * T * 2.0**-24
OWN = bool(config.get("KTT_CUSTOM_KERNELS"))


def problem(seed: int = 0):
    lp = torch.randn(T, N, C, generator=gen(seed)).log_softmax(2).double()
    tg = torch.randint(1, C, (N, S), generator=gen(seed + 1))
    tg[1, 1] = tg[1, 0]  # a repeated label: its blank may not be skipped
    return lp, tg, torch.tensor([12, 10, 7, 12]), torch.tensor([5, 3, 0, 4])


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_forward_backward(reduction, zero_infinity):
    lp, tg, il, tl = problem()
    x = lp.clone().requires_grad_()
    ref = F.ctc_loss(x, tg, il, tl, reduction=reduction, zero_infinity=zero_infinity)
    g = torch.randn(ref.shape, generator=gen(5)).double()
    ref.backward(g)
    xt = lp.float().to(DEV).requires_grad_()
    got = F.ctc_loss(xt, tg.to(DEV), il.to(DEV), tl.to(DEV), reduction=reduction, zero_infinity=zero_infinity)
    nll = F.ctc_loss(lp, tg, il, tl, reduction="none")
    mean = 2 * STEPS if OWN else 3 * 2.0**-9  # Kohaku-TT's fp32 mean, or TT-NN's (up to three SrcA reads)
    bound = {"none": STEPS * nll.abs(), "sum": (2.0**-9 + STEPS) * nll.abs().sum(), "mean": mean * nll.abs().max()}
    within(got, ref, bound[reduction], f"ctc_loss {reduction}", nan_equal=True)
    got.backward(g.float().to(DEV))
    within(xt.grad, x.grad, 2 * STEPS * nll.abs().max() * g.abs().max() + 1e-7, "gradient", nan_equal=True)


def test_ctc_loss_concatenated_targets_and_lists():
    lp, tg, il, tl = problem(7)
    flat = torch.cat([tg[i, : tl[i]] for i in range(N)])
    ref = F.ctc_loss(lp, flat, il.tolist(), tl.tolist(), reduction="none")
    got = F.ctc_loss(lp.float().to(DEV), flat.to(DEV), il.tolist(), tl.tolist(), reduction="none")
    within(got, ref, STEPS * ref.abs(), "1-D targets", nan_equal=True)
    nll, log_alpha = torch.ops.aten._ctc_loss(lp.float().to(DEV), tg.to(DEV), il.tolist(), tl.tolist(), 0, False)
    rn, ra = torch.ops.aten._ctc_loss(lp, tg, il.tolist(), tl.tolist(), 0, False)
    within(nll, rn, STEPS * rn.abs(), "_ctc_loss", nan_equal=True)
    for i in range(N):  # the CPU leaves the rest of log_alpha unset
        rows, cols = int(il[i]), 2 * int(tl[i]) + 1
        within(
            log_alpha[i, :rows, :cols],
            ra[i, :rows, :cols],
            STEPS * ra[i, :rows, :cols].abs(),
            "log_alpha",
            nan_equal=True,
        )


def test_ctc_loss_impossible_alignment_and_errors():
    lp, tg, _, tl = problem(9)
    il = torch.tensor([2, 10, 7, 12])  # 5 labels cannot fit in 2 frames
    got = F.ctc_loss(lp.float().to(DEV), tg.to(DEV), il.to(DEV), tl.to(DEV), reduction="none").cpu()
    assert math.isinf(got[0].item()) and torch.isfinite(got[1:]).all()
    zeroed = F.ctc_loss(lp.float().to(DEV), tg.to(DEV), il.to(DEV), tl.to(DEV), reduction="none", zero_infinity=True)
    assert zeroed.cpu()[0].item() == 0.0
    with pytest.raises(RuntimeError, match="input_lengths"):
        torch.ops.aten._ctc_loss(lp.float().to(DEV), tg.to(DEV), [13, 1, 1, 1], tl.tolist(), 0, False)
