"""The op library: one implementation per IR op per backend, run through :func:`run`."""

from kohakutt.hal.layout import tile_count
from kohakutt.kernels.registry import IMPLS, Impl, SimCall, lookup, providers, register, sim, ttnn
from kohakutt.kernels.runner import manual_seed, rng_state, run, set_rng_state
from kohakutt.kernels.tensor import DeviceTensor, empty, free, from_numpy, to_numpy

__all__ = [
    "IMPLS", "DeviceTensor", "Impl", "SimCall", "empty", "free", "from_numpy", "lookup", "manual_seed", "providers",
    "register", "rng_state", "run", "set_rng_state", "sim", "tile_count", "to_numpy", "ttnn",
]
