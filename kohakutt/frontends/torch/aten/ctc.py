"""The connectionist temporal classification loss on ``tt``: ``_ctc_loss`` and ``_ctc_loss_backward``.

Both are compositions of tt ops (kind "composite"): the forward (alpha) and backward (beta) recursions of the CTC
dynamic programme run one time step at a time on the card, every sequence of the batch and every position of its
blank-extended target at once; log-sum-exps are element-wise (max, exp, add, log: fp32 on the SFPU), so nothing goes
through the reduce unit and the log-likelihoods keep fp32 accuracy (a few roundings per step). Sequence lengths are
read on the host (as CUDA's kernel does) to check them and to size the work; the values never leave the card.

Conventions are PyTorch's: ``targets`` is (N, S) padded or 1-D concatenated; the loss is the negative
log-likelihood per sequence (``inf`` when no alignment exists, 0 with ``zero_infinity``); ``log_alpha`` holds the
forward variables for t < input_length and s <= 2 * target_length (-inf elsewhere, where the CPU leaves memory
unset); the gradient is PyTorch's, taken as if ``log_probs`` came from a log-softmax.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from kohakutt.frontends.torch.aten.registry import Args, composite, kernel

NEG = -math.inf
_IR = ("gather", "maximum", "sub", "exp", "add", "log", "where", "copy")


def _lengths(x: Any) -> list[int]:
    return [int(v) for v in (x.tolist() if isinstance(x, torch.Tensor) else x)]


def _lse(*xs: torch.Tensor) -> torch.Tensor:
    """log(sum(exp(x))) element-wise over the arguments, -inf where all are -inf."""
    m = xs[0]
    for x in xs[1:]:
        m = torch.maximum(m, x)
    safe = torch.where(torch.isinf(m), 0.0, m)
    total = torch.exp(xs[0] - safe)
    for x in xs[1:]:
        total = total + torch.exp(x - safe)
    return safe + torch.log(total)


def _shift(x: torch.Tensor, by: int) -> torch.Tensor:
    """x (float) moved ``by`` positions along its last dim (right for by > 0), -inf shifted in."""
    if abs(by) >= x.shape[-1]:
        return torch.full_like(x, NEG)
    if by > 0:
        return torch.constant_pad_nd(x[..., :-by], [by, 0], NEG)
    return torch.constant_pad_nd(x[..., -by:], [0, -by], NEG)


class _Problem:
    """One batch of CTC problems: the blank-extended targets and the masks the recursions need, on the card."""

    def __init__(self, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any, target_lengths: Any,
                 blank: int, width: int) -> None:  # fmt: skip
        t_max, n, c = log_probs.shape
        self.ins, self.tgs = _lengths(input_lengths), _lengths(target_lengths)
        if len(self.ins) != n or len(self.tgs) != n:
            raise RuntimeError(f"ctc_loss: expected {n} input and target lengths, got {len(self.ins)} and "
                               f"{len(self.tgs)}")  # fmt: skip
        if not 0 <= blank < c:
            raise RuntimeError(f"ctc_loss: blank must be in label range [0, {c}), got {blank}")
        for i, (ti, tl) in enumerate(zip(self.ins, self.tgs)):
            if not 0 <= ti <= t_max:
                raise RuntimeError(f"ctc_loss: input_lengths[{i}] = {ti} is outside [0, {t_max}]")
            if tl < 0 or 2 * tl + 1 > width:
                raise RuntimeError(f"ctc_loss: target_lengths[{i}] = {tl} does not fit the targets")
        dev = log_probs.device
        self.t_max, self.n, self.c, self.width, self.blank = t_max, n, c, width, blank
        s_max = (width - 1) // 2
        pos = torch.arange(max(s_max, 1), dtype=torch.int64, device=dev)
        if targets.dim() == 1:  # concatenated: sequence i starts at the sum of the lengths before it
            starts = torch.tensor([sum(self.tgs[:i]) for i in range(n)], dtype=torch.int64, device=dev)
            flat = (starts.unsqueeze(1) + pos).clamp(0, max(targets.numel() - 1, 0))
            padded = targets[flat] if targets.numel() else torch.zeros_like(flat)
        else:
            padded = targets[:, : max(s_max, 1)] if targets.shape[1] else torch.zeros((n, 1), dtype=torch.int64,
                                                                                      device=dev)  # fmt: skip
        padded = padded.to(torch.int64).clamp(0, c - 1)
        s = torch.arange(width, dtype=torch.int64, device=dev)
        label = padded[:, ((s - 1) // 2).clamp(0, max(s_max - 1, 0))]
        self.ext = torch.where(s % 2 == 1, label, blank)  # (N, W): blank, l1, blank, l2, ...
        prev = _shift(self.ext.to(torch.float32), 2)
        self.skip = (s % 2 == 1) & (s >= 3) & (self.ext.to(torch.float32) != prev)  # s - 2 -> s allowed
        self.tg = torch.tensor(self.tgs, dtype=torch.int64, device=dev)
        self.inlen = torch.tensor(self.ins, dtype=torch.int64, device=dev)
        self.valid = s < (2 * self.tg + 1).unsqueeze(1)  # (N, W)
        # log-probabilities of each extended label at each step: (T, N, W)
        self.lp = torch.gather(log_probs.to(torch.float32), 2, self.ext.unsqueeze(0).expand(t_max, n, width))

    def ends(self) -> torch.Tensor:
        """(N, W) bool: the positions an alignment may end in (2L, and 2L - 1 when L > 0)."""
        s = torch.arange(self.width, dtype=torch.int64, device=self.ext.device)
        last = (2 * self.tg).unsqueeze(1)
        return (s == last) | ((s == last - 1) & (self.tg > 0).unsqueeze(1))

    def alpha(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(negative log-likelihood (N,), log_alpha (N, T, W)), fp32."""
        s = torch.arange(self.width, dtype=torch.int64, device=self.ext.device)
        start = (s == 0) | ((s == 1) & (self.tg > 0).unsqueeze(1))
        alpha = torch.where(start & self.valid, self.lp[0], NEG)
        rows = [torch.where((self.inlen > 0).unsqueeze(1), alpha, NEG)]
        for t in range(1, self.t_max):
            step = _lse(alpha, _shift(alpha, 1), torch.where(self.skip, _shift(alpha, 2), NEG)) + self.lp[t]
            step = torch.where(self.valid, step, NEG)
            active = (self.inlen > t).unsqueeze(1)
            rows.append(torch.where(active, step, NEG))
            alpha = torch.where(active, step, alpha)
        log_alpha = torch.stack(rows, dim=1) if self.t_max else torch.full((self.n, 0, self.width), NEG)
        last = (2 * self.tg).unsqueeze(1)
        blank_end = alpha.gather(1, last)
        label_end = torch.where((self.tg > 0).unsqueeze(1), alpha.gather(1, (last - 1).clamp_min(0)), NEG)
        nll = -_lse(blank_end, label_end).squeeze(1)
        # no frames at all: only an empty target aligns (probability 1)
        nll = torch.where(self.inlen == 0, torch.where(self.tg == 0, 0.0, math.inf), nll)
        return nll, log_alpha

    def beta(self) -> torch.Tensor:
        """log_beta (T, N, W), fp32: the probability of the rest of the alignment from (t, s), emission at t
        included."""
        ends = self.ends()
        after_skip = _shift(self.skip.to(torch.float32), -2) > 0  # s -> s + 2 allowed
        beta = torch.full((self.n, self.width), NEG, dtype=torch.float32, device=self.ext.device)
        rows: list[torch.Tensor] = []
        for t in range(self.t_max - 1, -1, -1):
            step = _lse(beta, _shift(beta, -1), torch.where(after_skip, _shift(beta, -2), NEG)) + self.lp[t]
            first = torch.where(ends, self.lp[t], NEG)
            last = (self.inlen - 1 == t).unsqueeze(1)
            inside = (self.inlen - 1 > t).unsqueeze(1)
            beta = torch.where(last, first, torch.where(inside, torch.where(self.valid, step, NEG), NEG))
            rows.append(beta)
        rows.reverse()
        return torch.stack(rows, dim=0)


