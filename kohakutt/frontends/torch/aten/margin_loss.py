"""Multi-class margin losses on ``tt``: ``multi_margin_loss`` and ``multilabel_margin_loss`` with their backward.

Compositions of tt ops, following the CPU kernels' definitions term for term:

- ``multi_margin_loss``: per sample, the sum over classes j != y of ``max(0, margin - x[y] + x[j])^p`` (times
  ``weight[y]``), divided by the number of classes; its gradient is ``p z^(p-1)`` (times ``weight[y]``) at each class
  with a positive term, their negated sum at ``y``, scaled by 1 / C (and 1 / N for the mean).
- ``multilabel_margin_loss``: the targets of a sample are its leading entries up to the first negative one; per
  sample, the sum over (target j, non-target k) pairs of ``max(0, 1 - x[j] + x[k])`` divided by C. ``is_target``
  marks the target classes (in the input's dtype, as the CPU returns it); the pairwise terms are one broadcast of
  (N, C, C) values.

bfloat16 inputs compute in fp32 and round once into the result. The per-sample sums are the card's ``sum`` (their
terms are all non-negative, so its operand rounding stays relative to the result). A target index outside
[0, C) raises ``IndexOutOfRangeError`` at the next synchronization (the CPU raises at once).
"""

from __future__ import annotations

from typing import Any

import torch
from kohakutt.frontends.torch.aten.registry import Args, composite, kernel

_F32 = torch.float32
_MEAN, _SUM = 1, 2
_IR = ("gather", "sub", "add", "mul", "gt", "where", "eq", "sum", "div", "scatter", "cumsum")


def _frames(x: torch.Tensor) -> torch.Tensor:
    return x.to(_F32).reshape(-1, x.shape[-1] if x.dim() else 1)


def _reduce(per: torch.Tensor, reduction: int, out: torch.Tensor, x: torch.Tensor) -> None:
    if reduction not in (_MEAN, _SUM) and x.dim() <= 1 and out.dim():
        out.resize_(())  # the CPU's 0-d loss of one sample (PyTorch's meta kernels say (1,))
    if reduction == _MEAN:
        out.copy_(per.mean())
    elif reduction == _SUM:
        out.copy_(per.sum())
    else:
        out.copy_(per.reshape(out.shape))


