"""The placement log: what each mesh op was given, what it produced, what was converted for it, and why.

Off by default (it costs a record per op); :func:`record_placements` turns it on for a block, as PyTorch's
``CommDebugMode`` does for DTensor. Collective counts and bytes are kept always, in the mesh's statistics.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Conversion:
    """One redistribution done for an op: which operand, from and to what, by which collective, how many bytes each
    chip received over the link, and why (when it is not the op's rule)."""

    operand: str
    src: str
    dst: str
    kind: str
    nbytes: int = 0
    why: str = ""

    def __str__(self) -> str:
        size = f", {_size(self.nbytes)}" if self.nbytes else ""
        why = f" ({self.why})" if self.why else ""
        return f"{self.operand}: {self.src} -> {self.dst} by {self.kind}{size}{why}"


@dataclass(frozen=True)
class PlacementRecord:
    """One mesh op: ``op``, its inputs' placements, its outputs', the conversions made for it, and the rule's
    reason."""

    op: str
    inputs: tuple[str, ...]
    output: tuple[str, ...]
    conversions: tuple[Conversion, ...] = field(default_factory=tuple)
    reason: str = ""

    def __str__(self) -> str:
        conv = "; ".join(str(c) for c in self.conversions) or "none"
        return f"{self.op}({', '.join(self.inputs)}) -> {', '.join(self.output)} | conversions: {conv} | {self.reason}"


def _size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


class _Log:
    depth = 0  # process-wide: the autograd engine runs a backward on its own thread


_state = _Log()
_lock = threading.Lock()
_records: list[PlacementRecord] = []
LIMIT = 100_000


def recording() -> bool:
    return _state.depth > 0


def add(record: PlacementRecord) -> None:
    with _lock:
        if len(_records) >= LIMIT:
            del _records[: LIMIT // 10]
        _records.append(record)


@contextmanager
def record_placements(clear: bool = True) -> Iterator[list[PlacementRecord]]:
    """Record every mesh op in the block, of any thread (backward passes run on autograd's); the log is emptied first
    unless ``clear=False``. Yields the list the records go to (also :func:`placement_log`)."""
    if clear:
        with _lock:
            _records.clear()
    with _lock:
        _state.depth += 1
    try:
        yield _records
    finally:
        with _lock:
            _state.depth -= 1


def placement_log() -> list[PlacementRecord]:
    """The records of the last :func:`record_placements` block (a copy)."""
    with _lock:
        return list(_records)
