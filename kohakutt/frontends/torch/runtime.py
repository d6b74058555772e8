"""What the torch glue asks the HAL for: one callback answering allocator, stream, event and statistics requests.

torch's ``tt:<i>`` is HAL chip ``i``. A storage is a raw HAL buffer whose synthetic address is the storage's data
pointer, so every torch tensor maps to (buffer, byte offset) with :func:`buffer_of`. Streams and events get small
integer ids that the glue keeps in c10 ``Stream`` / event handles. A dead storage's pointer is parked by the glue
and freed at the next call into this module (a deleter may run while Python unwinds an exception, when no Python
code may run); the free is queued on the stream the storage was made on (work queued there may still read it) and
never synchronizes.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import traceback
from typing import Any

import torch
from kohakutt import hal
from kohakutt.errors import BufferUseError, DeviceError, OutOfMemoryError
from kohakutt.frontends.torch import native
from kohakutt.frontends.torch.native import (
    ALLOC,
    COPY,
    DEVICE_COUNT,
    EMPTY_CACHE,
    EVENT_BLOCK,
    EVENT_DESTROY,
    EVENT_ELAPSED_US,
    EVENT_QUERY,
    EVENT_RECORD,
    EVENT_SYNC,
    FREE,
    MEMORY_INFO,
    NEW_STREAM,
    RESET_ACCUMULATED,
    RESET_PEAK,
    RNG_GET,
    RNG_SET,
    STATS,
    STREAM_QUERY,
    STREAM_SYNC,
    SYNC_DEVICE,
)
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.device import Device
from kohakutt.hal.stream import Event, Stream
from kohakutt.kernels import runner

_lock = threading.RLock()
_devices: dict[int, Device] = {}
_buffers: dict[int, Buffer] = {}  # data pointer -> the storage's buffer
_streams: dict[tuple[int, int], Stream] = {}  # (chip, id) -> stream; id 0 is the chip's default stream
_stream_ids: dict[int, tuple[int, int]] = {}  # id(stream) -> (chip, id)
_events: dict[int, Event] = {}
_event_ids = itertools.count(1)
_stream_counter = itertools.count(1)
_lib: Any = None
_callback: Any = None
_accumulated: dict[int, tuple[int, int]] = {}  # chip -> (allocs, frees) at the last reset
_alloc_streams: dict[int, Stream] = {}  # data pointer -> the stream current when the storage was made
_used_on: dict[int, set[Stream]] = {}  # data pointer -> other streams that use the storage (record_stream)
_free_lock = threading.Lock()
_free_slots = (ctypes.c_int64 * 256)()
_mesh_index: int | None = None  # tt:<index> of the open mesh (kohakutt.frontends.torch.mesh)


def register_mesh(mesh: Any) -> None:
    """Make ``tt:<mesh.index>`` the mesh: its storages, its default stream."""
    global _mesh_index
    with _lock:
        _streams[(mesh.index, 0)] = mesh.default_stream
        _stream_ids[id(mesh.default_stream)] = (mesh.index, 0)
        _mesh_index = mesh.index


def is_mesh(index: int | None) -> bool:
    return _mesh_index is not None and index == _mesh_index


def device_slots() -> int:
    """Device indices torch sees: the chips, and the mesh's index after them when there are two or more."""
    n = hal.device_count()
    return n + 1 if n >= 2 else n


def device(index: int) -> Device:
    """The open HAL device behind ``tt:<index>`` (opened on first use, kept open until exit). Also hands the
    storages torch let go of since the last call back to their chips."""
    if _lib is not None and _lib.ktt_torch_pending_frees():
        drain_frees()
    dev = _devices.get(index)
    if dev is None or dev.closed:
        if index == _mesh_index or (index >= 2 and index == hal.device_count()):
            from kohakutt.frontends.torch import mesh

            return mesh.mesh_device(index)  # type: ignore[return-value]
        with _lock:
            dev = _devices.get(index)
            if dev is None or dev.closed:
                dev = hal.open_device(index)
                _devices[index] = dev
                _streams[(index, 0)] = dev.default_stream
                _stream_ids[id(dev.default_stream)] = (index, 0)
    return dev


def current_stream(index: int) -> Stream:
    sid = _lib.ktt_torch_current_stream(index) if _lib is not None else 0
    return _streams.get((index, sid)) or device(index).default_stream


def stream_by_id(index: int, sid: int) -> Stream:
    try:
        return _streams[(index, sid)]
    except KeyError:
        raise DeviceError(f"tt:{index} has no stream {sid}; make streams with torch.tt.Stream()") from None


def stream_id(stream: Stream) -> tuple[int, int]:
    return _stream_ids[id(stream)]


def new_stream(index: int) -> int:
    s = device(index).new_stream()  # a mesh's: one new stream per chip
    sid = next(_stream_counter)
    with _lock:
        _streams[(index, sid)] = s
        _stream_ids[id(s)] = (index, sid)
    return sid


