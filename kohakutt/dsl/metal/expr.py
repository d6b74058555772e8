"""Runtime values in a DSL program: symbols (runtime arguments, loop variables) and uint32 arithmetic on them.

A kernel body runs once, when the program is defined, with these in place of numbers; every operation on them
records an expression that the generated C++ computes on the core. Arithmetic is the card's: unsigned 32-bit, so
``a - b`` wraps when ``b > a`` and ``//`` / ``%`` are C++'s ``/`` and ``%`` on unsigned values. A Python ``if`` or
``range`` cannot take one (the value is not known until the kernel runs): use ``k.when(cond)`` and ``k.range(n)``.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kohakutt.errors import KernelDSLError

MASK = 0xFFFFFFFF
_DSL_DIR = str(Path(__file__).resolve().parent) + os.sep


@dataclass(frozen=True)
class Site:
    """A line of the user's DSL source: where a statement was written."""

    file: str
    line: int

    @property
    def short(self) -> str:
        return f"{Path(self.file).name}:{self.line}"

    @property
    def text(self) -> str:
        return linecache.getline(self.file, self.line).strip()

    def __str__(self) -> str:
        return self.short


def caller_site() -> Site:
    """The first frame outside this package: the DSL line being traced."""
    f = sys._getframe(1)
    while f is not None and (f.f_code.co_filename.startswith(_DSL_DIR) or "contextlib" in f.f_code.co_filename):
        f = f.f_back
    if f is None:
        return Site("<unknown>", 0)
    return Site(f.f_code.co_filename, f.f_lineno)


def fail(message: str, site: Site | None = None) -> KernelDSLError:
    """A KernelDSLError for ``message`` at ``site`` (default: the calling DSL line)."""
    site = site or caller_site()
    return KernelDSLError(f"{site.short}: {message}", file=site.file, line=site.line)


Value = "Expr | int"


class Expr:
    """A uint32 value computed on the core."""

    __hash__ = object.__hash__

    def render(self, names: Mapping[str, str] | None = None) -> str:
        """The C++ of the value (``names``: C++ names for symbol keys that differ from the symbol's own)."""
        raise NotImplementedError

    def eval(self, env: Mapping[str, int]) -> int:
        raise NotImplementedError

    def atoms(self) -> set[str]:
        return set()

    # -------------------------------------------------------------------------------------- arithmetic
    def _bin(self, op: str, other: Any, swap: bool = False) -> Expr:
        o = as_expr(other, op)
        return BinOp(op, o, self) if swap else BinOp(op, self, o)

    def __add__(self, o: Any) -> Expr:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> Expr:
        return self._bin("+", o, True)

    def __sub__(self, o: Any) -> Expr:
        return self._bin("-", o)

    def __rsub__(self, o: Any) -> Expr:
        return self._bin("-", o, True)

    def __mul__(self, o: Any) -> Expr:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> Expr:
        return self._bin("*", o, True)

    def __floordiv__(self, o: Any) -> Expr:
        return self._bin("/", o)

    def __rfloordiv__(self, o: Any) -> Expr:
        return self._bin("/", o, True)

    def __mod__(self, o: Any) -> Expr:
        return self._bin("%", o)

    def __rmod__(self, o: Any) -> Expr:
        return self._bin("%", o, True)

    def __lshift__(self, o: Any) -> Expr:
        return self._bin("<<", o)

    def __rshift__(self, o: Any) -> Expr:
        return self._bin(">>", o)

    def __and__(self, o: Any) -> Expr:
        return self._bin("&", o)

    def __rand__(self, o: Any) -> Expr:
        return self._bin("&", o, True)

    def __or__(self, o: Any) -> Expr:
        return self._bin("|", o)

    def __ror__(self, o: Any) -> Expr:
        return self._bin("|", o, True)

    def __lt__(self, o: Any) -> Expr:
        return self._bin("<", o)

    def __le__(self, o: Any) -> Expr:
        return self._bin("<=", o)

    def __gt__(self, o: Any) -> Expr:
        return self._bin(">", o)

    def __ge__(self, o: Any) -> Expr:
        return self._bin(">=", o)

    def __eq__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._bin("==", o)

    def __ne__(self, o: Any) -> Expr:  # type: ignore[override]
        return self._bin("!=", o)

    def __truediv__(self, o: Any) -> Expr:
        raise fail("'/' on a runtime value: the core computes in uint32; use '//' for integer division")

    __rtruediv__ = __truediv__

    def __neg__(self) -> Expr:
        raise fail("negating a runtime value: the core computes in uint32 (no negative numbers)")

    # ----------------------------------------------------------------------- what tracing cannot do
    def __bool__(self) -> bool:
        raise fail(f"a Python 'if', 'while', 'and' / 'or' or assert cannot test the runtime value {self.render()}: "
                   "it is known only when the kernel runs; use 'with k.when(cond):' (k or c) instead")  # fmt: skip

    def __index__(self) -> int:
        raise fail(f"the runtime value {self.render()} used as a Python int (range(), an index, a size): use "
                   "k.range(n) for a loop over it; sizes of CBs and page counts must be Python ints")  # fmt: skip

    def __int__(self) -> int:
        return self.__index__()

    def __float__(self) -> float:
        raise fail(f"the runtime value {self.render()} used as a Python float: runtime scalars are uint32 "
                   "(pass a float's fp32 bits, bits(x))")  # fmt: skip

    def __iter__(self) -> Any:
        raise fail(f"iterating over the runtime value {self.render()}: use k.range(n)")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.render()}>"


