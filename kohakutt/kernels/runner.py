"""Running an IR op: infer outputs, pick the implementation, queue one command on the device's stream.

``run("add", [a, b])`` returns the output tensors at once; the work happens on the stream's worker. The command
carries the op's resolved numerics and the simulator's time estimate, and names the op if it fails.

What ``run`` works out from an op's signature (its operands' specs, Python numbers by type and value, attributes,
the numerics scope, the backend and provider) - output specs, implementation, resolved numerics, time estimate - is
kept in a bounded cache, so queueing the same call again costs little more than building its command.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kohakutt import config
from kohakutt.errors import KohakuTTUnsupportedOperator, TraceError
from kohakutt.hal.card import CardSpec
from kohakutt.hal.device import Device
from kohakutt.hal.stream import Command, Stream
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType, check_int64_terms, int64_checked
from kohakutt.ir.numerics import UNSET, Numerics, numerics, resolve
from kohakutt.ir.numerics import current as current_numerics
from kohakutt.ir.ops import ScalarSpec, ShapeError, Spec, TensorSpec
from kohakutt.kernels import cost, registry
from kohakutt.kernels.tensor import DeviceTensor, check_int32, decode, empty, store

Operand = DeviceTensor | float | int | bool

_rng_lock = threading.Lock()
_rng: dict[int, list[int]] = {}  # chip -> [seed, offset]: the chip's random stream, offset in Philox blocks


def _chip(device: Device | int) -> int:
    return device if isinstance(device, int) else device.chip_id


def manual_seed(device: Device | int, seed: int) -> None:
    """Restart the random stream of ``device`` (a device or a chip index: the chip need not be open) at ``seed``."""
    with _rng_lock:
        _rng[_chip(device)] = [int(seed) & (2**64 - 1), 0]


def rng_state(device: Device | int) -> tuple[int, int]:
    """(seed, offset) of the chip's random stream: the next random op draws from block ``offset`` of Philox keyed by
    ``seed``. Ops take their blocks when queued, so this is the state after every draw queued so far."""
    with _rng_lock:
        return tuple(_rng.setdefault(_chip(device), [0, 0]))  # type: ignore[return-value]


def set_rng_state(device: Device | int, state: tuple[int, int]) -> None:
    with _rng_lock:
        _rng[_chip(device)] = [int(state[0]) & (2**64 - 1), int(state[1]) & (2**64 - 1)]


_source = threading.local()  # .take: where the calling thread's random ops draw from instead of the chip stream


@contextmanager
def draws_from(take: Callable[[int], tuple[int, int]] | None) -> Iterator[None]:
    """Random ops queued by this thread inside the block draw from ``take(blocks) -> (seed, offset)`` (a frontend's
    generator object, say) instead of the chip's stream; ``blocks`` is how many 128-bit Philox blocks the op uses,
    which ``take`` must skip past. Such draws cannot be captured in a trace: a replay would repeat them."""
    prev = getattr(_source, "take", None)
    _source.take = take
    try:
        yield
    finally:
        _source.take = prev


def _blocks(draws: int) -> int:
    """Philox counter steps a draw of ``draws`` numbers takes (four words per step; at least one)."""
    return max(1, -(-draws // 4))


def _next_seed(device: Device, draws: int) -> tuple[int, int]:
    with _rng_lock:
        st = _rng.setdefault(device.chip_id, [0, 0])
        seed = (st[0], st[1])
        st[1] += _blocks(draws)
        return seed


def spec_of(x: Operand) -> Spec:
    return x.spec if isinstance(x, DeviceTensor) else ScalarSpec(x)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What ``run`` works out once per call signature."""

    opdef: irops.OpDef
    card: CardSpec
    impl: registry.Impl
    numerics: Numerics
    out_specs: tuple[TensorSpec, ...]
    estimate_ns: float
    draws: int  # random numbers the op draws (random ops only)
    int64_checked: bool  # int64 operands and results must fit int32 (the op is not exact in 64 bits)
    half: bool  # a float16 operand or result: the kernel computes it as float32


PLAN_CACHE_SIZE = 4096
_plans: dict[Hashable, _Plan] = {}
_LEAVES = (str, bytes, int, bool, complex, type(None), enum.Enum, TensorSpec, Numerics, np.generic)


def _freeze(v: Any) -> Hashable:
    """``v`` as a key that tells apart everything inference could (1, 1.0 and True differ); TypeError when ``v``
    is something the cache must not key on (a mutable object, an array)."""
    t = type(v)
    if t is float:
        return (t, v if v == v else "nan")
    if t is int or t is bool or t is str or v is None:
        return (t, v)
    if t is tuple or t is list:
        return (t, *[_freeze(x) for x in v])
    if t is dict:
        return (t, *[(k, _freeze(x)) for k, x in v.items()])
    if isinstance(v, _LEAVES):
        return (t, v)
    raise TypeError(f"no cache key for {t.__name__}")


