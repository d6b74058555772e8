"""Checks the torch-frontend tests share: seeded CPU generators and an element-wise error bound against a reference."""

from __future__ import annotations

import torch


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def within(actual: torch.Tensor, ref: torch.Tensor, bound, what: str, *, nan_equal: bool = False) -> None:
    """|actual - ref| <= bound element-wise (``bound`` a number or a tensor broadcast to the result), compared in
    float64 on the CPU; ``nan_equal``: equal values and NaN against NaN count as exact (inf included)."""
    actual, ref = actual.detach().cpu().double(), ref.detach().double()
    assert actual.shape == ref.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    err = (actual - ref).abs()
    if nan_equal:
        err = torch.where((actual == ref) | (actual.isnan() & ref.isnan()), 0.0, err)
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(err)
    worst = int(torch.argmax((err - bound).reshape(-1))) if err.numel() else 0
    assert bool((err <= bound).all()), (
        f"{what}: error {err.reshape(-1)[worst]:.3g} > bound {bound.reshape(-1)[worst]:.3g} at {worst}"
    )
