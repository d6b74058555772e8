"""Random numbers on KTT: ``Tensor.rand`` (and so ``randn``, ``uniform``, ``dropout``...) drawn on the card.

tinygrad draws random bits with Threefry on uint64, which a Tensix core cannot compute. For a KTT tensor,
:func:`install` routes ``Tensor.rand`` to a one-node kernel (``ktt_uniform``) that runs the op library's ``uniform``
op: Philox4x32 on 32-bit words, keyed by the device seed. ``Tensor.manual_seed(s)`` restarts that stream at ``s``
(noticed at the next KTT draw), and each draw is realized when it is made, so a draw's numbers depend on its place
in the program, not on when tinygrad realizes it. Under TinyJit a draw is a call of its own (never batched into a
trace), so every replay draws new numbers. ``KTT_TINYGRAD_RAND=host`` leaves ``Tensor.rand`` alone: tinygrad's own
Threefry stream, computed on the host (its uint64 kernels take the host path).

A patch of the one name ``Tensor.rand`` because tinygrad has no hook for a device's generator (the counter and the
Threefry draw are private methods of ``Tensor``); every random function reaches it. ``tests/frontends/tinygrad/
test_library_hooks.py`` fails when tinygrad changes under it.
"""

from __future__ import annotations

from typing import Any

from kohakutt import config
from kohakutt import kernels as kk
from tinygrad import Tensor, dtypes
from tinygrad.device import canonicalize_device
from tinygrad.dtype import to_dtype
from tinygrad.helpers import all_int, argfix
from tinygrad.uop.ops import KernelInfo, UOp

_CARD_FLOATS = (dtypes.float32, dtypes.bfloat16)  # other float dtypes draw tinygrad's way (on the host)
_original_rand: Any = None
_seen: tuple[Any, int] | None = None  # (Tensor._device_seeds dict, Tensor._seed) when the KTT stream was last keyed


def _kernel(out: UOp) -> UOp:
    flat = out.flatten()
    i = UOp.range(flat.shape[0], 0)
    return flat[i].store(flat.const_like(0)).end(i).sink(arg=KernelInfo(name=f"ktt_uniform_{flat.shape[0]}"))


def _is_ktt(device: Any) -> bool:
    return isinstance(device, str) and device.split(":")[0] == "KTT"


def _reseed_if_needed(device: str) -> None:
    """Key the chip's stream with ``Tensor._seed`` after a ``Tensor.manual_seed`` (a new seeds dict)."""
    global _seen
    if _seen is None or _seen[0] is not Tensor._device_seeds or _seen[1] != Tensor._seed:
        from tinygrad.device import Device

        kk.manual_seed(Device[device].hal, int(Tensor._seed))  # type: ignore[attr-defined]
        _seen = (Tensor._device_seeds, Tensor._seed)


def _rand(
    cls: type[Tensor], *shape: Any, device: str | None = None, dtype: Any = None, contiguous: bool = True, **kwargs: Any
) -> Tensor:
    dev = canonicalize_device(device)
    dt = to_dtype(dtype or dtypes.default_float)
    if not _is_ktt(dev) or config.get("KTT_TINYGRAD_RAND") == "host" or kwargs or dt not in _CARD_FLOATS:
        return _original_rand.__func__(cls, *shape, device=device, dtype=dtype, contiguous=contiguous, **kwargs)
    shape = argfix(*shape)
    if not all_int(shape) or not all(s >= 0 for s in shape):
        raise ValueError(f"invalid input {shape=}")
    out = Tensor.empty(*shape, device=dev, dtype=dt)
    if out.numel() == 0:
        return out
    _reseed_if_needed(dev)
    return Tensor.custom_kernel(out, fxn=_kernel)[0].realize()


def install() -> None:
    """Route ``Tensor.rand`` on KTT to the card's generator (idempotent)."""
    global _original_rand
    if _original_rand is None:
        _original_rand = Tensor.__dict__.get("rand") or classmethod(Tensor.rand.__func__)
        Tensor.rand = classmethod(_rand)  # type: ignore[method-assign, assignment]
