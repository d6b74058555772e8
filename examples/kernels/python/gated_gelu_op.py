"""A hand-written Metalium program as a torch op: ``out = gelu(a) * b * scale`` on tt tensors.

The kernels are ordinary TT-Metal 0.81.1 C++ files beside this script (``gated_gelu/reader.cpp``, ``compute.cpp``,
``writer.cpp``). ``gated_gelu_program`` builds the program from what a call's tensors are (formats, never shapes):
four cores, three circular buffers, the tensors' ``TensorAccessor`` args at compile time; the tile count, the
addresses and the scale's fp32 bits are runtime arguments, so a new shape or scale compiles nothing. ``kk.op`` makes
it ``torch.ops.kohakutt_example.gated_gelu``: queued in order with every other op, simulated from the C++ (or run
through ``ttnn.generic_op`` on a card), and traced by ``kohakutt.capture`` and ``torch.compile``.
Run: python examples/kernels/python/gated_gelu_op.py
"""

from pathlib import Path

import torch
import torch.nn.functional as F

import kohakutt
import kohakutt.kernels as kk

HERE = Path(__file__).resolve().parent / "gated_gelu"
CORES = kk.CoreRange((0, 0), (3, 0))  # four cores in a row; each call splits its tiles over them


def gated_gelu_program(sig: kk.Signature) -> kk.Program:
    a, b, out = sig["a"], sig["b"], sig["out"]

    def runtime_args(t, rt):
        split = kk.split_work(rt["tiles"], CORES)  # (core, first tile, tile count) per core
        return {
            "reader": {c: [t["a"].address, t["b"].address, start, n] for c, start, n in split},
            "compute": {c: [n, rt["scale"]] for c, start, n in split},
            "writer": {c: [t["out"].address, start, n] for c, start, n in split},
        }

    return kk.Program(
        "gated_gelu",
        [
            kk.Kernel("reader", HERE / "reader.cpp", CORES, compile_time_args=[*a.accessor_args(), *b.accessor_args()]),
            kk.Kernel("compute", HERE / "compute.cpp", CORES, fp32_dest_acc_en=True),
            kk.Kernel("writer", HERE / "writer.cpp", CORES, compile_time_args=out.accessor_args()),
        ],
        [
            kk.CircularBuffer(0, a.format, a.cb_page_size(), 2, CORES),
            kk.CircularBuffer(1, b.format, b.cb_page_size(), 2, CORES),
            kk.CircularBuffer(16, out.format, out.cb_page_size(), 2, CORES),
        ],
        runtime_args=kk.by_name(sig, runtime_args),
        tensors=sig.names,
    )


@kk.op("kohakutt_example::gated_gelu(Tensor a, Tensor b, float scale=1.0) -> Tensor", gated_gelu_program)
def gated_gelu(a, b, scale=1.0):
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"gated_gelu takes a and b of one shape and dtype, got {a.shape}, {b.shape}")
    return kk.Call(
        inputs={"a": a, "b": b},
        outputs={"out": (a.shape, a.dtype)},
        runtime={"tiles": kk.tile_count(a), "scale": kk.bits(scale)},
    )


def reference(a, b, scale):
    return (F.gelu(a.double()) * b.double() * scale).to(a.dtype)


def main() -> None:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    for shape, scale in (((64, 96), 0.5), ((3, 40, 200), 2.0)):
        a, b = torch.randn(shape).bfloat16(), torch.randn(shape).bfloat16()
        got = gated_gelu(a.to(dev), b.to(dev), scale).cpu()
        err = (got.float() - reference(a, b, scale).float()).abs().max().item()
        print(f"eager {tuple(shape)} scale {scale}: max |tt - cpu| = {err:.4f}")
        assert torch.allclose(got.float(), reference(a, b, scale).float(), rtol=2**-6, atol=2**-6)

    a, b = torch.randn(64, 128).bfloat16(), torch.randn(64, 128).bfloat16()
    want = reference(a, b, 1.5).float()
    step = kohakutt.capture(lambda x, y: gated_gelu(x, y, 1.5) + 1, a.to(dev), b.to(dev))
    got = step(a.to(dev), b.to(dev)).cpu().float()
    print(f"kohakutt.capture replay: max |tt - cpu| = {(got - (want + 1)).abs().max().item():.4f}")
    assert torch.allclose(got, want + 1, rtol=2**-6, atol=2**-5)

    compiled = torch.compile(lambda x, y: torch.relu(gated_gelu(x, y, 1.5)), backend="ktt_tt")
    for i in range(3):
        got = compiled(a.to(dev), b.to(dev)).cpu().float()
        assert torch.allclose(got, want.relu(), rtol=2**-6, atol=2**-6), f"torch.compile call {i} disagrees"
    print("torch.compile (ktt_tt), three calls: equal to the CPU reference within bf16 rounding")
    print("programs built:", kk.program_op("kohakutt_example::gated_gelu").stats["programs_built"])


if __name__ == "__main__":
    main()
