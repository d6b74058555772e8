"""The hardware abstraction layer: the one open device per chip, its buffers, streams, traces and programs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from kohakutt.hal.buffer import Buffer
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.device import PROFILER, Device, backend_choice, device_count, open_device, open_devices
from kohakutt.hal.layout import Format, Layout, MemoryKind, padded_shape, tile_count
from kohakutt.hal.profiler import Profile, ProfileRecord
from kohakutt.hal.program import (
    CircularBuffer,
    CoreRange,
    CoreRangeSet,
    Kernel,
    MathFidelity,
    Program,
    Semaphore,
    Work,
    split_work,
)
from kohakutt.hal.stream import Command, Event, Stream
from kohakutt.hal.trace import Trace


@contextmanager
def profile() -> Iterator[Profile]:
    """Record every command run on any open device inside the block; the yielded profile fills in at exit."""
    start = len(PROFILER.records)
    prof = Profile([])
    PROFILER.start()
    try:
        yield prof
    finally:
        for dev in open_devices():
            with suppress(Exception):  # the error surfaces at the user's next synchronizing call
                dev.synchronize()
        PROFILER.stop()
        prof.records = PROFILER.records[start:]
        if not PROFILER.active:
            PROFILER.records.clear()


__all__ = [
    "P150A", "Buffer", "CardSpec", "CircularBuffer", "Command", "CoreRange", "CoreRangeSet", "Device", "Event",
    "Format", "Kernel", "Layout", "MathFidelity", "MemoryKind", "Profile", "ProfileRecord", "Program", "Semaphore",
    "Stream", "Trace", "Work", "backend_choice", "device_count", "open_device", "open_devices", "padded_shape",
    "profile", "split_work", "tile_count",
]
