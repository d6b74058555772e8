"""Your programs as torch ops on tt tensors: the torch side of ``kohakutt.kernels.op``.

:func:`define` turns a schema, a program (builder) and a call-spec function into an op of ``torch.ops.<ns>``
registered with ``torch.library``:

- the schema is defined in a ``torch.library.Library(ns, "FRAGMENT")``;
- the ``PrivateUse1`` (``tt``) kernel calls the call-spec function with the op's arguments, makes the outputs as tt
  tensors and queues the program through the op layer (:class:`kohakutt.kernels.custom.ProgramOp`) on the current
  tt stream: it returns at once, in order with every other op on that stream, and a trace (``kohakutt.capture``,
  the ``ktt_tt`` compile backends) records it like any other command;
- a fake (meta) kernel, from the same call-spec function run on fake tensors, gives the outputs' shapes and dtypes
  to ``torch.compile``, AOTAutograd and ``torch.library.opcheck``;
- an optional autograd formula (``backward`` / ``setup_context``), registered with
  ``torch.library.register_autograd``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from kohakutt.errors import DtypeError, ProgramError
from kohakutt.frontends.torch import runtime, tensors
from kohakutt.ir.dtypes import DType
from kohakutt.kernels.custom import Builder, Call, ProgramOp
from kohakutt.kernels.tensor import DeviceTensor

_SCHEMA = re.compile(r"^\s*(?P<ns>[A-Za-z_]\w*)::(?P<name>[A-Za-z_]\w*)\s*(?P<rest>\(.*)$", re.S)
LIBRARIES: dict[str, torch.library.Library] = {}  # namespace -> its fragment (kept alive: dropping it unregisters)
OPS: dict[str, ProgramOp] = {}  # "ns::name" -> its op layer


def torch_dtype(op: str, name: str, dtype: Any) -> torch.dtype:
    """The torch dtype of an output given as a torch dtype, a DType or its name."""
    if isinstance(dtype, torch.dtype):
        return dtype
    d = DType.of(dtype)
    t = tensors.FROM_IR.get(d)
    if t is None:
        raise DtypeError(f"op {op!r}: output {name!r} cannot be {d.value}, which no torch dtype holds; give a torch "
                         f"dtype and formats={{{name!r}: {d.value!r}}} to have the program write it as "
                         f"{d.value}")  # fmt: skip
    return t


def output_spec(op: str, spec: Any, name: str) -> tuple[list[int], torch.dtype]:
    """An output's ``(shape, dtype)`` as given in a :class:`Call` (dtype: a torch dtype, a DType or its name)."""
    try:
        shape, dtype = spec
    except (TypeError, ValueError):
        raise ProgramError(f"op {op}: output {name!r} must be (shape, dtype), got {spec!r}") from None
    return [s if isinstance(s, torch.SymInt) else int(s) for s in shape], torch_dtype(op, name, dtype)


def run_call(op: ProgramOp, call: Call) -> list[torch.Tensor]:
    """Queue ``call`` of ``op`` on tt tensors: its outputs made as new tt tensors, the program queued on the
    current tt stream of the inputs' device; returns the outputs at once."""
    ins: dict[str, DeviceTensor] = {}
    index = None
    for n, t in call.inputs.items():
        if not isinstance(t, torch.Tensor) or t.device.type != "tt":
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise ProgramError(f"op {op.name}: input {n!r} must be a tt tensor, got {where}; move it with "
                               ".to('tt') first")  # fmt: skip
        i = t.device.index or 0
        if index is None:
            index = i
        elif i != index:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"tt:{index} and tt:{i}!")  # fmt: skip
        ins[n] = tensors.to_device_tensor(t)
    if index is None:
        index = torch.tt.current_device()
    outs_t: list[torch.Tensor] = []
    outs: dict[str, DeviceTensor] = {}
    for n, spec in call.outputs.items():
        shape, dtype = output_spec(op.name, spec, n)
        o = tensors.new(shape, None, dtype, index)
        outs_t.append(o)
        outs[n] = tensors.to_device_tensor(o)
    op.launch(ins, outs, call.runtime, call.static, formats=call.formats, layouts=call.layouts,
              stream=runtime.current_stream(index))  # fmt: skip
    return outs_t


