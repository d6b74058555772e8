"""A C++ extension: the ``swiglu`` program (``swiglu_program.cpp``, registered with ``KTT_REGISTER_PROGRAM``) and its
torch op (``swiglu_op.cpp``, ``ktt::extension::run``), built with ``torch.utils.cpp_extension`` into
``build/swiglu_ext/swiglu_ext.so`` (rebuilt only when a source changes), loaded with ``kohakutt.extension.load``, then
called as ``torch.ops.kohakutt_example_cpp.swiglu(a, b)`` = silu(a) * b, eagerly, in a captured step and under
``torch.compile``, against torch on the CPU.
Run: python examples/kernels/cpp_extension/swiglu.py
"""

import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils import cpp_extension

import kohakutt
import kohakutt.extension

HERE = Path(__file__).resolve().parent
BUILD = HERE.parents[2] / "build" / "swiglu_ext"


def build() -> Path:
    """Build (or reuse) the extension library; return its path."""
    BUILD.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(
        name="swiglu_ext",
        sources=[str(HERE / "swiglu_program.cpp"), str(HERE / "swiglu_op.cpp")],
        extra_include_paths=kohakutt.extension.include_paths(),
        extra_cflags=["-O1"],
        build_directory=str(BUILD),
        is_python_module=False,
        verbose=False,
    )
    return BUILD / "swiglu_ext.so"


def reference(a, b):
    return (F.silu(a.double()) * b.double()).to(a.dtype)


def main() -> None:
    t0 = time.monotonic()
    path = build()
    print(f"built {path.relative_to(HERE.parents[2])} in {time.monotonic() - t0:.1f} s")
    print("programs:", kohakutt.extension.load(path))
    swiglu = torch.ops.kohakutt_example_cpp.swiglu
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    for shape in ((64, 96), (2, 50, 70)):
        a, b = torch.randn(shape).bfloat16(), torch.randn(shape).bfloat16()
        got = swiglu(a.to(dev), b.to(dev)).cpu()
        err = (got.float() - reference(a, b).float()).abs().max().item()
        print(f"eager {tuple(shape)}: max |tt - cpu| = {err:.4f}")
        assert torch.allclose(got.float(), reference(a, b).float(), rtol=2**-6, atol=2**-6)

    a, b = torch.randn(64, 128).bfloat16(), torch.randn(64, 128).bfloat16()
    want = reference(a, b).float()
    step = kohakutt.capture(lambda x, y: swiglu(x, y) * 2, a.to(dev), b.to(dev))
    got = step(a.to(dev), b.to(dev)).cpu().float()
    assert torch.allclose(got, want * 2, rtol=2**-6, atol=2**-5)
    print(f"kohakutt.capture replay: max |tt - cpu| = {(got - want * 2).abs().max().item():.4f}")

    compiled = torch.compile(lambda x, y: swiglu(x, y) + x, backend="ktt_tt")
    for i in range(3):
        got = compiled(a.to(dev), b.to(dev)).cpu().float()
        assert torch.allclose(got, want + a.float(), rtol=2**-6, atol=2**-5), f"torch.compile call {i} disagrees"
    print("torch.compile (ktt_tt), three calls: equal to the CPU reference within bf16 rounding")


if __name__ == "__main__":
    main()
