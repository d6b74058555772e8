"""A per-command record of the simulator's device-time estimate and the host time each command took."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kohakutt.hal.stream import Command, Stream


@dataclass(frozen=True)
class ProfileRecord:
    name: str
    stream: str
    device_ns: float  # the simulator's estimate of the command's time on the card
    host_ns: int  # what running it took here


class Profiler:
    """Collects :class:`ProfileRecord` s while at least one :func:`kohakutt.hal.profile` scope is open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self.records: list[ProfileRecord] = []

    @property
    def active(self) -> bool:
        return self._depth > 0

    def start(self) -> None:
        with self._lock:
            self._depth += 1

    def stop(self) -> None:
        with self._lock:
            self._depth -= 1

    def record(self, stream: Stream, cmd: Command, host_ns: int) -> None:
        with self._lock:
            self.records.append(ProfileRecord(cmd.name, stream.name, cmd.estimate_ns, host_ns))


class Profile:
    """What a profile scope saw: the records, a per-op summary and a printable table."""

    def __init__(self, records: list[ProfileRecord]):
        self.records = records

    def summary(self) -> list[dict[str, float | int | str]]:
        """One row per command name: count, total and mean device estimate (us), total host time (us)."""
        acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        for r in self.records:
            a = acc[r.name]
            a[0] += 1
            a[1] += r.device_ns
            a[2] += r.host_ns
        rows = [
            {"op": k, "count": int(c), "device_us": d / 1e3, "device_mean_us": d / c / 1e3, "host_us": h / 1e3}
            for k, (c, d, h) in acc.items()
        ]
        return sorted(rows, key=lambda r: -float(r["device_us"]))

    @property
    def device_us(self) -> float:
        return sum(r.device_ns for r in self.records) / 1e3

    def table(self) -> str:
        lines = [f"{'op':<40} {'count':>6} {'device us':>12} {'mean us':>10} {'host us':>12}"]
        for r in self.summary():
            lines.append(f"{r['op']!s:<40} {r['count']:>6} {r['device_us']:>12.2f} {r['device_mean_us']:>10.2f} "
                         f"{r['host_us']:>12.1f}")
        lines.append(f"{'total':<40} {len(self.records):>6} {self.device_us:>12.2f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
