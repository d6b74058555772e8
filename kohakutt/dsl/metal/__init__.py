"""``kohakutt.dsl.metal`` (``km``): Metalium programs written in Python.

A program is a function decorated with :func:`program`; its kernels (``@p.dm0`` reader, ``@p.compute``, ``@p.dm1``
writer) are traced once, checked against the card's rules and turned into Metalium C++ for TT-Metal 0.81.1, which
the simulator runs through the host build of the kernel API and a card through ``generic_op``. See
docs/concepts/dsl.md.
"""

from __future__ import annotations

import struct

from kohakutt.dsl.metal import ops
from kohakutt.dsl.metal.core import DSLProgram, program
from kohakutt.dsl.metal.trace import CB, Out, Slot, TensorRef
from kohakutt.errors import KernelDSLError


def bits(x: float) -> int:
    """The fp32 bits of ``x`` as a uint32 (what a runtime scalar or ``c.op(..., value=)`` carries)."""
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


__all__ = ["CB", "DSLProgram", "KernelDSLError", "Out", "Slot", "TensorRef", "bits", "ops", "program"]
