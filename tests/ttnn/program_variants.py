"""The own programs' variants as the op library builds them, described for a run through ``ttnn.generic_op``.

:func:`variants` builds one HAL :class:`~kohakutt.hal.program.Program` per variant the op library uses (each set of
kernel sources, defines and compile-time arguments: the fused programs, layer / RMS norm with and without the fused
add, the convolution's layouts and accumulation modes, flash attention with and without a mask) over small buffers on
the simulator. :func:`describe` turns one into plain data: its kernels (source file, kind, cores, compile-time
arguments, defines, compute configuration), circular buffers, semaphores, its buffers (shape, format, layout, memory)
and its runtime arguments with every buffer address replaced by a reference to the buffer, found by resolving them
twice over buffers at different addresses. ``generic_op_driver.py`` rebuilds the Program from that in the TT-NN venv
and launches it on the mocked P150 through the ttnn backend's own descriptor code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kohakutt.hal.layout import Format, Layout
from kohakutt.hal.program import Program

ADDRESS_STRIDE = 1 << 24  # the two resolutions' addresses differ by this per buffer


class _Fake:
    """A buffer as a runtime-argument function sees it, at an address of our choosing."""

    def __init__(self, buf: Any, address: int):
        self._buf, self.address = buf, address

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buf, name)


def describe(name: str, program: Program, buffers: Sequence[Any]) -> dict:
    """``program`` over ``buffers`` as plain data (see the module notes)."""
    base = [0x10000000 + i * 0x100000 for i in range(len(buffers))]
    other = [a + ADDRESS_STRIDE * (i + 1) for i, a in enumerate(base)]
    one = program.resolve_runtime_args([_Fake(b, a) for b, a in zip(buffers, base)], {})
    two = program.resolve_runtime_args([_Fake(b, a) for b, a in zip(buffers, other)], {})
    runtime: dict[str, list] = {}
    for kname, per_core in one.items():
        cores = []
        for core, args in per_core.items():
            row: list[Any] = []
            for v1, v2 in zip(args, two[kname][core]):
                if v1 == v2:
                    row.append(int(v1))
                    continue
                i = (v2 - v1) // ADDRESS_STRIDE - 1
                row.append({"buffer": i, "offset": v1 - base[i]})
            cores.append([list(core), row])
        runtime[kname] = cores
    kernels = [
        {
            "kind": k.kind,
            "name": k.name,
            "path": str(k.path) if k.path else None,
            "source": k.source,
            "cores": [[list(r.start), list(r.end)] for r in k.cores.ranges],
            "compile_time_args": list(k.compile_time_args),
            "defines": dict(k.defines),
            "common_runtime_args": list(k.common_runtime_args),
            "math_fidelity": k.fidelity.name,
            "fp32_dest_acc_en": k.fp32_dest_acc_en,
            "math_approx_mode": k.math_approx_mode,
            "dst_full_sync_en": k.dst_full_sync_en,
        }
        for k in program.kernels
    ]
    cbs = [
        {
            "index": cb.index,
            "format": Format.of(cb.data_format).value,
            "page_size": cb.page_size,
            "num_pages": cb.num_pages,
            "cores": [[list(r.start), list(r.end)] for r in cb.cores.ranges],
        }
        for cb in program.cbs
    ]
    sems = [
        {"id": s.id, "initial_value": s.initial_value, "cores": [[list(r.start), list(r.end)] for r in s.cores.ranges]}
        for s in program.semaphores
    ]
    bufs = [
        {"shape": list(b.shape), "format": b.fmt.value, "layout": Layout.of(b.layout).value, "kind": b.kind.value}
        for b in buffers
    ]
    return {
        "name": name,
        "program": program.name,
        "kernels": kernels,
        "cbs": cbs,
        "semaphores": sems,
        "buffers": bufs,
        "runtime_args": runtime,
    }


# ------------------------------------------------------------------------------------------------- the variants
def _fused(dev: Any) -> list[tuple[str, Program, list]]:
    from kohakutt import kernels as kk
    from kohakutt.ir import ops as irops
    from kohakutt.ir.numerics import Numerics, resolve
    from kohakutt.kernels.programs import fused as pf
    from kohakutt.kernels.tensor import empty

    def t(shape: tuple[int, ...], dtype: str = "bfloat16") -> Any:
        return kk.from_numpy(dev, np.zeros(shape, np.float32), dtype, "tile")

    def build(op: str, ins: list, attrs: dict, num: Numerics | None = None) -> tuple[Program, list]:
        d = irops.get(op)
        bound = d.bind_attrs(attrs)
        outs = [
            empty(dev, s.with_layout(Layout.TILE) if hasattr(s, "with_layout") else s)
            for s in d.infer([x.spec for x in ins], bound)
        ]
        prog = pf.build(op, ins, outs, bound, num or resolve(d.numerics), max_cores=4)
        return prog, [x.buffer for x in (*ins, *outs)]

    x, b = t((64, 96)), t((96,))
    out = []
    out.append(("bias_gelu", *build("bias_gelu", [x, b], {})))
    out.append(("bias_gelu_tanh", *build("bias_gelu", [x, b], {"approximate": "tanh"})))
    out.append(("silu_mul", *build("silu_mul", [x, t((64, 96))], {})))
    out.append(("silu_mul_bf16_dst", *build("silu_mul", [x, t((64, 96))], {}, Numerics(fp32_acc=False))))
    out.append(("swiglu", *build("swiglu", [t((64, 128))], {"dim": -1})))
    q, cs = t((1, 2, 64, 32)), t((1, 1, 64, 32))
    out.append(("rotary_matmul", *build("rotary_embedding", [q, cs, cs], {"interleaved": False})))
    q2, cs2 = t((1, 2, 64, 128)), t((1, 1, 64, 128))
    out.append(("rotary_swap", *build("rotary_embedding", [q2, cs2, cs2], {"interleaved": False})))
    return out


def _norm(dev: Any) -> list[tuple[str, Program, list]]:
    from kohakutt.kernels.programs.norm import NormConfig, rowwise_program

    out = []
    cases = {
        "layer_norm": NormConfig(96, 1e-5, gamma=True, beta=True),
        "layer_norm_plain": NormConfig(96, 1e-5, stats=False),
        "rms_norm": NormConfig(96, 1e-5, rms=True, gamma=True),
        "add_layer_norm": NormConfig(96, 1e-5, fused=True, gamma=True, beta=True),
        "add_rms_norm": NormConfig(96, 1e-5, rms=True, fused=True, gamma=True),
    }
    for name, cfg in cases.items():
        rows = 64
        shapes = {
            "x": (rows, cfg.width),
            "residual": (rows, cfg.width),
            "weight": (1, cfg.width),
            "bias": (1, cfg.width),
            "y": (rows, cfg.width),
            "s": (rows, cfg.width),
            "mean": (rows, 1),
            "rstd": (rows, 1),
        }
        fmts = {"mean": Format.FLOAT32, "rstd": Format.FLOAT32}
        bufs = [dev.allocate(shape=shapes[n], fmt=fmts.get(n, Format.BFLOAT16), layout="tile") for n in cfg.tensors]
        out.append((name, rowwise_program(cfg, rows), bufs))
    return out


def _conv(dev: Any) -> list[tuple[str, Program, list]]:
    from kohakutt.kernels.programs.conv import conv_program, conv_spec

    out = []
    cases = {
        "conv2d_nchw_bias": ((1, 4, 9, 9), (8, 4, 3, 3), {"padding": (1, 1)}, "bfloat16", False, True),
        "conv2d_nhwc_fp32acc": (
            (1, 9, 9, 8),
            (16, 8, 3, 3),
            {"channels_last": True, "stride": (2, 2)},
            "float32",
            True,
            False,
        ),
        "conv2d_grouped_streamed": (
            (1, 8, 8, 8),
            (8, 4, 3, 3),
            {"groups": 2, "padding": (1, 1)},
            "bfloat16",
            True,
            True,
        ),
    }
    for name, (xs, ws, attrs, dt, fp32, bias) in cases.items():
        spec = conv_spec(
            xs,
            ws,
            attrs,
            x_dtype=dt,
            w_dtype=dt,
            bias_dtype=dt if bias else None,
            fp32_acc=fp32,
            w_resident=None if "streamed" not in name else False,
        )
        s = spec.shape
        bufs = [
            dev.allocate(
                shape=(s.n, s.h, s.w, s.c) if s.channels_last else (s.n, s.c, s.h, s.w),
                fmt=spec.x_fmt,
                layout="row_major",
            ),
            dev.allocate(shape=(s.groups * s.kh * s.krt * 32, s.nt * 32), fmt=spec.w_fmt, layout="tile"),
        ]
        if bias:
            bufs.append(dev.allocate(shape=(s.k,), fmt=spec.bias_fmt, layout="row_major"))
        oshape = (s.n, s.oh, s.ow, s.k) if s.channels_last else (s.n, s.k, s.oh, s.ow)
        bufs.append(dev.allocate(shape=oshape, fmt=spec.out_fmt, layout="row_major"))
        out.append((name, conv_program(spec, max_cores=4), bufs))
    return out


def _attention(dev: Any) -> list[tuple[str, Program, list]]:
    from kohakutt.kernels.programs.attention import flash_attention_program

    out = []
    for name, mask in (("flash_attention_causal", None), ("flash_attention_mask", (1, 1, 64, 96))):
        prog = flash_attention_program(
            (1, 2, 64, 64),
            (1, 1, 96, 64),
            (1, 1, 96, 64),
            scale=0.125,
            causal=mask is None,
            mask_shape=mask,
            max_cores=4,
        )
        shapes = [
            ((1, 2, 64, 64), Format.BFLOAT16),
            ((1, 1, 96, 64), Format.BFLOAT16),
            ((1, 1, 96, 64), Format.BFLOAT16),
        ]
        if mask is not None:
            shapes.append((mask, Format.FLOAT32))
        shapes += [((1, 2, 64, 64), Format.BFLOAT16)]
        bufs = [dev.allocate(shape=sh, fmt=f, layout="tile") for sh, f in shapes]
        bufs.append(dev.allocate(shape=(4, 32), fmt=Format.FLOAT32, layout="row_major"))
        out.append((name, prog, bufs))
    return out


def _module_once(path: Path) -> Any:
    """The module at ``path`` under its file's name, loaded once per process: examples define torch ops at import,
    and an op is defined once (the torch and DSL tests import the same modules by name)."""
    import importlib.util
    import sys

    mod = sys.modules.get(path.stem)
    if mod is None:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[path.stem] = mod
    return mod


def _custom(dev: Any) -> list[tuple[str, Program, list]]:
    """The custom-kernel examples' programs, built by the op layer as a call would build them: the Python example's
    gated GELU (``examples/kernels/python``) and the C++ extension's swiglu kernels (``examples/kernels/cpp_extension``:
    the same kernel files and circular buffers its C++ builder gives)."""
    import sys

    from kohakutt import kernels as kk
    from kohakutt.kernels.custom import ProgramOp
    from kohakutt.kernels.tensor import empty

    examples = Path(__file__).resolve().parents[2] / "examples" / "kernels"
    if "torch" not in sys.modules:  # the example registers a torch op at import: it is imported here with torch
        import torch  # noqa: F401
    mod = _module_once(examples / "python" / "gated_gelu_op.py")
    a = kk.from_numpy(dev, np.zeros((64, 96), np.float32), "bfloat16", "tile")
    b = kk.from_numpy(dev, np.zeros((64, 96), np.float32), "bfloat16", "tile")
    out = empty(dev, a.spec)
    op = ProgramOp("variants::gated_gelu", mod.gated_gelu_program)
    sig = op.signature({"a": a, "b": b}, {"out": out.spec})
    out_list = [("custom_gated_gelu", _with_runtime(op.build(sig), {"tiles": 6, "scale": kk.bits(0.5)}),
                 [a.buffer, b.buffer, out.buffer])]  # fmt: skip

    cpp = examples / "cpp_extension" / "kernels"
    cores = kk.CoreRange((0, 0), (3, 0))
    ref = sig["a"]

    def args(bufs: Sequence[Any], rt: Any) -> dict:
        split = kk.split_work(bufs[2].num_pages, cores)
        return {"reader": {c: [bufs[0].address, bufs[1].address, s, n] for c, s, n in split},
                "compute": {c: [n] for c, s, n in split},
                "writer": {c: [bufs[2].address, s, n] for c, s, n in split}}  # fmt: skip

    swiglu = kk.Program("swiglu", [
        kk.Kernel("reader", cpp / "reader.cpp", cores, compile_time_args=[*ref.accessor_args(), *ref.accessor_args()]),
        kk.Kernel("compute", cpp / "compute.cpp", cores, fp32_dest_acc_en=True),
        kk.Kernel("writer", cpp / "writer.cpp", cores, compile_time_args=ref.accessor_args())],
        [kk.CircularBuffer(i, ref.format, ref.page_size, 2, cores) for i in (0, 1, 16)], runtime_args=args)  # fmt: skip
    out_list.append(("custom_cpp_swiglu", swiglu, [a.buffer, b.buffer, out.buffer]))
    return out_list


def _with_runtime(program: Program, runtime: dict) -> Program:
    """``program`` whose runtime-args function always gets ``runtime`` (describe() resolves with none)."""
    import dataclasses

    fn = program.runtime_args
    return dataclasses.replace(program, runtime_args=lambda bufs, rt: fn(bufs, {**runtime, **rt}))


def _dsl(dev: Any) -> list[tuple[str, Program, list]]:
    """The kernel DSL's programs (the two examples and the every-op programs of tests/dsl): their generated C++."""
    import dataclasses
    from pathlib import Path

    from kohakutt.dsl.metal import bits
    from kohakutt.ir.dtypes import DType
    from kohakutt.kernels.custom import Signature, TensorRef

    root = Path(__file__).resolve().parents[2]

    ex = root / "examples" / "kernels" / "dsl_metal"
    scaled, rms = _module_once(ex / "scaled_add_km.py"), _module_once(ex / "rms_norm_km.py")
    every = _module_once(root / "tests" / "dsl" / "every_op.py")

    def variant(prog: Any, tensors: dict[str, tuple[tuple[int, ...], str]], runtime: dict[str, int]) -> tuple:
        refs = [TensorRef(n, DType.of(f), Format.of(f), Layout.TILE, output=n in prog.outputs)
                for n, (_, f) in tensors.items()]  # fmt: skip
        sig = Signature(prog.name, tuple(r for r in refs if not r.output), tuple(r for r in refs if r.output))
        built = prog.build_program(sig)
        fixed = built.runtime_args
        built = dataclasses.replace(built, runtime_args=lambda bufs, rt: fixed(bufs, runtime))
        bufs = [dev.allocate(shape=s, fmt=f, layout="tile") for s, f in tensors.values()]
        return built, bufs

    out = []
    shape = (64, 96)
    mixed = {"a": (shape, "bfloat16"), "b": (shape, "float32"), "out": (shape, "bfloat8_b")}  # three formats
    out.append(("dsl_scaled_add", *variant(scaled.scaled_add_program, mixed, {"tiles": 6, "s": bits(0.5)})))
    norm = {"x": (shape, "bfloat16"), "weight": ((96,), "bfloat16"), "y": (shape, "bfloat16")}
    rt = {"rows": 2, "wt": 3, "inv_w": bits(1 / 96), "eps": bits(1e-6)}
    out.append(("dsl_rms_norm", *variant(rms.rms_norm_program, norm, rt)))
    for fam, (prog, ops) in every.PROGRAMS.items():
        t = {"x": ((64, 64), "bfloat16")} | ({} if fam == "unary" else {"y": ((64, 64), "bfloat16")})
        t["out"] = ((len(ops), 64, 64), "bfloat16")
        rt = {"tiles": 4} | ({"s": bits(every.SCALE)} if fam == "unary" else {})
        out.append((f"dsl_every_{fam}_op", *variant(prog, t, rt)))
    return out


FAMILIES: dict[str, Callable[[Any], list[tuple[str, Program, list]]]] = {
    "fused": _fused,
    "norm": _norm,
    "conv": _conv,
    "attention": _attention,
    "custom": _custom,


    "dsl": _dsl,
}


def variants(dev: Any) -> list[tuple[str, Program, list]]:
    """Every variant: (name, program, buffers)."""
    out = []
    for fam in FAMILIES.values():
        out.extend(fam(dev))
    return out
