"""Device memory allocation: DRAM pages interleaved across 8 banks, L1 pages across the cores, with statistics.

As on the card, an interleaved buffer takes the same address range in every bank of its kind (lockstep banks),
page ``i`` living in bank ``i % banks``. So one address space per kind is enough: its size is one bank's.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from kohakutt.errors import OutOfMemoryError
from kohakutt.hal.card import CardSpec
from kohakutt.hal.layout import MemoryKind


def align_up(n: int, a: int) -> int:
    return -(-n // a) * a


class AddressSpace:
    """Best-fit allocation of byte ranges in ``[0, size)``, with coalescing of freed neighbours."""

    def __init__(self, size: int, align: int):
        self.size, self.align = size, align
        self._free_starts: list[int] = [0] if size > 0 else []
        self._free_sizes: dict[int, int] = {0: size} if size > 0 else {}
        self._used: dict[int, int] = {}

    def alloc(self, nbytes: int) -> int | None:
        need = align_up(max(nbytes, 1), self.align)
        best = None
        for start in self._free_starts:
            size = self._free_sizes[start]
            if size >= need and (best is None or size < self._free_sizes[best]):
                best = start
                if size == need:
                    break
        if best is None:
            return None
        size = self._free_sizes.pop(best)
        self._free_starts.remove(best)
        if size > need:
            self._insert_free(best + need, size - need)
        self._used[best] = need
        return best

    def free(self, start: int) -> None:
        size = self._used.pop(start)
        i = bisect.bisect_left(self._free_starts, start)
        if i < len(self._free_starts) and self._free_starts[i] == start + size:  # merge with the next block
            size += self._free_sizes.pop(self._free_starts.pop(i))
        if i > 0 and (prev := self._free_starts[i - 1]) + self._free_sizes[prev] == start:  # and the previous
            self._free_sizes[prev] += size
            return
        self._insert_free(start, size)

    def _insert_free(self, start: int, size: int) -> None:
        bisect.insort(self._free_starts, start)
        self._free_sizes[start] = size

    @property
    def free_bytes(self) -> int:
        return sum(self._free_sizes.values())

    @property
    def largest_free(self) -> int:
        return max(self._free_sizes.values(), default=0)


@dataclass
class Allocation:
    kind: MemoryKind
    address: int  # the same offset in every bank of the kind
    bank_bytes: int  # bytes taken in each bank
    banks: int
    nbytes: int  # what was asked for
    page_size: int
    page_stride: int  # a page's size rounded up to the bank alignment

    @property
    def footprint(self) -> int:
        return self.bank_bytes * self.banks

    def page_location(self, page: int) -> tuple[int, int]:
        """(bank, address) of page ``page``."""
        return page % self.banks, self.address + (page // self.banks) * self.page_stride


class Allocator:
    """The device's allocator: one lockstep address space for DRAM and one for L1, with torch-like statistics."""

    def __init__(self, card: CardSpec, l1_budget: int | None = None):
        self.card = card
        l1 = card.l1_usable if l1_budget is None else min(l1_budget, card.l1_bytes)
        self._spaces = {
            MemoryKind.DRAM: AddressSpace(card.dram_bank_bytes, card.dram_read_align),
            MemoryKind.L1: AddressSpace(l1, card.l1_align),
        }
        self._banks = {MemoryKind.DRAM: card.dram_banks, MemoryKind.L1: card.cores}
        self._lock = threading.Lock()
        self._stats = {k: _KindStats() for k in MemoryKind}

    def capacity(self, kind: MemoryKind) -> int:
        return self._spaces[kind].size * self._banks[kind]

    def allocate(self, nbytes: int, kind: MemoryKind, page_size: int) -> Allocation:
        """Room for ``nbytes`` in ``page_size`` pages; out of memory raises :class:`OutOfMemoryError` (counted)."""
        alloc = self.try_allocate(nbytes, kind, page_size)
        if alloc is None:
            with self._lock:
                self._stats[kind].num_ooms += 1
            raise OutOfMemoryError(self._oom_message(nbytes, kind, self._bank_bytes(nbytes, kind, page_size)))
        return alloc

    def try_allocate(self, nbytes: int, kind: MemoryKind, page_size: int) -> Allocation | None:
        """Like :meth:`allocate`, but None (not counted as an out-of-memory) when there is no room."""
        banks = self._banks[kind]
        space = self._spaces[kind]
        stride = align_up(page_size, space.align)
        bank_bytes = self._bank_bytes(nbytes, kind, page_size)
        with self._lock:
            address = space.alloc(bank_bytes) if bank_bytes else 0
            if address is None:
                return None
            alloc = Allocation(kind, address, bank_bytes, banks, nbytes, page_size, stride)
            self._stats[kind].on_alloc(nbytes, alloc.footprint)
            return alloc

    def _bank_bytes(self, nbytes: int, kind: MemoryKind, page_size: int) -> int:
        pages = -(-nbytes // page_size) if nbytes else 0
        return -(-pages // self._banks[kind]) * align_up(page_size, self._spaces[kind].align)

    def release(self, alloc: Allocation, *, cached: bool = False) -> None:
        """Give ``alloc``'s range back. ``cached``: it was parked by :meth:`park` (its bytes no longer count as
        allocated, only as reserved)."""
        with self._lock:
            if alloc.bank_bytes:
                self._spaces[alloc.kind].free(alloc.address)
            st = self._stats[alloc.kind]
            if cached:
                st.reserved_bytes -= alloc.footprint
                st.cached_bytes -= alloc.footprint
            else:
                st.on_free(alloc.nbytes, alloc.footprint)

    def park(self, alloc: Allocation) -> None:
        """``alloc`` was freed into a cache: no longer allocated, still reserved (its range stays taken)."""
        with self._lock:
            st = self._stats[alloc.kind]
            st.allocated_bytes -= alloc.nbytes
            st.cached_bytes += alloc.footprint
            st.num_frees += 1

    def unpark(self, alloc: Allocation) -> None:
        """A parked ``alloc`` is reused: allocated again (reserved already counts it)."""
        with self._lock:
            st = self._stats[alloc.kind]
            st.allocated_bytes += alloc.nbytes
            st.cached_bytes -= alloc.footprint
            st.num_allocs += 1
            if st.allocated_bytes > st.peak_allocated_bytes:
                st.peak_allocated_bytes = st.allocated_bytes

    def reserved_bytes(self, kind: MemoryKind | str) -> int:
        """Bytes reserved in memory ``kind`` (allocated and cached): :meth:`stats`' ``<kind>.reserved_bytes``."""
        return self._stats[MemoryKind.of(kind)].reserved_bytes

    def stats(self) -> dict[str, int]:
        """Flat statistics: ``<kind>.<name>`` for each memory kind, and totals without a prefix."""
        with self._lock:
            out: dict[str, int] = {}
            for kind, st in self._stats.items():
                space = self._spaces[kind]
                d = st.as_dict() | {
                    "capacity_bytes": self.capacity(kind),
                    "free_bytes": space.free_bytes * self._banks[kind],
                    "largest_free_bytes": space.largest_free * self._banks[kind],
                }
                out.update({f"{kind.value}.{k}": v for k, v in d.items()})
            for name in _KindStats().as_dict():
                out[name] = (
                    sum(out[f"{k.value}.{name}"] for k in MemoryKind)
                    if not name.startswith("peak")
                    else max(out[f"{k.value}.{name}"] for k in MemoryKind)
                )
            return out

    def reset_peak(self) -> None:
        with self._lock:
            for st in self._stats.values():
                st.peak_allocated_bytes, st.peak_reserved_bytes = st.allocated_bytes, st.reserved_bytes

    def _oom_message(self, nbytes: int, kind: MemoryKind, bank_bytes: int) -> str:
        space, st, banks = self._spaces[kind], self._stats[kind], self._banks[kind]
        return (
            f"out of {kind.value.upper()} memory: asked for {nbytes} bytes ({bank_bytes} bytes in each of {banks} "
            f"banks); {st.allocated_bytes} bytes allocated in {st.live} buffers, {space.free_bytes * banks} bytes "
            f"free of {self.capacity(kind)}, largest free range {space.largest_free} bytes per bank. Free tensors "
            f"you no longer need, use smaller batches, or put the buffer in "
            f"{'DRAM' if kind is MemoryKind.L1 else 'a block-float format'}."
        )


@dataclass
class _KindStats:
    allocated_bytes: int = 0
    reserved_bytes: int = 0  # allocated ranges, including the ones parked in a cache
    cached_bytes: int = 0  # the parked part of reserved_bytes
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    num_allocs: int = 0
    num_frees: int = 0
    num_ooms: int = 0

    @property
    def live(self) -> int:
        return self.num_allocs - self.num_frees

    def on_alloc(self, nbytes: int, footprint: int) -> None:
        self.allocated_bytes += nbytes
        self.reserved_bytes += footprint
        self.num_allocs += 1
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def on_free(self, nbytes: int, footprint: int) -> None:
        self.allocated_bytes -= nbytes
        self.reserved_bytes -= footprint
        self.num_frees += 1

    def as_dict(self) -> dict[str, int]:
        return {
            "allocated_bytes": self.allocated_bytes,
            "reserved_bytes": self.reserved_bytes,
            "cached_bytes": self.cached_bytes,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "num_allocs": self.num_allocs,
            "num_frees": self.num_frees,
            "num_ooms": self.num_ooms,
        }
