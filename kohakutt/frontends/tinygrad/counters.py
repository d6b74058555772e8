"""What the KTT device did: kernels on the tile path, kernels on the host (by reason), IR ops issued.

Host runs are never silent: each reason kind (``dtype:float16``, ``op:THREEFRY``, ...) warns once per process with a
:class:`HostFallbackWarning` and is counted here.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter
from typing import Any


class HostFallbackWarning(RuntimeWarning):
    """A KTT kernel ran on the host (as tinygrad's CPU device's C, or in its PYTHON interpreter) instead of the card."""


_lock = threading.Lock()
_counts: Counter[str] = Counter()
_host: Counter[str] = Counter()
_ops: Counter[str] = Counter()
_warned: set[str] = set()
_replay_host_s = 0.0


def replay_host(seconds: float) -> None:
    """Add the host time one TinyJit graph replay took to queue."""
    global _replay_host_s
    with _lock:
        _replay_host_s += seconds


def count(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] += n


def count_op(op: str) -> None:
    with _lock:
        _ops[op] += 1


def host_run(kind: str, detail: str, how: str) -> None:
    """Count one host run of a kernel whose reason is ``kind``, run ``how`` (``c`` or ``python``); warn the first time
    a kind is seen."""
    with _lock:
        _host[kind] += 1
        _counts[f"host_runs_{how}"] += 1
        first = kind not in _warned
        _warned.add(kind)
    if first:
        warnings.warn(
            f"KTT: a tinygrad kernel runs on the host, not the card ({detail}); counted in "
            "kohakutt.tinygrad.stats()['host_kernels']",
            HostFallbackWarning,
            stacklevel=3,
        )


def stats() -> dict[str, Any]:
    """Counters since the process started (or the last :func:`reset`): kernels run on the card (``tile_kernels``),
    on the host by reason (``host_kernels``) and by how they ran there (``host_runs``: compiled C or the PYTHON
    interpreter), matmuls, gathers, IR ops by name, graph (TinyJit) replays, their
    kernels, and the host seconds those replays took to queue (``graph_replay_host_s``, the JIT's fixed cost)."""
    with _lock:
        return {
            "tile_kernels": _counts["tile_kernels"],
            "random_kernels": _counts["random_kernels"],
            "host_kernels": dict(_host),
            "host_total": sum(_host.values()),
            "host_runs": {"c": _counts["host_runs_c"], "python": _counts["host_runs_python"]},
            "matmuls": _counts["matmuls"],
            "split_matmuls": _counts["split_matmuls"],
            "gathers": _counts["gathers"],
            "graph_replays": _counts["graph_replays"],
            "graph_kernels": _counts["graph_kernels"],
            "graph_replay_host_s": _replay_host_s,
            "ir_ops": dict(_ops),
        }


def reset() -> None:
    """Zero the counters (the once-per-kind warnings stay given)."""
    global _replay_host_s
    with _lock:
        _replay_host_s = 0.0
        _counts.clear()
        _host.clear()
        _ops.clear()
