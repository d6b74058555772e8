"""Tracing a DSL program: the program function and its kernels run once, with symbolic values, and record statements.

``p`` (:class:`ProgramBuilder`) declares runtime values, the work split, circular buffers and the kernels; each
kernel function runs at once with ``k`` (:class:`DataMovement`) or ``c`` (:class:`Compute`), whose calls (and the
CBs' ``reserve / push / wait / pop``) append statements to the kernel's body. ``k.range`` yields its loop variable
once and records the loop; ``k.when`` records a conditional. Every statement keeps the line it was written on.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import keyword
import re
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kohakutt.dsl.metal import ops as opspec
from kohakutt.dsl.metal.expr import Bits, Const, Expr, Site, Sym, as_expr, caller_site, fail
from kohakutt.errors import ConfigError
from kohakutt.hal.layout import Format
from kohakutt.hal.program import MathFidelity

MAX_CBS = 64  # Blackhole: CB ids 0..63 per core
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------------------------------------------- tensors
class TensorRef:
    """A tensor the program reads (an input): ``t.page(i)`` is its page ``i`` (one tile, in row-major tile order)."""

    is_output = False

    def __init__(self, name: str, index: int, site: Site):
        self.name, self.index, self.site = name, index, site

    def page(self, i: Expr | int) -> Page:
        return Page(self, as_expr(i, f"{self.name}.page"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Out(TensorRef):
    """A tensor the program writes (an output), allocated by the caller (``km.Call(outputs=...)``)."""

    is_output = True


@dataclass(frozen=True)
class Page:
    tensor: TensorRef
    index: Expr


# ---------------------------------------------------------------------------------------- circular buffers
@dataclass(eq=False)
class CB:
    """A circular buffer: ``pages`` tiles of ``like``'s format (known when the program runs) or of ``dtype``."""

    index: int
    like: TensorRef | None
    dtype: Format | None
    pages: int
    site: Site
    name: str

    def _record(self, op: str, n: int) -> None:
        k = current_kernel(f"{self.name}.{op}")
        if isinstance(n, (Expr, bool)) or not isinstance(n, int):
            raise fail(f"{self.name}.{op}({n!r}): page counts are Python ints (a CB's size is fixed when the program "
                       "is defined)")  # fmt: skip
        k.emit(CBOp(caller_site(), op, self, n))

    def reserve(self, n: int = 1) -> Slot:
        """``cb_reserve_back``: wait for ``n`` free pages; returns the first of them (a slot to read into)."""
        self._record("reserve", n)
        return Slot(self, Const(0), write=True)

    def push(self, n: int = 1) -> None:
        """``cb_push_back``: hand ``n`` filled pages to the consumer."""
        self._record("push", n)

    def wait(self, n: int = 1) -> Slot:
        """``cb_wait_front``: wait for ``n`` filled pages; returns the first of them."""
        self._record("wait", n)
        return Slot(self, Const(0), write=False)

    def pop(self, n: int = 1) -> None:
        """``cb_pop_front``: free ``n`` pages for the producer."""
        self._record("pop", n)

    def front(self, i: Expr | int = 0) -> Slot:
        """Page ``i`` of the pages waited for (what ``k.write`` sends)."""
        return Slot(self, as_expr(i, f"{self.name}.front"), write=False)

    def back(self, i: Expr | int = 0) -> Slot:
        """Page ``i`` of the pages reserved (what ``k.read`` fills)."""
        return Slot(self, as_expr(i, f"{self.name}.back"), write=True)

    def __repr__(self) -> str:
        return f"CB({self.index}, {self.name})"


@dataclass(frozen=True)
class Slot:
    """A page of a CB in L1: of the reserved pages (``write``) or of the pages waited for."""

    cb: CB
    index: Expr
    write: bool

    def __getitem__(self, i: Expr | int) -> Slot:
        return Slot(self.cb, self.index + as_expr(i, "slot index") if not _is_zero(self.index) else as_expr(i),
                    self.write)  # fmt: skip


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


# ----------------------------------------------------------------------------------------------- statements
@dataclass(eq=False)
class Stmt:
    site: Site


@dataclass(eq=False)
class CBOp(Stmt):
    op: str  # reserve / push / wait / pop
    cb: CB
    n: int


@dataclass(eq=False)
class Read(Stmt):
    page: Page
    slot: Slot


