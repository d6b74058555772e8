"""The TT-NN call sites in ``kohakutt/kernels``' source, found with ``ast`` (standard library only).

A call site is a call expression whose callee is a ``ttnn`` callable: ``tt.add(...)``, ``tt.experimental.conv3d(...)``,
``getattr(tt, name)(...)``, ``(tt.max if largest else tt.min)(...)``, or a local name bound to one of those in the same
function (``norm = tt.rms_norm if rms else tt.layer_norm; norm(...)``). The ``ttnn`` module is what the op library
calls it: a name in :data:`MODULE_NAMES`. Each site is keyed by where its expression ends (file, line, column), which
is where Python reports a call's position (``fake_ttnn.call_site`` records the same).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

MODULE_NAMES = frozenset({"tt", "ttnn_"})
KERNELS = Path(__file__).resolve().parents[2] / "kohakutt" / "kernels"


@dataclass(frozen=True, order=True)
class Site:
    file: str  # relative to the checkout, e.g. kohakutt/kernels/matmul.py
    line: int
    end_line: int
    end_col: int
    source: str
    function: str = ""  # the innermost named function the call is in ("" at module level)

    @property
    def key(self) -> tuple[str, int, int]:
        return self.file, self.end_line, self.end_col

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.function or 'module'}): {self.source}"


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def is_ttnn_callable(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return _root(node) in MODULE_NAMES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
        return bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id in MODULE_NAMES
    if isinstance(node, ast.IfExp):
        return is_ttnn_callable(node.body) and is_ttnn_callable(node.orelse)
    return False


def _scope(node: ast.AST) -> list[ast.AST]:
    """The nodes of one function (or the module) without those of the functions nested in it."""
    out, todo = [], list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        out.append(n)
        if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(n))
    return out


def sites_in(path: Path) -> list[Site]:
    text = path.read_text()
    tree = ast.parse(text)
    rel = path.relative_to(KERNELS.parents[1]).as_posix()
    found: set[Site] = set()
    named: dict[ast.AST, str] = {}  # each function or lambda -> the innermost named function holding it

    def visit(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else name
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                named[child] = inner
            visit(child, inner)

    visit(tree, "")
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))]
    for scope in scopes:
        nodes = _scope(scope)
        where = named.get(scope, "")
        aliases = {t.id for n in nodes if isinstance(n, ast.Assign) and is_ttnn_callable(n.value)
                   for t in n.targets if isinstance(t, ast.Name)}  # fmt: skip
        for n in nodes:
            if not isinstance(n, ast.Call):
                continue
            if is_ttnn_callable(n.func) or (isinstance(n.func, ast.Name) and n.func.id in aliases):
                src = " ".join((ast.get_source_segment(text, n) or "").split())
                found.add(Site(rel, n.lineno, n.end_lineno or n.lineno, n.end_col_offset or 0, src[:90], where))
    return sorted(found)


def all_sites() -> list[Site]:
    """Every TT-NN call site in ``kohakutt/kernels`` (its own programs' folder has none: they run through
    ``generic_op`` in the HAL)."""
    return [s for p in sorted(KERNELS.glob("*.py")) for s in sites_in(p)]
