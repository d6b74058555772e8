"""Device tensors as the op library sees them: a view (shape, dtype, strides, offset) of a HAL buffer.

Row-major buffers hold elements in the dtype's storage form (bfloat16 as its 16 bits, bool as one byte), so a
frontend's strided views map straight onto them; tile-layout buffers hold whole tensors in tiles (block floats only
exist that way). ``read`` / ``write`` turn a view into a NumPy array and back on the simulator's worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kohakutt.errors import FormatError, IntegerOverflowError
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.device import Device
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import INT32_MAX, INT32_MIN, DType
from kohakutt.ir.dtypes import from_numpy as dtype_of
from kohakutt.ir.ops import TensorSpec

_STORAGE = {DType.FLOAT32: np.float32, DType.BFLOAT16: np.uint16, DType.FLOAT16: np.float16, DType.INT32: np.int32,
            DType.INT64: np.int64,
            DType.UINT32: np.uint32,
            DType.UINT16: np.uint16, DType.UINT8: np.uint8, DType.BOOL: np.bool_}


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


@dataclass(eq=False)
class DeviceTensor:
    """A tensor on the device: ``buffer`` viewed with element ``strides`` from element ``offset``."""

    buffer: Buffer
    spec: TensorSpec
    strides: tuple[int, ...] | None = None  # None: contiguous
    offset: int = 0

    def __post_init__(self) -> None:
        if self.spec.layout is Layout.TILE and (self.strides is not None or self.offset):
            raise FormatError("a tile-layout tensor is always whole: no strides or offset")
        if self.spec.dtype.is_block and self.spec.layout is not Layout.TILE:
            raise FormatError(f"{self.spec.dtype.value} tensors exist only in tile layout")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self) -> DType:
        return self.spec.dtype

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def is_contiguous(self) -> bool:
        return self.strides is None or self.strides == contiguous_strides(self.shape) or self.spec.numel <= 1

    def __repr__(self) -> str:
        view = "" if self.strides is None else f", strides={self.strides}, offset={self.offset}"
        return f"DeviceTensor({self.spec}{view}, buffer={self.buffer.id})"


def empty(device: Device, spec: TensorSpec) -> DeviceTensor:
    """A new contiguous tensor of ``spec`` (its values are whatever the buffer held: zeros on the sim)."""
    if spec.dtype is DType.INT64:  # no buffer format of its own: raw bytes, 8 per element
        if spec.layout is Layout.TILE:
            raise FormatError("int64 tensors exist only in row-major layout (the card has no int64 tiles)")
        return DeviceTensor(device.allocate(spec.numel * 8), spec)
    if spec.dtype is DType.FLOAT16 and spec.layout is Layout.TILE:
        raise FormatError("float16 tensors exist only in row-major layout (TT-NN has no float16 tiles)")
    buf = device.allocate(shape=spec.shape, fmt=spec.dtype.format, layout=spec.layout)
    return DeviceTensor(buf, spec)


def from_numpy(device: Device, array: np.ndarray, dtype: DType | str | None = None,
               layout: Layout | str = Layout.ROW_MAJOR) -> DeviceTensor:
    """Copy ``array`` to a new device tensor, converting to ``dtype`` (rounding as the card stores it)."""
    array = np.asarray(array)
    dt = DType.of(dtype) if dtype is not None else dtype_of(array.dtype)
    t = empty(device, TensorSpec(tuple(array.shape), dt, Layout.of(layout)))
    device.write(t.buffer, encode(t.spec, array))
    return t


def to_numpy(t: DeviceTensor) -> np.ndarray:
    """The tensor's values on the host (float formats as float32). Synchronizes."""
    raw = t.device.read(t.buffer)
    return decode(t, raw)


def free(t: DeviceTensor) -> None:
    t.device.free(t.buffer)


