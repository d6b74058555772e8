"""A real Blackhole card through TT-NN (checked against ttnn 0.81.1): each HAL buffer is one TT-NN device tensor.

``ttnn`` is imported only when this backend is asked whether it can run or is opened, so the rest of Kohaku-TT
imports without it. Every TT-NN name used here, and those later layers will use (traces, events, meshes,
collectives, compute kernel configs), is listed in :data:`TTNN_NAMES`; the keyword arguments passed by name are in
:data:`TTNN_SIGNATURES`. ``tests/hal/test_ttnn_contract.py`` checks both against the installed package.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import numpy as np

from kohakutt.errors import BackendUnavailable, BufferUseError, DeviceError, FormatError
from kohakutt.hal.backends.base import Backend
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import TILE, Format, Layout, MemoryKind
from kohakutt.hal.layout import nbytes as layout_nbytes

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.program import Program

TTNN_VERSION = "0.81.1"

# Opening parameters. L1_SMALL is where conv / pool and collective semaphores allocate (TT-NN's default is 0, which
# makes those ops fail); the trace region holds captured command lists (TT-NN's default is 0: no trace at all).
L1_SMALL_SIZE = 32768
TRACE_REGION_SIZE = 64 << 20
NUM_COMMAND_QUEUES = 2

# Every TT-NN name this backend uses or later layers will, as dotted paths from the ``ttnn`` module.
# fmt: off
TTNN_NAMES: tuple[str, ...] = (
    # devices
    "open_device", "close_device", "synchronize_device", "GetNumAvailableDevices", "get_arch_name", "Arch.BLACKHOLE",
    "SetDefaultDevice", "GetDefaultDevice",
    "MeshDevice", "MeshDevice.arch", "MeshDevice.compute_with_storage_grid_size", "MeshDevice.dram_grid_size",
    "MeshDevice.get_device_ids", "MeshCoordinate", "device.DEFAULT_L1_SMALL_SIZE", "device.DEFAULT_TRACE_REGION_SIZE",
    # tensors and their memory
    "Tensor", "Tensor.cpu", "Tensor.host_buffer", "Tensor.buffer_address", "Tensor.spec", "TensorSpec", "Shape",
    "DataType", "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16", "uint8",
    "Layout", "TILE_LAYOUT", "ROW_MAJOR_LAYOUT", "BufferType.DRAM", "BufferType.L1", "TensorMemoryLayout.INTERLEAVED",
    "MemoryConfig", "DRAM_MEMORY_CONFIG", "L1_MEMORY_CONFIG", "L1_HEIGHT_SHARDED_MEMORY_CONFIG",
    "L1_WIDTH_SHARDED_MEMORY_CONFIG", "L1_BLOCK_SHARDED_MEMORY_CONFIG", "ShardSpec", "create_sharded_memory_config",
    "allocate_tensor_on_device", "allocate_tensor_on_host", "copy_host_to_device_tensor",
    "copy_device_to_host_tensor", "deallocate", "copy", "to_device", "from_device", "from_torch", "to_torch",
    "typecast", "to_layout", "to_memory_config",
    # programs
    "generic_op", "ProgramDescriptor", "KernelDescriptor", "KernelDescriptor.SourceType.SOURCE_CODE",
    "KernelDescriptor.SourceType.FILE_PATH", "CBDescriptor", "CBFormatDescriptor", "SemaphoreDescriptor",
    "ReaderConfigDescriptor", "WriterConfigDescriptor", "ComputeConfigDescriptor", "DataMovementConfigDescriptor",
    "TensorAccessorArgs",
    "TensorAccessorArgs.get_compile_time_args", "RuntimeArgs", "CoreCoord", "CoreRange", "CoreRangeSet",
    # numerics
    "MathFidelity.LoFi", "MathFidelity.HiFi2", "MathFidelity.HiFi3", "MathFidelity.HiFi4",
    "init_device_compute_kernel_config", "WormholeComputeKernelConfig",
    # traces, queues, events
    "begin_trace_capture", "end_trace_capture", "execute_trace", "release_trace", "command_queue",
    "record_event", "wait_for_event", "event_synchronize",
    # meshes and collectives
    "open_mesh_device", "close_mesh_device", "MeshShape", "shard_tensor_to_mesh_mapper",
    "replicate_tensor_to_mesh_mapper", "concat_mesh_to_tensor_composer", "all_gather", "reduce_scatter", "all_reduce",
)

# The keyword names Kohaku-TT passes to each TT-NN callable (the ones used here and the ones later layers rely on).
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "open_device": ("device_id", "l1_small_size", "trace_region_size", "num_command_queues"),
    "close_device": ("device",),
    "synchronize_device": ("device", "cq_id"),
    "TensorSpec": ("shape", "dtype", "layout", "buffer_type"),
    "allocate_tensor_on_device": ("tensor_spec", "mesh_device"),
    "allocate_tensor_on_host": ("tensor_spec", "mesh_device"),
    "copy_host_to_device_tensor": ("host_tensor", "device_tensor", "cq_id"),
    "copy_device_to_host_tensor": ("device_tensor", "host_tensor", "blocking", "cq_id"),
    "deallocate": ("tensor", "force"),
    "copy": ("input_a", "input_b"),
    "Tensor": ("tensor", "data_type", "device", "layout", "mem_config", "pad_value"),
    "Tensor.cpu": ("blocking", "cq_id"),
    "to_device": ("tensor", "device", "memory_config"),
    "from_device": ("tensor", "blocking"),
    "from_torch": ("tensor", "dtype", "layout", "device", "memory_config", "mesh_mapper"),
    "to_torch": ("tensor", "mesh_composer"),
    "typecast": ("input_tensor", "dtype", "memory_config"),
    "generic_op": ("io_tensors", "program_descriptor"),
    "ProgramDescriptor": ("kernels", "semaphores", "cbs"),
    "KernelDescriptor": ("kernel_source", "source_type", "core_ranges", "compile_time_args", "defines",
                         "runtime_args", "common_runtime_args", "config"),
    "CBDescriptor": ("total_size", "core_ranges", "format_descriptors"),
    "CBFormatDescriptor": ("buffer_index", "data_format", "page_size"),
    "SemaphoreDescriptor": ("id", "core_ranges", "initial_value"),
    "ComputeConfigDescriptor": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "dst_full_sync_en"),
    "TensorAccessorArgs": ("tensor",),
    "init_device_compute_kernel_config": ("arch", "math_fidelity", "math_approx_mode", "fp32_dest_acc_en",
                                          "packer_l1_acc", "dst_full_sync_en"),
    "WormholeComputeKernelConfig": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc",
                                    "dst_full_sync_en"),
    "begin_trace_capture": ("mesh_device", "cq_id"),
    "end_trace_capture": ("mesh_device", "trace_id", "cq_id"),
    "execute_trace": ("mesh_device", "trace_id", "cq_id", "blocking"),
    "release_trace": ("mesh_device", "trace_id"),
    "command_queue": ("cq_id",),
    "record_event": ("mesh_device", "cq_id"),
    "wait_for_event": ("cq_id", "mesh_event"),
    "event_synchronize": ("mesh_event",),
    "open_mesh_device": ("mesh_shape", "l1_small_size", "trace_region_size", "num_command_queues"),
    "close_mesh_device": ("mesh_device",),
    "shard_tensor_to_mesh_mapper": ("mesh_device", "dim"),
    "replicate_tensor_to_mesh_mapper": ("mesh_device",),
    "concat_mesh_to_tensor_composer": ("mesh_device", "dim"),
    "all_gather": ("input_tensor", "dim", "cluster_axis", "memory_config"),
    "reduce_scatter": ("input_tensor", "dim", "cluster_axis", "memory_config"),
    "all_reduce": ("input_tensor", "cluster_axis", "memory_config"),
}
# fmt: on

# Formats a device-side ``ttnn.copy`` handles bit for bit; the others go through the host (block floats would be
# unpacked and packed again).
_DEVICE_COPY_FORMATS = frozenset({Format.FLOAT32, Format.BFLOAT16, Format.INT32, Format.UINT32})


def import_ttnn() -> Any:
    """Import ``ttnn`` (quietly: TT-Metal logs every failed card probe at ``critical``) or raise ImportError."""
    if "ttnn" not in sys.modules:
        # Only defaults: a user who sets these sees TT-Metal's and TT-NN's own logs again.
        os.environ.setdefault("TT_LOGGER_LEVEL", "off")
        os.environ.setdefault("LOGURU_LEVEL", "WARNING")
    import ttnn

    return ttnn


def _first_lines(e: BaseException, n: int = 3) -> str:
    """An exception's message without TT-Metal's backtrace."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and ln.strip() not in ("info:", "backtrace:")]
    keep = []
    for ln in lines:
        if ln.startswith("---") or (ln[:1].isdigit() and ". " in ln[:5]):
            break  # backtrace frames
        keep.append(ln)
    return "; ".join(keep[:n]) or type(e).__name__


