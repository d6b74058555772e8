"""Every op family's implementations, imported once by the kernel registry: a module per IR family
(``kohakutt.ir.defs.FAMILIES``), and the modules beside them that register implementations too."""

import importlib
from types import ModuleType

from kohakutt.ir.defs import FAMILIES

BESIDE = ("ttnn_io", "wide")  # TT-NN's I/O ops; wide (int64) arithmetic across families

# the imported modules, in this order (the TT-NN contract test reads each one's TTNN_NAMES)
MODULES: tuple[ModuleType, ...] = tuple(importlib.import_module(f"kohakutt.kernels.{m}") for m in (*FAMILIES, *BESIDE))
