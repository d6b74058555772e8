"""The fast path of queueing an op on tt: outputs made without the allocator callback, storages' memory reused through
the HAL's caching allocator, per-signature caches. Nothing here may change what an op computes or what the memory
statistics say.

Checks are exact: int32 / float32 additions of small integers are exact on the card and on the CPU, copies move
bytes, statistics are byte counts.
"""

from __future__ import annotations

import gc
import threading

import pytest
import torch

from kohakutt.frontends.torch import runtime, tensors
from kohakutt.hal import Command

DEV = torch.device("tt", 0)


@pytest.fixture
def side():
    """A new tt:0 stream held behind a closed gate: ``(stream, gate)``; the gate opens at teardown in any case."""
    s = torch.tt.Stream()
    g = threading.Event()
    runtime.stream_by_id(0, s.stream_id).enqueue(Command("gate", g.wait))
    yield s, g
    g.set()
    torch.tt.synchronize()


def settle() -> None:
    gc.collect()
    torch.tt.synchronize()


def test_outputs_reusing_freed_storages_hold_their_own_values(gate):
    a = torch.arange(1024, dtype=torch.int32).reshape(32, 32).to(DEV)
    results = []
    for i in range(50):  # each temporary dies at once: its block comes back for the next op, in stream order
        t = a + i
        results.append((t * 2).sum())
    gate.set()
    assert [int(r.cpu()) for r in results] == [2 * (int(a.cpu().sum()) + 1024 * i) for i in range(50)]


def test_new_outputs_keep_sizes_strides_dtype_and_device():
    x = torch.arange(24.0).reshape(2, 3, 4)
    p = x.permute(2, 0, 1)
    for dev in (DEV, torch.device("tt", 1)):
        y = p.to(dev) + 1.0
        want = p + 1.0
        assert y.device == dev and y.shape == want.shape and y.stride() == want.stride() and y.dtype == want.dtype
        assert torch.equal(y.cpu(), want)
        assert runtime.buffer_of(y.untyped_storage().data_ptr())[0].device.chip_id == dev.index
    e = torch.empty(0, 3, device=DEV) + 1  # a zero-byte output
    assert e.shape == (0, 3) and e.untyped_storage().nbytes() == 0


def test_memory_allocated_counts_live_bytes_and_reserved_keeps_the_cache():
    settle()
    torch.tt.empty_cache()
    a0, r0 = torch.tt.memory_allocated(), torch.tt.memory_reserved()
    x = torch.empty(1000, dtype=torch.uint8, device=DEV)
    y = x + 1  # an op's output: made without the allocator callback, counted all the same
    assert torch.tt.memory_allocated() == a0 + 2000
    r1 = torch.tt.memory_reserved()
    assert r1 > r0
    del x, y
    gc.collect()
    assert torch.tt.memory_allocated() == a0  # freed at once into the cache: no longer allocated...
    assert torch.tt.memory_reserved() == r1  # ...still reserved
    assert torch.tt.memory_stats()["reserved_bytes.all.current"] == r1
    z = torch.empty(1000, dtype=torch.uint8, device=DEV)  # same size: a cached block, nothing new reserved
    assert torch.tt.memory_reserved() == r1 and torch.tt.memory_allocated() == a0 + 1000
    del z
    gc.collect()
    torch.tt.empty_cache()
    assert torch.tt.memory_reserved() == r0 and torch.tt.memory_allocated() == a0


def test_a_storage_made_on_a_side_stream_is_reused_there_or_once_that_stream_is_done(side):
    s, g = side
    with torch.tt.stream(s):
        x = torch.ones(777, device=DEV) * 3
        addr = runtime.buffer_of(x.untyped_storage().data_ptr())[0].address
        del x
        gc.collect()
    y = torch.empty(777, device=DEV)  # the default stream may not overtake the side stream's work on x
    assert runtime.buffer_of(y.untyped_storage().data_ptr())[0].address != addr
    g.set()
    s.synchronize()
    z = torch.empty(777, device=DEV)
    assert runtime.buffer_of(z.untyped_storage().data_ptr())[0].address == addr


def test_out_of_memory_from_an_op_is_torchs_and_the_device_stays_usable():
    with pytest.raises(torch.OutOfMemoryError, match="out of DRAM memory"):
        tensors.new((1 << 38,), None, torch.float32, 0)
    assert torch.equal((torch.ones(3, device=DEV) + 1).cpu(), torch.full((3,), 2.0))


def test_tt_view_matches_to_device_tensor_for_views():
    base = torch.arange(60.0).reshape(6, 10).to(DEV)
    for t in (base, base[1:4, 2:9], base.t(), base[:, 3]):
        fast, slow = tensors.tt_view(t), tensors.to_device_tensor(t)
        assert fast is not None and fast.buffer is slow.buffer and fast.spec == slow.spec
        assert tuple(fast.strides) == tuple(slow.strides) and fast.offset == slow.offset
    assert tensors.tt_view(torch.empty(0, device=DEV)) is None  # no buffer behind a zero-byte storage


def test_record_stream_holds_a_storage_back_until_that_stream_has_run(side):
    s, g = side
    x = torch.arange(555.0).to(DEV)
    with torch.tt.stream(s):
        s.wait_stream(torch.tt.default_stream())
        y = x * 2  # s reads x, behind the gate
    x.record_stream(s)
    addr = runtime.buffer_of(x.untyped_storage().data_ptr())[0].address
    del x
    gc.collect()
    z = torch.full((555,), 7.0, device=DEV)  # same size on the default stream: not x's block while s may read it
    assert runtime.buffer_of(z.untyped_storage().data_ptr())[0].address != addr
    g.set()
    s.synchronize()
    assert torch.equal(y.cpu(), torch.arange(555.0) * 2)
    w = torch.empty(555, device=DEV)
    assert runtime.buffer_of(w.untyped_storage().data_ptr())[0].address == addr
    torch.empty(0, device=DEV).record_stream(s)  # no memory: nothing to hold back
