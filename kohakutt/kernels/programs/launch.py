"""The op library's own programs on the program path: an op's ``ktt`` implementation run as its Metalium program
through the HAL (``backend.run_program``) on every backend, through the same op layer as a user's kernels
(:class:`~kohakutt.kernels.custom.ProgramOp`).

:class:`OpLauncher` is what an implementation's ``launch`` is: given the operands (row-major views or tile tensors)
and the outputs ``kernels.run`` made, it queues one command that stages the operands into tile layout, runs the
program (the simulator: its kernels' C++ through the host build; a card: ``ttnn.generic_op`` with the
``ProgramDescriptor`` of the same program object) and writes the outputs back. Programs are built once per
signature (dtypes, shapes, attributes, numerics) and cached; shapes and addresses are runtime arguments of the
kernels, so a new shape builds a new program object and compiles nothing. ``kernels.run`` takes this path on a card
always and on the simulator with ``KTT_SIM_OPS=program``; by default the simulator computes the same bits with the
program's vectorized model (the program tests check the two agree).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator
from kohakutt.hal.layout import Layout
from kohakutt.hal.program import Program
from kohakutt.hal.stream import Stream
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import ShapeError, TensorSpec
from kohakutt.kernels.custom import ProgramOp, Signature
from kohakutt.kernels.tensor import DeviceTensor

BuildFn = Callable[[str, Sequence[Any], Sequence[Any], Mapping[str, Any], Numerics], Program]
Accepts = Callable[[Sequence[TensorSpec], Sequence[TensorSpec], Mapping[str, Any]], bool]


@dataclass(frozen=True)
class TileRef:
    """An operand as a builder sees it on the program path: a whole tile-layout tensor of ``spec``."""

    spec: TensorSpec

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def dtype(self) -> DType:
        return self.spec.dtype


def _freeze(v: Any) -> Hashable:
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), _freeze(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v


class OpLauncher:
    """The program path of op ``op``: ``build(op, ins, outs, attrs, numerics)`` makes its program over tile-layout
    operands (:class:`TileRef`); ``accepts(in_specs, out_specs, attrs)`` says whether the program takes them (else
    the caller computes the op another way)."""

    def __init__(self, op: str, build: BuildFn, accepts: Accepts):
        self.op, self.build, self.accepts = op, build, accepts
        self.program_op = ProgramOp(f"ktt:{op}", self._builder)
        self._takes: dict[Hashable, bool] = {}

    def _builder(self, sig: Signature) -> Program:
        shapes, attrs, num = sig.get("shapes"), dict(sig.get("attrs")), sig.get("numerics")
        refs = [TileRef(TensorSpec(s, t.dtype, Layout.TILE)) for s, t in zip(shapes, sig.tensors)]
        n = len(sig.inputs)
        prog = self.build(self.op, refs[:n], refs[n:], attrs, num)
        prog.tensors = sig.names  # the call's names for the program's tensors, in the same order
        return prog

    def __call__(self, inputs: Sequence[Any], outs: Sequence[DeviceTensor], attrs: Mapping[str, Any],
                 num: Numerics, stream: Stream | None = None) -> bool:  # fmt: skip
        """Queue the op's program over ``inputs`` into ``outs``; False (nothing queued) when it does not take them."""
        if not all(isinstance(x, DeviceTensor) for x in inputs):
            return False
        in_specs, out_specs = [x.spec for x in inputs], [o.spec for o in outs]
        if any(s.numel == 0 for s in (*in_specs, *out_specs)) or not self.accepts(in_specs, out_specs, attrs):
            return False
        static = {"shapes": tuple(s.shape for s in (*in_specs, *out_specs)), "attrs": _freeze(dict(attrs)),
                  "numerics": num}  # fmt: skip
        ins = {f"in{i}": x for i, x in enumerate(inputs)}
        key = (tuple(s.dtype for s in (*in_specs, *out_specs)), static["shapes"], static["attrs"], num)
        ok = self._takes.get(key)
        if ok is None:
            try:
                self.program_op.build(self.program_op.signature(
                    ins, {f"out{i}": s for i, s in enumerate(out_specs)}, static))  # fmt: skip
                ok = True
            except (KohakuTTUnsupportedOperator, ShapeError, DtypeError):
                ok = False  # operands the program does not take (its builder says why): computed another way
            if len(self._takes) > 4096:
                self._takes.clear()
            self._takes[key] = ok
        if not ok:
            return False
        self.program_op.launch(ins, {f"out{i}": o for i, o in enumerate(outs)}, {}, static, stream=stream)
        return True


__all__ = ["OpLauncher", "TileRef"]
