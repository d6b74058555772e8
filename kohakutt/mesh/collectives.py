"""Collectives as HAL commands: all-gather, reduce-scatter, all-reduce, one command on each chip's stream.

The two halves of a collective meet at a barrier: each runs once its chip's earlier work is done, publishes a copy
of its input, takes the other's, writes its output, and meets the other again before going on (so neither publishes
the next replay's input before the other has read this one). Reductions add as the card's element-wise ``add``
does, in the tensors' dtype: each chip's partial value was rounded to that dtype when it was stored, so a bfloat16
sum is rounded per chip, then again after the two are added. Each half is charged the link model's time, after the
two chips' device clocks are aligned (the faster chip waits for the slower one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kohakutt.errors import KohakuTTError
from kohakutt.hal.stream import Command, enqueue_group, running
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import resolve
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels import registry
from kohakutt.kernels.tensor import DeviceTensor, decode, store
from kohakutt.mesh.placement import Partial, Placement, Replicate, Sharded
from kohakutt.mesh.storage import Local

if TYPE_CHECKING:
    from kohakutt.hal.device import Device
    from kohakutt.mesh.device import MeshDevice, MeshStream

MEET_TIMEOUT_S = 600.0  # a half waits this long for the other chip's half (a stream may run long simulated work)


class CollectiveError(KohakuTTError):
    """A collective's halves did not meet (the other chip's half failed or was never queued)."""


class _Meeting:
    def __init__(self, n: int, name: str):
        self.name = name
        self.barrier = threading.Barrier(n, timeout=MEET_TIMEOUT_S)
        self.values: list[Any] = [None] * n
        self.clocks = [0.0] * n

    def wait(self) -> None:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise CollectiveError(
                f"{self.name}: the other chip's half did not arrive (it failed, or only one chip "
                "ran the work); synchronize the mesh to see the first error"
            ) from None


def _half(
    *buffers: Any, meeting: _Meeting, rank: int, ins: list, outs: list, combine: Callable[[int, list], list[np.ndarray]]
) -> None:
    views = [b.device.backend.host_view(b) for b in buffers]
    mine = [decode(_rebind(t, buffers[i]), views[i]) for i, t in ins]
    s = running()
    meeting.values[rank] = mine
    meeting.clocks[rank] = s.device_time_ns if s is not None else 0.0
    try:
        meeting.wait()
        results = combine(rank, list(meeting.values))
    except BaseException:
        meeting.barrier.abort()
        raise
    if s is not None:
        s.device_time_ns = max(meeting.clocks)
    meeting.wait()
    for (i, t), r in zip(outs, results):
        store(_rebind(t, buffers[i]), views[i], r)


def _rebind(t: DeviceTensor, buf: Any) -> DeviceTensor:
    return t if t.buffer is buf else DeviceTensor(buf, t.spec, t.strides, t.offset)


def _half_ttnn(*buffers: Any, meeting: _Meeting, rank: int, kind: str, dim: int | None, pair: Any) -> None:
    """A collective's half on a card: the chips meet; the first calls TT-NN's collective over both chips' tensors
    (typed whole buffers ``buffers = (input, output)``) and copies each chip's result into its output."""
    meeting.values[rank] = buffers
    try:
        meeting.wait()
        if rank == 0:
            ins = [b[0].handle.tensor for b in meeting.values]
            results = pair.collective(kind, ins, dim)
            for (_, out), r in zip(meeting.values, results):
                pair.ttnn.copy(input_a=r, input_b=out.handle.tensor)
    except BaseException:
        meeting.barrier.abort()
        raise
    meeting.wait()


