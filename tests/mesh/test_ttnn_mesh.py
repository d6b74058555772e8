"""The mesh's TT-NN path without a card: a stand-in ``ttnn`` records the calls, so the order the real one needs
(fabric before the mesh opens; never for one chip), the mappers per placement and the collectives' arguments are
checked. The names and keywords themselves are checked against ttnn 0.81.1 by tests/hal/test_ttnn_contract.py."""

from __future__ import annotations

import types

import pytest

from kohakutt.errors import DeviceError
from kohakutt.mesh import Partial, Replicate, Sharded
from kohakutt.mesh.ttnn_mesh import TTNNPair


class FakeTTNN:
    def __init__(self, devices: int = 2):
        self.calls: list[tuple[str, dict]] = []
        self.devices = devices
        self.FabricConfig = types.SimpleNamespace(FABRIC_1D="FABRIC_1D", DISABLED="DISABLED")
        self.Topology = types.SimpleNamespace(Linear="Linear")
        self.DRAM_MEMORY_CONFIG = "dram"

    def _rec(self, name: str, **kw: object) -> object:
        self.calls.append((name, kw))
        return name

    def __getattr__(self, name: str):
        return lambda *a, **kw: self._rec(name, **kw)

    def MeshShape(self, *shape: int) -> tuple[int, ...]:
        return shape

    def open_mesh_device(self, **kw: object) -> object:
        self._rec("open_mesh_device", **kw)
        fake = self

        class Parent:
            def get_num_devices(self) -> int:
                return fake.devices

            def create_submeshes(self, submesh_shape: object) -> list[str]:
                fake._rec("create_submeshes", submesh_shape=submesh_shape)
                return ["sub0", "sub1"]

        return Parent()

    def get_device_tensors(self, tensor: object) -> list[str]:
        self._rec("get_device_tensors", tensor=tensor)
        return ["out0", "out1"]


def names(fake: FakeTTNN) -> list[str]:
    return [n for n, _ in fake.calls]


def test_the_fabric_is_set_before_the_pair_opens():
    fake = FakeTTNN()
    subs = TTNNPair(fake, (0, 1)).open(32768, 1 << 20, 2)
    assert subs == ["sub0", "sub1"]
    assert names(fake)[:3] == ["set_fabric_config", "open_mesh_device", "create_submeshes"]
    assert fake.calls[0][1] == {"config": "FABRIC_1D"}
    assert fake.calls[1][1]["mesh_shape"] == (1, 2)


def test_never_the_fabric_for_one_chip():
    fake = FakeTTNN()
    with pytest.raises(DeviceError, match="55519"):
        TTNNPair(fake, (0,))
    assert fake.calls == []


def test_a_mesh_of_the_wrong_size_closes_again():
    fake = FakeTTNN(devices=1)
    with pytest.raises(DeviceError):
        TTNNPair(fake, (0, 1)).open(0, 0, 1)
    assert names(fake)[-2:] == ["close_mesh_device", "set_fabric_config"]
    assert fake.calls[-1][1] == {"config": "DISABLED"}


def test_mappers_composers_and_collectives():
    fake = FakeTTNN()
    pair = TTNNPair(fake, (0, 1))
    pair.open(0, 0, 1)
    pair.mapper(Sharded(1, (2, 2)))
    pair.mapper(Replicate())
    assert fake.calls[-2] == ("shard_tensor_to_mesh_mapper", {"mesh_device": pair.parent, "dim": 1})
    assert fake.calls[-1] == ("replicate_tensor_to_mesh_mapper", {"mesh_device": pair.parent})
    with pytest.raises(DeviceError):
        pair.mapper(Partial())
    pair.download(["a", "b"], Sharded(0, (1, 1)))
    assert ("concat_mesh_to_tensor_composer", {"mesh_device": pair.parent, "dim": 0}) in fake.calls
    assert pair.collective("all_gather", ["a", "b"], 1) == ["out0", "out1"]
    _, kw = next(c for c in fake.calls if c[0] == "all_gather")
    assert kw == {
        "input_tensor": "combine_device_tensors",
        "dim": 1,
        "cluster_axis": 1,
        "num_links": 1,
        "topology": "Linear",
        "memory_config": "dram",
    }
    pair.collective("all_reduce", ["a", "b"])
    assert "dim" not in next(c for c in fake.calls if c[0] == "all_reduce")[1]
