"""Tensor creation, views, copies and host reads: the kernels every tt tensor needs.

Views are PyTorch's own: the CPU kernels of ``view`` / ``as_strided`` / ``set_`` only touch metadata, so they are
redispatched with the tt tensor and the result keeps the tt device and shares the storage.
"""

from __future__ import annotations

from typing import Any

import torch
from kohakutt.frontends.torch import runtime, tensors
from kohakutt.frontends.torch.aten.registry import _same_device_error, ir, kernel

_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
aten = torch.ops.aten


def _redispatch(name: str) -> Any:
    packet, _, ov = name.partition(".")
    op = getattr(getattr(aten, packet), ov or "default")

    def fn(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_CPU, *args, **kwargs)

    fn.__name__ = f"tt_{name.replace('.', '_')}"
    return fn


for _name in (
    "view",
    "as_strided",
    "_reshape_alias",
    "unfold",
    "set_.source_Storage_storage_offset",
    "set_.source_Storage",
    "alias",
    "_unsafe_view",
    "view.dtype",
):
    kernel(_name, kind="view")(_redispatch(_name))


@kernel("record_stream", kind="view")
def record_stream(self: torch.Tensor, s: torch.Stream) -> None:
    """The storage's memory is not reused until work queued on ``s`` so far has run (as on CUDA)."""
    runtime.record_stream(self.untyped_storage().data_ptr(), s.device_index, s.stream_id)


@kernel("set_.source_Tensor", kind="view")
def set_tensor(self: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    return aten.set_.source_Storage_storage_offset.redispatch(
        _CPU, self, source.untyped_storage(), source.storage_offset(), source.shape, source.stride()
    )


@kernel("set_", kind="view")
def set_empty(self: torch.Tensor) -> torch.Tensor:
    storage = torch.UntypedStorage(0, device=self.device)
    return aten.set_.source_Storage_storage_offset.redispatch(_CPU, self, storage, 0, [0], [1])


@kernel("empty.memory_format", kind="view")
def empty(
    size: list[int],
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    index = tensors.index_of(device)
    if memory_format in (torch.channels_last, torch.channels_last_3d):
        meta = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format)
        return tensors.new(size, meta.stride(), dtype, index)
    return tensors.new(size, None, dtype, index)


@kernel("empty_strided", kind="view")
def empty_strided(
    size: list[int],
    stride: list[int],
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
) -> torch.Tensor:
    return tensors.new(size, stride, dtype or torch.get_default_dtype(), tensors.index_of(device))


@kernel("empty_like", kind="view")
def empty_like(
    self: torch.Tensor,
    dtype: torch.dtype | None = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    """PyTorch's ``empty_like`` (its strides, from the meta kernel); on the mesh the new storage takes its input's
    placement when first written (optimizer state lands where its parameter is)."""
    meta = torch.empty_like(
        torch.empty_strided(self.shape, self.stride(), dtype=self.dtype, device="meta"),
        dtype=dtype,
        memory_format=memory_format or torch.preserve_format,
    )
    target = torch.device(device) if device is not None else self.device
    out = torch.empty_strided(
        meta.shape, meta.stride(), dtype=meta.dtype, device=target, pin_memory=bool(pin_memory) and target.type == "cpu"
    )
    if runtime.is_mesh(target.index) and self.device == target:
        from kohakutt.frontends.torch import mesh

        mesh.inherit(out, self)
    return out


@kernel("resize_", kind="view")
def resize_(self: torch.Tensor, size: list[int], memory_format: torch.memory_format | None = None) -> torch.Tensor:
    if memory_format is None and list(self.shape) == [int(s) for s in size]:
        return self  # as on the CPU: the same sizes keep the strides
    meta = torch.empty(size, dtype=self.dtype, device="meta", memory_format=memory_format or torch.contiguous_format)
    need = (
        self.storage_offset()
        + (1 + sum((s - 1) * st for s, st in zip(meta.shape, meta.stride())) if meta.numel() else 0)
    ) * self.element_size()
    storage = self.untyped_storage()
    if need > storage.nbytes():
        storage.resize_(need)  # the glue's hook: a new buffer, old bytes copied on the stream
    return aten.set_.source_Storage_storage_offset.redispatch(
        _CPU, self, storage, self.storage_offset(), meta.shape, meta.stride()
    )


# ---------------------------------------------------------------------------------------------------- copies
def _span(t: torch.Tensor) -> tuple[int, int]:
    """First element and element count of the storage range ``t`` touches."""
    if t.numel() == 0:
        return t.storage_offset(), 0
    lo = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st < 0)
    hi = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st > 0)
    return lo, hi - lo + 1


