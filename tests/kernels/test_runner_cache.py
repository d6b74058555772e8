"""``kernels.run`` works a call out once per signature (output specs, implementation, numerics, estimate) and
keeps it in a bounded cache: what the cache must never change is checked here against uncached runs.

Values compared are exact (int32 arithmetic, copies, fills) or bf16/fp32 products checked bit for bit against the
same op run with the cache emptied; no tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import IntegerOverflowError
from kohakutt.ir import DType, numerics
from kohakutt.ir.numerics import UNSET, Fidelity
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import cost, runner


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def captured(dev, fn):
    """The commands ``fn`` queues (recorded in a trace, not run)."""
    with dev.capture("look") as tr:
        fn()
    cmds = list(tr.commands)
    tr.release()
    return cmds


def test_a_repeated_call_is_planned_once_and_gives_the_same_result(dev):
    a = kk.from_numpy(dev, np.arange(6, dtype=np.int32).reshape(2, 3))
    runner._plans.clear()
    (x,) = kk.run("add", [a, a], {"alpha": 2})
    assert len(runner._plans) == 1
    (y,) = kk.run("add", [a, a], {"alpha": 2})
    assert len(runner._plans) == 1
    want = (np.arange(6) * 3).reshape(2, 3)
    assert kk.to_numpy(x).tolist() == kk.to_numpy(y).tolist() == want.tolist()


def test_numbers_are_keyed_by_type_and_value(dev):
    a = kk.from_numpy(dev, np.array([1, 2], np.int32))
    (i,) = kk.run("add", [a, 1])
    (f,) = kk.run("add", [a, 1.0])
    (b,) = kk.run("add", [a, True])
    assert (i.dtype, f.dtype, b.dtype) == (DType.INT32, DType.FLOAT32, DType.INT32)
    assert kk.to_numpy(f).tolist() == [2.0, 3.0] and kk.to_numpy(b).tolist() == [2, 3]
    for _ in range(2):  # a value inference refuses is refused every time, not cached away
        with pytest.raises(IntegerOverflowError, match="does not fit int32"):
            kk.run("add", [a, 2**40])


def test_attributes_rebind_per_call_so_negative_zero_survives(dev):
    (p,) = kk.run("full", [], {"shape": (2,), "value": 0.0}, device=dev)
    (n,) = kk.run("full", [], {"shape": (2,), "value": -0.0}, device=dev)
    assert np.signbit(kk.to_numpy(n)).all() and not np.signbit(kk.to_numpy(p)).any()


def test_attributes_that_cannot_be_keys_run_uncached(dev):
    a = kk.from_numpy(dev, np.arange(12, dtype=np.int32).reshape(3, 4))
    with pytest.raises(TypeError):
        runner._freeze(np.zeros(2))
    assert runner._signature("sum", [a], {"dims": np.array([1])}, dev, None, UNSET) is None
    assert runner._signature("sum", [a], {"dims": [0]}, dev, None, UNSET) is not None  # a list freezes into a key
    runner._plans.clear()
    for _ in range(2):
        (s,) = kk.run("sum", [a], {"dims": [0]})
    assert kk.to_numpy(s).tolist() == [12, 15, 18, 21] and len(runner._plans) == 1


def test_the_numerics_scope_reaches_each_command(dev):
    rng = np.random.default_rng(0)
    a = kk.from_numpy(dev, rng.standard_normal((32, 32)).astype(np.float32), "bfloat16")
    b = kk.from_numpy(dev, rng.standard_normal((32, 32)).astype(np.float32), "bfloat16")
    runs = []
    for fid in (None, "LoFi", None, "LoFi"):
        if fid is None:
            (cmd,) = captured(dev, lambda: kk.run("matmul", [a, b]))
            (y,) = kk.run("matmul", [a, b])
        else:
            with numerics(fidelity=fid):
                (cmd,) = captured(dev, lambda: kk.run("matmul", [a, b]))
                (y,) = kk.run("matmul", [a, b])
        runs.append((cmd.args["numerics"].fidelity, kk.to_numpy(y)))
    assert [f for f, _ in runs] == [None, Fidelity.LoFi] * 2
    assert np.array_equal(runs[0][1], runs[2][1]) and np.array_equal(runs[1][1], runs[3][1])
    assert not np.array_equal(runs[0][1], runs[1][1])  # LoFi drops product bits: the scope was honoured


def test_each_shape_keeps_its_own_estimate(dev):
    small = kk.from_numpy(dev, np.zeros((32, 32), np.float32))
    big = kk.from_numpy(dev, np.zeros((256, 256), np.float32))
    for _ in range(2):
        (cs,) = captured(dev, lambda: kk.run("copy", [small]))
        (cb,) = captured(dev, lambda: kk.run("copy", [big]))
        assert cs.estimate_ns == pytest.approx(cost.LAUNCH_NS + 2 * 32 * 32 * 4 / 500e9 * 1e9)
        assert cb.estimate_ns == pytest.approx(cost.LAUNCH_NS + 2 * 256 * 256 * 4 / 500e9 * 1e9)


def test_errors_still_name_the_op_after_a_cached_call(dev):
    a = kk.from_numpy(dev, np.zeros((2, 3), np.float32))
    kk.run("copy", [a])
    for _ in range(2):
        with pytest.raises(ShapeError, match=r"copy: out tensor has shape \(3, 2\)"):
            kk.run("copy", [a], out=[kk.from_numpy(dev, np.zeros((3, 2), np.float32))])
    gone = kk.from_numpy(dev, np.zeros((2, 3), np.float32))
    kk.free(gone)
    with pytest.raises(Exception, match="copy operand"):
        kk.run("copy", [gone])


def test_a_new_implementation_or_knob_is_seen_at_once(dev, monkeypatch, knobs):
    a = kk.from_numpy(dev, np.array([1.0, -2.0], np.float32))
    kk.run("neg", [a])
    assert kk.providers("neg", "sim") == ["ttnn"]
    ran = []

    def own(call):
        ran.append(call.op)
        return -call.inputs[0]

    # an own program is chosen where the card has one: register it for the card too (never run here)
    monkeypatch.setitem(kk.IMPLS, ("neg", "sim", "ktt"), kk.Impl("neg", "sim", "ktt", own))
    monkeypatch.setitem(kk.IMPLS, ("neg", "ttnn", "ktt"), kk.Impl("neg", "ttnn", "ktt", own))
    knobs(KTT_CUSTOM_KERNELS="1")
    (y,) = kk.run("neg", [a])
    assert kk.to_numpy(y).tolist() == [-1.0, 2.0] and ran == ["neg"]
    knobs(KTT_CUSTOM_KERNELS="0")
    kk.run("neg", [a])
    dev.synchronize()
    assert ran == ["neg"]


def test_the_cache_is_bounded(dev, monkeypatch):
    monkeypatch.setattr(runner, "PLAN_CACHE_SIZE", 8)
    runner._plans.clear()
    a = kk.from_numpy(dev, np.zeros(4, np.float32))
    for i in range(20):
        kk.run("add", [a, float(i)])
    assert len(runner._plans) == 8
    dev.synchronize()
