"""torch tensors on ``tt`` as the op library sees them, and new tt tensors from Python.

A tt tensor's storage is a raw HAL buffer (its data pointer is the buffer's address), so a tensor is exactly a
:class:`~kohakutt.kernels.tensor.DeviceTensor`: that buffer viewed with the tensor's sizes, strides and offset.
Views made by PyTorch share the buffer, so in-place writes through a view land in the base.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from kohakutt.errors import DtypeError
from kohakutt.frontends.torch import runtime
from kohakutt.hal.device import Device
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import DeviceTensor

TO_IR: dict[torch.dtype, DType] = {
    torch.float32: DType.FLOAT32,
    torch.bfloat16: DType.BFLOAT16,
    torch.int32: DType.INT32,
    torch.int64: DType.INT64,
    torch.bool: DType.BOOL,
    torch.uint8: DType.UINT8,
    torch.uint16: DType.UINT16,
    torch.uint32: DType.UINT32,
}
FROM_IR: dict[DType, torch.dtype] = {v: k for k, v in TO_IR.items()}

_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
_empty_tensor = torch._C._acc.create_empty_tensor
_EMPTY: dict[int, DeviceTensor] = {}  # chip -> a one-word buffer standing in for zero-byte storages


def check_dtype(dtype: torch.dtype, use: str = "a tt tensor") -> DType:
    """The IR dtype of ``dtype``, or a DtypeError saying what the card holds instead."""
    ir = TO_IR.get(dtype)
    if ir is None:
        hint = {
            torch.float64: "float32",
            torch.float16: "bfloat16 (or float32)",
            torch.complex64: "two float32 tensors (real, imaginary)",
            torch.complex128: "two float32 tensors (real, imaginary)",
        }.get(dtype, "int32 or float32")
        raise DtypeError(
            f"{use} cannot be {dtype}: the card holds float32, bfloat16, int32 (int64 as storage), "
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
    """An uninitialised tt tensor (zeros on the simulator) of ``size`` and ``stride`` on ``tt:<index>``."""
    check_dtype(dtype)
    size = [int(s) for s in size]
    if stride is None:
        stride, acc = [0] * len(size), 1
        for i in range(len(size) - 1, -1, -1):
            stride[i] = acc
            acc *= max(size[i], 1)
    span = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    storage = torch.UntypedStorage(span * dtype.itemsize, device=torch.device("tt", index))
    t = _empty_tensor([0], dtype)
    if index != 0:  # torch's helper makes the tensor on tt:0: move it to the storage's chip first
        runtime.adopt_storage(t, storage)
    _set_storage.redispatch(_CPU, t, storage, 0, size, list(stride))
    return t


def new_like(meta: torch.Tensor, index: int) -> torch.Tensor:
    """A tt tensor with ``meta``'s sizes, strides and dtype."""
    return new(meta.shape, meta.stride(), meta.dtype, index)


def device_of(t: torch.Tensor) -> Device:
    return runtime.device(t.device.index or 0)


def to_device_tensor(t: torch.Tensor) -> DeviceTensor:
    """``t`` as the op library's view of its storage's buffer."""
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
