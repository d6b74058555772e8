"""The torch glue's typed entry points (ktt_torch_hal): each request reaches the HAL with its own types, and an error
raised in Python comes back through C++ as torch's error, with the message, leaving the device usable. Also what the
glue does with devices: streams die with their chip, storages resize on their own device."""

from __future__ import annotations

import pytest
import torch

from kohakutt.frontends.torch import native, runtime

PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, which torch.Stream takes as a number


def test_every_entry_point_has_a_handler():
    assert set(runtime.HANDLERS) == set(native.hal_entry_points())


def test_an_error_in_an_entry_point_reaches_python_with_its_message():
    bogus = torch.Stream(stream_id=12345, device_index=0, device_type=PRIVATEUSE1)
    with pytest.raises(RuntimeError, match=r"DeviceError: tt:0 has no stream 12345; make streams with torch.tt.Stream"):
        bogus.synchronize()
    with pytest.raises(RuntimeError, match="has no stream 12345"):
        bogus.query()
    x = torch.arange(4.0, device="tt")  # the device is still usable
    assert torch.equal((x + 1).cpu(), torch.arange(4.0) + 1)


def test_memory_statistics_through_the_glue_are_the_hals():
    keep = torch.ones(1000, device="tt")
    torch.tt.synchronize()
    hal = runtime.device(0).memory_stats()
    glue = torch.accelerator.memory_stats()  # the glue's allocator: one memory_stats request fills all six figures
    assert glue["allocated_bytes.all.current"] == hal["allocated_bytes"] >= keep.numel() * 4
    assert glue["allocated_bytes.all.peak"] == hal["peak_allocated_bytes"]
    assert glue["reserved_bytes.all.current"] == hal["reserved_bytes"]
    assert glue["reserved_bytes.all.peak"] == hal["peak_reserved_bytes"]
    free, total = torch.accelerator.get_memory_info()
    assert (free, total) == (hal["dram.free_bytes"], hal["dram.capacity_bytes"])


def test_a_default_generator_takes_the_full_64_bit_seed_range():
    for seed in (0, 2**63 - 1, 2**63, 2**64 - 1):
        torch.tt.manual_seed(seed)
        g = torch.tt.default_generators[0]
        assert torch.tt.initial_seed() == seed and g.initial_seed() == seed
        g.set_offset(2**63 + 3)
        assert g.get_offset() == 2**63 + 3
        state = g.get_state()
        assert int.from_bytes(bytes(state[:8].tolist()), "little") == seed
        assert int.from_bytes(bytes(state[8:].tolist()), "little") == 2**63 + 3
    torch.tt.manual_seed(0)


def test_a_stream_dies_with_its_chip_and_the_chip_reopens():
    """The torch frontend's plugin hears the chip close (ktt_device_closing) and forgets its streams."""
    s = torch.tt.Stream(device="tt:1")
    with torch.tt.stream(s):
        x = torch.ones(3, device="tt:1") * 2
    s.synchronize()
    runtime.device(1).close()
    with pytest.raises(RuntimeError, match=r"tt:1 has no stream \d+; make streams with torch.tt.Stream"):
        s.synchronize()
    del x
    y = torch.arange(3.0, device="tt:1")  # reopens the chip, with its default stream
    assert torch.equal((y + 1).cpu(), torch.arange(3.0) + 1)
    with torch.tt.stream(torch.tt.Stream(device="tt:1")):
        z = y * 3
    torch.tt.synchronize(1)
    assert torch.equal(z.cpu(), torch.arange(3.0) * 3)


def test_a_resized_storage_stays_on_its_device():
    """Growing a tt:1 storage (arange, resize_, out= arguments) allocates on tt:1 whatever the current device."""
    assert torch.tt.current_device() == 0
    assert torch.equal(torch.arange(5.0, device="tt:1").cpu(), torch.arange(5.0))
    t = torch.ones(2, device="tt:1")
    t.resize_(6)
    t[2:] = 3.0
    assert t.device == torch.device("tt", 1) and torch.equal(t[2:].cpu(), torch.full((4,), 3.0))
    assert torch.tt.current_device() == 0


def test_a_stream_context_on_another_device_restores_the_current_device():
    s = torch.tt.Stream(device="tt:1")
    with torch.tt.stream(s):
        assert torch.tt.current_device() == 1 and torch.tt.current_stream(1) == s
        x = torch.ones(2, device="tt:1") + 1
    assert torch.tt.current_device() == 0 and torch.tt.current_stream(1) != s
    s.synchronize()
    assert torch.equal(x.cpu(), torch.full((2,), 2.0))
