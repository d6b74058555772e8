"""The aten kernels of the tt device, one module per family."""

from __future__ import annotations

import importlib

from kohakutt.frontends.torch.aten.registry import KERNELS, AtenKernel

FAMILIES = (
    "core",
    "pointwise",
    "reduce",
    "linalg",
    "nn",
    "movement",
    "creation",
    "random",
    "optim",
    "sampling",
    "ctc",
    "embedding_bag",
    "upsample",
    "linalg_decomp",
    "search",
    "counting",
    "margin_loss",
    "rnn",
    "linalg_spectral",
)


def all_kernels() -> dict[str, AtenKernel]:
    """Every registered aten kernel by overload name (imports the family modules)."""
    for f in FAMILIES:
        importlib.import_module(f"kohakutt.frontends.torch.aten.{f}")
    return KERNELS
