from __future__ import annotations

import numpy as np
import pytest

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, KohakuTTUnsupportedOperator
from kohakutt.ir import DType, TensorSpec
from kohakutt.ir.ops import ShapeError


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def test_copy_typecast_round_trip(dev):
    x = np.array([[1.5, -2.25, 3.999], [1e10, -0.0, 7.0]], np.float32)
    t = kk.from_numpy(dev, x)
    (b,) = kk.run("typecast", [t], {"dtype": "bfloat16"})
    (i,) = kk.run("typecast", [t], {"dtype": "int32"})
    got_b = kk.to_numpy(b)
    assert got_b[0, 2] == 4.0 and got_b[1, 0] == np.float32(9999220736.0)  # bf16 round to nearest even
    assert kk.to_numpy(i).tolist() == [[1, -2, 3], [2**31 - 1, 0, 7]]  # truncation, saturation


@pytest.mark.parametrize("dtype", ["bfloat8_b", "bfloat4_b", "bfloat16"])
def test_copy_and_typecast_keep_tile_layout(dev, dtype):
    """copy of a tile tensor (block floats exist only as tiles) gives a tile tensor with the same values; typecast
    from row major into a block float gives tiles."""
    x = np.linspace(-3, 3, 2 * 45, dtype=np.float32).reshape(2, 45)  # not a multiple of 32
    t = kk.from_numpy(dev, x, dtype, "tile")
    (c,) = kk.run("copy", [t])
    assert c.spec == t.spec and c.spec.layout.value == "tile"
    np.testing.assert_array_equal(kk.to_numpy(c), kk.to_numpy(t))
    (b,) = kk.run("typecast", [kk.from_numpy(dev, x)], {"dtype": dtype})
    assert b.spec.layout.value == ("tile" if dtype != "bfloat16" else "row_major")
    np.testing.assert_array_equal(kk.to_numpy(b), kk.to_numpy(t))  # the packer's conversion either way


def test_strided_views_in_and_out(dev):
    base = kk.from_numpy(dev, np.arange(24, dtype=np.float32).reshape(4, 6))
    view = kk.DeviceTensor(base.buffer, TensorSpec((3, 2), DType.FLOAT32), strides=(6, 2), offset=7)
    (c,) = kk.run("copy", [view])
    assert kk.to_numpy(c).tolist() == [[7, 9], [13, 15], [19, 21]]
    target = kk.DeviceTensor(base.buffer, TensorSpec((2, 2), DType.FLOAT32), strides=(1, 6), offset=0)
    kk.run("copy", [kk.from_numpy(dev, np.array([[-1, -2], [-3, -4]], np.float32))], out=[target])
    got = kk.to_numpy(base)
    assert got[0, 0] == -1 and got[1, 0] == -2 and got[0, 1] == -3 and got[1, 1] == -4 and got[0, 2] == 2


def test_out_shape_mismatch_and_cross_device_are_errors(dev):
    a = kk.from_numpy(dev, np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError, match=r"out tensor has shape \(3, 2\)"):
        kk.run("copy", [a], out=[kk.from_numpy(dev, np.zeros((3, 2), np.float32))])
    other = hal.open_device(1)
    try:
        b = kk.from_numpy(other, np.zeros((2, 3), np.float32))
        with pytest.raises(ShapeError, match="expected all tensors on chip 0, but found one on chip 1"):
            kk.run("copy", [a], out=[b])
    finally:
        other.close()


def test_failure_inside_a_kernel_names_the_op_and_keeps_values(dev, monkeypatch):
    a = kk.from_numpy(dev, np.arange(4, dtype=np.float32))
    impl = kk.lookup("copy", "sim")

    def broken(call):
        raise FloatingPointError("tile 3 overflowed")

    monkeypatch.setattr(impl, "fn", broken)
    kk.run("copy", [a])
    with pytest.raises(CommandError, match="'copy' failed: FloatingPointError: tile 3 overflowed"):
        dev.synchronize()
    monkeypatch.undo()
    assert kk.to_numpy(a).tolist() == [0, 1, 2, 3]


