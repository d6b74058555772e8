"""Mesh storages and mesh tensors: what a tensor on the mesh is.

A :class:`MeshStorage` is a storage on the mesh: ``nbytes`` laid out as a dense tensor of its *physical* shape (the
tensor that created it, dims in memory order), a placement of those elements (``Replicate``, ``Partial``, or
``Sharded(p, sizes)`` on physical dim ``p``) and one HAL buffer per chip holding that chip's elements. It is placed
when first written (see ``kohakutt.mesh.run``) and may change placement later (a misaligned write makes it
replicated), so views never hold per-chip state: a :class:`MeshTensor` is a view (spec, strides, offset) of a
storage, as a :class:`~kohakutt.kernels.tensor.DeviceTensor` is of a buffer, and :meth:`MeshTensor.local` works
out each chip's part of it when it is used.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kohakutt.errors import BufferUseError, TraceError
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import DeviceTensor
from kohakutt.kernels.tensor import empty as empty_local
from kohakutt.mesh import layout
from kohakutt.mesh.placement import Placement, Replicate, Sharded

if TYPE_CHECKING:
    from kohakutt.mesh.device import MeshDevice, MeshStream

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Local:
    """A tensor as the chips hold it: its global spec, its placement, and each chip's part as a device tensor."""

    spec: TensorSpec
    placement: Placement
    views: tuple[DeviceTensor, ...]