def _signature(op: str, inputs: Sequence[Operand], attrs: dict[str, Any] | None, dev: Device,
               provider: str | None, defaults: Numerics) -> Hashable | None:
    """The cache key of a call (hashable unless an operand holds something unhashable: see :func:`_lookup`), or
    None when it has none (an operand or attribute that cannot be a key)."""
    if not registry._loaded:
        registry._load()
    try:
        num = current_numerics()
        return (op, dev.backend.name, provider, config.get("KTT_CUSTOM_KERNELS"), len(registry.IMPLS),
                None if num is UNSET else num, None if defaults is UNSET else defaults,
                tuple([x.spec if type(x) is DeviceTensor else _freeze(x) for x in inputs]),
                _freeze(attrs) if attrs else None)
    except TypeError:
        return None


def _lookup(key: Hashable | None) -> tuple[_Plan | None, Hashable | None]:
    """The cached plan of ``key`` and the key (None when it turns out unhashable)."""
    if key is None:
        return None, None
    try:
        return _plans.get(key), key
    except TypeError:
        return None, None


def _plan(op: str, inputs: Sequence[Operand], attrs: dict[str, Any] | None, specs: list[Spec], dev: Device | None,
          out: Sequence[DeviceTensor] | None, provider: str | None, defaults: Numerics
          ) -> tuple[_Plan | None, irops.OpDef, dict, Device]:  # fmt: skip
    """Work out a call: its plan (None when the op runs its decomposition), definition, bound attributes and device.
    Raises what is wrong with the call, in the order: operands, attributes, shapes, devices, implementation."""
    d = irops.get(op)
    d.check_arity(len(inputs))
    bound = d.bind_attrs(attrs)
    out_specs = d.infer(specs, bound)
    if dev is None:
        raise ShapeError(f"{op}: no tensor operand to take the device from; pass device=")
    _check_devices(op, inputs, out, dev)
    num = resolve(d.numerics, defaults)
    impl = registry.lookup(op, dev.backend.name, provider)
    if impl is not None and provider is None:
        impl = registry.fallback(impl, specs, bound, num)
    if impl is None:
        if d.decomposition is not None:
            return None, d, bound, dev
        raise KohakuTTUnsupportedOperator(
            f"{op} has no implementation on the {dev.backend.name} backend and no decomposition")
    est = (impl.estimate or cost.default)(specs, out_specs, bound, num, dev.card)
    draws = sum(s.numel for s in out_specs) if impl.random else 0
    tdts = [s.dtype for s in (*specs, *out_specs) if isinstance(s, TensorSpec)]
    checked = int64_checked(op, d.family, tdts, bound)
    if op in ("sum", "cumsum") and out_specs[0].dtype is DType.INT64:
        check_int64_terms(op, specs[0].shape, bound.get("dims", bound.get("dim")))
    half = DType.FLOAT16 in tdts
    return _Plan(d, dev.card, impl, num, tuple(out_specs), est, draws, checked, half), d, bound, dev


