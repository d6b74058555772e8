"""Kernel DSL programs against the same computation as a chain of TT-NN ops, on the simulated card, in one run.

Cases (examples/kernels/dsl_metal): ``scaled_add`` (``a * s + b``; chain: ``a * s`` then ``+ b``) and ``rms_norm``
(chain: ``x * x``, ``mean``, ``+ eps``, ``rsqrt``, ``x * r``, ``* w``; TT-NN's own fused ``rms_norm`` is shown
beside), on 512 x 1024 bfloat16. Figures:
  card us, program      the simulator's device-time estimate of the DSL program on tile-layout tensors (what the
                        kernels cost on a card), against the chain's ops (target: the fused program below the chain)
  card us, as a torch op  the DSL op called on tt tensors: the program plus the op layer staging the row-major
                        storage of the tensors into tiles and the result back (two conversions a tensor)
  host us per call      queue only (the stream held behind a gate while the calls are queued), median of rounds:
                        the DSL op against the chain's ops, wall clock and the calling thread's CPU time
  compiles              kernel variants the DSL op built over 20 shapes (target 1: the first), and kernel builds
                        the host build loaded after the first call (0)
Run: python benchmarks/dsl_kernels.py [--calls 50] [--rounds 7] [--json]
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
sys.path.insert(0, str(ROOT / "examples" / "kernels" / "dsl_metal"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from rms_norm_km import rms_norm, rms_norm_program  # noqa: E402
from scaled_add_km import scaled_add, scaled_add_program  # noqa: E402

import kohakutt  # noqa: E402
from kohakutt import hal  # noqa: E402
from kohakutt import kernels as kk  # noqa: E402
from kohakutt.dsl.metal import bits  # noqa: E402
from kohakutt.frontends.torch import runtime  # noqa: E402
from kohakutt.hal import Command, host_build  # noqa: E402

SHAPE = (512, 1024)
EPS = 1e-6


def card_us(fn: Callable[[], object]) -> tuple[float, int]:
    """The simulated card time of what ``fn`` queues (after a warm-up call), and how many commands it queued."""
    fn()
    torch.tt.synchronize()
    with hal.profile() as prof:
        fn()
    return prof.device_us, len(prof.records)


def queue_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """Microseconds per call of ``n`` calls of ``fn`` queued behind a gate (the simulated card does not compete):
    wall clock, and the calling thread's CPU time (what the host spends, which other jobs do not inflate)."""
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


def compiles_over_shapes(dev: object) -> dict:
    """The DSL op over 20 shapes: kernel variants built, and kernels the host build loaded after the first call."""
    torch.manual_seed(0)
    loaded = None
    for i, n in enumerate(range(1, 21)):
        a, b = torch.randn(3 * n, 7 * n + 1).bfloat16(), torch.randn(3 * n, 7 * n + 1).bfloat16()
        got = scaled_add(a.to(dev), b.to(dev), 0.1 * n).cpu()
        assert torch.equal(got, (a.float() * torch.tensor(0.1 * n) + b.float()).bfloat16()), n
        if i == 0:
            loaded = host_build.stats["builds"]
    assert loaded is not None
    n = scaled_add_program.compiles
    return {"shapes": 20, "compiles": n, "target": 1, "met": n == 1,
            "kernel_builds_after_first": host_build.stats["builds"] - loaded}  # fmt: skip


def program_card_us(prog: object, tensors: dict, runtime_values: dict) -> float:
    """The card time of the DSL program alone, launched on tile-layout device tensors (nothing to stage)."""
    return card_us(lambda: prog.launch(tensors, runtime_values))[0]  # type: ignore[attr-defined]


