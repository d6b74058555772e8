"""The simulator's device-time model: what an op would take on a P150A, from the card's published figures.

Every op pays a launch cost, then the larger of its DRAM traffic (tile-padded bytes at the measured 500 GB/s) and
its compute (tile operations spread over the 130 worker cores at 1.35 GHz). See docs/concepts/cost-model.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from kohakutt.hal.card import CardSpec
from kohakutt.hal.layout import tile_count
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec

LAUNCH_NS = 2_000.0  # dispatching one program from the command queue, measured order of magnitude on Wormhole/BH
SFPU_TILE_CYCLES = 32  # a simple SFPU op over one 32x32 tile (32 lanes, 8 rows x 4 faces)
FPU_TILE_CYCLES = 16  # an FPU element-wise op over one tile (one LoFi pass)


def tile_bytes(spec: Spec) -> int:
    if not isinstance(spec, TensorSpec):
        return 0
    return tile_count(spec.shape) * spec.dtype.format.tile_bytes if spec.numel else 0


def tiles(spec: Spec) -> int:
    return tile_count(spec.shape) if isinstance(spec, TensorSpec) and spec.numel else 0


def dram_ns(nbytes: float, card: CardSpec) -> float:
    return nbytes / card.dram_bytes_per_s * 1e9


def compute_ns(tile_ops: float, cycles_per_tile: float, card: CardSpec, cores: int | None = None) -> float:
    c = min(card.cores, cores or card.cores, max(int(tile_ops), 1))
    return tile_ops * cycles_per_tile / c / card.clock_hz * 1e9


def memory_bound(ins: Sequence[Spec], outs: Sequence[TensorSpec], card: CardSpec, cycles_per_tile: float = 0) -> float:
    """Launch + max(DRAM traffic of every operand, ``cycles_per_tile`` per output tile over the cores)."""
    traffic = sum(tile_bytes(s) for s in ins) + sum(tile_bytes(s) for s in outs)
    work = sum(tiles(s) for s in outs)
    return LAUNCH_NS + max(dram_ns(traffic, card), compute_ns(work, cycles_per_tile, card))


def eltwise(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    return memory_bound(ins, outs, card, FPU_TILE_CYCLES)


def sfpu(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    return memory_bound(ins, outs, card, SFPU_TILE_CYCLES)


def matmul_tile_cycles(card: CardSpec, fidelity: Fidelity) -> int:
    """Ideal cycles of one 32 x 32 x 32 tile matmul at ``fidelity`` (one pass per phase)."""
    return card.matmul_tile_cycles[Fidelity.of(fidelity).phases - 1]


def matmul_ns(batch: int, m: int, n: int, k: int, fidelity: Fidelity, card: CardSpec, traffic: float = 0) -> float:
    """Launch + max(DRAM, tile matmuls at the fidelity's cycles over the cores)."""
    t = -(-m // 32) * -(-n // 32) * -(-k // 32) * batch
    cycles = matmul_tile_cycles(card, fidelity)
    return LAUNCH_NS + max(dram_ns(traffic, card), compute_ns(t, cycles, card))


def default(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    return memory_bound(ins, outs, card)