class Const(Expr):
    def __init__(self, value: int):
        self.value = int(value) & MASK

    def render(self, names: Mapping[str, str] | None = None) -> str:
        return str(self.value) if self.value < 1 << 31 else f"{self.value}u"

    def eval(self, env: Mapping[str, int]) -> int:
        return self.value


class Bits(Const):
    """The fp32 bits of a float written in the DSL: shown as hex with the float beside it."""

    def __init__(self, value: int, x: float):
        super().__init__(value)
        self.x = x

    def render(self, names: Mapping[str, str] | None = None) -> str:
        return f"0x{self.value:08x}u /* {self.x!r} */"


class Sym(Expr):
    """A named value: a runtime argument (``kind`` "runtime", "start", "count") or a loop variable ("loop")."""

    def __init__(self, name: str, kind: str, site: Site, key: str | None = None):
        self.name, self.kind, self.site = name, kind, site
        self.key = key or name  # unique within the program: what env / poly use

    def render(self, names: Mapping[str, str] | None = None) -> str:
        return (names or {}).get(self.key, self.name)

    def eval(self, env: Mapping[str, int]) -> int:
        return env[self.key]

    def atoms(self) -> set[str]:
        return {self.key}


_PRECEDENCE = {"*": 5, "/": 5, "%": 5, "+": 4, "-": 4, "<<": 3, ">>": 3, "<": 2, "<=": 2, ">": 2, ">=": 2,
               "==": 1, "!=": 1, "&": 0, "|": -1}  # fmt: skip


class BinOp(Expr):
    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b

    def render(self, names: Mapping[str, str] | None = None) -> str:
        p = _PRECEDENCE[self.op]

        def side(e: Expr, right: bool) -> str:
            s = e.render(names)
            if isinstance(e, BinOp):
                q = _PRECEDENCE[e.op]
                if q < p or (right and q == p and self.op in "-/%") or q <= 0 or p <= 0:
                    return f"({s})"
            return s

        return f"{side(self.a, False)} {self.op} {side(self.b, True)}"

    def eval(self, env: Mapping[str, int]) -> int:
        a, b = self.a.eval(env), self.b.eval(env)
        op = self.op
        if op in ("/", "%") and b == 0:
            raise ZeroDivisionError(f"{self.render()} divides by zero")
        r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a // b, "%": lambda: a % b,
             "<<": lambda: a << (b & 31), ">>": lambda: a >> (b & 31), "&": lambda: a & b, "|": lambda: a | b,
             "<": lambda: int(a < b), "<=": lambda: int(a <= b), ">": lambda: int(a > b), ">=": lambda: int(a >= b),
             "==": lambda: int(a == b), "!=": lambda: int(a != b)}[op]()  # fmt: skip
        return r & MASK

    def atoms(self) -> set[str]:
        return self.a.atoms() | self.b.atoms()


def as_expr(v: Any, what: str = "") -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise fail(f"{what + ': ' if what else ''}expected a uint32 (a Python int or a runtime value), got "
                   f"{type(v).__name__} {v!r}")  # fmt: skip
    if not 0 <= v <= MASK:
        raise fail(f"{what + ': ' if what else ''}{v} is not a uint32 (0..{MASK})")
    return Const(v)


def render(v: Expr | int, names: Mapping[str, str] | None = None) -> str:
    return as_expr(v).render(names)


# ------------------------------------------------------------------------------------------------- polynomials
Poly = dict[tuple[str, ...], int]


def poly(e: Expr | int) -> Poly:
    """``e`` as a polynomial over its symbols (sums and products); anything else is an opaque atom named by its
    C++ text. Used to compare page counts across kernels symbolically."""
    e = as_expr(e)
    if isinstance(e, Const):
        return {(): e.value} if e.value else {}
    if isinstance(e, Sym):
        return {(e.key,): 1}
    if isinstance(e, BinOp) and e.op in "+-*" and len(e.op) == 1:
        a, b = poly(e.a), poly(e.b)
        if e.op == "*":
            return poly_mul(a, b)
        return poly_add(a, b, -1 if e.op == "-" else 1)
    return {(f"[{e.render()}]",): 1}


def poly_add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
        if out[m] == 0:
            del out[m]
    return out


def poly_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
            if out[m] == 0:
                del out[m]
    return out


def poly_str(p: Poly, names: Mapping[str, str] | None = None) -> str:
    if not p:
        return "0"
    names = names or {}
    terms = []
    for m, c in sorted(p.items(), key=lambda kv: (len(kv[0]), kv[0])):
        factors = [names.get(a, a) for a in m]
        if c != 1 or not factors:
            factors.insert(0, str(c))
        terms.append(" * ".join(factors))
    return " + ".join(terms).replace("+ -", "- ")


__all__ = ["MASK", "BinOp", "Bits", "Const", "Expr", "Poly", "Site", "Sym", "as_expr", "caller_site", "fail", "poly",
           "poly_add", "poly_mul", "poly_str", "render"]  # fmt: skip