@dataclass(eq=False)
class Write(Stmt):
    slot: Slot
    page: Page


@dataclass(eq=False)
class Barrier(Stmt):
    kind: str  # reads_done / flushed / writes_done


@dataclass(eq=False)
class Startup(Stmt):
    cbs: tuple[CB, ...]


@dataclass(eq=False)
class Init(Stmt):
    spec: opspec.OpSpec
    cbs: tuple[CB, ...]


@dataclass(eq=False)
class TileOp(Stmt):
    """A compute op (``c.copy`` and ``c.op``): CB operands with their tile indices, DST slots, a scalar."""

    spec: opspec.OpSpec
    cbs: tuple[CB, ...] = ()
    tiles: tuple[Expr, ...] = ()
    slots: tuple[int, ...] = ()  # the slots read (binary: a, b) then the one written (last)
    value: Expr | None = None


@dataclass(eq=False)
class Pack(Stmt):
    slot: int
    cb: CB
    page: Expr | None


@dataclass(eq=False)
class Loop(Stmt):
    var: Sym
    start: Expr
    stop: Expr
    step: int
    body: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class When(Stmt):
    cond: Expr
    body: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class Registers(Stmt):
    body: list[Stmt] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- kernels
_state = threading.local()


def current_kernel(what: str) -> KernelBuilder:
    k = getattr(_state, "kernel", None)
    if k is None:
        raise fail(f"{what} outside a kernel: CB and tile calls belong inside a @p.dm0 / @p.compute / @p.dm1 function")
    return k


class KernelBuilder:
    """What ``k`` and ``c`` share: loops, conditionals and the statement list being recorded."""

    role = ""

    def __init__(self, program: ProgramBuilder, name: str, site: Site):
        self.program, self.name, self.site = program, name, site
        self.body: list[Stmt] = []
        self._stack: list[list[Stmt]] = [self.body]
        self._loops = itertools.count()
        self._broken: Site | None = None
        self._registers: Registers | None = None

    def emit(self, s: Stmt) -> None:
        if self._broken is not None:
            raise fail("'break' out of a k.range loop: the loop is recorded once and runs in C++; a loop cannot be "
                       "left early (use k.when around the rest of the body)", self._broken)  # fmt: skip
        self._stack[-1].append(s)

    def range(self, start: Expr | int, stop: Expr | int | None = None, step: int = 1) -> Iterator[Expr]:
        """A loop on the core: ``for i in k.range(n)`` or ``k.range(start, stop[, step])``; ``step`` is a Python int.
        The body is recorded once, with ``i`` a runtime value."""
        site = caller_site()
        if stop is None:
            start, stop = 0, start
        if isinstance(step, (Expr, bool)) or not isinstance(step, int) or step <= 0:
            raise fail(f"k.range step must be a positive Python int, got {step!r}", site)
        key = f"{self.name}.loop{next(self._loops)}"
        var = Sym(_loop_name(site), "loop", site, key)
        loop = Loop(site, var, as_expr(start, "k.range start"), as_expr(stop, "k.range stop"), step)
        self.emit(loop)
        return self._iterate(loop)

    def _iterate(self, loop: Loop) -> Iterator[Expr]:
        self._stack.append(loop.body)
        try:
            yield loop.var
        except GeneratorExit:
            if self._stack and self._stack[-1] is loop.body:
                self._stack.pop()
                self._broken = loop.site
            raise
        self._stack.pop()

    @contextlib.contextmanager
    def when(self, cond: Expr | int) -> Iterator[None]:
        """``with k.when(cond):`` records its body under ``if (cond)`` in C++. The body must leave every CB as it
        found it (what it reserves it pushes, what it waits for it pops), so both paths stay balanced."""
        w = When(caller_site(), as_expr(cond, "k.when"))
        self.emit(w)
        self._stack.append(w.body)
        try:
            yield
        finally:
            self._stack.pop()

    def __getattr__(self, name: str) -> Any:
        other = {"reader": Compute, "writer": Compute, "compute": DataMovement}[self.role]
        if hasattr(other, name):
            where = "the compute kernel (c)" if other is Compute else "a data-movement kernel (k)"
            raise fail(f"{self.name} is a {self.role} kernel: .{name} belongs to {where}")
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


