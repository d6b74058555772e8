"""The simulator's op kernels against torch CPU float32 on the same shapes, in the same process.

Each case times the simulated op end to end (``kk.run`` on device tensors, then ``synchronize``: the numerics model,
the store's format conversion, the stream's hand-off) against a torch CPU float32 reference of the same shape. Both
are warm; each is the best of N rounds, and a round runs every timed function once, so a burst of load from other
processes hits both sides alike. The ratio is sim / torch; a case meets its target when the ratio is at most it.

Cases live in ``CASES`` as ``Case(name, shape, setup, target)``: ``setup(quick)`` builds the inputs once and returns
``(sim_fn, ref_fn)``, two no-argument callables. Other op families append their cases to ``CASES`` (attention,
layer norm, ...) with :func:`add_case`.

A second table times Kohaku-TT's own programs (``PROGRAMS``, on the same shapes) as the simulator runs them: from
their C++ through the host build of the kernel API (``KTT_SIM_KERNELS=cpp``, builds cached before timing), from their
Python twins (``python``), against torch CPU float32. Target: the C++ run no slower than the twin (ratio <= 1). A
program whose C++ is not on TT-NN 0.81.1's kernel API yet shows no C++ time; its twin is timed only with --quick.

Run: python benchmarks/sim_kernels.py [--quick] [--repeat 5] [--only NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kohakutt import config, hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, ProgramError
from kohakutt.ir.numerics import Numerics, numerics

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


# ----------------------------------------------------------------------------------------------- own programs
@dataclass
class ProgramCase:
    name: str
    shape: Callable[[bool], str]
    setup: Callable[[bool], tuple[object, list, Fn]]  # quick -> (program, buffers, torch reference)


PROGRAMS: list[ProgramCase] = []


def add_program_case(name: str, shape: Callable[[bool], str]) -> Callable:
    def deco(setup: Callable[[bool], tuple[object, list, Fn]]) -> Callable:
        PROGRAMS.append(ProgramCase(name, shape, setup))
        return setup

    return deco


def program_fn(program: object, buffers: list, mode: str) -> Fn:
    """A callable running ``program`` the simulator's way ``mode`` (cpp or python) and waiting for it."""
    dev = device()

    def fn() -> None:
        os.environ["KTT_SIM_KERNELS"] = mode
        config.reload()
        dev.run_program(program, buffers)
        dev.synchronize()

    return fn


def _tile_tensors(*shapes: tuple[int, ...]) -> tuple[list, list]:
    rng = np.random.default_rng(0)
    ts, refs = [], []
    for shape in shapes:
        t = kk.from_numpy(device(), rng.standard_normal(shape).astype(np.float32), "bfloat16", "tile")
        ts.append(t)
        refs.append(torch.from_numpy(kk.to_numpy(t)))
    return ts, refs


@add_program_case("layer_norm", lambda q: "x".join(map(str, _ln_shape(q))) + " affine")
def _ln_program(quick: bool) -> tuple[object, list, Fn]:
    from kohakutt.kernels.programs.norm import NormConfig, rowwise_program

    rows, width = _ln_shape(quick)
    (x, w, b), (rx, rw, rb) = _tile_tensors((rows, width), (1, width), (1, width))
    cfg = NormConfig(width=width, eps=1e-5, gamma=True, beta=True)
    outs = {"y": kk.empty(device(), x.spec).buffer}
    dev = device()
    outs["mean"] = dev.allocate(shape=(rows, 1), fmt="float32", layout="tile")
    outs["rstd"] = dev.allocate(shape=(rows, 1), fmt="float32", layout="tile")
    bufs = [{"x": x.buffer, "weight": w.buffer, "bias": b.buffer}.get(n) or outs[n] for n in cfg.tensors]
    return rowwise_program(cfg, rows), bufs, lambda: torch.nn.functional.layer_norm(rx, (width,), rw[0], rb[0])


def _fused_program(op: str, shapes: list[tuple[int, ...]], attrs: dict) -> tuple[object, list]:
    from kohakutt.ir import ops as irops
    from kohakutt.kernels.programs import fused as pf

    ins, refs = _tile_tensors(*shapes)
    d = irops.get(op)
    bound = d.bind_attrs(attrs)
    outs = [kk.empty(device(), s) for s in d.infer([t.spec for t in ins], bound)]
    program = pf.build(op, ins, outs, bound, Numerics())
    return program, [t.buffer for t in (*ins, *outs)], refs


@add_program_case("bias_gelu", lambda q: "x".join(map(str, _ln_shape(q))) + " + bias")
def _bias_gelu_program(quick: bool) -> tuple[object, list, Fn]:
    rows, width = _ln_shape(quick)
    program, bufs, (rx, rb) = _fused_program("bias_gelu", [(rows, width), (width,)], {"approximate": "none"})
    return program, bufs, lambda: torch.nn.functional.gelu(rx + rb)


@add_program_case("silu_mul", lambda q: "x".join(map(str, _ln_shape(q))))
def _silu_mul_program(quick: bool) -> tuple[object, list, Fn]:
    rows, width = _ln_shape(quick)
    program, bufs, (ra, rb) = _fused_program("silu_mul", [(rows, width), (rows, width)], {})
    return program, bufs, lambda: torch.nn.functional.silu(ra) * rb


