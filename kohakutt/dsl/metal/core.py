"""A defined DSL program: its generated kernels, and the HAL programs it becomes over real tensors.

:func:`program` traces the decorated function once (kernels, CBs, runtime values), checks the card's rules and
generates the kernels' C++. :meth:`DSLProgram.launch` runs it over tensors: the CB formats and the kernels'
``TensorAccessorArgs`` come from the tensors' formats (a new format is a new variant: its kernels compile once);
sizes, addresses and scalars go in runtime arguments, so a new shape or scale compiles nothing. The cores are the
first ``min(units, max_cores, grid)`` of the grid, each given its ``(start, count)`` of ``p.split``.
"""

from __future__ import annotations

import inspect
import math
import numbers
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kohakutt.dsl.metal import check, codegen
from kohakutt.dsl.metal.expr import Site, caller_site, fail
from kohakutt.dsl.metal.trace import (
    CB,
    Barrier,
    CBOp,
    KernelTrace,
    Loop,
    Out,
    ProgramBuilder,
    Read,
    Registers,
    Stmt,
    TensorRef,
    TileOp,
    When,
    Write,
)
from kohakutt.errors import KernelDSLError
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import Format, Layout
from kohakutt.hal.program import CircularBuffer, CoreRangeSet, Kernel, Program, Work, split_work, worker_cores
from kohakutt.kernels.custom import ProgramOp, Signature
from kohakutt.kernels.tensor import DeviceTensor

MASK = 0xFFFFFFFF


