"""``F.embedding_bag`` on tt (kohakutt/frontends/torch/aten/embedding_bag.py) against the CPU in float64, forward and
backward.

Bounds. Rows are read exactly; a bag's sum adds its (per-sample-weighted: one fp32 rounding each) rows in fp32 in
index order, a mean divides once more: a few fp32 roundings of terms no larger than S = the sum of the magnitudes of
the bag's terms, ``FP32 * S`` with FP32 = 2^-20 (about 8 ulp); the max is exact; bfloat16 weights add the result's
rounding, 2^-8 relative. The weight's gradient adds, per row, the bags' gradients times a few fp32 factors
(per-sample weight, 1 / bag size, 1 / frequency): ``FP32 * S`` likewise. The per-sample weights' gradient is a dot
product over the embedding dim on the reduce unit (fp32 terms truncated to SrcA's 10 significant bits, within 2^-9):
``3 * 2^-10 * S``, S = the sum of |row * grad|.

``scale_grad_by_freq`` is checked against its documented meaning (each row's gradient divided by its index's
frequency in the batch), computed here by hand: PyTorch 2.13's CPU backward divides some rows by another index's
count (pytorch/pytorch#190063).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tt_checks import gen, within

DEV = torch.device("tt", 0)
FP32 = 2.0**-20
TF32 = 3 * 2.0**-10
BF16 = 2.0**-8
IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
OFF = torch.tensor([0, 4, 4, 7])  # bags [1 2 4 5], [], [4 3 2], [9 0 0]




CASES = [("sum", None, False), ("sum", 0, False), ("sum", None, True), ("sum", 0, True), ("mean", None, False),
         ("mean", 0, False), ("max", None, False), ("max", 0, False)]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode,padding_idx,weighted", CASES)
def test_embedding_bag_forward_backward(mode, padding_idx, weighted, dtype):
    w = torch.randn(10, 3, generator=gen(1)).to(dtype)
    psw = torch.rand(10, generator=gen(2)).to(dtype) if weighted else None
    wr = w.double().requires_grad_()
    pr = psw.double().requires_grad_() if weighted else None
    ref = F.embedding_bag(IDX, wr, OFF, mode=mode, padding_idx=padding_idx, per_sample_weights=pr)
    g = torch.randn(ref.shape, generator=gen(3)).to(dtype)
    ref.backward(g.double())
    wt = w.to(DEV).requires_grad_()
    pt = psw.to(DEV).requires_grad_() if weighted else None
    got = F.embedding_bag(IDX.to(DEV), wt, OFF.to(DEV), mode=mode, padding_idx=padding_idx, per_sample_weights=pt)
    assert got.dtype == dtype
    terms = F.embedding_bag(IDX, w.double().abs(), OFF, mode="sum" if mode == "max" else mode,
                            per_sample_weights=psw.double() if weighted else None)  # fmt: skip
    rel = 0.0 if dtype == torch.float32 else BF16
    within(got, ref, FP32 * terms + rel * ref.abs(), f"{mode} forward")
    got.backward(g.to(DEV))
    s = torch.zeros(10, 3, dtype=torch.float64).index_add_(0, IDX, g.double().abs()[[0, 0, 0, 0, 2, 2, 2, 3, 3, 3]])
    within(wt.grad, wr.grad, FP32 * s + rel * wr.grad.abs(), f"{mode} weight gradient")
    if weighted:
        dots = (w.double()[IDX] * g.double()[[0, 0, 0, 0, 2, 2, 2, 3, 3, 3]]).abs().sum(1)
        within(pt.grad, pr.grad, TF32 * dots + rel * pr.grad.abs(), "per-sample weights' gradient")


def test_embedding_bag_auxiliary_outputs_match_the_cpu():
    w = torch.randn(10, 3, generator=gen(4))
    for mode in (0, 1, 2):
        ref = torch.ops.aten._embedding_bag(w, IDX, OFF, False, mode, False, None, False, 0)
        got = torch.ops.aten._embedding_bag(w.to(DEV), IDX.to(DEV), OFF.to(DEV), False, mode, False, None, False, 0)
        assert torch.equal(got[1].cpu(), ref[1]) and torch.equal(got[2].cpu(), ref[2]), f"offset2bag, bag_size {mode}"
        if mode == 2:
            assert torch.equal(got[3].cpu(), ref[3]), "max_indices"
    x = torch.randint(0, 10, (4, 3), generator=gen(5))  # fixed-size bags; include_last_offset
    within(F.embedding_bag(x.to(DEV), w.to(DEV), mode="mean"), F.embedding_bag(x, w.double(), mode="mean"),
           FP32 * 4, "2-D input")  # fmt: skip
    last = torch.tensor([0, 4, 4, 7, 10])
    ref = F.embedding_bag(IDX, w.double(), last, include_last_offset=True)
    within(F.embedding_bag(IDX.to(DEV), w.to(DEV), last.to(DEV), include_last_offset=True), ref, FP32 * 8, "last")


def test_embedding_bag_scale_grad_by_freq_and_errors():
    w = torch.ones(6, 1).to(DEV).requires_grad_()
    idx = torch.tensor([1, 1, 2, 1, 3]).to(DEV)
    out = F.embedding_bag(idx, w, torch.tensor([0, 2]).to(DEV), mode="sum", scale_grad_by_freq=True)
    out.backward(torch.tensor([[1.0], [10.0]]).to(DEV))
    # index 1 is read three times (1 + 1 + 10, / 3), indices 2 and 3 once (10 each)
    assert torch.equal(w.grad.cpu().flatten(), torch.tensor([0.0, 4.0, 10.0, 10.0, 0.0, 0.0]))
    with pytest.raises(RuntimeError, match="per_sample_weights"):
        torch.ops.aten._embedding_bag(w.detach(), idx, torch.tensor([0]).to(DEV), False, 1, False,
                                      torch.ones(5).to(DEV), False, -1)  # fmt: skip
