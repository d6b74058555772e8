"""torch tensors on ``tt`` as the op library sees them, and new tt tensors from Python.

A tt tensor's storage is a raw HAL buffer (its data pointer is the buffer's address), so a tensor is exactly a
:class:`~kohakutt.kernels.tensor.DeviceTensor`: that buffer viewed with the tensor's sizes, strides and offset.
Views made by PyTorch share the buffer, so in-place writes through a view land in the base.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from kohakutt.errors import DeviceError, DtypeError
from kohakutt.frontends.torch import runtime
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.device import Device
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import DeviceTensor

TO_IR: dict[torch.dtype, DType] = {
    torch.float32: DType.FLOAT32,
    torch.bfloat16: DType.BFLOAT16,
    torch.float16: DType.FLOAT16,
    torch.int32: DType.INT32,
    torch.int64: DType.INT64,
    torch.bool: DType.BOOL,
    torch.uint8: DType.UINT8,
    torch.uint16: DType.UINT16,
    torch.uint32: DType.UINT32,
}
FROM_IR: dict[DType, torch.dtype] = {v: k for k, v in TO_IR.items()}

_empty_tensor = torch._C._acc.create_empty_tensor
_NO_SIZE = [0]
_new_device_tensor = object.__new__
_EMPTY: dict[int, DeviceTensor] = {}  # chip -> a one-word buffer standing in for zero-byte storages


def check_dtype(dtype: torch.dtype, use: str = "a tt tensor") -> DType:
    """The IR dtype of ``dtype``, or a DtypeError saying what the card holds instead."""
    ir = TO_IR.get(dtype)
    if ir is None:
        hint = {
            torch.float64: "float32",
            torch.complex64: "two float32 tensors (real, imaginary)",
            torch.complex128: "two float32 tensors (real, imaginary)",
        }.get(dtype, "int32 or float32")
        raise DtypeError(
            f"{use} cannot be {dtype}: the card holds float32, bfloat16, float16, int32, int64, "
            f"uint8/16/32 and bool. Convert to {hint} first, e.g. t.to(torch.float32) on the CPU"
        )
    return ir


def index_of(device: torch.device | str | int | None) -> int:
    if device is None:
        return torch.tt.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return torch.tt.current_device() if d.index is None else d.index


def new(size: Sequence[int], stride: Sequence[int] | None, dtype: torch.dtype, index: int) -> torch.Tensor:
    """An uninitialised tt tensor of ``size`` and ``stride`` on ``tt:<index>`` (its memory may be a cached block
    holding an earlier tensor's values, as on the card; fresh memory is zeros on the simulator)."""
    if dtype not in TO_IR:
        check_dtype(dtype)
    size = [int(s) for s in size]
    if stride is None:
        stride, acc = [0] * len(size), 1
        for i in range(len(size) - 1, -1, -1):
            stride[i] = acc
            acc *= max(size[i], 1)
    else:
        stride = [int(s) for s in stride]
    return new_storage(len(size), runtime.dims(size, stride), dtype, nbytes_of(size, stride, dtype), index)


def nbytes_of(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> int:
    """Bytes a storage needs for a tensor of ``size`` and ``stride`` at offset 0."""
    return (1 + sum((s - 1) * st for s, st in zip(size, stride))) * dtype.itemsize if all(size) else 0


def new_storage(ndim: int, dims: Any, dtype: torch.dtype, nbytes: int, index: int) -> torch.Tensor:
    """:func:`new` with everything worked out: sizes and strides as ``runtime.dims(size, stride)`` (``ndim`` each),
    a dtype the card holds and the storage's ``nbytes`` (:func:`nbytes_of`). The path of every op's output."""
    t = _empty_tensor(_NO_SIZE, dtype)
    runtime.give_storage(t, nbytes, index, ndim, dims)
    return t


def new_like(meta: torch.Tensor, index: int) -> torch.Tensor:
    """A tt tensor with ``meta``'s sizes, strides and dtype."""
    return new(meta.shape, meta.stride(), meta.dtype, index)


def preserved_strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides ``torch.empty_like(t)`` gives (``torch.preserve_format``): ``t``'s own when it is contiguous or
    dense and non-overlapping, else dense strides in ``t``'s dim order. What PyTorch's shape functions give a result
    "like" an input, so a kernel whose output follows its input's layout must allocate it with these."""
    if t.is_contiguous():
        return tuple(t.stride())
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return tuple(torch.empty_like(meta).stride())


def device_of(t: torch.Tensor) -> Device:
    return runtime.device(t.device.index or 0)


_SPECS: dict[tuple, TensorSpec] = {}  # (shape, dtype) -> its spec: specs are frozen, and cost more to make than find


def tt_view(t: torch.Tensor) -> DeviceTensor | None:
    """:func:`to_device_tensor` for a tensor whose storage is a live tt buffer (the common case), else None. A
    storage's data pointer names its buffer: tt addresses are never reused and lie above any host address."""
    buf = runtime._buffers.get(t.untyped_storage().data_ptr())
    if buf is None or buf._state != "live" or buf.device._closed:
        if buf is None and runtime._mesh_index is not None:
            from kohakutt.frontends.torch import mesh

            return mesh.view(t)  # type: ignore[return-value]  (a MeshTensor: the op library runs it on the mesh)
        return None
    shape, tdt = t.shape, t.dtype
    spec = _SPECS.get((shape, tdt))
    if spec is None:
        if len(_SPECS) >= 4096:
            _SPECS.clear()
        spec = _SPECS[(shape, tdt)] = TensorSpec(tuple(shape), TO_IR.get(tdt) or check_dtype(tdt))
    return view(buf, spec, t.stride(), t.storage_offset())


def view(buf: Buffer, spec: TensorSpec, strides: tuple[int, ...], offset: int) -> DeviceTensor:
    """``DeviceTensor(buf, spec, strides, offset)`` for a row-major ``spec`` of a dtype a tt tensor holds, made
    without its checks (they hold for every such view: only tile-layout and block-float tensors are refused)."""
    t = _new_device_tensor(DeviceTensor)
    t.buffer, t.spec, t.strides, t.offset = buf, spec, strides, offset
    return t


def to_device_tensor(t: torch.Tensor) -> DeviceTensor:
    """``t`` as the op library's view of its storage's buffer."""
    fast = tt_view(t)
    if fast is not None:
        return fast
    if runtime.is_mesh(t.device.index):
        from kohakutt.frontends.torch import mesh

        mt = mesh.view(t)
        if mt is None:
            raise DeviceError(f"this {t.device} tensor's storage is no longer live (was the mesh closed?)")
        return mt  # type: ignore[return-value]
    dtype = check_dtype(t.dtype)
    ptr = t.untyped_storage().data_ptr()
    spec = TensorSpec(tuple(t.shape), dtype)
    if ptr == 0:  # a zero-byte storage: no buffer behind it
        empty = _EMPTY.get(t.device.index or 0)
        if empty is None or not empty.buffer.is_live:
            dev = runtime.device(t.device.index or 0)
            empty = _EMPTY[t.device.index or 0] = DeviceTensor(dev.allocate(8), TensorSpec((0,), DType.UINT8))
        return DeviceTensor(empty.buffer, spec, tuple(t.stride()), 0)
    buf, off = runtime.buffer_of(ptr)
    return DeviceTensor(buf, spec, tuple(t.stride()), off // t.element_size() + t.storage_offset())
