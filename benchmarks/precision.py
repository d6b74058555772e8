"""What each float32 precision mode costs on the card, and what it buys: the simulator's estimate of the card's time
for a training step, and the step's error against CPU float64, per mode.

  readme_step  the README's training step: Linear(256, 512), LayerNorm, SiLU, Linear(512, 10), batch 128,
               cross-entropy, AdamW (forward, backward and step)
  mlp_step     benchmarks/mlp_training.py's step: 4-layer MLP, 1024 wide, batch 256, ReLU, cross-entropy, AdamW

Modes: ``torch.set_float32_matmul_precision`` "highest" (PyTorch's default: float32 matmuls split into bf16 parts),
"high" (TF32 operands), "medium" (HiFi2), each with float32 sums exact (the default) and with
``kohakutt.numerics(fp32_reduce="tf32")`` (the FPU reduce). Card ms: the simulator's device-time estimate per step
(tt events, median of N steps after warm-up), the card's own time, not this host's. Host ms: the wall time per step
here (dispatch plus the simulator's arithmetic on this CPU). Error: the first step's loss and the largest relative
error of its weight gradients against the same step in float64 on the CPU.
Run: python benchmarks/precision.py [--steps 3] [--warmup 1] [--quick] [--json]
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

MODES = [(m, r) for m in ("highest", "high", "medium") for r in ("exact", "tf32")]


def readme_model() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.SiLU(), nn.Linear(512, 10))
    return model, torch.randn(128, 256), torch.randint(0, 10, (128,))


def mlp_model() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(1024, 16)), torch.randn(256, 1024), torch.randint(0, 16, (256,))


CASES = {"readme_step": readme_model, "mlp_step": mlp_model}


def reference(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    """The first step's loss and weight gradients in float64 on the CPU."""
    m = copy.deepcopy(model).double()
    loss = F.cross_entropy(m(x.double()), y)
    loss.backward()
    return loss.item(), [p.grad for p in m.parameters()]


def measure(make, mode: str, reduce: str, steps: int, warmup: int) -> dict:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    cpu_model, x_cpu, y_cpu = make()
    ref_loss, ref_grads = reference(cpu_model, x_cpu, y_cpu)
    model = copy.deepcopy(cpu_model).to(dev)
    x, y = x_cpu.to(dev), y_cpu.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(mode)
    try:
        with kohakutt.numerics(fp32_reduce=reduce):

            def step() -> torch.Tensor:
                opt.zero_grad(set_to_none=False)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                return loss

            first = step().item()
            grads = [p.grad.cpu().double() for p in model.parameters()]
            for _ in range(warmup):
                step()
            card, host = [], []
            for _ in range(steps):
                torch.tt.synchronize()
                start, end = torch.tt.Event(enable_timing=True), torch.tt.Event(enable_timing=True)
                start.record()
                t0 = time.perf_counter()
                step()
                end.record()
                torch.tt.synchronize()
                host.append((time.perf_counter() - t0) * 1e3)
                card.append(start.elapsed_time(end))
    finally:
        torch.set_float32_matmul_precision(before)
    grad_err = max(float((g - r).abs().max() / r.abs().max()) for g, r in zip(grads, ref_grads))
    return {"mode": mode, "fp32_reduce": reduce, "card_ms": statistics.median(card), "host_ms": statistics.median(host),
            "loss_err": abs(first - ref_loss) / abs(ref_loss), "grad_err": grad_err}  # fmt: skip


def run(steps: int, warmup: int, quick: bool = False) -> dict:
    cases = {"readme_step": CASES["readme_step"]} if quick else CASES
    results = {name: [measure(make, m, r, steps, warmup) for m, r in MODES] for name, make in cases.items()}
    for rows in results.values():
        base = rows[0]["card_ms"]  # highest, exact: the default
        for r in rows:
            r["vs_default"] = r["card_ms"] / base
    return {"steps": steps, "warmup": warmup, "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "results": results}  # fmt: skip


def table(report: dict) -> str:
    lines = [f"float32 precision modes, simulated card time per training step, median of {report['steps']} steps "
             f"after {report['warmup']} warm-up, {report['cpus']} CPUs, torch {report['torch']}"]  # fmt: skip
    for name, rows in report["results"].items():
        lines.append(f"{name}")
        lines.append(f"  {'matmul':<9}{'sums':<7}{'card ms':>9}{'vs default':>12}{'host ms':>9}{'loss err':>10}"
                     f"{'grad err':>10}")  # fmt: skip
        for r in rows:
            lines.append(f"  {r['mode']:<9}{r['fp32_reduce']:<7}{r['card_ms']:>9.3f}{r['vs_default']:>11.2f}x"
                         f"{r['host_ms']:>9.1f}{r['loss_err']:>10.1e}{r['grad_err']:>10.1e}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed steps; the median counts (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps after the checked one (default 1)")
    parser.add_argument("--quick", action="store_true", help="the README's step only")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(1, args.steps), max(0, args.warmup), args.quick)
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
