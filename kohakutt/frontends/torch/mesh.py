"""The mesh as a torch device: ``kohakutt.mesh([0, 1])`` is ``tt:<n>``, the device index after the ``n`` chips.

A tensor on it is an ordinary storage-backed tt tensor whose storage is a :class:`~kohakutt.mesh.MeshStorage`
(its data pointer a synthetic address of its own), so PyTorch's views, autograd and optimizers work unchanged and
every aten kernel's IR ops reach the mesh's executor (``kohakutt.mesh.run``) through ``kohakutt.kernels.run``.
This module holds the storages, the host transfers (a sharded tensor is gathered on the host, as TT-NN's mesh
composers do), module marks and ``Module.to(mesh)``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import torch
from kohakutt.errors import DeviceError
from kohakutt.frontends.torch import runtime
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import DeviceTensor
from kohakutt.mesh import device as mdev
from kohakutt.mesh import executor as mrun
from kohakutt.mesh.layout import contiguous
from kohakutt.mesh.placement import (
    Partial,
    Placement,
    PlacementError,
    Replicate,
    Sharded,
    Unaligned,
    Unplaced,
    bind,
    parse,
)
from kohakutt.mesh.storage import MeshStorage, MeshTensor

_lock = threading.Lock()
_storages: dict[int, MeshStorage] = {}  # data pointer -> storage
_next_ptr: dict[int, int] = {}  # mesh index -> next free address
_mesh: mdev.MeshDevice | None = None
MARKS = "_ktt_placements"


# ------------------------------------------------------------------------------------------------ the device
def slot() -> int | None:
    """The device index the mesh has (or would have) on this host: the first after the chips."""
    return mdev.mesh_index()


def is_mesh(index: int) -> bool:
    return _mesh is not None and index == _mesh.index and not _mesh.closed


def open_mesh(chips: list[int] | tuple[int, ...] = (0, 1)) -> torch.device:
    """Open ``chips`` as one torch device and return it (``tt:<number of chips>``)."""
    global _mesh
    from kohakutt.frontends.torch import install

    install()
    mesh = mdev.open_mesh(tuple(chips))
    with _lock:
        _mesh = mesh
        runtime.register_mesh(mesh)
        _register_save()
    return torch.device("tt", mesh.index)


_saving = False


def _register_save() -> None:
    """``torch.save`` writes a mesh tensor whole (its storage gathered) and tags it as a CPU tensor, so it loads
    anywhere, and ``load_state_dict`` puts it back into a mesh model's shards."""
    global _saving
    if _saving:
        return

    def tag(obj: Any) -> str | None:
        dev = getattr(obj, "device", None)
        if isinstance(dev, torch.device) and dev.type == "tt" and is_mesh(dev.index or 0):
            return "cpu"
        return None

    torch.serialization.register_package(1, tag, lambda obj, location: None)
    _saving = True


def mesh_device(index: int) -> mdev.MeshDevice:
    if is_mesh(index):
        return _mesh  # type: ignore[return-value]
    s = slot()
    if s is not None and index == s:
        raise DeviceError(
            f"tt:{index} is the mesh of chips 0 and 1, and it is not open: open it with kohakutt.mesh([0, 1])"
        )
    raise DeviceError(f"tt:{index} is no mesh")


def current() -> mdev.MeshDevice | None:
    return _mesh if _mesh is not None and not _mesh.closed else None