def _queue_ttnn(
    name: str,
    mesh: MeshDevice,
    stream: MeshStream,
    ins: Sequence[DeviceTensor],
    outs: Sequence[DeviceTensor],
    dim: int | None,
    estimate_ns: float,
) -> None:
    """On a card: each chip's input and output staged through typed whole buffers (what TT-NN's collectives take)."""
    from kohakutt.kernels import runner
    from kohakutt.mesh import ttnn_mesh

    pair = ttnn_mesh.pair_of(mesh.chips[0].chip_id)
    if pair is None:
        raise CollectiveError(f"{name}: the chips were not opened as a TT-NN mesh")
    meeting = _Meeting(mesh.size, name)
    typed_in, typed_out, cmds = [], [], []
    for c, (dev, s) in enumerate(zip(mesh.chips, stream.streams)):
        ti = DeviceTensor(dev.allocate(shape=ins[c].spec.shape, fmt=ins[c].spec.dtype.format, stream=s), ins[c].spec)
        to = DeviceTensor(dev.allocate(shape=outs[c].spec.shape, fmt=outs[c].spec.dtype.format, stream=s), outs[c].spec)
        runner.run("copy", [ins[c]], out=[ti], device=dev, stream=s)
        typed_in.append(ti)
        typed_out.append(to)
        cmds.append(
            (
                s,
                Command(
                    name,
                    _half_ttnn,
                    (ti.buffer, to.buffer),
                    {"meeting": meeting, "rank": c, "kind": name, "dim": dim, "pair": pair},
                    estimate_ns,
                ),
            )
        )
    enqueue_group(cmds)
    for c, (dev, s) in enumerate(zip(mesh.chips, stream.streams)):
        runner.run("copy", [typed_out[c]], out=[outs[c]], device=dev, stream=s)
        dev.free(typed_in[c].buffer, s)
        dev.free(typed_out[c].buffer, s)


def _queue(
    name: str,
    mesh: MeshDevice,
    stream: MeshStream,
    ins: Sequence[DeviceTensor],
    outs: Sequence[DeviceTensor],
    combine: Callable[[int, list], list[np.ndarray]],
    estimate_ns: float,
    dim: int | None = None,
) -> None:
    if mesh.chips[0].backend.name == "ttnn":
        _queue_ttnn(name, mesh, stream, ins, outs, dim, estimate_ns)
        return
    meeting = _Meeting(mesh.size, name)
    cmds = []
    for c, s in enumerate(stream.streams):
        bufs: list[Any] = []
        slot: dict[int, int] = {}

        def at(t: DeviceTensor, bufs: list = bufs, slot: dict = slot) -> int:
            if t.buffer.id not in slot:
                t.buffer.check_live(name)
                slot[t.buffer.id] = len(bufs)
                bufs.append(t.buffer)
            return slot[t.buffer.id]

        ins_c = [(at(ins[c]), ins[c])]
        outs_c = [(at(outs[c]), outs[c])]
        cmds.append(
            (
                s,
                Command(
                    name,
                    _half,
                    tuple(bufs),
                    {"meeting": meeting, "rank": c, "ins": ins_c, "outs": outs_c, "combine": combine},
                    estimate_ns,
                ),
            )
        )
    enqueue_group(cmds)


def new_local(dev: Device, spec: TensorSpec, stream: Any) -> DeviceTensor:
    """A new contiguous row-major device tensor of ``spec`` on ``dev`` from its caching allocator."""
    return DeviceTensor(dev.allocate(spec.numel * spec.dtype.itemsize, cached=True, stream=stream), spec)


