"""Running an IR op: infer outputs, pick the implementation, queue one command on the device's stream.

``run("add", [a, b])`` returns the output tensors at once; the work happens on the stream's worker. The command
carries the op's resolved numerics and the simulator's time estimate, and names the op if it fails.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.device import Device
from kohakutt.hal.stream import Command, Stream
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import Numerics, numerics, resolve
from kohakutt.ir.ops import ScalarSpec, ShapeError, Spec, TensorSpec
from kohakutt.kernels import cost, registry
from kohakutt.kernels.tensor import DeviceTensor, decode, empty, store

Operand = DeviceTensor | float | int | bool

_rng_lock = threading.Lock()
_rng: dict[int, list[int]] = {}  # chip -> [seed, offset]


def manual_seed(device: Device, seed: int) -> None:
    """Restart ``device``'s random stream at ``seed``."""
    with _rng_lock:
        _rng[device.chip_id] = [int(seed) & (2**64 - 1), 0]


def rng_state(device: Device) -> tuple[int, int]:
    with _rng_lock:
        return tuple(_rng.setdefault(device.chip_id, [0, 0]))  # type: ignore[return-value]


def set_rng_state(device: Device, state: tuple[int, int]) -> None:
    with _rng_lock:
        _rng[device.chip_id] = [int(state[0]), int(state[1])]


def _next_seed(device: Device, draws: int) -> tuple[int, int]:
    with _rng_lock:
        st = _rng.setdefault(device.chip_id, [0, 0])
        seed = (st[0], st[1])
        st[1] += max(1, -(-draws // 4))  # Philox yields four 64-bit words per counter step
        return seed


def spec_of(x: Operand) -> Spec:
    return x.spec if isinstance(x, DeviceTensor) else ScalarSpec(x)


def run(op: str, inputs: Sequence[Operand], attrs: dict[str, Any] | None = None, *,
        out: Sequence[DeviceTensor] | None = None, device: Device | None = None, stream: Stream | None = None,
        provider: str | None = None) -> list[DeviceTensor]:
    """Queue IR op ``op`` on ``inputs``; return its outputs (``out`` when given, written with a cast to their dtype).

    An op with no implementation on the device's backend runs its decomposition; without one it raises
    :class:`KohakuTTUnsupportedOperator`."""
    d = irops.get(op)
    d.check_arity(len(inputs))
    attrs = d.bind_attrs(attrs)
    specs = [spec_of(x) for x in inputs]
    out_specs = d.infer(specs, attrs)
    tensors = [x for x in inputs if isinstance(x, DeviceTensor)]
    dev = device or (tensors[0].device if tensors else (out[0].device if out else None))
    if dev is None:
        raise ShapeError(f"{op}: no tensor operand to take the device from; pass device=")
    for t in tensors + list(out or []):
        if t.device is not dev:
            raise ShapeError(f"{op}: expected all tensors on chip {dev.chip_id}, but found one on chip "
                             f"{t.device.chip_id}; move it with .to() first")
    impl = registry.lookup(op, dev.backend.name, provider)
    if impl is None:
        if d.decomposition is not None:
            return _run_decomposed(d, list(inputs), attrs, out, dev)
        raise KohakuTTUnsupportedOperator(
            f"{op} has no implementation on the {dev.backend.name} backend and no decomposition")
    num = resolve(d.numerics)
    if out is None:
        outs = [empty(dev, s) for s in out_specs]
    else:
        outs = list(out)
        if len(outs) != len(out_specs):
            raise ShapeError(f"{op} has {len(out_specs)} output(s), got {len(outs)} out tensors")
        for o, s in zip(outs, out_specs):
            if o.shape != s.shape:
                raise ShapeError(f"{op}: out tensor has shape {o.shape}, the result has {s.shape}")
    est = (impl.estimate or cost.default)(specs, out_specs, attrs, num, dev.card)
    buffers, in_views, out_views = _layout(inputs, outs)
    seed = _next_seed(dev, sum(s.numel for s in out_specs)) if impl.random else (0, 0)
    dev.enqueue(Command(op, _execute, buffers,
                        {"impl": impl, "in_views": in_views, "out_views": out_views, "in_specs": specs,
                         "attrs": attrs, "numerics": num, "out_specs": out_specs, "seed": seed}, est), stream)
    return outs


def _layout(inputs: Sequence[Operand], outs: Sequence[DeviceTensor]) -> tuple[tuple, list, list]:
    """The distinct buffers a command uses, and each operand as (buffer index, view) or a constant."""
    index: dict[int, int] = {}
    buffers: list = []

    def slot(t: DeviceTensor) -> int:
        if t.buffer.id not in index:
            t.buffer.check_live("an op operand")
            index[t.buffer.id] = len(buffers)
            buffers.append(t.buffer)
        return index[t.buffer.id]

    in_views = [(slot(x), x) if isinstance(x, DeviceTensor) else (None, x) for x in inputs]
    out_views = [(slot(o), o) for o in outs]
    return tuple(buffers), in_views, out_views


def _execute(*buffers: Any, impl: registry.Impl, in_views: list, out_views: list, in_specs: list[Spec],
             attrs: dict[str, Any], numerics: Numerics, out_specs: list[TensorSpec], seed: tuple[int, int]) -> None:
    views = [b.device.backend.host_view(b) for b in buffers]
    values = [decode(_rebind(t, buffers[i]), views[i]) if i is not None else t for i, t in in_views]
    call = registry.SimCall(impl.op, values, in_specs, attrs, numerics, out_specs, seed)
    result = impl.fn(call)
    results = list(result) if isinstance(result, list | tuple) else [result]
    if len(results) != len(out_views):
        raise ShapeError(f"{impl} returned {len(results)} arrays for {len(out_views)} outputs")
    for (i, t), r in zip(out_views, results):
        store(_rebind(t, buffers[i]), views[i], r)


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
                    out: Sequence[DeviceTensor] | None, dev: Device) -> list[DeviceTensor]:
    n = resolve(d.numerics)
    with numerics(n.fidelity, n.fp32_acc, n.approx):
        result = d.decomposition(_Eager(dev), *inputs, **attrs)  # type: ignore[misc]
    results = list(result) if isinstance(result, list | tuple) else [result]
    if out is None:
        return results
    for o, r in zip(out, results):
        run("copy", [r], out=[o])
    return list(out)
