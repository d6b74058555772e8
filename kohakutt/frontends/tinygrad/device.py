"""The tinygrad device "KTT": an allocator over hal buffers, and programs that run tile programs through the op library.

The device shares the process's one open hal device (``hal.open_device(chip)``, reference-counted) with every other
frontend, so buffers, allocator statistics and streams are common. tinygrad buffers are raw hal buffers (row-major
bytes, tinygrad's own layout); views (tinygrad's memory planner sub-allocates with byte offsets) are
:class:`KTTBuffer` windows of them, and an external pointer (``Tensor.from_blob``) wraps the live hal buffer that
contains it (``Device.buffer_at``) without owning it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kohakutt import config, hal
from kohakutt.errors import DtypeError
from kohakutt.frontends.tinygrad import counters as stats
from kohakutt.frontends.tinygrad.execute import HostRunner, KTTBuffer, TileRunner
from kohakutt.frontends.tinygrad.renderer import KTTRenderer
from kohakutt.frontends.tinygrad.translate import HOST, RANDOM, unpack
from tinygrad.device import Allocator, BufferSpec, Compiled, TinyELF


class KTTAllocator(Allocator["KTTDevice"]):
    """tinygrad buffers as hal buffers of the shared device (no caching: freed memory goes back to the hal)."""

    def _alloc(self, size: int, options: BufferSpec) -> KTTBuffer:
        if options.external_ptr is not None:
            buf, offset = self.dev.hal.buffer_at(int(options.external_ptr))
            return KTTBuffer(buf, offset, size, owned=False)
        return KTTBuffer(self.dev.hal.allocate(size), 0, size, owned=True)

    def _free(self, opaque: KTTBuffer, options: BufferSpec) -> None:
        if opaque.owned and opaque.buf.is_live and not opaque.buf.device.closed:
            opaque.buf.device.free(opaque.buf)

    def _copyin(self, dest: KTTBuffer, src: memoryview) -> None:
        data = np.frombuffer(src.cast("B") if src.format != "B" else src, dtype=np.uint8)
        self.dev.hal.write(dest.buf, data, dest.offset)

    def _copyout(self, dest: memoryview, src: KTTBuffer) -> None:
        data = self.dev.hal.read(src.buf, src.offset, src.nbytes)
        (dest.cast("B") if dest.format != "B" else dest)[:] = data.tobytes()

    def _offset(self, buf: KTTBuffer, size: int, offset: int) -> KTTBuffer:
        return buf.view(size, offset)

    def _transfer(self, dest: KTTBuffer, src: KTTBuffer, sz: int, src_dev: Any, dest_dev: Any) -> None:
        if src.buf.device is dest.buf.device:
            dest.buf.device.copy(src.buf, dest.buf, src_offset=src.offset, dst_offset=dest.offset, nbytes=sz)
        else:  # another chip: through the host
            dest.buf.device.write(dest.buf, src.buf.device.read(src.buf, src.offset, sz), dest.offset)


class KTTProgram:
    """One compiled kernel: a tile program (IR ops on the card), a random draw, or a host fallback."""

    def __init__(self, dev: KTTDevice, obj: TinyELF):
        self.dev, self.name = dev, obj.name
        self.kind, payload = unpack(obj.lib)
        if self.kind == HOST:
            self.host: HostRunner | None = HostRunner(dev.hal, payload)
            self.tile: TileRunner | None = None
        else:
            self.host = None
            self.tile = TileRunner(dev.hal, payload["program"], payload["globals"])

    @property
    def on_host(self) -> bool:
        return self.host is not None

    def __call__(
        self,
        *bufs: KTTBuffer,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
        **kw: Any,
    ) -> float | None:
        st = time.perf_counter()
        if self.host is not None:
            if self.host.kind.startswith("dtype:") and config.get("KTT_TINYGRAD_DTYPES") == "error":
                raise DtypeError(
                    f"KTT kernel {self.name} needs {self.host.kind.split(':', 1)[1]}, which the card "
                    "does not compute (KTT_TINYGRAD_DTYPES=error); cast to float32, bfloat16 or int32, "
                    "or unset KTT_TINYGRAD_DTYPES to run such kernels on the host"
                )
            stats.host_run(self.host.kind, self.host.detail, self.host.how)
            self.host(bufs, global_size, local_size, vals)
        else:
            assert self.tile is not None
            stats.count("random_kernels" if self.kind == RANDOM else "tile_kernels")
            self.tile(bufs)
        if wait:
            self.dev.synchronize()
            return time.perf_counter() - st
        return None

    def __del__(self) -> None:
        tile = getattr(self, "tile", None)
        if tile is not None:
            try:  # noqa: SIM105  (no module globals here: at interpreter shutdown they may be None already)
                tile.release()
            except Exception:  # the device may already be gone
                pass


class KTTDevice(Compiled):
    """tinygrad's view of one chip: ``"KTT"`` is chip 0, ``"KTT:1"`` chip 1."""

    def __init__(self, device: str):
        from kohakutt.frontends.tinygrad.graph import KTTGraph

        chip = int(device.split(":")[1]) if ":" in device else 0
        self.hal = hal.open_device(chip)
        self._open = True
        super().__init__(device, KTTAllocator(self), [KTTRenderer], KTTProgram, KTTGraph)

    def synchronize(self) -> None:
        if not self.hal.closed:
            self.hal.synchronize()

    def finalize(self) -> None:
        """Drop this frontend's reference to the shared device (the last user closes it)."""
        if self._open:
            self._open = False
            self.hal.close()