def run(op: str, inputs: Sequence[Operand], attrs: dict[str, Any] | None = None, *,
        out: Sequence[DeviceTensor] | None = None, device: Device | None = None, stream: Stream | None = None,
        provider: str | None = None, defaults: Numerics = UNSET,
        seed: tuple[int, int] | None = None) -> list[DeviceTensor]:
    """Queue IR op ``op`` on ``inputs``; return its outputs (``out`` when given, written with a cast to their dtype).

    ``defaults``: the calling frontend's numerics settings (its framework's precision knobs), which fill what the
    open ``numerics`` scopes leave unset, before the op family's defaults.
    An op with no implementation on the device's backend runs its decomposition; without one it raises
    :class:`KohakuTTUnsupportedOperator`. Operands on a mesh (``kohakutt.mesh.MeshTensor``) run on the mesh.
    ``seed`` fixes a random op's (seed, offset) instead of taking the chip stream's next block (the mesh draws once
    for both chips)."""
    dev = device
    if dev is None:
        for x in inputs:
            if isinstance(x, DeviceTensor):
                dev = x.buffer.device
                break
        else:
            if out and isinstance(out[0], DeviceTensor):
                dev = out[0].buffer.device
    if dev is None or dev.__class__ is not Device:
        from kohakutt.mesh import executor as mesh_run

        if dev is not None or any(isinstance(x, mesh_run.MeshTensor) for x in (*inputs, *(out or ()))):
            return mesh_run.run(op, inputs, attrs, out=out, device=dev, stream=stream,  # type: ignore[arg-type]
                                defaults=defaults)
    specs = [x.spec if isinstance(x, DeviceTensor) else ScalarSpec(x) for x in inputs]
    plan, key = _lookup(_signature(op, inputs, attrs, dev, provider, defaults) if dev is not None else None)
    if plan is not None and plan.card is dev.card and irops.OPS.get(op) is plan.opdef:  # type: ignore[union-attr]
        bound = plan.opdef.attrs | attrs if attrs else dict(plan.opdef.attrs)
        _check_devices(op, inputs, out, dev)  # type: ignore[arg-type]
    else:
        plan, d, bound, dev = _plan(op, inputs, attrs, specs, dev, out, provider, defaults)
        if plan is None:
            return _run_decomposed(d, list(inputs), bound, out, dev, defaults)
        if key is not None:
            while len(_plans) >= PLAN_CACHE_SIZE:
                with suppress(KeyError, RuntimeError, StopIteration):  # another thread may evict the same one
                    del _plans[next(iter(_plans))]  # the oldest signature
            _plans[key] = plan
    out_specs = list(plan.out_specs)
    if out is None:
        outs = [empty(dev, s) for s in out_specs]
    else:
        outs = list(out)
        if len(outs) != len(out_specs):
            raise ShapeError(f"{op} has {len(out_specs)} output(s), got {len(outs)} out tensors")
        for o, s in zip(outs, out_specs):
            if o.spec.shape != s.shape:
                raise ShapeError(f"{op}: out tensor has shape {o.shape}, the result has {s.shape}")
    impl = plan.impl
    program_path = impl.launch is not None and (dev.backend.name != "sim" or config.get("KTT_SIM_OPS") == "program")
    if program_path and impl.launch(inputs, outs, bound, plan.numerics, stream or dev.current_stream):  # type: ignore
        return outs  # queued as the op's program through the HAL (kernels.programs.launch)
    buffers, in_views, out_views = _layout(op, inputs, outs)
    kwargs = {"impl": impl, "in_views": in_views, "out_views": out_views, "in_specs": specs, "attrs": bound,
              "numerics": plan.numerics, "out_specs": out_specs, "seed": (0, 0)}
    if plan.int64_checked or (out is not None and _stores_int64_as_float(plan, specs, outs)):
        kwargs["int64_checked"] = True
    if plan.half:  # float16 is unpacked to float32 exactly and packed back with one rounding: the kernel sees fp32
        kwargs["in_specs"], kwargs["out_specs"] = _as_float32(specs), _as_float32(out_specs)
    if impl.random:
        take = getattr(_source, "take", None)
        if seed is not None:
            kwargs["seed"], kwargs["draws"] = seed, plan.draws
        elif take is None:
            kwargs["seed"], kwargs["draws"] = _next_seed(dev, plan.draws), plan.draws
        else:
            if (stream or dev.current_stream).capturing is not None:
                raise TraceError(f"{op}: a draw from a generator object cannot be captured in a trace (every replay "
                                 "would repeat its numbers); draw from the default stream inside captured code")
            kwargs["seed"] = take(_blocks(plan.draws))
    dev.enqueue(Command(op, _execute, buffers, kwargs, plan.estimate_ns), stream)
    return outs


def mesh_seed(device: Device, draws: int) -> tuple[int, int]:
    """The (seed, offset) a mesh op draws ``draws`` numbers at, from ``device``'s stream (the mesh's first chip):
    every chip of the mesh draws the same numbers."""
    return _next_seed(device, draws)


def random_draws(commands: Sequence[Command]) -> list[tuple[int, int]]:
    """(index, draws) of each random draw among recorded ``commands``: a trace's replay gives each the next
    block of the chip's random stream (:func:`next_seeds`), so replays draw new numbers, as eager ops would."""
    return [(i, c.args["draws"]) for i, c in enumerate(commands) if c.run is _execute and "draws" in c.args]


def next_seeds(device: Device, draws: Sequence[tuple[int, int]]) -> dict[int, dict[str, Any]]:
    """The replacement arguments that move the recorded random draws ``draws`` to the next blocks of the stream."""
    return {i: {"seed": _next_seed(device, n)} for i, n in draws}


