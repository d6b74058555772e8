"""The mesh device: chips opened as one, the link between them, and the streams a mesh op queues on.

``open_mesh((0, 1))`` opens both chips (each a HAL :class:`~kohakutt.hal.Device` with its own memory, allocator,
statistics and streams) and returns the :class:`MeshDevice` that joins them. A mesh op queues one command on each
chip's current stream; a collective queues one on each and they meet (``kohakutt.mesh.collectives``).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kohakutt import hal
from kohakutt.errors import DeviceError, TraceError
from kohakutt.hal.device import Device
from kohakutt.hal.stream import Event, Stream

if TYPE_CHECKING:
    from kohakutt.mesh.trace import MeshTrace

MESH_SHAPE = (1, 2)


@dataclass(frozen=True)
class Link:
    """The chips' link: a P150A pair is joined by one QSFP-DD 800G cable (Tenstorrent's validated 1 x 2 mesh).

    800 Gb/s is the port's line rate, 100 GB/s each way, both ways at once. ``latency_s`` is an assumption (no
    figure is published for Blackhole): the Ethernet cores' handshake per transfer."""

    name: str = "one QSFP-DD 800G cable"
    bytes_per_s: float = 100e9
    latency_s: float = 1e-6

    def transfer_ns(self, nbytes: float) -> float:
        """One transfer of ``nbytes`` each way at once."""
        return (self.latency_s + nbytes / self.bytes_per_s) * 1e9


@dataclass
class MeshStats:
    """What the mesh has done since it opened (or since :meth:`reset`)."""

    collectives: Counter[str] = field(default_factory=Counter)  # kind -> count
    bytes: Counter[str] = field(default_factory=Counter)  # kind -> bytes each chip received
    fallbacks: Counter[str] = field(default_factory=Counter)  # op -> times its inputs were gathered for want of a rule
    ops: int = 0
    decisions: Counter[str] = field(default_factory=Counter)  # "hit" / "miss" of the decision cache
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, kind: str, nbytes: int) -> None:
        with self.lock:
            self.collectives[kind] += 1
            self.bytes[kind] += int(nbytes)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "collectives": dict(self.collectives),
                "bytes": dict(self.bytes),
                "total": sum(self.collectives.values()),
                "total_bytes": sum(self.bytes.values()),
                "fallbacks": dict(self.fallbacks),
                "ops": self.ops,
                "decisions": dict(self.decisions),
            }

    def reset(self) -> None:
        with self.lock:
            self.collectives.clear()
            self.bytes.clear()
            self.fallbacks.clear()
            self.decisions.clear()
            self.ops = 0


class MeshEvent:
    """An event on a mesh stream: one event per chip."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.device_time_ns = 0.0

    def record(self, stream: MeshStream) -> MeshEvent:
        stream.record_event(self)
        return self

    def query(self) -> bool:
        return all(e.query() for e in self.events)

    def synchronize(self) -> None:
        for e in self.events:
            e.synchronize()

    def wait(self, stream: MeshStream) -> None:
        stream.wait_event(self)

    def elapsed_ms(self, end: MeshEvent) -> float:
        """Simulated device time between the events: the slower chip's."""
        return max(a.elapsed_ms(b) for a, b in zip(self.events, end.events))


class MeshStream:
    """A stream on the mesh: one stream per chip, in chip order. Mesh ops queue on each."""

    def __init__(self, mesh: MeshDevice, streams: tuple[Stream, ...], name: str = "mesh"):
        self.device = mesh
        self.streams = streams
        self.name = name

    def synchronize(self) -> None:
        errors = []
        for s in self.streams:
            try:
                s.synchronize()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def query(self) -> bool:
        return all(s.query() for s in self.streams)

    def record_event(self, event: MeshEvent | None = None) -> MeshEvent:
        event = event or MeshEvent()
        event.events = [s.record_event() for s in self.streams]
        return event

    def wait_event(self, event: MeshEvent | Event) -> None:
        for i, s in enumerate(self.streams):
            s.wait_event(event.events[i] if isinstance(event, MeshEvent) else event)

    @property
    def capturing(self) -> MeshTrace | None:
        return self.device._capture

    def __repr__(self) -> str:
        return f"MeshStream({self.name}, {[s.name for s in self.streams]})"


class _Allocators:
    def __init__(self, mesh: MeshDevice):
        self.mesh = mesh

    def reset_peak(self) -> None:
        for d in self.mesh.chips:
            d.allocator.reset_peak()


