"""Several chips as one device (built and tested as a 1 x 2 mesh): placements, propagation, collectives.

``kohakutt.mesh([0, 1])`` (this package is callable) opens chips 0 and 1 as one torch device and returns it.
Frontend-neutral pieces: :class:`MeshDevice` (the chips and their link), :class:`MeshStorage` /
:class:`MeshTensor` (what a tensor on the mesh is), the placements, :func:`run` (an IR op on mesh tensors), the
collectives and the placement log. ``docs/concepts/mesh.md`` has the design.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from kohakutt.mesh.device import Link, MeshDevice, MeshStream, open_mesh, open_meshes
from kohakutt.mesh.executor import MeshError, run
from kohakutt.mesh.log import Conversion, PlacementRecord, placement_log, record_placements
from kohakutt.mesh.placement import Partial, Placement, PlacementError, Replicate, Sharded, Unaligned, Unplaced
from kohakutt.mesh.storage import Local, MeshStorage, MeshTensor

__all__ = [
    "Conversion", "Link", "Local", "MeshDevice", "MeshError", "MeshStorage", "MeshStream", "MeshTensor", "Partial",
    "Placement", "PlacementError", "PlacementRecord", "Replicate", "Sharded", "Unaligned", "Unplaced", "open_mesh",
    "open_meshes", "placement_log", "record_placements", "run",
]  # fmt: skip


class _CallableModule(types.ModuleType):
    def __call__(self, chips: Any = (0, 1)) -> Any:
        """``kohakutt.mesh([0, 1])``: open the chips as one torch device (``tt:<number of chips>``) and return it."""
        from kohakutt.frontends.torch.mesh import open_mesh as open_torch_mesh

        return open_torch_mesh(list(chips))


sys.modules[__name__].__class__ = _CallableModule
