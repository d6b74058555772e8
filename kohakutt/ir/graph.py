"""Graphs of IR ops: built by capture, ``torch.compile`` or tinygrad's scheduler; walked, rewritten and printed.

A :class:`Graph` holds :class:`Node` s in the order they were added (always a valid topological order) and
:class:`Value` s that connect them. Constants (Python numbers) sit directly in a node's operands.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import Numerics, resolve
from kohakutt.ir.ops import ScalarSpec, ShapeError, TensorSpec


@dataclass(eq=False)
class Value:
    """A tensor flowing through a graph: a graph input or one output of a node."""

    spec: TensorSpec
    id: int
    producer: Node | None = None
    index: int = 0
    name: str = ""

    def __str__(self) -> str:
        return f"%{self.name or self.id}"


Operand = Value | float | int | bool


@dataclass(eq=False)
class Node:
    op: str
    operands: list[Operand]
    attrs: dict[str, Any]
    numerics: Numerics
    outputs: list[Value] = field(default_factory=list)

    @property
    def inputs(self) -> list[Value]:
        """The operands that are values (not constants)."""
        return [o for o in self.operands if isinstance(o, Value)]

    def __str__(self) -> str:
        outs = ", ".join(str(v) for v in self.outputs)
        args = ", ".join(str(o) if isinstance(o, Value) else repr(o) for o in self.operands)
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        num = str(self.numerics)
        meta = "; ".join(p for p in (attrs, num) if p)
        types = ", ".join(str(v.spec) for v in self.outputs)
        return f"{outs} = {self.op}({args}){' {' + meta + '}' if meta else ''} : {types}"


class Graph:
    """An op graph with named inputs and outputs."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._ids = itertools.count()

    # ----------------------------------------------------------------------------------------------- build
    def input(self, spec: TensorSpec, name: str = "") -> Value:
        v = Value(spec, next(self._ids), name=name)
        self.inputs.append(v)
        return v

    def add(self, op: str, *operands: Operand, numerics: Numerics | None = None, **attrs: Any) -> Value | list[Value]:
        """Append ``op`` applied to ``operands``; its numerics are the scope's now unless given. Returns the output
        value (a list when the op has several)."""
        d = irops.get(op)
        d.check_arity(len(operands))
        attrs = d.bind_attrs(attrs)
        specs = [o.spec if isinstance(o, Value) else ScalarSpec(o) for o in operands]
        out_specs = d.infer(specs, attrs)
        node = Node(op, list(operands), attrs, numerics if numerics is not None else resolve(d.numerics))
        node.outputs = [Value(s, next(self._ids), node, i) for i, s in enumerate(out_specs)]
        self.nodes.append(node)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def set_outputs(self, *values: Value) -> None:
        self.outputs = list(values)

    # ------------------------------------------------------------------------------------------------ walk
    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def users(self) -> dict[int, list[Node]]:
        """For each value id, the nodes that read it."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v.id, []).append(n)
        return out

    def live_nodes(self) -> list[Node]:
        """The nodes some output depends on, in order."""
        needed = {v.id for v in self.outputs}
        keep: list[Node] = []
        for n in reversed(self.nodes):
            if any(o.id in needed for o in n.outputs):
                keep.append(n)
                needed.update(v.id for v in n.inputs)
        return keep[::-1]

    # --------------------------------------------------------------------------------------------- rewrite
    def rewrite(self, fn: Callable[[Graph, Node], Sequence[Value] | None]) -> int:
        """Offer every node to ``fn``; when it returns replacement values (built with :meth:`add` on this graph),
        uses of the node's outputs are redirected to them and the node is dropped. Returns how many were replaced.
        New nodes are placed where the replaced node stood."""
        replaced = 0
        subst: dict[int, Value] = {}
        new_nodes: list[Node] = []
        for node in list(self.nodes):
            node.operands = [subst.get(o.id, o) if isinstance(o, Value) else o for o in node.operands]
            mark = len(self.nodes)
            result = fn(self, node)
            added = self.nodes[mark:]
            del self.nodes[mark:]
            if result is None:
                new_nodes.extend(added)
                new_nodes.append(node)
                continue
            if len(result) != len(node.outputs):
                raise ShapeError(f"a rewrite of {node.op} returned {len(result)} values for {len(node.outputs)}")
            for old, new in zip(node.outputs, result):
                if old.spec.shape != new.spec.shape:
                    raise ShapeError(f"a rewrite of {node.op} changed shape {old.spec.shape} -> {new.spec.shape}")
                subst[old.id] = new
            new_nodes.extend(added)
            replaced += 1
        self.nodes = new_nodes
        self.outputs = [subst.get(v.id, v) for v in self.outputs]
        return replaced

    def eliminate_dead(self) -> int:
        live = self.live_nodes()
        dropped = len(self.nodes) - len(live)
        self.nodes = live
        return dropped

    # ----------------------------------------------------------------------------------------------- print
    def __str__(self) -> str:
        ins = ", ".join(f"{v}: {v.spec}" for v in self.inputs)
        lines = [f"graph {self.name}({ins}) {{"]
        lines += [f"  {n}" for n in self.nodes]
        lines.append(f"  return {', '.join(str(v) for v in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


def decompose(graph: Graph, should: Callable[[Node], bool] = lambda n: True) -> int:
    """Replace every node whose op has a decomposition (and ``should(node)``) by the ops it decomposes into.
    Sub-ops run under the node's numerics. Repeats until nothing changes; returns how many nodes were expanded."""
    from kohakutt.ir.numerics import numerics

    total = 0
    while True:

        def expand(g: Graph, node: Node) -> Sequence[Value] | None:
            d = irops.get(node.op)
            if d.decomposition is None or not should(node):
                return None
            n = node.numerics
            with numerics(n.fidelity, n.fp32_acc, n.approx):
                out = d.decomposition(g, *node.operands, **node.attrs)
            return out if isinstance(out, list | tuple) else [out]

        count = graph.rewrite(expand)
        total += count
        if not count:
            return total
