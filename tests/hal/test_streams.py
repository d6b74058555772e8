from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kohakutt import hal
from kohakutt.errors import CommandError, TraceError
from kohakutt.hal import Command


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def test_enqueue_returns_before_the_work_runs(dev):
    gate = threading.Event()
    ran = []
    dev.enqueue(Command("blocker", gate.wait))
    dev.enqueue(Command("mark", lambda: ran.append(1)))
    assert ran == [] and not dev.default_stream.query()
    gate.set()
    dev.synchronize()
    assert ran == [1] and dev.default_stream.query()


def test_commands_run_in_order(dev):
    out = []
    for i in range(200):
        dev.enqueue(Command(f"c{i}", lambda i=i: out.append(i)))
    dev.synchronize()
    assert out == list(range(200))


def test_error_surfaces_at_next_sync_naming_the_command_and_the_stream_keeps_going(dev):
    buf = dev.upload(np.arange(8, dtype=np.int32), layout="row_major")

    def boom():
        raise ValueError("bad tile")

    dev.enqueue(Command("my_kernel", boom))
    after = []
    dev.enqueue(Command("after", lambda: after.append(True)))
    with pytest.raises(CommandError, match="'my_kernel' failed: ValueError: bad tile") as e:
        dev.synchronize()
    assert e.value.command == "my_kernel" and isinstance(e.value.cause, ValueError)
    assert after == [True]
    dev.synchronize()  # reported once
    assert np.array_equal(dev.download(buf), np.arange(8))  # values kept


def test_read_is_a_synchronizing_call_that_reports_errors(dev):
    buf = dev.allocate(16)
    dev.enqueue(Command("broken", lambda: 1 / 0))
    with pytest.raises(CommandError, match="broken"):
        dev.read(buf)
    assert dev.read(buf).size == 16


def test_free_is_ordered_after_queued_work(dev):
    buf = dev.upload(np.full(4, 7, np.int32), layout="row_major")
    gate = threading.Event()
    seen = []
    dev.enqueue(Command("wait", gate.wait))
    dev.enqueue(Command("use", lambda b: seen.append(b.handle[:16].view(np.int32).copy()), (buf,)))
    dev.free(buf)
    assert dev.memory_stats()["num_frees"] < dev.memory_stats()["num_allocs"]
    gate.set()
    dev.synchronize()
    assert np.array_equal(seen[0], [7, 7, 7, 7])


def test_events_order_two_streams_and_time_them(dev):
    s1, s2 = dev.new_stream("s1"), dev.new_stream("s2")
    gate = threading.Event()
    order = []
    s1.enqueue(Command("slow", lambda: (gate.wait(), order.append("s1")), estimate_ns=5e6))
    ev = s1.record_event()
    assert not ev.query()
    ev.wait(s2)
    s2.enqueue(Command("after", lambda: order.append("s2")))
    time.sleep(0.05)
    assert order == []
    gate.set()
    s2.synchronize()
    assert order == ["s1", "s2"] and ev.query()
    start = s1.record_event()
    s1.enqueue(Command("timed", lambda: None, estimate_ns=2.5e6))
    end = s1.record_event()
    assert end.elapsed_ms(start) == pytest.approx(-2.5) and start.elapsed_ms(end) == pytest.approx(2.5)


def test_launch_blocking_runs_at_enqueue(knobs):
    knobs(KTT_LAUNCH_BLOCKING=1)
    d = hal.open_device(0)
    try:
        with pytest.raises(CommandError, match="bad"):
            d.enqueue(Command("bad", lambda: 1 / 0))
    finally:
        d.close()


def _add_one(src, dst):
    dst.handle[:] = src.handle + 1


def test_trace_records_then_replays_with_new_buffers(dev):
    a = dev.upload(np.zeros(64, np.uint8), layout="row_major")
    with dev.capture("plus2") as tr:
        tmp = dev.allocate(64)
        out = dev.allocate(64)
        dev.enqueue(Command("add1", _add_one, (a, tmp)))
        dev.enqueue(Command("add1", _add_one, (tmp, out)))
    assert dev.read(out).sum() == 0  # captured, not run
    assert tr.owned == [tmp, out] and tr.inputs == [a]
    tr.replay()
    assert np.all(dev.read(out) == 2)
    b = dev.upload(np.full(64, 10, np.uint8), layout="row_major")
    tr.replay({a: b})
    assert np.all(dev.read(out) == 12)
    tr.release()
    assert not tmp.is_live and not out.is_live
    with pytest.raises(TraceError, match="released"):
        tr.replay()


def _add(src, dst, *, k=1):
    dst.handle[:] = src.handle + k


def test_a_replay_can_replace_recorded_arguments(dev):
    a = dev.upload(np.zeros(64, np.uint8), layout="row_major")
    with dev.capture() as tr:
        out = dev.allocate(64)
        dev.enqueue(Command("addk", _add, (a, out), {"k": 1}))
    tr.replay(args={0: {"k": 5}}, blocking=True)
    assert np.all(dev.read(out) == 5)
    tr.replay(blocking=True)  # the recorded argument again
    assert np.all(dev.read(out) == 1)
    tr.release()


def test_the_traces_own_buffers_stay_with_it_until_release(dev):
    """Freed after the capture while the trace lives: kept (a replay writes them); ``keep`` hands buffers over."""
    a = dev.upload(np.zeros(64, np.uint8), layout="row_major")
    with dev.capture() as tr:
        tmp, out = dev.allocate(64), dev.allocate(64)
        dev.enqueue(Command("add1", _add_one, (a, tmp)))
        dev.enqueue(Command("add1", _add_one, (tmp, out)))
    dev.free(tmp)
    assert tmp.is_live and tr.deferred_frees == [tmp]
    tr.replay(blocking=True)
    tr.release(keep=[out, tmp])  # tmp was freed already: freed now; out stays, as an ordinary buffer
    assert not tmp.is_live and out.is_live and out.trace is None
    assert np.all(dev.read(out) == 2)
    dev.free(out)
    assert not out.is_live


def test_trace_misuse_is_rejected(dev):
    a = dev.allocate(64)
    other = dev.allocate(128)
    with dev.capture() as tr:
        out = dev.allocate(64)
        dev.enqueue(Command("add1", _add_one, (a, out)))
        with pytest.raises(TraceError, match="host read"):
            dev.read(a)
        with pytest.raises(TraceError, match="host write"):
            dev.write(a, b"x")
    with pytest.raises(TraceError, match="size, memory kind, layout, format"):
        tr.replay({a: other})
    with pytest.raises(TraceError, match="allocated by trace"):
        tr.replay({out: dev.allocate(64)})
    with pytest.raises(TraceError, match="not used by trace"):
        tr.replay({other: dev.allocate(128)})
    tr.replay(blocking=True)  # still fine after the bad attempts
    with pytest.raises(TraceError, match="already capturing"), dev.capture(), dev.capture():
        pass
    tr.release()


def test_profile_reports_device_estimates(dev):
    with hal.profile() as prof:
        for _ in range(3):
            dev.enqueue(Command("matmul", lambda: None, estimate_ns=1000.0))
        dev.enqueue(Command("add", lambda: None, estimate_ns=10.0))
    rows = {r["op"]: r for r in prof.summary()}
    assert rows["matmul"]["count"] == 3 and rows["matmul"]["device_us"] == pytest.approx(3.0)
    assert prof.device_us == pytest.approx(3.01)
    assert "matmul" in prof.table()