# ------------------------------------------------------------------------------------------------ storages
def alloc(
    index: int,
    nbytes: int,
    dtype: torch.dtype | None = None,
    sizes: list[int] | None = None,
    strides: list[int] | None = None,
) -> int:
    """A new mesh storage of ``nbytes`` (laid out as a tensor of ``sizes`` and ``strides`` when given): its data
    pointer."""
    mesh = mesh_device(index)
    itemsize = dtype.itemsize if dtype is not None else 1
    st = (
        MeshStorage(mesh, nbytes, itemsize, _phys(sizes, strides, nbytes, itemsize))
        if sizes is not None
        else MeshStorage(mesh, nbytes, 1, None)
    )
    with _lock:
        ptr = _next_ptr.get(index, (index + 1) << 48)
        _next_ptr[index] = ptr + -(-max(nbytes, 1) // 4096) * 4096 + 4096
        st.data_ptr = ptr
        _storages[ptr] = st
    return ptr


def _phys(sizes: Any, strides: Any, nbytes: int, itemsize: int) -> tuple[int, ...] | None:
    from kohakutt.mesh.layout import physical

    return physical(list(sizes), list(strides), nbytes, itemsize)


def free(ptr: int) -> bool:
    """Free the mesh storage at ``ptr`` (False when ``ptr`` is no mesh storage)."""
    st = _storages.pop(ptr, None)
    if st is None:
        return False
    if not st.mesh.closed:
        st.free(st.mesh.current_stream)
    return True


def storage_at(ptr: int) -> MeshStorage | None:
    return _storages.get(ptr)


def view(t: torch.Tensor) -> MeshTensor | None:
    """``t`` as the op library's mesh tensor, or None when its storage is not a mesh storage."""
    ptr = t.untyped_storage().data_ptr()
    st = _storages.get(ptr)
    if st is None:
        if ptr == 0 and t.device.type == "tt" and is_mesh(t.device.index or 0):
            return _empty_view(t)
        return None
    from kohakutt.frontends.torch.tensors import TO_IR, check_dtype

    spec = TensorSpec(tuple(t.shape), TO_IR.get(t.dtype) or check_dtype(t.dtype))
    if st.dtype is None and st.itemsize == t.element_size():
        st.dtype = spec.dtype
    return MeshTensor(st, spec, tuple(t.stride()), t.storage_offset())


_EMPTY: dict[int, MeshStorage] = {}


def _empty_view(t: torch.Tensor) -> MeshTensor:
    from kohakutt.frontends.torch.tensors import TO_IR, check_dtype

    index = t.device.index or 0
    st = _EMPTY.get(index)
    if st is None or not st.is_live:
        st = MeshStorage(mesh_device(index), 8, 1, None)
        st.place(Replicate(), st.mesh.default_stream)
        _EMPTY[index] = st
    return MeshTensor(st, TensorSpec(tuple(t.shape), TO_IR.get(t.dtype) or check_dtype(t.dtype)), tuple(t.stride()))


# ------------------------------------------------------------------------------------------------ host transfers
def _read_local(v: DeviceTensor, dtype: torch.dtype, stream: Any) -> torch.Tensor:
    """The values of one chip's view as a CPU tensor (bit for bit)."""
    if v.spec.numel == 0:
        return torch.empty(v.spec.shape, dtype=dtype)
    st = v.strides if v.strides is not None else contiguous(v.spec.shape)
    isz = dtype.itemsize
    lo = v.offset
    hi = v.offset + sum((n - 1) * s for n, s in zip(v.spec.shape, st))
    raw = v.buffer.device.read(v.buffer, lo * isz, (hi - lo + 1) * isz, stream=stream)
    flat = torch.frombuffer(bytearray(raw.tobytes()), dtype=dtype)
    return flat.as_strided(v.spec.shape, st, 0).clone()


def _storage_bytes(st: MeshStorage, stream: mdev.MeshStream) -> np.ndarray:
    """The storage's bytes in order, assembled on the host from each chip's part (a Partial one is first reduced
    on the mesh)."""
    if isinstance(st.placement, Partial):
        mrun.make_replicated(st, stream, "read on the host", None)
    assert st.buffers is not None
    p = st.placement
    if not isinstance(p, Sharded):
        return st.buffers[0].device.read(st.buffers[0], stream=stream.streams[0])
    parts = []
    for c, b in enumerate(st.buffers):
        shape = list(st.physical)
        shape[p.dim] = p.sizes[c]
        raw = b.device.read(b, stream=stream.streams[c]) if b.nbytes else np.zeros(0, np.uint8)
        parts.append(raw.reshape(*shape, st.itemsize))
    return np.ascontiguousarray(np.concatenate(parts, axis=p.dim)).reshape(-1)


def read_host(src: torch.Tensor) -> torch.Tensor:
    """The values of mesh tensor ``src`` as a new CPU tensor: each chip's part read and put together on the host."""
    t = view(src)
    assert t is not None
    if src.numel() == 0:
        return torch.empty(src.shape, dtype=src.dtype)
    st = t.storage
    ms = st.mesh.current_stream
    if st.placement is None:
        st.place(mrun.creation_placement(st), ms)
    if isinstance(st.placement, Partial):
        mrun.make_replicated(st, ms, "read on the host", None)
    loc = t.local()
    if loc is None:
        raw = _storage_bytes(st, ms)
        flat = torch.frombuffer(bytearray(raw.tobytes()), dtype=src.dtype)
        return flat.as_strided(src.shape, src.stride(), src.storage_offset()).clone()
    if isinstance(loc.placement, Sharded):
        parts = [_read_local(v, src.dtype, s) for v, s in zip(loc.views, ms.streams)]
        return torch.cat(parts, dim=loc.placement.dim)
    return _read_local(loc.views[0], src.dtype, ms.streams[0])


def write_host(dst: torch.Tensor, host: torch.Tensor) -> None:
    """Copy CPU tensor ``host`` (of ``dst``'s shape and dtype) into mesh tensor ``dst``: each chip gets its part.
    A storage written whole for the first time takes its creation placement (its mark, else the 1 MiB rule)."""
    from kohakutt import kernels as kk

    t = view(dst)
    assert t is not None
    st = t.storage
    ms = st.mesh.current_stream
    if st.placement is None:
        st.place(mrun.creation_placement(st), ms)
    loc = t.local()
    if loc is None or isinstance(loc.placement, Partial):
        mrun.make_replicated(st, ms, "a host write the shards cannot take", None)
        loc = t.local()
    assert loc is not None
    host = host.contiguous()
    p = loc.placement
    starts = p.starts if isinstance(p, Sharded) else None
    for c, (v, s) in enumerate(zip(loc.views, ms.streams)):
        if v.spec.numel == 0:
            continue
        part = host.narrow(p.dim, starts[c], p.sizes[c]) if starts is not None else host  # type: ignore[union-attr]
        data = part.contiguous().reshape(-1).view(torch.uint8).numpy()
        dev = v.buffer.device
        if v.is_contiguous:
            dev.write(v.buffer, data, v.offset * dst.element_size(), stream=s)
        else:
            tmp = DeviceTensor(dev.allocate(data.size, cached=True, stream=s), v.spec)
            dev.write(tmp.buffer, data, stream=s)
            kk.run("copy", [tmp], out=[v], device=dev, stream=s)
            dev.free(tmp.buffer, s)


def copy_bytes(dst: int, src: int, nbytes: int) -> None:
    """A storage-level byte copy involving a mesh storage (``resize_`` keeping old bytes, say): through the host."""
    sbuf, soff = runtime.buffer_of(src)
    dbuf, doff = runtime.buffer_of(dst)
    if isinstance(sbuf, MeshStorage):
        data = _storage_bytes(sbuf, sbuf.mesh.current_stream)[soff : soff + nbytes]
    else:
        data = sbuf.device.read(sbuf, soff, nbytes, stream=runtime.current_stream(sbuf.device.chip_id))
    if isinstance(dbuf, MeshStorage):
        ms = dbuf.mesh.current_stream
        if dbuf.placement is None:
            dbuf.place(mrun.creation_placement(dbuf), ms)
        whole = _storage_bytes(dbuf, ms).copy()
        whole[doff : doff + nbytes] = data
        if not isinstance(dbuf.placement, Replicate):
            mrun.make_replicated(dbuf, ms, "a byte copy into part of the storage", None)
        for b, s in zip(dbuf.buffers or (), ms.streams):
            b.device.write(b, whole, stream=s)
    else:
        dbuf.device.write(dbuf, data, doff, stream=runtime.current_stream(dbuf.device.chip_id))


# ------------------------------------------------------------------------------------------------ placements
def placement(t: torch.Tensor) -> Placement:
    """``t``'s placement on the mesh: ``Replicate``, ``Sharded(dim=d)``, ``Partial(sum)``, ``Unplaced`` (never
    written) or ``Unaligned`` (a view its storage's sharding does not fit: gathered when read)."""
    if not isinstance(t, torch.Tensor) or t.device.type != "tt" or not is_mesh(t.device.index or 0):
        raise PlacementError(f"placement() takes a tensor on the mesh; this one is on {getattr(t, 'device', t)}")
    mt = view(t)
    assert mt is not None
    if mt.storage.placement is None:
        return Unplaced()
    loc = mt.local()
    return loc.placement if loc is not None else Unaligned(mt.storage.placement)


def inherit(out: torch.Tensor, like: torch.Tensor) -> None:
    """``out`` (new, from ``empty_like(like)``) takes ``like``'s placement when first written."""
    a, b = view(out), view(like)
    if a is None or b is None or a.storage.placement is not None:
        return
    src = b.storage
    if (
        isinstance(src.placement, Replicate | Sharded)
        and src.physical == a.storage.physical
        and src.itemsize == a.storage.itemsize
    ):
        a.storage.hint = src.placement


def _hint(placement_: Placement | None, shape: tuple[int, ...], mesh: mdev.MeshDevice) -> Placement | None:
    if placement_ is None:
        return None
    p = bind(placement_, shape, mesh.size)
    if isinstance(p, Partial):
        raise PlacementError("a tensor is created Replicate or Sharded; Partial comes only out of ops")
    if isinstance(p, Sharded) and shape[p.dim] < 2:
        return Replicate()
    return p


def distribute(
    t: torch.Tensor, device: torch.device, placement_: Placement | str | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``t`` (CPU, a chip, or the mesh) as a new mesh tensor placed ``placement_`` (a view-level placement of
    ``t``'s dims; None: the creation rule)."""
    mesh = mesh_device(device.index or 0)
    src = t.to(dtype) if dtype is not None and t.is_floating_point() else t
    with torch.no_grad():
        out = torch.empty(src.shape, dtype=src.dtype, device=device)
        mt = view(out)
        if mt is not None and mt.storage.placement is None and out.numel():
            hint = _hint(parse(placement_), tuple(src.shape), mesh)
            mt.storage.hint = hint
            mt.storage.place(mrun.creation_placement(mt.storage), mesh.current_stream)
        out.copy_(src)
    return out


# ------------------------------------------------------------------------------------------------ marks
def _linear_like(m: torch.nn.Module) -> str | None:
    if isinstance(m, torch.nn.Linear):
        return "linear"
    if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag):
        return "embedding"
    if isinstance(m, torch.nn.modules.conv._ConvNd):
        return "conv"
    return None


def mark(module: torch.nn.Module, placements: dict[str, Placement | str]) -> torch.nn.Module:
    """Set ``module``'s own tensors' placements (by name; ``"*"`` for all) and return ``module``. When its tensors
    are on the mesh already they are re-placed now (the parameter objects stay the same)."""
    if not isinstance(module, torch.nn.Module):
        raise PlacementError(f"marks take an nn.Module, got {type(module).__name__}")
    parsed = {k: parse(v) for k, v in placements.items()}
    own = dict(module.named_parameters(recurse=False)) | dict(module.named_buffers(recurse=False))
    unknown = [k for k in parsed if k != "*" and k not in own]
    if unknown:
        raise PlacementError(
            f"{type(module).__name__} has no tensor named {unknown[0]!r}; its own tensors are {sorted(own)}"
        )
    for name, p in parsed.items():
        targets = own.values() if name == "*" else [own[name]]
        for tt in targets:
            if tt is not None and isinstance(p, Sharded):
                bind(p, tuple(tt.shape), 2)  # raises when the dim does not fit
    setattr(module, MARKS, parsed)
    if any(x is not None and x.device.type == "tt" and is_mesh(x.device.index or 0) for x in own.values()):
        _replace(module, next(x for x in own.values() if x is not None).device)
    return module


def _placement_of(module: torch.nn.Module, name: str) -> Placement | None:
    marks = getattr(module, MARKS, None) or {}
    return marks.get(name, marks.get("*"))


def colwise(module: torch.nn.Module) -> torch.nn.Module:
    kind = _linear_like(module)
    if kind == "linear" or kind == "conv":
        return mark(module, {"weight": Sharded(0)} | ({"bias": Sharded(0)} if module.bias is not None else {}))
    if kind == "embedding":
        return mark(module, {"weight": Sharded(1)})
    raise PlacementError(
        f"colwise marks Linear, Embedding and convolution modules, not {type(module).__name__}; "
        "place its tensors with kohakutt.place(module, name='S(d)')"
    )


def rowwise(module: torch.nn.Module) -> torch.nn.Module:
    kind = _linear_like(module)
    if kind == "linear" or kind == "conv":
        return mark(module, {"weight": Sharded(1)} | ({"bias": Replicate()} if module.bias is not None else {}))
    if kind == "embedding":
        return mark(module, {"weight": Sharded(0)})
    raise PlacementError(
        f"rowwise marks Linear, Embedding and convolution modules, not {type(module).__name__}; "
        "place its tensors with kohakutt.place(module, name='S(d)')"
    )


def _replace(module: torch.nn.Module, device: torch.device) -> None:
    """Re-place ``module``'s own tensors on the mesh by its marks, keeping the parameter objects."""
    plan = {}
    for name, x in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
        if x is not None:
            plan[id(x)] = _placement_of(module, name)
            if getattr(x, "grad", None) is not None:
                plan[id(x.grad)] = plan[id(x)]
    _apply(module, device, plan, None, recurse=False)


def _apply(
    module: torch.nn.Module,
    device: torch.device,
    plan: dict[int, Placement | None],
    dtype: torch.dtype | None,
    recurse: bool = True,
) -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        return distribute(t, device, plan.get(id(t)), dtype)

    prev = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        if recurse:
            module._apply(fn)
        else:
            for p in module._parameters.values():
                if p is not None:
                    where = plan.get(id(p))
                    new = torch.nn.Parameter(
                        distribute(p.detach(), device, where, dtype), requires_grad=p.requires_grad
                    )
                    if p.grad is not None:
                        new.grad = distribute(p.grad, device, where, dtype)
                    torch.utils.swap_tensors(p, new)
            for key, b in list(module._buffers.items()):
                if b is not None:
                    module._buffers[key] = fn(b)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(prev)


def module_to(module: torch.nn.Module, device: torch.device, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """``module.to(mesh)``: each parameter and buffer placed by its module's mark (else the 1 MiB rule)."""
    plan: dict[int, Placement | None] = {}
    for m in module.modules():
        for name, x in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
            if x is None:
                continue
            p = _placement_of(m, name)
            plan[id(x)] = p
            if getattr(x, "grad", None) is not None:
                plan[id(x.grad)] = p
    _apply(module, device, plan, dtype)
    return module


# ------------------------------------------------------------------------------------------------ stats, log
def mesh_stats() -> dict[str, Any]:
    """What the open mesh has done: collectives (count and bytes each chip received, per kind), ops, fallbacks
    (ops whose inputs were gathered for want of a rule) and the decision cache's hits and misses."""
    m = current()
    if m is None:
        return {
            "collectives": {},
            "bytes": {},
            "total": 0,
            "total_bytes": 0,
            "fallbacks": {},
            "ops": 0,
            "decisions": {},
        }
    return m.stats.snapshot() | {"chips": list(m.chip_ids), "device": f"tt:{m.index}"}


def reset_mesh_stats() -> None:
    m = current()
    if m is not None:
        m.stats.reset()