def test_unsupported_op_says_so(dev, monkeypatch):
    from kohakutt.ir.ops import OPS, OpDef, same

    monkeypatch.setitem(OPS, "nothing_here", OpDef("nothing_here", "test", ("x",), {}, same()))
    with pytest.raises(KohakuTTUnsupportedOperator, match="nothing_here has no implementation on the sim backend"):
        kk.run("nothing_here", [kk.from_numpy(dev, np.zeros(2, np.float32))])


def test_ops_replay_in_a_trace_over_new_inputs(dev):
    x = kk.from_numpy(dev, np.array([1.1, 2.2], np.float32))
    with dev.capture("cast") as tr:
        (y,) = kk.run("typecast", [x], {"dtype": "int32"})
    tr.replay()
    assert kk.to_numpy(y).tolist() == [1, 2]
    x2 = kk.from_numpy(dev, np.array([-5.5, 9.9], np.float32))
    tr.replay({x.buffer: x2.buffer})
    assert kk.to_numpy(y).tolist() == [-5, 9]
    tr.release()


def test_estimates_reach_the_profile(dev):
    a = kk.from_numpy(dev, np.zeros((256, 256), np.float32))
    with hal.profile() as prof:
        kk.run("copy", [a])
    (row,) = [r for r in prof.summary() if r["op"] == "copy"]
    expected = 2e3 + 2 * 256 * 256 * 4 / 500e9 * 1e9  # launch + read and write at 500 GB/s
    assert row["device_us"] * 1e3 == pytest.approx(expected)


def test_random_stream_is_reproducible(dev):
    kk.manual_seed(dev, 1234)
    s0 = kk.rng_state(dev)
    kk.set_rng_state(dev, (7, 9))
    assert kk.rng_state(dev) == (7, 9)
    kk.set_rng_state(dev, s0)
    assert kk.rng_state(dev) == (1234, 0)


def test_an_implementation_declares_what_it_runs_and_the_runner_falls_back(dev, knobs):
    """TT-NN's pools take 1-d and 2-d windows only: a 3-d max pool runs the host math (the ttnn implementation says
    why not; pools have no own program); asking for TT-NN's by name fails, typed, at the next synchronize."""
    from kohakutt.kernels import registry

    knobs(KTT_CUSTOM_KERNELS="0")
    x = np.random.default_rng(3).standard_normal((2, 4, 4, 4)).astype(np.float32)
    attrs = {"kernel_size": (2, 2, 2), "stride": (2, 2, 2), "padding": (0, 0, 0), "dilation": (1, 1, 1),
             "ceil_mode": False, "return_indices": False}  # fmt: skip
    ttnn_impl = registry.lookup("max_pool", "sim")
    assert ttnn_impl is not None and ttnn_impl.provider == "ttnn"
    spec = kk.from_numpy(dev, x).spec
    assert ttnn_impl.why_not([spec], attrs) == "TT-NN has no 3-d pools"
    assert registry.fallback(ttnn_impl, [spec], attrs).provider == "host"
    got = kk.to_numpy(kk.run("max_pool", [kk.from_numpy(dev, x)], attrs)[0])
    np.testing.assert_array_equal(got, x.reshape(2, 2, 2, 2, 2, 2, 2).max(axis=(2, 4, 6)))
    with pytest.raises(CommandError, match="KohakuTTUnsupportedOperator: max_pool: TT-NN has no 3-d"):
        kk.to_numpy(kk.run("max_pool", [kk.from_numpy(dev, x)], attrs, provider="ttnn")[0])
    attrs2 = {**attrs, "kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1)}
    bf16 = kk.from_numpy(dev, x, "bfloat16").spec
    assert registry.fallback(ttnn_impl, [bf16], attrs2) is ttnn_impl  # 2-d bfloat16: TT-NN's own
    assert registry.fallback(ttnn_impl, [spec], attrs2).provider == "host"  # TT-NN's pools take no float32 data