def run(calls: int, rounds: int) -> dict:
    dev = kohakutt.device(0)
    hdev = hal.open_device(0)
    compiles = compiles_over_shapes(dev)
    torch.manual_seed(1)
    a, b = torch.randn(SHAPE).bfloat16(), torch.randn(SHAPE).bfloat16()
    w = torch.randn(SHAPE[-1]).bfloat16()
    at, bt, wt = a.to(dev), b.to(dev), w.to(dev)
    assert torch.equal(scaled_add(at, bt, 0.5).cpu(), (a.float() * 0.5 + b.float()).bfloat16())
    ref = F.rms_norm(a.double(), (SHAPE[-1],), w.double(), EPS)
    assert (rms_norm(at, wt, EPS).cpu().double() - ref).abs().max() <= 2**-7 * ref.abs().max()

    def tile(x: torch.Tensor) -> kk.DeviceTensor:
        return kk.from_numpy(hdev, x.float().numpy(), "bfloat16", "tile")

    ta, tb, tw = tile(a), tile(b), tile(w)
    tout = kk.empty(hdev, ta.spec)
    width = SHAPE[-1]
    scaled_rt = {"tiles": kk.tile_count(SHAPE), "s": bits(0.5)}
    norm_rt = {"rows": kk.tile_count(SHAPE) // (width // 32), "wt": width // 32, "inv_w": bits(1 / width),
               "eps": bits(EPS)}  # fmt: skip
    cases = {
        "scaled_add": {
            "program": program_card_us(scaled_add_program, {"a": ta, "b": tb, "out": tout}, scaled_rt),
            "op": lambda: scaled_add(at, bt, 0.5),
            "chain": lambda: at * 0.5 + bt,
        },
        "rms_norm": {
            "program": program_card_us(rms_norm_program, {"x": ta, "weight": tw, "y": tout}, norm_rt),
            "op": lambda: rms_norm(at, wt, EPS),
            "chain": lambda: at * torch.rsqrt((at * at).mean(-1, keepdim=True) + EPS) * wt,
            "fused": lambda: F.rms_norm(at, (width,), wt, EPS),
        },
    }
    results: dict = {}
    for name, c in cases.items():
        op_us, _ = card_us(c["op"])
        chain_us, chain_ops = card_us(c["chain"])
        host = []
        for r in range(rounds + 1):
            (o, oc), (ch, chc) = queue_us(c["op"], calls), queue_us(c["chain"], calls)
            if r:  # the first round warms caches
                host.append((o, ch, oc, chc))
        row = {
            "program_card_us": c["program"], "op_card_us": op_us, "chain_card_us": chain_us,
            "chain_ops": chain_ops, "program_vs_chain": c["program"] / chain_us,
            "op_vs_chain": op_us / chain_us, "target": "program < chain", "met": c["program"] < chain_us,
            "op_host_us": statistics.median(h[0] for h in host), "chain_host_us": statistics.median(h[1] for h in host),
            "host_ratio": statistics.median(h[0] / h[1] for h in host),
            "op_thread_us": statistics.median(h[2] for h in host),
            "chain_thread_us": statistics.median(h[3] for h in host),
            "thread_ratio": statistics.median(h[2] / h[3] for h in host),
        }  # fmt: skip
        if "fused" in c:
            row["ttnn_fused_card_us"] = card_us(c["fused"])[0]
        results[name] = row
    hdev.close()
    return {"shape": list(SHAPE), "dtype": "bfloat16", "calls": calls, "rounds": rounds, "cpus": os.cpu_count(),
            "load_average": os.getloadavg()[0], "torch": torch.__version__, "results": results,
            "compiles": compiles}  # fmt: skip


def table(report: dict) -> str:
    shape = " x ".join(map(str, report["shape"]))
    lines = [f"kernel DSL programs against TT-NN op chains, {shape} bfloat16, simulated card time (us) and host cost "
             f"per call (queue only, median of {report['rounds']} rounds of {report['calls']} calls), "
             f"{report['cpus']} CPUs (load average {report['load_average']:.1f})",
             f"{'case':<12}{'program':>9}{'as op':>9}{'chain':>9}{'prog/chain':>12}  met"
             f"{'host op us':>12}{'chain us':>10}{'ratio':>7}{'thread CPU op / chain us':>26}{'ratio':>7}"
             f"{'TT-NN fused':>13}"]  # fmt: skip
    for name, r in report["results"].items():
        fused = f"{r['ttnn_fused_card_us']:>13.2f}" if "ttnn_fused_card_us" in r else f"{'':>13}"
        lines.append(f"{name:<12}{r['program_card_us']:>9.2f}{r['op_card_us']:>9.2f}{r['chain_card_us']:>9.2f}"
                     f"{r['program_vs_chain']:>12.2f}  {'yes' if r['met'] else 'NO ':<3}{r['op_host_us']:>12.1f}"
                     f"{r['chain_host_us']:>10.1f}{r['host_ratio']:>7.2f}"
                     f"{r['op_thread_us']:>17.1f} / {r['chain_thread_us']:<6.1f}{r['thread_ratio']:>7.2f}"
                     f"{fused}")  # fmt: skip
    c = report["compiles"]
    lines.append(f"compiles over {c['shapes']} shapes of the DSL scaled_add op: {c['compiles']} (target {c['target']}: "
                 f"{'met' if c['met'] else 'NOT met'}); kernel builds after the first call: "
                 f"{c['kernel_builds_after_first']}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50, help="calls queued per round (default 50)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds; the median counts (default 7)")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(5, args.calls), max(1, args.rounds))
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
