"""A training step replayed as one device trace (``kohakutt.capture``) against the same step queued op by op.

The step is the README's: Linear(256, 512) + LayerNorm + SiLU + Linear(512, 10), cross-entropy, AdamW, batch 128.
Figures are milliseconds per step, median of N steps, all in one run:
  CPU eager        torch's CPU float32, the reference
  tt eager         queued op by op; end to end (waits for each step)
  tt replay        the captured step replayed; end to end
  host: eager      what queueing one eager step costs the host (the stream is held behind a gate meanwhile, so the
                   simulator, which runs the card on this same CPU, does not compete)
  host: replay     the same for one replay (arguments checked, one command queued)
  card             the simulator's estimate of the card's own time for one step
Ratios: replay end to end over CPU eager, and eager host cost over replay host cost (what capture saves the host).
On the simulator, end to end includes the card's arithmetic computed on this CPU; a real card does it in ``card``.
Memory: peak allocated while replaying, and the allocated bytes after each replay (must not grow).
Last, the host cost of the model's forward (no_grad) op by op and through torch.compile(backend="ktt_tt").
Run: python benchmarks/capture.py [--steps 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
from torch import nn

import kohakutt
from kohakutt.frontends.torch import runtime
from kohakutt.hal import Command


def setup(device: torch.device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.SiLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=device.type == "tt")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 256, generator=g).to(device)
    y = torch.randint(0, 10, (128,), generator=g).to(device)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step, x, y


def end_to_end_ms(fn, steps: int, sync) -> list[float]:
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def gated_host_ms(fn, steps: int) -> list[float]:
    """Host time to queue ``fn`` with the worker parked at a gate."""
    out = []
    for _ in range(steps):
        torch.tt.synchronize()
        g, entered = threading.Event(), threading.Event()
        runtime.device(0).default_stream.enqueue(Command("gate", lambda g=g, e=entered: (e.set(), g.wait())))
        entered.wait()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
        g.set()
    torch.tt.synchronize()
    return out


def forward_host_ms(steps: int) -> dict[str, float]:
    """Host cost of the model's forward under torch.no_grad(), op by op and through torch.compile(backend="ktt_tt")
    (a replay plus a copy of the output)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.SiLU(), nn.Linear(512, 10)).to("tt")
    compiled = torch.compile(model, backend="ktt_tt")
    x = torch.randn(128, 256).to("tt")
    with torch.no_grad():
        for _ in range(3):  # op by op, recorded, replayed
            compiled(x)
        eager = gated_host_ms(lambda: model(x), steps)
        fast = gated_host_ms(lambda: compiled(x), steps)
    return {"eager": statistics.median(eager), "compiled": statistics.median(fast)}


def run(steps: int) -> dict:
    dev = kohakutt.device(0)
    cpu_step, cx, cy = setup(torch.device("cpu"))
    for _ in range(2):
        cpu_step(cx, cy)
    cpu = end_to_end_ms(lambda: cpu_step(cx, cy), steps, lambda: None)

    step, x, y = setup(dev)
    replay = kohakutt.capture(step, x, y, warmup=2)
    eager = end_to_end_ms(lambda: step(x, y), steps, torch.tt.synchronize)
    host_eager = gated_host_ms(lambda: step(x, y), steps)
    replay(x, y)
    torch.tt.synchronize()
    torch.tt.reset_peak_memory_stats()
    after: list[int] = []

    def one() -> None:
        replay(x, y)

    def sync() -> None:
        torch.tt.synchronize()
        after.append(torch.tt.memory_allocated())

    replayed = end_to_end_ms(one, steps, sync)
    host_replay = gated_host_ms(one, steps)
    loss = replay(x, y).item()
    peak = torch.tt.max_memory_allocated()
    med = statistics.median
    fwd = forward_host_ms(steps)
    report = {
        "benchmark": "capture",
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "steps": steps,
        "commands": len(replay.trace.commands),
        "cpu_eager_ms": med(cpu),
        "tt_eager_ms": med(eager),
        "tt_replay_ms": med(replayed),
        "host_eager_ms": med(host_eager),
        "host_replay_ms": med(host_replay),
        "card_ms": replay.estimate_ms,
        "replay_over_cpu": med(replayed) / med(cpu),
        "replay_over_eager": med(replayed) / med(eager),
        "host_saving": med(host_eager) / med(host_replay),
        "peak_bytes": peak,
        "allocated_bytes": after,
        "grows": after[-1] > after[0],
        "final_loss": loss,
        "forward_host_eager_ms": fwd["eager"],
        "forward_host_compiled_ms": fwd["compiled"],
        "forward_host_saving": fwd["eager"] / fwd["compiled"],
    }
    replay.release()
    return report


def table(r: dict) -> str:
    rows = [
        ("CPU eager", r["cpu_eager_ms"]),
        ("tt eager", r["tt_eager_ms"]),
        ("tt replay", r["tt_replay_ms"]),
        ("host: eager", r["host_eager_ms"]),
        ("host: replay", r["host_replay_ms"]),
        ("card (estimate)", r["card_ms"]),
    ]
    lines = [
        f"capture: README training step ({r['commands']} commands per step), {r['steps']} steps, median; "
        f"{r['cpus']} CPUs, torch {r['torch']}",
        f"{'figure':<18}{'ms/step':>10}",
        *(f"{name:<18}{ms:>10.3f}" for name, ms in rows),
        f"replay / CPU eager {r['replay_over_cpu']:.2f}x; replay / tt eager {r['replay_over_eager']:.2f}x; "
        f"host cost eager / replay {r['host_saving']:.0f}x",
        f"peak {r['peak_bytes'] / 2**20:.2f} MiB; allocated after each replay grows: {'YES' if r['grows'] else 'no'}",
        f"forward, host cost: op by op {r['forward_host_eager_ms']:.3f} ms, torch.compile(backend='ktt_tt') "
        f"{r['forward_host_compiled_ms']:.3f} ms ({r['forward_host_saving']:.0f}x less)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="timed steps; the median counts (default 10)")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(2, args.steps))
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
