"""Run in the TT-NN venv on the mocked P150 (``mock_p150.MockP150.run``): launch each described program variant
(``program_variants.describe``, a JSON list on stdin) through the ttnn backend's own launch path
(``TTNNBackend.run_program``: the ``ProgramDescriptor`` of ``ttnn_program.program_descriptor``, then
``ttnn.generic_op``) over TT-NN tensors of the variant's buffers, and report for each whether it got past every
host-side check to TT-Metal's kernel build (the stand-in compiler stops it there). With ``--baseline`` it first
launches TT-NN's own eltwise SFPU example (exp) with the interleaved copy reader and writer, the check's baseline.
Prints one JSON object as its last line."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import mock_p150
import ttnn

from kohakutt.hal.backends.ttnn_backend import TTNNBackend, TTNNBuffer
from kohakutt.hal.program import CircularBuffer, CoreRange, Kernel, Program, Semaphore


def _ranges(spec: list) -> list[CoreRange]:
    return [CoreRange(tuple(a), tuple(b)) for a, b in spec]


def _tensor(dev, b: dict):
    layout = ttnn.TILE_LAYOUT if b["layout"] == "tile" else ttnn.ROW_MAJOR_LAYOUT
    mem = ttnn.L1_MEMORY_CONFIG if b["kind"] == "l1" else ttnn.DRAM_MEMORY_CONFIG
    return ttnn.allocate_tensor_on_device(ttnn.Shape(b["shape"]), getattr(ttnn, b["format"]), layout, dev, mem)


def program_of(v: dict, addresses: list[int]) -> Program:
    kernels = []
    for k in v["kernels"]:
        kernels.append(
            Kernel(
                k["kind"],
                Path(k["path"]) if k["path"] else k["source"],
                _ranges(k["cores"]),
                compile_time_args=k["compile_time_args"],
                defines=k["defines"],
                common_runtime_args=k["common_runtime_args"],
                name=k["name"],
                math_fidelity=k["math_fidelity"],
                fp32_dest_acc_en=k["fp32_dest_acc_en"],
                math_approx_mode=k["math_approx_mode"],
                dst_full_sync_en=k["dst_full_sync_en"],
            )
        )
    cbs = [
        CircularBuffer(c["index"], c["format"], c["page_size"], c["num_pages"], _ranges(c["cores"])) for c in v["cbs"]
    ]
    sems = [Semaphore(s["id"], _ranges(s["cores"]), s["initial_value"]) for s in v["semaphores"]]

    def value(a):
        return addresses[a["buffer"]] + a["offset"] if isinstance(a, dict) else a

    runtime = {
        name: {tuple(core): [value(a) for a in args] for core, args in cores}
        for name, cores in v["runtime_args"].items()
    }
    return Program(v["program"], kernels, cbs, sems, runtime_args=runtime)


def backend_on(dev) -> TTNNBackend:
    """The ttnn backend of the HAL, on the mocked device (opened here by TT-NN itself)."""
    be = TTNNBackend(0)
    be.ttnn, be.device = ttnn, dev
    return be


def launch(dev, v: dict) -> dict:
    """Launch variant ``v`` through the ttnn backend's own ``run_program`` (its ProgramDescriptor, generic_op)."""
    tensors = [_tensor(dev, b) for b in v["buffers"]]
    addresses = [t.buffer_address() for t in tensors]
    prog = program_of(v, addresses)
    buffers = [types.SimpleNamespace(handle=TTNNBuffer(t, None), address=a) for t, a in zip(tensors, addresses)]
    try:
        backend_on(dev).run_program(prog, buffers, {})
        return {"name": v["name"], "reached_build": False, "ran": True, "error": ""}
    except Exception as e:
        return {
            "name": v["name"],
            "reached_build": mock_p150.reached_build(e),
            "ran": False,
            "error": mock_p150.first_lines(e, 6),
        }
    finally:
        for t in tensors:
            ttnn.deallocate(t)


