"""The mesh on a card: the pair opened as one TT-NN mesh device, placements as TT-NN's mesh mappers and composers,
collectives as TT-NN's (written against ttnn 0.81.1; every name is checked by ``tests/hal/test_ttnn_contract.py``;
none of it has run on a card here).

Opening: the fabric must be set before any chip of the mesh opens, and never for a single chip (a one-chip mesh
with the fabric on hangs and wedges the board: tt-metal issue 55519). The pair is opened as a 1 x 2 mesh device and
split into two 1 x 1 submeshes; each chip's HAL device runs on its submesh, so every single-chip path of the ttnn
backend works unchanged on the mesh's chips. A collective combines the chips' shards into one tensor of the parent
mesh (``combine_device_tensors``), runs TT-NN's collective on cluster axis 1 with a linear topology, and hands each
chip its part back (``get_device_tensors``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.errors import DeviceError
from kohakutt.mesh.placement import Partial, Placement, Replicate, Sharded

# fmt: off
TTNN_NAMES: tuple[str, ...] = (
    "set_fabric_config", "FabricConfig.FABRIC_1D", "FabricConfig.DISABLED", "open_mesh_device", "close_mesh_device",
    "MeshShape", "MeshDevice.create_submeshes", "MeshDevice.get_num_devices", "get_device_tensors",
    "combine_device_tensors", "shard_tensor_to_mesh_mapper", "replicate_tensor_to_mesh_mapper",
    "concat_mesh_to_tensor_composer", "from_torch", "to_torch", "all_gather", "reduce_scatter", "all_reduce",
    "Topology.Linear", "DRAM_MEMORY_CONFIG",
)
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "set_fabric_config": ("config",),
    "open_mesh_device": ("mesh_shape", "l1_small_size", "trace_region_size", "num_command_queues"),
    "close_mesh_device": ("mesh_device",),
    "MeshDevice.create_submeshes": ("submesh_shape",),
    "combine_device_tensors": ("tensors",),
    "get_device_tensors": ("tensor",),
    "shard_tensor_to_mesh_mapper": ("mesh_device", "dim"),
    "replicate_tensor_to_mesh_mapper": ("mesh_device",),
    "concat_mesh_to_tensor_composer": ("mesh_device", "dim"),
    "from_torch": ("tensor", "dtype", "layout", "device", "memory_config", "mesh_mapper"),
    "to_torch": ("tensor", "mesh_composer"),
    "all_gather": ("input_tensor", "dim", "cluster_axis", "num_links", "topology", "memory_config"),
    "reduce_scatter": ("input_tensor", "dim", "cluster_axis", "num_links", "topology", "memory_config"),
    "all_reduce": ("input_tensor", "cluster_axis", "num_links", "topology", "memory_config"),
}
# fmt: on

CLUSTER_AXIS = 1  # the mesh's columns: a 1 x 2 mesh's two chips
NUM_LINKS = 1  # one cable


class TTNNPair:
    """Two chips opened as one TT-NN mesh device, with one submesh per chip."""

    def __init__(self, ttnn: Any, chips: Sequence[int]):
        if len(chips) != 2:
            raise DeviceError(
                f"a TT-NN mesh here is a 1 x 2 pair; got chips {list(chips)} (the fabric is never "
                "turned on for a single chip: it hangs the board, tt-metal issue 55519)"
            )
        self.ttnn = ttnn
        self.chips = tuple(chips)
        self.parent: Any = None
        self.submeshes: list[Any] = []

    def open(self, l1_small_size: int, trace_region_size: int, num_command_queues: int) -> list[Any]:
        """Fabric first, then the 1 x 2 mesh device, then its submeshes (one per chip, in chip order)."""
        t = self.ttnn
        t.set_fabric_config(config=t.FabricConfig.FABRIC_1D)
        try:
            self.parent = t.open_mesh_device(
                mesh_shape=t.MeshShape(1, 2),
                l1_small_size=l1_small_size,
                trace_region_size=trace_region_size,
                num_command_queues=num_command_queues,
            )
            if self.parent.get_num_devices() != 2:
                raise DeviceError(f"TT-NN opened a mesh of {self.parent.get_num_devices()} chips for a 1 x 2 pair")
            self.submeshes = list(self.parent.create_submeshes(submesh_shape=t.MeshShape(1, 1)))
        except BaseException:
            self.close()
            raise
        return self.submeshes

    def close(self) -> None:
        t = self.ttnn
        if self.parent is not None:
            t.close_mesh_device(mesh_device=self.parent)
            self.parent = None
        t.set_fabric_config(config=t.FabricConfig.DISABLED)

    # ---------------------------------------------------------------------------------------------- placement
    def mapper(self, placement: Placement) -> Any:
        """TT-NN's mesh mapper for a placement (host -> mesh)."""
        if isinstance(placement, Sharded):
            return self.ttnn.shard_tensor_to_mesh_mapper(mesh_device=self.parent, dim=placement.dim)
        if isinstance(placement, Replicate):
            return self.ttnn.replicate_tensor_to_mesh_mapper(mesh_device=self.parent)
        raise DeviceError(f"no mesh mapper puts a host tensor on the mesh as {placement}")

    def upload(self, host: Any, placement: Placement, dtype: Any, layout: Any) -> list[Any]:
        """A torch CPU tensor placed on the pair by TT-NN's mapper: the chips' shards."""
        t = self.ttnn
        mesh_t = t.from_torch(
            tensor=host,
            dtype=dtype,
            layout=layout,
            device=self.parent,
            memory_config=t.DRAM_MEMORY_CONFIG,
            mesh_mapper=self.mapper(placement),
        )
        return list(t.get_device_tensors(tensor=mesh_t))

    def download(self, shards: Sequence[Any], placement: Placement) -> Any:
        """The chips' shards as one torch CPU tensor by TT-NN's composer (a replicated tensor: the first chip's)."""
        t = self.ttnn
        if isinstance(placement, Replicate):
            return t.to_torch(tensor=shards[0])
        if isinstance(placement, Partial):
            raise DeviceError("a Partial tensor is all-reduced on the mesh before it is read")
        mesh_t = t.combine_device_tensors(tensors=list(shards))
        return t.to_torch(
            tensor=mesh_t, mesh_composer=t.concat_mesh_to_tensor_composer(mesh_device=self.parent, dim=placement.dim)
        )

    # ---------------------------------------------------------------------------------------------- collectives
    def collective(self, kind: str, shards: Sequence[Any], dim: int | None = None) -> list[Any]:
        """TT-NN's ``all_gather`` / ``reduce_scatter`` / ``all_reduce`` over the chips' tensors: the results."""
        t = self.ttnn
        mesh_t = t.combine_device_tensors(tensors=list(shards))
        common = {
            "cluster_axis": CLUSTER_AXIS,
            "num_links": NUM_LINKS,
            "topology": t.Topology.Linear,
            "memory_config": t.DRAM_MEMORY_CONFIG,
        }
        if kind == "all_gather":
            out = t.all_gather(input_tensor=mesh_t, dim=dim, **common)
        elif kind == "reduce_scatter":
            out = t.reduce_scatter(input_tensor=mesh_t, dim=dim, **common)
        elif kind == "all_reduce":
            out = t.all_reduce(input_tensor=mesh_t, **common)
        else:
            raise DeviceError(f"no TT-NN collective {kind!r}")
        return list(t.get_device_tensors(tensor=out))


_pairs: dict[tuple[int, ...], TTNNPair] = {}
SUBMESHES: dict[int, Any] = {}  # chip -> the submesh its HAL device runs on (taken by TTNNBackend.open)


def open_pair(chips: Sequence[int]) -> TTNNPair:
    """Open ``chips`` as a TT-NN mesh before their HAL devices open (they then run on its submeshes)."""
    from kohakutt import hal
    from kohakutt.hal.backends import ttnn_backend as tb

    already = [d.chip_id for d in hal.open_devices() if d.chip_id in chips]
    if already:
        raise DeviceError(
            f"chip {already[0]} is open on its own, without the fabric; open the mesh before using "
            "its chips one by one (the fabric must be set before any of them opens)"
        )
    ttnn, _ = tb.TTNNBackend._probe()
    pair = TTNNPair(ttnn, chips)
    subs = pair.open(tb.L1_SMALL_SIZE, tb.TRACE_REGION_SIZE, tb.NUM_COMMAND_QUEUES)
    for c, sub in zip(chips, subs):
        SUBMESHES[c] = sub
    _pairs[tuple(chips)] = pair
    return pair


def pair_of(chip: int) -> TTNNPair | None:
    return next((p for k, p in _pairs.items() if chip in k), None)