@dataclass(frozen=True)
class Geometry:
    """The TT-NN tensor that holds a HAL buffer's bytes page for page."""

    shape: tuple[int, ...]
    fmt: Format
    layout: Layout
    kind: MemoryKind

    @property
    def nbytes(self) -> int:
        return layout_nbytes(self.shape, self.fmt, self.layout)


def geometry(buf: Buffer) -> Geometry:
    """The tensor shape, format and layout that give ``buf``'s pages on the card (a tile per page in tile layout;
    a row per page in row-major layout, so interleaving spreads the same pages over the same banks)."""
    fmt, layout, kind = Format.of(buf.fmt), Layout.of(buf.layout), MemoryKind.of(buf.kind)
    pages = -(-buf.nbytes // buf.page_size) if buf.nbytes else 0
    if layout is Layout.TILE:
        if buf.page_size != fmt.tile_bytes:
            raise FormatError(
                f"{buf!r}: a tile buffer's page is one {fmt.value} tile ({fmt.tile_bytes} bytes), "
                f"not {buf.page_size}; allocate it without page_size"
            )
        if buf.shape is None:
            return Geometry((TILE, TILE * pages), fmt, layout, kind)
        return Geometry(tuple(buf.shape) or (1, 1), fmt, layout, kind)
    size = fmt.itemsize
    shape = tuple(buf.shape) if buf.shape is not None else ()
    if shape and shape[-1] * size == buf.page_size and math.prod(shape) * size == buf.nbytes:
        return Geometry(shape, fmt, layout, kind)
    if buf.page_size % size:
        return Geometry((pages, buf.page_size), Format.UINT8, layout, kind)
    return Geometry((pages, buf.page_size // size), fmt, layout, kind)


def tensor_spec(ttnn: Any, geo: Geometry) -> Any:
    """The ``ttnn.TensorSpec`` of a geometry (interleaved in DRAM or L1)."""
    return ttnn.TensorSpec(
        shape=ttnn.Shape(list(geo.shape)),
        dtype=getattr(ttnn, geo.fmt.value),
        layout=ttnn.TILE_LAYOUT if geo.layout is Layout.TILE else ttnn.ROW_MAJOR_LAYOUT,
        buffer_type=ttnn.BufferType.L1 if geo.kind is MemoryKind.L1 else ttnn.BufferType.DRAM,
    )


def host_bytes(ttnn: Any, host_tensor: Any) -> np.ndarray:
    """A read-only uint8 view of a host tensor's storage: tiles in face order, block floats packed, as on the card."""
    shard = host_tensor.host_buffer().get_shard(ttnn.MeshCoordinate([0, 0]))
    return np.from_dlpack(shard).view(np.uint8).reshape(-1)


def host_tensor_from_bytes(ttnn: Any, geo: Geometry, raw: np.ndarray, mesh_device: Any = None) -> Any:
    """A new host tensor of ``geo`` whose storage is exactly ``raw`` (no value conversion, so padding, NaN payloads
    and packed block floats survive)."""
    spec = tensor_spec(ttnn, geo)
    if mesh_device is not None:
        host = ttnn.allocate_tensor_on_host(tensor_spec=spec, mesh_device=mesh_device)
    else:  # no card: let TT-NN build a zero tensor of the same spec
        zeros = np.zeros(geo.shape, dtype=np.float32 if geo.fmt.is_float else np.int64)
        host = ttnn.Tensor(tensor=zeros, data_type=getattr(ttnn, geo.fmt.value), device=None, layout=spec.layout)
    view = host_bytes(ttnn, host)
    if view.size != raw.size:
        raise FormatError(
            f"TT-NN stores a {geo.fmt.value} {geo.layout.value} tensor of shape {geo.shape} in "
            f"{view.size} bytes, Kohaku-TT in {raw.size}; the two layouts disagree"
        )
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    # TT-NN has no constructor from packed bytes, and numpy < 2 marks DLPack views read-only: the tensor was just
    # allocated and is referenced nowhere else, so filling its storage in place is safe.
    ctypes.memmove(view.ctypes.data, raw.ctypes.data, raw.size)
    return host


@dataclass
class TTNNBuffer:
    """What :meth:`TTNNBackend.create` returns: the device tensor behind a HAL buffer."""

    tensor: Any
    geometry: Geometry
    staging: list[Any] = field(default_factory=list)  # host tensors kept alive until the card has read them


class TTNNBackend(Backend):
    """One Blackhole chip through TT-NN: buffers are interleaved device tensors, programs run by ``generic_op``."""

    name = "ttnn"

    def __init__(self, chip_id: int):
        super().__init__(chip_id)
        self.ttnn: Any = None
        self.device: Any = None

    # ------------------------------------------------------------------------------------------ availability
    @classmethod
    def _probe(cls) -> tuple[Any, int]:
        """The ttnn module and how many chips answer; raises BackendUnavailable with the reason."""
        try:
            ttnn = import_ttnn()
        except ImportError as e:
            v = sys.version_info
            raise BackendUnavailable(
                f"ttnn is not installed for this Python ({v.major}.{v.minor}.{v.micro} at {sys.executable}): {e}; "
                f"TT-NN {TTNN_VERSION} has wheels for Python 3.10 and 3.12 only (scripts/ttnn_venv.sh makes a "
                "3.12 environment with it)"
            ) from None
        except Exception as e:
            raise BackendUnavailable(f"ttnn is installed but failed to import: {_first_lines(e)}") from None
        try:
            n = int(ttnn.GetNumAvailableDevices())
        except Exception as e:
            raise BackendUnavailable(f"ttnn {_version(ttnn)} imports but no card answered: {_first_lines(e)}") from None
        if n < 1:
            raise BackendUnavailable(f"ttnn {_version(ttnn)} imports but sees no Tenstorrent chip")
        return ttnn, n

    @classmethod
    def available(cls) -> tuple[bool, str]:
        try:
            ttnn, n = cls._probe()
        except BackendUnavailable as e:
            return False, str(e)
        return True, f"ttnn {_version(ttnn)} sees {n} chip{'s' if n != 1 else ''} ({ttnn.get_arch_name()})"

    @classmethod
    def device_count(cls) -> int:
        """How many chips TT-NN can open here; raises BackendUnavailable with the reason when none."""
        return cls._probe()[1]

    # ---------------------------------------------------------------------------------------------- lifetime
    def open(self) -> None:
        ttnn, _ = self._probe()
        try:
            self.device = ttnn.open_device(
                device_id=self.chip_id,
                l1_small_size=L1_SMALL_SIZE,
                trace_region_size=TRACE_REGION_SIZE,
                num_command_queues=NUM_COMMAND_QUEUES,
            )
        except Exception as e:
            raise BackendUnavailable(
                f"ttnn {_version(ttnn)} could not open chip {self.chip_id}: {_first_lines(e)}"
            ) from None
        self.ttnn = ttnn
        if self.chip_id == 0:  # the op library's creation and random ops make their tensors on TT-NN's default device
            ttnn.SetDefaultDevice(self.device)

    def card(self) -> CardSpec:
        """The P150A's figures with the compute grid and DRAM banks the device reports (13 x 10 and 8 on a P150 with
        TT-NN 0.81.1; a harvested chip has fewer columns)."""
        try:
            grid = self.device.compute_with_storage_grid_size()
            banks = int(self.device.dram_grid_size().x)
            return dataclasses.replace(P150A, grid=(int(grid.x), int(grid.y)), dram_banks=banks)
        except Exception:
            return P150A

    def close(self) -> None:
        if self.device is not None:
            self.ttnn.close_device(device=self.device)
            self.device = None

    def synchronize(self) -> None:
        """Wait until every command queue of the chip has finished."""
        self._check_open("synchronize")
        self.ttnn.synchronize_device(device=self.device)

    def _check_open(self, use: str) -> None:
        if self.device is None:
            raise DeviceError(f"{use}: the ttnn backend of chip {self.chip_id} is not open; open the device first")

    # ----------------------------------------------------------------------------------------------- buffers
    def create(self, buf: Buffer) -> TTNNBuffer | None:
        self._check_open("create")
        if buf.nbytes == 0:
            return None  # TT-NN cannot allocate an empty tensor; nothing reads or writes it
        geo = geometry(buf)
        tensor = self.ttnn.allocate_tensor_on_device(tensor_spec=tensor_spec(self.ttnn, geo), mesh_device=self.device)
        return TTNNBuffer(tensor, geo)

    def destroy(self, buf: Buffer) -> None:
        h: TTNNBuffer | None = buf.handle
        if h is not None and self.device is not None:
            self.ttnn.deallocate(tensor=h.tensor, force=True)
        buf.handle = None

    def _handle(self, buf: Buffer, use: str) -> TTNNBuffer:
        self._check_open(use)
        if buf.handle is None:
            raise BufferUseError(f"{use}: {buf!r} has no device tensor (empty or destroyed)")
        return buf.handle

    def _read_all(self, h: TTNNBuffer) -> np.ndarray:
        host = h.tensor.cpu(blocking=True)
        return host_bytes(self.ttnn, host).copy()

    def write(self, buf: Buffer, offset: int, data: np.ndarray) -> None:
        if data.size == 0:
            return
        h = self._handle(buf, "write")
        total = h.geometry.nbytes
        if offset == 0 and data.size >= buf.nbytes:  # the whole buffer; the tensor's tail past nbytes is padding
            raw = data if data.size == total else np.concatenate([data, np.zeros(total - data.size, np.uint8)])
        else:  # TT-NN writes whole tensors: read, patch, write back
            raw = self._read_all(h)
            raw[offset : offset + data.size] = data
        host = host_tensor_from_bytes(self.ttnn, h.geometry, raw, self.device)
        self.ttnn.copy_host_to_device_tensor(host_tensor=host, device_tensor=h.tensor)
        h.staging = [host]

    def read(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        if nbytes == 0:
            return np.zeros(0, dtype=np.uint8)
        raw = self._read_all(self._handle(buf, "read"))
        return raw[offset : offset + nbytes].copy()

    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        s, d = self._handle(src, "copy source"), self._handle(dst, "copy destination")
        whole = src_offset == dst_offset == 0 and nbytes == src.nbytes == dst.nbytes
        if whole and s.geometry == d.geometry and s.geometry.fmt in _DEVICE_COPY_FORMATS:
            self.ttnn.copy(input_a=s.tensor, input_b=d.tensor)
        else:
            super().copy(src, src_offset, dst, dst_offset, nbytes)

    # ---------------------------------------------------------------------------------------------- programs
    def run_program(self, program: Program, buffers: Sequence[Buffer], runtime_args: dict[str, Any]) -> None:
        from kohakutt.hal.backends.ttnn_program import program_descriptor

        handles = [self._handle(b, f"program {program.name!r}") for b in buffers]
        addresses = [h.tensor.buffer_address() for h in handles]
        descriptor = program_descriptor(self.ttnn, program, buffers, addresses, runtime_args)
        self.ttnn.generic_op(io_tensors=[h.tensor for h in handles], program_descriptor=descriptor)

    # ------------------------------------------------------------------------------------------------- facts
    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.name, "chip": self.chip_id, "simulated": False}
        if self.device is None:
            return out
        grid = self.device.compute_with_storage_grid_size()
        dram = self.device.dram_grid_size()
        return out | {
            "ttnn_version": _version(self.ttnn),
            "arch": str(self.device.arch()).rsplit(".", 1)[-1].lower(),
            "compute_grid": f"{grid.x}x{grid.y}",
            "dram_grid": f"{dram.x}x{dram.y}",
            "device_ids": list(self.device.get_device_ids()),
            "num_command_queues": NUM_COMMAND_QUEUES,
            "l1_small_size": L1_SMALL_SIZE,
            "trace_region_size": TRACE_REGION_SIZE,
        }


def _version(ttnn: Any) -> str:
    try:
        return metadata.version("ttnn")
    except Exception:
        return getattr(ttnn, "__version__", "?")