@add_program_case("conv2d", _conv_desc)
def _conv_program(quick: bool) -> tuple[object, list, Fn]:
    from kohakutt.kernels.programs import conv as pc

    n, c, h, k = _conv_shape(quick)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((n, c, h, h)).astype(np.float32), (rng.standard_normal((k, c, 3, 3)) * 0.05)
    spec = pc.conv_spec(x.shape, w.shape, {"padding": 1}, fidelity="HiFi2")
    dev = device()
    bufs = [dev.upload(x, "bfloat16", layout="row_major"),
            dev.upload(pc.weight_matrix(w.astype(np.float32), spec.shape), spec.w_fmt),
            dev.allocate(shape=(n, k, h, h), fmt="bfloat16", layout="row_major")]  # fmt: skip
    rx, rw = torch.from_numpy(x), torch.from_numpy(w.astype(np.float32))
    return pc.conv_program(spec), bufs, lambda: torch.nn.functional.conv2d(rx, rw, None, 1, 1)


@add_program_case("sdpa causal", lambda q: "x".join(map(str, _sdpa_shape(q))) + " causal")
def _sdpa_program(quick: bool) -> tuple[object, list, Fn]:
    from kohakutt.kernels.programs.attention import flash_attention_program

    shape = _sdpa_shape(quick)
    (q, k, v), (rq, rk, rv) = _tile_tensors(shape, shape, shape)
    dev = device()
    b, h, s, d = shape
    out = kk.empty(device(), q.spec).buffer
    lse = dev.allocate(shape=(b * h * -(-s // 32), 32), fmt="float32", layout="row_major")
    program = flash_attention_program(shape, shape, shape, scale=d**-0.5, causal=True)
    return program, [q.buffer, k.buffer, v.buffer, out, lse], lambda: torch.nn.functional.scaled_dot_product_attention(
        rq, rk, rv, is_causal=True)  # fmt: skip


def _cell(v: float | None, width: int) -> str:
    return f"{v:{width}.2f}" if v is not None else f"{'-':>{width}}"


def run_programs(quick: bool, repeat: int, only: str | None = None) -> list[dict]:
    rows = []
    for case in PROGRAMS:
        if only and only not in case.name:
            continue
        program, bufs, ref_fn = case.setup(quick)
        cpp_fn, twin_fn = program_fn(program, bufs, "cpp"), program_fn(program, bufs, "python")
        try:
            cpp_fn()  # builds (or loads) the kernels before timing
            fns = [cpp_fn]
        except (ProgramError, CommandError) as e:
            cause = getattr(e, "cause", None) or e
            fns, why = [], "its kernels are not on 0.81.1's API yet" if "does not build" in str(cause) else str(cause)
        if fns or quick:
            fns.append(twin_fn)
        times = best_seconds([*fns, ref_fn], repeat)
        cpp_s = times[0] if fns and fns[0] is cpp_fn else None
        twin_s = times[len(fns) - 1] if twin_fn in fns else None
        ref_s = times[-1]
        rows.append({
            "program": case.name, "shape": case.shape(quick), "cpp_ms": cpp_s and cpp_s * 1e3,
            "twin_ms": twin_s and twin_s * 1e3, "torch_ms": ref_s * 1e3,
            "cpp_over_twin": cpp_s / twin_s if cpp_s and twin_s else None,
            "cpp_over_torch": cpp_s / ref_s if cpp_s else None, "target": 1.0,
            "met": None if cpp_s is None or twin_s is None else cpp_s <= twin_s,
            "note": "" if cpp_s is not None else f"C++ not run: {why}",
        })  # fmt: skip
    os.environ.pop("KTT_SIM_KERNELS", None)
    config.reload()
    return rows


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
    ap.add_argument("--no-programs", action="store_true", help="skip the own programs' table")
    args = ap.parse_args(argv)
    rows = run(args.quick, args.repeat, args.only)
    print(f"{'case':<22} {'shape':<30} {'sim ms':>9} {'torch ms':>9} {'ratio':>6} {'target':>7}  met")
    for r in rows:
        print(
            f"{r['case']:<22} {r['shape']:<30} {r['sim_ms']:9.2f} {r['torch_ms']:9.2f} {r['ratio']:6.2f} "
            f"{r['target']:7.2f}  {'yes' if r['met'] else 'NO'}"
        )
    programs = [] if args.no_programs else run_programs(args.quick, args.repeat, args.only)
    if programs:
        print(f"\n{'own program':<14} {'shape':<30} {'C++ ms':>9} {'twin ms':>9} {'torch ms':>9} {'C++/twin':>8} "
              f"{'C++/torch':>9}  met")  # fmt: skip
        for r in programs:
            met = "-" if r["met"] is None else "yes" if r["met"] else "NO"
            print(f"{r['program']:<14} {r['shape']:<30} {_cell(r['cpp_ms'], 9)} {_cell(r['twin_ms'], 9)} "
                  f"{_cell(r['torch_ms'], 9)} {_cell(r['cpp_over_twin'], 8)} {_cell(r['cpp_over_torch'], 9)}  {met}"
                  + (f"  ({r['note']})" if r["note"] else ""))  # fmt: skip
    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": "sim_kernels",
                    "quick": args.quick,
                    "torch_threads": torch.get_num_threads(),
                    "cases": rows,
                    "programs": programs,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
