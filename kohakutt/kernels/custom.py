"""The op layer for your own programs: a program builder plus a call spec becomes an op, queued in stream order.

This is what ``kohakutt.kernels.op`` (hand-written kernels), the kernel DSL's ``km.op`` and C++ extensions all go
through; it knows nothing of torch (the torch binding is ``kohakutt.frontends.torch.custom_ops``). The API:

- :class:`TensorRef`: what a program may know about one of its tensors when it is *built*: its name, format,
  layout and memory, never its shape. ``page_size`` (whole tiles in tile layout) and :meth:`TensorRef.accessor_args`
  (the compile-time args of a ``TensorAccessor``) come from it.
- :class:`Signature`: the program's tensors (inputs, then outputs, in the call's order) and the call's ``static``
  values. It is the key programs are built and cached under: two calls with equal signatures run the same
  :class:`~kohakutt.hal.program.Program` object, so sizes must reach the kernels as runtime arguments (a new shape
  then builds and compiles nothing).
- A *builder* is ``builder(sig: Signature) -> Program`` (or a fixed ``Program``). The program's ``runtime_args`` is
  a function ``(buffers, runtime) -> {kernel name: {core: [uint32, ...]}}`` called at each run: ``buffers`` are the
  program's buffers in the signature's order (``buffers[i].address``, ``.num_pages``, ``.shape``), ``runtime`` is
  the call's runtime values. :func:`by_name` lets it take the buffers by tensor name instead.
- :class:`Call`: what one call of an op gives: ``inputs`` (name -> tensor), ``outputs`` (name -> ``(shape,
  dtype)``), ``runtime`` (name -> uint32: sizes, counts, a float's bits from :func:`bits`), ``static`` (name ->
  hashable: compile-time choices, part of the signature), and per tensor ``formats`` / ``layouts`` overrides.
- :class:`ProgramOp` holds a builder and its programs: :meth:`ProgramOp.launch` queues one call over device tensors
  on the device's current stream and returns at once. Tensors whose storage is not already what the program reads
  (a strided or row-major view, another format) are staged into a tile-layout (or the requested) buffer in the same
  command, and outputs are written back the same way, so the program always sees whole interleaved DRAM tensors.
  ``ProgramOp.stats`` counts calls and programs built.

The same command runs on every backend: the simulator runs the program from its kernels' C++ (the host build of the
kernel API), a card through ``ttnn.generic_op`` with the ``ProgramDescriptor`` of the same program object. The
program is checked against the card's rules before it is queued (once per program for what does not depend on the
call; each call for its runtime arguments): every broken rule is one :class:`~kohakutt.errors.ProgramError`. What
breaks a rule while it runs (a deadlock, a misaligned NOC transfer) is a ``ProgramError`` naming the kernel, the
call, the core and the line, raised at the next synchronizing call.
"""

from __future__ import annotations

import math
import struct
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kohakutt.errors import DtypeError, ProgramError
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.card import CardSpec
from kohakutt.hal.device import Device
from kohakutt.hal.layout import TILE, Format, Layout, MemoryKind
from kohakutt.hal.layout import tile_count as _tile_count
from kohakutt.hal.program import PROGRAM_LAUNCH_NS, Program, aligned_page_size, tensor_accessor_args
from kohakutt.hal.stream import Command, Stream
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import DeviceTensor, decode, store

Builder = Callable[["Signature"], Program]
KEPT_SCRATCH = 4  # staging-buffer sets an op keeps (by stream, signature and shapes) for the calls that follow
RuntimeValue = int | bool


# ------------------------------------------------------------------------------------------------- helpers
def tile_count(x: Any) -> int:
    """Tiles (32 x 32) a tensor of ``x``'s shape takes in tile layout, padded: ``x`` is a tensor (anything with a
    ``shape``) or a shape."""
    return _tile_count(tuple(getattr(x, "shape", x)))


def bits(value: float) -> int:
    """The fp32 bits of ``value`` as a uint32: how a float scalar travels as a runtime argument (the kernel reads it
    back with ``std::bit_cast<float>`` or a union)."""
    return struct.unpack("<I", struct.pack("<f", float(value)))[0]


