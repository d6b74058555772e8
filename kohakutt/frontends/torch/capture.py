"""``kohakutt.capture``: a step of ordinary PyTorch code recorded once as a device trace and replayed as one command.

Capture runs the function a few times eagerly (``warmup``: optimizers make their state on their first step), then
once more with the chip's stream recording instead of running (:meth:`kohakutt.hal.Device.capture`). What the
function queued is the trace; a replay queues it again as a single command, so the host does no per-op work.

The rules are CUDA graphs' rules, checked where they can be:

- Tensors the trace makes (intermediates, outputs) belong to it and live until the :class:`Replay` is released;
  the outputs are the same tensors on every replay, overwritten by the next one (clone what you keep).
- Host work is not replayed. Reading a result inside the function (``.item()``, ``.cpu()``) raises
  :class:`~kohakutt.errors.TraceError`, as does changing a CPU tensor in place (a step counter kept on the host).
  Optimizers stepped inside the function are switched to ``capturable=True`` during warmup, which moves their step
  counters to the card; Python numbers the function reads (a learning rate set from outside) are baked in.
- Random draws take the next block of the chip's random stream on every replay, as eager ops would.
- 0-dim CPU tensors are numbers to the ops that read them, so the trace holds their values: a replay must pass the
  same values.
- A replay takes new arguments of the captured shapes and dtypes: a tensor that is all of its storage, with the
  captured strides, is used in place of the captured one; a slice is recorded through a private copy the trace
  owns, into which a replay copies the new argument (and back after, when the step writes it). Arguments that
  shared a storage at capture must share it the same way. Other arguments must equal the captured ones.
  ``docs/concepts/trace.md`` has the whole contract.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from kohakutt.errors import TraceError
from kohakutt.frontends.torch import amp, runtime
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.trace import Trace
from kohakutt.kernels import runner
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["Replay", "capture"]


class _HostStateGuard(TorchDispatchMode):
    """Refuses in-place changes of CPU tensors while capturing: a replay would not repeat them."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        schema = func._schema
        if schema.is_mutable:
            values = [*args, *[kwargs.get(a.name) for a in schema.arguments[len(args):]]]
            for arg, value in zip(schema.arguments, values):
                info = arg.alias_info
                if info is None or not info.is_write:
                    continue
                for t in value if isinstance(value, list | tuple) else (value,):
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        raise TraceError(
                            f"{func} changes a CPU tensor ({tuple(t.shape)}, {t.dtype}) inside the captured function: "
                            "a replay runs only the card's work, so the change would happen once, not on every "
                            "replay; keep that state on the card (optimizers: capturable=True)"
                        )
        return func(*args, **kwargs)


def _capturable_optimizers(switched: list[torch.optim.Optimizer]) -> Callable[..., None]:
    """A global optimizer pre-step hook: groups on tt become ``capturable`` and their step counters move to the
    card (a trace cannot repeat host-side counting)."""

    def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for group in opt.param_groups:
            params = [p for p in group["params"] if p.device.type == "tt"]
            if not params or "capturable" not in group or group["capturable"]:
                continue
            if runtime.device(params[0].device.index or 0).current_stream.capturing is not None:
                raise TraceError(
                    f"{type(opt).__name__} is not capturable and takes its first step of the capture inside the "
                    "recording, where its step counters cannot move to the card: capture with warmup >= 1 (or "
                    "make it with capturable=True)"
                )
            group["capturable"] = True
            for p in params:
                step = opt.state.get(p, {}).get("step")
                if isinstance(step, torch.Tensor) and step.device != p.device:
                    opt.state[p]["step"] = step.to(p.device)
            switched.append(opt)

    return hook


