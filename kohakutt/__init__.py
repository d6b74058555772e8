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
    "cpu_fallback",
    "device",
    "numerics",
    "profile",
]


def __getattr__(name: str) -> Any:
    # loaded on first use: `import kohakutt` stays cheap (torch's autoload imports this package at `import torch`)
    if name == "profile":
        from kohakutt.hal import profile

        return profile
    if name in ("Fidelity", "numerics"):
        import importlib

        return getattr(importlib.import_module("kohakutt.ir.numerics"), name)
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


if "torch" in sys.modules:  # torch is loaded: make tt a torch device now (cheap), as torch's autoload would
    from kohakutt.frontends.torch import autoload as _autoload

    _autoload()