def baseline(dev) -> dict:
    """TT-NN's own kernels, as its unary op runs them: the interleaved reader / writer and the SFPU exp example."""
    here = Path(ttnn.__file__).resolve().parent / "ttnn/cpp/ttnn/operations/eltwise/unary/device/kernels"
    t_in = ttnn.allocate_tensor_on_device(
        ttnn.Shape([1, 1, 64, 64]), ttnn.bfloat16, ttnn.TILE_LAYOUT, dev, ttnn.DRAM_MEMORY_CONFIG
    )
    t_out = ttnn.allocate_tensor_on_device(
        ttnn.Shape([1, 1, 64, 64]), ttnn.bfloat16, ttnn.TILE_LAYOUT, dev, ttnn.DRAM_MEMORY_CONFIG
    )
    core = ttnn.CoreRangeSet([ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(0, 0))])
    fmt = [ttnn.CBFormatDescriptor(buffer_index=0, data_format=ttnn.bfloat16, page_size=2048)]
    fmt2 = [ttnn.CBFormatDescriptor(buffer_index=2, data_format=ttnn.bfloat16, page_size=2048)]
    cbs = [ttnn.CBDescriptor(total_size=4096, core_ranges=core, format_descriptors=f) for f in (fmt, fmt2)]
    c0 = ttnn.CoreCoord(0, 0)
    files = {
        "reader": here / "dataflow/reader_unary_interleaved_start_id.cpp",
        "writer": here / "dataflow/writer_unary_interleaved_start_id.cpp",
        "compute": here / "compute/eltwise_sfpu.cpp",
    }
    path = ttnn.KernelDescriptor.SourceType.FILE_PATH
    kernels = [
        ttnn.KernelDescriptor(
            kernel_source=str(files["reader"]),
            source_type=path,
            core_ranges=core,
            compile_time_args=list(ttnn.TensorAccessorArgs(t_in).get_compile_time_args()),
            runtime_args=[(c0, [t_in.buffer_address(), 4, 0])],
            config=ttnn.ReaderConfigDescriptor(),
        ),
        ttnn.KernelDescriptor(
            kernel_source=str(files["writer"]),
            source_type=path,
            core_ranges=core,
            compile_time_args=[2, *ttnn.TensorAccessorArgs(t_out).get_compile_time_args()],
            runtime_args=[(c0, [t_out.buffer_address(), 4, 0])],
            config=ttnn.WriterConfigDescriptor(),
        ),
        ttnn.KernelDescriptor(
            kernel_source=str(files["compute"]),
            source_type=path,
            core_ranges=core,
            defines=[("SFPU_OP_CHAIN_0", "exp_tile_init(); exp_tile(0);"), ("SFPU_OP_EXP_INCLUDE", "1")],
            runtime_args=[(c0, [4])],
            config=ttnn.ComputeConfigDescriptor(),
        ),
    ]
    try:
        ttnn.generic_op([t_in, t_out], ttnn.ProgramDescriptor(kernels=kernels, semaphores=[], cbs=cbs))
        out = {"name": "ttnn_baseline", "reached_build": False, "ran": True, "error": ""}
    except Exception as e:
        out = {
            "name": "ttnn_baseline",
            "reached_build": mock_p150.reached_build(e),
            "ran": False,
            "error": mock_p150.first_lines(e, 6),
        }
    out["files"] = [str(p) for p in files.values()]
    return out


def main() -> None:
    variants = json.load(sys.stdin)
    answer = os.dup(1)
    os.dup2(2, 1)  # TT-Metal prints to stdout; the answer goes out alone
    dev = mock_p150.open_device()
    results = []
    try:
        if "--baseline" in sys.argv:
            results.append(baseline(dev))
        for v in variants:
            results.append(launch(dev, v))
    finally:
        ttnn.close_device(dev)
    sys.stdout.flush()
    os.dup2(answer, 1)
    print(json.dumps({"results": results, "grid": None}))


if __name__ == "__main__":
    main()
