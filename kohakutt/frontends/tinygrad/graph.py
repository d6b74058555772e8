"""TinyJit on KTT: consecutive tile programs captured once as a hal trace and replayed as one command.

tinygrad's JIT batches consecutive kernel calls into a graph (``GraphRunner``). The first call of a :class:`KTTGraph`
records every program of the batch on the device's stream (``Device.capture``): their IR ops, with the numerics in
scope, become one :class:`kohakutt.hal.Trace` whose intermediates live as long as the graph. Each call replays it,
binding the JIT's input buffers of that call in place of the captured ones; a replay costs one queued command.
Host programs (host reads cannot be captured) and random draws (a replay would repeat their numbers) stay outside
the batches and run as ordinary calls.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, cast

from kohakutt.frontends.tinygrad import counters as stats
from kohakutt.frontends.tinygrad.execute import KTTBuffer
from kohakutt.frontends.tinygrad.translate import TILE, kind_of
from tinygrad.device import Buffer, Compiled
from tinygrad.engine.jit import GraphException, GraphRunner
from tinygrad.uop.ops import Ops, UOp


class KTTGraph(GraphRunner):
    """A batch of KTT tile programs replayed as one hal trace."""

    def __init__(self, linear: UOp, input_uops: tuple[UOp, ...] = ()):
        super().__init__(linear, input_uops)
        if not self.runtimes or any(r is None or getattr(r, "kind", None) != TILE for r in self.runtimes):
            raise GraphException("KTT graphs batch tile programs only")
        self.hal = self.runtimes[0].dev.hal
        self.trace: Any = None
        self.captured: dict[tuple[int, int], KTTBuffer] = {}  # (call, position) -> captured input view

    @staticmethod
    def supports_uop(batch_devs: list[Compiled], new_call: UOp) -> bool:
        prg = new_call.src[0]
        if prg.op is not Ops.PROGRAM or len(prg.src) < 4 or kind_of(prg.src[3].arg) != TILE:
            return False
        return GraphRunner.supports_uop(batch_devs, new_call)

    def _bufs(self, j: int, input_uops: tuple[UOp, ...]) -> list[KTTBuffer]:
        bufs = [b._buf for b in self.calls[j][2]]
        for pos, slot in self.uop_replace[j]:
            bufs[pos] = cast(Buffer, input_uops[slot].buffer).ensure_allocated()._buf
        return bufs

    def _capture(self, input_uops: tuple[UOp, ...]) -> None:
        with self.hal.capture(f"tinyjit:{len(self.calls)} kernels") as trace:
            for j, runtime in enumerate(self.runtimes):
                bufs = self._bufs(j, input_uops)
                for pos, _ in self.uop_replace[j]:
                    self.captured[(j, pos)] = bufs[pos]
                runtime.tile(bufs)
        self.trace = trace

    def __call__(self, input_uops: tuple[UOp, ...], var_vals: dict[str, int], wait: bool = False) -> float | None:
        st = time.perf_counter()
        if self.trace is None:
            self._capture(input_uops)
        queued = time.perf_counter()  # the replay's own host cost starts here (a first call also captured)
        bindings = {}
        for (j, pos), old in self.captured.items():
            new = cast(Buffer, input_uops[dict(self.uop_replace[j])[pos]].buffer).ensure_allocated()._buf
            if new.buf is old.buf:
                continue
            if new.offset != old.offset or new.nbytes != old.nbytes or not new.buf.same_kind_as(old.buf):
                return self._eager(input_uops, wait, st)
            if bindings.get(old.buf, new.buf) is not new.buf:
                return self._eager(input_uops, wait, st)
            bindings[old.buf] = new.buf
        self.trace.replay(bindings)
        stats.replay_host(time.perf_counter() - queued)
        stats.count("graph_replays")
        stats.count("graph_kernels", len(self.calls))
        if wait:
            self.hal.synchronize()
            return time.perf_counter() - st
        return None

    def _eager(self, input_uops: tuple[UOp, ...], wait: bool, st: float) -> float | None:
        """Inputs that cannot stand in for the captured ones (other sizes or offsets): run the programs one by one."""
        for j, runtime in enumerate(self.runtimes):
            runtime(*self._bufs(j, input_uops))
        if wait:
            self.hal.synchronize()
            return time.perf_counter() - st
        return None

    def __del__(self) -> None:
        trace = getattr(self, "trace", None)
        if trace is not None and not self.hal.closed:
            with contextlib.suppress(Exception):  # interpreter shutdown
                trace.release()
