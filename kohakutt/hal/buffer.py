"""A device buffer: bytes in DRAM or L1, in a layout and a format, interleaved page by page across banks."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from kohakutt.errors import BufferUseError
from kohakutt.hal.allocator import Allocation
from kohakutt.hal.layout import Format, Layout, MemoryKind

if TYPE_CHECKING:
    from kohakutt.hal.device import Device

_ids = itertools.count(1)


class Buffer:
    """Device memory owned by the HAL. Create with :meth:`Device.allocate`; free with :meth:`Device.free`."""

    __slots__ = ("__weakref__", "_alloc", "_state", "cache_key", "cached", "data_ptr", "device", "fmt", "handle", "id",
                 "kind", "layout", "nbytes", "page_size", "shape", "trace")

    def __init__(self, device: Device, alloc: Allocation, layout: Layout, fmt: Format, shape: tuple[int, ...] | None):
        self.device = device
        self.id = next(_ids)
        self._alloc = alloc
        self.nbytes = alloc.nbytes
        self.kind: MemoryKind = alloc.kind
        self.layout = layout
        self.fmt = fmt
        self.shape = shape
        self.page_size = alloc.page_size
        self.handle: Any = None
        self.trace: Any = None  # the trace that allocated it while capturing, if any
        self.data_ptr = 0  # the device address frontends see (0 for an empty buffer)
        self.cached = False  # freeing it parks its memory in the device's cache (Device.allocate(cached=True))
        self.cache_key: Any = None  # what a cached block of it must match to be reused
        self._state = "live"

    @property
    def address(self) -> int:
        return self._alloc.address

    @property
    def num_pages(self) -> int:
        return -(-self.nbytes // self.page_size) if self.nbytes else 0

    def page_location(self, page: int) -> tuple[int, int]:
        """The (bank, address) page ``page`` lives at."""
        if not 0 <= page < self.num_pages:
            raise BufferUseError(f"page {page} is outside buffer {self.id} of {self.num_pages} pages")
        return self._alloc.page_location(page)

    @property
    def is_live(self) -> bool:
        return self._state == "live"

    def check_live(self, use: str) -> None:
        if self._state != "live":
            raise BufferUseError(
                f"{use}: buffer {self.id} ({self.nbytes} bytes, {self.kind.value}) was freed; "
                "allocate a new buffer instead of keeping a freed one"
            )
        if self.device.closed:
            raise BufferUseError(f"{use}: buffer {self.id} belongs to a device that is closed; open it again")

    def same_kind_as(self, other: Buffer) -> bool:
        """Whether ``other`` can stand in for this buffer (same size, memory kind, layout and format)."""
        return (self.nbytes, self.kind, self.layout, self.fmt, self.page_size) == (
            other.nbytes, other.kind, other.layout, other.fmt, other.page_size)

    def __repr__(self) -> str:
        shape = f" shape={self.shape}" if self.shape is not None else ""
        return (f"Buffer(id={self.id}, {self.nbytes} B, {self.kind.value}, {self.layout.value}, {self.fmt.value}"
                f"{shape}, {self._state})")