def define(schema: str, program: Builder | Any, fn: Callable[..., Call], *, backward: Callable | None = None,
           setup_context: Callable | None = None) -> Any:  # fmt: skip
    """Register op ``schema`` (``"ns::name(Tensor a, ...) -> Tensor"``) whose tt kernel runs ``program`` as
    ``fn(*args, **kwargs)`` (a :class:`~kohakutt.kernels.custom.Call`) describes; return ``torch.ops.ns.name``."""
    m = _SCHEMA.match(schema)
    if m is None:
        raise ProgramError(f"op schema {schema!r} is not 'namespace::name(Tensor a, ...) -> Tensor'")
    ns, name, rest = m["ns"], m["name"], m["rest"]
    qualname = f"{ns}::{name}"
    if qualname in OPS:
        raise ProgramError(f"op {qualname} is defined already (ops cannot be redefined in a process); choose another "
                           "name")  # fmt: skip
    if "!" in rest.partition("->")[0]:
        raise ProgramError(f"op {qualname}: the schema writes an argument in place ({rest!r}); custom kernels are "
                           "functional: return a new tensor")  # fmt: skip
    build = getattr(program, "build_program", program)  # a DSL program object hands over its builder
    op = ProgramOp(qualname, build)
    lib = LIBRARIES.get(ns)
    if lib is None:
        lib = LIBRARIES[ns] = torch.library.Library(ns, "FRAGMENT")
    lib.define(name + rest)
    overload = getattr(getattr(torch.ops, ns), name).default
    returns = overload._schema.returns
    is_list = len(returns) == 1 and str(returns[0].type) == "List[Tensor]"
    single = len(returns) == 1 and not is_list

    def outputs_of(call: Call) -> Any:
        if not isinstance(call, Call):
            raise ProgramError(f"op {qualname}: its function must return kohakutt.kernels.Call(inputs=, outputs=, "
                               f"runtime=), got {type(call).__name__}")  # fmt: skip
        if not is_list and len(call.outputs) != len(returns):
            raise ProgramError(f"op {qualname}: the schema returns {len(returns)} tensor(s), the call describes "
                               f"{len(call.outputs)} outputs ({list(call.outputs)})")  # fmt: skip
        return call.outputs

    def pack(outs: list[torch.Tensor]) -> Any:
        return outs[0] if single else (list(outs) if is_list else tuple(outs))

    def tt_kernel(*args: Any, **kwargs: Any) -> Any:
        call = fn(*args, **kwargs)
        outputs_of(call)
        return pack(run_call(op, call))

    def fake_kernel(*args: Any, **kwargs: Any) -> Any:
        call = fn(*args, **kwargs)
        specs = outputs_of(call)
        device = next((t.device for t in call.inputs.values() if isinstance(t, torch.Tensor)), None)
        outs = []
        for n, spec in specs.items():
            shape, dtype = output_spec(qualname, spec, n)
            outs.append(torch.empty(shape, dtype=dtype, device=device))
        return pack(outs)

    lib.impl(name, tt_kernel, "PrivateUse1")
    torch.library.register_fake(qualname, fake_kernel, lib=lib)
    if backward is not None:
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
    elif setup_context is not None:
        raise ProgramError(f"op {qualname}: setup_context= without backward=")
    OPS[qualname] = op
    return getattr(getattr(torch.ops, ns), name)


def program_op(qualname: str) -> ProgramOp:
    """The op layer behind custom op ``"ns::name"`` (its programs and ``stats``)."""
    try:
        return OPS[qualname]
    except KeyError:
        raise ProgramError(f"no custom op {qualname!r}; defined: {sorted(OPS)}") from None


__all__ = ["LIBRARIES", "OPS", "define", "output_spec", "program_op", "run_call", "torch_dtype"]