def buffer_of(ptr: int) -> tuple[Buffer, int]:
    """The HAL buffer holding data pointer ``ptr`` and the byte offset of ``ptr`` in it."""
    buf = _buffers.get(ptr)
    if buf is None and _mesh_index is not None:
        from kohakutt.frontends.torch import mesh

        st = mesh.storage_at(ptr)
        if st is not None:
            st.check_live("a tt storage")
            return st, 0  # type: ignore[return-value]
    if buf is not None:
        if buf.device.closed or not buf.is_live:
            raise DeviceError(
                f"tt:{buf.device.chip_id} was closed while this tensor's storage lived on it, so its values are gone; "
                "copy tensors to the CPU (.cpu()) before closing the device, and make new ones after reopening it"
            )
        return buf, 0
    for dev in list(_devices.values()):
        try:
            return dev.buffer_at(ptr)
        except BufferUseError:
            continue
    raise BufferUseError(f"address {ptr:#x} is not a live tt storage (was its device closed?)")


def adopt_storage(t: Any, storage: Any) -> None:
    """Make ``storage`` the storage of the fresh tensor ``t``, and its device ``t``'s device."""
    if _lib.ktt_torch_adopt_storage(t._cdata, storage._cdata) != 0:
        raise DeviceError(f"cannot put a {storage.device} storage under a new tensor")


def _alloc(index: int, nbytes: int) -> int:
    """Device memory for a new storage of ``nbytes`` on ``tt:<index>``: its data pointer. The memory comes from the
    HAL's caching allocator, ordered on the current stream (the storage's free goes there too)."""
    if index == _mesh_index:
        from kohakutt.frontends.torch import mesh

        return mesh.alloc(index, nbytes)
    dev = device(index)
    stream = current_stream(index)
    buf = dev.allocate(nbytes, cached=True, stream=stream)
    _buffers[buf.data_ptr] = buf
    _alloc_streams[buf.data_ptr] = stream
    return buf.data_ptr


def dims(size: list[int], stride: list[int]) -> Any:
    """``size`` then ``stride`` as the int64 array :func:`give_storage` takes."""
    return (ctypes.c_int64 * (2 * len(size)))(*size, *stride)


def give_storage(t: Any, nbytes: int, index: int, ndim: int, sizes_strides: Any) -> None:
    """Give the fresh tensor ``t`` a new storage of ``nbytes`` on ``tt:<index>`` and the sizes and strides in
    ``sizes_strides`` (from :func:`dims`; ``ndim`` of each): what ``torch.UntypedStorage`` and ``set_`` do, without
    the allocator callback (the output of every op comes here)."""
    try:
        if index == _mesh_index and nbytes:
            from kohakutt.frontends.torch import mesh

            ptr = mesh.alloc(index, nbytes, t.dtype, sizes_strides[:ndim], sizes_strides[ndim : 2 * ndim])
        else:
            ptr = _alloc(index, nbytes) if nbytes else 0
    except OutOfMemoryError as e:  # what torch raises for a device allocation that does not fit
        raise torch.OutOfMemoryError(f"{type(e).__name__}: {e}") from e
    if _lib.ktt_torch_set_buffer(t._cdata, ptr, nbytes, index, ndim, sizes_strides) != 0:
        if ptr:
            _free(ptr)
        raise DeviceError(f"cannot give a new tt:{index} storage to a {t.device} tensor")


def _free(ptr: int) -> None:
    buf = _buffers.pop(ptr, None)
    if buf is None and _mesh_index is not None:
        from kohakutt.frontends.torch import mesh

        if mesh.free(ptr):
            return
    stream = _alloc_streams.pop(ptr, None)
    used = _used_on.pop(ptr, None) if _used_on else None
    if buf is None or not buf.is_live or buf.device.closed:
        return
    buf.device.free(buf, stream or current_stream(buf.device.chip_id), used_on=tuple(used) if used else ())


def record_stream(ptr: int, index: int, sid: int) -> None:
    """``Tensor.record_stream``: the storage at ``ptr`` is used on stream ``sid`` of ``tt:<index>`` too, so its
    memory is reused only once that stream has run the work queued on it before the storage dies."""
    if ptr == 0 or is_mesh(index):
        return  # no memory to hold back (a mesh storage's frees are ordered on the mesh's streams)
    if ptr not in _buffers:
        raise BufferUseError(f"record_stream: address {ptr:#x} is not a live tt storage")
    s = stream_by_id(index, sid)
    if s is not _alloc_streams.get(ptr):
        _used_on.setdefault(ptr, set()).add(s)


def empty_cache() -> None:
    """Release the cached blocks of every open chip (``torch.tt.empty_cache``), the storages torch let go of first."""
    drain_frees()
    for dev in list(_devices.values()):
        if not dev.closed:
            dev.empty_cache()


