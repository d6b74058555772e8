"""The device: one open chip per process, shared by every frontend and reference-counted.

``open_device(chip)`` opens the chip the first time and returns the same :class:`Device` after that; each user calls
``close()`` once and the last one really closes it. The backend is chosen by ``KTT_BACKEND``.
"""

from __future__ import annotations

import atexit
import bisect
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

from kohakutt import config
from kohakutt.errors import BackendUnavailable, BufferUseError, DeviceError, FormatError, TraceError
from kohakutt.hal.allocator import Allocator
from kohakutt.hal.backends.base import Backend
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.cache import Block, BlockCache
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import Format, Layout, MemoryKind
from kohakutt.hal.layout import nbytes as layout_nbytes
from kohakutt.hal.profiler import Profiler
from kohakutt.hal.stream import Command, Stream
from kohakutt.hal.trace import Trace

PROFILER = Profiler()
_lock = threading.RLock()
_devices: dict[int, Device] = {}
_next_addresses: dict[int, int] = {}  # chip -> next free address, kept across reopening: no address is reused

RAW_PAGE_SIZE = 2048  # page size of a buffer with no shape (a frontend's flat storage)


def _backend_class(name: str) -> type[Backend]:
    if name == "sim":
        from kohakutt.hal.backends.sim import SimBackend

        return SimBackend
    from kohakutt.hal.backends.ttnn_backend import TTNNBackend

    return TTNNBackend


def backend_choice() -> tuple[str, str]:
    """The backend ``KTT_BACKEND`` picks here and why, without opening anything."""
    wanted = config.get("KTT_BACKEND")
    if wanted == "sim":
        return "sim", "KTT_BACKEND=sim (the default): the simulated P150A"
    ok, why = _backend_class("ttnn").available()
    if wanted == "ttnn":
        return "ttnn", f"KTT_BACKEND=ttnn: {why}"
    if ok:
        return "ttnn", f"KTT_BACKEND=auto and a card answered: {why}"
    return "sim", f"KTT_BACKEND=auto and no card answered ({why}): the simulated P150A"


def device_count() -> int:
    """How many chips the chosen backend has (the simulated host has ``KTT_SIM_DEVICES``)."""
    name, _ = backend_choice()
    if name == "sim":
        return int(config.get("KTT_SIM_DEVICES"))
    from kohakutt.hal.backends.ttnn_backend import TTNNBackend

    return TTNNBackend.device_count()


def open_device(chip: int = 0) -> Device:
    """Open chip ``chip`` (or take another reference to it when it is already open)."""
    with _lock:
        dev = _devices.get(chip)
        if dev is not None:
            dev._refs += 1
            return dev
        n = device_count()
        if not 0 <= chip < n:
            raise DeviceError(f"no chip {chip}: this host has {n} (ids 0..{n - 1}); "
                              "for more simulated chips set KTT_SIM_DEVICES")
        name, why = backend_choice()
        backend = _backend_class(name)(chip)
        try:
            backend.open()
        except BackendUnavailable:
            raise
        except Exception as e:
            raise BackendUnavailable(f"could not open chip {chip} with the {name} backend ({why}): {e}") from e
        dev = Device(chip, backend, why, backend.card())
        _devices[chip] = dev
    from kohakutt.plugins import plugin_manager

    plugin_manager().hook.ktt_device_opened(device=dev)
    return dev


def open_devices() -> list[Device]:
    """The devices open now."""
    with _lock:
        return list(_devices.values())


class _ThreadStream(threading.local):
    stream: Stream | None = None  # this thread's current stream (None: the default stream)


