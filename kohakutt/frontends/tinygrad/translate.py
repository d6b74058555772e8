"""Kernel ASTs to tile programs: what the KTT renderer compiles each tinygrad kernel into.

tinygrad hands a device one kernel at a time as an AST (``Ops.SINK``): stores of values computed from loads over a
nest of ranges. This module turns that AST into a :class:`TileProgram`: a small list of nodes over named axes (one
per range) that the runtime (``execute.py``) runs as IR ops of the op library: loads become strided views of the
kernel's buffers (or gathers where the index is not affine), ALU ops element-wise ops, ``REDUCE`` a reduction, and a
``REDUCE(ADD)`` over a ``MUL`` whose operands share the reduce axes becomes a ``matmul`` (so matmuls and convolutions
use the card's matrix engine, with the rest of the kernel as prologue and epilogue). A kernel with no tile form is
compiled by tinygrad's own PYTHON renderer instead and runs on the host (``HostProgram``), counted and warned.

The program is plain data (pickled into the PROGRAM's BINARY), so compilation may run in tinygrad's worker processes.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kohakutt.errors import DtypeError
from tinygrad.dtype import DType as TGDType
from tinygrad.dtype import Invalid, dtypes
from tinygrad.uop.ops import AxisType, Ops, UOp

MAGIC = b"KTT1"
TILE, HOST, RANDOM = b"T", b"H", b"R"

CARD_DTYPES = {dtypes.float32: "float32", dtypes.bfloat16: "bfloat16", dtypes.int32: "int32"}
VALUE_DTYPES = {**CARD_DTYPES, dtypes.bool: "bool", dtypes.weakint: "index", dtypes.weakfloat: "float32"}

ALU = {
    Ops.ADD: "add",
    Ops.SUB: "sub",
    Ops.MUL: "mul",
    Ops.FDIV: "div",
    Ops.MAX: "maximum",
    Ops.CMPLT: "lt",
    Ops.CMPNE: "ne",
    Ops.CMPEQ: "eq",
    Ops.WHERE: "where",
    Ops.NEG: "neg",
    Ops.EXP2: "exp2",
    Ops.LOG2: "log2",
    Ops.SIN: "sin",
    Ops.SQRT: "sqrt",
    Ops.RECIPROCAL: "reciprocal",
    Ops.TRUNC: "trunc",
    Ops.POW: "pow",
    Ops.AND: "bitwise_and",
    Ops.OR: "bitwise_or",
    Ops.XOR: "bitwise_xor",
    Ops.SHL: "left_shift",
    Ops.SHR: "right_shift",
    Ops.CDIV: "cdiv",
    Ops.CMOD: "fmod",
    Ops.FLOORDIV: "floor_divide",
    Ops.FLOORMOD: "remainder",
}
REDUCE = {Ops.ADD: "sum", Ops.MAX: "max", Ops.MUL: "prod"}
SKIP = {Ops.SINK, Ops.END, Ops.GROUP, Ops.NOOP}


class NoTileForm(Exception):
    """The kernel has no tile form; ``kind`` names why (``dtype:float16``, ``op:THREEFRY``, ``store:gated``...)."""

    def __init__(self, kind: str, detail: str = ""):
        self.kind = kind
        super().__init__(f"{kind}: {detail}" if detail else kind)


@dataclass
class Node:
    """One value of a tile program. ``axes`` are the axes it varies over; ``static`` ones depend on no buffer."""

    kind: str  # const range alu cast load reduce matmul store uniform
    dtype: str
    args: tuple
    srcs: tuple[int, ...] = ()
    axes: frozenset[int] = frozenset()
    static: bool = False


@dataclass
class TileProgram:
    """A kernel as tile nodes over ``sizes`` (one axis per range, in range order)."""

    name: str
    sizes: tuple[int, ...]
    nodes: list[Node] = field(default_factory=list)
    slots: dict[int, str] = field(default_factory=dict)  # param slot -> dtype
    outs: tuple[int, ...] = ()
    ins: tuple[int, ...] = ()

    def shape(self, axes: frozenset[int]) -> tuple[int, ...]:
        return tuple(s if i in axes else 1 for i, s in enumerate(self.sizes))

    def listing(self) -> str:
        """A readable listing of the program (the PROGRAM's SOURCE)."""
        lines = [f"// {self.name}: axes {list(self.sizes)}"]
        for i, n in enumerate(self.nodes):
            srcs = ", ".join(f"%{s}" for s in n.srcs)
            axes = ",".join(str(a) for a in sorted(n.axes))
            lines.append(
                f"%{i} = {n.kind}<{n.dtype}>{list(n.args) if n.args else ''}({srcs}) axes[{axes}]"
                + (" static" if n.static else "")
            )
        return "\n".join(lines)


def dtype_name(dt: TGDType) -> str:
    """The tile dtype of a tinygrad dtype; fp8 is an error, other dtypes the card lacks have no tile form."""
    dt = dt.base if hasattr(dt, "base") else dt
    if dt in dtypes.fp8s:
        raise DtypeError(
            f"tinygrad dtype {dt} (fp8) is not supported on KTT: the card has no fp8 format; cast to "
            "bfloat16 or float32 before moving the tensor to KTT"
        )
    if dt in VALUE_DTYPES:
        return VALUE_DTYPES[dt]
    short = str(dt).removeprefix("dtypes.")
    raise NoTileForm(f"dtype:{short}", f"the card computes float32, bfloat16 and int32; {short} runs on the host")


# ---------------------------------------------------------------------------------------------------- building
class _Builder:
    def __init__(self, ast: UOp):
        self.ast = ast
        self.ranges: dict[UOp, int] = {}
        self.ids: dict[UOp, int] = {}
        self.prog = TileProgram(_name(ast), ())

    def build(self) -> TileProgram:
        topo = self.ast.toposort()
        for u in topo:  # dtypes first: a host dtype anywhere decides before any op does
            if u.op is Ops.PARAM:
                if u.addrspace is not None and u.addrspace.name == "ALU":
                    raise NoTileForm("symbolic", "kernels over symbolic variables run on the host")
                name = dtype_name(u.dtype)
                if name not in CARD_DTYPES.values():
                    raise NoTileForm(f"dtype:{name}", "stored bools run on the host")
                self.prog.slots[u.arg.slot] = name
            elif u.dtype != dtypes.void and u.op is not Ops.CONST:
                dtype_name(u.dtype)
        rngs = sorted((u for u in topo if u.op is Ops.RANGE), key=lambda r: r.arg[0])
        for r in rngs:
            if r.src[0].op is not Ops.CONST or not isinstance(r.src[0].arg, int):
                raise NoTileForm("symbolic", "a range of symbolic size")
            self.ranges[r] = len(self.ranges)
        self.prog.sizes = tuple(int(r.src[0].arg) for r in rngs)
        outs, ins = [], []
        for u in topo:
            if u.op is Ops.STORE:
                self._store(u)
                outs.append(self._slot(u.src[0]))
        for u in topo:
            if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and self._slot(u) not in outs:
                ins.append(self._slot(u))
        if not outs:
            raise NoTileForm("no-store", "a kernel without stores")
        self.prog.outs, self.prog.ins = tuple(dict.fromkeys(outs)), tuple(dict.fromkeys(ins))
        return self.prog

    @staticmethod
    def _slot(index: UOp) -> int:
        if index.op is not Ops.INDEX or index.src[0].op is not Ops.PARAM:
            raise NoTileForm(f"op:{index.op.name}", "stores and loads must index a kernel buffer")
        return int(index.src[0].arg.slot)

    def _add(self, u: UOp | None, node: Node) -> int:
        self.prog.nodes.append(node)
        i = len(self.prog.nodes) - 1
        if u is not None:
            self.ids[u] = i
        return i

    def _node(self, i: int) -> Node:
        return self.prog.nodes[i]

    def _index(self, index: UOp) -> tuple[int, int | None]:
        """The element index and validity nodes of an INDEX (validity from ``WHERE(valid, idx, Invalid)``)."""
        if len(index.src) != 2:
            raise NoTileForm("op:INDEX", "multi-dimensional INDEX")
        idx = index.src[1]
        if idx.op is Ops.WHERE and idx.src[2].op is Ops.CONST and idx.src[2].arg is Invalid:
            return self.value(idx.src[1]), self.value(idx.src[0])
        return self.value(idx), None

    def _store(self, st: UOp) -> None:
        if len(st.src) != 2:
            raise NoTileForm("store:gated", "a gated store")
        index, value = st.src
        idx, valid = self._index(index)
        if valid is not None or not self._node(idx).static:
            raise NoTileForm("store:gated", "a store through a gated or data-dependent index")
        v = self.value(value)
        slot = self._slot(index)
        axes = self._node(idx).axes | self._node(v).axes
        self._add(None, Node("store", self.prog.slots[slot], (slot,), (idx, v), axes))

    def value(self, u: UOp) -> int:
        if u in self.ids:
            return self.ids[u]
        op = u.op
        if op is Ops.CONST:
            if u.arg is Invalid:
                raise NoTileForm("op:Invalid", "an Invalid value outside an index")
            dt = _scalar_dtype(u.dtype)
            return self._add(u, Node("const", dt, (_py(u.arg, dt),), static=True))
        if op is Ops.RANGE:
            return self._add(u, Node("range", "index", (self.ranges[u],), (), frozenset({self.ranges[u]}), True))
        dt = dtype_name(u.dtype) if u.dtype != dtypes.void else "void"
        if op is Ops.INDEX:
            if u.src[0].op is not Ops.PARAM:
                raise NoTileForm(f"op:{u.src[0].op.name}", "an INDEX into something other than a kernel buffer")
            idx, valid = self._index(u)
            axes = self._node(idx).axes | (self._node(valid).axes if valid is not None else frozenset())
            slot = self._slot(u)
            srcs = (idx,) if valid is None else (idx, valid)
            return self._add(u, Node("load", self.prog.slots[slot], (slot,), srcs, axes))
        if op in ALU:
            srcs = tuple(self.value(s) for s in u.src)
            return self._add(u, Node("alu", dt, (ALU[op],), srcs, _union(self, srcs), _static(self, srcs)))
        if op is Ops.CAST:
            s = self.value(u.src[0])
            return self._add(u, Node("cast", dt, (), (s,), self._node(s).axes, self._node(s).static))
        if op is Ops.REDUCE:
            return self._reduce(u, dt)
        raise NoTileForm(f"op:{op.name}", f"{op} has no tile form")

    def _reduce(self, u: UOp, dt: str) -> int:
        rop = u.arg[0] if isinstance(u.arg, tuple) else u.arg
        if rop not in REDUCE:
            raise NoTileForm(f"op:REDUCE_{rop}")
        for r in u.src[1:]:
            if r.op is not Ops.RANGE:
                raise NoTileForm("op:REDUCE", "a reduce over something other than ranges")
        red = frozenset(self.ranges[r] for r in u.src[1:])
        src = u.src[0]
        if rop is Ops.ADD and src.op is Ops.MUL and dt in ("float32", "bfloat16"):
            a, b = self.value(src.src[0]), self.value(src.src[1])
            na, nb = self._node(a), self._node(b)
            if na.dtype in ("float32", "bfloat16") and nb.dtype in ("float32", "bfloat16"):
                A, B = na.axes, nb.axes
                m, n = A - B - red, B - A - red
                if red and red <= (A & B) and (m or n):
                    batch = (A & B) - red
                    args = tuple(tuple(sorted(s)) for s in (batch, m, n, red))
                    return self._add(u, Node("matmul", dt, args, (a, b), batch | m | n))
        s = self.value(src)
        ns = self._node(s)
        return self._add(u, Node("reduce", dt, (REDUCE[rop], tuple(sorted(red))), (s,), ns.axes - red, ns.static))


def _union(b: _Builder, srcs: tuple[int, ...]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for s in srcs:
        out |= b._node(s).axes
    return out


def _static(b: _Builder, srcs: tuple[int, ...]) -> bool:
    return all(b._node(s).static for s in srcs)


def _scalar_dtype(dt: TGDType) -> str:
    if dt in dtypes.weaks:
        return "index" if dt == dtypes.weakint else "float32"
    return dtype_name(dt)


def _py(v: Any, dtype: str = "") -> Any:
    """A constant as a Python number; an int32 one wrapped into its range as the dtype stores it (``0xFFFFFFFF`` is
    -1)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return (v + 2**31) % 2**32 - 2**31 if dtype == "int32" else v
    return float(v)


def _name(ast: UOp) -> str:
    arg = ast.arg
    return getattr(arg, "name", "test") or "test"


def build(ast: UOp) -> TileProgram:
    """The tile program of kernel ``ast``; raises :class:`NoTileForm` (with a kind) when there is none."""
    prog = _Builder(ast).build()
    for node in prog.nodes:  # stores must be plain strided writes: decide now, not at run time
        if node.kind == "store":
            idx = evaluate_static(prog, node.srcs[0])
            if affine(np.asarray(idx), prog.sizes) is None:
                raise NoTileForm("store:scatter", "a store through a non-affine index")
    kind = (
        "matmul"
        if any(n.kind == "matmul" for n in prog.nodes)
        else "reduce"
        if any(n.kind == "reduce" for n in prog.nodes)
        else "elementwise"
    )
    shape = "x".join(str(s) for s in prog.sizes) or "scalar"
    prog.name = f"ktt_{kind}_{shape}"
    return prog


def uniform_program(ast: UOp) -> TileProgram:
    """The program of a KTT random kernel (see ``random.py``): one ``uniform`` draw into its output buffer."""
    params = [u for u in ast.toposort() if u.op is Ops.PARAM]
    out = params[0]
    numel = int(out.src[0].arg) if out.src and out.src[0].op is Ops.CONST else int(out.arg.dtype.size)
    prog = TileProgram(f"ktt_uniform_{numel}", (numel,))
    prog.slots[out.arg.slot] = dtype_name(out.dtype)
    prog.nodes.append(Node("uniform", prog.slots[out.arg.slot], (out.arg.slot, numel)))
    prog.outs = (out.arg.slot,)
    return prog


def pack(kind: bytes, payload: Any) -> bytes:
    return MAGIC + kind + pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)


def unpack(lib: bytes) -> tuple[bytes, Any]:
    if not lib.startswith(MAGIC):
        raise ValueError("not a KTT program binary")
    return lib[4:5], pickle.loads(lib[5:])


def kind_of(lib: bytes) -> bytes:
    return lib[4:5] if lib.startswith(MAGIC) else b""


# ------------------------------------------------------------------------------------------ static evaluation
_NP = {"float32": np.float32, "bfloat16": np.float32, "int32": np.int32, "bool": np.bool_, "index": np.int64}


def evaluate_static(prog: TileProgram, target: int, cache: dict[int, Any] | None = None) -> Any:
    """The value of static node ``target`` as a NumPy array over the program's axes (size 1 where it does not vary)."""
    cache = {} if cache is None else cache
    for i in _deps(prog, target):
        if i in cache:
            continue
        n = prog.nodes[i]
        if n.kind == "const":
            cache[i] = n.args[0]
        elif n.kind == "range":
            ax = n.args[0]
            cache[i] = np.arange(prog.sizes[ax], dtype=np.int64).reshape(prog.shape(frozenset({ax})))
        elif n.kind == "cast":
            cache[i] = np.asarray(cache[n.srcs[0]]).astype(_NP[n.dtype])
        elif n.kind == "alu":
            cache[i] = _np_alu(n.args[0], [cache[s] for s in n.srcs], n.dtype)
        elif n.kind == "reduce":
            x = np.asarray(cache[n.srcs[0]])
            axes = n.args[1]
            full = tuple(prog.sizes[j] if j in axes else x.shape[j] if x.ndim else 1 for j in range(len(prog.sizes)))
            x = np.broadcast_to(x, full)
            fn = {"sum": np.sum, "max": np.max, "prod": np.prod}[n.args[0]]
            cache[i] = fn(x, axis=axes, keepdims=True).astype(_NP[n.dtype])
        else:
            raise NoTileForm(f"static:{n.kind}", "a static value of this kind")
    return cache[target]


def _deps(prog: TileProgram, target: int) -> list[int]:
    seen: dict[int, None] = {}
    stack = [(target, False)]
    while stack:
        i, done = stack.pop()
        if done:
            seen[i] = None
            continue
        if i in seen:
            continue
        stack.append((i, True))
        stack.extend((s, False) for s in prog.nodes[i].srcs if s not in seen)
    return list(seen)


def _np_alu(op: str, xs: list[Any], dtype: str) -> Any:
    a = [np.asarray(x) for x in xs]
    with np.errstate(all="ignore"):
        if op == "cdiv" or op == "fmod":
            q = np.where(a[1] == 0, 0, np.abs(a[0]) // np.where(a[1] == 0, 1, np.abs(a[1])))
            q = q * np.sign(a[0]) * np.sign(a[1])
            r = q if op == "cdiv" else a[0] - q * a[1]
        else:
            fn = {
                "add": np.add,
                "sub": np.subtract,
                "mul": np.multiply,
                "div": np.divide,
                "maximum": np.maximum,
                "lt": np.less,
                "ne": np.not_equal,
                "eq": np.equal,
                "neg": np.negative,
                "exp2": np.exp2,
                "log2": np.log2,
                "sin": np.sin,
                "sqrt": np.sqrt,
                "reciprocal": np.reciprocal,
                "trunc": np.trunc,
                "pow": np.power,
                "bitwise_and": np.bitwise_and,
                "bitwise_or": np.bitwise_or,
                "bitwise_xor": np.bitwise_xor,
                "left_shift": np.left_shift,
                "right_shift": np.right_shift,
                "floor_divide": np.floor_divide,
                "remainder": np.remainder,
                "where": lambda c, x, y: np.where(c, x, y),
            }[op]
            r = fn(*a)
    return np.asarray(r).astype(_NP[dtype])


def affine(idx: np.ndarray, sizes: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """``(offset, strides)`` when ``idx`` (over the program's axes) is offset + sum(stride * axis), else None."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim == 0:
        return int(idx), tuple(0 for _ in sizes)
    base = int(idx[(0,) * idx.ndim])
    strides, recon = [], np.full((1,) * idx.ndim, base, dtype=np.int64)
    for j, n in enumerate(idx.shape):
        if n == 1:
            strides.append(0)
            continue
        e = [0] * idx.ndim
        e[j] = 1
        s = int(idx[tuple(e)]) - base
        strides.append(s)
        shape = [1] * idx.ndim
        shape[j] = n
        recon = recon + s * np.arange(n, dtype=np.int64).reshape(shape)
    if not np.array_equal(np.broadcast_to(recon, idx.shape), idx):
        return None
    return base, tuple(strides)


__all__ = ["AxisType", "NoTileForm", "Node", "TileProgram", "affine", "build", "evaluate_static", "pack", "unpack"]
