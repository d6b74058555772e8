"""The op library: one implementation per IR op per backend, run through :func:`run`; and the API for your own
programs as ops (:func:`op`, :class:`Call`, the program model and its helpers: ``kohakutt.kernels.custom``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kohakutt.hal.program import (
    CircularBuffer,
    CoreRange,
    CoreRangeSet,
    Kernel,
    MathFidelity,
    Program,
    Semaphore,
    Work,
    aligned_page_size,
    split_work,
    tensor_accessor_args,
    worker_cores,
)
from kohakutt.kernels.custom import Call, ProgramOp, Signature, TensorRef, bits, by_name, tile_count
from kohakutt.kernels.registry import (
    IMPLS,
    Impl,
    SimCall,
    choose,
    host,
    host_runs,
    lookup,
    providers,
    register,
    sim,
    ttnn,
)
from kohakutt.kernels.runner import manual_seed, rng_state, run, set_rng_state
from kohakutt.kernels.tensor import DeviceTensor, empty, free, from_numpy, to_numpy


def op(schema: str, program: Any, *, backward: Callable | None = None,
       setup_context: Callable | None = None) -> Callable[[Callable[..., Call]], Any]:  # fmt: skip
    """Decorator: ``fn(*args) -> Call`` becomes the torch op ``schema`` (``"ns::name(Tensor a, ...) -> Tensor"``) on
    tt tensors, running ``program`` (a builder ``Signature -> Program``, or a ``Program``); returns
    ``torch.ops.ns.name``. Registered with ``torch.library``: a tt kernel queued in stream order, a fake kernel from
    ``fn`` for ``torch.compile`` and capture, and the autograd formula ``backward`` / ``setup_context`` when given
    (as ``torch.library.register_autograd`` takes them)."""

    def deco(fn: Callable[..., Call]) -> Any:
        from kohakutt.frontends.torch import custom_ops  # the torch binding lives in the frontend (it imports torch)

        return custom_ops.define(schema, program, fn, backward=backward, setup_context=setup_context)

    return deco


def program_op(qualname: str) -> ProgramOp:
    """The op layer behind custom op ``"ns::name"``: its programs (``build(sig)``) and ``stats``."""
    from kohakutt.frontends.torch import custom_ops

    return custom_ops.program_op(qualname)


__all__ = [
    "IMPLS",
    "Call",
    "CircularBuffer",
    "CoreRange",
    "CoreRangeSet",
    "DeviceTensor",
    "Impl",
    "Kernel",
    "MathFidelity",
    "Program",
    "ProgramOp",
    "Semaphore",
    "Signature",
    "SimCall",
    "TensorRef",
    "Work",
    "aligned_page_size",
    "bits",
    "by_name",
    "choose",
    "empty",
    "free",
    "from_numpy",
    "host",
    "host_runs",
    "lookup",
    "manual_seed",
    "op",
    "program_op",
    "providers",
    "register",
    "rng_state",
    "run",
    "set_rng_state",
    "sim",
    "split_work",
    "tensor_accessor_args",
    "tile_count",
    "to_numpy",
    "ttnn",
    "worker_cores",
]  # fmt: skip