def by_name(sig: Signature, fn: Callable[[dict[str, Buffer], Mapping[str, Any]], Any]) -> Callable[..., Any]:
    """A program's ``runtime_args`` function that takes its buffers by tensor name: ``fn({"a": buf, ...}, runtime)``
    (buffers in ``sig``'s order underneath, as the HAL passes them)."""
    names = sig.names

    def runtime_args(buffers: Sequence[Buffer], runtime: Mapping[str, Any]) -> Any:
        return fn(dict(zip(names, buffers)), runtime)

    return runtime_args


# ------------------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class TensorRef:
    """One tensor of a program as its builder sees it (no shape: sizes are runtime arguments)."""

    name: str
    dtype: DType
    format: Format
    layout: Layout = Layout.TILE
    kind: MemoryKind = MemoryKind.DRAM
    output: bool = False

    @property
    def page_size(self) -> int | None:
        """Bytes per page: one tile in its format for tile layout; None for row major (a row, known at run time)."""
        return self.format.tile_bytes if self.layout is Layout.TILE else None

    def accessor_args(self) -> list[int]:
        """The compile-time args of a ``TensorAccessor`` over this tensor (``TensorAccessorArgs<offset>()`` in the
        kernel), as TT-NN's ``TensorAccessorArgs(tensor).get_compile_time_args()`` gives them; a row-major tensor's
        page size is a runtime value (pass ``aligned_page_size`` of its row to ``TensorAccessor``)."""
        return tensor_accessor_args(self.page_size, self.kind.value)

    def cb_page_size(self) -> int:
        """The page size of a circular buffer that holds this tensor's tiles."""
        if self.layout is not Layout.TILE:
            raise ProgramError(f"tensor {self.name!r} is row major: its page (a row) is known only at run time; give "
                               "the circular buffer an explicit page size")  # fmt: skip
        return self.format.tile_bytes