class MeshDevice:
    """Chips opened as one device. Get it with :func:`open_mesh`."""

    def __init__(self, chips: tuple[Device, ...], index: int, link: Link = Link()):
        self.chips = chips
        self.index = index  # the frontends' device index for the mesh: the first one after the chips
        self.chip_id = chips[0].chip_id  # the chip whose random stream the mesh draws from
        self.card = chips[0].card
        self.link = link
        self.stats = MeshStats()
        self.allocator = _Allocators(self)
        self.default_stream = MeshStream(self, tuple(d.default_stream for d in chips), "default")
        self._streams: dict[tuple[int, ...], MeshStream] = {}
        self._capture: MeshTrace | None = None
        self._closed = False
        self.storages: dict[int, Any] = {}  # id -> live MeshStorage (freed ones leave it, as a chip's buffers do)

    @property
    def size(self) -> int:
        return len(self.chips)

    @property
    def shape(self) -> tuple[int, int]:
        return MESH_SHAPE

    @property
    def closed(self) -> bool:
        return self._closed or any(d._closed for d in self.chips)

    def check_open(self, use: str) -> None:
        if self.closed:
            raise DeviceError(
                f"{use}: the mesh of chips {self.chip_ids} is closed; open it again with "
                f"kohakutt.mesh({list(self.chip_ids)})"
            )

    @property
    def chip_ids(self) -> tuple[int, ...]:
        return tuple(d.chip_id for d in self.chips)

    @property
    def current_stream(self) -> MeshStream:
        for d in self.chips:
            if d._current.stream is not None:
                break
        else:
            return self.default_stream  # no chip has a stream of this thread's choosing: the common case
        streams = tuple(d.current_stream for d in self.chips)
        if streams == self.default_stream.streams:
            return self.default_stream
        ms = self._streams.get(tuple(id(s) for s in streams))
        if ms is None:
            ms = self._streams[tuple(id(s) for s in streams)] = MeshStream(self, streams, "current")
        return ms

    def new_stream(self, name: str | None = None) -> MeshStream:
        streams = tuple(d.new_stream(name) for d in self.chips)
        return MeshStream(self, streams, name or f"mesh-stream{len(self._streams)}")

    def free(self, storage: Any, stream: MeshStream | None = None) -> None:
        """Free a mesh storage after the work queued on ``stream`` (as :meth:`Device.free` frees a buffer)."""
        storage.free(stream if isinstance(stream, MeshStream) else None)

    def synchronize(self) -> None:
        errors = []
        for d in self.chips:
            try:
                d.synchronize()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def memory_stats(self) -> dict[str, int]:
        """The chips' allocator statistics added up (each chip's are :meth:`Device.memory_stats`)."""
        total: Counter[str] = Counter()
        for d in self.chips:
            total.update(d.memory_stats())
        return dict(total)

    def empty_cache(self) -> None:
        for d in self.chips:
            d.empty_cache()

    @contextmanager
    def capture(self, name: str = "trace", stream: MeshStream | None = None) -> Iterator[MeshTrace]:
        """Record the commands queued on the mesh stream in the block, on every chip, as one :class:`MeshTrace`."""
        from kohakutt.mesh.trace import MeshTrace

        self.check_open("capture")
        if self._capture is not None:
            raise TraceError("the mesh is already capturing a trace; end that capture first")
        s = stream or self.current_stream
        trace = MeshTrace(self, name)
        with ExitStack() as stack:
            for d, cs in zip(self.chips, s.streams):
                trace.traces.append(stack.enter_context(d.capture(f"{name}@{d.chip_id}", cs)))
            self._capture = trace
            try:
                yield trace
            finally:
                self._capture = None
                trace._ended = True

    def close(self) -> None:
        """Drop the mesh's reference to its chips (each closes when its last user does)."""
        if self._closed:
            return
        self._closed = True
        with _lock:
            if _meshes.get(self.chip_ids) is self:
                del _meshes[self.chip_ids]
        for d in self.chips:
            d.close()

    def describe(self) -> dict[str, Any]:
        return {
            "mesh": list(MESH_SHAPE),
            "chips": list(self.chip_ids),
            "index": self.index,
            "link": self.link.name,
            "link_bytes_per_s": self.link.bytes_per_s,
            "link_latency_s": self.link.latency_s,
            "backend": self.chips[0].backend.name,
        }

    def __repr__(self) -> str:
        return f"MeshDevice(chips={list(self.chip_ids)}, {'closed' if self.closed else 'open'})"


_lock = threading.RLock()
_meshes: dict[tuple[int, ...], MeshDevice] = {}


def mesh_index() -> int | None:
    """The frontends' device index of the mesh on this host (the first index after the chips), or None when the
    host has fewer than two chips."""
    n = hal.device_count()
    return n if n >= 2 else None


def open_mesh(chips: tuple[int, ...] | list[int] = (0, 1)) -> MeshDevice:
    """Open ``chips`` as one device (the same :class:`MeshDevice` while it is open). Built and tested as 1 x 2."""
    chips = tuple(int(c) for c in chips)
    n = hal.device_count()
    if len(chips) != 2 or len(set(chips)) != 2:
        raise DeviceError(f"a mesh is two distinct chips (a 1 x 2 mesh), got {list(chips)}")
    if n < 2:
        raise DeviceError(f"a mesh needs two chips and this host has {n}; on the simulator set KTT_SIM_DEVICES=2")
    bad = [c for c in chips if not 0 <= c < n]
    if bad:
        raise DeviceError(f"no chip {bad[0]}: this host has {n} (ids 0..{n - 1})")
    with _lock:
        mesh = _meshes.get(chips)
        if mesh is not None and not mesh.closed:
            return mesh
        other = next((m for m in _meshes.values() if not m.closed), None)
        if other is not None:
            raise DeviceError(f"the mesh of chips {list(other.chip_ids)} is open; one mesh at a time (close it first)")
        devices = []
        if hal.backend_choice()[0] == "ttnn":  # the pair opens as one TT-NN mesh, fabric first
            from kohakutt.mesh import ttnn_mesh

            ttnn_mesh.open_pair(chips)
        try:
            for c in chips:
                devices.append(hal.open_device(c))
        except BaseException:
            for d in devices:
                d.close()
            raise
        mesh = MeshDevice(tuple(devices), n)
        _meshes[chips] = mesh
        return mesh


def open_meshes() -> list[MeshDevice]:
    with _lock:
        return [m for m in _meshes.values() if not m.closed]
