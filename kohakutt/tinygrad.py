"""``import kohakutt.tinygrad`` registers the card (chip 0) as the tinygrad device ``"KTT"``.

The user's code is plain tinygrad: ``Tensor(..., device="KTT")``, ``.to("KTT")``, ``DEV=KTT``. See
``docs/tinygrad.md``; the implementation lives in :mod:`kohakutt.frontends.tinygrad`.
"""

from __future__ import annotations

from kohakutt.frontends.tinygrad import (
    DEVICE,
    HostFallbackWarning,
    device_of,
    fidelity_of,
    from_torch,
    numerics,
    register,
    reset,
    stats,
    to_torch,
)

register()

__all__ = [
    "DEVICE", "HostFallbackWarning", "device_of", "fidelity_of", "from_torch", "numerics", "register", "reset", "stats",
    "to_torch",
]  # fmt: skip