class DataMovement(KernelBuilder):
    """``k`` of a data-movement kernel (``@p.dm0`` reads, ``@p.dm1`` writes): moves pages between DRAM and CBs."""

    def __init__(self, program: ProgramBuilder, name: str, site: Site, role: str):
        super().__init__(program, name, site)
        self.role = role

    def read(self, page: Page, slot: Slot) -> None:
        """``noc_async_read_page``: tensor page ``page`` into ``slot`` (from ``cb.reserve``); finish the batch with
        ``k.reads_done()`` before pushing."""
        if not isinstance(page, Page):
            raise fail(f"k.read takes a tensor page (t.page(i)) first, got {page!r}")
        if not isinstance(slot, Slot) or not slot.write:
            raise fail("k.read reads into a reserved slot: pass what cb.reserve(n) returns (or cb.back(i))")
        self.emit(Read(caller_site(), page, slot))

    def reads_done(self) -> None:
        """``noc_async_read_barrier``: every read issued so far has landed."""
        self.emit(Barrier(caller_site(), "reads_done"))

    def write(self, src: CB | Slot, page: Page) -> None:
        """``noc_async_write_page``: the front page of ``src`` (a CB waited for, or ``cb.front(i)``) to tensor page
        ``page``; ``k.flushed()`` before popping it."""
        slot = src.front(0) if isinstance(src, CB) else src
        if not isinstance(slot, Slot) or slot.write:
            raise fail("k.write sends a page waited for: pass the CB (its front page) or cb.front(i)")
        if not isinstance(page, Page):
            raise fail(f"k.write takes a tensor page (t.page(i)) second, got {page!r}")
        self.emit(Write(caller_site(), slot, page))

    def flushed(self) -> None:
        """``noc_async_writes_flushed``: the writes issued so far have left L1 (their pages may be popped)."""
        self.emit(Barrier(caller_site(), "flushed"))

    def writes_done(self) -> None:
        """``noc_async_write_barrier``: every write issued so far has arrived."""
        self.emit(Barrier(caller_site(), "writes_done"))


