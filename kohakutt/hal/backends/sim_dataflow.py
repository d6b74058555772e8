"""The reader / writer kernel API of the simulator: NoC transfers between buffer pages and L1, semaphores, raw L1.

Transfers complete at issue; the barriers check ordering instead of waiting: a page pushed while a NoC read into its
CB is still unbarriered, or popped while a NoC write out of its CB is unflushed, is an error (on a card it is a race).
NoC reads may only land in reserved pages and read only waited-for (or reserved) pages; a page id must lie inside the
buffer and a transfer inside one page. Cores are addressed by logical (x, y), not NoC coordinates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from kohakutt.errors import ProgramError
from kohakutt.hal.backends.sim_program import _CB, SEMAPHORE_BASE, KernelAPI, _Core, _n, _Run
from kohakutt.hal.program import CoreCoord, Kernel


# -------------------------------------------------------------------------------------------------- NoC addresses
@dataclass(frozen=True)
class TensorAccessor:
    """A buffer's pages as a kernel addresses them (Metalium's ``TensorAccessor``); made by ``k.tensor_accessor``."""

    index: int
    name: str
    page_size: int
    num_pages: int
    nbytes: int
    data: np.ndarray = field(repr=False, compare=False)

    def get_noc_addr(self, page: int, offset: int = 0) -> PageAddr:
        return PageAddr(self, int(page), int(offset))


@dataclass(frozen=True)
class PageAddr:
    """The NoC address of byte ``offset`` of page ``page`` of a buffer."""

    accessor: TensorAccessor
    page: int
    offset: int = 0

    def __add__(self, n: int) -> PageAddr:
        return replace(self, offset=self.offset + int(n))


@dataclass(frozen=True)
class CoreAddr:
    """The NoC address of L1 address ``addr`` on one core, or on a rectangle of cores for a multicast."""

    cores: tuple[CoreCoord, ...]
    addr: int
    multicast: bool = False

    def __add__(self, n: int) -> CoreAddr:
        return replace(self, addr=self.addr + int(n))


NocAddr = PageAddr | CoreAddr


class DataMovementAPI(KernelAPI):
    """The reader / writer kernel API: CBs, the NoC (DRAM pages and other cores' L1), semaphores, raw L1."""

    def __init__(self, run: _Run, kernel: Kernel, core: CoreCoord):
        super().__init__(run, kernel, core)
        self._reads_in_flight: set[int] = set()  # CBs a NoC read is landing in since the last read barrier
        self._writes_in_flight: set[int] = set()  # CBs a NoC write is sourcing from since the last flush

    # ------------------------------------------------------------------------------------------- CB pointers
    def get_write_ptr(self, cb: int) -> int:
        """L1 address of the first reserved page of CB ``cb``."""
        with self._locked():
            c = self._cb(cb)
            return c.slot_address(c.pushed)

    def get_read_ptr(self, cb: int) -> int:
        """L1 address of the first filled page of CB ``cb``."""
        with self._locked():
            c = self._cb(cb)
            return c.slot_address(c.popped)

    def _before_push(self, c: _CB) -> None:
        if c.index in self._reads_in_flight:
            raise self._error(f"cb_push_back({c.index}) while a noc_async_read into CB {c.index} is in flight: "
                              "call noc_async_read_barrier() first, or the consumer may see the page before its "
                              "data lands")  # fmt: skip

    def _before_pop(self, c: _CB) -> None:
        if c.index in self._writes_in_flight:
            raise self._error(f"cb_pop_front({c.index}) while a noc_async_write out of CB {c.index} is in flight: "
                              "call noc_async_writes_flushed() (or noc_async_write_barrier()) first, or the "
                              "producer may overwrite the page before it leaves L1")  # fmt: skip

    # ----------------------------------------------------------------------------------------------- buffers
    def tensor_accessor(self, buffer: int | str, page_size: int | None = None) -> TensorAccessor:
        """Buffer ``buffer`` (its index in the run's buffer list, or its name in ``Program.tensors``) by pages."""
        program = self._run.program
        try:
            i = program.buffer_index(buffer)
        except ProgramError as e:
            raise self._error(str(e)) from None
        if not 0 <= i < len(self._run.buffers):
            raise self._error(f"tensor_accessor({buffer!r}) but the program runs over {len(self._run.buffers)} "
                              "buffers")  # fmt: skip
        buf = self._run.buffers[i]
        if page_size is not None and page_size != buf.page_size:
            raise self._error(f"tensor_accessor({buffer!r}, page_size={page_size}) but the buffer's pages are "
                              f"{buf.page_size} B: interleaved addressing with another page size reads the wrong "
                              "bytes")  # fmt: skip
        name = program.tensors[i] if program.tensors is not None else f"#{i}"
        return TensorAccessor(i, name, buf.page_size, buf.num_pages, buf.nbytes, self._run.views[i])

    def get_noc_addr(self, a: int, b: TensorAccessor | int, c: int = 0) -> NocAddr:
        """``get_noc_addr(page, accessor, offset=0)`` for a buffer page, or ``get_noc_addr(x, y, l1_addr)`` for a
        core's L1 (logical coordinates)."""
        if isinstance(b, TensorAccessor):
            return b.get_noc_addr(a, c)
        return CoreAddr(((int(a), int(b)),), int(c))

    def get_noc_multicast_addr(self, x_start: int, y_start: int, x_end: int, y_end: int, addr: int) -> CoreAddr:
        """The L1 address ``addr`` on every core of the rectangle, for multicast writes."""
        if x_end < x_start or y_end < y_start:
            raise self._error(f"multicast rectangle ({x_start},{y_start})-({x_end},{y_end}) is empty")
        cores = tuple((x, y) for y in range(y_start, y_end + 1) for x in range(x_start, x_end + 1))
        return CoreAddr(cores, int(addr), multicast=True)

    def _target_core(self, xy: CoreCoord, op: str) -> _Core:
        gx, gy = self.card.grid
        if not (0 <= xy[0] < gx and 0 <= xy[1] < gy):
            raise self._error(f"{op} addresses core {xy}, outside the {gx} x {gy} worker grid")
        return self._run.core(xy)

    def _page_span(self, addr: PageAddr, size: int, op: str) -> tuple[np.ndarray, int]:
        acc = addr.accessor
        if not 0 <= addr.page < acc.num_pages:
            raise self._error(f"{op} page {addr.page} of tensor {acc.name} (buffer {acc.index}), which has "
                              f"{_n(acc.num_pages, 'page')} (0..{acc.num_pages - 1})")  # fmt: skip
        if addr.offset < 0 or addr.offset + size > acc.page_size:
            raise self._error(f"{op} of {size} B at offset {addr.offset} of page {addr.page} of tensor {acc.name} "
                              f"runs past the page ({acc.page_size} B); pages of an interleaved buffer are not "
                              "contiguous")  # fmt: skip
        return acc.data, addr.page * acc.page_size + addr.offset

    def _l1_check(self, core: _Core, addr: int, size: int, writing: bool, op: str) -> _CB | None:
        if size < 0:
            raise self._error(f"{op} with a negative size {size}")
        if addr < 0 or addr + size > self.card.l1_bytes:
            raise self._error(f"{op} of {size} B at L1 {addr:#x} is outside core {core.xy}'s L1 "
                              f"({self.card.l1_bytes} B)")  # fmt: skip
        if size == 0:
            return None
        if addr in core.sems and size <= 4:
            return None
        c = core.cb_at(addr)
        verb = "writes" if writing else "reads"
        if c is None:
            raise self._error(f"{op} {verb} L1 {addr:#x} on core {core.xy}, which is in no circular buffer or "
                              "semaphore of the program")  # fmt: skip
        if addr + size > c.end:
            raise self._error(f"{op} of {size} B at L1 {addr:#x} on core {core.xy} runs {addr + size - c.end} B past "
                              f"the end of CB {c.index} ({c.num_pages} pages of {c.page_size} B)")  # fmt: skip
        first, last = (addr - c.base) // c.page_size, (addr + size - 1 - c.base) // c.page_size
        for slot in range(first, last + 1):
            if writing and not c.writable(slot):
                raise self._error(f"{op} writes page slot {slot} of CB {c.index} on core {core.xy}, which is not "
                                  f"reserved ({c.reserved} reserved at the back, {c.filled} filled): call "
                                  "cb_reserve_back before writing into a CB")  # fmt: skip
            if not writing and not (c.readable(slot) or c.writable(slot)):
                raise self._error(f"{op} reads page slot {slot} of CB {c.index} on core {core.xy}, which holds no "
                                  "page waited for or reserved: call cb_wait_front before reading a CB")  # fmt: skip
        return c

    # ---------------------------------------------------------------------------------------------- NoC reads
    def noc_async_read(self, src: NocAddr, dst_l1: int, size: int) -> None:
        """Copy ``size`` bytes from a buffer page or another core's L1 into this core's L1 at ``dst_l1``."""
        with self._locked():
            if isinstance(src, PageAddr):
                data, start = self._page_span(src, size, "noc_async_read")
                chunk = np.zeros(size, dtype=np.uint8)
                avail = max(0, min(size, data.size - start))
                chunk[:avail] = data[start : start + avail]
            elif isinstance(src, CoreAddr) and not src.multicast:
                other = self._target_core(src.cores[0], "noc_async_read")
                self._l1_check(other, src.addr, size, False, "noc_async_read")
                chunk = other.l1[src.addr : src.addr + size].copy()
            else:
                raise self._error(f"noc_async_read from {src!r}: read from a buffer page or one core's L1")
            c = self._l1_check(self._core, dst_l1, size, True, "noc_async_read")
            self._core.l1[dst_l1 : dst_l1 + size] = chunk
            if c is not None:
                self._reads_in_flight.add(c.index)

    def noc_async_read_tile(self, page: int, accessor: TensorAccessor, dst_l1: int) -> None:
        """Read page ``page`` of ``accessor`` (one tile in a tile-layout buffer) into L1."""
        self.noc_async_read(accessor.get_noc_addr(page), dst_l1, accessor.page_size)

    noc_async_read_page = noc_async_read_tile

    def noc_async_read_barrier(self) -> None:
        """Wait for this kernel's NoC reads to land (the sim's land at issue; this clears the in-flight record)."""
        with self._locked():
            self._reads_in_flight.clear()

    # --------------------------------------------------------------------------------------------- NoC writes
    def noc_async_write(self, src_l1: int, dst: NocAddr, size: int) -> None:
        """Copy ``size`` bytes of this core's L1 at ``src_l1`` to a buffer page or to one core's L1."""
        if isinstance(dst, CoreAddr) and dst.multicast:
            raise self._error("noc_async_write to a multicast address: use noc_async_write_multicast")
        self._write(src_l1, dst, size, "noc_async_write")

    def noc_async_write_tile(self, page: int, accessor: TensorAccessor, src_l1: int) -> None:
        """Write one page (a tile in a tile-layout buffer) from L1 to page ``page`` of ``accessor``."""
        self.noc_async_write(src_l1, accessor.get_noc_addr(page), accessor.page_size)

    noc_async_write_page = noc_async_write_tile

    def noc_async_write_multicast(self, src_l1: int, dst: CoreAddr, size: int, num_dests: int) -> None:
        """Write ``size`` bytes of L1 to the same address on every core of a multicast rectangle (not this core)."""
        if not (isinstance(dst, CoreAddr) and dst.multicast):
            raise self._error("noc_async_write_multicast needs an address from get_noc_multicast_addr")
        self._write(src_l1, self._mcast_targets(dst, num_dests, "noc_async_write_multicast"), size,
                    "noc_async_write_multicast")  # fmt: skip

    def _mcast_targets(self, dst: CoreAddr, num_dests: int, op: str) -> CoreAddr:
        cores = tuple(c for c in dst.cores if c != self.core)
        if num_dests != len(cores):
            raise self._error(f"{op} with num_dests={num_dests}, but the rectangle holds {len(cores)} cores "
                              "besides this one")  # fmt: skip
        return CoreAddr(cores, dst.addr, multicast=True)

    def _write(self, src_l1: int, dst: NocAddr, size: int, op: str) -> None:
        with self._locked():
            src = self._l1_check(self._core, src_l1, size, False, op)
            chunk = self._core.l1[src_l1 : src_l1 + size].copy()
            if isinstance(dst, PageAddr):
                data, start = self._page_span(dst, size, op)
                avail = max(0, min(size, data.size - start))
                data[start : start + avail] = chunk[:avail]
            else:
                for xy in dst.cores:
                    other = self._target_core(xy, op)
                    self._l1_check(other, dst.addr, size, True, op)
                    other.l1[dst.addr : dst.addr + size] = chunk
                self._run.changed()
            if src is not None:
                self._writes_in_flight.add(src.index)

    def noc_async_writes_flushed(self) -> None:
        """Wait until this kernel's NoC writes have left L1 (their source pages may then be reused)."""
        with self._locked():
            self._writes_in_flight.clear()

    def noc_async_write_barrier(self) -> None:
        """Wait until this kernel's NoC writes have landed."""
        self.noc_async_writes_flushed()

    def noc_async_atomic_barrier(self) -> None:
        with self._locked():
            pass

    def noc_async_full_barrier(self) -> None:
        self.noc_async_read_barrier()
        self.noc_async_writes_flushed()

    # --------------------------------------------------------------------------------------------- semaphores
    def get_semaphore(self, semaphore_id: int) -> int:
        """L1 address of semaphore ``semaphore_id`` (the same on every core it is defined on)."""
        addr = SEMAPHORE_BASE + int(semaphore_id) * self.card.l1_align
        if addr not in self._core.sems:
            ids = sorted(self._core.sems.values())
            raise self._error(f"semaphore {semaphore_id} is not defined on this core (its semaphores: {ids})")
        return addr

    def _sem(self, core: _Core, addr: int, op: str) -> int:
        if addr not in core.sems:
            raise self._error(f"{op} on L1 {addr:#x} of core {core.xy}, which is not a semaphore of the program "
                              "there; take addresses from get_semaphore(id)")  # fmt: skip
        return core.sems[addr]

    def noc_semaphore_set(self, sem_addr: int, value: int) -> None:
        """Set this core's semaphore at ``sem_addr`` to ``value``."""
        with self._locked():
            self._sem(self._core, sem_addr, "noc_semaphore_set")
            self._core.set_word(sem_addr, value)
            self._run.changed()

    def noc_semaphore_wait(self, sem_addr: int, value: int) -> None:
        """Block until this core's semaphore at ``sem_addr`` equals ``value``."""
        self._sem_wait(sem_addr, value, lambda v: v == value, "to be")

    def noc_semaphore_wait_min(self, sem_addr: int, value: int) -> None:
        """Block until this core's semaphore at ``sem_addr`` is at least ``value``."""
        self._sem_wait(sem_addr, value, lambda v: v >= value, "to reach")

    def _sem_wait(self, sem_addr: int, value: int, ok: Callable[[int], bool], how: str) -> None:
        with self._locked():
            sid = self._sem(self._core, sem_addr, "noc_semaphore_wait")
            core = self._core
            self._run.block_until(
                self,
                lambda: ok(core.word(sem_addr)),
                lambda: (
                    f"waits for semaphore {sid} (L1 {sem_addr:#x}) {how} {value}, which no kernel sets "
                    f"(it is {core.word(sem_addr)})"
                ),
            )

    def noc_semaphore_inc(self, dst: CoreAddr, incr: int = 1) -> None:
        """Atomically add ``incr`` to the semaphore at ``dst`` (one core; from ``get_noc_addr(x, y, addr)``)."""
        with self._locked():
            if not isinstance(dst, CoreAddr) or dst.multicast:
                raise self._error("noc_semaphore_inc needs one core's address from get_noc_addr(x, y, addr)")
            core = self._target_core(dst.cores[0], "noc_semaphore_inc")
            self._sem(core, dst.addr, "noc_semaphore_inc")
            core.set_word(dst.addr, core.word(dst.addr) + int(incr))
            self._run.changed()

    def noc_semaphore_set_remote(self, src_l1: int, dst: CoreAddr) -> None:
        """Copy the local semaphore word at ``src_l1`` to the semaphore at ``dst`` on another core."""
        self._sem_copy(src_l1, dst, "noc_semaphore_set_remote")

    def noc_semaphore_set_multicast(self, src_l1: int, dst: CoreAddr, num_dests: int) -> None:
        """Copy the local semaphore word at ``src_l1`` to the same semaphore on every core of a multicast."""
        if not (isinstance(dst, CoreAddr) and dst.multicast):
            raise self._error("noc_semaphore_set_multicast needs an address from get_noc_multicast_addr")
        self._sem_copy(src_l1, self._mcast_targets(dst, num_dests, "noc_semaphore_set_multicast"),
                       "noc_semaphore_set_multicast")  # fmt: skip

    def _sem_copy(self, src_l1: int, dst: CoreAddr, op: str) -> None:
        with self._locked():
            self._sem(self._core, src_l1, op)
            value = self._core.word(src_l1)
            for xy in dst.cores:
                core = self._target_core(xy, op)
                self._sem(core, dst.addr, op)
                core.set_word(dst.addr, value)
            self._run.changed()

    # ------------------------------------------------------------------------------------------------- raw L1
    def l1_read(self, addr: int, nbytes: int) -> np.ndarray:
        """A copy of ``nbytes`` bytes of this core's L1 (a C kernel would dereference a pointer)."""
        with self._locked():
            self._l1_check(self._core, addr, nbytes, False, "l1_read")
            return self._core.l1[addr : addr + nbytes].copy()

    def l1_write(self, addr: int, data: np.ndarray | bytes) -> None:
        """Store bytes (or any array's bytes) into this core's L1, e.g. to fill a reserved page."""
        raw = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, bytes | bytearray) else (
            np.ascontiguousarray(data).reshape(-1).view(np.uint8))  # fmt: skip
        with self._locked():
            self._l1_check(self._core, addr, raw.size, True, "l1_write")
            self._core.l1[addr : addr + raw.size] = raw


__all__ = ["CoreAddr", "DataMovementAPI", "NocAddr", "PageAddr", "TensorAccessor"]