class Device:
    """One chip: its allocator, its streams, its backend. Get it with :func:`open_device`."""

    def __init__(self, chip_id: int, backend: Backend, reason: str, card: CardSpec = P150A):
        self.chip_id = chip_id
        self.backend = backend
        self.backend_reason = reason
        self.card = card
        self.allocator = Allocator(card, config.get("KTT_L1_BUDGET"))
        self.profiler = PROFILER
        self.launch_blocking = bool(config.get("KTT_LAUNCH_BLOCKING"))
        self._refs = 1
        self._closed = False
        self._streams: list[Stream] = []
        self.default_stream = self.new_stream("default")
        self._live: dict[int, Buffer] = {}
        self._cache = BlockCache()
        self._cache_lock = threading.Lock()
        self._current = _ThreadStream()
        # Each buffer gets a stable address of its own: what frontends hand out as a data pointer.
        self._next_address = _next_addresses.get(chip_id, (chip_id + 1) << 48)
        self._starts: list[int] = []  # sorted addresses of live buffers, for interior-pointer lookups
        self._at: dict[int, Buffer] = {}
        self._addr_lock = threading.Lock()  # not the module lock: close() holds that while the worker frees

    # ---------------------------------------------------------------------------------------------- lifetime
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def refcount(self) -> int:
        return self._refs

    def _check_open(self, use: str) -> None:
        if self._closed:
            raise DeviceError(f"{use}: chip {self.chip_id} is closed; open it again with open_device({self.chip_id})")

    def close(self) -> None:
        """Drop one reference; the last one synchronizes, frees every buffer and closes the chip."""
        from kohakutt.plugins import plugin_manager

        with _lock:
            if self._closed:
                return
            self._refs -= 1
            if self._refs > 0:
                return
            try:
                self.synchronize()
            finally:
                plugin_manager().hook.ktt_device_closing(device=self)
                for s in self._streams:
                    s.close()
                for buf in list(self._live.values()):
                    self._release(buf)
                for blk in self._cache.take_all():
                    self._release_block(blk)
                self.backend.close()
                self._closed = True
                _devices.pop(self.chip_id, None)

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------ streams
    def new_stream(self, name: str | None = None) -> Stream:
        self._check_open("new_stream")
        s = Stream(self, name or f"stream{len(self._streams)}")
        self._streams.append(s)
        return s

    @property
    def current_stream(self) -> Stream:
        return self._current.stream or self.default_stream

    @contextmanager
    def use_stream(self, stream: Stream) -> Iterator[Stream]:
        """Make ``stream`` this thread's current stream for the block."""
        prev = self._current.stream
        self._current.stream = stream
        try:
            yield stream
        finally:
            self._current.stream = prev

    def enqueue(self, cmd: Command, stream: Stream | None = None) -> None:
        """Queue a command on ``stream`` (the current stream by default)."""
        self._check_open(cmd.name)
        (stream or self.current_stream).enqueue(cmd)

    def synchronize(self) -> None:
        """Wait for every stream, then for the chip itself (the backend's own queues); raise the first queued error,
        naming its command."""
        from kohakutt.plugins import plugin_manager

        errors = []
        for s in self._streams:
            try:
                s.synchronize()
            except Exception as e:
                errors.append(e)
        if not self._closed:
            try:
                self.backend.synchronize()
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]
        plugin_manager().hook.ktt_device_synchronized(device=self)

    # ------------------------------------------------------------------------------------------------ buffers
    def allocate(self, nbytes: int | None = None, *, shape: tuple[int, ...] | None = None,
                 fmt: Format | str = Format.UINT8, layout: Layout | str = Layout.ROW_MAJOR,
                 kind: MemoryKind | str = MemoryKind.DRAM, page_size: int | None = None, cached: bool = False,
                 stream: Stream | None = None) -> Buffer:
        """A new buffer: ``nbytes`` raw bytes, or room for a tensor of ``shape`` in ``fmt`` and ``layout``.

        ``cached=True``: when the buffer is freed its memory stays reserved in the device's cache, and this call
        takes such a block of the same size, kind, layout, format and page size when work on ``stream`` (the
        current stream by default) may use it (see :mod:`kohakutt.hal.cache`). A cached block holds the values its
        last buffer had, as on the card; a fresh buffer is zeros on the simulator."""
        self._check_open("allocate")
        if (shape is None and page_size is None and fmt is Format.UINT8 and layout is Layout.ROW_MAJOR
                and kind is MemoryKind.DRAM and type(nbytes) is int and nbytes >= 0):  # raw bytes: the common case
            if cached and nbytes and self._cache.nbytes:
                buf = self._reuse(nbytes, None, fmt, layout, stream)
                if buf is not None:
                    return buf
            return self._allocate(nbytes, None, fmt, layout, kind, RAW_PAGE_SIZE, cached, stream)
        fmt, layout, kind = Format.of(fmt), Layout.of(layout), MemoryKind.of(kind)
        if layout is Layout.ROW_MAJOR and fmt.is_block:
            raise FormatError(f"{fmt.value} exists only in tile layout; allocate it with layout='tile'")
        if shape is not None:
            shape = tuple(int(s) for s in shape)
            need = layout_nbytes(shape, fmt, layout)
            if nbytes is not None and nbytes != need:
                raise FormatError(f"nbytes={nbytes} does not match shape {shape} in {fmt.value} {layout.value} "
                                  f"({need} bytes); give one or the other")
            nbytes = need
        if nbytes is None or int(nbytes) < 0:
            raise FormatError(f"allocate needs nbytes >= 0 or a shape, got nbytes={nbytes!r}")
        nbytes = int(nbytes)
        if page_size is None:
            if layout is Layout.TILE:
                page_size = fmt.tile_bytes
            elif shape:
                page_size = max(1, shape[-1] * fmt.itemsize)
            else:
                page_size = RAW_PAGE_SIZE
        if page_size <= 0:
            raise FormatError(f"page_size must be positive, got {page_size}")
        return self._allocate(nbytes, shape, fmt, layout, kind, page_size, cached, stream)

    def _reuse(self, key: Any, shape: tuple[int, ...] | None, fmt: Format, layout: Layout,
               stream: Stream | None) -> Buffer | None:
        """A new buffer over a cached block of ``key`` that work on ``stream`` may use, or None."""
        cur = self.current_stream
        s = stream or cur
        if cur._capture is not None or s._capture is not None:  # a trace owns what it allocates: fresh memory
            return None
        with self._cache_lock:
            blk = self._cache.take(key, s)
        if blk is None:
            return None
        self.allocator.unpark(blk.alloc)
        buf = Buffer(self, blk.alloc, layout, fmt, shape)
        buf.handle, buf.cached, buf.cache_key = blk.handle, True, key
        self._map(buf)
        return buf

    def _allocate(self, nbytes: int, shape: tuple[int, ...] | None, fmt: Format, layout: Layout, kind: MemoryKind,
                  page_size: int, cached: bool, stream: Stream | None) -> Buffer:
        key = _block_key(nbytes, shape, fmt, layout, kind, page_size) if cached else None
        if cached and nbytes and self._cache.nbytes and type(key) is not int:  # raw bytes tried in allocate
            buf = self._reuse(key, shape, fmt, layout, stream)
            if buf is not None:
                return buf
        trace = self.current_stream.capturing
        alloc = self.allocator.try_allocate(nbytes, kind, page_size)
        if alloc is None and len(self._cache):  # cached blocks go back before memory runs out
            self.empty_cache()
            alloc = self.allocator.try_allocate(nbytes, kind, page_size)
        if alloc is None:
            alloc = self.allocator.allocate(nbytes, kind, page_size)  # raises the out-of-memory error, counted
        buf = Buffer(self, alloc, layout, fmt, shape)
        buf.cached, buf.cache_key = cached, key
        try:
            buf.handle = self.backend.create(buf)
        except BaseException:
            self.allocator.release(alloc)
            raise
        self._map(buf)
        if trace is not None:
            buf.trace = trace
            trace.owned.append(buf)
        return buf

    def _map(self, buf: Buffer) -> None:
        """Make ``buf`` live and give it an address of its own."""
        self._live[buf.id] = buf
        if buf.nbytes:
            with self._addr_lock:
                buf.data_ptr = self._next_address
                self._next_address += -(-buf.nbytes // 4096) * 4096 + 4096  # a gap keeps neighbours apart
                _next_addresses[self.chip_id] = self._next_address
                self._starts.append(buf.data_ptr)  # addresses only grow: the list stays sorted
                self._at[buf.data_ptr] = buf

    def _unmap(self, buf: Buffer) -> None:
        self._live.pop(buf.id, None)
        if buf.data_ptr:
            with self._addr_lock:
                self._at.pop(buf.data_ptr, None)
                i = bisect.bisect_left(self._starts, buf.data_ptr)
                if i < len(self._starts) and self._starts[i] == buf.data_ptr:
                    self._starts.pop(i)

    def free(self, buf: Buffer, stream: Stream | None = None, *, used_on: tuple[Stream, ...] = ()) -> None:
        """Free ``buf`` once the work queued before this call is done (frees are ordered on ``stream``; work queued
        on the streams in ``used_on`` before the call is waited for too). A cached buffer's memory is parked in the
        device's cache at once: reusable by later work on ``stream``, by other streams once the work is done."""
        if buf.device is not self:
            raise BufferUseError(f"{buf!r} belongs to chip {buf.device.chip_id}, not chip {self.chip_id}")
        if buf._state != "live":
            raise BufferUseError(f"{buf!r} was already freed")
        if self._closed:
            return  # closing released it
        s = stream or self.current_stream
        trace = s.capturing
        if buf.trace is not None and not buf.trace.released:
            trace = buf.trace  # a live trace owns it: its replays still write it, until that trace is released
        if trace is not None:  # the replay still uses it
            trace.deferred_frees.append(buf)
            return
        if buf.cached and 0 < buf._alloc.bank_bytes * buf._alloc.banks <= self._cache.block_limit:
            self._park(buf, s, used_on)
            return
        buf._state = "freeing"
        if used_on:
            marks = [(o, o.mark()) for o in used_on if o is not s]
            s.enqueue(Command("wait_streams", _wait_marks, (), {"marks": marks}))
        s.enqueue(Command("free", self._release, (buf,)))

    def _park(self, buf: Buffer, stream: Stream, used_on: tuple[Stream, ...]) -> None:
        buf._state = "freed"
        self._unmap(buf)
        self.allocator.park(buf._alloc)
        marks = ((stream, stream._submitted),)
        if used_on:
            marks += tuple((o, o.mark()) for o in used_on if o is not stream)
        with self._cache_lock:
            evicted = self._cache.put(Block(buf.cache_key, buf._alloc, buf.handle, buf, marks))
        for blk in evicted:
            if all(s.passed(m) for s, m in blk.marks):
                self._release_block(blk)
            else:  # released once its streams are done with it
                others = [(s, m) for s, m in blk.marks[1:]]
                blk.marks[0][0].enqueue(Command("free", self._release_block_after, (), {"block": blk,
                                                                                        "marks": others}))

    def _release(self, buf: Buffer) -> None:
        if buf._state == "freed":
            return
        buf._state = "freed"
        self._unmap(buf)
        try:
            self.backend.destroy(buf)
        finally:
            self.allocator.release(buf._alloc)

    def _release_block(self, blk: Block) -> None:
        try:
            self.backend.destroy(blk.owner)
        finally:
            self.allocator.release(blk.alloc, cached=True)

    def _release_block_after(self, *, block: Block, marks: list[tuple[Stream, int]]) -> None:
        _wait_marks(marks=marks)
        self._release_block(block)

    def empty_cache(self) -> None:
        """Give every cached block back to the allocator, after the work that still uses it (waits for it)."""
        with self._cache_lock:
            blocks = self._cache.take_all()
        me = threading.current_thread()
        for blk in blocks:
            if any(s.worker is me and not s.passed(m) for s, m in blk.marks):  # a command cannot wait for itself
                with self._cache_lock:
                    self._cache.put(blk)
                continue
            _wait_marks(marks=blk.marks)
            self._release_block(blk)

    def buffer_at(self, ptr: int) -> tuple[Buffer, int]:
        """The live buffer whose bytes contain address ``ptr``, and the byte offset of ``ptr`` in it."""
        with self._addr_lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            if i >= 0:
                buf = self._at[self._starts[i]]
                if ptr < buf.data_ptr + buf.nbytes:
                    return buf, ptr - buf.data_ptr
        raise BufferUseError(f"address {ptr:#x} is not inside a live buffer of chip {self.chip_id}")

    def _no_capture(self, use: str, stream: Stream) -> None:
        if stream.capturing is not None:
            raise TraceError(f"{use} cannot be captured in a trace: copy inputs in before capturing, read results "
                             "after replaying")

    def write(self, buf: Buffer, data: np.ndarray | bytes | memoryview, offset: int = 0, *,
              stream: Stream | None = None, blocking: bool = False) -> None:
        """Copy host bytes into ``buf`` at ``offset``. The data is copied at the call, so the caller may reuse it."""
        buf.check_live("write")
        s = stream or self.current_stream
        self._no_capture("a host write", s)
        raw = np.frombuffer(np.ascontiguousarray(data).tobytes() if not isinstance(data, bytes | bytearray)
                            else bytes(data), dtype=np.uint8)
        if offset < 0 or offset + raw.size > buf.nbytes:
            raise BufferUseError(f"writing {raw.size} bytes at offset {offset} overflows {buf!r}")
        s.enqueue(Command("write", self.backend.write, (buf,), {"offset": offset, "data": raw},
                          raw.size / self.card.dram_bytes_per_s * 1e9))
        if blocking:
            s.synchronize()

    def read(self, buf: Buffer, offset: int = 0, nbytes: int | None = None, *,
             stream: Stream | None = None) -> np.ndarray:
        """Copy bytes of ``buf`` to the host, after the work queued before it. Synchronizes the stream."""
        buf.check_live("read")
        s = stream or self.current_stream
        self._no_capture("a host read", s)
        nbytes = buf.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or nbytes < 0 or offset + nbytes > buf.nbytes:
            raise BufferUseError(f"reading {nbytes} bytes at offset {offset} overflows {buf!r}")
        out: list[np.ndarray] = []
        s.enqueue(Command("read", lambda b: out.append(self.backend.read(b, offset, nbytes)), (buf,), {},
                          nbytes / self.card.dram_bytes_per_s * 1e9))
        s.synchronize()
        return out[0]

    def copy(self, src: Buffer, dst: Buffer, *, src_offset: int = 0, dst_offset: int = 0, nbytes: int | None = None,
             stream: Stream | None = None) -> None:
        """Device-to-device copy of ``nbytes`` bytes, queued."""
        src.check_live("copy source")
        dst.check_live("copy destination")
        nbytes = min(src.nbytes - src_offset, dst.nbytes - dst_offset) if nbytes is None else nbytes
        if src_offset + nbytes > src.nbytes or dst_offset + nbytes > dst.nbytes or min(src_offset, dst_offset) < 0:
            raise BufferUseError(f"copying {nbytes} bytes overflows {src!r} or {dst!r}")

        def run(s: Buffer, d: Buffer) -> None:
            self.backend.copy(s, src_offset, d, dst_offset, nbytes)

        self.enqueue(Command("copy", run, (src, dst), {}, 2 * nbytes / self.card.dram_bytes_per_s * 1e9), stream)

    def upload(self, array: np.ndarray, fmt: Format | str | None = None, *, layout: Layout | str = Layout.TILE,
               kind: MemoryKind | str = MemoryKind.DRAM, pad_value: float = 0.0) -> Buffer:
        """A new buffer holding ``array`` in ``fmt`` (packed to tiles in tile layout)."""
        array = np.asarray(array)
        fmt = Format.of(fmt or _format_of(array.dtype))
        layout = Layout.of(layout)
        buf = self.allocate(shape=array.shape, fmt=fmt, layout=layout, kind=kind)
        try:
            if layout is Layout.TILE:
                from kohakutt.hal import formats

                data = formats.pack(array, fmt, pad_value=pad_value)
            else:
                data = _to_row_major_bytes(array, fmt)
            self.write(buf, data)
        except BaseException:
            self.free(buf)
            raise
        return buf

    def download(self, buf: Buffer) -> np.ndarray:
        """The values in ``buf`` as a host array of its logical shape (float32 for float formats)."""
        if buf.shape is None:
            raise BufferUseError(f"{buf!r} has no logical shape; read its bytes with read()")
        from kohakutt.hal import formats

        raw = self.read(buf)
        if buf.layout is Layout.TILE:
            return formats.unpack(raw, buf.shape, buf.fmt)
        if buf.fmt is Format.BFLOAT16:
            return formats.from_bfloat16(raw.view(np.uint16)).reshape(buf.shape)
        return raw.view(_NP_DTYPES[buf.fmt]).reshape(buf.shape).copy()

    # ------------------------------------------------------------------------------------------ traces, stats
    @contextmanager
    def capture(self, name: str = "trace", stream: Stream | None = None) -> Iterator[Trace]:
        """Record the commands queued on ``stream`` in the block as a :class:`Trace`, without running them."""
        self._check_open("capture")
        s = stream or self.current_stream
        trace = Trace(self, name)
        s.begin_capture(trace)
        try:
            with self.use_stream(s):
                yield trace
        finally:
            s.end_capture()
            trace._ended = True

    def memory_stats(self) -> dict[str, int]:
        return self.allocator.stats()

    def run_program(self, program: Any, buffers: list[Buffer], runtime_args: dict[str, Any] | None = None, *,
                    stream: Stream | None = None) -> None:
        """Validate ``program`` against the card's rules, then queue it over ``buffers`` (outputs last)."""
        for b in buffers:
            b.check_live(f"program {program.name!r}")
        program.validate(self.card, buffers, runtime_args or {})
        self.enqueue(Command(f"program:{program.name}", self._run_program, tuple(buffers),
                             {"program": program, "runtime_args": dict(runtime_args or {})},
                             program.estimate_ns(self.card, buffers, runtime_args or {})), stream)

    def _run_program(self, *buffers: Buffer, program: Any, runtime_args: dict[str, Any]) -> None:
        self.backend.run_program(program, buffers, runtime_args)

    def describe(self) -> dict[str, Any]:
        c = self.card
        return self.backend.describe() | {
            "chip": self.chip_id, "card": c.name, "grid": f"{c.grid[0]}x{c.grid[1]}", "cores": c.cores,
            "l1_per_core": c.l1_bytes, "dram_bytes": c.dram_bytes, "dram_banks": c.dram_banks,
            "backend_reason": self.backend_reason, "refcount": self._refs,
        }

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._refs} users"
        return f"Device(chip={self.chip_id}, backend={self.backend.name}, {state})"


