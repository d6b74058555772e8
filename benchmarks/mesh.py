"""The 1 x 2 mesh against one chip: simulated card time, collectives, error, host cost and memory per chip.

  model        the README's two-block model (replicated LayerNorm, column-wise up, row-wise down, GELU), bfloat16,
               a batch of 512 tokens, d = 1024 and d = 4096: forward, and a training step (MSE loss, AdamW)
  time         the simulator's estimate of the card's time for one forward / step: one chip's stream clock, and
               for the pair the slower chip's (collectives align the two clocks and are charged to both); the
               speed-up is one chip's time over the pair's (target >= 1.6x for the d = 4096 forward)
  collectives  count and bytes each chip received over the link, per forward / step
  error        median |y - y64| / median |y64| of the forward's output against CPU float64, on one chip and on the
               pair; for training, the loss after two steps against float64 (d = 1024) or one chip (d = 4096)
  host cost    a mesh op's host cost against the same op on one chip, queueing only (both chips' streams held
               behind a gate), calling thread's CPU time: a replicated 32 x 32 add and a sharded 1024 x 1024 add
               (target <= 1.5x)
  memory       a model of 20 column-/row-wise Linear(32768, 32768) layers in bfloat16 (40 GiB): replicated it does not
               fit one chip's 32 GiB of DRAM (the allocator refuses it), sharded each chip holds 20 GiB. Placed
               without values (the simulator's buffers are not written), so it runs on any host.
Run: python benchmarks/mesh.py [--quick] [--steps 1] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch import nn

import kohakutt
from kohakutt.frontends.torch import mesh as tmesh
from kohakutt.frontends.torch import runtime
from kohakutt.hal import Command

SPEEDUP_TARGET = 1.6
HOST_TARGET = 1.5


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm = kohakutt.replicate(nn.LayerNorm(d))
        self.up = kohakutt.colwise(nn.Linear(d, 4 * d))
        self.down = kohakutt.rowwise(nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def clocks(dev: torch.device) -> list[float]:
    """Device-time clocks (ns) of the chips behind ``dev``, after everything queued has run."""
    torch.tt.synchronize(dev)
    d = runtime.device(dev.index or 0)
    chips = getattr(d, "chips", [d])
    return [c.default_stream.device_time_ns for c in chips]


def card_ms(before: list[float], after: list[float]) -> float:
    """From when every chip is free to start to when the last one is done (collectives align the clocks)."""
    return (max(after) - max(before)) / 1e6


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    y, ref = y.detach().cpu().double(), ref.detach().double()
    return float((y - ref).abs().median() / ref.abs().median())


def collectives() -> tuple[int, int]:
    st = torch.tt.mesh_stats()
    return st["total"], st["total_bytes"]


def model_case(d: int, tokens: int, steps: int, f64_train: bool) -> dict:
    torch.manual_seed(0)
    ref = nn.Sequential(Block(d), Block(d))
    x = torch.randn(tokens, d)
    y = torch.randn(tokens, d)
    mesh = kohakutt.mesh([0, 1])
    out: dict = {"d": d, "tokens": tokens}
    y64 = copy.deepcopy(ref).double()(x.double()).detach()
    for name, dev in (("one_chip", torch.device("tt", 0)), ("pair", mesh)):
        m = copy.deepcopy(ref).bfloat16().to(dev)
        xs, ys = x.bfloat16().to(dev), y.bfloat16().to(dev)
        with torch.no_grad():
            m(xs)  # warm: caches, decisions
            c0, n0 = clocks(dev), collectives()
            t0 = time.perf_counter()
            fwd = m(xs)
            c1, n1 = clocks(dev), collectives()
            wall_fwd = time.perf_counter() - t0
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = []

        def step(
            m: nn.Module = m, opt: torch.optim.Optimizer = opt, xs: torch.Tensor = xs, ys: torch.Tensor = ys
        ) -> float:
            opt.zero_grad(set_to_none=False)
            loss = ((m(xs) - ys).float() ** 2).mean()
            loss.backward()
            opt.step()
            return loss.item()

        losses.append(step())  # warm: optimizer state
        step_ms, step_n, step_b = [], [], []
        for _ in range(steps):
            s0, k0 = clocks(dev), collectives()
            losses.append(step())
            s1, k1 = clocks(dev), collectives()
            step_ms.append(card_ms(s0, s1))
            step_n.append(k1[0] - k0[0])
            step_b.append(k1[1] - k0[1])
        out[name] = {
            "forward_card_ms": card_ms(c0, c1), "step_card_ms": statistics.median(step_ms),
            "forward_collectives": n1[0] - n0[0], "forward_collective_bytes": n1[1] - n0[1],
            "step_collectives": statistics.median(step_n), "step_collective_bytes": statistics.median(step_b),
            "forward_error": rel_err(fwd, y64), "losses": losses, "forward_wall_s": wall_fwd,
        }  # fmt: skip
        if name == "pair":
            out[name]["placement_down_weight"] = str(kohakutt.placement(m[0].down.weight))
        del m, opt, xs, ys, fwd, step
    if f64_train:
        m64 = copy.deepcopy(ref).double()
        opt = torch.optim.AdamW(m64.parameters(), lr=1e-3)
        ref_losses = []
        for _ in range(len(out["pair"]["losses"])):
            opt.zero_grad()
            loss = ((m64(x.double()) - y.double()) ** 2).mean()
            loss.backward()
            opt.step()
            ref_losses.append(loss.item())
        out["float64_losses"] = ref_losses
        ref_name, ref_l = "float64", ref_losses
    else:
        ref_name, ref_l = "one chip", out["one_chip"]["losses"]
    out["loss_reference"] = ref_name
    for name in ("one_chip", "pair"):
        out[name]["loss_error"] = max(abs(a - b) / abs(b) for a, b in zip(out[name]["losses"], ref_l))
    out["forward_speedup"] = out["one_chip"]["forward_card_ms"] / out["pair"]["forward_card_ms"]
    out["step_speedup"] = out["one_chip"]["step_card_ms"] / out["pair"]["step_card_ms"]
    return out


def _gated_us(streams: list, fn, n: int) -> float:
    gate, entered = threading.Event(), []
    for s in streams:
        e = threading.Event()
        entered.append(e)
        s.enqueue(Command("gate", lambda e=e: (e.set(), gate.wait())))
    for e in entered:
        e.wait()
    c0 = time.thread_time()
    for _ in range(n):
        fn()
    cpu = time.thread_time() - c0
    gate.set()
    for s in streams:
        s.synchronize()
    return cpu / n * 1e6


def replay_host_ms(dev: torch.device, d: int, replays: int) -> float:
    """Host cost (calling thread's CPU, ms) of queueing one replay of a captured two-block training step."""
    torch.manual_seed(0)
    m = nn.Sequential(Block(d), Block(d)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x, y = torch.randn(64, d).to(dev), torch.randn(64, d).to(dev)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    rep = kohakutt.capture(step, x, y, warmup=2)
    rep(x, y)
    torch.tt.synchronize(dev)
    c0 = time.thread_time()
    for _ in range(replays):
        rep(x, y)
    cpu = time.thread_time() - c0
    torch.tt.synchronize(dev)
    rep.release()
    return cpu / replays * 1e3


def host_case(ops: int, rounds: int) -> dict:
    mesh = kohakutt.mesh([0, 1])
    one = [runtime.device(0).default_stream]
    pair = list(runtime.device(mesh.index).default_stream.streams)
    out = {}
    for name, shape in (("replicated_add_32x32", (32, 32)), ("sharded_add_1024x1024", (1024, 1024))):
        a0, b0 = torch.randn(*shape).bfloat16(), torch.randn(*shape).bfloat16()
        a, b = a0.to("tt:0"), b0.to("tt:0")
        ma, mb = a0.to(mesh), b0.to(mesh)
        assert torch.equal((ma + mb).cpu(), (a + b).cpu())
        rows = []
        for r in range(rounds + 1):
            x = _gated_us(one, lambda a=a, b=b: a + b, ops)
            y = _gated_us(pair, lambda a=ma, b=mb: a + b, ops)
            if r:
                rows.append((x, y))
        out[name] = {"placement": str(kohakutt.placement(ma)),
                     "one_chip_us": statistics.median(x for x, _ in rows),
                     "mesh_us": statistics.median(y for _, y in rows),
                     "ratio": statistics.median(y / x for x, y in rows), "target": HOST_TARGET}  # fmt: skip
        out[name]["met"] = out[name]["ratio"] <= HOST_TARGET
    one = replay_host_ms(torch.device("tt", 0), 64, max(3, rounds))
    two = replay_host_ms(mesh, 64, max(3, rounds))
    out["captured_step_replay"] = {"one_chip_ms": one, "mesh_ms": two, "ratio": two / one}
    return out


def memory_case(layers: int, width: int) -> dict:
    """Place a model's parameters (no values written) replicated, then sharded, and read each chip's allocator."""
    mesh = kohakutt.mesh([0, 1])
    dev = runtime.device(mesh.index)
    torch.tt.synchronize(mesh)
    nbytes = layers * width * width * 2
    base = [c.memory_stats()["allocated_bytes"] for c in dev.chips]
    capacity = dev.chips[0].memory_stats()["dram.capacity_bytes"]
    result: dict = {"layers": layers, "width": width, "model_bytes": nbytes, "chip_dram_bytes": capacity}
    for how in ("replicated", "sharded"):
        held = []
        try:
            for i in range(layers):
                w = torch.empty(width, width, dtype=torch.bfloat16, device=mesh)  # no storage placed yet
                st = tmesh.view(w).storage
                if how == "sharded":
                    st.hint = kohakutt.mesh.Sharded(i % 2, (width // 2, width // 2))  # colwise / rowwise in turn
                else:
                    st.hint = kohakutt.mesh.Replicate()
                st.place(kohakutt.mesh.executor.creation_placement(st), dev.current_stream)
                held.append(w)
            result[how] = {"fits": True, "per_chip_bytes": [c.memory_stats()["allocated_bytes"] - b0
                                                            for c, b0 in zip(dev.chips, base)]}  # fmt: skip
        except (torch.OutOfMemoryError, kohakutt.OutOfMemoryError) as e:
            result[how] = {"fits": False, "placed_layers": len(held), "error": str(e).splitlines()[0][:160]}
        del held
        torch.tt.synchronize(mesh)
        torch.tt.empty_cache()
    return result


def table(r: dict) -> str:
    lines = [
        f"the 1 x 2 mesh against one chip, bfloat16, {r['tokens']} tokens; {r['cpus']} CPUs, load average "
        f"{r['load_average']:.1f}",
        f"{'case':<18}{'one chip ms':>12}{'pair ms':>10}{'speed-up':>10}{'target':>9}{'collectives':>13}"
        f"{'MiB':>8}{'error 1 chip':>14}{'error pair':>12}",
    ]
    for c in r["models"]:
        for kind in ("forward", "step"):
            one, two = c["one_chip"], c["pair"]
            sp = c[f"{kind}_speedup"]
            tgt = f">= {SPEEDUP_TARGET}" if kind == "forward" and c["d"] == 4096 else ""
            err = ("forward_error", "forward_error") if kind == "forward" else ("loss_error", "loss_error")
            lines.append(
                f"{'d=' + str(c['d']) + ' ' + kind:<18}{one[kind + '_card_ms']:>12.3f}"
                f"{two[kind + '_card_ms']:>10.3f}{sp:>9.2f}x{tgt:>9}{two[kind + '_collectives']:>13.0f}"
                f"{two[kind + '_collective_bytes'] / 2**20:>8.2f}{one[err[0]]:>14.2e}{two[err[1]]:>12.2e}"
            )
    rep = r["host"].get("captured_step_replay")
    if rep:
        lines.append(
            f"host cost of one replay of a captured two-block step (d=64): one chip {rep['one_chip_ms']:.3f} ms, "
            f"mesh {rep['mesh_ms']:.3f} ms ({rep['ratio']:.2f}x)"
        )
    for name, h in r["host"].items():
        if name == "captured_step_replay":
            continue
        lines.append(
            f"host cost {name}: one chip {h['one_chip_us']:.1f} us, mesh {h['mesh_us']:.1f} us "
            f"({h['placement']}): {h['ratio']:.2f}x (target <= {h['target']}, {'met' if h['met'] else 'NOT met'})"
        )
    m = r.get("memory")
    for how in ("replicated", "sharded") if m else ():
        v = m[how]
        got = (
            f"{', '.join(_size(b) for b in v['per_chip_bytes'])} per chip"
            if v["fits"]
            else f"does not fit ({v['placed_layers']} of {m['layers']} layers placed: {v['error']})"
        )
        lines.append(f"memory, {_size(m['model_bytes'])} model {how} (chip DRAM {_size(m['chip_dram_bytes'])}): {got}")
    return "\n".join(lines)


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--steps", type=int, default=2, help="timed training steps per case")
    parser.add_argument("--dims", type=int, nargs="*", default=None, help="model widths (default 1024 4096)")
    parser.add_argument("--parts", default="models,host,memory", help="which parts to run (comma-separated)")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    kohakutt.mesh([0, 1])
    tokens = 64 if args.quick else 512
    dims = args.dims or ((64, 128) if args.quick else (1024, 4096))
    parts = set(args.parts.split(","))
    models = []
    for d in dims if "models" in parts else ():
        models.append(model_case(d, tokens, max(1, args.steps), f64_train=d <= 1024))
        print(f"# d={d}: {json.dumps(models[-1])}", file=sys.stderr, flush=True)  # a long run's progress
    report = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "torch": torch.__version__,
              "tokens": tokens, "models": models}  # fmt: skip
    report["host"] = host_case(50 if args.quick else 200, 2 if args.quick else 7) if "host" in parts else {}
    if "memory" in parts:
        report["memory"] = memory_case(4, 1024) if args.quick else memory_case(20, 32768)
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
