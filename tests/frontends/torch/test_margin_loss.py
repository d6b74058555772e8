"""multi_margin_loss and multilabel_margin_loss on tt (kohakutt/frontends/torch/aten/margin_loss.py), forward and
backward, against the CPU in float64 on the same float32 values.

Every term of these losses is a fp32 element-wise value (one or two roundings, 2^-24 each) and every sum adds
non-negative terms: on the card's reduce unit each term is read truncated to 10 significant bits (within 2^-9), so
a sum errs by at most 2^-9 of itself; a loss is such a sum per sample, then (mean / sum) one more over the samples,
and a gradient entry is a term or a sum of terms. Bound: ``2 * 2^-9`` of the reference's magnitude plus 1e-6.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import kohakutt  # noqa: F401  (registers the tt device)
from kohakutt.errors import CommandError

DEV = torch.device("tt", 0)
TOL = 2 * 2.0**-9


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def check(fn, x: torch.Tensor, target: torch.Tensor, **kw) -> None:
    xd = x.double().requires_grad_()
    ref = fn(xd, target, **{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    xt = x.to(DEV).requires_grad_()
    got = fn(xt, target.to(DEV), **{k: v.to(DEV) if isinstance(v, torch.Tensor) else v for k, v in kw.items()})
    assert got.shape == ref.shape and got.dtype == x.dtype, (got.shape, ref.shape)
    g = torch.rand(ref.shape, generator=_g(9), dtype=torch.float64) + 0.5
    ref.backward(g)
    got.backward(g.float().to(DEV))
    for a, r, what in ((got, ref, "loss"), (xt.grad, xd.grad, "grad")):
        err = (a.detach().cpu().double() - r.detach()).abs()
        bound = TOL * r.detach().abs() + 1e-6
        assert bool((err <= bound).all()), f"{what}: error {err.max().item():.3g} over {bound.max().item():.3g}"


X = torch.randn(5, 7, generator=_g(0))
Y = torch.randint(0, 7, (5,), generator=_g(1))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(reduction, p):
    check(F.multi_margin_loss, X, Y, p=p, margin=0.7, reduction=reduction)
    check(F.multi_margin_loss, X, Y, p=p, weight=torch.rand(7, generator=_g(2)) + 0.1, reduction=reduction)
    check(F.multi_margin_loss, X[0], Y[0], p=p, reduction=reduction)  # one sample: a 0-d loss, as the CPU's


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    """Targets end at the first -1; repeated targets count twice, as on the CPU."""
    target = torch.tensor([[3, 0, -1, 1, 2, 2, 2], [1, 1, 2, -1, 0, 0, 0], [-1, 1, 2, 3, 4, 5, 6],
                           [6, 5, 4, 3, 2, 1, 0], [2, -1, 1, 1, 1, 5, 6]])  # fmt: skip
    check(F.multilabel_margin_loss, X, target, reduction=reduction)
    check(F.multilabel_margin_loss, X[0], target[0], reduction=reduction)


def test_modules_and_is_target():
    _, is_target = torch.ops.aten.multilabel_margin_loss_forward(X.to(DEV), torch.tensor([[2, 4, -1, 0, 0, 0, 0]] * 5,
                                                                 device=DEV), 1)  # fmt: skip
    ref = torch.ops.aten.multilabel_margin_loss_forward(X, torch.tensor([[2, 4, -1, 0, 0, 0, 0]] * 5), 1)[1]
    assert is_target.dtype == ref.dtype and torch.equal(is_target.cpu(), ref)
    loss = torch.nn.MultiMarginLoss()(X.to(DEV), Y.to(DEV))
    assert abs(loss.item() - torch.nn.MultiMarginLoss()(X.double(), Y).item()) <= TOL * loss.item()


def test_targets_out_of_range_raise_at_the_next_synchronization():
    """The CPU checks targets at once; on tt the gather that reads x[target] raises IndexOutOfRangeError, which the
    next synchronization reports (a CommandError naming the op), and the device stays usable."""
    with pytest.raises(CommandError, match="out of range"):
        F.multi_margin_loss(X.to(DEV), torch.tensor([0, 1, 2, 3, 9], device=DEV)).item()
    bad = torch.tensor([[2, -1, 1, 1, 1, 9, 6]] * 5, device=DEV)  # entries after the -1 are checked too
    with pytest.raises(CommandError, match="out of range"):
        F.multilabel_margin_loss(X.to(DEV), bad).item()
    assert F.multi_margin_loss(X.to(DEV), Y.to(DEV)).isfinite().item()
