"""Metalium C++ from a traced DSL program: one ``void kernel_main()`` file per kernel, for TT-Metal 0.81.1's API.

Each kernel reads the runtime arguments it uses (tensor addresses first, in the program's tensor order, then the
split's start / count, then the runtime values in declaration order), builds a ``TensorAccessor`` per tensor it moves
(its ``TensorAccessorArgs`` are the compile-time arguments, in the same order), names its CBs, and then runs its
statements. ``#line`` directives map every statement to the DSL line it came from, so compiler errors and the
simulator's rule violations name the Python line.

The compute kernel's hidden state is written out the way TT-Metal kernels do it: ``tile_regs_acquire`` /
``commit`` / ``wait`` / ``release`` around each ``c.registers()`` block; ``reconfig_data_format`` (SrcA / SrcB) and
``pack_reconfig_data_format`` whenever an op reads or packs other CBs than the unpacker or packer was last set up
for (unknown at the top of a loop body unless the body ends as it starts), so CBs of different formats convert
correctly; ``reduce_uninit`` before the next FPU init after a reduce.
"""

from __future__ import annotations

import copy
import keyword
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kohakutt.dsl.metal import ops as opspec
from kohakutt.dsl.metal.expr import Expr, Site, Sym
from kohakutt.dsl.metal.trace import (
    CB,
    Barrier,
    CBOp,
    Init,
    KernelTrace,
    Loop,
    Pack,
    ProgramBuilder,
    Read,
    Registers,
    Slot,
    Startup,
    Stmt,
    TileOp,
    When,
    Write,
)

TT_METAL = "0.81.1"
_CPP_WORDS = {
    "alignas", "alignof", "and", "asm", "auto", "bool", "break", "case", "catch", "char", "class", "const", "constexpr",
    "continue", "default", "delete", "do", "double", "else", "enum", "explicit", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "namespace", "new", "not", "operator", "or", "private",
    "protected", "public", "register", "return", "short", "signed", "sizeof", "static", "struct", "switch",
    "template", "this", "throw", "true", "try", "typedef", "union", "unsigned", "using", "virtual", "void",
    "volatile", "while", "xor", "kernel_main", "uint32_t", "uint16_t", "uint8_t", "int32_t", "uint64_t", "tt",
    "ckernel", "noc_index", "my_x", "my_y", "DST_ACCUM_MODE", "APPROX", "MATH_FIDELITY",
}  # fmt: skip


@dataclass
class Arg:
    """One runtime argument of a kernel: a tensor's address, the split's start / count, or a runtime value."""

    kind: str  # tensor / start / count / runtime
    name: str  # the tensor's or runtime value's name (the split's symbol name for start / count)

    def label(self) -> str:
        return f"{self.name}'s address" if self.kind == "tensor" else self.name


@dataclass
class Generated:
    role: str
    name: str
    source: str
    args: list[Arg]
    accessors: list[str]  # tensor names whose TensorAccessorArgs are the compile-time args, in order
    cbs: list[int]


# ----------------------------------------------------------------------------------------------- names
class Namer:
    def __init__(self) -> None:
        self.taken: set[str] = set(_CPP_WORDS) | set(keyword.kwlist)
        self.scopes: list[set[str]] = []

    def claim(self, want: str, suffix: str = "") -> str:
        name = want
        if name in self.taken or any(name in s for s in self.scopes):
            name = f"{want}{suffix}" if suffix else want
            n = 1
            while name in self.taken or any(name in s for s in self.scopes):
                name = f"{want}_{n}"
                n += 1
        (self.scopes[-1] if self.scopes else self.taken).add(name)
        return name

    def free(self) -> str:
        """A loop variable's name when the DSL loop has none (``for _ in ...``): i, j, l, m, n, then i_1, ..."""
        for want in ("i", "j", "l", "m", "n"):
            if want not in self.taken and not any(want in s for s in self.scopes):
                return self.claim(want)
        return self.claim("i")


