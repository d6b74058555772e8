"""A training step and a transformer block forward on tt (the simulated card) against torch's CPU float32.

  mlp_step     4-layer MLP, 1024 wide, batch 256, ReLU, cross-entropy, AdamW: forward, backward and step
  block_fwd    pre-norm transformer block (d 512, 8 heads, MLP 2048, GELU), batch 4 x 256 tokens, forward only
Each figure is milliseconds per step, median of N steps after warm-up, in the same run. The ratio is tt over CPU
(target <= 3x). On the simulator tt time is the host's dispatch plus the simulated card's arithmetic, both on this
CPU (a real card runs the arithmetic); the simulator's estimate of the card's own time is reported beside it.
Memory: the peak allocated on the card, and the allocated bytes after each step (after a synchronize), which must not
grow once the optimizer state exists.
Run: python benchmarks/mlp_training.py [--steps 5] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
from torch import nn

import kohakutt

TARGET = 3.0


class Block(nn.Module):
    """A pre-norm transformer block: attention and a GELU MLP, each with a residual."""

    def __init__(self, d: int = 512, heads: int = 8, hidden: int = 2048) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def mlp(width: int = 1024, layers: int = 4, classes: int = 16) -> nn.Module:
    mods: list[nn.Module] = []
    for _ in range(layers - 1):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods, nn.Linear(width, classes))


def timed(fn, steps: int, device: str) -> tuple[list[float], list[int], float]:
    """Per-step wall ms, allocated bytes after each step (tt), and simulated card ms per step (tt)."""
    walls, allocated, card = [], [], []
    for _ in range(steps):
        if device == "tt":
            start, end = torch.tt.Event(enable_timing=True), torch.tt.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        fn()
        if device == "tt":
            end.record()
            torch.tt.synchronize()
            card.append(start.elapsed_time(end))
            allocated.append(torch.tt.memory_allocated())
        walls.append((time.perf_counter() - t0) * 1e3)
    return walls, allocated, statistics.median(card) if card else 0.0


def run_case(name: str, make, steps: int, warmup: int) -> dict:
    dev = kohakutt.device(0)
    fns = make(dev)
    out = {}
    for device in ("cpu", "tt"):
        fn = fns[device]
        for _ in range(warmup):
            fn()
        if device == "tt":
            torch.tt.synchronize()
            torch.tt.reset_peak_memory_stats()
        walls, allocated, card = timed(fn, steps, device)
        out[device] = {"ms": statistics.median(walls), "all_ms": walls}
        if device == "tt":
            out[device] |= {"card_ms": card, "peak_bytes": torch.tt.max_memory_allocated(),
                            "allocated_bytes": allocated, "grows": allocated[-1] > allocated[0]}  # fmt: skip
    out["ratio"] = out["tt"]["ms"] / out["cpu"]["ms"]
    out["target"] = TARGET
    out["met"] = out["ratio"] <= TARGET
    return out


def make_mlp(dev: torch.device) -> dict:
    torch.manual_seed(0)
    cpu_model = mlp()
    tt_model = copy.deepcopy(cpu_model).to(dev)
    x_cpu, y_cpu = torch.randn(256, 1024), torch.randint(0, 16, (256,))
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    fns = {}
    for device, model, xs, ys in (("cpu", cpu_model, x_cpu, y_cpu), ("tt", tt_model, x, y)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(model=model, opt=opt, xs=xs, ys=ys) -> None:
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(xs), ys).backward()
            opt.step()

        fns[device] = step
    return fns


def make_block(dev: torch.device) -> dict:
    torch.manual_seed(0)
    cpu_block = Block().eval()
    tt_block = copy.deepcopy(cpu_block).to(dev)
    x_cpu = torch.randn(4, 256, 512)
    x = x_cpu.to(dev)
    with torch.no_grad():
        got, want = tt_block(x).cpu(), cpu_block(x_cpu)
    err = ((got - want).norm() / want.norm()).item()
    assert err < 2e-2, f"the block on tt is off by {err:.2e} (relative, Frobenius) against the CPU"

    def fwd(block, xs):
        def run() -> None:
            with torch.no_grad():
                block(xs)

        return run

    return {"cpu": fwd(cpu_block, x_cpu), "tt": fwd(tt_block, x)}


def run(steps: int, warmup: int) -> dict:
    results = {"mlp_step": run_case("mlp_step", make_mlp, steps, warmup),
               "block_fwd": run_case("block_fwd", make_block, steps, warmup)}  # fmt: skip
    return {"steps": steps, "warmup": warmup, "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "results": results}  # fmt: skip


def table(report: dict) -> str:
    lines = [
        f"training step and block forward, median of {report['steps']} steps after {report['warmup']} warm-up, "
        f"{report['cpus']} CPUs ({report['threads']} torch threads), torch {report['torch']}",
        f"{'case':<10}{'CPU ms':>9}{'tt ms':>9}{'ratio':>7}{'target':>9}  met{'card ms':>9}{'peak MiB':>10}"
        f"{'after-step MiB':>16}  grows",
    ]
    for name, r in report["results"].items():
        tt = r["tt"]
        after = tt["allocated_bytes"][-1] / 2**20
        lines.append(
            f"{name:<10}{r['cpu']['ms']:>9.1f}{tt['ms']:>9.1f}{r['ratio']:>7.2f}{'<= ' + str(r['target']):>9}  "
            f"{'yes' if r['met'] else 'NO ':<3}{tt['card_ms']:>9.3f}{tt['peak_bytes'] / 2**20:>10.1f}{after:>16.2f}  "
            f"{'YES' if tt['grows'] else 'no'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="timed steps; the median counts (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(2, args.steps), max(1, args.warmup))
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
