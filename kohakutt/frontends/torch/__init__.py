"""The PyTorch frontend: the card as the torch device ``tt``.

:func:`install` (called by :func:`kohakutt.device`) renames PrivateUse1 to ``tt``, loads the C++ glue (allocator,
device guard, hooks), registers ``torch.tt`` and the aten kernels, and a fallback for every other op that either
raises :class:`~kohakutt.errors.KohakuTTUnsupportedOperator` or, when asked, runs the op on the CPU.
"""

from __future__ import annotations

import atexit
import threading
import types
import warnings
from collections import Counter
from typing import Any

import torch
from kohakutt import config
from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.frontends.torch import module as tt_module
from kohakutt.frontends.torch import runtime

_installed = False
_lock = threading.Lock()
_libs: list[torch.library.Library] = []
_fallback_enabled: bool | None = None  # None: follow KTT_CPU_FALLBACK
fallback_counts: Counter[str] = Counter()


def cpu_fallback(enabled: bool | None = True) -> None:
    """Let ops without a tt kernel run on the CPU (counted, warned once per op); ``None`` follows the knob."""
    global _fallback_enabled
    _fallback_enabled = enabled


def fallback_enabled() -> bool:
    return bool(config.get("KTT_CPU_FALLBACK")) if _fallback_enabled is None else _fallback_enabled


def _to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.device.type == "tt":
        return x.cpu()
    if isinstance(x, list | tuple):
        return type(x)(_to_cpu(y) for y in x)
    return x


def _to_tt(x: Any, index: int) -> Any:
    if isinstance(x, torch.Tensor) and x.device.type == "cpu":
        return x.to(torch.device("tt", index))
    if isinstance(x, list | tuple):
        return type(x)(_to_tt(y, index) for y in x)
    return x


def _fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    name = f"{op._schema.name.split('::')[-1]}{'.' + op._overloadname if op._overloadname != 'default' else ''}"
    if not fallback_enabled():
        raise KohakuTTUnsupportedOperator(
            f"aten::{name} has no tt kernel yet. Run it on the CPU with kohakutt.cpu_fallback(True) or "
            "KTT_CPU_FALLBACK=1 (counted and warned once per op), or move its inputs to the CPU yourself"
        )
    fallback_counts[name] += 1
    if fallback_counts[name] == 1:
        warnings.warn(f"aten::{name} has no tt kernel: running it on the CPU (kohakutt.cpu_fallback)", stacklevel=2)
    index = 0
    for x in [*args, *kwargs.values()]:
        if isinstance(x, torch.Tensor) and x.device.type == "tt":
            index = x.device.index or 0
            break
    cargs, ckw = _to_cpu(args), {k: _to_cpu(v) for k, v in kwargs.items()}
    result = op(*cargs, **ckw)
    # write back every argument the op mutates
    written = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    names = [a.name for a in op._schema.arguments]
    bound = dict(zip(names, args)) | kwargs
    cbound = dict(zip(names, cargs)) | ckw
    for w in written:
        dst, src = bound.get(w), cbound.get(w)
        if isinstance(dst, torch.Tensor) and dst.device.type == "tt":
            if dst.shape != src.shape:
                dst.resize_(src.shape)
            dst.copy_(src)
    if written and len(op._schema.returns) == 1 and op._schema.returns[0].alias_info is not None:
        return bound[written[0]]
    if written and all(r.alias_info is not None for r in op._schema.returns):
        return tuple(bound[w] for w in written)
    return _to_tt(result, index)


def install() -> None:
    """Make ``tt`` a torch device. Idempotent; the first call builds the C++ glue if needed (~5 s, once)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        runtime.install()
        if torch._C._get_privateuse1_backend_name() != "tt":
            torch.utils.rename_privateuse1_backend("tt")
        mod = types.ModuleType("torch.tt")
        for k in dir(tt_module):
            if not k.startswith("__"):
                setattr(mod, k, getattr(tt_module, k))
        torch._register_device_module("tt", mod)
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
        _register_kernels()
        atexit.register(_shutdown)
        _installed = True


def _register_kernels() -> None:
    from kohakutt.frontends.torch.aten import all_kernels

    lib = torch.library.Library("aten", "IMPL")
    for name, k in all_kernels().items():
        lib.impl(name, k.fn, "PrivateUse1")
    fb = torch.library.Library("_", "IMPL")
    fb.fallback(_fallback, dispatch_key="PrivateUse1")
    amp = torch.library.Library("_", "IMPL")
    amp.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    _libs.extend([lib, fb, amp])


def _shutdown() -> None:
    runtime.uninstall()


def device(index: int = 0) -> torch.device:
    """Chip ``index`` as a torch device, ``tt:<index>`` (installs the tt device on first use)."""
    install()
    runtime.device(index)
    return torch.device("tt", index)
