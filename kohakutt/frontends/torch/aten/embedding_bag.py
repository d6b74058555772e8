"""``F.embedding_bag`` / ``nn.EmbeddingBag`` on ``tt``: ``_embedding_bag`` (a Core ATen op), its forward-only twin,
and the dense backward ops.

Compositions of tt ops (kind "composite"): the bag of each index comes from a scatter-add of the offsets and a
cumulative sum, the rows from an ``index_select``, and the reduction of each bag from ``index_add`` (sum, mean: fp32
adds in index order) or ``scatter_reduce`` (max: exact). The auxiliary outputs follow the CPU kernel, whose backward
reads them: ``offset2bag`` (each index's bag), ``bag_size`` (indices other than ``padding_idx`` per bag; zeros in
sum mode, as the CPU leaves them) and ``max_indices`` (max mode: the weight row each maximum came from, the first on
ties; empty otherwise). Sparse gradients are not supported on tt. ``scale_grad_by_freq`` divides each row's gradient
by its index's frequency in the batch, as documented (and as CUDA does; PyTorch 2.13's CPU backward divides some rows
by another index's count, pytorch/pytorch#190063).
"""

from __future__ import annotations

import torch
from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.frontends.torch.aten.registry import Args, composite, kernel

SUM, MEAN, MAX = 0, 1, 2


def _bags(indices: torch.Tensor, offsets: torch.Tensor, include_last_offset: bool) -> tuple[torch.Tensor, int]:
    """(the bag of each index (n,) int64, the number of bags)."""
    n = indices.numel()
    starts = offsets[:-1] if include_last_offset else offsets
    marks = torch.zeros(n + 1, dtype=torch.int64, device=indices.device)
    marks.index_add_(0, starts.to(torch.int64).clamp(0, n), torch.ones_like(starts, dtype=torch.int64))
    return torch.cumsum(marks[:n], 0) - 1, starts.numel()


def _kept(indices: torch.Tensor, padding_idx: int) -> torch.Tensor:
    keep = torch.ones_like(indices, dtype=torch.bool)
    return keep if padding_idx < 0 else indices != padding_idx


def _forward(a: Args, outs: list[torch.Tensor]) -> None:
    weight, indices, mode = a.weight, a.indices.reshape(-1), int(a.mode)
    out, offset2bag, bag_size, max_indices = outs
    bag, count = _bags(indices, a.offsets, bool(a.include_last_offset))
    if offset2bag.numel():
        offset2bag.copy_(bag)
    keep = _kept(indices, int(a.padding_idx))
    d = weight.shape[1]
    sizes = torch.zeros(count, dtype=torch.float32, device=weight.device)
    sizes.index_add_(0, bag, keep.to(torch.float32))
    bag_size.zero_()  # (include_last_offset: PyTorch's meta kernel gives it one entry more than there are bags)
    if mode != SUM:
        bag_size[:count].copy_(sizes)
    if count == 0:
        return
    rows = torch.index_select(weight, 0, indices.clamp(0, weight.shape[0] - 1)).to(torch.float32)
    if mode == MAX:
        masked = torch.where(keep.unsqueeze(1), rows, -torch.inf)
        spread = bag.unsqueeze(1).expand(-1, d)
        best = torch.full((count, d), -torch.inf, dtype=torch.float32, device=weight.device)
        best.scatter_reduce_(0, spread, masked, "amax")
        filled = sizes.unsqueeze(1) > 0
        out.copy_(torch.where(filled, best, 0.0))
        n = indices.numel()
        position = torch.arange(n, dtype=torch.int64, device=weight.device).unsqueeze(1).expand(-1, d)
        chosen = keep.unsqueeze(1) & (masked == best[bag])
        first = torch.full((count, d), n, dtype=torch.int64, device=weight.device)
        first.scatter_reduce_(0, spread, torch.where(chosen, position, n), "amin")
        row = indices[first.clamp_max(n - 1)]
        max_indices.copy_(torch.where(filled, row, 0))
        return
    if a.per_sample_weights is not None:
        rows = rows * a.per_sample_weights.reshape(-1, 1).to(torch.float32)
    total = torch.zeros((count, d), dtype=torch.float32, device=weight.device)
    total.index_add_(0, bag, torch.where(keep.unsqueeze(1), rows, 0.0))
    if mode == MEAN:
        total = total / sizes.clamp_min(1).unsqueeze(1)
    out.copy_(total)
    if max_indices.numel():
        max_indices.copy_(bag_size[: max_indices.numel()].reshape(max_indices.shape))


def _check(a: Args) -> None:
    mode = int(a.mode)
    if mode not in (SUM, MEAN, MAX):
        raise RuntimeError(f"embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max), got {mode}")
    if a.per_sample_weights is not None and mode != SUM:
        raise RuntimeError("embedding_bag: per_sample_weights was not None. per_sample_weights is only supported "
                           f"for mode='sum' (got mode={mode})")  # fmt: skip