def _add(specs: tuple[TensorSpec, TensorSpec]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The card's element-wise add of two tensors of ``specs`` (the simulator's model of TT-NN's add)."""
    impl = registry.lookup("add", "sim")
    d = irops.get("add")
    num = resolve(d.numerics)
    attrs = d.bind_attrs(None)
    out = irops.infer("add", list(specs))

    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return impl.fn(registry.SimCall("add", [a, b], list(specs), attrs, num, out))  # type: ignore[union-attr]

    return add


def _bytes(spec: TensorSpec) -> int:
    return spec.numel * spec.dtype.itemsize


def all_gather(x: Local, mesh: MeshDevice, stream: MeshStream, temps: list) -> Local:
    """``Sharded(d)`` -> ``Replicate``: each chip gets the other's shard."""
    p = x.placement
    assert isinstance(p, Sharded)
    outs = [new_local(d, x.spec, s) for d, s in zip(mesh.chips, stream.streams)]
    temps.extend(outs)
    dim = p.dim

    def combine(rank: int, values: list) -> list[np.ndarray]:
        return [np.concatenate([v[0] for v in values], axis=dim)]

    shard = max(_bytes(v.spec) for v in x.views)
    est = _streamed_ns(mesh, shard, _bytes(x.spec))
    _queue("all_gather", mesh, stream, x.views, outs, combine, est, dim)
    mesh.stats.count("all_gather", shard)
    return Local(x.spec, Replicate(), tuple(outs))


def all_reduce(x: Local, mesh: MeshDevice, stream: MeshStream, temps: list) -> Local:
    """``Partial`` -> ``Replicate``: each chip gets the sum (a reduce-scatter then an all-gather on a 1 x 2 mesh)."""
    outs = [new_local(d, x.spec, s) for d, s in zip(mesh.chips, stream.streams)]
    temps.extend(outs)
    add = _add((x.spec, x.spec))

    def combine(rank: int, values: list) -> list[np.ndarray]:
        acc = values[0][0]
        for v in values[1:]:
            acc = add(acc, v[0])
        return [acc]

    nb = _bytes(x.spec)
    est = _streamed_ns(mesh, nb / 2, 3 * nb / 2) + _streamed_ns(mesh, nb / 2, nb)  # reduce-scatter, all-gather
    _queue("all_reduce", mesh, stream, x.views, outs, combine, est)
    mesh.stats.count("all_reduce", nb)
    return Local(x.spec, Replicate(), tuple(outs))


def reduce_scatter(x: Local, target: Sharded, mesh: MeshDevice, stream: MeshStream, temps: list) -> Local:
    """``Partial`` -> ``Sharded(d, sizes)``: each chip gets its part of the sum."""
    specs = [_shard_spec(x.spec, target, c) for c in range(mesh.size)]
    outs = [new_local(d, sp, s) for d, sp, s in zip(mesh.chips, specs, stream.streams)]
    temps.extend(outs)
    dim, starts, sizes = target.dim, target.starts, target.sizes
    add = _add((x.spec, x.spec))

    def combine(rank: int, values: list) -> list[np.ndarray]:
        parts = [np.take(v[0], range(starts[rank], starts[rank] + sizes[rank]), axis=dim) for v in values]
        acc = parts[0]
        for v in parts[1:]:
            acc = add(acc, v)
        return [acc]

    part = max(_bytes(sp) for sp in specs)
    est = _streamed_ns(mesh, part, 3 * part)
    _queue("reduce_scatter", mesh, stream, x.views, outs, combine, est, dim)
    mesh.stats.count("reduce_scatter", part)
    return Local(x.spec, target, tuple(outs))


def _streamed_ns(mesh: MeshDevice, link_bytes: float, dram_bytes: float) -> float:
    """A collective step's time: the link's latency, then its bytes over the link and through each chip's DRAM at
    once (TT-NN's collectives stream pages from the Ethernet cores into DRAM as they arrive), the slower of the two."""
    link = mesh.link
    return (link.latency_s + max(link_bytes / link.bytes_per_s, dram_bytes / mesh.card.dram_bytes_per_s)) * 1e9


def _shard_spec(spec: TensorSpec, p: Sharded, chip: int) -> TensorSpec:
    shape = list(spec.shape)
    shape[p.dim] = p.sizes[chip]
    return spec.with_(shape=tuple(shape))


def narrow(x: Local, target: Sharded) -> Local:
    """``Replicate`` -> ``Sharded``: each chip keeps its part of its copy (a view: no command, no link)."""
    views = []
    for c, v in enumerate(x.views):
        st = v.strides if v.strides is not None else _contig(v.spec.shape)
        shape = list(v.spec.shape)
        shape[target.dim] = target.sizes[c]
        off = v.offset + target.starts[c] * st[target.dim] if target.sizes[c] else v.offset
        views.append(DeviceTensor(v.buffer, v.spec.with_(shape=tuple(shape)), tuple(st), off))
    return Local(x.spec, target, tuple(views))


def _contig(shape: Sequence[int]) -> tuple[int, ...]:
    from kohakutt.mesh.layout import contiguous

    return contiguous(shape)


def link_bytes(src: Placement, dst: Placement, nbytes: int) -> float:
    """Bytes a chip receives over the link to turn a tensor of ``nbytes`` placed ``src`` into ``dst`` (the decision
    cost): a narrowing is free, a gather takes the other's shard, a reduction of a 1 x 2 mesh half or all of it."""
    if src == dst:
        return 0.0
    if isinstance(src, Replicate):
        return 0.0 if isinstance(dst, Sharded) else float(nbytes)  # to Partial: never chosen by a rule
    if isinstance(src, Sharded):
        if isinstance(dst, Sharded) and dst.dim == src.dim:
            return nbytes / 2  # re-split the same dim: a gather, then narrow
        return nbytes / 2 if isinstance(dst, Replicate | Sharded) else float(nbytes)
    if isinstance(src, Partial):
        return nbytes / 2 if isinstance(dst, Sharded) else float(nbytes)
    return float(nbytes)