class Compute(KernelBuilder):
    """``c`` of the compute kernel: tiles from CBs into DST register slots, ops on them, packed into CBs."""

    role = "compute"

    def startup(self, *cbs: CB) -> None:
        """``compute_kernel_hw_startup(in0, [in1,] out)``: once, before any tile op."""
        if len(cbs) not in (2, 3) or not all(isinstance(c, CB) for c in cbs):
            raise fail("c.startup takes the CBs it starts from: (in0, out) or (in0, in1, out)")
        self.emit(Startup(caller_site(), tuple(cbs)))

    @contextlib.contextmanager
    def registers(self) -> Iterator[None]:
        """The DST registers for one batch: ``tile_regs_acquire`` on entry; math (``c.copy``, ``c.op``) first, then
        the packs (``tile_regs_commit`` / ``tile_regs_wait`` go before the first ``c.pack``); ``tile_regs_release``
        on exit."""
        site = caller_site()
        if self._registers is not None:
            raise fail(f"c.registers() inside the one opened at line {self._registers.site.line}: one batch at a time",
                       site)  # fmt: skip
        r = Registers(site)
        self.emit(r)
        self._stack.append(r.body)
        self._registers = r
        try:
            yield
        finally:
            self._stack.pop()
            self._registers = None

    def init(self, name: str, *cbs: CB) -> None:
        """The init of op ``name`` (``c.init("copy", cb)``, ``c.init("add")``, ``c.init("matmul", in0, in1)``,
        ``c.init("reduce_row_sum", cb, scaler, out)``): needed before the op, after any other op's init."""
        s = _spec(name, "c.init")
        want = {"copy": 1, "unary_cb": 1, "fpu": 2, "reduce": 3}.get(s.form, 0)
        if len(cbs) != want or not all(isinstance(c, CB) for c in cbs):
            form = {0: "no CB", 1: "one CB (the input)", 2: "two CBs (in0, in1)", 3: "three CBs (in, scaler, out)"}
            raise fail(f"c.init({name!r}) takes {form[want]}, got {len(cbs)} arguments")
        self.emit(Init(caller_site(), s, tuple(cbs)))

    def copy(self, cb: CB, tile: Expr | int, slot: int) -> None:
        """``copy_tile``: tile ``tile`` of the pages waited for in ``cb`` into DST slot ``slot``."""
        if not isinstance(cb, CB):
            raise fail(f"c.copy takes a CB first, got {cb!r}")
        self.emit(TileOp(caller_site(), opspec.OPS["copy"], (cb,), (as_expr(tile, "c.copy tile"),),
                         (_slot(slot, "c.copy"),)))  # fmt: skip

    def op(self, name: str, *args: Any, value: Any = None) -> None:
        """Compute op ``name`` (see ``kohakutt.dsl.metal.ops``): on DST slots (``c.op("exp", 0)``,
        ``c.op("add", 0, 1, 0)``, ``c.op("mul_scalar", 0, value=s)``) or on CB tiles into a slot
        (``c.op("mul_tiles", cb0, cb1, t0, t1, slot)``, ``c.op("reduce_row_sum", cb, scaler, t, 0, slot)``)."""
        site = caller_site()
        s = _spec(name, "c.op")
        if s.form == "copy":
            raise fail("copy is c.copy(cb, tile, slot)")
        val = None
        if s.form in ("scalar", "fill"):
            if value is None:
                raise fail(f"c.op({name!r}, slot, value=v) needs value=: a float, its fp32 bits (bits(x)) or a "
                           "runtime value holding them")  # fmt: skip
            val = _scalar(value, name)
        elif value is not None:
            raise fail(f"c.op({name!r}) takes no value=")
        if s.form in ("sfpu", "scalar", "fill"):
            _arity(name, args, 1, "(slot)")
            op = TileOp(site, s, slots=(_slot(args[0], name),), value=val)
        elif s.form == "binary":
            _arity(name, args, 3, "(a, b, out): slot out = slot a <op> slot b")
            op = TileOp(site, s, slots=tuple(_slot(a, name) for a in args))
        elif s.form in ("fpu", "reduce"):
            what = ("(cb, scaler_cb, tile, scaler_tile, slot)" if s.form == "reduce"
                    else "(cb0, cb1, tile0, tile1, slot)")  # fmt: skip
            _arity(name, args, 5, what)
            if not all(isinstance(a, CB) for a in args[:2]):
                raise fail(f"c.op({name!r}) takes {what}: the first two are CBs")
            op = TileOp(site, s, tuple(args[:2]), tuple(as_expr(t, name) for t in args[2:4]), (_slot(args[4], name),))
        else:  # unary_cb
            _arity(name, args, 3, "(cb, tile, slot)")
            if not isinstance(args[0], CB):
                raise fail(f"c.op({name!r}) takes (cb, tile, slot)")
            op = TileOp(site, s, (args[0],), (as_expr(args[1], name),), (_slot(args[2], name),))
        self.emit(op)

    def pack(self, slot: int, cb: CB, page: Expr | int | None = None) -> None:
        """``pack_tile``: DST slot ``slot`` into the pages reserved in ``cb`` (converting to its format); ``page``
        places it at that page of the reservation (``pack_tile<true>``)."""
        if not isinstance(cb, CB):
            raise fail(f"c.pack takes (slot, cb), got a {type(cb).__name__} for the CB")
        self.emit(Pack(caller_site(), _slot(slot, "c.pack"), cb, None if page is None else as_expr(page, "c.pack")))


def _spec(name: str, what: str) -> opspec.OpSpec:
    s = opspec.spec(name) if isinstance(name, str) else None
    if s is None:
        raise fail(f"{what}: no compute op {name!r}; the ops are {', '.join(opspec.names())}")
    return s


def _arity(name: str, args: tuple[Any, ...], n: int, form: str) -> None:
    if len(args) != n:
        raise fail(f"c.op({name!r}, ...) takes {form}, got {len(args)} arguments")