def _embedding_bag(a: Args, outs: list[torch.Tensor]) -> None:
    _check(a)
    _forward(a, outs)


_IR = ("scatter_add", "cumsum", "index_select", "index_put", "scatter", "div", "where", "copy")
composite("_embedding_bag", "_embedding_bag.out", "_embedding_bag_forward_only", "_embedding_bag_forward_only.out",
          ir_ops=_IR)(_embedding_bag)  # fmt: skip


def _frequency_scale(indices: torch.Tensor, num_weights: int) -> torch.Tensor:
    """1 / (how often each index occurs), per index: scale_grad_by_freq."""
    counts = torch.zeros(num_weights, dtype=torch.float32, device=indices.device)
    counts.index_add_(0, indices, torch.ones_like(indices, dtype=torch.float32))
    return 1.0 / counts[indices]


def bag_gradient(grad: torch.Tensor, indices: torch.Tensor, offset2bag: torch.Tensor, bag_size: torch.Tensor,
                 maximum_indices: torch.Tensor, num_weights: int, scale_grad_by_freq: bool, mode: int,
                 per_sample_weights: torch.Tensor | None, padding_idx: int) -> torch.Tensor:  # fmt: skip
    """The weight's gradient: each bag's gradient added to the rows it read (scaled by the per-sample weight, by
    1 / bag size for mean, to the chosen row only for max)."""
    idx, d = indices.reshape(-1), grad.shape[1]
    result = torch.zeros((int(num_weights), d), dtype=torch.float32, device=grad.device)
    g = grad.to(torch.float32)
    if int(mode) == MAX:
        filled = (bag_size > 0).unsqueeze(1)
        flat = maximum_indices.to(torch.int64) * d + torch.arange(d, dtype=torch.int64, device=grad.device)
        result.view(-1).index_add_(0, flat.reshape(-1), torch.where(filled, g, 0.0).reshape(-1))
        return result.to(grad.dtype)
    per_index = g[offset2bag]
    if per_sample_weights is not None:
        per_index = per_index * per_sample_weights.reshape(-1, 1).to(torch.float32)
    if int(mode) == MEAN:
        per_index = per_index / bag_size.to(torch.float32).clamp_min(1)[offset2bag].unsqueeze(1)
    if scale_grad_by_freq:
        per_index = per_index * _frequency_scale(idx, int(num_weights)).unsqueeze(1)
    result.index_add_(0, idx, torch.where(_kept(idx, int(padding_idx)).unsqueeze(1), per_index, 0.0))
    return result.to(grad.dtype)


@kernel("_embedding_bag_backward", kind="composite", ir=_IR)
def embedding_bag_backward(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, offset2bag: torch.Tensor,
                           bag_size: torch.Tensor, maximum_indices: torch.Tensor, num_weights: int,
                           scale_grad_by_freq: bool, mode: int, sparse: bool,
                           per_sample_weights: torch.Tensor | None, padding_idx: int = -1) -> torch.Tensor:  # fmt: skip
    if sparse:
        raise KohakuTTUnsupportedOperator("embedding_bag: sparse gradients are not supported on tt; use sparse=False")
    return bag_gradient(grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
                        per_sample_weights, padding_idx)  # fmt: skip


@kernel("_embedding_bag_dense_backward", kind="composite", ir=_IR)
def embedding_bag_dense_backward(grad: torch.Tensor, indices: torch.Tensor, offset2bag: torch.Tensor,
                                 bag_size: torch.Tensor, maximum_indices: torch.Tensor, num_weights: int,
                                 scale_grad_by_freq: bool, mode: int, per_sample_weights: torch.Tensor | None,
                                 padding_idx: int = -1) -> torch.Tensor:  # fmt: skip
    return bag_gradient(grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
                        per_sample_weights, padding_idx)  # fmt: skip


@kernel("_embedding_bag_per_sample_weights_backward", kind="composite", ir=("index_select", "mul", "sum", "where"))
def embedding_bag_per_sample_weights_backward(grad: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                                              offsets: torch.Tensor, offset2bag: torch.Tensor, mode: int,
                                              padding_idx: int = -1) -> torch.Tensor:  # fmt: skip
    """The per-sample weights' gradient: each index's row dotted with its bag's gradient (0 for padding)."""
    if int(mode) != SUM:
        raise RuntimeError("embedding_bag: per_sample_weights is only supported for mode='sum'")
    idx = indices.reshape(-1)
    rows = torch.index_select(weight, 0, idx).to(torch.float32)
    dots = (rows * grad.to(torch.float32)[offset2bag]).sum(1)
    return torch.where(_kept(idx, int(padding_idx)), dots, 0.0).to(grad.dtype)
