"""0-d tensors through every simulated kernel that takes them: each op's 0-d result is its one-element result.

A 0-d operand is easy to lose on the simulator: some NumPy helpers (``np.ascontiguousarray``, ``np.atleast_1d``) turn
a 0-d array into a 1-d one, and the result then no longer fits the op's 0-d output. Every IR op whose tensor
operands are all element-like (one tensor each, no index / weight operands) is run on 0-d operands and on shape-(1,)
operands of the same values with its default attributes, on every simulator provider; where the op's shape
inference accepts both, the 0-d run must succeed, return the inferred 0-d shapes and hold the same values bit for
bit as the (1,) run (random ops: the same shapes), or both must raise the same typed error.
"""

from __future__ import annotations

import numpy as np
import pytest

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, KohakuTTError
from kohakutt.ir import ops as irops
from kohakutt.kernels import registry

ELEMENT_NAMES = {"x", "a", "b", "c", "cond", "self", "other", "input", "grad", "y", "out", "value"}
VALUES = {"float32": 0.5, "bfloat16": 0.5, "int32": 3, "bool": True}


def _dtypes(name: str) -> list[str]:
    """The dtypes in VALUES whose 0-d and (1,) operands ``name``'s signature accepts (a refusal is a typed error)."""
    ok = []
    for dtype in VALUES:
        try:
            for shape in ((), (1,)):
                irops.infer(name, [irops.TensorSpec(shape, irops.DType.of(dtype))] * len(irops.get(name).inputs))
        except KohakuTTError:
            continue
        ok.append(dtype)
    return ok


def _candidates() -> list[tuple[str, str]]:
    out = []
    for name, op in sorted(irops.all_ops().items()):
        names = [n.lstrip("*") for n in op.inputs]
        if not names or any(n not in ELEMENT_NAMES for n in names) or any(n.startswith("*") for n in op.inputs):
            continue
        providers = registry.providers(name, "sim")
        if providers and _dtypes(name):
            out.extend((name, provider) for provider in providers)
    return out


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def _run(dev, name, provider, dtype, shape):
    """(the inferred output specs, the outputs as NumPy arrays or the typed error the op raised)."""
    op = irops.get(name)
    xs = [kk.from_numpy(dev, np.full(shape, VALUES[dtype], dtype=np.float32 if dtype == "bfloat16" else
                                     np.dtype(dtype if dtype != "bool" else np.bool_)), dtype)
          for _ in op.inputs]  # fmt: skip
    want = irops.infer(name, [x.spec for x in xs])
    try:
        got = kk.run(name, xs, provider=provider)
        dev.synchronize()
    except CommandError as e:
        return want, e.__cause__ if isinstance(e.__cause__, KohakuTTError) else e
    except KohakuTTError as e:
        return want, e
    return want, [kk.to_numpy(t) for t in got]


@pytest.mark.parametrize(("name", "provider"), _candidates())
def test_zero_dim_operands_give_the_one_element_result(dev, name, provider):
    for dtype in _dtypes(name):
        _, one = _run(dev, name, provider, dtype, (1,))
        want, zero = _run(dev, name, provider, dtype, ())
        if isinstance(one, Exception):  # a typed refusal at run time (TT-NN's sort on int32): the same for 0-d
            assert type(zero) is type(one), f"{name}[{provider}] {dtype}: {one!r} on (1,), {zero!r} on 0-d"
            continue
        assert not isinstance(zero, Exception), f"{name}[{provider}] {dtype} fails on 0-d operands: {zero!r}"
        assert [z.shape for z in zero] == [w.shape for w in want], f"{name}[{provider}] {dtype}: 0-d result shapes"
        if registry.lookup(name, "sim", provider).random:
            continue  # a second draw: other values
        for z, o in zip(zero, one):
            assert np.array_equal(z.reshape(-1), o.reshape(-1)[: z.size], equal_nan=True), (name, provider, dtype)
