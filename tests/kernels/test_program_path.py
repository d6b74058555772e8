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


@pytest.mark.parametrize("shapes, causal, mask", [
    ([(1, 2, 40, 32), (1, 2, 40, 32), (1, 2, 40, 32)], False, False),
    ([(2, 4, 64, 32), (2, 2, 96, 32), (2, 2, 96, 64)], True, False),  # GQA, Sq < Skv, Dv != D
    ([(1, 2, 40, 32), (1, 2, 48, 32), (1, 2, 48, 32)], False, "float32"),
    ([(2, 2, 40, 32), (2, 2, 48, 32), (2, 2, 48, 32)], True, "bool"),  # 2-d, made additive and 4-d on the device
    ([(2, 2, 40, 32), (2, 2, 48, 32), (2, 2, 48, 32)], False, "bfloat16"),
])  # fmt: skip
def test_flash_attention_on_the_program_path(dev, knobs, shapes, causal, mask):
    """scaled_dot_product_attention's own program is the ktt provider on both backends: on the program path it runs
    the C++ program (with its logsumexp rows brought to (B, H, Sq)) and matches the default model as the program's
    own tests bound it (most elements bit for bit, the rest within a rounding of the output)."""
    from kohakutt.kernels.attention import FLASH

    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    extra = []
    sq, skv = shapes[0][2], shapes[1][2]
    if mask == "float32":
        extra = [(np.where(rng.random((1, 1, sq, skv)) < 0.2, -np.inf, 0).astype(np.float32), "float32")]
    elif mask == "bool":
        extra = [(rng.random((sq, skv)) > 0.2, "bool")]
    elif mask == "bfloat16":
        extra = [((rng.standard_normal((2, 1, sq, skv)) * 2).astype(np.float32), "bfloat16")]
    assert registry.lookup("scaled_dot_product_attention", "sim").launch is FLASH
    assert registry.lookup("scaled_dot_product_attention", "ttnn").launch is FLASH

    def go(mode):
        knobs(KTT_SIM_OPS=mode)
        ins = [kk.from_numpy(dev, a, "bfloat16") for a in arrays] + [kk.from_numpy(dev, m, dt) for m, dt in extra]
        return [kk.to_numpy(o) for o in kk.run("scaled_dot_product_attention", ins, {"is_causal": causal})]

    calls = FLASH.program_op.stats["calls"]
    (m_out, m_lse), (p_out, p_lse) = go("model"), go("program")
    assert FLASH.program_op.stats["calls"] == calls + 1
    assert m_lse.shape == p_lse.shape == tuple(shapes[0][:3])
    assert np.mean(m_out == p_out) >= 0.99
    np.testing.assert_allclose(p_out, m_out, rtol=2.0**-7, atol=2.0**-8 * np.abs(arrays[2]).max())
    np.testing.assert_allclose(p_lse, m_lse, rtol=2.0**-20, atol=2.0**-20)