# -------------------------------------------------------------------------------------------- the emitter
class Emitter:
    """Lines of C++, with ``#line`` directives so that each statement's line is its DSL line."""

    def __init__(self, dry: bool = False):
        self.lines: list[str] = []
        self.depth = 1
        self.file: str | None = None
        self.next: int | None = None
        self.dry = dry

    def line(self, text: str, site: Site | None = None) -> None:
        if self.dry:
            return
        pad = "    " * self.depth
        if site is not None and (site.file != self.file or site.line != self.next):
            where = f' "{_c_path(site.file)}"' if site.file != self.file else ""
            self.lines.append(f"{pad}#line {site.line}{where}")
            self.file, self.next = site.file, site.line
        self.lines.append(pad + text)
        if self.next is not None:
            self.next += 1


def _c_path(path: str) -> str:
    return path.replace("\\", "/").replace('"', "'")


@dataclass
class Unit:
    """What the unpacker (SrcA, SrcB), the packer and the reduce mask were last set up for (None: not known)."""

    srca: int | None = None
    srcb: int | None = None
    pack: int | None = None
    reduce: bool | None = False

    def known(self) -> tuple:
        return (self.srca, self.srcb, self.pack, self.reduce)


# ------------------------------------------------------------------------------------------- the kernels
@dataclass
class KernelGen:
    program: ProgramBuilder
    kernel: KernelTrace
    names: dict[str, str] = field(default_factory=dict)  # symbol key -> C++ name
    cb_names: dict[int, str] = field(default_factory=dict)
    namer: Namer = field(default_factory=Namer)
    has_reduce: bool = False

    def generate(self) -> Generated:
        p, k = self.program, self.kernel
        tensors, syms, cbs, headers = _uses(k.body)
        self.has_reduce = any(h == "api/compute/reduce.h" for h in headers)
        args: list[Arg] = []
        order = [t.name for t in p.tensors]
        moved = [n for n in order if n in tensors]
        for n in moved:
            args.append(Arg("tensor", n))
        if p.split_ is not None:
            for s in (p.split_.start, p.split_.count):
                if s.key in syms:
                    args.append(Arg(s.kind, s.name))
        for name, s in p.runtime_values.items():
            if s.key in syms:
                args.append(Arg("runtime", name))

        # names: tensors (accessor and its address / args), runtime values, CBs
        for n in moved:
            self.names[f"tensor:{n}"] = self.namer.claim(n, "_t")
        addr = {n: self.namer.claim(f"{n}_addr") for n in moved}
        targs = {n: self.namer.claim(f"{n}_args") for n in moved}
        sym_by_arg: dict[int, Sym] = {}
        for i, a in enumerate(args):
            if a.kind == "tensor":
                continue
            s = _arg_sym(p, a)
            sym_by_arg[i] = s
            self.names[s.key] = self.namer.claim(s.name, "_v")
        for idx in sorted(cbs):
            self.cb_names[idx] = self.namer.claim(p.cbs[idx].name, "_cb")

        e = Emitter()  # the preamble has no #line: it is the generated file's own (and its values the host's)
        for i, a in enumerate(args):
            if a.kind == "tensor":
                e.line(f"const uint32_t {addr[a.name]} = get_arg_val<uint32_t>({i});")
            else:
                s = sym_by_arg[i]
                comment = "  // fp32 bits" if a.kind == "runtime" and _holds_bits(k.body, s) else ""
                e.line(f"const uint32_t {self.names[s.key]} = get_arg_val<uint32_t>({i});{comment}")
        prev = "0"
        for n in moved:
            e.line(f"constexpr auto {targs[n]} = TensorAccessorArgs<{prev}>();")
            e.line(f"const auto {self.names['tensor:' + n]} = TensorAccessor({targs[n]}, {addr[n]});")
            prev = f"{targs[n]}.next_compile_time_args_offset()"
        for idx in sorted(cbs):
            e.line(f"constexpr uint32_t {self.cb_names[idx]} = tt::CBIndex::c_{idx};")
        self.block(k.body, e, Unit())

        head = self._header(args, moved, headers)
        source = head + "void kernel_main() {\n" + "\n".join(e.lines) + "\n}\n"
        return Generated(k.role, k.name, source, args, moved, sorted(cbs))

    def _header(self, args: list[Arg], moved: list[str], headers: set[str]) -> str:
        p, k = self.program, self.kernel
        role = {"reader": "reader (@p.dm0: TT-Metal's reader config, RISCV_1 / NCRISC)",
                "writer": "writer (@p.dm1: TT-Metal's writer config, RISCV_0 / BRISC)",
                "compute": "compute kernel (@p.compute)"}[k.role]  # fmt: skip
        out = [f"// {k.name}: the {role} of DSL program '{p.name}' ({Path(p.site.file).name}:{p.site.line}).",
               f"// Generated by kohakutt.dsl.metal for TT-Metal {TT_METAL}'s kernel API; #line maps each statement "
               "to its DSL line."]  # fmt: skip
        if moved:
            out.append("// Compile-time args: TensorAccessorArgs of " + ", then ".join(moved) + ".")
        if args:
            out.append("// Runtime args: " + ", ".join(f"{i} {a.label()}" for i, a in enumerate(args)) + ".")
        out.append("#include <cstdint>")
        out.append("")
        if k.role == "compute":
            incs = list(opspec.BASE_HEADERS) + sorted(headers - set(opspec.BASE_HEADERS))
        else:
            incs = ["api/dataflow/dataflow_api.h"]
        out += [f'#include "{h}"' for h in incs]
        return "\n".join(out) + "\n\n"

    # ------------------------------------------------------------------------------------------ statements
    def r(self, v: Expr) -> str:
        return v.render(self.names)

    def cbn(self, cb: CB) -> str:
        return self.cb_names[cb.index]

    def slot(self, s: Slot) -> str:
        base = f"get_{'write' if s.write else 'read'}_ptr({self.cbn(s.cb)})"
        idx = self.r(s.index)
        if idx == "0":
            return base
        return f"{base} + ({idx}) * get_tile_size({self.cbn(s.cb)})"

    def block(self, body: list[Stmt], e: Emitter, u: Unit) -> Unit:
        for st in body:
            u = self.stmt(st, e, u)
        return u

    def stmt(self, st: Stmt, e: Emitter, u: Unit) -> Unit:
        if isinstance(st, CBOp):
            fn = {"reserve": "cb_reserve_back", "push": "cb_push_back", "wait": "cb_wait_front",
                  "pop": "cb_pop_front"}[st.op]  # fmt: skip
            e.line(f"{fn}({self.cbn(st.cb)}, {st.n});", st.site)
        elif isinstance(st, Read):
            t = self.names["tensor:" + st.page.tensor.name]
            e.line(f"noc_async_read_page({self.r(st.page.index)}, {t}, {self.slot(st.slot)});", st.site)
        elif isinstance(st, Write):
            t = self.names["tensor:" + st.page.tensor.name]
            e.line(f"noc_async_write_page({self.r(st.page.index)}, {t}, {self.slot(st.slot)});", st.site)
        elif isinstance(st, Barrier):
            fn = {"reads_done": "noc_async_read_barrier", "flushed": "noc_async_writes_flushed",
                  "writes_done": "noc_async_write_barrier"}[st.kind]  # fmt: skip
            e.line(f"{fn}();", st.site)
        elif isinstance(st, Startup):
            names = ", ".join(self.cbn(c) for c in st.cbs)
            e.line(f"compute_kernel_hw_startup({names});", st.site)
            u = Unit(st.cbs[0].index, st.cbs[1 if len(st.cbs) == 3 else 0].index, st.cbs[-1].index, False)
        elif isinstance(st, Init):
            u = self.init(st, e, u)
        elif isinstance(st, TileOp):
            u = self.tile_op(st, e, u)
        elif isinstance(st, Pack):
            if u.pack != st.cb.index:
                e.line(f"pack_reconfig_data_format({self.cbn(st.cb)});", st.site)
                u = copy.copy(u)
                u.pack = st.cb.index
            if st.page is None:
                e.line(f"pack_tile({st.slot}, {self.cbn(st.cb)});", st.site)
            else:
                e.line(f"pack_tile<true>({st.slot}, {self.cbn(st.cb)}, {self.r(st.page)});", st.site)
        elif isinstance(st, Registers):
            u = self.registers(st, e, u)
        elif isinstance(st, Loop):
            u = self.loop(st, e, u)
        elif isinstance(st, When):
            e.line(f"if ({self.r(st.cond)}) {{", st.site)
            e.depth += 1
            end = self.block(st.body, e, copy.copy(u))
            e.depth -= 1
            e.line("}")
            u = _join(u, end)  # what holds on both paths
        return u

    def loop(self, st: Loop, e: Emitter, u: Unit) -> Unit:
        self.namer.scopes.append(set())
        self.names[st.var.key] = self.namer.claim(st.var.name) if st.var.name else self.namer.free()
        v = self.names[st.var.key]
        inc = f"++{v}" if st.step == 1 else f"{v} += {st.step}"
        e.line(f"for (uint32_t {v} = {self.r(st.start)}; {v} < {self.r(st.stop)}; {inc}) {{", st.site)
        # what the unpacker / packer are set up for at the top of the body: what holds before the loop and after
        # every pass (each field on its own; a field a pass changes is unknown)
        entry = copy.copy(u)
        while True:
            end = self.block(st.body, Emitter(dry=True), copy.copy(entry))
            joined = _join(entry, end)
            if joined.known() == entry.known():
                break
            entry = joined
        e.depth += 1
        self.block(st.body, e, copy.copy(entry))
        e.depth -= 1
        e.line("}")
        self.namer.scopes.pop()
        return entry  # zero passes leave u, any pass leaves a state joined into entry

    def registers(self, st: Registers, e: Emitter, u: Unit) -> Unit:
        e.line("tile_regs_acquire();", st.site)
        packed = False
        for s in st.body:
            if not packed and _has_pack(s):
                e.line("tile_regs_commit();", s.site)
                e.line("tile_regs_wait();", s.site)
                packed = True
            u = self.stmt(s, e, u)
        if not packed:
            e.line("tile_regs_commit();", st.site)
            e.line("tile_regs_wait();", st.site)
        e.line("tile_regs_release();", st.site)
        if _reduces(st.body):  # a reduce ends with its block: the packer's mask goes with it
            e.line("reduce_uninit();", st.site)
            u = copy.copy(u)
            u.reduce = False
        return u

    def _sources(self, sp: opspec.OpSpec, cbs: tuple[CB, ...]) -> tuple[int | None, int | None]:
        """(SrcA, SrcB) the op unpacks from (None: that source is not used)."""
        if sp.order == "srca" or len(cbs) == 1:
            return cbs[0].index, None
        if sp.order == "reverse":
            return cbs[1].index, cbs[0].index
        return cbs[0].index, cbs[1].index

    def reconfig(self, sp: opspec.OpSpec, cbs: tuple[CB, ...], e: Emitter, u: Unit, site: Site) -> Unit:
        if not cbs:
            return u
        a, b = self._sources(sp, cbs)
        name = {c.index: self.cbn(c) for c in cbs}
        need_a = a is not None and u.srca != a
        need_b = b is not None and u.srcb != b
        if need_a and need_b:
            e.line(f"reconfig_data_format({name[a]}, {name[b]});", site)  # type: ignore[index]
        elif need_a:
            e.line(f"reconfig_data_format_srca({name[a]});", site)  # type: ignore[index]
        elif need_b:
            e.line(f"reconfig_data_format_srcb({name[b]});", site)  # type: ignore[index]
        if need_a or need_b:
            u = copy.copy(u)
            u.srca = a if a is not None else u.srca
            u.srcb = b if b is not None else u.srcb
        return u

    def init(self, st: Init, e: Emitter, u: Unit) -> Unit:
        sp = st.spec
        if sp.unit == "fpu":
            if sp.form != "reduce" and u.reduce is not False and self.has_reduce:
                e.line("reduce_uninit();", st.site)  # the packer's reduce mask ends with the reduce
                u = copy.copy(u)
                u.reduce = False
            u = self.reconfig(sp, st.cbs if sp.form != "reduce" else st.cbs[:2], e, u, st.site)
        e.line(self._fmt(sp.init, st.cbs) + ";", st.site)
        if sp.form == "reduce":
            u = copy.copy(u)
            u.reduce = True
        return u

    def tile_op(self, st: TileOp, e: Emitter, u: Unit) -> Unit:
        sp = st.spec
        u = self.reconfig(sp, st.cbs, e, u, st.site)
        e.line(self._fmt(sp.call, st.cbs, st) + ";", st.site)
        return u

    def _fmt(self, template: str, cbs: tuple[CB, ...], st: TileOp | None = None) -> str:
        v: dict[str, str] = {"approx": "true" if self.kernel.approx else "false"}
        for i, c in enumerate(cbs):
            v[f"cb{i}"] = self.cbn(c)
        if st is not None:
            for i, t in enumerate(st.tiles):
                v[f"t{i}"] = self.r(t)
            if st.slots:
                v["slot"] = str(st.slots[-1])
            if len(st.slots) == 3:
                v["a"], v["b"], v["out"] = (str(s) for s in st.slots)
            if st.value is not None:
                v["value"] = self.r(st.value)
        return template.format(**v)


