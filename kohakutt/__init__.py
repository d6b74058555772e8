"""Kohaku-TT: a Tenstorrent Blackhole card as a native device for PyTorch (``tt``) and tinygrad (``"KTT"``).

Without a card the HAL runs a simulated P150A, so everything here works on any CPU.
"""

from __future__ import annotations

from kohakutt.errors import (
    BackendUnavailable,
    CommandError,
    ConfigError,
    DeviceError,
    DtypeError,
    FormatError,
    KohakuTTError,
    KohakuTTUnsupportedOperator,
    OutOfMemoryError,
    ProgramError,
    TraceError,
)
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
    "KohakuTTError",
    "KohakuTTUnsupportedOperator",
    "OutOfMemoryError",
    "ProgramError",
    "TraceError",
    "__version__",
    "numerics",
    "profile",
]
