"""Collectives as HAL commands on the simulated pair: values, the card's add, device time on both chips, and the
halves meeting under ``KTT_LAUNCH_BLOCKING``."""

from __future__ import annotations

import numpy as np
import pytest

from kohakutt.hal import formats
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import from_numpy, to_numpy
from kohakutt.mesh import Local, Partial, Replicate, Sharded, open_mesh
from kohakutt.mesh import collectives as coll


@pytest.fixture(scope="module")
def mesh():
    m = open_mesh((0, 1))
    yield m
    m.synchronize()
    m.close()  # the chips' references go back: later tests open and close chips themselves


def _local(mesh, parts, placement, dtype="float32"):
    views = tuple(from_numpy(d, p, dtype) for d, p in zip(mesh.chips, parts))
    shape = list(parts[0].shape)
    if isinstance(placement, Sharded):
        shape[placement.dim] = sum(p.shape[placement.dim] for p in parts)
    return Local(TensorSpec(tuple(shape), DType.of(dtype)), placement, views)


def test_all_gather_uneven(mesh):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    temps = []
    out = coll.all_gather(_local(mesh, [a, b], Sharded(0, (3, 2))), mesh, mesh.default_stream, temps)
    assert out.placement == Replicate()
    for v in out.views:
        np.testing.assert_array_equal(to_numpy(v), np.concatenate([a, b]))


def test_all_reduce_rounds_each_chips_bf16_value_then_the_sum(mesh):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    temps = []
    out = coll.all_reduce(_local(mesh, [a, b], Partial(), "bfloat16"), mesh, mesh.default_stream, temps)
    ra, rb = (formats.from_bfloat16(formats.to_bfloat16(x)) for x in (a, b))  # as each chip stored them
    want = formats.from_bfloat16(formats.to_bfloat16(ra + rb))
    for v in out.views:
        np.testing.assert_array_equal(to_numpy(v), want)


def test_reduce_scatter(mesh):
    a = np.arange(10, dtype=np.float32).reshape(5, 2)
    temps = []
    out = coll.reduce_scatter(_local(mesh, [a, 2 * a], Partial()), Sharded(0, (3, 2)), mesh, mesh.default_stream, temps)
    np.testing.assert_array_equal(to_numpy(out.views[0]), 3 * a[:3])
    np.testing.assert_array_equal(to_numpy(out.views[1]), 3 * a[3:])


def test_a_collective_is_charged_to_both_chips_after_their_clocks_align(mesh):
    x = np.ones((256, 256), np.float32)
    loc = _local(mesh, [x[:128], x[128:]], Sharded(0, (128, 128)))
    mesh.synchronize()
    s0, s1 = mesh.default_stream.streams
    s0.device_time_ns += 5000.0  # chip 0 is behind by 5 us of work
    before = max(s0.device_time_ns, s1.device_time_ns)
    temps = []
    coll.all_gather(loc, mesh, mesh.default_stream, temps)
    mesh.synchronize()
    link, dram = 128 * 256 * 4 / mesh.link.bytes_per_s, 256 * 256 * 4 / mesh.card.dram_bytes_per_s
    est = (mesh.link.latency_s + max(link, dram)) * 1e9
    assert s0.device_time_ns == pytest.approx(before + est) and s1.device_time_ns == pytest.approx(before + est)


def test_the_halves_meet_under_launch_blocking(mesh):
    for d in mesh.chips:
        d.launch_blocking = True
    try:
        x = np.ones((4, 4), np.float32)
        temps = []
        out = coll.all_reduce(_local(mesh, [x, x], Partial()), mesh, mesh.default_stream, temps)
        np.testing.assert_array_equal(to_numpy(out.views[1]), 2 * x)
    finally:
        for d in mesh.chips:
            d.launch_blocking = False


def test_a_half_that_fails_breaks_the_meeting_for_both(mesh):
    x = np.ones((2, 2), np.float32)
    loc = _local(mesh, [x, x], Partial())
    outs = [coll.new_local(d, loc.spec, s) for d, s in zip(mesh.chips, mesh.default_stream.streams)]

    def combine(rank, values):
        if rank == 0:
            raise ValueError("boom")
        return [values[0][0]]

    coll._queue("test", mesh, mesh.default_stream, loc.views, outs, combine, 0.0)
    errors = []
    for s in mesh.default_stream.streams:
        try:
            s.synchronize()
        except Exception as e:
            errors.append(str(e))
    assert len(errors) == 2 and "boom" in errors[0] and "did not arrive" in errors[1]
