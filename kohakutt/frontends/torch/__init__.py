"""The PyTorch frontend: the card as the torch device ``tt``.

Two halves. :func:`register` is cheap and runs at ``import torch`` (the ``torch.backends`` entry point; off with
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``) and at ``import kohakutt`` when torch is loaded: it renames PrivateUse1 to
``tt``, registers ``torch.tt`` and the tensor methods, and loads the C++ glue if a build of it is cached. It opens no
chip, starts no thread and imports neither tinygrad nor the op library. The heavy half (:mod:`.backend`: the glue
built if needed and routed to the HAL, the aten kernels) runs on first real use, from ``torch.tt._lazy_init``,
which torch calls before it makes a tensor on tt; :func:`install` runs it on request.
"""

from __future__ import annotations

import functools
import itertools
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
        _keep_parameters_on_conversion()
        try:
            lib = native.load_cached()
        except Exception:
            lib = None
        if lib is not None:
            lib.ktt_torch_install(_first_call_cb)  # the glue's allocator, guard and hooks answer from now on
        _registered = True


def _first_call(op: int, a: int, b: int, c: int, d: int) -> int:
    """The glue's callback until the device is initialised: a device count is answered here; anything else (an
    allocation, a generator's state) initialises the device, which routes the glue to the HAL, and goes there."""
    try:
        if op == native.DEVICE_COUNT:
            return tt_module.device_count()
        install()
        from kohakutt.frontends.torch import runtime

        return runtime._entry(op, a, b, c, d)
    except BaseException as e:  # never let an exception cross into C++: hand it over as a message
        lib = native.loaded()
        if lib is not None:
            lib.ktt_torch_set_error(f"{type(e).__name__}: {e}".encode("utf-8", "replace"))
        return 0


_first_call_cb = native.CALLBACK(_first_call)  # kept alive for the process


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
    device (one host read per element, and float64 casts the card cannot hold)."""
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
            rt = sys.modules.get("kohakutt.frontends.torch.runtime")  # loaded once a chip (or the mesh) is used
            if target is not None and method.__name__ == "to" and rt and rt.is_mesh(torch.device(target).index):
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
