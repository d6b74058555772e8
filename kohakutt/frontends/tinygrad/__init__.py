"""The tinygrad frontend: the card as the tinygrad device ``"KTT"``.

:func:`register` (run by ``import kohakutt.tinygrad``) makes ``Device["KTT"]`` resolve to :class:`KTTDevice` without
changing tinygrad on disk: the module is placed where tinygrad's device lookup imports ``ops_<name>`` from, the KTT
renderer's compile hook is installed and ``Tensor.rand`` learns to draw on the card. tinygrad has no registration
API for an out-of-tree device (``Device`` imports ``tinygrad.runtime.ops_<name>``), so the module is placed in
``sys.modules`` under that name; ``tests/frontends/tinygrad/test_library_hooks.py`` checks tinygrad still looks there.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kohakutt.frontends.tinygrad.counters import HostFallbackWarning, reset, stats
from kohakutt.frontends.tinygrad.interop import from_torch, to_torch
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.numerics import numerics as _numerics

DEVICE = "KTT"


def register() -> None:
    """Make ``"KTT"`` a tinygrad device (chip 0; ``"KTT:1"`` is chip 1). Idempotent."""
    import tinygrad.runtime
    from kohakutt.frontends.tinygrad import device, random, renderer

    renderer.install()
    random.install()
    name = "tinygrad.runtime.ops_ktt"
    if name not in sys.modules:
        sys.modules[name] = device
        tinygrad.runtime.ops_ktt = device  # type: ignore[attr-defined]


def fidelity_of(value: Fidelity | str | int) -> Fidelity:
    """A :class:`~kohakutt.Fidelity` from a member, a name or TT-Metal's ``MathFidelity`` number (0 LoFi, 2 HiFi2,
    3 HiFi3, 4 HiFi4), as ``kohakutt.numerics`` reads it; anything else raises ``ConfigError``."""
    return Fidelity.of(value)


_LEGACY_FP32_MATMUL = {"split": "highest", "card": "high"}  # the names this scope took before ALLOW_TF32


@contextmanager
def numerics(
    fidelity: Fidelity | str | int | None = None,
    fp32_acc: bool | None = None,
    approx: bool | None = None,
    fp32_matmul: str | None = None,
    fp32_reduce: str | None = None,
) -> Iterator[Numerics]:
    """Kernels run inside the block take these settings (matmul fidelity above all): ``fidelity`` as TT-NN numbers
    it (0 LoFi, 2 HiFi2, 3 HiFi3, 4 HiFi4) or by name; ``fp32_matmul`` how float32 matmuls run, over tinygrad's
    ``ALLOW_TF32``: ``"highest"`` (``ALLOW_TF32=0``, tinygrad's default: operands split into bf16 parts, six matmul
    passes, float32 accuracy; the fidelity does not apply to them), ``"high"`` (``ALLOW_TF32=1``: one matmul on
    TF32 operands, about 1e-3 relative) or ``"medium"`` (one HiFi2 pass); ``"split"`` and ``"card"`` are kept as
    names for "highest" and "high". ``fp32_reduce``: ``"exact"`` or ``"tf32"`` (see ``kohakutt.numerics``; KTT's own
    reductions are float32-exact either way). tinygrad is lazy, so the scope applies to the kernels realized inside it
    (``.item()``, ``.numpy()``, ``.realize()``); a TinyJit replay keeps the settings of its capture."""
    mode = _LEGACY_FP32_MATMUL.get(fp32_matmul, fp32_matmul) if isinstance(fp32_matmul, str) else fp32_matmul
    with _numerics(None if fidelity is None else fidelity_of(fidelity), fp32_acc, approx, mode, fp32_reduce) as num:
        yield num


def device_of(chip: int = 0) -> Any:
    """The ``tinygrad.Device`` entry of ``chip`` (opening it on first use)."""
    from tinygrad import Device

    register()
    return Device[DEVICE if chip == 0 else f"{DEVICE}:{chip}"]


__all__ = [
    "DEVICE", "HostFallbackWarning", "device_of", "fidelity_of", "from_torch", "numerics", "register", "reset", "stats",
    "to_torch",
]  # fmt: skip
