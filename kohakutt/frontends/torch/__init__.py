"""The PyTorch frontend: the card as the torch device ``tt``.

Two halves. :func:`register` is cheap and runs at ``import torch`` (the ``torch.backends`` entry point; off with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``) and at ``import kohakutt`` when torch is loaded: it renames PrivateUse1 to
``tt``, registers ``torch.tt`` and the tensor methods, and loads the C++ glue if a build of it is cached. It opens no
chip, starts no thread and imports neither tinygrad nor the op library. The heavy half (:mod:`.backend`: the glue
built if needed and routed to the HAL, the aten kernels) runs on first real use, from ``torch.tt._lazy_init``,
which torch calls before it makes a tensor on tt; :func:`install` runs it on request.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from kohakutt import config
from kohakutt.errors import DeviceError
from kohakutt.frontends.torch import module as tt_module
from kohakutt.frontends.torch import native

_registered = False
_lock = threading.RLock()
_fallback_enabled: bool | None = None  # None: follow KTT_CPU_FALLBACK
fallback_counts: Counter[str] = Counter()
unregistered: list[str] = []  # table entries left out: CompositeImplicitAutograd ops that decompose instead


def cpu_fallback(enabled: bool | None = True) -> None:
    """Let ops without a tt kernel run on the CPU (counted, warned once per op); ``None`` follows the knob."""
    global _fallback_enabled
    _fallback_enabled = enabled


def fallback_enabled() -> bool:
    return bool(config.get("KTT_CPU_FALLBACK")) if _fallback_enabled is None else _fallback_enabled


def autoload() -> None:
    """The ``torch.backends`` entry point: :func:`register`, warning instead of raising (a failure here must not
    break ``import torch``; the first use of tt then raises what went wrong)."""
    try:
        register()
    except Exception as e:
        warnings.warn(f"Kohaku-TT could not register the tt device at import torch: {e}", stacklevel=2)


def register() -> None:
    """Make ``tt`` a torch device, cheaply (see the module's docstring). Idempotent. A cached glue that fails to load
    is left to the first use, which builds or loads it again and raises what goes wrong."""
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        name = torch._C._get_privateuse1_backend_name()
        if name not in ("privateuseone", "tt"):
            raise DeviceError(
                f"PyTorch's PrivateUse1 device is already {name!r} in this process, so it cannot be tt: load one "
                "out-of-tree device per process (TORCH_DEVICE_BACKEND_AUTOLOAD=0 stops torch from loading them all)"
            )
        if name != "tt":
            torch.utils.rename_privateuse1_backend("tt")
        if getattr(torch, "tt", None) is not tt_module:
            torch._register_device_module("tt", tt_module)
        if not hasattr(torch.Tensor, "is_tt"):
            torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
        _install_printing()
        _route_module_to_the_mesh()
        try:
            lib = native.load_cached()
            if lib is not None:
                global _first_calls
                _first_calls = native.hal_table(lib, _first_call_handlers())  # kept alive for the process
                lib.ktt_torch_install(ctypes.byref(_first_calls))  # the glue's allocator, guard and hooks answer now
        except Exception:
            pass
        _registered = True


_first_calls: Any = None


def _first_call_handlers() -> dict[str, Callable[..., Any]]:
    """The glue's entry points until the device is initialised: a device count is answered here; any other request
    (an allocation, a generator's state) initialises the device, which routes the glue to the HAL, and goes there."""

    def first(name: str) -> Callable[..., Any]:
        def entry(*args: Any) -> Any:
            install()
            from kohakutt.frontends.torch import runtime

            return runtime.HANDLERS[name](*args)

        return entry

    return {name: first(name) for name in native.hal_entry_points()} | {"device_count": tt_module.device_count}


def install() -> None:
    """Make ``tt`` a working torch device now: :func:`register`, then initialise it (``torch.tt.init()``). Idempotent;
    the first call builds the C++ glue if it is not cached (~5 s, once per torch version)."""
    register()
    tt_module._lazy_init()


def device(index: int = 0) -> torch.device:
    """Chip ``index`` as a torch device, ``tt:<index>`` (installs the tt device on first use)."""
    install()
    from kohakutt.frontends.torch import runtime

    runtime.device(index)
    return torch.device("tt", index)


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


def _install_printing() -> None:
    """Print tt tensors from one host copy: torch's printer otherwise runs dozens of small ops per tensor on the
    device (one host read per element, and float64 casts the card cannot hold).

    A patch of ``torch._tensor_str._str``, because torch has no public hook for it: its printer copies a tensor to
    the CPU first only for a fixed list of device types (``xla``, ``lazy``, ``ipu``, ``mtia``), which a PrivateUse1
    device cannot join. ``tests/frontends/torch/test_library_hooks.py`` fails when torch changes what this relies on
    (the names, the ``tensor_contents`` argument) or grows a way to do without it."""
    from torch import _tensor_str as ts

    original = ts._str
    if getattr(original, "_ktt", False):
        return

    def _str(self: torch.Tensor, *, tensor_contents: str | None = None) -> str:
        from torch._subclasses.fake_tensor import is_fake

        if tensor_contents is None and self.device.type == "tt" and self.layout == torch.strided and not is_fake(self):
            with torch.no_grad():
                host = self.detach().cpu()
            plain = type(self) in (torch.Tensor, torch.nn.Parameter)
            tensor_contents = ts._tensor_str(host, len("tensor(" if plain else f"{type(self).__name__}("))
        return original(self, tensor_contents=tensor_contents)

    _str._ktt = True  # type: ignore[attr-defined]
    ts._str = _str


def _route_module_to_the_mesh() -> None:
    """``module.to(mesh)`` places each parameter by its module's mark (:func:`.mesh.module_to`): sharded or
    replicated, which a per-tensor ``_apply`` cannot know. A patch, as torch offers no hook for how a whole module
    moves; it only looks at ``Module.to`` calls whose target is the open mesh's index and leaves every other call to
    torch untouched (a tensor's own placement is the ``_has_compatible_shallow_copy_type`` hook's)."""
    module = torch.nn.Module
    if getattr(module.to, "_ktt", False):
        return
    method = module.to

    @functools.wraps(method)
    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        rt = sys.modules.get("kohakutt.frontends.torch.runtime")  # loaded once a chip (or the mesh) is used
        if rt is not None and rt.has_mesh():
            target, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
            if target is not None and target.type == "tt" and rt.is_mesh(target.index):
                from kohakutt.frontends.torch import mesh

                return mesh.module_to(self, target, dtype)
        return method(self, *args, **kwargs)

    to._ktt = True  # type: ignore[attr-defined]
    module.to = to  # type: ignore[method-assign]
