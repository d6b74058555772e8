"""Op-library calls that reach TT-NN code paths the other kernel tests do not (approximate numerics, block-float
operands, bfloat16 statistics, non-empty concat, uniform adaptive pools, ...), run on the simulator.

Each case checks that the simulator runs it with the IR's output specs; the point is the recording: the TT-NN
replay test (``test_ttnn_replay.py``) records the op library's TT-NN calls while these and the kernel tests run, and
fails when a TT-NN call site in ``kohakutt/kernels`` is never reached.
"""

from __future__ import annotations

import numpy as np
import pytest

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import numerics

RNG = np.random.default_rng(16)


def t(dev, shape, dtype="bfloat16", layout="row_major", low=-2.0, high=2.0):
    return kk.from_numpy(dev, RNG.uniform(low, high, shape).astype(np.float32), dtype, layout)


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def _check(op, inputs, attrs, outs):
    specs = irops.get(op).infer([x.spec if hasattr(x, "spec") else irops.ScalarSpec(x) for x in inputs],
                                irops.get(op).bind_attrs(attrs))  # fmt: skip
    assert [o.spec for o in outs] == specs, op
    for o in outs:
        assert np.all(np.isfinite(kk.to_numpy(o)) | (kk.to_numpy(o) != kk.to_numpy(o))), op  # values came back


CASES = {
    "add, approximate": ("add", lambda d: [t(d, (4, 40)), t(d, (4, 40))], {}, {"approx": True}),
    "heaviside of a number": ("heaviside", lambda d: [t(d, (3, 37)), 0.5], {}, {}),
    "elu_backward of a result": ("elu_backward", lambda d: [t(d, (3, 37)), t(d, (3, 37))],
                                 {"is_result": True, "scale": 2.0, "input_scale": 1.5}, {}),
    "elu_backward, scaled": ("elu_backward", lambda d: [t(d, (3, 37)), t(d, (3, 37))], {"scale": 2.0}, {}),
    "addmm, full bias": ("addmm", lambda d: [t(d, (4, 2)), t(d, (4, 8)), t(d, (8, 2))], {"alpha": 2.0}, {}),
    "linear, float32 split with bias": ("linear", lambda d: [t(d, (4, 40), "float32"), t(d, (8, 40), "float32"),
                                                          t(d, (8,), "float32")], {"transpose_w": True}, {}),
    "concat": ("concat", lambda d: [t(d, (2, 3)), t(d, (2, 4))], {"dim": 1}, {}),
    "argmax, bfloat8_b": ("argmax", lambda d: [t(d, (4, 64), "bfloat8_b", "tile")], {"dim": 1}, {}),
    "zeros": ("zeros", lambda d: [], {"shape": (3, 4)}, {}),
    "group_norm, bfloat8_b": ("group_norm", lambda d: [t(d, (2, 4, 32, 32), "bfloat8_b", "tile")],
                              {"num_groups": 2}, {}),
    "layer_norm_backward, bfloat16 statistics": (
        "layer_norm_backward",
        lambda d: [t(d, (4, 64)), t(d, (4, 64)), t(d, (4, 1)), t(d, (4, 1), low=0.5), t(d, (64,))],
        {"params": "w"}, {},
    ),
    "layer_norm_backward, no weight": (
        "layer_norm_backward", lambda d: [t(d, (4, 64)), t(d, (4, 64)), t(d, (4, 1)), t(d, (4, 1), low=0.5)], {}, {},
    ),
    "group_norm_backward, bfloat16 statistics": (
        "group_norm_backward",
        lambda d: [t(d, (2, 4, 5, 6)), t(d, (2, 4, 5, 6)), t(d, (2, 2)), t(d, (2, 2), low=0.5), t(d, (4,))],
        {"num_groups": 2, "params": "w"}, {},
    ),
    "max_pool, bfloat8_b": ("max_pool", lambda d: [t(d, (1, 2, 32, 32), "bfloat8_b", "tile")],
                            {"kernel_size": (2, 2)}, {}),
    "adaptive_avg_pool, uniform": ("adaptive_avg_pool", lambda d: [t(d, (2, 3, 8, 8))], {"output_size": (4, 4)}, {}),
    "adaptive_max_pool, uniform": ("adaptive_max_pool", lambda d: [t(d, (2, 3, 8, 8))], {"output_size": (2, 2)}, {}),
    "scaled_dot_product_attention, causal": (
        "scaled_dot_product_attention", lambda d: [t(d, (1, 2, 64, 32)) for _ in range(3)], {"is_causal": True}, {},
    ),
}  # fmt: skip


def i64(dev, shape):
    return kk.from_numpy(dev, RNG.integers(-(2**40), 2**40, shape), "int64")


# int64 runs as kohakutt.kernels.wide's word-pair programs
for _op in ("add", "sub", "mul", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne", "bitwise_and",
            "bitwise_or", "bitwise_xor"):  # fmt: skip
    CASES[f"{_op}, int64"] = (_op, lambda d: [i64(d, (3, 37)), i64(d, (3, 37))], {}, {})
for _op in ("neg", "abs", "square", "sign", "bitwise_not", "signbit"):
    CASES[f"{_op}, int64"] = (_op, lambda d: [i64(d, (3, 37))], {}, {})
CASES["add, int64 and a number"] = ("add", lambda d: [i64(d, (3, 37)), 5], {}, {})
CASES["add, int64 and int32"] = ("add", lambda d: [i64(d, (3, 37)), t(d, (3, 37), "int32", low=-99, high=99)], {}, {})
CASES["sum, int64"] = ("sum", lambda d: [i64(d, (3, 37))], {"dims": 1}, {})
CASES["cumsum, int64"] = ("cumsum", lambda d: [i64(d, (3, 37))], {"dim": 1}, {})
for _p in (float("inf"), float("-inf"), 0.0, 1.0, 3.0):  # float32 norms (moreh_norm takes bfloat16 only)
    CASES[f"vector_norm, float32, p={_p}"] = ("vector_norm", lambda d: [t(d, (3, 37), "float32")], {"p": _p, "dims": 1},
                                              {})  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_case_runs_on_the_simulator(dev, name):
    op, make, attrs, num = CASES[name]
    inputs = make(dev)
    with numerics(**num):
        outs = kk.run(op, inputs, attrs, device=dev)
    _check(op, inputs, attrs, outs)
