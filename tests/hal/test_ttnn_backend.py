"""The ttnn backend's own logic, run here without TT-NN: a stand-in ``ttnn`` module keeps each tensor's bytes in host
memory and checks every call against the contract (each keyword the backend passes must be in ``TTNN_SIGNATURES``,
which ``test_ttnn_contract.py`` checks against the real package)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from kohakutt import config, hal
from kohakutt.errors import DeviceError
from kohakutt.hal import formats
from kohakutt.hal.backends import ttnn_backend as tb
from kohakutt.hal.layout import Format, nbytes


class FakeTTNN(types.ModuleType):
    """Just enough of ttnn 0.81.1 for the backend: tensors are byte arrays, the card is one dict of calls."""

    def __init__(self) -> None:
        super().__init__("ttnn")
        self.calls: list[tuple[str, dict]] = []
        for f in Format:
            setattr(self, f.value, f.value)
        self.TILE_LAYOUT, self.ROW_MAJOR_LAYOUT = "tile", "row_major"
        self.BufferType = types.SimpleNamespace(DRAM="dram", L1="l1")
        self.Shape = tuple
        self.MeshCoordinate = lambda coord: tuple(coord)
        self.GetNumAvailableDevices = lambda: 1
        self.SetDefaultDevice = lambda device: None
        self.get_arch_name = lambda: "blackhole"
        self.next_address = 0x1000
        for name in ("open_device", "close_device", "synchronize_device", "TensorSpec", "allocate_tensor_on_device",
                     "allocate_tensor_on_host", "copy_host_to_device_tensor", "deallocate", "copy"):  # fmt: skip
            setattr(self, name, self._checked(name, getattr(self, "_" + name)))

    def _checked(self, name, fn):
        def call(*args, **kwargs):
            assert not args, f"ttnn.{name} is called positionally; pass keywords the contract test checks"
            unknown = set(kwargs) - set(tb.TTNN_SIGNATURES[name])
            assert not unknown, f"ttnn.{name} gets {unknown}, which TTNN_SIGNATURES does not list"
            self.calls.append((name, kwargs))
            return fn(**kwargs)

        return call

    def _open_device(self, device_id, **_):
        grid = types.SimpleNamespace(x=11, y=10)
        return types.SimpleNamespace(id=device_id, arch=lambda: "Arch.BLACKHOLE", get_device_ids=lambda: [device_id],
                                     compute_with_storage_grid_size=lambda: grid,
                                     dram_grid_size=lambda: types.SimpleNamespace(x=8, y=1))  # fmt: skip

    def _close_device(self, device):
        pass

    def _synchronize_device(self, device):
        pass

    def _TensorSpec(self, shape, dtype, layout, buffer_type):
        return types.SimpleNamespace(shape=shape, dtype=dtype, layout=layout, buffer_type=buffer_type)

    def _allocate_tensor_on_device(self, tensor_spec, mesh_device):
        t = FakeTensor(tensor_spec, self.next_address)
        self.next_address += 0x10000
        return t

    def _allocate_tensor_on_host(self, tensor_spec, mesh_device):
        return FakeTensor(tensor_spec)

    def _copy_host_to_device_tensor(self, host_tensor, device_tensor):
        device_tensor.data[:] = host_tensor.data

    def _deallocate(self, tensor, force):
        tensor.data = None

    def _copy(self, input_a, input_b):
        input_b.data[:] = input_a.data


class FakeTensor:
    def __init__(self, spec, address=None):
        self.spec, self.address = spec, address
        self.data = np.zeros(nbytes(spec.shape, spec.dtype, spec.layout), dtype=np.uint8)

    def cpu(self, blocking):
        host = FakeTensor(self.spec)
        host.data = self.data.copy()
        return host

    def host_buffer(self):
        return self

    def get_shard(self, coord):
        return self.data

    def buffer_address(self):
        return self.address


@pytest.fixture
def fake(monkeypatch):
    f = FakeTTNN()
    monkeypatch.setitem(sys.modules, "ttnn", f)
    monkeypatch.setenv("KTT_BACKEND", "ttnn")
    config.reload()
    yield f
    monkeypatch.undo()
    config.reload()


@pytest.fixture
def dev(fake):
    d = hal.open_device(0)
    yield d
    d.close()


def test_the_hal_opens_a_card_through_ttnn(fake, dev):
    assert dev.backend.name == "ttnn"
    name, kwargs = fake.calls[0]
    assert name == "open_device"
    assert kwargs == {"device_id": 0, "l1_small_size": tb.L1_SMALL_SIZE, "trace_region_size": tb.TRACE_REGION_SIZE,
                      "num_command_queues": 2}  # fmt: skip
    info = dev.describe()
    assert (info["backend"], info["arch"], info["compute_grid"], info["simulated"]) == ("ttnn", "blackhole", "11x10",
                                                                                          False)  # fmt: skip
    assert dev.card.grid == (11, 10)  # the grid the chip reports, not the card spec's (13 x 10)


def test_values_round_trip_through_device_tensors(dev):
    rng = np.random.default_rng(1)
    for fmt, layout, shape in [("bfloat16", "tile", (40, 70)), ("float32", "row_major", (3, 5)),
                               ("bfloat8_b", "tile", (2, 64, 32)), ("int32", "tile", (7,))]:  # fmt: skip
        x = rng.standard_normal(shape).astype(np.float32) if Format(fmt).is_float else rng.integers(-9, 9, shape)
        buf = dev.upload(x.astype(np.int32) if fmt == "int32" else x, fmt, layout=layout)
        expected = formats.quantize(x, fmt) if Format(fmt).is_float else x
        np.testing.assert_array_equal(dev.download(buf), expected)
        assert buf.handle.tensor.spec.shape == shape


def test_partial_writes_keep_the_rest_and_raw_buffers_pad_their_last_page(fake, dev):
    buf = dev.allocate(5000)  # raw bytes: three 2048-byte pages, the last one partly padding
    assert buf.handle.tensor.spec.shape == (3, 2048)
    data = np.arange(5000, dtype=np.uint32).astype(np.uint8)
    dev.write(buf, data, blocking=True)
    dev.write(buf, np.full(10, 7, np.uint8), offset=100, blocking=True)
    expected = data.copy()
    expected[100:110] = 7
    np.testing.assert_array_equal(dev.read(buf), expected)
    np.testing.assert_array_equal(dev.read(buf, offset=4990, nbytes=10), expected[4990:])


def test_whole_copies_run_on_the_card_and_others_through_the_host(fake, dev):
    a = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    b = dev.upload(np.zeros((32, 32), np.float32), "bfloat16")
    dev.copy(a, b)
    dev.synchronize()
    assert [name for name, _ in fake.calls].count("copy") == 1
    np.testing.assert_array_equal(dev.download(b), np.ones((32, 32)))
    raw = dev.allocate(4096)
    dev.copy(a, raw, nbytes=1024, dst_offset=2048)
    dev.synchronize()
    assert [name for name, _ in fake.calls].count("copy") == 1  # a part of a buffer went through the host
    np.testing.assert_array_equal(dev.read(raw, offset=2048, nbytes=1024), dev.read(a, nbytes=1024))


def test_free_deallocates_the_tensor(fake, dev):
    buf = dev.allocate(64)
    tensor = buf.handle.tensor
    dev.free(buf)
    dev.synchronize()
    assert tensor.data is None and ("deallocate", {"tensor": tensor, "force": True}) in fake.calls


def test_device_synchronize_waits_for_the_card(fake, dev):
    a = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    before = [name for name, _ in fake.calls].count("synchronize_device")
    dev.copy(a, dev.allocate(shape=(32, 32), fmt="bfloat16", layout="tile"))
    dev.synchronize()  # the streams drain, then TT-NN's command queues
    calls = [name for name, _ in fake.calls]
    assert calls.count("synchronize_device") == before + 1 and calls[-1] == "synchronize_device"


def test_a_closed_backend_says_so():
    with pytest.raises(DeviceError, match="not open"):
        tb.TTNNBackend(0).synchronize()