def _block_key(nbytes: int, shape: tuple[int, ...] | None, fmt: Format, layout: Layout, kind: MemoryKind,
               page_size: int) -> Any:
    """What a cached block must match to be reused: the byte size alone for raw DRAM bytes (the frontends'
    storages), else size, shape, format, layout, memory kind and page size."""
    if (shape is None and fmt is Format.UINT8 and layout is Layout.ROW_MAJOR and kind is MemoryKind.DRAM
            and page_size == RAW_PAGE_SIZE):
        return nbytes
    return (nbytes, shape, fmt, layout, kind, page_size)


def _wait_marks(*, marks: list[tuple[Stream, int]] | tuple[tuple[Stream, int], ...]) -> None:
    for s, m in marks:
        s.wait_for(m)


_NP_DTYPES = {Format.FLOAT32: np.float32, Format.INT32: np.int32, Format.UINT32: np.uint32,
              Format.UINT16: np.uint16, Format.UINT8: np.uint8, Format.BFLOAT16: np.uint16}


def _format_of(dtype: np.dtype) -> Format:
    table = {np.dtype(np.float32): Format.FLOAT32, np.dtype(np.int32): Format.INT32,
             np.dtype(np.uint32): Format.UINT32, np.dtype(np.uint16): Format.UINT16, np.dtype(np.uint8): Format.UINT8}
    if np.dtype(dtype) not in table:
        raise FormatError(f"no device format for NumPy dtype {dtype}; convert to float32 or int32, or name a fmt")
    return table[np.dtype(dtype)]


def _to_row_major_bytes(array: np.ndarray, fmt: Format) -> np.ndarray:
    from kohakutt.hal import formats

    if fmt is Format.BFLOAT16:
        return formats.to_bfloat16(array.astype(np.float32)).view(np.uint8).ravel()
    return np.ascontiguousarray(array.astype(_NP_DTYPES[fmt])).view(np.uint8).ravel()


@atexit.register
def _close_all() -> None:
    for dev in open_devices():
        dev._refs = 1
        with suppress(Exception):  # an error queued before exit has no one left to report to
            dev.close()
