"""The op registry: every IR op's name, signature, shape / dtype inference, numerics defaults and decomposition.

An op is defined once, here or in ``kohakutt/ir/defs/<family>.py``, with :func:`define`. Frontends translate into
these names; the op library (``kohakutt.kernels``) registers implementations per backend against them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kohakutt.errors import DtypeError, KohakuTTError, KohakuTTUnsupportedOperator
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics


class ShapeError(KohakuTTError, ValueError):
    """An op's inputs do not fit its signature (shapes, dtypes, attributes)."""


@dataclass(frozen=True)
class TensorSpec:
    """What the IR knows of a tensor: its shape, dtype and layout."""

    shape: tuple[int, ...]
    dtype: DType
    layout: Layout = Layout.ROW_MAJOR

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_(self, **kw: Any) -> TensorSpec:
        return TensorSpec(kw.get("shape", self.shape), kw.get("dtype", self.dtype), kw.get("layout", self.layout))

    def __str__(self) -> str:
        lay = "" if self.layout is Layout.ROW_MAJOR else "@tile"
        return f"{self.dtype.value}[{', '.join(map(str, self.shape))}]{lay}"


@dataclass(frozen=True)
class ScalarSpec:
    """A Python number passed where a tensor could be: weakly typed, it takes the tensor operands' dtype."""

    value: float | int | bool

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self) -> DType | None:
        return None

    def __str__(self) -> str:
        return repr(self.value)


Spec = TensorSpec | ScalarSpec
Infer = Callable[[Sequence[Spec], dict[str, Any]], list[TensorSpec]]