def _no_new_state() -> tuple[Callable[..., None], Callable[..., None]]:
    """While capturing: optimizer state made now would be made again by every replay (zeroed moments, a step
    counter back at one), so an optimizer must have taken a step before the capture."""
    had: dict[int, set[int]] = {}

    def pre(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        had[id(opt)] = {id(p) for p, st in opt.state.items() if st}

    def post(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        before = had.pop(id(opt), set())
        if any(st and id(p) not in before for p, st in opt.state.items()):
            raise TraceError(
                f"{type(opt).__name__} made its state (moments, step counters) on a step inside the capture, so "
                "every replay would make it afresh: capture with warmup >= 1"
            )

    return pre, post


@contextlib.contextmanager
def _optimizer_hooks(pre: Callable[..., None], post: Callable[..., None] | None = None) -> Iterator[None]:
    handles = [register_optimizer_step_pre_hook(pre)]
    if post is not None:
        handles.append(register_optimizer_step_post_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _is_tt(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "tt"


def _host_scalar(t: Any) -> bool:
    """A 0-dim CPU tensor: ops read it as a number when they are queued, so a trace holds its value."""
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 0


def _chip(leaves: list[Any]) -> int | None:
    chips = {t.device.index or 0 for t in leaves if _is_tt(t)}
    bad = next((t for t in leaves if isinstance(t, torch.Tensor) and not _is_tt(t) and not _host_scalar(t)), None)
    if bad is not None:
        raise TraceError(
            f"capture: an argument is a {bad.device} tensor; a trace cannot copy from the host, so move it to the "
            "card first (.to('tt'))"
        )
    if len(chips) > 1:
        raise TraceError(f"capture: arguments are on chips {sorted(chips)}; a trace runs on one chip")
    return chips.pop() if chips else None


def _whole(t: torch.Tensor) -> Buffer | None:
    """The buffer ``t``'s storage is, when the storage is a whole buffer (so a replay may swap it), else None."""
    ptr = t.untyped_storage().data_ptr()
    if ptr == 0:
        return None
    buf, off = runtime.buffer_of(ptr)
    return buf if off == 0 and t.untyped_storage().nbytes() == buf.nbytes else None


def _flatten(args: tuple, kwargs: dict) -> tuple[list[Any], Any]:
    """The leaves of a call's arguments; keyword arguments in name order (a replay may pass them in any order)."""
    return pytree.tree_flatten((args, dict(sorted(kwargs.items()))))


def _describe(spec: Any) -> str:
    """(args, kwargs) structure in words: how many positional arguments, which keywords."""
    try:
        args, kwargs = pytree.tree_unflatten([0] * spec.num_leaves, spec)
        return f"{len(args)} positional, keywords {sorted(kwargs)}"
    except Exception:  # only for the message
        return str(spec)


def _storage_groups(leaves: list[Any]) -> tuple[Any, ...]:
    """How the arguments alias one another: per leaf, -1 when it is not a tt tensor, its own position when it is the
    first leaf over its storage, else (the first such leaf's position, its storage offset)."""
    first: dict[int, int] = {}
    out: list[Any] = []
    for i, t in enumerate(leaves):
        ptr = t.untyped_storage().data_ptr() if _is_tt(t) else 0
        if not ptr:
            out.append(-1)
            continue
        j = first.setdefault(ptr, i)
        out.append(i if j == i else (j, t.storage_offset()))
    return tuple(out)


def _private(leaves: list[Any]) -> list[Any]:
    """The leaves a trace records: a tt tensor that is not a whole storage of its own (a slice, say), and shares
    it with no other argument, is replaced by a copy the trace owns, so later replays copy new arguments into that
    copy, never into a tensor the caller holds."""
    groups = _storage_groups(leaves)
    shared = {g[0] for g in groups if isinstance(g, tuple)}
    out = list(leaves)
    for i, t in enumerate(leaves):
        if _is_tt(t) and groups[i] == i and i not in shared and not _covers(t):
            with torch.no_grad():
                out[i] = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)
            out[i].requires_grad_(t.requires_grad)
    return out


def _covers(t: torch.Tensor) -> bool:
    """Whether ``t`` is all of a whole buffer: a replay may then use another such tensor in its place."""
    return (_whole(t) is not None and t.storage_offset() == 0
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def _release(trace: Trace) -> None:
    """Release ``trace``, handing the buffers torch tensors still hold over to them (storages torch let go of are
    handed back first)."""
    if trace.released:
        return
    runtime.drain_frees()
    trace.release(keep=[b for b in trace.owned if b.data_ptr in runtime._buffers])


def _kind(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype, t.device)


class Replay:
    """A captured step. Call it with arguments like the captured ones to queue the whole step as one command; it
    returns the captured outputs (the same tensors each time). :meth:`release` frees what the trace holds."""

    def __init__(self, fn: Callable[..., Any], trace: Trace, chip: int, spec: Any, leaves: list[Any],
                 outputs: Any, switched: list[torch.optim.Optimizer], written: set[int] | None = None):
        self.fn = fn
        self.trace = trace
        self.chip = chip
        self._spec = spec
        self._leaves = leaves  # as recorded: an argument that is not a whole storage is the trace's private copy
        self._written = written or set()  # arguments the step writes (copied back to the caller's tensor)
        self._inputs = {b.id for b in trace.inputs}
        self._buffers = [_whole(t) if _is_tt(t) else None for t in leaves]
        self._groups = _storage_groups(leaves)
        self._draws = runner.random_draws(trace.commands)
        self.outputs = outputs
        self._out_leaves, self._out_spec = pytree.tree_flatten(outputs)
        storages = {t.untyped_storage().data_ptr(): i for i, t in enumerate(leaves)
                    if _is_tt(t) and t.untyped_storage().data_ptr()}
        self._aliases = {  # output position -> (argument position, view): outputs that are views of an argument
            j: (storages[t.untyped_storage().data_ptr()], tuple(t.shape), t.stride(), t.storage_offset())
            for j, t in enumerate(self._out_leaves)
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in storages
        }
        self.optimizers = switched  # the optimizers the capture made capturable
        self.replays = 0
        self.host_s = 0.0  # host time spent queueing replays

    @property
    def estimate_ms(self) -> float:
        """The simulator's estimate of the card's time for one replay."""
        return self.trace.estimate_ns / 1e6

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        if self.trace.released:
            raise TraceError(f"this capture of {getattr(self.fn, '__name__', self.fn)!r} was released; capture again")
        leaves, spec = _flatten(args, kwargs)
        if spec != self._spec:
            raise TraceError(
                f"replay takes its arguments as the capture did: {_describe(self._spec)}, got {_describe(spec)}"
            )
        if _storage_groups(leaves) != self._groups:
            raise TraceError(
                "replay arguments share storages differently from the captured ones (the trace reads arguments "
                "that were one tensor as one buffer): pass them as captured, or capture again"
            )
        bindings: dict[Buffer, Buffer] = {}
        copies: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        for i, (old, new) in enumerate(zip(self._leaves, leaves)):
            if not isinstance(old, torch.Tensor):
                if isinstance(new, torch.Tensor) or new != old:
                    raise TraceError(f"replay argument {i} is {new!r}; it was captured as {old!r} (capture again)")
                continue
            if _host_scalar(old):
                if not (_host_scalar(new) and new.dtype == old.dtype and (new is old or new.item() == old.item())):
                    raise TraceError(f"replay argument {i} is {new!r}; it was captured as the host number {old!r}, "
                                     "whose value the trace holds (capture again)")
                continue
            if not isinstance(new, torch.Tensor) or _kind(new) != _kind(old):
                got = _kind(new) if isinstance(new, torch.Tensor) else type(new).__name__
                raise TraceError(f"replay argument {i} is {got}; the capture's was (shape, dtype, device) {_kind(old)}")
            if new.data_ptr() == old.data_ptr() and new.stride() == old.stride():
                continue
            cap = self._buffers[i]
            buf = _whole(new) if cap is not None and cap.id in self._inputs else None
            if (buf is not None and cap is not None and buf.same_kind_as(cap) and bindings.get(cap, buf) is buf
                    and new.stride() == old.stride() and new.storage_offset() == old.storage_offset()):
                bindings[cap] = buf
            else:
                copies.append((i, old, new))
        with torch.no_grad():
            for _, old, new in copies:
                old.copy_(new)
        stream = runtime.current_stream(self.chip)
        self.trace.replay(bindings, stream=stream, args=runner.next_seeds(self.trace.device, self._draws))
        with torch.no_grad():
            for i, old, new in copies:
                if i in self._written:
                    new.copy_(old)  # what the step wrote into its input reaches the caller's tensor
        self.replays += 1
        out = self.outputs
        if self._aliases and (bindings or copies):  # a view of an argument is that view of the new argument
            outs = list(self._out_leaves)
            for j, (i, size, stride, offset) in self._aliases.items():
                new, old = leaves[i], self._leaves[i]
                if new.untyped_storage().data_ptr() == old.untyped_storage().data_ptr():
                    continue
                if self._buffers[i] not in bindings:  # copied: the same view, counted from the new argument
                    if new.stride() != old.stride():
                        continue  # no such view of the new argument: the output stays the trace's copy
                    offset = offset - old.storage_offset() + new.storage_offset()
                outs[j] = new.detach().as_strided(size, stride, offset).requires_grad_(outs[j].requires_grad)
            out = pytree.tree_unflatten(outs, self._out_spec)
        self.host_s += time.perf_counter() - t0
        return out

    def release(self) -> None:
        """Free the trace's intermediates. Outputs you still hold stay valid (they become ordinary tensors)."""
        if not self.trace.device.closed:
            _release(self.trace)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.release()

    def __repr__(self) -> str:
        return (f"Replay({getattr(self.fn, '__name__', 'fn')}, tt:{self.chip}, {len(self.trace.commands)} commands, "
                f"~{self.estimate_ms:.3f} ms on the card, {self.replays} replays)")


def capture(fn: Callable[..., Any], *args: Any, warmup: int = 3, **kwargs: Any) -> Replay:
    """Run ``fn(*args, **kwargs)`` ``warmup`` times, then record one more call as a device trace and return a
    :class:`Replay` that queues that trace as one command. The recorded call itself does not run: the first replay
    runs it. See the module's notes for what a trace can hold."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    leaves, spec = _flatten(args, kwargs)
    chip = _chip(leaves)
    if chip is None:
        raise TraceError("capture: no argument is a tt tensor, so there is no chip to capture on; pass the step's "
                         "inputs as arguments")
    dev = runtime.device(chip)
    switched: list[torch.optim.Optimizer] = []
    name = getattr(fn, "__name__", "fn")
    with _optimizer_hooks(_capturable_optimizers(switched)):
        for _ in range(warmup):
            fn(*args, **kwargs)
        dev.synchronize()  # a warmup error surfaces here, before anything is recorded
        gc.collect()
        runtime.drain_frees()
        stream = runtime.current_stream(chip)
        recorded = _private(leaves)
        rargs, rkwargs = pytree.tree_unflatten(recorded, spec)
        tensors = [(i, t) for i, t in enumerate(recorded) if isinstance(t, torch.Tensor)]
        versions = {i: t._version for i, t in tensors if not t.is_inference()}
        untracked = {i for i, t in tensors if t.is_inference()}  # no version counter: taken as written
        trace: Trace | None = None
        try:
            with (_optimizer_hooks(*_no_new_state()), _HostStateGuard(), amp.no_cast_cache(),
                  dev.capture(f"capture:{name}", stream) as trace):
                outputs = fn(*rargs, **rkwargs)
                gc.collect()  # storages the step let go of: their frees belong to the trace
                runtime.drain_frees()
            for t in pytree.tree_leaves(outputs):
                if isinstance(t, torch.Tensor) and t.device.type != "tt":
                    raise TraceError(f"{name!r} returned a {t.device} tensor; a trace can only return tt tensors")
            written = {i for i, v in versions.items() if recorded[i]._version != v} | untracked
            return Replay(fn, trace, chip, spec, recorded, outputs, switched, written)
        except BaseException as e:
            if trace is not None:
                outputs = None
                gc.collect()
                _release(trace)
            if isinstance(e, TraceError):
                raise TraceError(f"while capturing {name!r}: {e}") from e
            raise
