"""A trace on the mesh: one HAL trace per chip, recorded together and replayed together.

Each chip's stream records its commands (its ops and its halves of the collectives); a replay queues every chip's
trace before waiting for any, so their collectives meet as they did eagerly. It has the interface
``kohakutt.capture`` uses of a HAL :class:`~kohakutt.hal.Trace`, with mesh storages in place of buffers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kohakutt.errors import TraceError
from kohakutt.hal.trace import Trace

if TYPE_CHECKING:
    from kohakutt.hal.stream import Command
    from kohakutt.mesh.device import MeshDevice, MeshStream
    from kohakutt.mesh.storage import MeshStorage


class MeshTrace:
    """What a mesh capture recorded. Replay with :meth:`replay`; free with :meth:`release`."""

    def __init__(self, mesh: MeshDevice, name: str):
        self.device = mesh
        self.name = name
        self.traces: list[Trace] = []  # one per chip, in chip order
        self.owned: list[MeshStorage] = []  # mesh storages made while capturing
        self._ended = False
        self._draws: list[list[tuple[int, int]]] | None = None  # each chip's random draws (fixed once recorded)

    @property
    def commands(self) -> list[Command]:
        """The first chip's commands (random draws are found here; the other chips' follow them)."""
        return self.traces[0].commands if self.traces else []

    @property
    def estimate_ns(self) -> float:
        return max((t.estimate_ns for t in self.traces), default=0.0)

    @property
    def released(self) -> bool:
        return bool(self.traces) and self.traces[0].released

    @property
    def inputs(self) -> list[MeshStorage]:
        """The mesh storages the trace uses but did not make: the ones a replay may bind to others."""
        used = {b.id for t in self.traces for b in t.inputs}
        owned = {s.id for s in self.owned}
        return [
            s
            for s in list(self.device.storages.values())
            if s.id not in owned and s.buffers and any(b.id in used for b in s.buffers)
        ]

    def replay(
        self,
        bindings: Mapping[MeshStorage, MeshStorage] | None = None,
        *,
        stream: MeshStream | None = None,
        blocking: bool = False,
        args: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        """Queue every chip's trace (``bindings`` maps captured mesh storages to stand-ins placed the same way;
        ``args`` replaces the first chip's recorded arguments by command index, and the other chips' matching
        random draws get the same)."""
        from kohakutt.kernels import runner

        if not self._ended:
            raise TraceError(f"mesh trace {self.name!r} is still capturing")
        s = stream or self.device.default_stream
        per_chip: list[dict[Any, Any]] = [{} for _ in self.traces]
        for old, new in (bindings or {}).items():
            if not old.same_kind_as(new) or old.buffers is None or new.buffers is None:
                raise TraceError(
                    f"cannot replay mesh trace {self.name!r} with {new!r} in place of {old!r}: size, "
                    "layout and placement must all match"
                )
            for c, (a, b) in enumerate(zip(old.buffers, new.buffers)):
                per_chip[c][a] = b
        if self._draws is None:
            self._draws = [runner.random_draws(t.commands) for t in self.traces]
        draws = self._draws
        chip_args: list[dict[int, Mapping[str, Any]]] = [dict(args or {})] + [{} for _ in self.traces[1:]]
        for c in range(1, len(self.traces)):
            if len(draws[c]) != len(draws[0]):
                raise TraceError(f"mesh trace {self.name!r}: the chips recorded different random draws")
            for (i0, _), (ic, _) in zip(draws[0], draws[c]):
                if i0 in chip_args[0]:
                    chip_args[c][ic] = chip_args[0][i0]
        for c, t in enumerate(self.traces):
            t.replay(per_chip[c], stream=s.streams[c], args=chip_args[c], wait=False)
        if blocking or any(d.launch_blocking for d in self.device.chips):
            s.synchronize()

    def release(self, keep: Iterable[Any] = ()) -> None:
        """Free what the chips' traces hold; buffers of mesh storages still alive (outputs torch tensors hold) are
        handed over to them."""
        for c, t in enumerate(self.traces):
            kept = [s.buffers[c] for s in self.owned if s.is_live and s.buffers is not None]
            t.release(keep=kept)
        self.owned = []

    def __repr__(self) -> str:
        n = len(self.commands)
        return f"MeshTrace({self.name!r}, {len(self.traces)} chips, {n} commands on the first)"
