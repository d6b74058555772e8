"""Running a :class:`~kohakutt.hal.program.Program` in the simulator, by the card's circular-buffer semantics.

Each core gets an L1 model (the card's 1.5 MiB, zero pages mapped lazily) with the program's CBs carved in it and its
semaphores in the firmware's low region. Each kernel is a thread running its ``sim`` function against a kernel API
object ``k`` with Metalium's names: ``DataMovementAPI`` (``sim_dataflow``) for readers and writers, ``ComputeAPI``
(``sim_compute``) for compute; both share :class:`KernelAPI`'s arguments and circular buffers. A CB is a ring of
pages: ``cb_reserve_back`` blocks until pages are free, ``cb_wait_front`` until they are filled, and pushes and pops
must stay within what was reserved and waited for. Without semaphores the cores run one after another (they cannot
interact); with them, all at once. Every blocking call registers what it waits for, so when every running kernel is
blocked the run stops at once with a ProgramError naming each kernel and the CB or semaphore it waits on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kohakutt.errors import ProgramError
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import Format
from kohakutt.hal.program import CoreCoord, Kernel, Program

if TYPE_CHECKING:
    from kohakutt.hal.backends.sim import SimBackend
    from kohakutt.hal.buffer import Buffer

STALL_SECONDS = 30.0  # fallback: a blocked kernel seeing no CB or semaphore change this long reports a stall
SEMAPHORE_BASE = 0x4000  # semaphores sit in the firmware's low L1 region, one L1-aligned word per id (as Metalium)


class _Abort(BaseException):
    """Unwinds a kernel thread after another kernel failed or the program deadlocked (never escapes a run)."""


# ------------------------------------------------------------------------------------------------- per-core state
@dataclass(eq=False)
class _CB:
    index: int
    fmt: Format
    page_size: int
    num_pages: int
    base: int
    pushed: int = 0  # pages pushed since the start (monotonic)
    popped: int = 0
    reserved: int = 0  # pages past the write pointer the producer may fill
    waited: int = 0  # pages past the read pointer the consumer may read

    @property
    def filled(self) -> int:
        return self.pushed - self.popped

    @property
    def free(self) -> int:
        return self.num_pages - self.filled

    @property
    def end(self) -> int:
        return self.base + self.page_size * self.num_pages

    def slot_address(self, slot: int) -> int:
        return self.base + (slot % self.num_pages) * self.page_size

    def writable(self, slot: int) -> bool:
        return (slot - self.pushed) % self.num_pages < self.reserved

    def readable(self, slot: int) -> bool:
        return (slot - self.popped) % self.num_pages < self.waited


class _Core:
    def __init__(self, program: Program, card: CardSpec, xy: CoreCoord):
        self.xy = xy
        self.l1 = np.zeros(card.l1_bytes, dtype=np.uint8)
        addrs = program.cb_addresses(card, xy)
        self.cbs = {cb.index: _CB(cb.index, cb.format, cb.page_size, cb.num_pages, addrs[cb.index])
                    for cb in program.cbs_on(xy)}  # fmt: skip
        self.sems: dict[int, int] = {}  # address -> id
        for s in program.semaphores_on(xy):
            addr = SEMAPHORE_BASE + s.id * card.l1_align
            self.sems[addr] = s.id
            self.l1[addr : addr + 4] = np.frombuffer(np.uint32(s.initial_value).tobytes(), dtype=np.uint8)

    def cb_at(self, addr: int) -> _CB | None:
        for cb in self.cbs.values():
            if cb.base <= addr < cb.end:
                return cb
        return None

    def word(self, addr: int) -> int:
        return int(self.l1[addr : addr + 4].view(np.uint32)[0])

    def set_word(self, addr: int, value: int) -> None:
        self.l1[addr : addr + 4] = np.frombuffer(np.uint32(value & 0xFFFFFFFF).tobytes(), dtype=np.uint8)


# -------------------------------------------------------------------------------------------------------- the run
class _Run:
    """One program run: the cores' state, the kernels' threads, and the single lock every kernel API call takes."""

    def __init__(self, program: Program, card: CardSpec, buffers: Sequence[Buffer], views: Sequence[np.ndarray],
                 runtime: Mapping[str, Any]):  # fmt: skip
        self.program = program
        self.card = card
        self.buffers = list(buffers)
        self.views = list(views)
        self.args = program.resolve_runtime_args(buffers, runtime)
        self.cv = threading.Condition(threading.RLock())
        self.cores: dict[CoreCoord, _Core] = {}
        self.live = 0
        self.blocked: dict[KernelAPI, Callable[[], str]] = {}
        self.failure: BaseException | None = None
        self.last_change = time.monotonic()

    def core(self, xy: CoreCoord) -> _Core:
        c = self.cores.get(xy)
        if c is None:
            c = self.cores[xy] = _Core(self.program, self.card, xy)
        return c

    # ------------------------------------------------------------------------------------- blocking and failure
    def changed(self) -> None:
        """State others may wait on changed: every blocked kernel re-checks (and re-registers) its condition."""
        self.blocked.clear()
        self.last_change = time.monotonic()
        self.cv.notify_all()

    def check_abort(self) -> None:
        if self.failure is not None:
            raise _Abort

    def block_until(self, api: KernelAPI, ready: Callable[[], bool], waiting_for: Callable[[], str]) -> None:
        """Wait (lock held) until ``ready()``; a deadlock is every live kernel registered as blocked at once.

        The registry is cleared on every state change, so each entry's condition was false after the last change:
        when it holds every live kernel, nothing can ever make progress. A wait that sees no change for
        ``STALL_SECONDS`` (a kernel spinning without blocking) is reported as a stall.
        """
        while not ready():
            self.check_abort()
            self.blocked[api] = waiting_for
            if len(self.blocked) >= self.live:
                self._deadlock()
                raise _Abort
            self.cv.wait(1.0)
            if self.failure is None and time.monotonic() - self.last_change > STALL_SECONDS:
                self.fail(ProgramError(f"program {self.program.name!r} stalled: {api.who} {waiting_for()}, and no "
                                       f"kernel changed a CB or semaphore for {STALL_SECONDS:.0f} s"))  # fmt: skip
            self.blocked.pop(api, None)
        self.check_abort()

    def _deadlock(self) -> None:
        waits = "; ".join(f"{api.who} {what()}" for api, what in self.blocked.items())
        hint = (
            "Every kernel still running is blocked, so it would hang on a card too: check that each cb_wait_front "
            "is fed by as many cb_push_back pages (and each cb_reserve_back freed by cb_pop_front), and that every "
            "semaphore wait has a matching set or inc"
        )
        self.fail(ProgramError(f"program {self.program.name!r} deadlocked: {waits}. {hint}"))

    def fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
        self.changed()

    def finish(self, api: KernelAPI) -> None:
        self.live -= 1
        if self.failure is None and self.live > 0 and len(self.blocked) >= self.live:
            self._deadlock()

    # ------------------------------------------------------------------------------------------------- threads
    def _body(self, api: KernelAPI) -> None:
        sim = api.kernel.sim
        assert sim is not None
        try:
            sim(api)
            with self.cv:
                api._at_end()
        except _Abort:
            pass
        except ProgramError as e:
            with self.cv:
                self.fail(e)
        except Exception as e:
            name = self.program.name
            err = ProgramError(f"program {name!r}: {api.who}: its sim kernel raised {type(e).__name__}: {e}")
            err.__cause__ = e
            with self.cv:
                self.fail(err)
        finally:
            with self.cv:
                self.finish(api)

    def run_cores(self, cores: Sequence[CoreCoord]) -> None:
        from kohakutt.hal.backends.sim_compute import ComputeAPI
        from kohakutt.hal.backends.sim_dataflow import DataMovementAPI

        apis: list[KernelAPI] = []
        for xy in cores:
            for k in self.program.kernels_on(xy):
                apis.append(ComputeAPI(self, k, xy) if k.kind == "compute" else DataMovementAPI(self, k, xy))
        threads = [threading.Thread(target=self._body, args=(api,), daemon=True,
                                    name=f"ktt-sim-{self.program.name}-{api.kernel.name}-{api.core[0]},{api.core[1]}")
                   for api in apis]  # fmt: skip
        with self.cv:
            self.live = len(threads)
            self.blocked.clear()
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def run(backend: SimBackend, program: Program, buffers: Sequence[Buffer], runtime_args: Mapping[str, Any]) -> None:
    """Run ``program`` over ``buffers`` on the simulated card; raise ProgramError when a kernel breaks a rule."""
    missing = [k.name for k in program.kernels if k.sim is None]
    if missing:
        raise ProgramError(f"program {program.name!r}: kernels {missing} have no sim= function, so the simulator "
                           "cannot run them; give each kernel a Python twin of its C++ source")  # fmt: skip
    card = next((b.device.card for b in buffers), P150A)
    r = _Run(program, card, buffers, [backend.host_view(b) for b in buffers], runtime_args)
    cores = program.cores()
    groups = [cores] if program.semaphores else [[c] for c in cores]
    for group in groups:
        r.run_cores(group)
        if r.failure is not None:
            raise r.failure


# ---------------------------------------------------------------------------------------------- the kernel APIs
class KernelAPI:
    """What every kernel can call: its arguments and the circular buffers of its core (Metalium's names)."""

    def __init__(self, run: _Run, kernel: Kernel, core: CoreCoord):
        self._run = run
        self.kernel = kernel
        self.core = core
        self.card = run.card
        self._core = run.core(core)
        self._args = run.args[kernel.name][core]
        self.who = f"{kernel.name} on core ({core[0]},{core[1]})"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.who}>"

    # ----------------------------------------------------------------------------------------------- helpers
    def _error(self, message: str) -> ProgramError:
        return ProgramError(f"program {self._run.program.name!r}: {self.who}: {message}")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._run.cv:
            self._run.check_abort()
            yield

    def _cb(self, cb: int) -> _CB:
        c = self._core.cbs.get(cb)
        if c is None:
            raise self._error(f"CB {cb} is not defined on this core (its CBs: {sorted(self._core.cbs)})")
        return c

    def _pages(self, c: _CB, n: int, op: str) -> None:
        if not 1 <= n <= c.num_pages:
            raise self._error(f"{op}({c.index}, {n}): CB {c.index} has {c.num_pages} pages; a request must be "
                              f"1..{c.num_pages} pages or it never completes")  # fmt: skip

    def _at_end(self) -> None:
        """Checks when the kernel returns (lock held)."""

    # ------------------------------------------------------------------------------------------------- args
    def get_arg_val(self, i: int) -> int:
        """Runtime argument ``i`` of this kernel on this core."""
        if not 0 <= i < len(self._args):
            raise self._error(f"get_arg_val({i}) but it has {len(self._args)} runtime args on this core")
        return int(self._args[i])

    def get_common_arg_val(self, i: int) -> int:
        common = self.kernel.common_runtime_args
        if not 0 <= i < len(common):
            raise self._error(f"get_common_arg_val({i}) but the kernel has {len(common)} common runtime args")
        return int(common[i])

    def get_compile_time_arg_val(self, i: int) -> int:
        cta = self.kernel.compile_time_args
        if not 0 <= i < len(cta):
            raise self._error(f"get_compile_time_arg_val({i}) but the kernel has {len(cta)} compile-time args")
        return int(cta[i])

    @property
    def defines(self) -> dict[str, str]:
        return dict(self.kernel.defines)

    # -------------------------------------------------------------------------------------- circular buffers
    def cb_reserve_back(self, cb: int, n: int) -> None:
        """Block until ``n`` pages at the back of CB ``cb`` are free; they may then be written and pushed."""
        with self._locked():
            c = self._cb(cb)
            self._pages(c, n, "cb_reserve_back")
            self._run.block_until(
                self,
                lambda: c.free >= n,
                lambda: (
                    f"waits for {_n(n, 'free page')} in CB {cb} that no kernel pops ({c.free} of {c.num_pages} free)"
                ),
            )
            c.reserved = max(c.reserved, n)

    def cb_push_back(self, cb: int, n: int) -> None:
        """Hand ``n`` written pages to the consumer."""
        with self._locked():
            c = self._cb(cb)
            self._pages(c, n, "cb_push_back")
            if n > c.reserved:
                raise self._error(f"cb_push_back({cb}, {n}) pushes {n} pages but only {c.reserved} are reserved: "
                                  f"call cb_reserve_back({cb}, {n}) first (unreserved pages may still hold data the "
                                  "consumer has not read)")  # fmt: skip
            self._before_push(c)
            c.pushed += n
            c.reserved -= n
            self._run.changed()

    def cb_wait_front(self, cb: int, n: int) -> None:
        """Block until ``n`` pages at the front of CB ``cb`` are filled; they may then be read and popped."""
        with self._locked():
            c = self._cb(cb)
            self._pages(c, n, "cb_wait_front")
            self._run.block_until(
                self,
                lambda: c.filled >= n,
                lambda: (
                    f"waits for {_n(n, 'page')} in CB {cb} that no kernel pushes ({c.filled} of {c.num_pages} filled)"
                ),
            )
            c.waited = max(c.waited, n)

    def cb_pop_front(self, cb: int, n: int) -> None:
        """Free ``n`` read pages for the producer."""
        with self._locked():
            c = self._cb(cb)
            self._pages(c, n, "cb_pop_front")
            if n > c.waited:
                raise self._error(f"cb_pop_front({cb}, {n}) pops {n} pages but only {c.waited} were waited for: "
                                  f"call cb_wait_front({cb}, {n}) first")  # fmt: skip
            self._before_pop(c)
            c.popped += n
            c.waited -= n
            self._run.changed()

    def cb_pages_available_at_front(self, cb: int, n: int) -> bool:
        with self._locked():
            return self._cb(cb).filled >= n

    def cb_pages_reservable_at_back(self, cb: int, n: int) -> bool:
        with self._locked():
            return self._cb(cb).free >= n

    def get_tile_size(self, cb: int) -> int:
        """Bytes of one tile in CB ``cb``'s data format."""
        return self._cb(cb).fmt.tile_bytes

    def get_dataformat(self, cb: int) -> Format:
        return self._cb(cb).fmt

    def _before_push(self, c: _CB) -> None:
        pass

    def _before_pop(self, c: _CB) -> None:
        pass


def _n(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


__all__ = ["SEMAPHORE_BASE", "STALL_SECONDS", "KernelAPI",
           "run"]  # fmt: skip
