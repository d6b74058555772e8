"""Host cost of queueing small ops on tt, against torch's CPU eager in the same run.

Each figure is microseconds per op (per op of the chain for the chain), median of N rounds; each round measures CPU
eager, tt queue and tt end to end one after another, and a ratio is the median of the rounds' ratios, so a change
of machine load mid-run moves both sides of it:
  tiny_add     y = a + b on 32 x 32 bfloat16 tensors                  (target: tt <= 4 x CPU eager)
  chain10      ten element-wise ops on 32 x 32 bfloat16, one after another   (target: tt <= 4 x CPU eager)
For tt there are two figures. ``queue`` is the host cost alone: the default stream is held behind a gate while the
ops of a round are queued (a few hundred, about one training step of a small model), so the worker (which runs the
simulated card on the same CPU) does not compete; then they run. ``end to end`` lets the worker run as ops are
queued and waits for the last one: the host cost plus what the simulator costs on this CPU (a real card would run
the ops concurrently with the host). The thread-CPU columns time CPU eager and tt queue by the calling thread's CPU
time: what the host itself spends, which a busy machine (more jobs than cores) does not inflate.
Run: python benchmarks/dispatch.py [--ops 200] [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kohakutt
from kohakutt.frontends.torch import runtime
from kohakutt.hal import Command

TARGET = 4.0


def chain10(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a + b
    x = x * b
    x = x - a
    x = torch.relu(x)
    x = x + 1.0
    x = x * 0.5
    x = torch.abs(x)
    x = x - b
    x = torch.neg(x)
    return x * a


def per_op_us(fn: Callable[[], object], n: int, gate: bool, per: int = 1) -> tuple[float, float]:
    """Microseconds per op of one round of ``n`` calls of ``fn`` (``per`` ops each) on tt: wall clock, and the
    calling thread's CPU time (gated rounds only: the host's own work, whatever else the machine runs)."""
    g, entered = threading.Event(), threading.Event()
    if gate:  # timing starts once the worker waits at the gate (waking it would otherwise land in the round)
        runtime.device(0).default_stream.enqueue(Command("gate", lambda: (entered.set(), g.wait())))
        entered.wait()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    host, cpu = time.perf_counter() - t0, time.thread_time() - c0
    g.set()
    if not gate:
        torch.tt.synchronize()
        host = time.perf_counter() - t0
    torch.tt.synchronize()
    return host / n / per * 1e6, cpu / n / per * 1e6


def cpu_us(fn: Callable[[], object], n: int, per: int = 1) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n / per * 1e6, (time.thread_time() - c0) / n / per * 1e6


def run(n: int, rounds: int) -> dict:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    a_cpu, b_cpu = torch.randn(32, 32).bfloat16(), torch.randn(32, 32).bfloat16()
    a, b = a_cpu.to(dev), b_cpu.to(dev)
    assert torch.equal((a + b).cpu(), a_cpu + b_cpu), "tt add disagrees with the CPU"
    got, want = chain10(a, b).cpu().float(), chain10(a_cpu.float(), b_cpu.float())
    assert torch.allclose(got, want, rtol=2**-5, atol=2**-5), "tt chain disagrees with the CPU"
    results = {}
    for name, tt_fn, cpu_fn, per in (
        ("tiny_add", lambda: a + b, lambda: a_cpu + b_cpu, 1),
        ("chain10", lambda: chain10(a, b), lambda: chain10(a_cpu, b_cpu), 10),
    ):
        chains = max(1, n // per)
        rows = []
        for r in range(rounds + 1):  # the rounds interleave the three, so a change of machine load hits all alike
            (c, c_cpu), (q, q_cpu), (e, _) = (cpu_us(cpu_fn, chains * 5, per), per_op_us(tt_fn, chains, True, per),
                                               per_op_us(tt_fn, chains, False, per))
            if r:  # the first round warms caches
                rows.append((c, q, e, c_cpu, q_cpu))
        cpu, queue, e2e, cpu_cpu, queue_cpu = (statistics.median(col) for col in zip(*rows))
        ratio = statistics.median(q / c for c, q, *_ in rows)
        results[name] = {"cpu_us": cpu, "tt_queue_us": queue, "tt_end_to_end_us": e2e, "ratio": ratio,
                         "end_to_end_ratio": statistics.median(e / c for c, _, e, *_ in rows),
                         "cpu_thread_us": cpu_cpu, "tt_queue_thread_us": queue_cpu,
                         "thread_ratio": statistics.median(q / c for *_, c, q in rows), "target": TARGET,
                         "met": ratio <= TARGET}  # fmt: skip
    return {"ops": n, "rounds": rounds, "cpus": os.cpu_count(), "torch": torch.__version__,
            "load_average": os.getloadavg()[0], "results": results}  # fmt: skip


def table(report: dict) -> str:
    lines = [
        f"host cost per op, 32 x 32 bfloat16, median of {report['rounds']} rounds of ~{report['ops']} ops, "
        f"{report['cpus']} CPUs (load average {report['load_average']:.1f}), torch {report['torch']}",
        f"{'case':<10}{'CPU eager us':>13}{'tt queue us':>13}{'ratio':>8}{'target':>9}  met{'tt end-to-end us':>19}"
        f"{'ratio':>8}{'thread CPU: eager / queue us':>31}{'ratio':>8}",
    ]
    for name, r in report["results"].items():
        lines.append(
            f"{name:<10}{r['cpu_us']:>13.2f}{r['tt_queue_us']:>13.2f}{r['ratio']:>8.1f}{'<= ' + str(r['target']):>9}"
            f"  {'yes' if r['met'] else 'NO ':<3}{r['tt_end_to_end_us']:>19.2f}{r['end_to_end_ratio']:>8.1f}"
            f"{r['cpu_thread_us']:>22.2f} / {r['tt_queue_thread_us']:<6.2f}{r['thread_ratio']:>8.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="ops queued per round (default 200)")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds; the median counts")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(10, args.ops), max(1, args.rounds))
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
