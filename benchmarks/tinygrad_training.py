"""A tinygrad AdamW training step on KTT against tinygrad's own reference device, eager and under TinyJit.

Model: Linear(256, 512) + SiLU + Linear(512, 4), batch 64, sparse categorical cross-entropy, AdamW. Each mode runs
`--warmup` steps (compilation, JIT capture) and then `--steps` timed steps (each ends in `.item()`, so the work is
done); the figure is host wall time per step, median. KTT runs on the simulated card here, so its wall time is the
simulator's, not the card's; `device est.` is the cost model's device time per step. `replay host` is the host time
one TinyJit replay takes to queue its trace (`kohakutt.tinygrad.stats()["graph_replay_host_s"]` per replay), the JIT's
fixed cost per step.
The reference is tinygrad's CPU device (needs clang; scripts/setup_env.sh installs it) or, without clang, PYTHON.
Run: python benchmarks/tinygrad_training.py [--steps 5] [--warmup 3] [--reference CPU] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinygrad import Context, Tensor, TinyJit, nn

import kohakutt.tinygrad as ktg
from kohakutt import hal


class Net:
    def __init__(self) -> None:
        self.hidden, self.out = nn.Linear(256, 512), nn.Linear(512, 4)

    def __call__(self, x: Tensor) -> Tensor:
        return self.out(self.hidden(x).silu())


def run(device: str, jit: bool, steps: int, warmup: int) -> dict[str, float]:
    Tensor.manual_seed(0)
    model = Net()
    params = nn.state.get_parameters(model)
    for p in params:
        p.to_(device)
    opt = nn.optim.AdamW(params, lr=1e-3)
    x = Tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32), device=device)
    y = Tensor(np.array([0, 1, 2, 3] * 16, np.int32), device=device)

    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1):
            loss = model(x).sparse_categorical_crossentropy(y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.realize()

    fn = TinyJit(step) if jit else step
    for _ in range(warmup):
        fn(x, y).item()
    times, loss, device_ns, replay = [], 0.0, [], []
    for _ in range(steps):
        before = ktg.stats()
        with hal.profile() as prof:
            t0 = time.perf_counter()
            loss = fn(x, y).item()
            times.append(time.perf_counter() - t0)
        after = ktg.stats()
        device_ns.append(sum(r.device_ns for r in prof.records) if device.startswith("KTT") else 0.0)
        if n := after["graph_replays"] - before["graph_replays"]:  # the host time a replay took to queue its trace
            replay.append((after["graph_replay_host_s"] - before["graph_replay_host_s"]) / n)
    return {
        "step_s": statistics.median(times),
        "loss": loss,
        "device_est_s": statistics.median(device_ns) * 1e-9,
        "replay_host_s": statistics.median(replay) if replay else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reference", default="CPU" if shutil.which("clang") else "PYTHON")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON line at the end")
    args = ap.parse_args()
    rows = {}
    with Context(PARALLEL=0):
        for dev in ("KTT", args.reference):
            for jit in (False, True):
                rows[f"{dev} {'jit' if jit else 'eager'}"] = run(dev, jit, args.steps, args.warmup)
    for name, r in rows.items():  # step time over the reference's in the same mode: below 1 is faster
        r["ratio"] = r["step_s"] / rows[f"{args.reference} {name.split()[1]}"]["step_s"]
    print(f"{'mode':<16} {'step (ms)':>10} {'time/ref':>8} {'device est. (ms)':>17} {'loss':>10}")
    for name, r in rows.items():
        dev = f"{r['device_est_s'] * 1e3:17.3f}" if name.startswith("KTT") else f"{'-':>17}"
        print(f"{name:<16} {r['step_s'] * 1e3:10.2f} {r['ratio']:7.2f}x {dev} {r['loss']:10.5f}")
    replay = rows["KTT jit"]["replay_host_s"]
    if replay is not None:
        print(f"TinyJit replay host cost (queueing one trace): {replay * 1e3:.3f} ms")
    print("KTT kernels:", {k: v for k, v in ktg.stats().items() if k != "ir_ops"})
    if args.json:
        print(json.dumps({"reference": args.reference, "rows": rows, "replay_host_s": replay}))


if __name__ == "__main__":
    main()
