"""How the tt device hooks into torch: through torch's own PrivateUse1 extension points where torch has one, and a
patch only where it has none. These tests fail when torch changes under a patch (or grows a way to drop it)."""

from __future__ import annotations

import inspect
import re

import torch
from torch import _tensor_str

from kohakutt.frontends.torch import runtime

DEV = torch.device("tt", 0)


# ------------------------------------------------------------------------ Module.to / .cpu: a PrivateUse1 kernel
def _tied_model() -> torch.nn.Module:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    m[1].weight = m[0].weight
    return m


def test_moving_a_module_keeps_its_parameter_objects_as_on_cuda():
    m = _tied_model()
    params = list(m.parameters())
    weight = m[0].weight.detach().clone()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m.to(DEV)
    assert list(m.parameters()) == params and all(p.device == DEV for p in params)
    assert m[1].weight is m[0].weight  # still tied
    assert torch.equal(m[0].weight.cpu(), weight)
    m(torch.ones(2, 4, device=DEV)).sum().backward()
    opt.step()  # the optimizer made before the move updates the moved parameters
    assert not torch.equal(m[0].weight.cpu(), weight)
    m.cpu()
    assert list(m.parameters()) == params and m[0].weight.device.type == "cpu" and m[0].weight.grad.device.type == "cpu"
    m.tt()
    m.to(DEV, torch.bfloat16)
    assert list(m.parameters()) == params and m[0].weight.dtype == torch.bfloat16 and m[1].weight is m[0].weight


def test_torch_asks_the_device_whether_data_may_move_between_tensors():
    cpu, tt = torch.ones(2), torch.ones(2, device=DEV)
    assert torch._has_compatible_shallow_copy_type(cpu, tt) and torch._has_compatible_shallow_copy_type(tt, cpu)
    assert not torch._has_compatible_shallow_copy_type(tt, torch.ones(2).to_sparse())
    p = torch.nn.Parameter(torch.arange(3.0))
    p.data = p.data.to(DEV)  # what Module._apply does for a compatible pair
    assert p.device == DEV and torch.equal(p.cpu(), torch.arange(3.0))
    # torch's own rule for dense devices, which tt joins: if torch ever counts PrivateUse1 as dense itself, the
    # kernel in backend.py can go
    rule = inspect.getsource(torch.nn.Module._apply)
    assert "_has_compatible_shallow_copy_type" in rule and "get_overwrite_module_params_on_conversion" in rule


def test_the_overwrite_flag_gives_new_parameters_as_on_cuda():
    m = _tied_model()
    old = m[0].weight
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        m.to(DEV)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert m[0].weight is not old and m[0].weight.device == DEV


def test_module_conversion_methods_are_torchs_own():
    """``cpu`` is torch's own; ``to`` is torch's own under the mesh's route, which only takes calls aimed at the open
    mesh (it places parameters by their modules' marks: torch has no hook for moving a whole module)."""
    cpu = torch.nn.Module.cpu
    assert cpu.__module__ == "torch.nn.modules.module" and not hasattr(cpu, "__wrapped__")
    to = torch.nn.Module.to
    own = getattr(to, "__wrapped__", to)
    assert own.__module__ == "torch.nn.modules.module" and not hasattr(own, "__wrapped__")
    assert to is own or getattr(to, "_ktt", False)


# ------------------------------------------------------------------------------------ printing: a patch (no hook)
def test_printing_a_tt_tensor_reads_it_once_and_prints_as_the_cpu_does():
    x = torch.linspace(-3, 3, 2000).reshape(40, 50)
    t = x.to(DEV)
    torch.tt.synchronize()
    reads = []
    real = runtime.device(0).read
    runtime.device(0).read = lambda *a, **k: reads.append(1) or real(*a, **k)  # type: ignore[method-assign]
    try:
        text = repr(t)
    finally:
        del runtime.device(0).read
    assert len(reads) == 1
    assert _as_on_the_cpu(text, x)
    p = torch.nn.Parameter(torch.arange(4.0, dtype=torch.bfloat16))
    assert _as_on_the_cpu(repr(torch.nn.Parameter(p.detach().to(DEV))), p)
    assert str(torch.arange(3).to(DEV)) == "tensor([0, 1, 2], device='tt:0')"


def _as_on_the_cpu(text: str, cpu: torch.Tensor) -> bool:
    """``text`` prints what ``cpu`` prints, with the device named (torch may break the line differently)."""
    norm = lambda s: " ".join(s.split()).replace(", device='tt:0'", "")  # noqa: E731
    return "device='tt:0'" in text and norm(text) == norm(repr(cpu))


def test_the_printing_patch_still_fits_torch():
    # Tensor.__repr__ hands its work to _tensor_str._str(self, tensor_contents=...), which takes the contents
    # from _tensor_str._tensor_str(tensor, indent): the names and arguments the patch uses
    assert {"_tensor_str", "_str"} <= set(torch.Tensor.__repr__.__code__.co_names)
    params = inspect.signature(_tensor_str._str.__wrapped__ if hasattr(_tensor_str._str, "__wrapped__") else
                               _tensor_str._str).parameters  # fmt: skip
    assert params["tensor_contents"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(_tensor_str._tensor_str).parameters)[:2] == ["self", "indent"]
    assert getattr(_tensor_str._str, "_ktt", False)
    # no public hook yet: torch copies to the CPU before printing only for a fixed list of device types
    source = inspect.getsource(_tensor_str._str_intern)
    copied = re.search(r'if self\.device\.type in \[([^\]]*)\]:\s*\n\s*self = self\.to\("cpu"\)', source)
    assert copied is not None, "torch's printer changed: see whether tt can now print without the patch"
    types = {s.strip().strip("\"'") for s in copied.group(1).split(",")}
    assert types == {"xla", "lazy", "ipu", "mtia"}, f"torch copies {types} to the CPU to print them now: recheck tt"


# --------------------------------------------------------------------------- autocast's cache: a patch (no hook)
def test_the_autocast_cache_patch_still_fits_torch():
    # torch.autocast empties its cast cache through the module attribute torch.clear_autocast_cache when the
    # outermost region ends; the tt frontend's own cast cache is emptied by wrapping that attribute
    assert "clear_autocast_cache" in torch.autocast.__exit__.__code__.co_names
    assert getattr(torch.clear_autocast_cache, "_ktt", False)
