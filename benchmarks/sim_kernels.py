"""The simulator's op kernels against torch CPU float32 on the same shapes, in the same process.

Each case times the simulated op end to end (``kk.run`` on device tensors, then ``synchronize``: the numerics model,
the store's format conversion, the stream's hand-off) against a torch CPU float32 reference of the same shape. Both
are warm; each is the best of N rounds, and a round runs every timed function once, so a burst of load from other
processes hits both sides alike. The ratio is sim / torch; a case meets its target when the ratio is at most it.

Cases live in ``CASES`` as ``Case(name, shape, setup, target)``: ``setup(quick)`` builds the inputs once and returns
``(sim_fn, ref_fn)``, two no-argument callables. Other op families append their cases to ``CASES`` (attention,
layer norm, ...) with :func:`add_case`.

Run: python benchmarks/sim_kernels.py [--quick] [--repeat 5] [--only NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.ir.numerics import numerics

Fn = Callable[[], object]
Setup = Callable[[bool], tuple[Fn, Fn]]


@dataclass
class Case:
    name: str
    shape: Callable[[bool], str]  # a description of the shape, quick or full
    setup: Setup
    target: float  # the largest sim / torch ratio that meets the target


CASES: list[Case] = []
_DEVICE: list = []


def device():
    """The one open device the cases share."""
    if not _DEVICE:
        _DEVICE.append(hal.open_device(0))
    return _DEVICE[0]


def add_case(name: str, shape: Callable[[bool], str], target: float) -> Callable[[Setup], Setup]:
    """Decorator: register ``setup(quick) -> (sim_fn, ref_fn)`` as a benchmark case."""

    def deco(setup: Setup) -> Setup:
        CASES.append(Case(name, shape, setup, target))
        return setup

    return deco


def sim_op(op: str, inputs: list, attrs: dict | None = None, **num: object) -> Fn:
    """A callable that queues ``op`` under a numerics scope and waits for the device."""
    dev = device()

    def fn() -> None:
        with numerics(**num):  # type: ignore[arg-type]
            outs = kk.run(op, inputs, attrs)
        dev.synchronize()
        for o in outs:
            kk.free(o)

    return fn


def _bf16_inputs(*shapes: tuple[int, ...], scales: tuple[float, ...] | None = None) -> tuple[list, list]:
    """Device bf16 tensors and torch float32 tensors holding the same values."""
    rng = np.random.default_rng(0)
    dev = device()
    tensors, refs = [], []
    for i, shape in enumerate(shapes):
        x = (rng.standard_normal(shape) * (scales[i] if scales else 1.0)).astype(np.float32)
        t = kk.from_numpy(dev, x, "bfloat16")
        tensors.append(t)
        refs.append(torch.from_numpy(kk.to_numpy(t)))
    return tensors, refs


# ------------------------------------------------------------------------------------------------------- cases
def _mm_size(quick: bool) -> int:
    return 512 if quick else 2048


def _matmul_case(fidelity: str) -> Setup:
    def setup(quick: bool) -> tuple[Fn, Fn]:
        n = _mm_size(quick)
        (a, b), (ra, rb) = _bf16_inputs((n, n), (n, n))
        return sim_op("matmul", [a, b], fidelity=fidelity), lambda: ra @ rb

    return setup


for _fid in ("HiFi2", "HiFi4"):
    add_case(f"matmul bf16 {_fid}", lambda q: "x".join([str(_mm_size(q))] * 3), 2.0)(_matmul_case(_fid))


def _conv_shape(quick: bool) -> tuple[int, int, int, int]:
    return (2, 64, 28, 64) if quick else (8, 64, 56, 64)  # N, C, H = W, K; ResNet-50's 3x3 stage-1 conv


def _conv_desc(quick: bool) -> str:
    n, c, h, k = _conv_shape(quick)
    return f"{n}x{c}x{h}x{h} K{k} 3x3 pad 1"


@add_case("conv2d bf16 HiFi2", _conv_desc, 2.0)
def _conv2d(quick: bool) -> tuple[Fn, Fn]:
    n, c, h, k = _conv_shape(quick)
    (x, w), (rx, rw) = _bf16_inputs((n, c, h, h), (k, c, 3, 3), scales=(1.0, 0.05))
    return sim_op("conv", [x, w], {"padding": 1}, fidelity="HiFi2"), lambda: torch.nn.functional.conv2d(
        rx, rw, None, 1, 1
    )


def _ln_shape(quick: bool) -> tuple[int, int]:
    return (1024, 1024) if quick else (4 * 1024, 1024)


# A norm is memory-bound: torch reads x once, the card model takes about ten element-wise passes (TF32 cuts, per-tile
# fp32 sums in float64, the affine) plus the bf16 decode / encode of the store, so its target is looser than a matmul's.
@add_case("layer_norm bf16", lambda q: "x".join(map(str, _ln_shape(q))) + " affine", 12.0)
def _layer_norm(quick: bool) -> tuple[Fn, Fn]:
    rows, width = _ln_shape(quick)
    (x, w, b), (rx, rw, rb) = _bf16_inputs((rows, width), (width,), (width,))
    return sim_op("layer_norm", [x, w, b]), lambda: torch.nn.functional.layer_norm(rx, (width,), rw, rb)


def _sdpa_shape(quick: bool) -> tuple[int, int, int, int]:
    return (1, 8, 256, 64) if quick else (4, 16, 1024, 64)  # batch, heads, tokens, head dim


# The own flash attention kernel's model (provider ktt: 128-key chunks, TF32 scores, bf16 P) against torch's fused
# CPU kernel on the same bf16 values in float32 (kohakutt.kernels.attention.attention_case).
@add_case("sdpa causal bf16 ktt", lambda q: "x".join(map(str, _sdpa_shape(q))) + " causal", 3.0)
def _sdpa(quick: bool) -> tuple[Fn, Fn]:
    from kohakutt.kernels.attention import attention_case

    return attention_case(device(), _sdpa_shape(quick), causal=True)


# ---------------------------------------------------------------------------------------------------- running
def best_seconds(fns: list[Fn], repeat: int) -> list[float]:
    for fn in fns:
        fn()  # warm-up
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def run(quick: bool, repeat: int, only: str | None = None) -> list[dict]:
    rows = []
    for case in CASES:
        if only and only not in case.name:
            continue
        sim_fn, ref_fn = case.setup(quick)
        sim_s, ref_s = best_seconds([sim_fn, ref_fn], repeat)
        ratio = sim_s / ref_s
        rows.append(
            {
                "case": case.name,
                "shape": case.shape(quick),
                "sim_ms": sim_s * 1e3,
                "torch_ms": ref_s * 1e3,
                "ratio": ratio,
                "target": case.target,
                "met": ratio <= case.target,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds; each figure is the best round")
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args(argv)
    rows = run(args.quick, args.repeat, args.only)
    print(f"{'case':<22} {'shape':<30} {'sim ms':>9} {'torch ms':>9} {'ratio':>6} {'target':>7}  met")
    for r in rows:
        print(
            f"{r['case']:<22} {r['shape']:<30} {r['sim_ms']:9.2f} {r['torch_ms']:9.2f} {r['ratio']:6.2f} "
            f"{r['target']:7.2f}  {'yes' if r['met'] else 'NO'}"
        )
    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": "sim_kernels",
                    "quick": args.quick,
                    "torch_threads": torch.get_num_threads(),
                    "cases": rows,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
