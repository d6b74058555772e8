"""The caching allocator (``Device.allocate(cached=True)``, ``kohakutt.hal.cache``): freed blocks are reused by
allocations of the same size, in stream order, and the statistics keep allocated and reserved bytes exact.

Values are raw bytes written and read back exactly; no tolerances.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kohakutt import hal
from kohakutt.hal import Command
from kohakutt.hal.cache import BlockCache

SIZE = 12_345  # an odd size no other test allocates


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


@pytest.fixture
def gate(dev):
    """Hold a stream behind a gate: ``g = gate(stream)``, ``g.set()`` lets it run (set at teardown too)."""
    gates = []

    def hold(stream):
        g = threading.Event()
        stream.enqueue(Command("gate", g.wait))
        gates.append(g)
        return g

    yield hold
    for g in gates:
        g.set()


def data(seed: int, n: int = SIZE) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_a_freed_block_is_reused_at_once_on_its_stream_and_stream_order_keeps_the_values(dev, gate):
    g = gate(dev.default_stream)
    a = dev.allocate(SIZE, cached=True)
    dev.write(a, data(1))
    seen = []
    dev.enqueue(Command("read a", lambda buf: seen.append(dev.backend.read(buf, 0, SIZE)), (a,)))
    before = dev.memory_stats()
    dev.free(a)
    freed = dev.memory_stats()
    assert not a.is_live
    assert freed["dram.allocated_bytes"] == before["dram.allocated_bytes"] - SIZE
    assert freed["dram.reserved_bytes"] == before["dram.reserved_bytes"]  # parked, still reserved
    assert freed["dram.cached_bytes"] == before["dram.cached_bytes"] + a._alloc.footprint
    assert freed["num_frees"] == before["num_frees"] + 1
    b = dev.allocate(SIZE, cached=True)  # the stream has not run a single command yet
    assert b.address == a.address and b.id != a.id and b.data_ptr != a.data_ptr and b.is_live
    again = dev.memory_stats()
    assert again["dram.allocated_bytes"] == before["dram.allocated_bytes"]
    assert again["dram.reserved_bytes"] == before["dram.reserved_bytes"] and again["dram.cached_bytes"] == 0
    assert again["num_allocs"] == freed["num_allocs"] + 1
    dev.write(b, data(2))
    g.set()
    assert np.array_equal(dev.read(b), data(2))
    assert np.array_equal(seen[0], data(1))  # the read queued before the free saw a's bytes, not b's
    dev.free(b)


def test_another_stream_takes_a_block_only_after_the_free_has_run(dev, gate):
    s2 = dev.new_stream()
    g = gate(dev.default_stream)
    a = dev.allocate(SIZE, cached=True)
    dev.free(a)
    b = dev.allocate(SIZE, cached=True, stream=s2)  # work on s2 could overtake the default stream's readers of a
    assert b.address != a.address
    g.set()
    dev.synchronize()
    c = dev.allocate(SIZE, cached=True, stream=s2)
    assert c.address == a.address
    dev.free(b, s2)
    dev.free(c, s2)


def test_streams_named_in_used_on_hold_the_block_until_they_pass_the_free(dev, gate):
    s2 = dev.new_stream()
    g = gate(s2)
    a = dev.allocate(SIZE, cached=True)
    dev.free(a, dev.default_stream, used_on=(s2,))
    b = dev.allocate(SIZE, cached=True)
    assert b.address != a.address  # s2 may still read a
    g.set()
    s2.synchronize()
    c = dev.allocate(SIZE, cached=True)
    assert c.address == a.address
    dev.free(b)
    dev.free(c)


def test_empty_cache_gives_blocks_back_after_the_work_that_uses_them(dev, gate):
    before = dev.memory_stats()
    g = gate(dev.default_stream)
    bufs = [dev.allocate(SIZE + i, cached=True) for i in range(3)]
    for b in bufs:
        dev.free(b)
    assert dev.memory_stats()["dram.cached_bytes"] > 0
    done = threading.Event()
    t = threading.Thread(target=lambda: (dev.empty_cache(), done.set()))
    t.start()
    time.sleep(0.05)
    assert not done.is_set()  # waits for the stream to pass the frees
    g.set()
    t.join(10)
    after = dev.memory_stats()
    assert done.is_set() and after["dram.cached_bytes"] == 0
    assert after["dram.reserved_bytes"] == before["dram.reserved_bytes"]
    assert after["dram.allocated_bytes"] == before["dram.allocated_bytes"]


def test_uncached_buffers_go_straight_back_and_are_never_reused(dev):
    a = dev.allocate(SIZE)
    dev.free(a)
    dev.synchronize()
    assert dev.memory_stats()["dram.cached_bytes"] == 0
    b = dev.allocate(SIZE, cached=True)
    c = dev.allocate(SIZE, cached=True)
    assert b.cached and not a.cached
    dev.free(b)
    dev.free(c)


def test_blocks_of_other_sizes_or_layouts_are_not_taken(dev):
    a = dev.allocate(shape=(64, 64), fmt="bfloat16", layout="tile", cached=True)
    dev.free(a)
    assert dev.allocate(shape=(64, 64), fmt="float32", layout="tile", cached=True).address != a.address
    assert dev.allocate(SIZE, cached=True).address != a.address
    b = dev.allocate(shape=(64, 64), fmt="bfloat16", layout="tile", cached=True)
    assert b.address == a.address and b.shape == (64, 64) and b.layout is hal.Layout.TILE


def test_big_blocks_are_not_cached(dev, monkeypatch):
    monkeypatch.setattr(dev, "_cache", BlockCache(block_limit=4096, limit=1 << 20))
    big = dev.allocate(SIZE, cached=True)
    dev.free(big)
    dev.synchronize()
    assert len(dev._cache) == 0 and dev.memory_stats()["dram.cached_bytes"] == 0


def test_the_cache_keeps_under_its_limit_by_releasing_the_oldest_blocks(dev, monkeypatch, gate):
    monkeypatch.setattr(dev, "_cache", BlockCache(limit=3 * 16384))
    before = dev.memory_stats()
    g = gate(dev.default_stream)
    bufs = [dev.allocate(1000 + i, cached=True) for i in range(5)]  # 16 KiB footprint each (8 banks x 2 KiB)
    for b in bufs:
        dev.free(b)
    assert len(dev._cache) == 3 and dev._cache.nbytes == 3 * 16384
    g.set()
    dev.synchronize()  # the evicted blocks' releases were queued behind the gate
    st = dev.memory_stats()
    assert st["dram.cached_bytes"] == 3 * 16384
    assert st["dram.reserved_bytes"] == before["dram.reserved_bytes"] + 3 * 16384
    dev.allocate(1004, cached=True)  # still cached: nothing new reserved
    assert dev.memory_stats()["dram.reserved_bytes"] == st["dram.reserved_bytes"]
    dev.allocate(1000, cached=True)  # the oldest went back: a new range
    assert dev.memory_stats()["dram.reserved_bytes"] == st["dram.reserved_bytes"] + 16384


def test_running_out_of_memory_empties_the_cache_first(knobs):
    knobs(KTT_L1_BUDGET="64K")
    d = hal.open_device(0)
    try:
        per_core = 64 * 1024
        half = per_core * d.card.cores // 2
        a = d.allocate(half, kind="l1", cached=True)
        b = d.allocate(half, kind="l1", cached=True)
        d.free(a)
        d.free(b)
        assert d.memory_stats()["l1.cached_bytes"] == 2 * a._alloc.footprint
        whole = d.allocate(per_core * d.card.cores, kind="l1")  # fits only once the cached halves go back
        st = d.memory_stats()
        assert st["l1.num_ooms"] == 0 and st["l1.cached_bytes"] == 0
        d.free(whole)
    finally:
        d.close()


def test_a_capturing_stream_gets_fresh_memory_and_the_trace_owns_it(dev):
    a = dev.allocate(SIZE, cached=True)
    dev.free(a)
    with dev.capture("t") as trace:
        b = dev.allocate(SIZE, cached=True)
    assert b.address != a.address and b in trace.owned
    trace.release()
    dev.synchronize()


def test_closing_the_device_releases_cached_blocks():
    d = hal.open_device(0)
    a = d.allocate(SIZE, cached=True)
    d.free(a)
    alloc = d.allocator
    d.close()
    st = alloc.stats()
    assert st["dram.cached_bytes"] == 0 and st["dram.reserved_bytes"] == 0 and st["dram.allocated_bytes"] == 0
