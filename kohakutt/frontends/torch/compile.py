"""``torch.compile`` backends for tt: ``ktt_tt`` (a forward, for inference) and ``ktt_tt_aot`` (training).

Both run a graph the way :func:`kohakutt.capture` runs a step: the first call at a new signature (argument shapes,
dtypes, strides and plain values) runs the graph op by op on the card; the second records it as a device trace; from
then on each call replays the trace as one queued command and returns fresh copies of its outputs (a caller may keep
them across calls). ``ktt_tt`` records only graphs that build no autograd graph (``torch.no_grad()``, or no input
needing a gradient); under autograd it runs the graph op by op, since a replay would not record the backward.
``ktt_tt_aot`` hands the forward and the backward to AOTAutograd, so both are plain aten graphs and both replay.

A graph the card cannot record (it reads a result on the host, say) runs op by op from then on; :data:`stats`
counts each case and ``reasons`` says why. Nothing runs on the CPU that would not in eager mode.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo.trace_rules
import torch.utils._pytree as pytree
from kohakutt.errors import TraceError
from kohakutt.frontends.torch.capture import Replay, _storage_groups, capture

__all__ = ["ktt_tt", "ktt_tt_aot", "register", "stats"]

MAX_SIGNATURES = 8  # traces kept per graph; the least recently used is released beyond this

# Dynamo must never trace Kohaku-TT's own Python: a graph's ops reach the tt kernels' Python (through the
# dispatcher, also in AOTAutograd's epilogues outside the graph), and a traced kernel would be compiled as a user
# function, again for every new argument type.
torch._dynamo.trace_rules.add("kohakutt")

stats: Counter[str] = Counter()  # graphs, eager_runs, captures, replays, not_captured
reasons: dict[str, str] = {}  # graph name -> why it runs op by op
_lock = threading.Lock()


def _fresh(t: Any, args: Sequence[Any]) -> Any:
    """A replay's output as a compiled function must return it: a copy of what the trace owns (the next replay
    overwrites it), the very view when it is a view of an argument (as the graph run op by op returns it)."""
    if not isinstance(t, torch.Tensor):
        return t
    ptr = t.untyped_storage().data_ptr()
    if any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr for a in args):
        return t
    return t.clone()


def _signature(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """What a trace is specific to; None when an argument rules a trace out (a CPU tensor, a symbolic size) or
    none is a tt tensor (nothing to record)."""
    key: list[Any] = []
    if not any(isinstance(a, torch.Tensor) for a in args):
        return None
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.device.type == "cpu" and a.dim() == 0:  # read as a number when queued: a trace per value
                key.append(("host", a.dtype, a.item()))
                continue
            if a.device.type != "tt":
                return None
            key.append((tuple(a.shape), a.stride(), a.dtype, a.device.index, a.requires_grad))
        elif isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool):
            return None
        else:
            key.append((type(a), a))
    return (*key, _storage_groups(list(args)))  # how the arguments alias one another


class CapturedGraph:
    """A graph module run op by op on its first call at a signature and replayed as a trace after that."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, autograd_safe: bool):
        self.gm = gm
        self.name = name
        self.autograd_safe = autograd_safe  # aot graphs: plain aten, no autograd inside
        self.seen: set[tuple[Any, ...]] = set()
        self.replays: OrderedDict[tuple[Any, ...], Replay] = OrderedDict()
        self.eager_only = False
        stats["graphs"] += 1

    def _run(self, *args: Any) -> Any:
        return self.gm(*args)

    @torch.compiler.disable  # Dynamo must not trace into the tt kernels' Python that the graph's ops reach
    def __call__(self, *args: Any) -> Any:
        key = None if self.eager_only else _signature(args)
        if (key is not None and not self.autograd_safe and torch.is_grad_enabled()
                and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
            key = None  # the eager run builds the autograd graph; a replay would not
        if key is None:
            stats["eager_runs"] += 1
            return self.gm(*args)
        replay = self.replays.get(key)
        if replay is None:
            if key not in self.seen:  # the first call at this signature: op by op (lazy state gets made)
                self.seen.add(key)
                stats["eager_runs"] += 1
                return self.gm(*args)
            try:
                replay = capture(self._run, *args, warmup=0)
            except TraceError as e:
                self.eager_only = True
                reasons[self.name] = str(e)
                stats["not_captured"] += 1
                return self.gm(*args)
            stats["captures"] += 1
            self.replays[key] = replay
            while len(self.replays) > MAX_SIGNATURES:
                self.replays.popitem(last=False)[1].release()
        else:
            self.replays.move_to_end(key)
        try:
            out = replay(*args)
        except TraceError as e:  # arguments the trace cannot take (aliasing its signature does not see): op by op
            reasons[self.name] = str(e)
            stats["eager_runs"] += 1
            return self.gm(*args)
        stats["replays"] += 1
        return pytree.tree_map(lambda t: _fresh(t, args), out)


def _name(gm: torch.fx.GraphModule) -> str:
    return f"{type(gm).__name__}#{stats['graphs']}"


def ktt_tt(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The ``torch.compile`` backend for inference: the dynamo graph replayed as a device trace."""
    return CapturedGraph(gm, _name(gm), autograd_safe=False)


def _inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(CapturedGraph(gm, _name(gm), autograd_safe=True))


def ktt_tt_aot(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable[..., Any]:
    """The ``torch.compile`` backend for training: AOTAutograd's forward and backward graphs, each replayed as a
    device trace."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_inner, bw_compiler=_inner)(gm, example_inputs, **kwargs)


def register() -> None:
    """Make ``backend="ktt_tt"`` / ``"ktt_tt_aot"`` known to ``torch.compile`` (the package's entry points do the
    same for an installed kohakutt)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    with _lock:
        for name, fn in (("ktt_tt", ktt_tt), ("ktt_tt_aot", ktt_tt_aot)):
            if _BACKENDS.get(name) is None:
                register_backend(fn, name=name)
