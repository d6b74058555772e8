"""The frontend-neutral IR: op definitions, tensor specs, numerics scopes and op graphs."""

from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.graph import Graph, Node, Value, decompose
from kohakutt.ir.numerics import Fidelity, Numerics, numerics
from kohakutt.ir.ops import OpDef, ScalarSpec, ShapeError, TensorSpec, all_ops, define, get, infer

__all__ = [
    "DType", "Fidelity", "Graph", "Node", "Numerics", "OpDef", "ScalarSpec", "ShapeError", "TensorSpec", "Value",
    "all_ops", "decompose", "define", "get", "infer", "numerics", "promote",
]
