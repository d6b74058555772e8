"""Traces: a command list recorded once on a stream and replayed as one unit, possibly over other buffers.

While a stream captures, its commands are recorded, not run. Buffers allocated during the capture belong to the
trace and live until it is released; frees during the capture are deferred to the release too, since the replay
still uses those buffers, and so are frees of the trace's own buffers after the capture. Host reads and writes
cannot be captured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kohakutt.errors import TraceError
from kohakutt.hal.stream import Command

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.device import Device
    from kohakutt.hal.stream import Stream


class Trace:
    """A recorded command list. Replay with :meth:`replay`; free its buffers with :meth:`release`."""

    def __init__(self, device: Device, name: str = "trace"):
        self.device = device
        self.name = name
        self.commands: list[Command] = []
        self.owned: list[Buffer] = []  # allocated while capturing
        self.deferred_frees: list[Buffer] = []
        self._ended = False
        self._released = False
        self._plan: tuple[list[Buffer], dict[int, list[int]], float] | None = None

    def _record(self, cmd: Command) -> None:
        self.commands.append(cmd)

    @property
    def buffers(self) -> list[Buffer]:
        """Every buffer a recorded command uses, in first-use order."""
        return list((self._replay_plan() if self._ended else self._scan())[0])

    @property
    def inputs(self) -> list[Buffer]:
        """The buffers the trace uses but did not allocate: the ones a replay may bind to others."""
        owned = {b.id for b in self.owned}
        return [b for b in self.buffers if b.id not in owned]

    @property
    def estimate_ns(self) -> float:
        return sum(c.estimate_ns for c in self.commands)

    def _scan(self) -> tuple[list[Buffer], dict[int, list[int]], float]:
        """The buffers the commands use (first-use order), which commands use each buffer, and the estimate."""
        uses: dict[int, list[int]] = {}
        seen: dict[int, Buffer] = {}
        for i, cmd in enumerate(self.commands):
            for b in cmd.buffers:
                seen.setdefault(b.id, b)
                uses.setdefault(b.id, []).append(i)
        return list(seen.values()), uses, self.estimate_ns

    def _replay_plan(self) -> tuple[list[Buffer], dict[int, list[int]], float]:
        """:meth:`_scan`, worked out once the capture has ended (the list no longer changes)."""
        if self._plan is None:
            self._plan = self._scan()
        return self._plan

    def replay(self, bindings: Mapping[Buffer, Buffer] | None = None, *, stream: Stream | None = None,
               blocking: bool = False, args: Mapping[int, Mapping[str, Any]] | None = None,
               wait: bool = True) -> None:
        """Queue the whole recorded list as one command; ``bindings`` maps captured buffers to stand-ins, ``args``
        maps a command's index in :attr:`commands` to arguments that replace its recorded ones for this replay
        (a random draw's place in the stream, say). ``wait=False``: not even under ``KTT_LAUNCH_BLOCKING`` (a
        mesh queues each chip's trace before waiting: their collectives meet)."""
        if self._released:
            raise TraceError(f"trace {self.name!r} was released; capture it again")
        if not self._ended:
            raise TraceError(f"trace {self.name!r} is still capturing; end the capture before replaying it")
        buffers, uses, estimate = self._replay_plan()
        swap = self._check_bindings(bindings) if bindings else {}
        for b in buffers:
            if b.id not in swap:
                if not b.is_live and not self.device.closed:
                    raise TraceError(
                        f"trace {self.name!r} uses {b!r}, which was freed after the capture: a tensor the recorded "
                        "step reads was let go of (a .grad set to None, say); keep it alive, or capture again"
                    )
                b.check_live(f"replaying trace {self.name!r}")
        commands = self.commands
        rebound: dict[int, tuple[Buffer, ...]] = {}
        for bid in swap:
            for i in uses.get(bid, ()):
                if i not in rebound:
                    rebound[i] = tuple(swap.get(b.id, b) for b in commands[i].buffers)
        extra = dict(args) if args else {}

        def run_all() -> None:
            for i, cmd in enumerate(commands):
                try:
                    more = extra.get(i)
                    if more:
                        cmd.run(*rebound.get(i, cmd.buffers), **(cmd.args | dict(more)))
                    else:
                        cmd.execute(rebound.get(i))
                except BaseException as e:
                    raise TraceError(f"command {cmd.name!r} inside trace {self.name!r} failed: {e}") from e

        s = stream or self.device.default_stream
        s.enqueue(Command(f"trace:{self.name}", run_all, (), {}, estimate), wait=wait)
        if blocking:
            s.synchronize()

    def _check_bindings(self, bindings: Mapping[Buffer, Buffer]) -> dict[int, Buffer]:
        inputs = {b.id: b for b in self.inputs}
        owned = {b.id for b in self.owned}
        swap: dict[int, Buffer] = {}
        for old, new in bindings.items():
            if old.id in owned:
                raise TraceError(f"buffer {old.id} was allocated by trace {self.name!r}; only its inputs can be "
                                 f"rebound ({sorted(inputs)})")
            if old.id not in inputs:
                raise TraceError(f"buffer {old.id} is not used by trace {self.name!r}; its inputs are "
                                 f"{sorted(inputs)}")
            if not old.same_kind_as(new):
                raise TraceError(f"cannot replay trace {self.name!r} with {new!r} in place of {old!r}: size, memory "
                                 "kind, layout, format and page size must all match")
            if new.device is not self.device:
                raise TraceError(f"{new!r} is on another device than trace {self.name!r}")
            new.check_live(f"binding a buffer for trace {self.name!r}")
            swap[old.id] = new
        return swap

    @property
    def released(self) -> bool:
        return self._released

    def release(self, keep: Iterable[Buffer] = ()) -> None:
        """Free the buffers the trace owns and the frees it deferred. Owned buffers in ``keep`` (ones a frontend's
        tensors still hold) are handed over instead: they stay live and are freed as any buffer is. The trace
        cannot be replayed after this."""
        if self._released:
            return
        self._released = True
        self.device.synchronize()
        kept = {b.id for b in keep}
        freed = {b.id for b in self.deferred_frees}
        for b in self.owned + self.deferred_frees:
            b.trace = None
            if b.is_live and (b.id in freed or b.id not in kept):
                self.device.free(b)
        self.owned, self.deferred_frees, self.commands, self._plan = [], [], [], None

    def __repr__(self) -> str:
        return (f"Trace({self.name!r}, {len(self.commands)} commands, {len(self.owned)} owned buffers, "
                f"{'released' if self._released else 'ready' if self._ended else 'capturing'})")
