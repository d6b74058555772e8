"""copy and typecast on the simulator: the store converts to the output's dtype, as the card's packer does."""

from __future__ import annotations

import numpy as np

from kohakutt.ir.dtypes import DType
from kohakutt.kernels import cost
from kohakutt.kernels.registry import SimCall, sim


@sim("copy", estimate=cost.default)
def copy(call: SimCall) -> np.ndarray:
    return call.inputs[0]


@sim("typecast", estimate=cost.default)
def typecast(call: SimCall) -> np.ndarray:
    x = call.inputs[0]
    to = call.out_specs[0].dtype
    if to.is_float or to is DType.BOOL:
        return x.astype(np.float32) if to.is_float else x != 0
    if np.issubdtype(x.dtype, np.floating):
        lo, hi = np.iinfo(to.compute).min, np.iinfo(to.compute).max
        # the card saturates, and NaN packs as 0
        x = np.clip(np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0), lo, hi)
    return x.astype(to.compute)