def encode(spec: TensorSpec, values: np.ndarray) -> np.ndarray:
    """The bytes a contiguous tensor of ``spec`` holding ``values`` has on the card."""
    from kohakutt.hal import formats

    values = np.broadcast_to(np.asarray(values), spec.shape)
    if spec.layout is Layout.TILE:
        if spec.dtype in (DType.INT64, DType.FLOAT16):
            raise FormatError(f"{spec.dtype.value} tensors exist only in row-major layout (TT-NN tiles neither)")
        if spec.dtype is DType.BOOL:
            values = values.astype(np.uint8)
        elif spec.dtype.is_float:
            values = values.astype(np.float32)
        else:
            values = values.astype(_STORAGE[spec.dtype])
        return formats.pack(values, spec.dtype.format)
    if spec.dtype is DType.BFLOAT16:
        return formats.to_bfloat16(np.ascontiguousarray(values, dtype=np.float32)).view(np.uint8).ravel()
    if spec.dtype is DType.FLOAT16:  # the packer: fp32 to half, to nearest with ties to even, overflow to +-inf
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(values.astype(np.float32, copy=False).astype(np.float16)).view(np.uint8).ravel()
    return np.ascontiguousarray(values.astype(_STORAGE[spec.dtype], copy=False)).view(np.uint8).ravel()


def decode(t: DeviceTensor, raw: np.ndarray) -> np.ndarray:
    """The values of view ``t`` given its buffer's bytes ``raw`` (a new array: float formats as float32)."""
    from kohakutt.hal import formats

    spec = t.spec
    if spec.layout is Layout.TILE:
        out = formats.unpack(raw, spec.shape, spec.dtype.format)
        return out.astype(np.bool_) if spec.dtype is DType.BOOL else out
    st = np.dtype(_STORAGE[spec.dtype])
    flat = raw[: raw.size // st.itemsize * st.itemsize].view(st)
    if t.strides is None:
        view = flat[t.offset : t.offset + spec.numel].reshape(spec.shape)
    else:
        if spec.numel and t.offset + sum((n - 1) * s for n, s in zip(spec.shape, t.strides) if n) >= flat.size:
            raise FormatError(f"view {t} reaches past its buffer of {flat.size} elements")
        view = np.lib.stride_tricks.as_strided(flat[t.offset :], spec.shape, tuple(s * st.itemsize for s in t.strides))
    if spec.dtype is DType.BFLOAT16:
        return formats.from_bfloat16(np.ascontiguousarray(view)).reshape(spec.shape)  # ascontiguousarray makes 0-d 1-d
    if spec.dtype is DType.FLOAT16:  # the unpacker: every half is exactly a float32
        return view.astype(np.float32)
    return np.array(view, copy=True)


def check_int32(op: str, what: str, values: np.ndarray) -> None:
    """Raise :class:`IntegerOverflowError` when int64 ``values`` (an operand or result of ``op``, which the card
    computes in int32) leave the int32 range; the card's test is that each high word is its low word's sign."""
    if values.size and (values.min() < INT32_MIN or values.max() > INT32_MAX):
        bad = values[(values < INT32_MIN) | (values > INT32_MAX)].reshape(-1)[0]
        raise IntegerOverflowError(
            f"{op}: its int64 {what} holds {bad}, outside int32 [{INT32_MIN}, {INT32_MAX}], and the card computes "
            f"{op} on int64 in int32 (only data movement, add, sub, mul, compares, min / max, where, bitwise ops, "
            "sum and cumsum are exact in 64 bits); keep such values on the host, or compute in float32"
        )


def store(t: DeviceTensor, raw: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` into view ``t`` of the buffer bytes ``raw``, converted to its dtype as the packer does."""
    spec = t.spec
    values = np.asarray(values)
    if values.shape != spec.shape:
        values = np.broadcast_to(values, spec.shape)
    if spec.layout is Layout.TILE or t.is_contiguous:
        data = encode(spec, values)
        start = 0 if spec.layout is Layout.TILE else t.offset * spec.dtype.itemsize
        raw[start : start + data.size] = data
        return
    st = np.dtype(_STORAGE[spec.dtype])
    flat = raw[: raw.size // st.itemsize * st.itemsize].view(st)
    view = np.lib.stride_tricks.as_strided(flat[t.offset :], spec.shape, tuple(s * st.itemsize for s in t.strides))
    view[...] = encode(TensorSpec(spec.shape, spec.dtype), values).view(st).reshape(spec.shape)
