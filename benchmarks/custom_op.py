"""Host cost of calling a custom op (a hand-written program through ``kohakutt.kernels.op``) against a built-in
element-wise op, both queued on tt in the same run.

Each figure is microseconds per call, median of N rounds; each round times the built-in op (``a * b``) and the custom
op (``gated_gelu(a, b, 0.5)`` from examples/kernels/python, a reader / compute / writer program on four cores) one
after another on 32 x 32 bfloat16 tensors, and the ratio is the median of the rounds' ratios, so a change of machine
load mid-run moves both sides. Queue only: the default stream is held behind a gate while a round is queued, so the
worker (the simulated card, on the same CPU) does not compete. Thread CPU times the calling thread's CPU: what the
host itself spends, which a busy machine does not inflate.
  custom_vs_builtin   target: custom op <= 1.5 x the built-in op (queue)
Run: python benchmarks/custom_op.py [--calls 200] [--rounds 15] [--json]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "kernels" / "python"))

import torch  # noqa: E402
from gated_gelu_op import gated_gelu, reference  # noqa: E402

import kohakutt  # noqa: E402
from kohakutt.frontends.torch import runtime  # noqa: E402
from kohakutt.hal import Command  # noqa: E402

TARGET = 1.5


def queue_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """Microseconds per call of ``n`` calls of ``fn`` queued behind a gate: wall clock and the thread's CPU time."""
    g, entered = threading.Event(), threading.Event()
    runtime.device(0).default_stream.enqueue(Command("gate", lambda: (entered.set(), g.wait())))
    entered.wait()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    host, cpu = time.perf_counter() - t0, time.thread_time() - c0
    g.set()
    torch.tt.synchronize()
    return host / n * 1e6, cpu / n * 1e6


def run(n: int, rounds: int) -> dict:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    a_cpu, b_cpu = torch.randn(32, 32).bfloat16(), torch.randn(32, 32).bfloat16()
    a, b = a_cpu.to(dev), b_cpu.to(dev)
    assert torch.allclose(gated_gelu(a, b, 0.5).cpu().float(), reference(a_cpu, b_cpu, 0.5).float(), atol=2**-6)
    assert torch.equal((a * b).cpu(), a_cpu * b_cpu)
    rows = []
    for r in range(rounds + 1):
        (bw, bc), (cw, cc) = queue_us(lambda: a * b, n), queue_us(lambda: gated_gelu(a, b, 0.5), n)
        if r:  # the first round warms caches
            rows.append((bw, cw, bc, cc))
    builtin, custom, builtin_cpu, custom_cpu = (statistics.median(c) for c in zip(*rows))
    ratio = statistics.median(c / b for b, c, *_ in rows)
    thread_ratio = statistics.median(c / b for *_, b, c in rows)
    return {"calls": n, "rounds": rounds, "cpus": os.cpu_count(), "torch": torch.__version__,
            "load_average": os.getloadavg()[0],
            "results": {"custom_vs_builtin": {"builtin_us": builtin, "custom_us": custom, "ratio": ratio,
                                              "builtin_thread_us": builtin_cpu, "custom_thread_us": custom_cpu,
                                              "thread_ratio": thread_ratio, "target": TARGET,
                                              "met": ratio <= TARGET}}}  # fmt: skip


def table(report: dict) -> str:
    r = report["results"]["custom_vs_builtin"]
    return "\n".join([
        f"host cost per call (queue only), 32 x 32 bfloat16, median of {report['rounds']} rounds of "
        f"{report['calls']} calls, {report['cpus']} CPUs (load average {report['load_average']:.1f})",
        f"{'case':<20}{'built-in a*b us':>16}{'custom op us':>14}{'ratio':>8}{'target':>9}  met"
        f"{'thread CPU: built-in / custom us':>35}{'ratio':>8}",
        f"{'custom_vs_builtin':<20}{r['builtin_us']:>16.1f}{r['custom_us']:>14.1f}{r['ratio']:>8.2f}"
        f"{'<= ' + str(r['target']):>9}  {'yes' if r['met'] else 'NO ':<3}"
        f"{r['builtin_thread_us']:>26.1f} / {r['custom_thread_us']:<6.1f}{r['thread_ratio']:>8.2f}",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="calls queued per round (default 200)")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds; the median counts")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(10, args.calls), max(1, args.rounds))
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
