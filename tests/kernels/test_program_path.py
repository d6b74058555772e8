"""The op library's own programs on the program path (``KTT_SIM_OPS=program``): ``kernels.run`` queues the op's
Metalium program through the HAL, staged from row-major operands, and gets the same bits as the vectorized model it
runs by default; the same launcher is the op's ``ktt`` implementation on the ttnn backend (generic_op)."""

from __future__ import annotations

import numpy as np
import pytest

import kohakutt.kernels as kk
from kohakutt import hal
from kohakutt.hal import host_build
from kohakutt.kernels import registry
from kohakutt.kernels.fused import LAUNCH

CASES = {
    "silu_mul": ([(64, 96), (64, 96)], {}),
    "swiglu": ([(40, 128)], {"dim": -1}),
    "bias_gelu": ([(50, 96), (96,)], {"approximate": "tanh"}),
    "rotary_embedding": ([(1, 2, 64, 32), (1, 1, 64, 32), (1, 1, 64, 32)], {"interleaved": False}),
    "rotary_embedding_backward": ([(1, 2, 64, 128), (1, 1, 64, 128), (1, 1, 64, 128)], {"interleaved": False}),
}


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.synchronize()
    d.close()


def run(dev, knobs, mode, op, arrays, attrs, dtype="bfloat16"):
    knobs(KTT_SIM_OPS=mode)
    outs = kk.run(op, [kk.from_numpy(dev, a, dtype) for a in arrays], attrs)
    return [kk.to_numpy(o) for o in outs]


@pytest.mark.parametrize("op", sorted(CASES))
def test_program_path_gives_the_models_bits(dev, knobs, op):
    shapes, attrs = CASES[op]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    calls = LAUNCH[op].program_op.stats["calls"]
    model = run(dev, knobs, "model", op, arrays, attrs)
    assert LAUNCH[op].program_op.stats["calls"] == calls, "the model path queued a program"
    program = run(dev, knobs, "program", op, arrays, attrs)
    assert LAUNCH[op].program_op.stats["calls"] == calls + 1, "the program path did not run the program"
    for m, p in zip(model, program):
        np.testing.assert_array_equal(m.view(np.uint32), p.view(np.uint32))


def test_a_new_shape_compiles_nothing(dev, knobs):
    rng = np.random.default_rng(8)
    run(dev, knobs, "program", "silu_mul", [rng.standard_normal((64, 64))] * 2, {})
    builds = host_build.stats["builds"]
    for shape in [(32, 32), (5, 300), (3, 64, 40)]:
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        got = run(dev, knobs, "program", "silu_mul", [a, b], {})[0]
        want = run(dev, knobs, "model", "silu_mul", [a, b], {})[0]
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert host_build.stats["builds"] == builds


def test_operands_the_program_does_not_take_run_the_model(dev, knobs):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((32, 64)), rng.standard_normal((32, 64))
    calls = LAUNCH["silu_mul"].program_op.stats["calls"]
    got = run(dev, knobs, "program", "silu_mul", [a, b], {}, "float32")[0]  # float32: TT-NN's SFPU path
    want = run(dev, knobs, "model", "silu_mul", [a, b], {}, "float32")[0]
    np.testing.assert_array_equal(got, want)
    assert LAUNCH["silu_mul"].program_op.stats["calls"] == calls


@pytest.mark.parametrize("op", sorted(CASES))
def test_the_ttnn_backend_chooses_the_same_program(op):
    sim, card = registry.lookup(op, "sim"), registry.lookup(op, "ttnn")
    assert sim.provider == card.provider == "ktt"
    assert sim.launch is card.launch is LAUNCH[op]