# ------------------------------------------------------------------------------------------------ multi_margin_loss
def _multi_margin_terms(x: torch.Tensor, target: torch.Tensor, margin: float, weight: torch.Tensor | None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(z = margin - x[y] + x[j], the mask of positive terms j != y, the per-sample weight (N, 1), y (N, 1))."""
    x2 = _frames(x)
    y = target.reshape(-1, 1).to(torch.int64)
    z = margin - x2.gather(1, y) + x2
    cls = torch.arange(x2.shape[1], device=x.device)
    live = (z > 0) & (cls != y)
    w = weight.to(_F32)[y.reshape(-1)].unsqueeze(1) if weight is not None else torch.ones_like(z[:, :1])
    return z, live, w, y


@composite("multi_margin_loss", "multi_margin_loss.out", ir_ops=_IR)
def _multi_margin_loss(a: Args, outs: list[torch.Tensor]) -> None:
    x = a.self
    if x.numel() == 0:
        if outs[0].numel():
            outs[0].fill_(float("nan") if a.reduction == _MEAN else 0.0)
        return
    p = int(a.p)
    z, live, w, _ = _multi_margin_terms(x, a.target, float(a.margin), a.weight)
    h = torch.where(live, (z if p == 1 else z * z) * w, 0.0)
    _reduce(h.sum(1) / z.shape[1], a.reduction, outs[0], x)


def _multi_margin_backward(grad_output: torch.Tensor, x: torch.Tensor, target: torch.Tensor, p: Any, margin: Any,
                           weight: torch.Tensor | None, reduction: int, out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    if x.numel() == 0:
        return out
    z, live, w, y = _multi_margin_terms(x, target, float(margin), weight)
    n, c = z.shape
    g = 1.0 / (n * c) if reduction == _MEAN else 1.0 / c
    h = torch.where(live, (g if int(p) == 1 else 2 * g * z) * w, 0.0)
    grad = h.scatter_add(1, y, -h.sum(1, keepdim=True))
    go = grad_output.to(_F32)
    grad = grad * (go.reshape(-1, 1) if reduction not in (_MEAN, _SUM) else go)
    return out.copy_(grad.reshape(x.shape))


_MM_BACKWARD_IR = (*_IR, "scatter_add")


@kernel("multi_margin_loss_backward", kind="composite", ir=_MM_BACKWARD_IR)
def multi_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, p: Any,
                               margin: Any, weight: torch.Tensor | None = None, reduction: int = _MEAN
                               ) -> torch.Tensor:  # fmt: skip
    out = torch.empty_like(self, memory_format=torch.contiguous_format)
    return _multi_margin_backward(grad_output, self, target, p, margin, weight, reduction, out)


@kernel("multi_margin_loss_backward.grad_input", kind="composite", ir=_MM_BACKWARD_IR)
def multi_margin_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, p: Any,
                                   margin: Any, weight: torch.Tensor | None = None, reduction: int = _MEAN, *,
                                   grad_input: torch.Tensor) -> torch.Tensor:  # fmt: skip
    grad_input.resize_(self.shape)
    return _multi_margin_backward(grad_output, self, target, p, margin, weight, reduction, grad_input)


# ------------------------------------------------------------------------------------------- multilabel_margin_loss
def _multilabel_terms(x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                      torch.Tensor]:  # fmt: skip
    """(the mask of positive pair terms (N, Cj, Ck), their values z = 1 - x[t_j] + x[k], is_target (N, C) bool,
    the target classes (N, C) with the entries past the first negative one set to 0)."""
    x2 = _frames(x)
    t = target.reshape(x2.shape).to(torch.int64)
    seen = (t < 0).to(torch.int32).cumsum(1)
    valid = seen == 0  # the entries before the first negative one
    # every entry must be in [-1, C), as the CPU checks: one that is not is sent out of range, for gather to raise
    cls = torch.where(valid, t, torch.where((t < -1) | (t >= x2.shape[1]), x2.shape[1], 0))
    is_target = torch.zeros_like(x2).scatter_add(1, cls, valid.to(_F32)) > 0
    z = 1 - x2.gather(1, cls).unsqueeze(2) + x2.unsqueeze(1)
    live = valid.unsqueeze(2) & ~is_target.unsqueeze(1) & (z > 0)
    return live, z, is_target, cls


@composite("multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output", ir_ops=_IR)
def _multilabel_margin_loss_forward(a: Args, outs: list[torch.Tensor]) -> None:
    x, out, is_target_out = a.self, outs[0], outs[1]
    if x.numel() == 0:
        is_target_out.zero_()
        if out.numel():
            out.fill_(float("nan") if a.reduction == _MEAN else 0.0)
        return
    live, z, is_target, _ = _multilabel_terms(x, a.target)
    per = torch.where(live, z, 0.0).sum((1, 2)) / z.shape[-1]
    is_target_out.copy_(is_target.reshape(is_target_out.shape))
    _reduce(per, a.reduction, out, x)


def _multilabel_backward(grad_output: torch.Tensor, x: torch.Tensor, target: torch.Tensor, reduction: int,
                         out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    if x.numel() == 0:
        return out
    live, z, _, cls = _multilabel_terms(x, target)
    n, c = z.shape[0], z.shape[-1]
    g = 1.0 / (n * c) if reduction == _MEAN else 1.0 / c
    pairs = live.to(_F32)
    grad = pairs.sum(1).scatter_add(1, cls, -pairs.sum(2)) * g  # +g at each non-target k, -g at each target j
    go = grad_output.to(_F32)
    grad = grad * (go.reshape(-1, 1) if reduction not in (_MEAN, _SUM) else go)
    return out.copy_(grad.reshape(x.shape))


@kernel("multilabel_margin_loss_backward", kind="composite", ir=_MM_BACKWARD_IR)
def multilabel_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                    reduction: int, is_target: torch.Tensor) -> torch.Tensor:  # fmt: skip
    out = torch.empty_like(self, memory_format=torch.contiguous_format)
    return _multilabel_backward(grad_output, self, target, reduction, out)


@kernel("multilabel_margin_loss_backward.grad_input", kind="composite", ir=_MM_BACKWARD_IR)
def multilabel_margin_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                        reduction: int, is_target: torch.Tensor, *,
                                        grad_input: torch.Tensor) -> torch.Tensor:  # fmt: skip
    grad_input.resize_(self.shape)
    return _multilabel_backward(grad_output, self, target, reduction, grad_input)