class DSLProgram:
    """A kernel DSL program (``@km.program(name)``): ``sources`` holds each kernel's generated C++."""

    def __init__(self, builder: ProgramBuilder, fn: Callable[..., Any], max_cores: int | None):
        self.name = builder.name
        self.fn = fn
        self.site = builder.site
        self.tensors: list[TensorRef] = builder.tensors
        self.runtime_values = dict(builder.runtime_values)
        self.split = builder.split_
        self.cbs: dict[int, CB] = dict(builder.cbs)
        self.kernels: dict[str, KernelTrace] = dict(builder.kernels)
        self.max_cores = max_cores
        self.generated = codegen.generate(builder)
        self._compiled: set[tuple[tuple[str, str], ...]] = set()
        self._lock = threading.Lock()
        self._op: ProgramOp | None = None

    # ------------------------------------------------------------------------------------------- inspection
    @property
    def inputs(self) -> list[str]:
        return [t.name for t in self.tensors if not t.is_output]

    @property
    def outputs(self) -> list[str]:
        return [t.name for t in self.tensors if t.is_output]

    @property
    def runtime_names(self) -> list[str]:
        return list(self.runtime_values)

    @property
    def sources(self) -> dict[str, str]:
        """Each kernel's C++, by kernel name (the decorated function's name)."""
        return {g.name: g.source for g in self._ordered()}

    def source(self, kernel: str, lines: bool = True) -> str:
        """Kernel ``kernel``'s C++ (by name or role: reader / compute / writer); ``lines=False`` leaves out the
        ``#line`` directives (what to read; the compiled text has them)."""
        g = next((g for g in self._ordered() if kernel in (g.name, g.role)), None)
        if g is None:
            raise KernelDSLError(f"program {self.name!r} has no kernel {kernel!r}; it has "
                                 f"{[g.name for g in self._ordered()]}")  # fmt: skip
        if lines:
            return g.source
        return "".join(ln for ln in g.source.splitlines(keepends=True) if not ln.lstrip().startswith("#line"))

    def write(self, folder: str | Path) -> list[Path]:
        """Write one ``<kernel>.cpp`` per kernel into ``folder``; returns the paths."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for g in self._ordered():
            path = out / f"{g.name}.cpp"
            path.write_text(g.source)
            paths.append(path)
        return paths

    def _ordered(self) -> list[codegen.Generated]:
        return [self.generated[r] for r in ("reader", "compute", "writer") if r in self.generated]

    @property
    def compiles(self) -> int:
        """How many variants of the kernels this program has built (one per set of tensor formats seen): a new shape
        or runtime value adds none."""
        return len(self._compiled)

    def __repr__(self) -> str:
        return f"<km.program {self.name!r}: {', '.join(g.name for g in self._ordered())}>"

    # ----------------------------------------------------------------------------------------- specializing
    def build_program(self, sig: Signature, card: CardSpec | None = None) -> Program:
        """The HAL program for a call's tensors (the op layer's builder, ``kohakutt.kernels.custom``): the CBs take
        the formats of the tensors they are ``like``, each kernel's ``TensorAccessorArgs`` the tensors' page sizes;
        the cores are the grid's first ``sig.get("km.cores")`` (:meth:`cores_for`; the most it may use without),
        each given its share of ``p.split`` at run time. Shapes, addresses and runtime values are runtime
        arguments: the kernels are the same for every call with these formats."""
        card = card or P150A
        refs = {r.name: r for r in sig.tensors}
        self._check_names(set(refs), f"a call of program {self.name!r}")
        for t in self.tensors:
            r = refs[t.name]
            if r.output != t.is_output:
                what = "an output (km.Out)" if t.is_output else "an input (km.TensorRef)"
                raise fail(f"tensor {t.name} is {what} of program {self.name!r}, but the call gives it as "
                           f"{'an output' if r.output else 'an input'}", t.site)  # fmt: skip
            if r.layout is not Layout.TILE:
                raise fail(f"program {self.name!r} reads {t.name} by tile pages; the call gives it in "
                           f"{r.layout.value} layout (leave layouts= out: the op layer stages it into tiles)",
                           t.site)  # fmt: skip
            if r.format not in TILE_FORMATS:
                raise fail(f"program {self.name!r}: tensor {t.name} is {r.format.value}; DSL programs compute on "
                           "float tiles (bfloat16, float32, bfloat8_b, bfloat4_b): convert it first",
                           t.site)  # fmt: skip
        fmts = {idx: cb.dtype if cb.dtype is not None else refs[cb.like.name].format  # type: ignore[union-attr]
                for idx, cb in self.cbs.items()}  # fmt: skip
        need = check.cb_bytes((cb, fmts[idx].tile_bytes) for idx, cb in self.cbs.items())
        if need > card.l1_usable:
            parts = ", ".join(f"{cb.name} (line {cb.site.line}): {cb.pages} x {fmts[i].tile_bytes} B "
                              f"{fmts[i].value}" for i, cb in sorted(self.cbs.items()))  # fmt: skip
            raise fail(f"program {self.name!r}: its circular buffers need {need:,} B of L1 per core with these "
                       f"tensors ({parts}), more than the {card.l1_usable:,} B usable: use fewer pages",
                       self.site)  # fmt: skip
        n = sig.get(CORES_KEY)
        cores = worker_cores(n if n is not None else self.cores_for(None, card), card)
        cbs = [CircularBuffer(idx, fmts[idx], fmts[idx].tile_bytes, cb.pages, cores)
               for idx, cb in sorted(self.cbs.items())]  # fmt: skip
        kernels = []
        for g in self._ordered():
            kt = self.kernels[g.role]
            ct = [a for t in g.accessors for a in refs[t].accessor_args()]
            kernels.append(Kernel(g.role, g.source, cores, None, compile_time_args=ct, name=g.name,
                                  math_fidelity=kt.fidelity, fp32_dest_acc_en=kt.fp32_dest,
                                  math_approx_mode=kt.approx))  # fmt: skip
        with self._lock:
            self._compiled.add(tuple((refs[t.name].format.value, refs[t.name].kind.value) for t in self.tensors))
        return Program(self.name, kernels, cbs, runtime_args=self._runtime_args(cores, sig.names),
                       tensors=sig.names, work=self._work(cores, sig.names))  # fmt: skip

    def cores_for(self, runtime: Mapping[str, Any] | None, card: CardSpec | None = None) -> int:
        """How many cores a call with these runtime values runs on: ``min(units of p.split, max_cores, grid)``, as
        TT-NN's ``split_work_to_cores`` chooses (one without a split runs on one core; ``None``: the most it may
        use). The kernels do not depend on it: a new count builds a program, never a kernel."""
        gx, gy = (card or P150A).grid
        limit = min(self.max_cores or gx * gy, gx * gy)
        if self.split is None:
            return 1
        if runtime is None:
            return limit
        return max(1, min(self.split.total.eval(self.check_runtime(runtime)), limit))

    def _check_names(self, given: set[str], what: str) -> None:
        names = [t.name for t in self.tensors]
        missing = [n for n in names if n not in given]
        extra = sorted(given - set(names))
        if missing or extra:
            parts = ([f"leaves out {missing}"] if missing else []) + ([f"gives {extra}, unknown"] if extra else [])
            raise fail(f"{what} {' and '.join(parts)}: its tensors are {names}", self.site)

    def check_call(self, call: Any) -> None:
        """That a ``km.Call`` names this program's inputs, outputs and runtime values."""
        ins, outs = set(getattr(call, "inputs", {})), set(getattr(call, "outputs", {}))
        self._check_names(ins | outs, f"the call of program {self.name!r}")
        for t in self.tensors:
            if t.is_output != (t.name in outs):
                raise fail(f"km.Call gives {t.name} as {'an input' if t.is_output else 'an output'}, but program "
                           f"{self.name!r} declares it {'km.Out' if t.is_output else 'km.TensorRef'}",
                           t.site)  # fmt: skip
        self.check_runtime(getattr(call, "runtime", {}), values=False)

    def check_runtime(self, runtime: Mapping[str, Any], values: bool = True) -> dict[str, int]:
        """The runtime values as uint32s, checked against the names the program declares (``p.runtime``)."""
        declared = self.runtime_values
        missing = [n for n in declared if n not in runtime]
        extra = [n for n in runtime if n not in declared]
        if missing:
            s = declared[missing[0]]
            raise fail(f"program {self.name!r} runs without runtime value {missing[0]!r} (declared here); pass "
                       f"runtime={{{', '.join(repr(n) + ': ...' for n in declared)}}}", s.site)  # fmt: skip
        if extra:
            raise fail(f"program {self.name!r} has no runtime value {extra[0]!r}; it declares {list(declared)} "
                       "(p.runtime)", self.site)  # fmt: skip
        out = {}
        for n, v in runtime.items():
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                if not values and not isinstance(v, float):
                    continue  # a symbolic size (torch.compile's fake run): checked when the op runs
                raise fail(f"runtime value {n!r} is {v!r}: runtime values are uint32 (pass a float's fp32 bits, "
                           "bits(x))", declared[n].site)  # fmt: skip
            if not 0 <= int(v) <= MASK:
                raise fail(f"runtime value {n!r} = {v} is not a uint32 (0..{MASK}); pass a negative value as "
                           "v & 0xFFFFFFFF", declared[n].site)  # fmt: skip
            out[n] = int(v)
        return out

    def _envs(self, cores: CoreRangeSet, values: Mapping[str, int]) -> list[tuple[tuple[int, int], dict[str, int]]]:
        """Per core, the value of every symbol its kernels read."""
        base = dict(values)
        if self.split is None:
            return [(c, base) for c in cores.cores()]
        total = self.split.total.eval(values)
        return [(c, base | {"split.start": s, "split.count": k}) for c, s, k in split_work(total, cores)]

    def _runtime_args(self, cores: CoreRangeSet, order: Sequence[str]
                      ) -> Callable[[Sequence[Any], Mapping[str, Any]], dict[str, Any]]:  # fmt: skip
        gens = self._ordered()

        def args(bufs: Sequence[Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
            values = self.check_runtime(runtime)
            address = {n: b.address for n, b in zip(order, bufs)}
            if self.split is None:
                split = [(c, 0, 0) for c in cores.cores()]
            else:
                split = split_work(self.split.total.eval(values), cores)
            out: dict[str, Any] = {}
            for g in gens:  # one row per core: the same values but for the split's start and count
                row = [address[a.name] if a.kind == "tensor" else values.get(a.name, 0) for a in g.args]
                at_start = [i for i, a in enumerate(g.args) if a.kind == "start"]
                at_count = [i for i, a in enumerate(g.args) if a.kind == "count"]
                if not at_start and not at_count:
                    out[g.name] = row  # every core the same
                    continue
                per = {}
                for core, start, count in split:
                    r = row.copy()
                    for i in at_start:
                        r[i] = start
                    for i in at_count:
                        r[i] = count
                    per[core] = r
                out[g.name] = per
            return out

        return args

    def _work(self, cores: CoreRangeSet, order: Sequence[str]) -> Callable[[Sequence[Any], Mapping[str, Any]], Work]:
        def work(bufs: Sequence[Any], runtime: Mapping[str, Any]) -> Work:
            values = self.check_runtime(runtime)
            page = {n: b.page_size for n, b in zip(order, bufs)}
            tally: dict[str, int] = {"dram": 0, "fpu": 0, "sfpu": 0, "matmul": 0}
            for _core, env in self._envs(cores, values):
                for k in self.kernels.values():
                    _count(k.body, env, 1, tally, page)
            return Work(dram_bytes=tally["dram"], fpu_tiles=tally["fpu"], sfpu_tiles=tally["sfpu"],
                        matmul_tiles=tally["matmul"])  # fmt: skip

        return work

    # ---------------------------------------------------------------------------------------------- running
    @property
    def op(self) -> ProgramOp:
        """The op layer that runs this program (``kohakutt.kernels.custom.ProgramOp``)."""
        if self._op is None:
            self._op = ProgramOp(self.name, self.build_program)
        return self._op

    def launch(self, tensors: Mapping[str, DeviceTensor], runtime: Mapping[str, Any] | None = None, *,
               stream: Any = None) -> None:  # fmt: skip
        """Queue the program over device tensors (name -> ``DeviceTensor``; outputs allocated by the caller) with
        ``runtime`` values, through the op layer, in stream order on the tensors' device. It runs from its generated
        C++: on the simulator through the host build of the kernel API, on a card through generic_op."""
        self._check_names(set(tensors), f"launching program {self.name!r}")
        ins = {t.name: tensors[t.name] for t in self.tensors if not t.is_output}
        outs = {t.name: tensors[t.name] for t in self.tensors if t.is_output}
        values = self.check_runtime(dict(runtime or {}))
        self.op.launch(ins, outs, values, {CORES_KEY: self.cores_for(values)}, stream=stream)


TILE_FORMATS = (Format.BFLOAT16, Format.FLOAT32, Format.BFLOAT8_B, Format.BFLOAT4_B)
CORES_KEY = "km.cores"  # the static value of a call that carries its core count to build_program


def _trips(loop: Loop, env: Mapping[str, int]) -> int:
    start, stop = loop.start.eval(env), loop.stop.eval(env)
    return max(0, math.ceil((stop - start) / loop.step))


def _count(body: Iterable[Stmt], env: Mapping[str, int], mult: int, tally: dict[str, int],
           page: Mapping[str, int]) -> None:  # fmt: skip
    """Add the body's DRAM bytes and tile ops, run ``mult`` times, to ``tally`` (``k.when`` bodies as if taken)."""
    for st in body:
        if isinstance(st, (Read, Write)):
            tally["dram"] += mult * page[st.page.tensor.name]
        elif isinstance(st, TileOp):
            tally[st.spec.cost] += mult
        elif isinstance(st, Loop):
            if _bounds_read(st.body, st.var.key):  # an inner loop's trip count depends on this loop's variable
                start, stop = st.start.eval(env), st.stop.eval(env)
                for i in range(start, stop, st.step):
                    _count(st.body, {**env, st.var.key: i}, mult, tally, page)
            else:
                n = _trips(st, env)
                if n:
                    _count(st.body, env, mult * n, tally, page)
        elif isinstance(st, (When, Registers)):
            _count(st.body, env, mult, tally, page)
        elif isinstance(st, (CBOp, Barrier)):
            pass


def _bounds_read(body: Iterable[Stmt], key: str) -> bool:
    for st in body:
        if isinstance(st, Loop) and (key in st.start.atoms() | st.stop.atoms() or _bounds_read(st.body, key)):
            return True
        if isinstance(st, (When, Registers)) and _bounds_read(st.body, key):
            return True
    return False


def program(name: str, *, max_cores: int | None = None) -> Callable[[Callable[..., Any]], DSLProgram]:
    """Define a kernel DSL program: ``@km.program("name")`` over ``def f(p, a: km.TensorRef, ..., out: km.Out)``.

    The function runs once, now: ``p`` declares runtime values (``p.runtime``), the work split (``p.split``) and
    circular buffers (``p.cb``), and the kernels (``@p.dm0`` reader, ``@p.compute``, ``@p.dm1`` writer) are traced
    as they are defined. The program is checked against the card's rules (a KernelDSLError names the DSL line of
    each broken rule) and its kernels' C++ is generated. ``max_cores`` caps how many cores ``p.split`` uses."""
    site = caller_site()
    if not isinstance(name, str) or not name.isidentifier():
        raise fail(f"km.program({name!r}): a program's name is an identifier", site)
    if max_cores is not None and (isinstance(max_cores, bool) or not isinstance(max_cores, int) or max_cores < 1):
        raise fail(f"km.program(max_cores={max_cores!r}): a positive int", site)

    def deco(fn: Callable[..., Any]) -> DSLProgram:
        tensors = _tensor_params(fn)
        builder = ProgramBuilder(name, tensors, _def_site(fn))
        fn(builder, *tensors)
        check.check_program(builder)
        return DSLProgram(builder, fn, max_cores)

    return deco


def _def_site(fn: Callable[..., Any]) -> Site:
    code = fn.__code__
    return Site(code.co_filename, code.co_firstlineno)


def _tensor_params(fn: Callable[..., Any]) -> list[TensorRef]:
    site = _def_site(fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise fail("km.program decorates a function def f(p, a: km.TensorRef, ..., out: km.Out)", site) from None
    params = list(sig.parameters.values())
    if not params:
        raise fail("a km.program function takes p first, then its tensors", site)
    try:
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:
        hints = dict(getattr(fn, "__annotations__", {}))
    out: list[TensorRef] = []
    for i, prm in enumerate(params[1:]):
        if prm.kind not in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD):
            raise fail(f"parameter {prm.name}: a program's tensors are plain positional parameters", site)
        h = hints.get(prm.name, inspect.Parameter.empty)
        if isinstance(h, str):
            kind = Out if h.split(".")[-1] == "Out" else TensorRef if h.split(".")[-1] == "TensorRef" else None
        else:
            kind = h if isinstance(h, type) and issubclass(h, TensorRef) else None
        if kind is None:
            raise fail(f"parameter {prm.name} needs an annotation: km.TensorRef (an input) or km.Out (an output)", site)
        out.append(kind(prm.name, i, site))
    return out


__all__ = ["CORES_KEY", "TILE_FORMATS", "DSLProgram", "program"]
