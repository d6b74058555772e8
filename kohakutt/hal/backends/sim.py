"""The simulated P150A: buffers in host memory this backend owns; programs run by their circular-buffer semantics.

The HAL enforces the card's capacities and alignment (the allocator); this backend keeps each buffer's bytes exactly
as the card would hold them (tile layout in faces, block-float formats packed), so what is read back is what a card
would give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kohakutt import config
from kohakutt.hal.backends.base import Backend

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.program import Program


class SimBackend(Backend):
    name = "sim"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, "the simulator runs on any CPU"

    def open(self) -> None:
        self._open = True

    def close(self) -> None:
        self._open = False

    def create(self, buf: Buffer) -> np.ndarray:
        return np.zeros(buf.nbytes, dtype=np.uint8)  # pages are mapped lazily by the OS

    def destroy(self, buf: Buffer) -> None:
        buf.handle = None

    def write(self, buf: Buffer, offset: int, data: np.ndarray) -> None:
        buf.handle[offset : offset + data.size] = data

    def read(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        return buf.handle[offset : offset + nbytes].copy()

    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        dst.handle[dst_offset : dst_offset + nbytes] = src.handle[src_offset : src_offset + nbytes]

    def host_view(self, buf: Buffer) -> np.ndarray:
        """The buffer's bytes, zero-copy, for the op library's simulated kernels (worker thread only)."""
        return buf.handle

    def synchronize(self) -> None:
        """Nothing to wait for: each command has run to completion on the stream's worker thread."""

    def run_program(self, program: Program, buffers: Sequence[Buffer], runtime_args: dict[str, Any]) -> None:
        """Run from the kernels' C++ (the host build of the kernel API), or from their Python twins when knob
        ``KTT_SIM_KERNELS=python``."""
        if config.get("KTT_SIM_KERNELS") == "python":
            from kohakutt.hal.backends import sim_program

            sim_program.run(self, program, buffers, runtime_args)
        else:
            from kohakutt.hal.backends import sim_native

            sim_native.run(self, program, buffers, runtime_args)

    def describe(self) -> dict[str, Any]:
        return {"backend": "sim", "chip": self.chip_id, "simulated": True}