def _check_devices(op: str, inputs: Sequence[Operand], out: Sequence[DeviceTensor] | None, dev: Device) -> None:
    for t in (*inputs, *(out or ())):
        if isinstance(t, DeviceTensor) and t.buffer.device is not dev:
            raise ShapeError(f"{op}: expected all tensors on chip {dev.chip_id}, but found one on chip "
                             f"{t.buffer.device.chip_id}; move it with .to() first")


def _layout(op: str, inputs: Sequence[Operand], outs: Sequence[DeviceTensor]) -> tuple[tuple, list, list]:
    """The distinct buffers a command uses (each checked live), and each operand as (buffer index, view) or a
    constant."""
    index: dict[Any, int] = {}
    buffers: list = []

    def slot(b: Any) -> int:
        i = index.get(b)
        if i is None:
            b.check_live(f"{op} operand")
            i = index[b] = len(buffers)
            buffers.append(b)
        return i

    in_views = [(slot(x.buffer), x) if isinstance(x, DeviceTensor) else (None, x) for x in inputs]
    out_views = [(slot(o.buffer), o) for o in outs]
    return tuple(buffers), in_views, out_views


def _execute(*buffers: Any, impl: registry.Impl, in_views: list, out_views: list, in_specs: list[Spec],
             attrs: dict[str, Any], numerics: Numerics, out_specs: list[TensorSpec], seed: tuple[int, int],
             draws: int = 0, int64_checked: bool = False) -> None:
    views = [b.device.backend.host_view(b) for b in buffers]
    values = [decode(_rebind(t, buffers[i]), views[i]) if i is not None else t for i, t in in_views]
    if int64_checked:
        for k, (v, s) in enumerate(zip(values, in_specs)):
            if isinstance(s, TensorSpec) and s.dtype is DType.INT64:
                check_int32(impl.op, f"operand {k}", v)
    call = registry.SimCall(impl.op, values, in_specs, attrs, numerics, out_specs, seed)
    result = impl.fn(call)
    results = list(result) if isinstance(result, list | tuple) else [result]
    if len(results) != len(out_views):
        raise ShapeError(f"{impl} returned {len(results)} arrays for {len(out_views)} outputs")
    if int64_checked:
        for k, (r, s) in enumerate(zip(results, out_specs)):
            if s.dtype is DType.INT64:
                check_int32(impl.op, "result" if len(results) == 1 else f"result {k}", np.asarray(r, np.int64))
    for (i, t), r in zip(out_views, results):
        store(_rebind(t, buffers[i]), views[i], r)


def _stores_int64_as_float(plan: _Plan, specs: Sequence[Spec], outs: Sequence[DeviceTensor]) -> bool:
    """Whether ``out`` tensors of other dtypes than the op infers make it a checked int64 op (a copy of int64 into
    float32, say): the plan is keyed without them."""
    if all(o.spec.dtype is s.dtype for o, s in zip(outs, plan.out_specs)):
        return False
    tdts = [s.dtype for s in specs if isinstance(s, TensorSpec)] + [o.spec.dtype for o in outs]
    return int64_checked(plan.opdef.name, plan.opdef.family, tdts)


def _as_float32(specs: Sequence[Spec]) -> list[Any]:
    """``specs`` with float16 tensors as float32: what a kernel computes a float16 op in."""
    return [replace(s, dtype=DType.FLOAT32) if isinstance(s, TensorSpec) and s.dtype is DType.FLOAT16 else s
            for s in specs]  # fmt: skip


def _rebind(t: DeviceTensor, buf: Any) -> DeviceTensor:
    """``t`` over ``buf`` (a trace replay may have swapped the buffer)."""
    return t if t.buffer is buf else DeviceTensor(buf, t.spec, t.strides, t.offset)


class _Eager:
    """A builder that runs each op as it is added: decompositions run eagerly through it."""

    def __init__(self, device: Device):
        self.device = device

    def add(self, op: str, *operands: Operand, numerics: Numerics | None = None, **attrs: Any) -> Any:
        outs = run(op, list(operands), attrs, device=self.device)
        return outs[0] if len(outs) == 1 else outs


def _run_decomposed(d: irops.OpDef, inputs: list[Operand], attrs: dict[str, Any],
                    out: Sequence[DeviceTensor] | None, dev: Device, defaults: Numerics = UNSET) -> list[DeviceTensor]:
    n = resolve(d.numerics, defaults)
    with numerics(n.fidelity, n.fp32_acc, n.approx, n.fp32_matmul, n.fp32_reduce):
        result = d.decomposition(_Eager(dev), *inputs, **attrs)  # type: ignore[misc]
    results = list(result) if isinstance(result, list | tuple) else [result]
    if out is None:
        return results
    for o, r in zip(out, results):
        run("copy", [r], out=[o])
    return list(out)