def drain_frees() -> None:
    """Free the buffers of every storage torch has let go of (the glue queues them: see ``delete_tt``). Each free
    is ordered on the stream the storage was made on, after the work queued there so far."""
    if _lib is None:
        return
    with _free_lock:
        while True:
            n = _lib.ktt_torch_take_frees(_free_slots, len(_free_slots))
            for i in range(n):
                _free(_free_slots[i])
            if n < len(_free_slots):
                return


def _copy(dst: int, src: int, nbytes: int) -> None:
    if nbytes == 0:
        return
    sbuf, soff = buffer_of(src)
    dbuf, doff = buffer_of(dst)
    if not isinstance(sbuf, Buffer) or not isinstance(dbuf, Buffer):
        from kohakutt.frontends.torch import mesh

        mesh.copy_bytes(dst, src, nbytes)
        return
    dev = dbuf.device
    dev.copy(sbuf, dbuf, src_offset=soff, dst_offset=doff, nbytes=nbytes, stream=current_stream(dev.chip_id))


def _stats(index: int, which: int) -> int:
    st = device(index).memory_stats()
    base = _accumulated.get(index, (0, 0))
    return [
        st["allocated_bytes"],
        st["peak_allocated_bytes"],
        st["reserved_bytes"],
        st["peak_reserved_bytes"],
        st["num_allocs"] - base[0],
        st["num_frees"] - base[1],
    ][which]


def _event_record(handle: int, index: int, sid: int) -> int:
    eid = handle or next(_event_ids)
    s = stream_by_id(index, sid)
    if isinstance(s, Stream):
        ev: Any = Event()
    else:
        from kohakutt.mesh.device import MeshEvent

        ev = MeshEvent()
    s.record_event(ev)
    _events[eid] = ev
    return eid


def elapsed_ms(start: int, end: int) -> float:
    """Simulated device time between two recorded events (by handle), in milliseconds; waits for both."""
    a, b = _events.get(start), _events.get(end)
    if a is None or b is None:
        raise DeviceError("elapsed_time needs two recorded events: call record() on both first")
    return a.elapsed_ms(b)


def _dispatch(op: int, a: int, b: int, c: int, d: int) -> int:
    if _lib.ktt_torch_pending_frees():
        drain_frees()
    if op == ALLOC:
        return _alloc(a, b)
    if op == FREE:
        _free(a)
    elif op == COPY:
        _copy(a, b, c)
    elif op == SYNC_DEVICE:
        device(a).synchronize()
    elif op == STREAM_SYNC:
        stream_by_id(a, b).synchronize()
    elif op == STREAM_QUERY:
        return int(stream_by_id(a, b).query())
    elif op == EVENT_RECORD:
        return _event_record(a, b, c)
    elif op == EVENT_BLOCK:
        ev = _events.get(a)
        if ev is not None:
            stream_by_id(b, c).wait_event(ev)
    elif op == EVENT_QUERY:
        ev = _events.get(a)
        return int(ev is None or ev.query())
    elif op == EVENT_SYNC:
        ev = _events.get(a)
        if ev is not None:
            ev.synchronize()
    elif op == EVENT_DESTROY:
        _events.pop(a, None)
    elif op == EVENT_ELAPSED_US:
        return round(elapsed_ms(a, b) * 1e3)  # microseconds: the glue divides by 1000
    elif op == DEVICE_COUNT:
        return device_slots()
    elif op == STATS:
        return _stats(a, b)
    elif op == RESET_PEAK:
        device(a).allocator.reset_peak()
    elif op == EMPTY_CACHE:
        empty_cache()
    elif op == MEMORY_INFO:
        st = device(a).memory_stats()
        return st["dram.free_bytes"] if b == 0 else st["dram.capacity_bytes"]
    elif op == NEW_STREAM:
        return new_stream(a)
    elif op == RESET_ACCUMULATED:
        st = device(a).memory_stats()
        _accumulated[a] = (st["num_allocs"], st["num_frees"])
    elif op == RNG_GET:  # a default generator reads its chip's random stream: (seed, offset)[b], as an int64
        v = runner.rng_state(a)[b]
        return v - (1 << 64) if v >= 1 << 63 else v
    elif op == RNG_SET:
        runner.set_rng_state(a, (b & _U64, c & _U64))
    return 0


_U64 = (1 << 64) - 1


def _entry(op: int, a: int, b: int, c: int, d: int) -> int:
    try:
        return _dispatch(op, a, b, c, d)
    except BaseException as e:  # never let an exception cross into C++: hand it over as a message
        msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if not isinstance(e, Exception):
            msg += "\n" + traceback.format_exc()
        _lib.ktt_torch_set_error(msg.encode("utf-8", "replace"))
        return 0


def install() -> None:
    """Load the glue and route it here. Idempotent."""
    global _lib, _callback
    if _lib is not None:
        return
    lib = native.load()
    _callback = native.CALLBACK(_entry)  # kept alive for the process
    lib.ktt_torch_install(_callback)
    _lib = lib


def uninstall() -> None:
    """At exit: later frees from torch become no-ops (the HAL closes the chips itself)."""
    if _lib is not None:
        _lib.ktt_torch_uninstall()
