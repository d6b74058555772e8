"""The Blackhole P150A's figures: what the simulator enforces and what its time estimate is built from.

Sources are in ``docs/concepts/cost-model.md`` (tt-metal's soc descriptors and tech reports).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class CardSpec:
    name: str = "Blackhole P150A"
    arch: str = "blackhole"
    # The compute grid TT-NN 0.81.1 reports for a P150 (its mock P150 cluster: 13 x 10 = 130 worker cores); on a card
    # the ttnn backend takes the device's own (Backend.card).
    grid: tuple[int, int] = (13, 10)
    l1_bytes: int = 1_572_864  # raw L1 per core
    l1_usable: int = 1464 * 1024  # what buffers and circular buffers may use per core
    dram_banks: int = 8
    dram_bank_bytes: int = 4_278_190_080
    dram_bytes_per_s: float = 500e9  # measured; 512 GB/s peak
    noc_bytes_per_cycle: int = 64
    clock_hz: float = 1.35e9
    dram_read_align: int = 64
    dram_write_align: int = 16
    l1_align: int = 16
    # Ideal cycles for one 32x32x32 tile matmul at each fidelity (LoFi, HiFi2, HiFi3, HiFi4).
    matmul_tile_cycles: tuple[int, int, int, int] = (16, 32, 48, 64)
    dst_tiles_bf16: int = 8  # half-sync DST: 8 bf16 tiles or 4 fp32 tiles
    dst_tiles_fp32: int = 4
    # Circular buffers per core: 64 on Blackhole (tt-metal api/tt-metalium/circular_buffer_constants.h in the 0.81.1
    # wheel: NUM_CIRCULAR_BUFFERS is 32 only for Wormhole's device builds).
    num_cbs: int = 64

    @functools.cached_property
    def cores(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def dram_bytes(self) -> int:
        return self.dram_banks * self.dram_bank_bytes


P150A = CardSpec()
