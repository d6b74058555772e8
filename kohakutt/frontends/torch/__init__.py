"""The PyTorch frontend: the card as the torch device ``tt``.

:func:`install` (called by :func:`kohakutt.device`) renames PrivateUse1 to ``tt``, loads the C++ glue (allocator,
device guard, hooks), registers ``torch.tt`` and the aten kernels, and a fallback for every other op that either
raises :class:`~kohakutt.errors.KohakuTTUnsupportedOperator` or, when asked, runs the op on the CPU.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import sys
import threading
import types
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from kohakutt import config
from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.frontends.torch import amp, runtime
from kohakutt.frontends.torch import module as tt_module

_installed = False
_lock = threading.Lock()
_libs: list[torch.library.Library] = []
_fallback_enabled: bool | None = None  # None: follow KTT_CPU_FALLBACK
fallback_counts: Counter[str] = Counter()
unregistered: list[str] = []  # table entries left out: CompositeImplicitAutograd ops that decompose instead


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
        _install_printing()
        _keep_parameters_on_conversion()
        if "torch._dynamo" in sys.modules:  # else the compile backends' module does it when torch.compile loads them
            from torch._dynamo import trace_rules

            trace_rules.add("kohakutt")  # Dynamo never traces into the tt kernels' Python
        atexit.register(_shutdown)
        _installed = True


def dispatched(name: str) -> bool:
    """True when aten overload ``name`` has a schema in the dispatcher (TorchScript-only ones, such as ``add.str``
    or ``exp.int``, never reach a backend)."""
    packet, _, ov = name.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{packet}", ov)
    except RuntimeError:
        return False
    return True


def decomposes(name: str) -> bool:
    """True when aten overload ``name`` is CompositeImplicitAutograd: PyTorch decomposes it above autograd."""
    return dispatched(name) and torch._C._dispatch_has_kernel_for_dispatch_key(
        f"aten::{name}", "CompositeImplicitAutograd"
    )


def _register_kernels() -> None:
    from kohakutt.frontends.torch.aten import all_kernels

    lib = torch.library.Library("aten", "IMPL")
    kernels = all_kernels()
    own_autograd = {k.name for k in kernels.values() if k.dispatch_key == "AutogradPrivateUse1"}
    for k in kernels.values():
        if not dispatched(k.name):
            continue
        if k.dispatch_key == "PrivateUse1" and k.name not in own_autograd and decomposes(k.name):
            # a backend kernel would hide the op's decomposition from autograd (no gradient, only a warning):
            # the op decomposes into ops that have tt kernels instead
            unregistered.append(k.name)
            continue
        lib.impl(k.name, k.fn, k.dispatch_key)
    fb = torch.library.Library("_", "IMPL")
    fb.fallback(_fallback, dispatch_key="PrivateUse1")
    amp_fallthrough = torch.library.Library("_", "IMPL")
    amp_fallthrough.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    amp_rules = torch.library.Library("aten", "IMPL")
    amp.register(amp_rules)
    _libs.extend([lib, fb, amp_fallthrough, amp_rules])


def _install_printing() -> None:
    """Print tt tensors from one host copy: torch's printer otherwise runs dozens of small ops per tensor on the
    device (one host read per element, and float64 casts the card cannot hold)."""
    from torch import _tensor_str as ts
    from torch._subclasses.fake_tensor import is_fake

    original = ts._str
    if getattr(original, "_ktt", False):
        return

    def _str(self: torch.Tensor, *, tensor_contents: str | None = None) -> str:
        if tensor_contents is None and self.device.type == "tt" and self.layout == torch.strided and not is_fake(self):
            with torch.no_grad():
                host = self.detach().cpu()
            plain = type(self) in (torch.Tensor, torch.nn.Parameter)
            tensor_contents = ts._tensor_str(host, len("tensor(" if plain else f"{type(self).__name__}("))
        return original(self, tensor_contents=tensor_contents)

    _str._ktt = True  # type: ignore[attr-defined]
    ts._str = _str


def _keep_parameters_on_conversion() -> None:
    """Keep a module's parameter objects when it moves to or from tt, so tied weights stay tied and an optimizer
    made before the move still holds the module's parameters.

    PyTorch replaces every parameter by a new one when old and new tensors are of "incompatible" types, judged by a
    list of built-in devices that tt is not on: ``.to("tt")`` would untie shared weights. Within ``Module.to``,
    ``.tt`` and ``.cpu`` involving tt, parameters are swapped in place instead (PyTorch's own
    ``swap_module_params_on_conversion`` path, as it plans to do by default)."""
    module = torch.nn.Module
    if getattr(module.to, "_ktt", False):
        return
    future = torch.__future__

    def involves_tt(m: torch.nn.Module, device: Any) -> bool:
        if device is not None and torch.device(device).type == "tt":
            return True
        return any(t.device.type == "tt" for t in itertools.chain(m.parameters(), m.buffers()))

    def wrap(method: Callable[..., Any], device_of: Callable[[tuple, dict], Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def run(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            target = device_of(args, kwargs)
            if target is not None and method.__name__ == "to" and runtime.is_mesh(torch.device(target).index):
                from kohakutt.frontends.torch import mesh

                _, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
                return mesh.module_to(self, torch.device(target), dtype)  # placed by the modules' marks
            if future.get_swap_module_params_on_conversion() or not involves_tt(self, target):
                return method(self, *args, **kwargs)
            future.set_swap_module_params_on_conversion(True)
            try:
                return method(self, *args, **kwargs)
            except RuntimeError as e:
                if "swap" not in str(e):
                    raise
                warnings.warn(f"{e}: converting with new parameter objects instead (tied weights untie)", stacklevel=2)
            finally:
                future.set_swap_module_params_on_conversion(False)
            return method(self, *args, **kwargs)

        run._ktt = True  # type: ignore[attr-defined]
        return run

    module.to = wrap(module.to, lambda a, k: torch._C._nn._parse_to(*a, **k)[0])  # type: ignore[method-assign]
    module.cpu = wrap(module.cpu, lambda a, k: None)  # type: ignore[method-assign]
    module.tt = wrap(module.tt, lambda a, k: "tt")  # type: ignore[attr-defined]


def _shutdown() -> None:
    runtime.uninstall()


def device(index: int = 0) -> torch.device:
    """Chip ``index`` as a torch device, ``tt:<index>`` (installs the tt device on first use)."""
    install()
    runtime.device(index)
    return torch.device("tt", index)