def _ctc_forward(a: Args, outs: list[torch.Tensor]) -> None:
    problem = _Problem(a.log_probs, a.targets, a.input_lengths, a.target_lengths, int(a.blank), outs[1].shape[-1])
    nll, log_alpha = problem.alpha()
    if a.zero_infinity:
        nll = torch.where(torch.isinf(nll), 0.0, nll)
    outs[0].copy_(nll.reshape(outs[0].shape))
    outs[1].copy_(log_alpha.reshape(outs[1].shape))


composite("_ctc_loss", "_ctc_loss.Tensor", "_ctc_loss.out", "_ctc_loss.Tensor_out", ir_ops=_IR)(_ctc_forward)


def ctc_gradient(
    grad: torch.Tensor,
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: Any,
    target_lengths: Any,
    neg_log_likelihood: torch.Tensor,
    log_alpha: torch.Tensor,
    blank: int,
    zero_infinity: bool = False,
) -> torch.Tensor:
    """d nll / d log_probs as PyTorch defines it: exp(lp) - sum over the extended positions s carrying class c of
    exp(log_alpha + log_beta + nll - lp), times the loss's gradient; 0 past each input length (and for infinite
    losses under zero_infinity). fp32, shaped as log_probs."""
    problem = _Problem(log_probs, targets, input_lengths, target_lengths, int(blank), log_alpha.shape[-1])
    log_beta = problem.beta()  # (T, N, W)
    nll = neg_log_likelihood.to(torch.float32)
    occupancy = log_alpha.to(torch.float32).permute(1, 0, 2) + log_beta + nll.view(1, -1, 1) - problem.lp
    t_max, n, c = log_probs.shape
    index = problem.ext.unsqueeze(0).expand(t_max, n, problem.width)
    share = torch.zeros((t_max, n, c), dtype=torch.float32, device=log_probs.device)
    share.scatter_add_(2, index, torch.exp(occupancy))
    g = (torch.exp(log_probs.to(torch.float32)) - share) * grad.to(torch.float32).view(1, -1, 1)
    t = torch.arange(t_max, dtype=torch.int64, device=log_probs.device).view(-1, 1, 1)
    keep = t < problem.inlen.view(1, -1, 1)
    if zero_infinity:
        keep = keep & ~torch.isinf(nll).view(1, -1, 1)
    return torch.where(keep, g, 0.0)


@kernel("_ctc_loss_backward", "_ctc_loss_backward.Tensor", kind="composite", ir=(*_IR, "scatter_add"))
def ctc_loss_backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: Any,
                      target_lengths: Any, neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor, blank: int,
                      zero_infinity: bool = False) -> torch.Tensor:  # fmt: skip
    g = ctc_gradient(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
                     zero_infinity)  # fmt: skip
    return g.to(log_probs.dtype)
