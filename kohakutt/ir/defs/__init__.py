"""Every op family's IR definitions, imported once by the op registry. ``FAMILIES`` names them: each has a module
here and one of the same name in ``kohakutt.kernels`` with its implementations."""

import importlib

FAMILIES = ("attention", "conv", "core", "elementwise", "embedding", "fused", "matmul", "movement", "norm", "pool",
            "random", "reduce", "softmax")  # fmt: skip

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