class MeshStorage:
    """The storage of a mesh tensor. Make it with :func:`new_storage` (placed later) or :func:`empty`."""

    def __init__(
        self,
        mesh: MeshDevice,
        nbytes: int,
        itemsize: int = 1,
        physical: Sequence[int] | None = None,
        *,
        hint: Placement | None = None,
        layout_: Layout = Layout.ROW_MAJOR,
    ):
        self.mesh = mesh
        self.id = next(_ids)
        self.nbytes = int(nbytes)
        if physical is None or itemsize <= 0:
            itemsize = itemsize if itemsize > 0 and nbytes % itemsize == 0 else 1
            physical = (self.nbytes // itemsize,)
        self.itemsize = itemsize
        self.physical = tuple(int(n) for n in physical)
        n = 1
        for s in self.physical:
            n *= s
        self.numel = n
        self.layout = layout_
        self.hint = hint  # the placement a creation gives it (a mark, or the input of an empty_like)
        self.dtype: DType | None = None  # the element type last placed into it (a Partial sum needs it)
        self.placement: Placement | None = None
        self.buffers: tuple[Buffer, ...] | None = None
        self.data_ptr = 0  # a frontend's address for it
        self.trace = mesh._capture  # the mesh trace it was made in, if any
        self._views: dict[tuple, Local | None] = {}
        self._state = "live"
        if self.trace is not None:
            self.trace.owned.append(self)
        mesh.storages[self.id] = self

    # ---------------------------------------------------------------------------------------------- geometry
    def local_nbytes(self, placement: Placement, chip: int) -> int:
        if isinstance(placement, Sharded):
            return self.nbytes // max(self.physical[placement.dim], 1) * placement.sizes[chip]
        return self.nbytes

    def can_shard(self, p: int) -> bool:
        return self.layout is Layout.ROW_MAJOR and 0 <= p < len(self.physical) and self.physical[p] >= 2

    @property
    def is_live(self) -> bool:
        return self._state == "live"

    def check_live(self, use: str) -> None:
        if self._state != "live":
            raise BufferUseError(f"{use}: mesh storage {self.id} was freed")
        self.mesh.check_open(use)

    # ---------------------------------------------------------------------------------------------- placing
    def _check_capture(self, use: str) -> None:
        cap = self.mesh._capture
        if cap is not None and self.trace is not cap and self.placement is not None:
            raise TraceError(
                f"{use} would change the placement of a tensor made before the capture (mesh storage "
                f"{self.id}, {self.placement}): a replay would find it as it was. Run the step eagerly "
                "first (warmup), so placements settle before capturing"
            )

    def place(self, placement: Placement, stream: MeshStream) -> None:
        """Give an unplaced storage its placement and its per-chip buffers (values undefined: zeros on the sim)."""
        assert self.placement is None, "place() is for a storage with no placement yet"
        self.buffers = tuple(self._allocate(placement, c, stream) for c in range(self.mesh.size))
        self.placement = placement
        self._views.clear()

    def replace(self, placement: Placement, buffers: tuple[Buffer, ...], stream: MeshStream, why: str) -> None:
        """Swap in ``buffers`` holding the same values in ``placement`` (the old buffers are freed)."""
        self._check_capture(why)
        old = self.buffers
        self.buffers, self.placement = buffers, placement
        self._views.clear()
        if old is not None:
            for c, b in enumerate(old):
                if b.is_live and b not in buffers:
                    b.device.free(b, stream.streams[c])

    def _allocate(self, placement: Placement, chip: int, stream: MeshStream) -> Buffer:
        dev = self.mesh.chips[chip]
        return dev.allocate(self.local_nbytes(placement, chip), cached=True, stream=stream.streams[chip])

    def free(self, stream: MeshStream | None = None) -> None:
        """Free the per-chip buffers, after the work queued on ``stream`` (the mesh's current one)."""
        if self._state != "live":
            return
        self._state = "freed"
        self.mesh.storages.pop(self.id, None)
        if self.buffers is None or self.mesh.closed:
            return
        s = stream or self.mesh.current_stream
        for c, b in enumerate(self.buffers):
            if b.is_live:
                b.device.free(b, s.streams[c])

    # -------------------------------------------------------------------------------------------- localize
    def localize(self, spec: TensorSpec, strides: tuple[int, ...], offset: int) -> Local | None:
        """Each chip's part of the view (``spec``, ``strides``, ``offset`` in elements of ``spec.dtype``), or None
        when the view does not keep the storage's sharding (it must then be gathered)."""
        key = (spec, strides, offset)
        got = self._views.get(key, False)
        if got is not False:
            return got  # type: ignore[return-value]
        got = self._localize(spec, strides, offset)
        if len(self._views) > 256:
            self._views.clear()
        self._views[key] = got
        return got

    def _localize(self, spec: TensorSpec, strides: tuple[int, ...], offset: int) -> Local | None:
        p = self.placement
        assert p is not None and self.buffers is not None
        if spec.layout is Layout.TILE:
            if isinstance(p, Sharded) and tuple(spec.shape) != self.physical:
                return None
            views = tuple(DeviceTensor(b, _local_spec(spec, p, c)) for c, b in enumerate(self.buffers))
            return Local(spec, p, views)
        if p.__class__ is not Sharded or spec.numel == 0:
            views = tuple(_view(b, spec, strides, offset) for b in self.buffers)
            return Local(spec, p if spec.numel or not isinstance(p, Sharded) else Replicate(), views)
        if spec.dtype.itemsize != self.itemsize:
            return None
        got = layout.localize(spec.shape, strides, offset, self.physical, p.dim, p.sizes)
        if got is None:
            return None
        j, per = got
        views = tuple(_view(b, spec.with_(shape=shp), st, off) for b, (shp, st, off) in zip(self.buffers, per))
        return Local(spec, Sharded(j, tuple(v.spec.shape[j] for v in views)), views)

    def same_kind_as(self, other: MeshStorage) -> bool:
        return (
            isinstance(other, MeshStorage)
            and other.nbytes == self.nbytes
            and other.physical == self.physical
            and other.placement == self.placement
            and other.itemsize == self.itemsize
        )

    def __repr__(self) -> str:
        return (
            f"MeshStorage(id={self.id}, {self.nbytes} B, physical={self.physical}, {self.placement or 'unplaced'}"
            f"{', ' + self._state if self._state != 'live' else ''})"
        )


_new = object.__new__


def _view(buf: Buffer, spec: TensorSpec, strides: tuple[int, ...], offset: int) -> DeviceTensor:
    """``DeviceTensor(buf, spec, strides, offset)`` for a row-major view, without the constructor's checks (they hold
    for every view a mesh storage hands out: row-major, no block floats)."""
    t = _new(DeviceTensor)
    t.buffer, t.spec, t.strides, t.offset = buf, spec, strides, offset
    return t


def _local_spec(spec: TensorSpec, p: Placement, chip: int) -> TensorSpec:
    if isinstance(p, Sharded):
        shape = list(spec.shape)
        shape[p.dim] = p.sizes[chip]
        return spec.with_(shape=tuple(shape))
    return spec


@dataclass(eq=False, slots=True)
class MeshTensor:
    """A tensor on the mesh: ``storage`` viewed with element ``strides`` from element ``offset``."""

    storage: MeshStorage
    spec: TensorSpec
    strides: tuple[int, ...]
    offset: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self):
        return self.spec.dtype

    @property
    def device(self) -> MeshDevice:
        return self.storage.mesh

    @property
    def buffer(self) -> MeshStorage:
        """The storage (as a device tensor's ``buffer``): what ``device.free`` takes."""
        return self.storage

    @property
    def is_contiguous(self) -> bool:
        return self.strides == layout.contiguous(self.spec.shape) or self.spec.numel <= 1

    @property
    def covers_storage(self) -> bool:
        """Whether the view is every element of its storage exactly once, in the storage's own element size."""
        s = self.storage
        if self.offset != 0 or self.spec.dtype.itemsize != s.itemsize or self.spec.numel != s.numel:
            return False
        return layout.physical(self.spec.shape, self.strides, s.nbytes, s.itemsize) is not None

    def local(self) -> Local | None:
        """Each chip's part (None when the view does not keep the storage's sharding)."""
        st = self.storage
        if st._state != "live":
            st.check_live("a mesh tensor")
        got = st._views.get((self.spec, self.strides, self.offset), False)
        return st.localize(self.spec, self.strides, self.offset) if got is False else got

    @property
    def placement(self) -> Placement | None:
        """The view's placement (None: not placed yet, or not aligned with the storage's shards)."""
        if self.storage.placement is None:
            return None
        loc = self.local()
        return loc.placement if loc is not None else None

    def __repr__(self) -> str:
        return f"MeshTensor({self.spec}, strides={self.strides}, offset={self.offset}, storage={self.storage.id})"