@dataclass(frozen=True)
class Signature:
    """A program's tensors (inputs then outputs) and the call's static values: what a builder builds from."""

    name: str
    inputs: tuple[TensorRef, ...]
    outputs: tuple[TensorRef, ...]
    static: tuple[tuple[str, Hashable], ...] = ()

    @property
    def tensors(self) -> tuple[TensorRef, ...]:
        return (*self.inputs, *self.outputs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    def __getitem__(self, name: str) -> TensorRef:
        for t in self.tensors:
            if t.name == name:
                return t
        raise ProgramError(f"op {self.name!r} has no tensor {name!r}; its tensors are {list(self.names)}")

    def index(self, name: str) -> int:
        """The position of tensor ``name`` in the program's buffers."""
        return self.names.index(self[name].name)

    def get(self, key: str, default: Any = None) -> Any:
        """A static value of the call."""
        return dict(self.static).get(key, default)


OutputSpec = tuple[Sequence[int], Any]  # (shape, dtype): a torch dtype, a DType or its name


@dataclass
class Call:
    """One call of an op: its tensors by name and its runtime and static values.

    ``inputs`` name -> tensor (a frontend's tensor, or a :class:`~kohakutt.kernels.tensor.DeviceTensor`);
    ``outputs`` name -> ``(shape, dtype)``; ``runtime`` name -> uint32 (what the program's runtime-args function
    reads: sizes, counts, :func:`bits` of a float); ``static`` name -> hashable value (compile-time choices: part
    of the :class:`Signature`, so each new value builds a program); ``formats`` / ``layouts`` name -> the format
    or layout the program reads or writes that tensor in (default: the tensor's dtype, tile layout).
    """

    inputs: Mapping[str, Any]
    outputs: Mapping[str, OutputSpec]
    runtime: Mapping[str, RuntimeValue] = field(default_factory=dict)
    static: Mapping[str, Hashable] = field(default_factory=dict)
    formats: Mapping[str, Format | str] = field(default_factory=dict)
    layouts: Mapping[str, Layout | str] = field(default_factory=dict)


def check_runtime(op: str, runtime: Mapping[str, Any]) -> dict[str, int]:
    """``runtime`` with every value a uint32 (bools as 0 / 1), or a ProgramError naming the first that is not."""
    out = {}
    for k, v in runtime.items():
        if isinstance(v, bool | np.bool_):
            v = int(v)
        if isinstance(v, np.integer):
            v = int(v)
        if not isinstance(v, int):
            hint = " (pass a float as kk.bits(x))" if isinstance(v, float) else ""
            raise ProgramError(f"op {op!r}: runtime value {k!r} is {v!r}, not an int; runtime values are uint32{hint}")
        if not 0 <= v < 1 << 32:
            raise ProgramError(f"op {op!r}: runtime value {k!r} is {v}, outside uint32; pass a negative value as "
                               "v & 0xFFFFFFFF")  # fmt: skip
        out[str(k)] = v
    return out


def ref_of(op: str, name: str, dtype: DType, fmt: Format | str | None, layout: Layout | str | None,
           output: bool) -> TensorRef:  # fmt: skip
    """The :class:`TensorRef` of tensor ``name`` of ``dtype``, read (or written) in ``fmt`` and ``layout``."""
    lay = Layout.of(layout) if layout is not None else Layout.TILE
    if fmt is None:
        if dtype in (DType.INT64, DType.FLOAT16, DType.BOOL):
            raise DtypeError(f"op {op!r}: tensor {name!r} is {dtype.value}, which a program cannot read as it is (the "
                             "card has no such tile format); convert it (int32, float32, bfloat16) or give "
                             f"formats={{{name!r}: ...}}")  # fmt: skip
        f = dtype.format
    else:
        f = Format.of(fmt)
    if f.is_block and lay is not Layout.TILE:
        raise DtypeError(f"op {op!r}: tensor {name!r} in {f.value} exists only in tile layout")
    if dtype is DType.INT64 or (f.is_float != dtype.is_float):
        raise DtypeError(f"op {op!r}: tensor {name!r} is {dtype.value} and cannot be staged as {f.value}: a program "
                         "reads float tensors in float formats and integer tensors in integer formats")  # fmt: skip
    return TensorRef(name, dtype, f, lay, MemoryKind.DRAM, output)


# ------------------------------------------------------------------------------------------------- the op
@dataclass
class _Plan:
    """What one signature runs."""

    program: Program


class ProgramOp:
    """An op made of a program builder: builds (and caches) one program per :class:`Signature`, and queues calls.

    ``program`` is a builder ``(sig) -> Program`` or a fixed ``Program`` (it then runs for every signature: it must
    not depend on formats). ``name`` names the op in errors, profiles and commands.
    """

    def __init__(self, name: str, program: Builder | Program):
        if not (isinstance(program, Program) or callable(program)):
            raise ProgramError(f"op {name!r}: program must be a kohakutt Program or a builder sig -> Program, got "
                               f"{type(program).__name__}")  # fmt: skip
        self.name = name
        self.program = program
        self.stats: Counter[str] = Counter()  # calls, programs_built
        self._plans: dict[Signature, _Plan] = {}
        self._lock = threading.Lock()
        self._estimates: dict[Hashable, float] = {}
        self._sigs: dict[Hashable, Signature] = {}
        self._checked: set[Hashable] = set()
        self._scratch: dict[Hashable, list[Buffer | None]] = {}  # (stream, signature, shapes) -> staging buffers

    def __repr__(self) -> str:
        return f"ProgramOp({self.name!r}, {len(self._plans)} programs)"

    # ----------------------------------------------------------------------------------------- signatures
    def signature(self, inputs: Mapping[str, DeviceTensor], outputs: Mapping[str, TensorSpec],
                  static: Mapping[str, Hashable] | None = None, formats: Mapping[str, Any] | None = None,
                  layouts: Mapping[str, Any] | None = None) -> Signature:  # fmt: skip
        formats, layouts = formats or {}, layouts or {}
        for n in (*formats, *layouts):
            if n not in inputs and n not in outputs:
                raise ProgramError(f"op {self.name!r}: formats / layouts name {n!r}, which is not one of its tensors "
                                   f"({[*inputs, *outputs]})")  # fmt: skip
        both = set(inputs) & set(outputs)
        if both:
            raise ProgramError(f"op {self.name!r}: {sorted(both)} named both as input and output; names are unique")
        ins = tuple(ref_of(self.name, n, t.dtype, formats.get(n), layouts.get(n), False) for n, t in inputs.items())
        outs = tuple(ref_of(self.name, n, s.dtype, formats.get(n), layouts.get(n), True) for n, s in outputs.items())
        try:
            st = tuple(sorted((str(k), v) for k, v in (static or {}).items()))
            hash(st)
        except TypeError:
            raise ProgramError(f"op {self.name!r}: static values must be hashable (ints, strings, tuples), got "
                               f"{dict(static or {})}") from None  # fmt: skip
        return Signature(self.name, ins, outs, st)

    def build(self, sig: Signature) -> Program:
        """The program of ``sig`` (built once per signature)."""
        return self._plan(sig).program

    def _plan(self, sig: Signature) -> _Plan:
        plan = self._plans.get(sig)
        if plan is not None:
            return plan
        with self._lock:
            plan = self._plans.get(sig)
            if plan is not None:
                return plan
            prog = self.program if isinstance(self.program, Program) else self.program(sig)
            if not isinstance(prog, Program):
                raise ProgramError(f"op {self.name!r}: its builder returned {type(prog).__name__}, not a Program")
            if prog.tensors is not None and tuple(prog.tensors) != sig.names:
                raise ProgramError(f"op {self.name!r}: program {prog.name!r} takes tensors {list(prog.tensors)}, the "
                                   f"call gives {list(sig.names)} (inputs, then outputs, in the call's "
                                   "order)")  # fmt: skip
            plan = self._plans[sig] = _Plan(prog)
            self.stats["programs_built"] += 1
            return plan

    # --------------------------------------------------------------------------------------------- launch
    def launch(self, inputs: Mapping[str, DeviceTensor], outputs: Mapping[str, DeviceTensor],
               runtime: Mapping[str, Any] | None = None, static: Mapping[str, Hashable] | None = None, *,
               formats: Mapping[str, Any] | None = None, layouts: Mapping[str, Any] | None = None,
               stream: Stream | None = None) -> None:  # fmt: skip
        """Queue one run of the op's program over device tensors ``inputs`` into ``outputs`` (both name ->
        tensor, in the program's order) on ``stream`` (the device's current stream); returns at once."""
        rt = check_runtime(self.name, runtime or {})
        tensors = [*inputs.values(), *outputs.values()]
        if not tensors:
            raise ProgramError(f"op {self.name!r}: a call needs at least one tensor")
        dev = tensors[0].device
        for n, t in (*inputs.items(), *outputs.items()):
            if not isinstance(t, DeviceTensor):
                raise ProgramError(f"op {self.name!r}: tensor {n!r} is a {type(t).__name__}, not a device tensor")
            if t.device is not dev:
                raise ProgramError(f"op {self.name!r}: tensor {n!r} is on chip {t.device.chip_id}, the others on "
                                   f"chip {dev.chip_id}; move it with .to() first")  # fmt: skip
        try:
            skey: Hashable = (tuple([(n, t.spec.dtype) for n, t in inputs.items()]),
                              tuple([(n, t.spec.dtype) for n, t in outputs.items()]),
                              tuple(static.items()) if static else (), tuple(formats.items()) if formats else (),
                              tuple(layouts.items()) if layouts else ())  # fmt: skip
            sig = self._sigs.get(skey)
        except TypeError:
            skey, sig = None, None
        if sig is None:
            sig = self.signature(inputs, {n: t.spec for n, t in outputs.items()}, static, formats, layouts)
            if skey is not None:
                if len(self._sigs) > 1024:
                    self._sigs.clear()
                self._sigs[skey] = sig
        plan = self._plan(sig)
        prog = plan.program
        index: dict[int, int] = {}
        buffers: list[Buffer] = []

        def slot(b: Buffer) -> int:
            i = index.get(id(b))
            if i is None:
                b.check_live(f"op {self.name!r}")
                i = index[id(b)] = len(buffers)
                buffers.append(b)
            return i

        st = stream or dev.current_stream
        staged = [not _direct(t, ref) for ref, t in zip(sig.tensors, tensors)]
        scratch: list[Buffer] = []  # this call's own staging buffers, freed once it has run
        kept = self._kept_scratch(dev, st, sig, tensors, staged) if any(staged) else None
        prog_slots, stage_in, stage_out = [], [], []
        for k, (ref, t) in enumerate(zip(sig.tensors, tensors)):
            if not staged[k]:
                prog_slots.append(slot(t.buffer))
                continue
            if kept is not None:
                tmp = kept[k]
            else:
                tmp = dev.allocate(shape=t.shape, fmt=ref.format, layout=ref.layout, cached=True, stream=stream)
                scratch.append(tmp)
            target = TensorSpec(t.shape, t.dtype if ref.format is t.dtype.format else DType(ref.format.value),
                                ref.layout)  # fmt: skip
            ps = slot(tmp)
            prog_slots.append(ps)
            (stage_out if ref.output else stage_in).append((slot(t.buffer), t, ps, target))
        prog_buffers = [buffers[i] for i in prog_slots]
        try:
            # The program's own rules are checked once (Program remembers); its runtime arguments once per buffer
            # sizes and runtime values (addresses aside, they are what the arguments are made of).
            akey = (id(prog), tuple([b.nbytes for b in prog_buffers]), tuple(rt.items()))
            seen = akey in self._checked
            prog.validate(dev.card, prog_buffers, rt, check_args=not seen)
            if not seen:
                if len(self._checked) > 4096:
                    self._checked.clear()
                self._checked.add(akey)
            est = self._estimate(prog, dev.card, prog_buffers, rt, len(stage_in) + len(stage_out))
            args = {"program": prog, "runtime": rt, "prog_slots": prog_slots, "stage_in": stage_in,
                    "stage_out": stage_out}  # fmt: skip
            dev.enqueue(Command(f"kernel:{self.name}", _run, tuple(buffers), args, est), stream)
            self.stats["calls"] += 1
        finally:
            for b in scratch:
                dev.free(b, stream)

    def _kept_scratch(self, dev: Device, stream: Stream, sig: Signature, tensors: Sequence[DeviceTensor],
                      staged: Sequence[bool]) -> list[Buffer | None] | None:  # fmt: skip
        """Staging buffers kept for calls of this signature and these shapes on ``stream`` (its commands run in
        order, so one call's staging is done before the next begins); None while the stream captures a trace (the
        trace then owns per-call buffers, as it does every intermediate)."""
        if stream.capturing is not None:
            return None
        key = (id(stream), sig, tuple([t.shape for t in tensors]))
        with self._lock:
            kept = self._scratch.pop(key, None)
            if kept is not None and all(b is None or (b.is_live and b.device is dev) for b in kept):
                self._scratch[key] = kept  # most recent last
                return kept
            kept = [dev.allocate(shape=t.shape, fmt=r.format, layout=r.layout, stream=stream) if s else None
                    for r, t, s in zip(sig.tensors, tensors, staged)]  # fmt: skip
            self._scratch[key] = kept
            while len(self._scratch) > KEPT_SCRATCH:
                old_key = next(iter(self._scratch))
                for b in self._scratch.pop(old_key):
                    if b is not None and b.is_live and not b.device.closed:
                        b.device.free(b, stream)
            return kept

    def release(self) -> None:
        """Free the staging buffers this op keeps (once the work queued before is done)."""
        with self._lock:
            kept, self._scratch = self._scratch, {}
        for bufs in kept.values():
            for b in bufs:
                if b is not None and b.is_live and not b.device.closed:
                    b.device.free(b)

    def _estimate(self, prog: Program, card: CardSpec, buffers: Sequence[Buffer], rt: Mapping[str, int],
                  staged: int) -> float:  # fmt: skip
        key = (id(prog), tuple(b.nbytes for b in buffers), tuple(rt.items()), staged)
        est = self._estimates.get(key)
        if est is None:
            if len(self._estimates) > 1024:
                self._estimates.clear()
            move = sum(b.nbytes for b in buffers) / card.dram_bytes_per_s * 1e9 if staged else 0.0
            est = self._estimates[key] = prog.estimate_ns(card, buffers, rt) + staged * PROGRAM_LAUNCH_NS + 2 * move
        return est


def _direct(t: DeviceTensor, ref: TensorRef) -> bool:
    """Whether the program can read or write ``t``'s buffer as it is: the whole buffer, in the ref's format and
    layout, in DRAM (a row-major tensor with one row per page)."""
    b = t.buffer
    if b.kind is not MemoryKind.DRAM or b.fmt is not ref.format or t.spec.dtype.format is not ref.format:
        return False
    if t.spec.layout is not ref.layout or t.offset or not t.is_contiguous:
        return False
    if ref.layout is Layout.TILE:
        return b.layout is Layout.TILE and b.num_pages == _tile_count(t.shape)
    row = (t.shape[-1] if t.shape else 1) * ref.format.itemsize
    return b.layout is Layout.ROW_MAJOR and b.page_size == row and b.num_pages == max(1, math.prod(t.shape[:-1]))


def _run(*buffers: Buffer, program: Program, runtime: Mapping[str, int], prog_slots: Sequence[int],
         stage_in: Sequence[tuple], stage_out: Sequence[tuple]) -> None:  # fmt: skip
    """The command: stage inputs, run the program on the device's backend, write outputs back."""
    backend = buffers[0].device.backend
    for src, view, dst, spec in stage_in:
        _convert(backend, buffers[src], view, buffers[dst], spec)
    backend.run_program(program, [buffers[i] for i in prog_slots], runtime)
    for dst, view, src, spec in stage_out:
        _convert(backend, buffers[src], DeviceTensor(buffers[src], spec), buffers[dst], None, view)


def _rebind(t: DeviceTensor, buf: Buffer) -> DeviceTensor:
    return t if t.buffer is buf else DeviceTensor(buf, t.spec, t.strides, t.offset)


def _convert(backend: Any, src_buf: Buffer, src: DeviceTensor, dst_buf: Buffer, dst_spec: TensorSpec | None,
             dst_view: DeviceTensor | None = None) -> None:  # fmt: skip
    """Copy tensor ``src`` into ``dst_buf`` (a whole tensor of ``dst_spec``, or the view ``dst_view`` of it),
    converting layout and format as the card's tilize / untilize and packer do (through the host on a backend
    without a host view of its memory)."""
    view = getattr(backend, "host_view", None)
    raw_src = view(src_buf) if view else backend.read(src_buf, 0, src_buf.nbytes)
    values = decode(_rebind(src, src_buf), raw_src)
    target = DeviceTensor(dst_buf, dst_spec) if dst_view is None else _rebind(dst_view, dst_buf)
    if view:
        store(target, view(dst_buf), values)
        return
    raw = backend.read(dst_buf, 0, dst_buf.nbytes)
    store(target, raw, values)
    backend.write(dst_buf, 0, raw)


def default_cores(card: CardSpec, max_cores: int | None = None) -> Any:
    """Up to ``max_cores`` worker cores of ``card`` (all of them by default), row by row: a program's core set, fixed
    when it is built (split the work over them at run time with ``split_work``)."""
    from kohakutt.hal.program import worker_cores

    gx, gy = card.grid
    return worker_cores(gx * gy, card, max_cores)


__all__ = [
    "TILE", "Builder", "Call", "ProgramOp", "Signature", "TensorRef", "aligned_page_size", "bits", "by_name",
    "check_runtime", "default_cores", "ref_of", "tile_count",
]  # fmt: skip