def _join(a: Unit, b: Unit) -> Unit:
    """Each field that both states agree on; the rest unknown (None)."""
    return Unit(*(x if x == y else None for x, y in zip(a.known(), b.known())))


def _reduces(body: Iterable[Stmt]) -> bool:
    for st in body:
        if isinstance(st, TileOp) and st.spec.form == "reduce":
            return True
        if isinstance(st, (Loop, When)) and _reduces(st.body):
            return True
    return False


def _has_pack(st: Stmt) -> bool:
    if isinstance(st, Pack):
        return True
    return isinstance(st, (Loop, When, Registers)) and any(_has_pack(s) for s in st.body)


def _arg_sym(p: ProgramBuilder, a: Arg) -> Sym:
    if a.kind in ("start", "count"):
        assert p.split_ is not None
        return p.split_.start if a.kind == "start" else p.split_.count
    return p.runtime_values[a.name]


def _holds_bits(body: Iterable[Stmt], s: Sym) -> bool:
    for st in body:
        if isinstance(st, TileOp) and st.value is not None and s.key in st.value.atoms():
            return True
        if isinstance(st, (Loop, When, Registers)) and _holds_bits(st.body, s):
            return True
    return False


def _uses(body: Iterable[Stmt]) -> tuple[set[str], set[str], set[int], set[str]]:
    """(tensor names, symbol keys, CB indices, compute headers) a kernel body uses."""
    tensors: set[str] = set()
    syms: set[str] = set()
    cbs: set[int] = set()
    headers: set[str] = set()

    def walk(b: Iterable[Stmt]) -> None:
        for st in b:
            if isinstance(st, CBOp):
                cbs.add(st.cb.index)
            elif isinstance(st, (Read, Write)):
                tensors.add(st.page.tensor.name)
                syms.update(st.page.index.atoms() | st.slot.index.atoms())
                cbs.add(st.slot.cb.index)
            elif isinstance(st, Startup):
                cbs.update(c.index for c in st.cbs)
            elif isinstance(st, Init):
                cbs.update(c.index for c in st.cbs)
                headers.add(st.spec.header)
            elif isinstance(st, TileOp):
                cbs.update(c.index for c in st.cbs)
                headers.add(st.spec.header)
                for t in st.tiles:
                    syms.update(t.atoms())
                if st.value is not None:
                    syms.update(st.value.atoms())
            elif isinstance(st, Pack):
                cbs.add(st.cb.index)
                if st.page is not None:
                    syms.update(st.page.atoms())
            elif isinstance(st, Loop):
                syms.update(st.start.atoms() | st.stop.atoms())
                walk(st.body)
            elif isinstance(st, When):
                syms.update(st.cond.atoms())
                walk(st.body)
            elif isinstance(st, Registers):
                walk(st.body)

    walk(body)
    return tensors, {s for s in syms if not s.split(".")[-1].startswith("loop")}, cbs, headers


def generate(p: ProgramBuilder) -> dict[str, Generated]:
    """Every kernel's C++, by role (reader / compute / writer)."""
    return {role: KernelGen(p, k).generate() for role, k in p.kernels.items()}


__all__ = ["TT_METAL", "Arg", "Generated", "generate"]