def read_host(src: torch.Tensor) -> torch.Tensor:
    """The values of tt tensor ``src`` as a new CPU tensor of the same dtype (bit for bit). Synchronizes."""
    index = src.device.index or 0
    if runtime.is_mesh(index):
        from kohakutt.frontends.torch import mesh

        return mesh.read_host(src)
    if src.numel() == 0:
        return torch.empty(src.shape, dtype=src.dtype)
    lo, count = _span(src)
    buf, off = runtime.buffer_of(src.untyped_storage().data_ptr())
    raw = runtime.device(index).read(
        buf, off + lo * src.element_size(), count * src.element_size(), stream=runtime.current_stream(index)
    )
    flat = torch.frombuffer(bytearray(raw.tobytes()), dtype=src.dtype)
    return flat.as_strided(src.shape, src.stride(), src.storage_offset() - lo).clone()


def write_host(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy CPU tensor ``src`` (broadcast, converted to ``dst``'s dtype) into tt tensor ``dst``."""
    index = dst.device.index or 0
    tensors.check_dtype(dst.dtype)
    host = src.to(dst.dtype).expand(dst.shape)
    if dst.numel() == 0:
        return
    if runtime.is_mesh(index):
        from kohakutt.frontends.torch import mesh

        mesh.write_host(dst, host)
        return
    if dst.is_contiguous():
        buf, off = runtime.buffer_of(dst.untyped_storage().data_ptr())
        data = host.contiguous().reshape(-1).view(torch.uint8).numpy()
        runtime.device(index).write(
            buf, data, off + dst.storage_offset() * dst.element_size(), stream=runtime.current_stream(index)
        )
        return
    tmp = tensors.new(dst.shape, None, dst.dtype, index)
    write_host(tmp, host)
    ir("copy", [tmp], None, [dst], index)


def copy_device(dst: torch.Tensor, src: torch.Tensor) -> None:
    """tt to tt, with broadcasting and a dtype conversion as the card's packer does it."""
    index = dst.device.index or 0
    if (src.device.index or 0) != index:  # across chips: through the host (no chip-to-chip link modelled yet)
        write_host(dst, read_host(src))
        return
    if dst.numel() == 0:
        return
    if (
        src.dtype == dst.dtype
        and src.shape == dst.shape
        and src.is_contiguous()
        and dst.is_contiguous()
        and not runtime.is_mesh(index)
    ):
        sbuf, soff = runtime.buffer_of(src.untyped_storage().data_ptr())
        dbuf, doff = runtime.buffer_of(dst.untyped_storage().data_ptr())
        n = src.numel() * src.element_size()
        runtime.device(index).copy(
            sbuf,
            dbuf,
            src_offset=soff + src.storage_offset() * src.element_size(),
            dst_offset=doff + dst.storage_offset() * dst.element_size(),
            nbytes=n,
            stream=runtime.current_stream(index),
        )
        return
    if src.shape != dst.shape:
        src = src.expand(dst.shape)
    ir("copy", [src], None, [dst], index)


@kernel("_copy_from", ir=("copy",))
def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if self.device.type == "tt" and dst.device.type == "tt":
        copy_device(dst, self)
    elif dst.device.type == "tt":
        if self.device.type != "cpu":
            raise _same_device_error({str(self.device), str(dst.device)})
        write_host(dst, self)
    else:
        if dst.device.type != "cpu":
            raise _same_device_error({str(self.device), str(dst.device)})
        src = self if self.shape == dst.shape else self.expand(dst.shape)
        dst.copy_(read_host(src))
    return dst


@kernel("_copy_from_and_resize", ir=("copy",))
def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_from(self, dst)


@kernel("_local_scalar_dense")
def local_scalar_dense(self: torch.Tensor) -> Any:
    return read_host(self).item()


@kernel("fill_.Scalar", ir=("full",))
def fill_scalar(self: torch.Tensor, value: Any) -> torch.Tensor:
    index = self.device.index or 0
    ir(
        "full",
        [],
        {"shape": tuple(self.shape), "value": value, "dtype": tensors.check_dtype(self.dtype).value},
        [self],
        index,
    )
    return self


@kernel("fill_.Tensor", ir=("full", "expand", "copy"))
def fill_tensor(self: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    if value.dim() != 0:
        raise RuntimeError(
            f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
        )
    if value.device.type != "tt":
        return fill_scalar(self, value.item())
    copy_device(self, value.expand(self.shape))
    return self


@kernel("zero_", ir=("full",))
def zero_(self: torch.Tensor) -> torch.Tensor:
    return fill_scalar(self, 0)