@dataclass
class OpDef:
    """One IR op. ``inputs`` names the tensor operands (a trailing ``*name`` takes any number)."""

    name: str
    family: str
    inputs: tuple[str, ...]
    attrs: dict[str, Any]
    infer: Infer
    numerics: Numerics = field(default_factory=Numerics)
    decomposition: Callable[..., Any] | None = None
    doc: str = ""
    outputs: int = 1

    def bind_attrs(self, attrs: dict[str, Any] | None) -> dict[str, Any]:
        """``attrs`` with defaults filled in; unknown names are an error."""
        attrs = dict(attrs or {})
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise ShapeError(f"{self.name} has no attribute(s) {sorted(unknown)}; it takes {sorted(self.attrs)}")
        return {k: attrs.get(k, v) for k, v in self.attrs.items()}

    def check_arity(self, n: int) -> None:
        variadic = bool(self.inputs) and self.inputs[-1].startswith("*")
        fixed = len(self.inputs) - variadic
        if n < fixed or (not variadic and n != fixed):
            raise ShapeError(f"{self.name}({', '.join(self.inputs)}) takes {'at least ' if variadic else ''}"
                             f"{fixed} operand(s), got {n}")

    def signature(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"{self.name}({', '.join(self.inputs)}{'; ' + attrs if attrs else ''})"


OPS: dict[str, OpDef] = {}


def define(name: str, family: str, inputs: Sequence[str], infer: Infer, *, attrs: dict[str, Any] | None = None,
           numerics: Numerics | None = None, decomposition: Callable[..., Any] | None = None, doc: str = "",
           outputs: int = 1) -> OpDef:
    """Register an IR op. Defining the same name twice is an error (one definition per op)."""
    _load_defs()
    if name in OPS:
        raise KohakuTTError(f"IR op {name!r} is defined twice (in family {OPS[name].family!r} and {family!r})")
    op = OpDef(name, family, tuple(inputs), dict(attrs or {}), infer, numerics or Numerics(), decomposition, doc,
               outputs)
    OPS[name] = op
    return op


def get(name: str) -> OpDef:
    """The definition of ``name``; an unknown op raises :class:`KohakuTTUnsupportedOperator`."""
    _load_defs()
    try:
        return OPS[name]
    except KeyError:
        raise KohakuTTUnsupportedOperator(f"no IR op named {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    _load_defs()
    return OPS


def infer(name: str, inputs: Sequence[Spec], attrs: dict[str, Any] | None = None) -> list[TensorSpec]:
    """The output specs of ``name`` applied to ``inputs`` (with defaults filled into ``attrs``)."""
    op = get(name)
    op.check_arity(len(inputs))
    return op.infer(inputs, op.bind_attrs(attrs))


_loaded = False


def _load_defs() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import kohakutt.ir.defs  # noqa: F401  (each family module defines its ops at import)


# ---------------------------------------------------------------------------------------- inference helpers
def tensor_dtypes(inputs: Sequence[Spec]) -> list[DType]:
    return [s.dtype for s in inputs if isinstance(s, TensorSpec)]


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy / PyTorch broadcasting of ``shapes``."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"shapes {[tuple(s) for s in shapes]} cannot be broadcast together (dim {i})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def float_tensor(s: Spec, op: str, what: str) -> TensorSpec:
    """``s`` as a float tensor spec; a Python number is a ShapeError, an integer tensor a DtypeError saying to cast."""
    if not isinstance(s, TensorSpec):
        raise ShapeError(f"{op}: {what} must be a tensor, not the Python number {s}")
    if not s.dtype.is_float:
        raise DtypeError(f"{op} needs float tensors, got {what} of dtype {s.dtype.value}; convert it with typecast "
                         "to float32 or bfloat16 first")  # fmt: skip
    return s


def norm_dim(dim: int, ndim: int, op: str = "op") -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise ShapeError(f"{op}: dim {dim} is out of range for a {ndim}-d tensor")
    return dim % n


def norm_dims(dims: int | Sequence[int] | None, ndim: int, op: str = "op") -> tuple[int, ...]:
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({norm_dim(d, ndim, op) for d in dims}))
    return out if out or ndim else ()


def output_layout(dtype: DType, inputs: Sequence[Spec]) -> Layout:
    """The layout of an element-wise result of ``dtype`` from ``inputs``: tile if any tensor input is tile, else row
    major. TT-NN's unary ops keep their input's layout and its binary ops take and give tile tensors, so a tile input
    means a tile result either way. Block floats exist only as tiles, int64 and float16 only row major (TT-NN tiles
    neither)."""
    if dtype.is_block:
        return Layout.TILE
    if dtype in (DType.INT64, DType.FLOAT16):
        return Layout.ROW_MAJOR
    tile = any(isinstance(s, TensorSpec) and s.layout is Layout.TILE for s in inputs)
    return Layout.TILE if tile else Layout.ROW_MAJOR


def same(index: int = 0, dtype: DType | None = None) -> Infer:
    """The output is like input ``index``: its shape, dtype (or ``dtype``) and layout (see :func:`output_layout`)."""

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        s = inputs[index]
        if not isinstance(s, TensorSpec):
            raise ShapeError("this operand must be a tensor, not a Python number")
        out = dtype or s.dtype
        return [TensorSpec(s.shape, out, output_layout(out, [s]))]

    return infer


def elementwise(dtype: DType | Callable[[DType], DType] | None = None) -> Infer:
    """Broadcast every operand; the dtype is the promoted one, or fixed, or a function of the promoted one; the
    layout is tile if any tensor operand is tile (see :func:`output_layout`)."""

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        dts = tensor_dtypes(inputs)
        if not dts:
            raise ShapeError("an element-wise op needs at least one tensor operand")
        shape = broadcast_shapes(*(s.shape for s in inputs))
        base = promote(*dts)
        out = base if dtype is None else dtype(base) if callable(dtype) else dtype
        return [TensorSpec(shape, out, output_layout(out, inputs))]

    return infer


FPU_MATH = Numerics(Fidelity.HiFi4, False, False)  # TT-NN's eltwise default: full-precision FPU products
MATMUL_MATH = Numerics(Fidelity.HiFi2, True, False)  # see docs/concepts/numerics.md for why these defaults
SFPU_MATH = Numerics(Fidelity.HiFi4, False, False)
