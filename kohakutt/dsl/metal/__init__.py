"""``kohakutt.dsl.metal`` (``km``): Metalium programs written in Python.

A program is a function decorated with :func:`program`; its kernels (``@p.dm0`` reader, ``@p.compute``, ``@p.dm1``
writer) are traced once, checked against the card's rules and turned into Metalium C++ for TT-Metal 0.81.1, which
the simulator runs through the host build of the kernel API and a card through ``generic_op``. :func:`op` makes a
program a torch op through the op layer every custom kernel uses (``kohakutt.kernels.op``). See
docs/concepts/dsl.md and docs/reference/custom-kernels.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from kohakutt.dsl.metal import ops
from kohakutt.dsl.metal.core import CORES_KEY, DSLProgram, program
from kohakutt.dsl.metal.trace import CB, Out, Slot, TensorRef
from kohakutt.errors import KernelDSLError
from kohakutt.kernels.custom import Call, bits


def op(schema: str, program: DSLProgram, *, backward: Callable | None = None,
       setup_context: Callable | None = None) -> Callable[[Callable[..., Call]], Any]:  # fmt: skip
    """Decorator: ``fn(*args) -> km.Call`` becomes the torch op ``schema`` (``"ns::name(Tensor a, ...) ->
    Tensor"``) running DSL program ``program`` on tt tensors; returns ``torch.ops.ns.name``. The op goes through
    ``kohakutt.kernels.op`` (torch.library registration, a fake kernel for torch.compile and capture, stream order,
    the simulator and a card); each call's tensors and runtime values are checked against the program's."""
    if not isinstance(program, DSLProgram):
        raise KernelDSLError(f"km.op({schema!r}, ...) takes a @km.program, got {type(program).__name__}; a "
                             "hand-written program goes through kohakutt.kernels.op")  # fmt: skip

    def deco(fn: Callable[..., Call]) -> Any:
        @functools.wraps(fn)
        def call_spec(*args: Any, **kwargs: Any) -> Call:
            call = fn(*args, **kwargs)
            if not isinstance(call, Call):
                raise KernelDSLError(f"{getattr(fn, '__name__', 'the function')} must return km.Call(inputs=, "
                                     f"outputs=, runtime=), got {type(call).__name__}")  # fmt: skip
            program.check_call(call)
            values = dict(call.runtime)
            if all(isinstance(v, int) for v in values.values()):  # not under torch.compile's symbolic sizes
                n = program.cores_for(values)
                call = dataclasses.replace(call, static={**call.static, CORES_KEY: n})
            return call

        from kohakutt import kernels as kk

        return kk.op(schema, program, backward=backward, setup_context=setup_context)(call_spec)

    return deco


__all__ = ["CB", "Call", "DSLProgram", "KernelDSLError", "Out", "Slot", "TensorRef", "bits", "op", "ops", "program"]
