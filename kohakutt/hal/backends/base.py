"""What a backend gives the HAL: storage for buffers, byte copies, program runs, and a description of itself.

The HAL owns everything else (allocation, streams, traces). A backend sees only buffers the HAL created and is
called from the stream's worker thread, in order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kohakutt.hal.card import P150A, CardSpec

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.program import Program


class Backend(ABC):
    """One chip, as the HAL drives it."""

    name: str = "?"

    def __init__(self, chip_id: int):
        self.chip_id = chip_id

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether this backend can open a chip here, and why (or why not), in one sentence."""
        return True, "always available"

    @abstractmethod
    def open(self) -> None:
        """Bring the chip up; raise BackendUnavailable with the reason when it cannot."""

    @abstractmethod
    def close(self) -> None:
        """Release the chip. Every buffer has been destroyed before this is called."""

    @abstractmethod
    def create(self, buf: Buffer) -> Any:
        """Make the storage behind ``buf`` (its size, kind, layout and format are set) and return its handle."""

    @abstractmethod
    def destroy(self, buf: Buffer) -> None:
        """Release the storage behind ``buf``."""

    @abstractmethod
    def write(self, buf: Buffer, offset: int, data: np.ndarray) -> None:
        """Copy ``data`` (uint8, C-contiguous) into ``buf`` at byte ``offset``."""

    @abstractmethod
    def read(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        """Copy ``nbytes`` bytes of ``buf`` from byte ``offset`` to a new uint8 host array."""

    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        """Device-to-device byte copy; backends with a faster path override it."""
        self.write(dst, dst_offset, self.read(src, src_offset, nbytes))

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until the chip has finished everything handed to it. The HAL calls it once its streams have drained;
        a backend whose calls return only when their work is done (the simulator) has nothing left to wait for."""

    @abstractmethod
    def run_program(self, program: Program, buffers: Sequence[Buffer], runtime_args: dict[str, Any]) -> None:
        """Run a reader / compute / writer program over ``buffers`` (inputs first, outputs last)."""

    def card(self) -> CardSpec:
        """The card's figures once open: the P150A's, with what the chip reports in place of the defaults (a card
        backend reads its compute grid from the device)."""
        return P150A

    def describe(self) -> dict[str, Any]:
        """Facts for ``ktt doctor`` and ``ktt info``: what chip this is and how it was opened."""
        return {"backend": self.name, "chip": self.chip_id}
