"""Every op family's implementations, imported once by the kernel registry: a module per IR family
(``kohakutt.ir.defs.FAMILIES``), and the modules beside them that register implementations too."""

import importlib

from kohakutt.ir.defs import FAMILIES

BESIDE = ("ttnn_io", "wide")  # TT-NN's I/O ops; wide (int64) arithmetic across families

for _module in (*FAMILIES, *BESIDE):
    importlib.import_module(f"kohakutt.kernels.{_module}")
