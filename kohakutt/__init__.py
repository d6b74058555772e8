"""Kohaku-TT: a Tenstorrent Blackhole card as a native device for PyTorch (``tt``) and tinygrad (``"KTT"``).

Without a card the HAL runs a simulated P150A, so everything here works on any CPU.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kohakutt.errors import (
    BackendUnavailable,
    CommandError,
    ConfigError,
    DeviceError,
    DtypeError,
    FormatError,
    IntegerOverflowError,
    KohakuTTError,
    KohakuTTUnsupportedOperator,
    OutOfMemoryError,
    ProgramError,
    TraceError,
)

if TYPE_CHECKING:
    import torch

    from kohakutt.frontends.torch.capture import Replay
    from kohakutt.hal import profile
    from kohakutt.ir.numerics import Fidelity, numerics
    from kohakutt.mesh import Placement, PlacementRecord

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailable",
    "CommandError",
    "ConfigError",
    "DeviceError",
    "DtypeError",
    "Fidelity",
    "FormatError",
    "IntegerOverflowError",
    "KohakuTTError",
    "KohakuTTUnsupportedOperator",
    "OutOfMemoryError",
    "ProgramError",
    "TraceError",
    "__version__",
    "capture",
    "colwise",
    "cpu_fallback",
    "device",
    "mesh",
    "numerics",
    "place",
    "placement",
    "placement_log",
    "profile",
    "record_placements",
    "replicate",
    "rowwise",
    "shard",
]


def __getattr__(name: str) -> Any:
    # loaded on first use: `import kohakutt` stays cheap (torch's autoload imports this package at `import torch`)
    if name == "profile":
        from kohakutt.hal import profile

        return profile
    if name in ("Fidelity", "numerics"):
        import importlib

        return getattr(importlib.import_module("kohakutt.ir.numerics"), name)
    if name == "mesh":  # the callable package: kohakutt.mesh([0, 1]) opens the chips as one torch device
        import importlib

        return importlib.import_module("kohakutt.mesh")
    raise AttributeError(f"module 'kohakutt' has no attribute {name!r}")


def device(index: int = 0) -> torch.device:
    """Chip ``index`` as a torch device ``tt:<index>``; the first call makes ``tt`` a torch device."""
    from kohakutt.frontends.torch import device as _device

    return _device(index)


def capture(fn: Callable[..., Any], *args: Any, warmup: int = 3, **kwargs: Any) -> Replay:
    """Record ``fn(*args, **kwargs)`` on the card once (after ``warmup`` eager calls) and return a replay that queues
    the whole step as one device command (:class:`kohakutt.frontends.torch.capture.Replay`)."""
    from kohakutt.frontends.torch.capture import capture as _capture

    return _capture(fn, *args, warmup=warmup, **kwargs)


def cpu_fallback(enabled: bool | None = True) -> None:
    """Let aten ops without a tt kernel run on the CPU (counted, warned once per op); ``None`` follows
    ``KTT_CPU_FALLBACK``."""
    from kohakutt.frontends.torch import cpu_fallback as _cpu_fallback
    from kohakutt.frontends.torch import install

    install()
    _cpu_fallback(enabled)


# ---------------------------------------------------------------------------------------------------- the mesh
def replicate(module: torch.nn.Module) -> torch.nn.Module:
    """Mark ``module``'s own tensors replicated on the mesh (a copy on each chip); returns ``module``."""
    from kohakutt.frontends.torch import mesh as _m

    return _m.mark(module, {"*": "R"})


def colwise(module: torch.nn.Module) -> torch.nn.Module:
    """Mark a Linear (Embedding, convolution) column-wise: its output features split over the chips (weight and
    bias sharded on dim 0; an embedding's feature dim); returns ``module``."""
    from kohakutt.frontends.torch import mesh as _m

    return _m.colwise(module)


def rowwise(module: torch.nn.Module) -> torch.nn.Module:
    """Mark a Linear (Embedding, convolution) row-wise: its input features split (weight sharded on dim 1, bias
    replicated and added once; an embedding's rows); returns ``module``."""
    from kohakutt.frontends.torch import mesh as _m

    return _m.rowwise(module)


def shard(module: torch.nn.Module, dim: int) -> torch.nn.Module:
    """Mark every tensor of ``module``'s own sharded on ``dim``; returns ``module``."""
    from kohakutt.frontends.torch import mesh as _m

    return _m.mark(module, {"*": f"S({int(dim)})"})


def place(module: torch.nn.Module, **placements: Placement | str) -> torch.nn.Module:
    """Mark ``module``'s own tensors one by one: ``place(m, weight="S(1)", bias="R")``; returns ``module``."""
    from kohakutt.frontends.torch import mesh as _m

    return _m.mark(module, placements)


def placement(t: torch.Tensor) -> Placement:
    """A mesh tensor's placement: ``Replicate``, ``Sharded(dim=d)``, ``Partial(sum)`` (printable as such)."""
    from kohakutt.frontends.torch import mesh as _m

    return _m.placement(t)


def record_placements(clear: bool = True) -> Any:
    """A context manager recording every mesh op in the block (see :func:`placement_log`)."""
    from kohakutt.mesh.log import record_placements as _rec

    return _rec(clear)


def placement_log() -> list[PlacementRecord]:
    """The mesh ops of the last :func:`record_placements` block: op, inputs, output, conversions, reason."""
    from kohakutt.mesh.log import placement_log as _log

    return _log()


if "torch" in sys.modules:  # torch is loaded: make tt a torch device now (cheap), as torch's autoload would
    from kohakutt.frontends.torch import autoload as _autoload

    _autoload()
