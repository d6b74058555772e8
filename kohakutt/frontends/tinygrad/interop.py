"""Tensors crossing between the torch frontend (``tt``) and KTT without a host copy: both name the same hal buffer.

A tt storage's data pointer is its hal buffer's device address, so ``Tensor.from_blob(t.data_ptr(), shape,
device="KTT")`` already maps a tinygrad tensor onto it (the KTT allocator resolves the address with
``Device.buffer_at``); :func:`from_torch` does that and keeps the torch tensor alive as long as the tinygrad buffer.
The way back is DLPack: torch maps DLPack's ``kDLExtDev`` to its PrivateUse1 device (``tt``), and the DLPack deleter,
called when the torch storage dies, releases the tinygrad buffer it kept alive. Both frontends queue on the chip's
current stream, so work queued by one is ordered before work the other queues later; nothing synchronizes.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from typing import TYPE_CHECKING, Any

from kohakutt.errors import BufferUseError, DtypeError
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType as TGDType

if TYPE_CHECKING:
    import torch

_KDL_EXT_DEV = 12  # DLPack's device type for an out-of-tree device: torch's PrivateUse1 ("tt")
_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_BOOL = 0, 1, 2, 4, 6


def _dtype_table() -> list[tuple[Any, TGDType, tuple[int, int]]]:
    import torch

    return [
        (torch.float32, dtypes.float32, (_KDL_FLOAT, 32)),
        (torch.bfloat16, dtypes.bfloat16, (_KDL_BFLOAT, 16)),
        (torch.int32, dtypes.int32, (_KDL_INT, 32)),
        (torch.uint32, dtypes.uint32, (_KDL_UINT, 32)),
        (torch.uint16, dtypes.uint16, (_KDL_UINT, 16)),
        (torch.uint8, dtypes.uint8, (_KDL_UINT, 8)),
        (torch.bool, dtypes.bool, (_KDL_BOOL, 8)),
    ]


def _no_dtype(dtype: Any, side: str) -> DtypeError:
    names = ", ".join(str(t).removeprefix("torch.") for t, _, _ in _dtype_table())
    return DtypeError(
        f"a {side} tensor of dtype {dtype} cannot cross between torch and KTT: the shared dtypes are {names}"
    )


def from_torch(t: torch.Tensor) -> Tensor:
    """A tinygrad tensor on KTT over ``t``'s storage (a contiguous tensor on ``tt``): no copy; writes through either
    are seen by the other. The torch tensor is kept alive as long as the tinygrad buffer."""
    if t.device.type != "tt":
        raise BufferUseError(f"from_torch takes a tensor on tt, not {t.device}: move it with t.to('tt') first")
    if not t.is_contiguous():
        raise BufferUseError("from_torch takes a contiguous tt tensor: call t.contiguous() first (a copy on the card)")
    dtype = next((tg for th, tg, _ in _dtype_table() if th == t.dtype), None)
    if dtype is None:
        raise _no_dtype(t.dtype, "torch")
    chip = t.device.index or 0
    device = "KTT" if chip == 0 else f"KTT:{chip}"
    if t.numel() == 0:
        return Tensor.empty(*t.shape, dtype=dtype, device=device)
    out = Tensor.from_blob(t.data_ptr(), tuple(t.shape), dtype=dtype, device=device)
    out.uop.buffer._buf.keepalive = t  # type: ignore[union-attr]
    return out


# ------------------------------------------------------------------------------------------------------ DLPack
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_lock = threading.Lock()
_ids = itertools.count(1)
_exported: dict[int, tuple[Any, ...]] = {}  # manager_ctx -> what must live until torch lets go (struct, shape, buffer)


@_DELETER
def _release(managed: Any) -> None:
    with _lock:
        _exported.pop(int(managed.contents.manager_ctx or 0), None)


def _capsule(address: int) -> Any:
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, b"dltensor", None)


def exported() -> int:
    """How many KTT buffers torch tensors made by :func:`to_torch` still hold."""
    with _lock:
        return len(_exported)


def to_torch(t: Tensor) -> torch.Tensor:
    """A torch tensor on ``tt`` over ``t``'s buffer (``t`` is realized first, made contiguous on the card if it is a
    view): no host copy. The tinygrad buffer stays alive while the torch storage does."""
    import torch

    import kohakutt.frontends.torch as tt

    if not isinstance(t.device, str) or t.device.split(":")[0] != "KTT":
        raise BufferUseError(f"to_torch takes a tensor on KTT, not {t.device}: move it with t.to('KTT') first")
    entry = next((e for e in _dtype_table() if e[1] == t.dtype), None)
    if entry is None:
        raise _no_dtype(t.dtype, "tinygrad")
    chip = int(t.device.split(":")[1]) if ":" in t.device else 0
    tt.device(chip)  # the tt device exists (and shares chip ``chip``'s open hal device)
    if t.numel() == 0:
        return torch.empty(tuple(t.shape), dtype=entry[0], device=torch.device("tt", chip))
    t = t.contiguous().realize()
    buf = t.uop.base.buffer
    kb = buf.ensure_allocated()._buf
    shape = (ctypes.c_int64 * max(t.ndim, 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.ndim, 1))()
    acc = 1
    for i in range(t.ndim - 1, -1, -1):
        strides[i] = acc
        acc *= t.shape[i]
    code, bits = entry[2]
    ctx = next(_ids)
    managed = _DLManagedTensor(
        _DLTensor(
            kb.buf.data_ptr + kb.offset, _DLDevice(_KDL_EXT_DEV, chip), t.ndim, _DLDataType(code, bits, 1), shape,
            strides, 0,
        ),
        ctx,
        _release,
    )  # fmt: skip
    with _lock:
        _exported[ctx] = (managed, shape, strides, buf)
    return torch.from_dlpack(_capsule(ctypes.addressof(managed)))


__all__ = ["exported", "from_torch", "to_torch"]