def _slot(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise fail(f"{what}: a DST register slot is a Python int (checked against the registers the precision has), "
                   f"got {v!r}")  # fmt: skip
    if v < 0:
        raise fail(f"{what}: DST slot {v} is negative")
    return v


def _scalar(v: Any, name: str) -> Expr:
    """A scalar operand as fp32 bits: a float is converted, an int is taken as the bits, a runtime value passes."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, float):
        from kohakutt.kernels.custom import bits

        return Bits(bits(v), v)
    if isinstance(v, int) and not isinstance(v, bool):
        return as_expr(v, f"c.op({name!r}) value (fp32 bits)")
    raise fail(f"c.op({name!r}) value= is a float, its fp32 bits (an int, bits(x)) or a runtime value; got {v!r}")


def _loop_name(site: Site) -> str:
    m = re.search(r"\bfor\s+([A-Za-z_]\w*)\s+in\b", site.text)
    name = m.group(1) if m else "_"
    return "" if name == "_" else name  # "": a free name (i, j, ...) is chosen when the C++ is written


def assigned_names(site: Site) -> list[str | None] | None:
    """The names a one-line assignment at ``site`` binds, in order (``a, b = ...`` -> ["a", "b"]), or None."""
    try:
        tree = ast.parse(textwrap.dedent(site.text))
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1:
        return None
    t = tree.body[0].targets[0]
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Tuple):
        return [e.id if isinstance(e, ast.Name) else None for e in t.elts]
    return None


# ---------------------------------------------------------------------------------------------- the program
@dataclass
class KernelTrace:
    role: str  # reader / writer / compute
    name: str
    site: Site
    body: list[Stmt]
    fp32_dest: bool = False
    fidelity: str = "HiFi4"
    approx: bool = False


@dataclass
class Split:
    total: Expr
    start: Sym
    count: Sym
    site: Site


class ProgramBuilder:
    """``p``: the program being defined."""

    def __init__(self, name: str, tensors: list[TensorRef], site: Site):
        self.name, self.tensors, self.site = name, tensors, site
        self.runtime_values: dict[str, Sym] = {}
        self.split_: Split | None = None
        self.cbs: dict[int, CB] = {}
        self.kernels: dict[str, KernelTrace] = {}
        self._calls_on_line: dict[Site, int] = {}

    def _nth_on_line(self, site: Site) -> int:
        n = self._calls_on_line.get(site, 0)
        self._calls_on_line[site] = n + 1
        return n

    def runtime(self, name: str) -> Expr:
        """A uint32 runtime argument, given at each call (``km.Call(runtime={name: value})``): sizes, counts, the
        fp32 bits of a scale. A new value compiles nothing."""
        site = caller_site()
        if not isinstance(name, str) or not IDENT.match(name) or keyword.iskeyword(name) or name in _CPP_RESERVED:
            raise fail(f"p.runtime({name!r}): a runtime value's name is a C++ identifier (letters, digits, _)", site)
        if name in self.runtime_values:
            raise fail(f"p.runtime({name!r}) is declared twice (first at line {self.runtime_values[name].site.line})",
                       site)  # fmt: skip
        if any(t.name == name for t in self.tensors):
            raise fail(f"p.runtime({name!r}) has the name of a tensor of the program", site)
        s = Sym(name, "runtime", site, key=name)
        self.runtime_values[name] = s
        return s

    def split(self, total: Expr | int) -> tuple[Expr, Expr]:
        """Split ``total`` units (tiles, rows) over the cores, as TT-NN's ``split_work_to_cores`` does: returns this
        core's ``(start, count)``. One split per program; it also chooses the cores (no more than the units)."""
        site = caller_site()
        if self.split_ is not None:
            raise fail(f"p.split is called twice (first at line {self.split_.site.line}): one split per program", site)
        names = assigned_names(site) or []
        start_name = names[0] if len(names) == 2 and names[0] else "start"
        count_name = names[1] if len(names) == 2 and names[1] else "count"
        sp = Split(as_expr(total, "p.split"), Sym(start_name, "start", site, "split.start"),
                   Sym(count_name, "count", site, "split.count"), site)  # fmt: skip
        self.split_ = sp
        return sp.start, sp.count

    def cb(self, index: int, like: TensorRef | None = None, *, dtype: Any = None, pages: int = 2) -> CB:
        """Circular buffer ``index`` (0..63; TT-Metal's convention: 0-15 inputs, 16-23 outputs, 24-31
        intermediates) of ``pages`` tiles (default 2: double-buffered), in the format of tensor ``like`` (known
        when the program runs) or of ``dtype`` ("bfloat16", "float32", ...)."""
        site = caller_site()
        nth = self._nth_on_line(site)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_CBS:
            raise fail(f"p.cb({index!r}): CB indices are Python ints 0..{MAX_CBS - 1}", site)
        if index in self.cbs:
            raise fail(f"p.cb({index}) is defined twice (first at line {self.cbs[index].site.line}); a CB index is "
                       "unique per core", site)  # fmt: skip
        if (like is None) == (dtype is None):
            raise fail(f"p.cb({index}) takes like=<tensor> or dtype=<format>, exactly one", site)
        if like is not None and not isinstance(like, TensorRef):
            raise fail(f"p.cb({index}, like=...) takes a tensor of the program, got {like!r}", site)
        fmt = None
        if dtype is not None:
            try:
                fmt = Format.of(getattr(dtype, "value", dtype))
            except Exception:
                raise fail(f"p.cb({index}, dtype={dtype!r}): not a tile format (bfloat16, float32, bfloat8_b, "
                           "bfloat4_b)", site) from None  # fmt: skip
            if not fmt.is_float and fmt not in (Format.BFLOAT8_B, Format.BFLOAT4_B):
                raise fail(f"p.cb({index}, dtype={fmt.value}): compute works on float formats", site)
        if isinstance(pages, bool) or not isinstance(pages, int) or pages < 1:
            raise fail(f"p.cb({index}, pages={pages!r}): pages is a positive Python int", site)
        names = assigned_names(site) or []
        name = names[nth] if nth < len(names) and names[nth] else f"cb_{index}"
        cb = CB(index, like, fmt, pages, site, name)
        self.cbs[index] = cb
        return cb

    def _kernel(self, role: str, fn: Callable[..., Any], site: Site, **config: Any) -> KernelTrace:
        if role in self.kernels:
            raise fail(f"the program has two {_ROLE_NAMES[role]} kernels (the first at line "
                       f"{self.kernels[role].site.line})", site)  # fmt: skip
        name = getattr(fn, "__name__", role)
        if not IDENT.match(name) or any(k.name == name for k in self.kernels.values()):
            name = role
        b: KernelBuilder = Compute(self, name, site) if role == "compute" else DataMovement(self, name, site, role)
        if getattr(_state, "kernel", None) is not None:
            raise fail("a kernel defined inside another kernel", site)
        _state.kernel = b
        try:
            fn(b)
        finally:
            _state.kernel = None
        if b._broken is not None:
            raise fail("'break' out of a k.range loop: the loop is recorded once and runs in C++; it cannot be left "
                       "early (use k.when around the rest of the body)", b._broken)  # fmt: skip
        k = KernelTrace(role, name, site, b.body, **config)
        self.kernels[role] = k
        return k

    def dm0(self, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        """The reading data-movement kernel: built as TT-Metal's reader (RISCV_1 / NCRISC, NOC 1)."""
        self._kernel("reader", fn, caller_site())
        return fn

    def dm1(self, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        """The writing data-movement kernel: built as TT-Metal's writer (RISCV_0 / BRISC, NOC 0)."""
        self._kernel("writer", fn, caller_site())
        return fn

    def compute(self, fn: Callable[[Any], None] | None = None, *, fp32_dest: bool = False,
                fidelity: str | int | MathFidelity = "HiFi4", approx: bool = False) -> Any:  # fmt: skip
        """The compute kernel: ``@p.compute`` or ``@p.compute(fp32_dest=True, fidelity="HiFi2", approx=False)``.
        ``fp32_dest`` keeps DST in fp32 (4 register slots instead of 8); ``approx`` picks the SFPU's approximate
        exp / log / gelu / sigmoid / tanh / erf (and the kernel's math_approx_mode)."""
        site = caller_site()
        try:
            fidelity = MathFidelity.of(fidelity).name
        except ConfigError:
            raise fail(f"p.compute(fidelity={fidelity!r}): LoFi, HiFi2, HiFi3 or HiFi4 (or 0, 2, 3, 4)", site) from None

        def deco(f: Callable[[Any], None]) -> Callable[[Any], None]:
            self._kernel("compute", f, site, fp32_dest=bool(fp32_dest), fidelity=fidelity, approx=bool(approx))
            return f

        return deco(fn) if fn is not None else deco


_ROLE_NAMES = {"reader": "@p.dm0 (reader)", "writer": "@p.dm1 (writer)", "compute": "@p.compute"}
_CPP_RESERVED = {"kernel_main", "uint32_t", "int32_t", "uint16_t", "uint64_t", "auto", "tt", "ckernel"}


__all__ = [
    "CB", "MAX_CBS", "Barrier", "CBOp", "Compute", "DataMovement", "Init", "KernelBuilder", "KernelTrace", "Loop",
    "Out", "Pack", "Page", "ProgramBuilder", "Read", "Registers", "Slot", "Split", "Startup", "Stmt", "TensorRef",
    "TileOp", "When", "Write", "assigned_names",
]  # fmt: skip
