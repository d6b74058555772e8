"""The card's rules, checked on a traced DSL program when it is defined (the rule set the simulator enforces at run
time, docs/concepts/programs.md), each broken rule reported at its DSL line.

Each kernel is walked as an abstract run: per CB the pages reserved and not pushed, waited for and not popped, reads
not yet barriered and writes not yet flushed; for compute, the hardware start-up, the current FPU and SFPU inits and
the DST registers' phase. A loop body is walked twice (the second pass sees the inits the first left) and must leave
every CB as it found it; a ``when`` body too (so both paths agree). Across kernels, the pages pushed into each CB
must equal the pages popped, compared as polynomials in the runtime values (``count`` pushes against ``count``
pops). The L1 the CBs need is checked against the smallest format their tensors can have (exactly, when the program
runs with real tensors).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kohakutt.dsl.metal import expr as ex
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
    Startup,
    Stmt,
    TileOp,
    When,
    Write,
)
from kohakutt.errors import KernelDSLError
from kohakutt.hal.allocator import align_up
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import Format


class _Unknown:
    """A value the walk cannot know here (it depends on a loop or k.when); one object, kept by copies."""

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __copy__(self) -> _Unknown:
        return self

    def __deepcopy__(self, memo: Any) -> _Unknown:
        return self


UNKNOWN: Any = _Unknown()
CB_ALIGN = 64  # TT-Metal places each CB at the DRAM alignment
SMALLEST_TILE = min(f.tile_bytes for f in (Format.BFLOAT16, Format.FLOAT32, Format.BFLOAT8_B, Format.BFLOAT4_B))


@dataclass
class Problem:
    site: ex.Site
    message: str

    def __str__(self) -> str:
        return f"{self.site.short}: {self.message}"


@dataclass
class CBState:
    reserved: int = 0
    reserve_site: ex.Site | None = None
    waited: int = 0
    wait_site: ex.Site | None = None
    packed: int = 0  # page-less packs into the current reservation
    unbarriered: ex.Site | None = None  # a read into the CB not yet followed by reads_done
    unflushed: ex.Site | None = None  # a write out of the CB not yet followed by flushed / writes_done

    def balance(self) -> tuple[int, int]:
        return self.reserved, self.waited


@dataclass
class Init_:
    family: str | None = None
    site: ex.Site | None = None

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Init_) and self.family == o.family


@dataclass
class State:
    cbs: dict[int, CBState] = field(default_factory=dict)
    started: Any = False
    fpu: Any = field(default_factory=Init_)  # Init_ or UNKNOWN
    sfpu: Any = field(default_factory=Init_)
    reduce: Any = None  # the site of the reduce init in effect, None, or UNKNOWN
    pending_read: ex.Site | None = None
    pending_write: ex.Site | None = None

    def cb(self, c: CB) -> CBState:
        return self.cbs.setdefault(c.index, CBState())


@dataclass
class Regs:
    site: ex.Site
    phase: str = "math"  # math -> pack
    pack_site: ex.Site | None = None
    did_reduce: bool = False


class KernelChecker:
    def __init__(self, kernel: KernelTrace, card: CardSpec, problems: list[Problem]):
        self.k, self.card, self.problems = kernel, card, problems
        self.dst_tiles = card.dst_tiles_fp32 if kernel.fp32_dest else card.dst_tiles_bf16
        self._seen: set[tuple[ex.Site, str]] = set()

    def problem(self, site: ex.Site, message: str) -> None:
        if (site, message) not in self._seen:
            self._seen.add((site, message))
            self.problems.append(Problem(site, message))

    # ------------------------------------------------------------------------------------------- the walk
    def run(self) -> None:
        s = self.walk(self.k.body, State(), None, 0)
        for idx, c in sorted(s.cbs.items()):
            name = self._cb_name(idx)
            if c.reserved:
                self.problem(c.reserve_site or self.k.site, f"{self.k.name} reserves {_pages(c.reserved)} of {name} "
                             "that it never pushes: every page reserved must be pushed by the end of the "
                             "kernel")  # fmt: skip
            if c.waited:
                self.problem(c.wait_site or self.k.site, f"{self.k.name} waits for {_pages(c.waited)} of {name} that "
                             "it never pops: every page pushed must be popped by the end of the program")  # fmt: skip
        if s.pending_read is not None:
            self.problem(s.pending_read, "no k.reads_done() after this read: the kernel may end before it lands")
        if s.pending_write is not None:
            self.problem(s.pending_write, "no k.writes_done() after this write: the kernel may end before it arrives")

    def _cb_name(self, index: int) -> str:
        return self._names.get(index, f"CB {index}")

    _names: dict[int, str] = {}

    def walk(self, body: list[Stmt], s: State, regs: Regs | None, depth: int) -> State:
        for st in body:
            self.step(st, s, regs, depth)
        return s

    def step(self, st: Stmt, s: State, regs: Regs | None, depth: int) -> None:
        if isinstance(st, CBOp):
            self.cb_op(st, s)
        elif isinstance(st, Read):
            self.read(st, s)
        elif isinstance(st, Write):
            self.write(st, s)
        elif isinstance(st, Barrier):
            if st.kind == "reads_done":
                for c in s.cbs.values():
                    c.unbarriered = None
                s.pending_read = None
            else:
                for c in s.cbs.values():
                    c.unflushed = None
                if st.kind == "writes_done":
                    s.pending_write = None
        elif isinstance(st, Startup):
            if s.started is True:
                self.problem(st.site, "c.startup is called again: the hardware start-up runs once, first")
            elif s.started is UNKNOWN:
                self.problem(st.site, "c.startup inside a loop or k.when: call it once, at the top of the kernel")
            s.started = True
        elif isinstance(st, Init):
            self.init(st, s)
        elif isinstance(st, TileOp):
            self.tile_op(st, s, regs)
        elif isinstance(st, Pack):
            self.pack(st, s, regs, depth)
        elif isinstance(st, Registers):
            r = Regs(st.site)
            self.walk(st.body, s, r, 0)
            if r.did_reduce:  # the DSL ends a reduce with its block (reduce_uninit): the next one needs its init
                s.fpu, s.reduce = Init_(None, st.site), None
        elif isinstance(st, Loop):
            self.loop(st, s, regs, depth)
        elif isinstance(st, When):
            self.when(st, s, regs, depth)

    def loop(self, st: Loop, s: State, regs: Regs | None, depth: int) -> None:
        if regs is not None and regs.phase == "math" and _contains(st.body, Pack):
            self.problem(st.site, "the first c.pack of a c.registers() block is inside this loop: the registers go "
                         "to the packer once per block; pack after the loop, or open c.registers() inside "
                         "it")  # fmt: skip
            return
        before = copy.deepcopy(s)
        after = self.walk(st.body, copy.deepcopy(s), regs, depth + 1)
        self._same_cbs(st, before, after, "each pass of the loop", "ends")
        if (after.fpu, after.sfpu, after.started, after.reduce) != (before.fpu, before.sfpu, before.started,
                                                                       before.reduce):  # fmt: skip
            again = copy.deepcopy(after)
            again.cbs = copy.deepcopy(before.cbs)
            self.walk(st.body, again, regs, depth + 1)  # the next pass starts from the inits the last one left
        _join_into(s, before, after)

    def when(self, st: When, s: State, regs: Regs | None, depth: int) -> None:
        if regs is not None and regs.phase == "math" and _contains(st.body, Pack):
            self.problem(st.site, "the first c.pack of a c.registers() block is inside this k.when: the registers go "
                         "to the packer once per block on every path; pack outside the k.when")  # fmt: skip
            return
        before = copy.deepcopy(s)
        after = self.walk(st.body, copy.deepcopy(s), regs, depth + 1)
        self._same_cbs(st, before, after, "the k.when body", "ends")
        _join_into(s, before, after)

    def _same_cbs(self, st: Stmt, before: State, after: State, what: str, verb: str) -> None:
        for idx in sorted(set(before.cbs) | set(after.cbs)):
            b = before.cbs.get(idx, CBState())
            a = after.cbs.get(idx, CBState())
            name = self._cb_name(idx)
            if a.reserved != b.reserved:
                self.problem(st.site, f"{what} {verb} with {_pages(a.reserved)} of {name} reserved and not pushed, "
                             f"but starts with {b.reserved}: reserve and push the same pages on every "
                             "path")  # fmt: skip
            if a.waited != b.waited:
                self.problem(st.site, f"{what} {verb} with {_pages(a.waited)} of {name} waited for and not popped, "
                             f"but starts with {b.waited}: wait for and pop the same pages on every path")  # fmt: skip

    # ---------------------------------------------------------------------------------------- data movement
    def cb_op(self, st: CBOp, s: State) -> None:
        cb, n = st.cb, st.n
        c = s.cb(cb)
        if n < 1:
            self.problem(st.site, f"{cb.name}.{st.op}({n}): a page count is at least 1")
            return
        if n > cb.pages:
            self.problem(st.site, f"{cb.name}.{st.op}({n}) asks for {_pages(n)} of a CB that holds {cb.pages} "
                         f"({cb.name} = p.cb({cb.index}) at line {cb.site.line}): it would wait forever; give it "
                         f"pages={n} or more")  # fmt: skip
            return
        if st.op == "reserve":
            if c.reserved < n:
                c.reserved, c.reserve_site = n, st.site
        elif st.op == "push":
            if n > c.reserved:
                got = "no pages reserved" if not c.reserved else f"only {_pages(c.reserved)} reserved"
                self.problem(st.site, f"{cb.name}.push({n}) with {got}: {cb.name}.reserve({n}) first, and fill them")
            if c.unbarriered is not None:
                self.problem(st.site, f"{cb.name}.push while the read at line {c.unbarriered.line} into it may not "
                             "have landed: call k.reads_done() before the push")  # fmt: skip
            c.reserved = max(0, c.reserved - n)
            c.packed = max(0, c.packed - n)
            if not c.reserved:
                c.reserve_site = None
        elif st.op == "wait":
            if c.waited < n:
                c.waited, c.wait_site = n, st.site
        elif st.op == "pop":
            if n > c.waited:
                got = "no pages waited for" if not c.waited else f"only {_pages(c.waited)} waited for"
                self.problem(st.site, f"{cb.name}.pop({n}) with {got}: {cb.name}.wait({n}) first")
            if c.unflushed is not None:
                self.problem(st.site, f"{cb.name}.pop while the write at line {c.unflushed.line} out of it may "
                             "still be reading its page: call k.flushed() (or k.writes_done()) before the "
                             "pop")  # fmt: skip
            c.waited = max(0, c.waited - n)
            if not c.waited:
                c.wait_site = None

    def read(self, st: Read, s: State) -> None:
        cb = st.slot.cb
        c = s.cb(cb)
        self._slot_in(st.site, "k.read into", cb, st.slot.index, c.reserved, "reserved", f"{cb.name}.reserve")
        c.unbarriered = st.site
        s.pending_read = st.site

    def write(self, st: Write, s: State) -> None:
        cb = st.slot.cb
        c = s.cb(cb)
        self._slot_in(st.site, "k.write from", cb, st.slot.index, c.waited, "waited for", f"{cb.name}.wait")
        if not st.page.tensor.is_output:
            self.problem(st.site, f"k.write to {st.page.tensor.name}, an input: only the km.Out tensors are written "
                         "(an op does not change its inputs)")  # fmt: skip
        c.unflushed = st.site
        s.pending_write = st.site

    def _slot_in(self, site: ex.Site, what: str, cb: CB, index: ex.Expr, have: int, verb: str, fix: str) -> None:
        if not have:
            self.problem(site, f"{what} {cb.name} with no pages {verb}: call {fix}(n) first")
        elif isinstance(index, ex.Const) and index.value >= have:
            self.problem(site, f"{what} page {index.value} of {cb.name}, but only {_pages(have)} are {verb}")

    # ---------------------------------------------------------------------------------------------- compute
    def init(self, st: Init, s: State) -> None:
        if s.started is not True:
            self._not_started(st.site, s, f"c.init({st.spec.name!r})")
        who = Init_(st.spec.family, st.site)
        if st.spec.unit == "fpu":
            s.fpu = who
            s.reduce = st.site if st.spec.form == "reduce" else None
        else:
            s.sfpu = who

    def _not_started(self, site: ex.Site, s: State, what: str) -> None:
        if s.started is UNKNOWN:
            self.problem(site, f"{what} may run before the hardware start-up (c.startup is inside a loop or k.when)")
        else:
            self.problem(site, f"{what} before the hardware start-up: call c.startup(in0, [in1,] out) once, first")

    def tile_op(self, st: TileOp, s: State, regs: Regs | None) -> None:
        sp = st.spec
        what = "c.copy" if sp.form == "copy" else f"c.op({sp.name!r})"
        if regs is None:
            self.problem(st.site, f"{what} outside 'with c.registers():': math writes DST only while it holds the "
                         "registers")  # fmt: skip
        elif regs.phase == "pack":
            self.problem(st.site, f"{what} after c.pack (line {regs.pack_site.line if regs.pack_site else '?'}): the "
                         "registers went to the packer; open a new 'with c.registers():' for more math")  # fmt: skip
        if s.started is not True:
            self._not_started(st.site, s, what)
        for slot in st.slots:
            if slot >= self.dst_tiles:
                mode = "fp32" if self.k.fp32_dest else "bf16"
                self.problem(st.site, f"{what} uses DST slot {slot}, but DST holds {self.dst_tiles} tiles (slots 0.."
                             f"{self.dst_tiles - 1}) with {mode} accumulation; use fewer slots per c.registers()"
                             + (" or fp32_dest=False" if self.k.fp32_dest else ""))  # fmt: skip
        state = s.fpu if sp.unit == "fpu" else s.sfpu
        name = "copy" if sp.form == "copy" else sp.name
        if state is UNKNOWN:
            self.problem(st.site, f"{what} may run without its init: which init is in effect here depends on a "
                         f"loop or k.when; call c.init({name!r}, ...) before it on every path")  # fmt: skip
        elif state.family != sp.family:
            unit = "FPU" if sp.unit == "fpu" else "SFPU"
            now = (f"set up for {_family(state.family)} (c.init at line {state.site.line})" if state.family
                   else "not set up")  # fmt: skip
            self.problem(st.site, f"{what} needs c.init({name!r}{', ...' if sp.unit == 'fpu' else ''}) first: the "
                         f"{unit} is {now}; every op needs its own init after any other op's")  # fmt: skip
        for cb, t in zip(st.cbs, st.tiles):
            c = s.cb(cb)
            self._slot_in(st.site, f"{what} reads", cb, t, c.waited, "waited for", f"{cb.name}.wait")
        if sp.form == "reduce" and regs is not None:
            regs.did_reduce = True

    def pack(self, st: Pack, s: State, regs: Regs | None, depth: int) -> None:
        if regs is None:
            self.problem(st.site, "c.pack outside 'with c.registers():': the packer reads DST inside the block, "
                         "after the math")  # fmt: skip
        else:
            if regs.phase == "math":
                if depth:
                    return  # reported at the loop / when that holds it
                regs.phase, regs.pack_site = "pack", st.site
        if st.slot >= self.dst_tiles:
            self.problem(st.site, f"c.pack from DST slot {st.slot}, but DST holds {self.dst_tiles} tiles")
        if s.reduce is not None and regs is not None and not regs.did_reduce:
            line = "" if s.reduce is UNKNOWN else f" at line {s.reduce.line}"
            self.problem(st.site, f"c.pack while the reduce init{line} still masks the packer (it keeps only the "
                         "reduced row / column): pack a reduce's result in the block that reduces, and c.init the "
                         "next FPU op (which ends the reduce) before other packs")  # fmt: skip
        c = s.cb(st.cb)
        if st.page is None:
            if not c.reserved:
                self.problem(st.site, f"c.pack into {st.cb.name} with no pages reserved: {st.cb.name}.reserve(n) "
                             "first")  # fmt: skip
            elif c.packed >= 1:
                self.problem(st.site, f"a second c.pack into {st.cb.name}'s reservation without page=: give each "
                             "tile its page (c.pack(slot, cb, page))")  # fmt: skip
            c.packed += 1
        else:
            self._slot_in(st.site, "c.pack into", st.cb, st.page, c.reserved, "reserved", f"{st.cb.name}.reserve")


def _family(f: str) -> str:
    return f.removeprefix("binary_") + (" (two slots)" if f.startswith("binary_") else "")


def _pages(n: int) -> str:
    return f"{n} page" + ("" if n == 1 else "s")


def _contains(body: Iterable[Stmt], kind: type) -> bool:
    for st in body:
        if isinstance(st, kind):
            return True
        if isinstance(st, (Loop, When, Registers)) and _contains(st.body, kind):
            return True
    return False


def _join_into(s: State, before: State, after: State) -> None:
    s.cbs = before.cbs
    for c_idx, a in after.cbs.items():  # reads / writes left pending by the body stay pending after it
        b = s.cbs.setdefault(c_idx, CBState())
        b.unbarriered = b.unbarriered or a.unbarriered
        b.unflushed = b.unflushed or a.unflushed
    for f in ("started", "fpu", "sfpu", "reduce"):
        x, y = getattr(before, f), getattr(after, f)
        setattr(s, f, x if x == y else UNKNOWN)
    s.pending_read = after.pending_read or before.pending_read
    s.pending_write = after.pending_write or before.pending_write


# ---------------------------------------------------------------------------------------------- the program
@dataclass
class Count:
    kernel: str
    site: ex.Site
    total: ex.Poly | None  # None: not known statically (inside a k.when, or a loop whose trip count is not)


def page_counts(k: KernelTrace) -> dict[tuple[int, str], list[Count]]:
    """Per (CB index, "push" / "pop"): each statement's pages times its loops' trip counts."""
    out: dict[tuple[int, str], list[Count]] = {}

    def walk(body: list[Stmt], mult: ex.Poly | None, loop_vars: set[str]) -> None:
        for st in body:
            if isinstance(st, CBOp) and st.op in ("push", "pop"):
                total = None if mult is None else ex.poly_mul(mult, {(): st.n})
                out.setdefault((st.cb.index, st.op), []).append(Count(k.name, st.site, total))
            elif isinstance(st, Loop):
                trips: ex.Poly | None = None
                if mult is not None and st.step == 1 and not ((st.start.atoms() | st.stop.atoms()) & loop_vars):
                    trips = ex.poly(st.stop - st.start)
                walk(st.body, None if trips is None else ex.poly_mul(mult, trips), loop_vars | {st.var.key})  # type: ignore[arg-type]
            elif isinstance(st, When):
                walk(st.body, None, loop_vars)
            elif isinstance(st, Registers):
                walk(st.body, mult, loop_vars)

    walk(k.body, {(): 1}, set())
    return out


def check_program(p: ProgramBuilder, card: CardSpec = P150A) -> None:
    """Raise KernelDSLError listing every rule the traced program ``p`` breaks, each at its DSL line."""
    problems: list[Problem] = []
    if not p.kernels:
        problems.append(Problem(p.site, "the program has no kernels: define @p.dm0, @p.compute and / or @p.dm1"))
    names = {idx: cb.name for idx, cb in p.cbs.items()}
    for k in p.kernels.values():
        kc = KernelChecker(k, card, problems)
        kc._names = names
        kc.run()
    _check_flow(p, problems)
    _check_tensors(p, problems)
    _check_l1(p, card, problems)
    raise_problems(p.name, problems)


def raise_problems(program: str, problems: list[Problem]) -> None:
    if not problems:
        return
    problems = sorted(problems, key=lambda q: (q.site.file, q.site.line))
    first = problems[0]
    if len(problems) == 1:
        msg = f"{first} (program {program!r})"
    else:
        msg = f"program {program!r} breaks {len(problems)} rules:\n" + "\n".join(f"  {q}" for q in problems)
    raise KernelDSLError(msg, file=first.site.file, line=first.site.line)


def _check_flow(p: ProgramBuilder, problems: list[Problem]) -> None:
    counts: dict[tuple[int, str], list[Count]] = {}
    for k in p.kernels.values():
        for key, cs in page_counts(k).items():
            counts.setdefault(key, []).extend(cs)
    names = {s.key: s.name for s in p.runtime_values.values()}
    if p.split_ is not None:
        names |= {p.split_.start.key: p.split_.start.name, p.split_.count.key: p.split_.count.name}
    for idx, cb in sorted(p.cbs.items()):
        pushes, pops = counts.get((idx, "push"), []), counts.get((idx, "pop"), [])
        if pushes and not pops:
            problems.append(Problem(pushes[0].site, f"{cb.name} is pushed here but no kernel pops it: the program "
                                    "would end with its pages unconsumed (and block once it is full)"))  # fmt: skip
        elif pops and not pushes:
            problems.append(Problem(pops[0].site, f"{cb.name} is popped here but no kernel pushes it: the wait before "
                                    "it would never end"))  # fmt: skip
        if not pushes or not pops or any(c.total is None for c in (*pushes, *pops)):
            continue
        push_total = _sum(c.total for c in pushes)
        pop_total = _sum(c.total for c in pops)
        if push_total != pop_total:
            who_push = ", ".join(sorted({f"{c.kernel} (line {c.site.line})" for c in pushes}))
            who_pop = ", ".join(sorted({f"{c.kernel} (line {c.site.line})" for c in pops}))
            problems.append(Problem(pushes[0].site, f"{cb.name} is not balanced: {who_push} push "
                                    f"{ex.poly_str(push_total, names)} pages in all, {who_pop} pop "
                                    f"{ex.poly_str(pop_total, names)}; every page pushed must be popped"))  # fmt: skip


def _sum(ps: Iterable[ex.Poly | None]) -> ex.Poly:
    out: ex.Poly = {}
    for q in ps:
        assert q is not None
        out = ex.poly_add(out, q)
    return out


def _check_tensors(p: ProgramBuilder, problems: list[Problem]) -> None:
    written: set[str] = set()

    def walk(body: list[Stmt]) -> None:
        for st in body:
            if isinstance(st, Write):
                written.add(st.page.tensor.name)
            elif isinstance(st, (Loop, When, Registers)):
                walk(st.body)

    for k in p.kernels.values():
        walk(k.body)
    for t in p.tensors:
        if t.is_output and t.name not in written:
            problems.append(Problem(t.site, f"output {t.name} is never written: no k.write(..., {t.name}.page(i))"))


def cb_bytes(cbs: Iterable[tuple[CB, int]]) -> int:
    return sum(align_up(cb.pages * page, CB_ALIGN) for cb, page in cbs)


def _check_l1(p: ProgramBuilder, card: CardSpec, problems: list[Problem]) -> None:
    """The CBs' L1 with the smallest tile their tensors could have: if even that does not fit, nothing will."""
    sized = [(cb, cb.dtype.tile_bytes if cb.dtype is not None else SMALLEST_TILE) for cb in p.cbs.values()]
    need = cb_bytes(sized)
    if need > card.l1_usable:
        parts = ", ".join(f"{cb.name} (line {cb.site.line}): {cb.pages} x {page} B" for cb, page in sized)
        problems.append(Problem(p.site, f"the circular buffers need at least {need:,} B of L1 per core ({parts}), "
                                f"more than the {card.l1_usable:,} B usable: use fewer pages"))  # fmt: skip


__all__ = ["UNKNOWN", "Problem", "check_program", "page_counts", "raise_problems"]
