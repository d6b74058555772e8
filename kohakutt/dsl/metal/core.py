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
from dataclasses import dataclass
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
from kohakutt.hal.program import CoreRange, CoreRangeSet, Kernel, Program, Work, split_work, tensor_accessor_args

MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Variant:
    """What a HAL program of this DSL program is built for: each tensor's format and memory, and the core count."""

    formats: tuple[tuple[str, str], ...]
    cores: int


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
        self._programs: dict[Variant, Program] = {}
        self._compiled: set[tuple[tuple[str, str], ...]] = set()
        self._lock = threading.Lock()

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
    def build(self, buffers: Mapping[str, Any], runtime: Mapping[str, Any], card: CardSpec | None = None) -> Program:
        """The HAL program for these tensors (``name -> Buffer``) and runtime values (checked)."""
        bufs = self._buffers(buffers)
        values = self.check_runtime(runtime)
        card = card or _card_of(bufs) or P150A
        units = self._units(values)
        limit = card.grid[0] * card.grid[1]
        n = max(1, min(units, self.max_cores or limit, limit)) if self.split is not None else 1
        formats = tuple((bufs[t.name].fmt.value, bufs[t.name].kind.value) for t in self.tensors)
        key = Variant(formats, n)
        with self._lock:
            prog = self._programs.get(key)
            if prog is None:
                prog = self._make(bufs, card, n)
                self._programs[key] = prog
                self._compiled.add(formats)
        return prog

    def _units(self, values: Mapping[str, int]) -> int:
        if self.split is None:
            return 1
        return self.split.total.eval(values)

    def _buffers(self, given: Mapping[str, Any]) -> dict[str, Any]:
        names = [t.name for t in self.tensors]
        missing = [n for n in names if n not in given]
        extra = [n for n in given if n not in names]
        if missing or extra:
            raise KernelDSLError(f"program {self.name!r} takes tensors {names}; "
                                 + (f"missing {missing}" if missing else "") + ("; " if missing and extra else "")
                                 + (f"unknown {extra}" if extra else ""))  # fmt: skip
        out = {}
        for t in self.tensors:
            b = getattr(given[t.name], "buffer", given[t.name])
            if getattr(b, "layout", None) is not Layout.TILE:
                raise KernelDSLError(f"program {self.name!r}: tensor {t.name} is in {getattr(b, 'layout', '?')} "
                                     "layout; DSL programs address tensors by tile pages: give tile-layout "
                                     "tensors")  # fmt: skip
            if b.fmt not in (Format.BFLOAT16, Format.FLOAT32, Format.BFLOAT8_B, Format.BFLOAT4_B):
                raise KernelDSLError(f"program {self.name!r}: tensor {t.name} holds {b.fmt.value}; DSL programs "
                                     "compute on float tiles (bfloat16, float32, bfloat8_b, bfloat4_b)")  # fmt: skip
            out[t.name] = b
        return out

    def check_runtime(self, runtime: Mapping[str, Any]) -> dict[str, int]:
        """The runtime values as uint32s, checked against the names the program declares."""
        declared = self.runtime_values
        missing = [n for n in declared if n not in runtime]
        extra = [n for n in runtime if n not in declared]
        if missing:
            s = declared[missing[0]]
            raise fail(f"program {self.name!r} runs without runtime value {missing[0]!r} (declared here); pass "
                       f"runtime={{{', '.join(repr(n) + ': ...' for n in declared)}}}", s.site)  # fmt: skip
        if extra:
            raise KernelDSLError(f"program {self.name!r} has no runtime value {extra[0]!r}; it declares "
                                 f"{list(declared)} (p.runtime)")  # fmt: skip
        out = {}
        for n, v in runtime.items():
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise fail(f"runtime value {n!r} is {v!r}: runtime values are uint32 (pass a float's fp32 bits, "
                           "bits(x))", declared[n].site)  # fmt: skip
            if not 0 <= int(v) <= MASK:
                raise fail(f"runtime value {n!r} = {v} is not a uint32 (0..{MASK}); pass a negative value as "
                           "v & 0xFFFFFFFF", declared[n].site)  # fmt: skip
            out[n] = int(v)
        return out

    def _cb_format(self, cb: CB, bufs: Mapping[str, Any]) -> Format:
        return cb.dtype if cb.dtype is not None else bufs[cb.like.name].fmt  # type: ignore[union-attr]

    def _make(self, bufs: Mapping[str, Any], card: CardSpec, n: int) -> Program:
        fmts = {idx: self._cb_format(cb, bufs) for idx, cb in self.cbs.items()}
        need = check.cb_bytes((cb, fmts[idx].tile_bytes) for idx, cb in self.cbs.items())
        room = card.l1_usable
        if need > room:
            parts = ", ".join(f"{cb.name} (line {cb.site.line}): {cb.pages} x {fmts[i].tile_bytes} B "
                              f"{fmts[i].value}" for i, cb in sorted(self.cbs.items()))  # fmt: skip
            raise fail(f"program {self.name!r}: its circular buffers need {need:,} B of L1 per core with these "
                       f"tensors ({parts}), more than the {room:,} B usable: use fewer pages", self.site)  # fmt: skip
        cores = _worker_cores(n, card)
        from kohakutt.hal.program import CircularBuffer

        cbs = [CircularBuffer(idx, fmts[idx], fmts[idx].tile_bytes, cb.pages, cores)
               for idx, cb in sorted(self.cbs.items())]  # fmt: skip
        kernels = []
        for g in self._ordered():
            kt = self.kernels[g.role]
            ct: list[int] = []
            for t in g.accessors:
                b = bufs[t]
                ct += tensor_accessor_args(b.fmt.tile_bytes, b.kind.value)
            kernels.append(Kernel(g.role, g.source, cores, None, compile_time_args=ct, name=g.name,
                                  math_fidelity=kt.fidelity, fp32_dest_acc_en=kt.fp32_dest,
                                  math_approx_mode=kt.approx))  # fmt: skip
        return Program(f"{self.name}", kernels, cbs, runtime_args=self._runtime_args(cores),
                       tensors=tuple(t.name for t in self.tensors), work=self._work(cores))  # fmt: skip

    def _envs(self, cores: CoreRangeSet, values: Mapping[str, int]) -> list[tuple[tuple[int, int], dict[str, int]]]:
        """Per core, the value of every symbol its kernels read."""
        base = dict(values)
        if self.split is None:
            return [(c, base) for c in cores.cores()]
        total = self.split.total.eval(values)
        return [(c, base | {"split.start": s, "split.count": k}) for c, s, k in split_work(total, cores)]

    def _runtime_args(self, cores: CoreRangeSet) -> Callable[[Sequence[Any], Mapping[str, Any]], dict[str, Any]]:
        order = [t.name for t in self.tensors]
        gens = self._ordered()

        def args(bufs: Sequence[Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
            values = self.check_runtime(runtime)
            address = {n: b.address for n, b in zip(order, bufs)}
            out: dict[str, Any] = {}
            envs = self._envs(cores, values)
            for g in gens:
                per: dict[tuple[int, int], list[int]] = {}
                for core, env in envs:
                    row = []
                    for a in g.args:
                        if a.kind == "tensor":
                            row.append(address[a.name])
                        elif a.kind in ("start", "count"):
                            row.append(env[f"split.{a.kind}"])
                        else:
                            row.append(env[a.name])
                    per[core] = row
                out[g.name] = per
            return out

        return args

    def _work(self, cores: CoreRangeSet) -> Callable[[Sequence[Any], Mapping[str, Any]], Work]:
        order = [t.name for t in self.tensors]

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
    def launch(self, tensors: Mapping[str, Any], runtime: Mapping[str, Any] | None = None, *,
               stream: Any = None) -> None:  # fmt: skip
        """Queue the program over ``tensors`` (name -> a tile-layout ``DeviceTensor`` or ``Buffer``; outputs
        allocated by the caller) with ``runtime`` values, on the tensors' device, in stream order. It runs from its
        generated C++: on the simulator through the host build of the kernel API, on a card through generic_op."""
        runtime = dict(runtime or {})
        prog = self.build(tensors, runtime)
        bufs = [getattr(tensors[t.name], "buffer", tensors[t.name]) for t in self.tensors]
        device = bufs[0].device
        device.run_program(prog, bufs, runtime, stream=stream)


def _card_of(bufs: Mapping[str, Any]) -> CardSpec | None:
    for b in bufs.values():
        dev = getattr(b, "device", None)
        if dev is not None and getattr(dev, "card", None) is not None:
            return dev.card
    return None


def _worker_cores(n: int, card: CardSpec) -> CoreRangeSet:
    """The first ``n`` worker cores, row by row."""
    gx, _gy = card.grid
    full, rest = divmod(n, gx)
    ranges = [CoreRange((0, 0), (gx - 1, full - 1))] if full else []
    if rest:
        ranges.append(CoreRange((0, full), (rest - 1, full)))
    return CoreRangeSet.of(ranges)


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


__all__ = ["DSLProgram", "Variant", "program"]
