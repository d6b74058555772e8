from __future__ import annotations

import threading

import numpy as np
import pytest

from kohakutt import hal
from kohakutt.errors import BufferUseError, DeviceError, FormatError, OutOfMemoryError
from kohakutt.hal.allocator import AddressSpace


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def test_open_is_shared_and_reference_counted():
    a = hal.open_device(0)
    b = hal.open_device(0)
    assert a is b and a.refcount == 2
    b.close()
    assert not a.closed and a.refcount == 1
    a.close()
    assert a.closed
    with pytest.raises(DeviceError, match="closed"):
        a.allocate(16)
    c = hal.open_device(0)
    assert c is not a and not c.closed
    c.close()


def test_open_from_many_threads_gives_one_device():
    seen, errors = [], []

    def worker():
        try:
            seen.append(hal.open_device(0))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len({id(d) for d in seen}) == 1 and seen[0].refcount == 16
    for d in seen:
        d.close()
    assert seen[0].closed


def test_unknown_chip_says_how_many_there_are():
    with pytest.raises(DeviceError, match="KTT_SIM_DEVICES"):
        hal.open_device(7)


def test_write_read_round_trip_and_offsets(dev):
    buf = dev.allocate(5000)
    data = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8)
    dev.write(buf, data)
    assert np.array_equal(dev.read(buf), data)
    dev.write(buf, b"\x01\x02\x03", offset=4997)
    assert list(dev.read(buf, 4995, 5)) == [data[4995], data[4996], 1, 2, 3]
    with pytest.raises(BufferUseError, match="overflows"):
        dev.write(buf, np.zeros(10, np.uint8), offset=4995)
    assert np.array_equal(dev.read(buf, 0, 4995), data[:4995])  # nothing lost
    dev.free(buf)


def test_write_copies_the_host_data_at_the_call(dev):
    buf = dev.allocate(64)
    data = np.arange(64, dtype=np.uint8)
    dev.write(buf, data)
    data[:] = 0  # the caller may reuse its array at once
    assert np.array_equal(dev.read(buf), np.arange(64, dtype=np.uint8))


def test_allocator_statistics_and_page_interleaving(dev):
    before = dev.memory_stats()
    buf = dev.allocate(shape=(64, 96), fmt="bfloat16", layout="tile")
    assert buf.nbytes == 6 * 2048 and buf.page_size == 2048 and buf.num_pages == 6
    banks = [buf.page_location(i)[0] for i in range(6)]
    assert banks == [0, 1, 2, 3, 4, 5]
    assert buf.page_location(0)[1] == buf.page_location(5)[1] == buf.address
    s = dev.memory_stats()
    assert s["dram.allocated_bytes"] - before["dram.allocated_bytes"] == 6 * 2048
    assert s["dram.reserved_bytes"] - before["dram.reserved_bytes"] == 8 * 2048  # one page row in every bank
    assert s["num_allocs"] == before["num_allocs"] + 1
    dev.free(buf)
    dev.synchronize()
    s2 = dev.memory_stats()
    assert s2["allocated_bytes"] == before["allocated_bytes"]
    assert s2["peak_allocated_bytes"] >= s["allocated_bytes"]
    dev.allocator.reset_peak()
    assert dev.memory_stats()["peak_allocated_bytes"] == s2["allocated_bytes"]


def test_address_space_best_fit_and_coalescing():
    space = AddressSpace(1024, 16)
    a, b, c = space.alloc(100), space.alloc(200), space.alloc(300)
    assert (a, b, c) == (0, 112, 320)
    space.free(b)
    assert space.alloc(50) == 112  # the hole is reused
    space.free(a)
    space.free(112)
    space.free(c)
    assert space.free_bytes == 1024 and space.largest_free == 1024
    assert space.alloc(1024) == 0 and space.alloc(1) is None


def test_l1_budget_knob_limits_l1_and_oom_keeps_the_device_usable(knobs):
    knobs(KTT_L1_BUDGET="64K")
    d = hal.open_device(0)
    try:
        keep = d.upload(np.arange(32 * 32, dtype=np.float32).reshape(32, 32), "float32", kind="l1")
        per_core = 64 * 1024
        with pytest.raises(OutOfMemoryError, match=r"out of L1 memory: asked for .* bytes") as e:
            d.allocate(per_core * d.card.cores * 2, kind="l1")
        assert "allocated" in str(e.value) and "largest free" in str(e.value)
        assert d.memory_stats()["l1.num_ooms"] == 1
        ok = d.allocate(per_core * d.card.cores // 2, kind="l1")  # still usable
        assert np.array_equal(d.download(keep), np.arange(32 * 32, dtype=np.float32).reshape(32, 32))
        d.free(ok)
        d.free(keep)
    finally:
        d.close()


def test_dram_capacity_is_the_cards():
    d = hal.open_device(0)
    try:
        assert d.allocator.capacity(hal.MemoryKind.DRAM) == 8 * 4_278_190_080
        with pytest.raises(OutOfMemoryError, match="DRAM"):
            d.allocate(33 * 2**30)
    finally:
        d.close()


def test_bad_arguments_get_clear_errors(dev):
    with pytest.raises(FormatError, match="unknown format"):
        dev.allocate(shape=(4, 4), fmt="float16")
    with pytest.raises(FormatError, match="negative"):
        dev.allocate(shape=(-1, 4), fmt="float32")
    with pytest.raises(FormatError, match="nbytes >= 0"):
        dev.allocate(-5)
    with pytest.raises(FormatError, match="only in tile layout"):
        dev.allocate(shape=(32, 32), fmt="bfloat8_b", layout="row_major")
    with pytest.raises(FormatError, match="unknown memory kind"):
        dev.allocate(16, kind="sram")


def test_use_after_free_is_an_error(dev):
    buf = dev.allocate(64)
    dev.free(buf)
    for use in (lambda: dev.read(buf), lambda: dev.write(buf, b"x"), lambda: dev.free(buf)):
        with pytest.raises(BufferUseError, match="freed"):
            use()


def test_row_major_upload_download_per_format(dev):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    for fmt in ("float32", "int32", "uint32"):
        arr = x if fmt == "float32" else np.abs(x * 100).astype(np.dtype(fmt))
        buf = dev.upload(arr, fmt, layout="row_major")
        assert np.array_equal(dev.download(buf), arr)
        dev.free(buf)


def test_device_copy(dev):
    a = dev.upload(np.arange(256, dtype=np.int32), layout="row_major")
    b = dev.allocate(shape=(256,), fmt="int32")
    dev.copy(a, b, src_offset=16, dst_offset=0, nbytes=64)
    assert np.array_equal(dev.read(b, 0, 64).view(np.int32), np.arange(4, 20))


def test_buffers_have_distinct_addresses_and_interior_lookups(dev):
    a, b = dev.allocate(100), dev.allocate(5000)
    assert a.data_ptr and b.data_ptr > a.data_ptr + a.nbytes
    assert dev.buffer_at(a.data_ptr) == (a, 0)
    assert dev.buffer_at(b.data_ptr + 4999) == (b, 4999)
    with pytest.raises(BufferUseError, match="not inside a live buffer"):
        dev.buffer_at(a.data_ptr + 100)
    assert dev.allocate(0).data_ptr == 0
    dev.free(a)
    dev.synchronize()
    with pytest.raises(BufferUseError):
        dev.buffer_at(a.data_ptr)
