"""The heavy half of the tt device, run once on first use (``torch.tt._lazy_init``): the C++ glue (allocator, device
guard, hooks) routed to the HAL, the aten kernels, autocast's rules, and a fallback for every other op that either
raises :class:`~kohakutt.errors.KohakuTTUnsupportedOperator` or, when asked, runs the op on the CPU.
"""

from __future__ import annotations

import atexit
import sys
import threading
import warnings
from typing import Any

import torch
from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.frontends import torch as frontend
from kohakutt.frontends.torch import amp, runtime
from kohakutt.frontends.torch.aten import all_kernels

_installed = False
_lock = threading.Lock()
_libs: list[torch.library.Library] = []


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
    if not frontend.fallback_enabled():
        raise KohakuTTUnsupportedOperator(
            f"aten::{name} has no tt kernel yet. Run it on the CPU with kohakutt.cpu_fallback(True) or "
            "KTT_CPU_FALLBACK=1 (counted and warned once per op), or move its inputs to the CPU yourself"
        )
    frontend.fallback_counts[name] += 1
    if frontend.fallback_counts[name] == 1:
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
        pairs = zip(dst, src) if isinstance(dst, list | tuple) else [(dst, src)]  # Tensor[] arguments (_foreach_*)
        for d, c in pairs:
            if isinstance(d, torch.Tensor) and d.device.type == "tt":
                if d.shape != c.shape:
                    d.resize_(c.shape)
                d.copy_(c)
    if not op._schema.returns:
        return None
    if written and len(op._schema.returns) == 1 and op._schema.returns[0].alias_info is not None:
        return bound[written[0]]
    if written and all(r.alias_info is not None for r in op._schema.returns):
        return tuple(bound[w] for w in written)
    return _to_tt(result, index)


def install() -> None:
    """Route the glue to the HAL and register the aten kernels. Idempotent; the first call builds the C++ glue if it
    is not in the cache (~5 s, once per torch version)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        frontend.register()
        runtime.install()
        _register_kernels()
        if "torch._dynamo" in sys.modules:  # else the compile backends' module does it when torch.compile loads them
            from torch._dynamo import trace_rules

            trace_rules.add("kohakutt")  # Dynamo never traces into the tt kernels' Python
        atexit.register(_shutdown)
        _installed = True


def _register_kernels() -> None:
    lib = torch.library.Library("aten", "IMPL")
    kernels = all_kernels()
    own_autograd = {k.name for k in kernels.values() if k.dispatch_key == "AutogradPrivateUse1"}
    for k in kernels.values():
        if not frontend.dispatched(k.name):
            continue
        if k.dispatch_key == "PrivateUse1" and k.name not in own_autograd and frontend.decomposes(k.name):
            # a backend kernel would hide the op's decomposition from autograd (no gradient, only a warning):
            # the op decomposes into ops that have tt kernels instead
            frontend.unregistered.append(k.name)
            continue
        lib.impl(k.name, k.fn, k.dispatch_key)
    fb = torch.library.Library("_", "IMPL")
    fb.fallback(_fallback, dispatch_key="PrivateUse1")
    amp_fallthrough = torch.library.Library("_", "IMPL")
    amp_fallthrough.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    amp_rules = torch.library.Library("aten", "IMPL")
    amp.register(amp_rules)
    _libs.extend([lib, fb, amp_fallthrough, amp_rules])


def _shutdown() -> None:
    runtime.uninstall()