def new_storage(
    mesh: MeshDevice,
    nbytes: int,
    sizes: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    itemsize: int = 1,
    hint: Placement | None = None,
) -> MeshStorage:
    """An unplaced storage of ``nbytes`` made for a tensor of ``sizes`` and ``strides`` (its physical layout)."""
    phys = layout.physical(sizes, strides, nbytes, itemsize) if sizes is not None and strides is not None else None
    return MeshStorage(mesh, nbytes, itemsize if phys is not None else 1, phys, hint=hint)


def empty(mesh: MeshDevice, spec: TensorSpec, placement: Placement, stream: MeshStream) -> MeshTensor:
    """A new contiguous mesh tensor of ``spec`` placed as ``placement`` (a placement of ``spec``'s dims)."""
    if spec.layout is Layout.TILE:
        st = MeshStorage(mesh, 0, spec.dtype.itemsize, spec.shape, layout_=Layout.TILE)
        st.buffers = tuple(empty_local(d, _local_spec(spec, placement, c)).buffer for c, d in enumerate(mesh.chips))
        st.nbytes = st.buffers[0].nbytes
        st.placement = placement
        return MeshTensor(st, spec, layout.contiguous(spec.shape), 0)
    st = MeshStorage(mesh, spec.numel * spec.dtype.itemsize, spec.dtype.itemsize, tuple(spec.shape))
    st.place(placement, stream)
    return MeshTensor(st, spec, layout.contiguous(spec.shape), 0)
