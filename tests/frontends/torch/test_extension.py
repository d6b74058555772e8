"""C++ extensions (``kohakutt.extension``): the swiglu example built with ``torch.utils.cpp_extension`` (cached in
build/swiglu_ext, as the example builds it), loaded, and run against torch on the CPU in float64; errors raised in
the op layer reach the caller through the C++ op as themselves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kohakutt.extension as ext
from kohakutt.errors import DtypeError, ProgramError
from kohakutt.hal import host_build

ROOT = Path(__file__).resolve().parents[3]
dev = torch.device("tt:0")


@pytest.fixture(scope="module")
def swiglu():
    spec = importlib.util.spec_from_file_location("swiglu_example", ROOT / "examples/kernels/cpp_extension/swiglu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert ext.load(mod.build()) == ["kohakutt_example_cpp::swiglu"]
    return torch.ops.kohakutt_example_cpp.swiglu


def test_include_paths_hold_the_headers():
    (inc,) = ext.include_paths()
    assert (Path(inc) / "ktt" / "extension.h").is_file() and (Path(inc) / "ktt" / "program.h").is_file()


@pytest.mark.parametrize("shape", [(32, 32), (3, 45, 70)])
def test_swiglu_matches_cpu(swiglu, shape):
    a, b = torch.randn(shape).bfloat16(), torch.randn(shape).bfloat16()
    got = swiglu(a.to(dev), b.to(dev)).cpu().float()
    want = (F.silu(a.double()) * b.double()).bfloat16().float()
    torch.testing.assert_close(got, want, rtol=2**-6, atol=2**-6)


def test_new_shapes_build_nothing(swiglu):
    a = torch.randn(64, 64).bfloat16().to(dev)
    swiglu(a, a).cpu()
    op = ext.program_op("kohakutt_example_cpp::swiglu")
    built, builds = op.stats["programs_built"], host_build.stats["builds"]
    for shape in [(32, 96), (7, 7), (2, 64, 64)]:
        x = torch.randn(shape).bfloat16()
        swiglu(x.to(dev), x.to(dev)).cpu()
    assert op.stats["programs_built"] == built and host_build.stats["builds"] == builds


def test_meta_and_fake_tensors_get_shapes_only(swiglu):
    out = swiglu(torch.empty(3, 40, device="meta"), torch.empty(3, 40, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 40)
    torch.library.opcheck(swiglu.default, (torch.randn(32, 32).to(dev), torch.randn(32, 32).to(dev)),
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip


def test_errors_keep_their_type_through_the_cpp_op(swiglu):
    x = torch.ones(4, 4, dtype=torch.int64).to(dev)
    with pytest.raises(DtypeError, match="int64"):
        swiglu(x, x)
    with pytest.raises(ProgramError, match="no extension library"):
        ext.load(ROOT / "build" / "no_such_ext.so")
    with pytest.raises(ProgramError, match="no C\\+\\+ program"):
        ext.program_op("nope::nope")
