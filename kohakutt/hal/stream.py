"""In-order asynchronous streams of commands, and events between them.

``enqueue`` returns at once; a worker thread runs the commands in order. A failing command does not stop the stream:
its error is kept and raised by the next synchronizing call (``synchronize``, a host read), naming the command.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kohakutt.errors import CommandError, TraceError

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.device import Device
    from kohakutt.hal.trace import Trace

_running = threading.local()  # .stream: the stream whose worker this thread is


def running() -> Stream | None:
    """The stream whose command the calling thread is running (None outside a stream's worker)."""
    return getattr(_running, "stream", None)


def enqueue_group(commands: list[tuple[Stream, Command]]) -> None:
    """Queue commands that wait for one another (a collective's halves, one per chip's stream): every stream gets
    its command before any is waited for, even under ``KTT_LAUNCH_BLOCKING=1``."""
    for s, cmd in commands:
        s.enqueue(cmd, wait=False)
    for s, _ in commands:
        if s.device.launch_blocking and s.capturing is None:
            s.synchronize()


@dataclass(eq=False, slots=True)
class Command:
    """One unit of device work: ``run(*buffers, **args)``, named for errors and profiles.

    Buffers go in ``buffers`` (never inside ``args``) so that a trace can replay the command over other buffers.
    ``estimate_ns`` is the simulator's device-time estimate for it.
    """

    name: str
    run: Callable[..., Any]
    buffers: tuple[Buffer, ...] = ()
    args: dict[str, Any] = field(default_factory=dict)
    estimate_ns: float = 0.0

    def execute(self, buffers: tuple[Buffer, ...] | None = None) -> None:
        self.run(*(self.buffers if buffers is None else buffers), **self.args)


class Event:
    """A point in a stream. ``query`` says whether the stream has passed it; ``synchronize`` waits for it."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._recorded = False
        self.device_time_ns = 0.0

    def record(self, stream: Stream) -> Event:
        stream.record_event(self)
        return self

    def query(self) -> bool:
        return self._done.is_set() or not self._recorded

    def synchronize(self) -> None:
        if self._recorded:
            self._done.wait()

    def wait(self, stream: Stream) -> None:
        stream.wait_event(self)

    def elapsed_ms(self, end: Event) -> float:
        """Simulated device time between this event and ``end``, in milliseconds."""
        self.synchronize()
        end.synchronize()
        return (end.device_time_ns - self.device_time_ns) / 1e6


class Stream:
    """An in-order queue of commands on one device, run by its own worker thread."""

    def __init__(self, device: Device, name: str):
        self.device = device
        self.name = name
        self._queue: deque[Command] = deque()
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)  # completions: synchronize and wait_for wait on it
        self._work = threading.Condition(self._lock)  # the worker waits on it for commands
        self._idle = False  # the worker waits on _work: the next enqueue wakes it
        self._sync_waiters = 0
        self._submitted = 0
        self._completed = 0
        self._errors: list[CommandError] = []
        self._capture: Trace | None = None
        self._closed = False
        self.device_time_ns = 0.0  # the simulated device clock of this stream
        self._worker = threading.Thread(target=self._loop, name=f"ktt-{device.chip_id}-{name}", daemon=True)
        self._worker.start()

    # ----------------------------------------------------------------------------------------------- submission
    def enqueue(self, cmd: Command, *, wait: bool = True) -> None:
        """Queue ``cmd``; returns at once (under ``KTT_LAUNCH_BLOCKING=1`` it returns after the command ran, unless
        ``wait=False``: see :func:`enqueue_group`)."""
        if self._capture is not None:
            self._capture._record(cmd)
            return
        with self._lock:
            if self._closed:
                raise CommandError(cmd.name, RuntimeError("the stream is closed"))
            self._queue.append(cmd)
            self._submitted += 1
            if self._idle:
                self._work.notify()
        if wait and self.device.launch_blocking:
            self.synchronize()

    def synchronize(self) -> None:
        """Wait for every queued command; raise the first error since the last synchronize, naming its command."""
        with self._cv:
            self._wait_locked(self._submitted)
            errors, self._errors = self._errors, []
        if errors:
            first = errors[0]
            if len(errors) > 1:
                first.add_note(f"{len(errors) - 1} later command(s) failed too: "
                               + ", ".join(e.command for e in errors[1:6]))
            raise first

    def query(self) -> bool:
        """True when every queued command has run."""
        with self._cv:
            return self._completed == self._submitted

    @property
    def worker(self) -> threading.Thread:
        """The thread that runs this stream's commands."""
        return self._worker

    def mark(self) -> int:
        """The point this stream has been queued up to: the number of commands queued so far."""
        return self._submitted

    def passed(self, mark: int) -> bool:
        """Whether every command queued before ``mark`` (from :meth:`mark`) has run."""
        return self._completed >= mark

    def wait_for(self, mark: int) -> None:
        """Wait until the commands queued before ``mark`` have run, without taking their errors (``synchronize``
        still reports them)."""
        with self._cv:
            self._wait_locked(mark)

    def _wait_locked(self, mark: int) -> None:
        self._sync_waiters += 1
        try:
            while self._completed < mark:
                self._cv.wait()
        finally:
            self._sync_waiters -= 1

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event._recorded = True
        event._done.clear()

        def mark() -> None:
            event.device_time_ns = self.device_time_ns
            event._done.set()

        self.enqueue(Command("record_event", mark))
        return event

    def wait_event(self, event: Event) -> None:
        """Later commands of this stream start after ``event`` completes."""
        if self._capture is not None:
            raise TraceError("waiting on an event inside a trace capture is not supported; record before capturing")
        self.enqueue(Command("wait_event", event.synchronize))

    # -------------------------------------------------------------------------------------------------- capture
    def begin_capture(self, trace: Trace) -> None:
        self.synchronize()
        if self._capture is not None:
            raise TraceError(f"stream {self.name!r} is already capturing a trace; end that capture first")
        self._capture = trace

    def end_capture(self) -> Trace:
        if self._capture is None:
            raise TraceError(f"stream {self.name!r} is not capturing a trace")
        trace, self._capture = self._capture, None
        return trace

    @property
    def capturing(self) -> Trace | None:
        return self._capture

    # --------------------------------------------------------------------------------------------------- worker
    def _loop(self) -> None:
        profiler = self.device.profiler
        _running.stream = self
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._idle = True
                    self._work.wait()
                    self._idle = False
                if not self._queue:
                    return
                cmd = self._queue.popleft()
            t0 = time.perf_counter_ns()
            try:
                cmd.execute()
            except BaseException as e:  # kept for the next synchronizing call
                err = CommandError(cmd.name, e)
                err.__cause__ = e
                with self._cv:
                    self._errors.append(err)
            self.device_time_ns += cmd.estimate_ns
            if profiler.active:
                profiler.record(self, cmd, time.perf_counter_ns() - t0)
            with self._lock:
                self._completed += 1
                if self._sync_waiters:
                    self._cv.notify_all()

    def close(self) -> None:
        """Run what is queued, then stop the worker. Errors still pending are dropped with the stream."""
        with self._lock:
            self._closed = True
            self._work.notify_all()
        self._worker.join()
