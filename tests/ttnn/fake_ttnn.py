"""The test suite's fake TT-NN for the op library: it runs ``kohakutt/kernels``' TT-NN implementations without TT-NN
and records each call they make, for ``replay_ttnn.py`` to make for real on the mocked P150.

A :class:`FakeTTNN` stands in for the ``ttnn`` module. Its tensors carry what TT-NN's do on the host (logical and
tile-padded shape, dtype, layout, memory config, device); its functions compute the output tensors' specs the way
TT-NN 0.81.1 documents them (the replay checks each prediction against TT-NN's own outputs, so a wrong rule here is
found, not trusted). Every call is logged with its arguments (tensors by id, enums by their ``ttnn`` path, numbers,
lists, host arrays by shape and dtype, configs as the calls that made them), the TT-NN name, the source line in
``kohakutt/kernels`` it came from, and the tensors it returned. What TT-NN itself refuses to take (a slice of a
``ttnn.Shape``, an unknown name) the fake refuses too.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

KERNELS = Path(__file__).resolve().parents[2] / "kohakutt" / "kernels"
TILE = 32


class FakeError(Exception):
    """A call the fake cannot model (or TT-NN would refuse at the Python level)."""


class Enum:
    """A TT-NN enum value, known by its path in the ``ttnn`` module (``DataType.BFLOAT16``, ``Layout.TILE``)."""

    __slots__ = ("path",)

    def __init__(self, path: str):
        self.path = path

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Enum) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return self.path

    __str__ = __repr__


class Namespace:
    """A TT-NN enum class or submodule: only the listed members exist."""

    def __init__(self, path: str, members: dict[str, Any], touched: list | None = None):
        self._path, self._members, self._touched = path, members, touched

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            value = self._members[name]
        except KeyError:
            raise AttributeError(f"ttnn.{self._path} has no attribute {name!r}") from None
        if self._touched is not None:
            self._touched.append((f"{self._path}.{name}", call_site()))
        return value


DTYPES = ("FLOAT32", "BFLOAT16", "BFLOAT8_B", "BFLOAT4_B", "INT32", "UINT32", "UINT16", "UINT8")
DataType = Namespace("DataType", {n: Enum(f"DataType.{n}") for n in DTYPES})
Layout = Namespace("Layout", {n: Enum(f"Layout.{n}") for n in ("TILE", "ROW_MAJOR")})
TILE_LAYOUT, ROW_MAJOR_LAYOUT = Layout.TILE, Layout.ROW_MAJOR
INTEGER = {DataType.INT32, DataType.UINT32, DataType.UINT16, DataType.UINT8}
BLOCK = {DataType.BFLOAT8_B, DataType.BFLOAT4_B}


class Shape:
    """``ttnn.Shape``: len, int indexing (negative too), iteration, equality; no slicing (TT-NN's takes an int)."""

    __slots__ = ("_dims",)

    def __init__(self, dims: Sequence[int]):
        self._dims = tuple(int(d) for d in dims)

    def __len__(self) -> int:
        return len(self._dims)

    def __getitem__(self, i: Any) -> int:
        if not isinstance(i, int):
            raise TypeError(f"__getitem__(): incompatible function arguments: ttnn.Shape takes an int, not {i!r}")
        return self._dims[i]

    def __iter__(self):
        return iter(self._dims)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Shape | list | tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._dims)

    def __repr__(self) -> str:
        return f"Shape({list(self._dims)})"


class MemoryConfig:
    __slots__ = ("buffer", "path")

    def __init__(self, buffer: str, path: str):
        self.buffer, self.path = buffer, path

    def __repr__(self) -> str:
        return self.path


DRAM_MEMORY_CONFIG = MemoryConfig("DRAM", "DRAM_MEMORY_CONFIG")
L1_MEMORY_CONFIG = MemoryConfig("L1", "L1_MEMORY_CONFIG")


class FakeDevice:
    """The (one) mocked P150 as the op library sees it."""

    def arch(self) -> Enum:
        return Enum("Arch.BLACKHOLE")

    def __repr__(self) -> str:
        return "MeshDevice(p150)"


class Opaque:
    """What a non-tensor TT-NN call returns (a compute kernel config, a conv config): passed on by id."""

    def __init__(self, fake: FakeTTNN, fn: str):
        self.id, self.fn = fake.new_id(), fn

    def __repr__(self) -> str:
        return f"<{self.fn} #{self.id}>"


class FakeTensor:
    """A TT-NN tensor's host-side description: what TT-NN validates, never values (except small leaf tensors whose
    values the op library reads back, such as sequence bounds)."""

    def __init__(self, fake: FakeTTNN, shape: Sequence[int], dtype: Enum, layout: Enum, memory: str = "DRAM",
                 device: FakeDevice | None = None, values: np.ndarray | None = None):  # fmt: skip
        if dtype in BLOCK and layout != TILE_LAYOUT:
            raise FakeError(f"a {dtype} tensor must be in tile layout")
        self.id = fake.new_id()
        self._shape = Shape(shape)
        self.dtype, self.layout, self.memory, self._device, self.values = dtype, layout, memory, device, values

    @property
    def shape(self) -> Shape:
        return self._shape

    @property
    def padded_shape(self) -> Shape:
        dims = list(self._shape)
        if self.layout == TILE_LAYOUT:
            if len(dims) == 1:
                dims = [TILE, -(-dims[0] // TILE) * TILE]
            elif dims:
                dims[-2:] = [-(-d // TILE) * TILE for d in dims[-2:]]
            else:
                dims = [TILE, TILE]
        return Shape(dims)

    def device(self) -> FakeDevice | None:
        return self._device

    def memory_config(self) -> MemoryConfig:
        return DRAM_MEMORY_CONFIG if self.memory == "DRAM" else L1_MEMORY_CONFIG

    def spec(self) -> dict[str, Any]:
        return {"shape": list(self._shape), "padded_shape": list(self.padded_shape), "dtype": self.dtype.path,
                "layout": self.layout.path, "memory": self.memory if self._device else "HOST"}  # fmt: skip

    def __repr__(self) -> str:
        return f"FakeTensor#{self.id}({list(self._shape)}, {self.dtype}, {self.layout})"


# ------------------------------------------------------------------------------------------------ shape rules
def _dims(x: Any) -> list[int]:
    return list(x.shape)


def _norm(d: int, n: int) -> int:
    if not -max(n, 1) <= d < max(n, 1):
        raise FakeError(f"dim {d} is out of range for rank {n}")
    return d % max(n, 1)


def broadcast(*shapes: Sequence[int]) -> list[int]:
    out: list[int] = []
    for dims in shapes:
        dims = list(dims)
        n = max(len(out), len(dims))
        a, b = [1] * (n - len(out)) + out, [1] * (n - len(dims)) + dims
        if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
            raise FakeError(f"shapes {out} and {dims} do not broadcast")
        out = [max(x, y) if 0 not in (x, y) else 0 for x, y in zip(a, b)]
    return out


def _reduced(shape: list[int], dim: Any, keepdim: bool) -> list[int]:
    n = len(shape)
    dims = range(n) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = {_norm(d, n) for d in dims}
    if keepdim:
        return [1 if i in dims else s for i, s in enumerate(shape)]
    return [s for i, s in enumerate(shape) if i not in dims]


def _reshape(shape: list[int], new: Sequence[int]) -> list[int]:
    new = [int(d) for d in new]
    total = math.prod(shape)
    if new.count(-1) == 1:
        rest = math.prod(d for d in new if d != -1)
        new[new.index(-1)] = total // rest if rest else 0
    if math.prod(new) != total:
        raise FakeError(f"cannot reshape {shape} ({total} values) to {new}")
    return new


def _conv_out(size: int, k: int, s: int, pad: int, dil: int) -> int:
    return (size + pad - dil * (k - 1) - 1) // s + 1


def _pool_out(size: int, k: int, s: int, pad: int, dil: int, ceil: bool) -> int:
    eff = size + 2 * pad - dil * (k - 1) - 1
    out = (-(-eff // s) if ceil else eff // s) + 1
    if ceil and (out - 1) * s >= size + pad:
        out -= 1
    return out


# --------------------------------------------------------------------------------------------------- the module
UNARY = (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_not", "ceil", "celu", "cos", "cosh",
    "digamma", "elu", "erf", "erfc", "erfinv", "exp", "exp2", "expm1", "floor", "frac", "gelu", "hardsigmoid",
    "hardswish", "hardtanh", "isfinite", "isinf", "isnan", "isneginf", "isposinf", "leaky_relu", "lgamma", "log",
    "log10", "log1p", "log2", "log_sigmoid", "logical_not", "mish", "neg", "reciprocal", "relu", "relu6", "round",
    "rsqrt", "selu", "sigmoid", "sign", "signbit", "silu", "sin", "sinh", "softplus", "sqrt", "square", "tan",
    "tanh", "threshold", "trunc", "clamp", "softmax", "moreh_logsoftmax", "layer_norm", "rms_norm", "batch_norm",
    "tril", "triu", "roll", "cumsum", "cumprod",
)  # fmt: skip
BINARY = (
    "add", "subtract", "multiply", "divide", "remainder", "fmod", "pow", "atan2", "hypot", "maximum", "minimum",
    "logaddexp", "logaddexp2", "xlogy", "heaviside", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_left_shift", "bitwise_right_shift", "logical_and", "logical_or", "logical_xor", "eq", "ne", "lt", "le",
    "gt", "ge", "isclose", "rsub", "addalpha", "subalpha", "where", "addcmul", "addcdiv", "lerp",
)  # fmt: skip
BACKWARD = [
    "gelu_bw",
    "silu_bw",
    "elu_bw",
    "leaky_relu_bw",
    "hardtanh_bw",
    "softplus_bw",
    "hardsigmoid_bw",
    "hardswish_bw",
]
REDUCE = ["sum", "mean", "max", "min", "prod", "var", "std"]


class FakeTTNN:
    """The fake ``ttnn`` module. ``calls`` is the log since the last :meth:`start`; ``device`` is the mocked card."""

    def __init__(self) -> None:
        self._next = 0
        self.device = FakeDevice()
        self.calls: list[dict[str, Any]] = []
        self.tensors: dict[int, dict[str, Any]] = {}
        self.objects: dict[int, Any] = {}
        self.touched: list[tuple[str, str]] = []  # (ttnn name, call site) of every module attribute read
        self.depth = 0
        members = {
            "DataType": DataType, "Layout": Layout, "TILE_LAYOUT": TILE_LAYOUT, "ROW_MAJOR_LAYOUT": ROW_MAJOR_LAYOUT,
            "DRAM_MEMORY_CONFIG": DRAM_MEMORY_CONFIG, "L1_MEMORY_CONFIG": L1_MEMORY_CONFIG, "Shape": Shape,
            "MathFidelity": Namespace("MathFidelity", {n: Enum(f"MathFidelity.{n}")
                                                       for n in ("LoFi", "HiFi2", "HiFi3", "HiFi4")}, self.touched),
            "GeluVariant": Namespace("GeluVariant", {n: Enum(f"GeluVariant.{n}")
                                                     for n in ("Accurate", "Tanh", "FastLut")}, self.touched),
            "SigmoidMode": Namespace("SigmoidMode", {n: Enum(f"SigmoidMode.{n}")
                                                     for n in ("Accurate", "FastApproximate")}, self.touched),
            "Arch": Namespace("Arch", {"BLACKHOLE": Enum("Arch.BLACKHOLE")}),
        }  # fmt: skip
        members |= {n.lower(): getattr(DataType, n) for n in DTYPES}
        self._members = members
        self._functions: dict[str, Callable[..., Any]] = {}
        for name in UNARY:
            self._functions[name] = self._unary
        for name in BINARY:
            self._functions[name] = self._binary
        for name in BACKWARD:
            self._functions[name] = self._backward
        for name in REDUCE:
            self._functions[name] = self._reduce
        for name in dir(self):
            if name.startswith("op_"):
                self._functions[name[3:].replace("__", ".")] = getattr(self, name)
        self.transformer = self._submodule("transformer")
        self.experimental = self._submodule("experimental")

    # -------------------------------------------------------------------------------------- module interface
    def new_id(self) -> int:
        self._next += 1
        return self._next

    def start(self) -> None:
        """Forget the calls recorded so far (one op-library call is one case)."""
        self.calls, self.tensors, self.objects = [], {}, {}
        self.touched.clear()

    def leaf(self, shape: Sequence[int], dtype: Enum, layout: Enum, values: np.ndarray | None = None) -> FakeTensor:
        """An input tensor on the mocked card (DRAM, interleaved)."""
        t = FakeTensor(self, shape, dtype, layout, "DRAM", self.device, values)
        self.tensors[t.id] = t.spec() | {"leaf": True}
        return t

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._functions or (name in self._members and not isinstance(self._members[name], Namespace)):
            self.touched.append((name, call_site()))
        if name in self._members:
            return self._members[name]
        if name in self._functions:
            return self._wrap(name, self._functions[name])
        raise AttributeError(f"the fake ttnn has no {name!r} (is it a ttnn name? add its rule to fake_ttnn.py)")

    def _submodule(self, prefix: str) -> Namespace:
        names = {n.split(".", 1)[1]: n for n in self._functions if n.startswith(prefix + ".")}
        return Namespace(prefix, {short: self._wrap(full, self._functions[full]) for short, full in names.items()},
                         self.touched)  # fmt: skip

    def _wrap(self, name: str, rule: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            site = call_site()
            self.depth += 1
            try:
                out = rule(name, *args, **kwargs) if rule.__name__.startswith("_") else rule(*args, **kwargs)
            finally:
                self.depth -= 1
            for t in _tensors_in(out):
                self.tensors[t.id] = t.spec()
            self.calls.append({"fn": name, "args": [self.encode(a) for a in args],
                               "kwargs": {k: self.encode(v) for k, v in kwargs.items()}, "out": self.encode(out),
                               "site": site})  # fmt: skip
            return out

        call.__name__ = name
        return call

    # ------------------------------------------------------------------------------------------------ encoding
    def encode(self, v: Any) -> Any:
        """A JSON value the replay can turn back into the argument."""
        if isinstance(v, FakeTensor):
            return {"t": v.id}
        if isinstance(v, Enum):
            return {"e": v.path}
        if isinstance(v, MemoryConfig):
            return {"e": v.path}
        if isinstance(v, FakeDevice):
            return {"device": 0}
        if isinstance(v, Opaque):
            return {"o": v.id}
        if isinstance(v, Shape):
            return {"list": list(v)}
        if isinstance(v, np.ndarray):
            return {"nd": {"shape": list(v.shape), "dtype": v.dtype.str}}
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, list | tuple):
            return {type(v).__name__ if type(v) in (list, tuple) else "list": [self.encode(x) for x in v]}
        if isinstance(v, dict):
            return {"dict": {str(k): self.encode(x) for k, x in v.items()}}
        if v is None or isinstance(v, bool | int | float | str):
            return v
        raise FakeError(f"cannot record an argument of type {type(v).__name__}: {v!r}")

    # ---------------------------------------------------------------------------------------------- helpers
    def _out(self, like: FakeTensor, shape: Sequence[int] | None = None, dtype: Enum | None = None,
             layout: Enum | None = None, memory_config: MemoryConfig | None = None,
             keep_values: bool = False) -> FakeTensor:  # fmt: skip
        return FakeTensor(self, like.shape if shape is None else shape, dtype or like.dtype, layout or like.layout,
                          memory_config.buffer if memory_config else like.memory, like.device(),
                          like.values if keep_values else None)  # fmt: skip

    @staticmethod
    def _tensor_args(args: Sequence[Any]) -> list[FakeTensor]:
        return [a for a in args if isinstance(a, FakeTensor)]

    def _first(self, name: str, args: Sequence[Any]) -> FakeTensor:
        ts = self._tensor_args(args)
        if not ts:
            raise FakeError(f"ttnn.{name} got no tensor")
        return ts[0]

    # ----------------------------------------------------------------------------------------- generic rules
    def _unary(self, name: str, x: FakeTensor, *args: Any, dtype: Enum | None = None,
               memory_config: MemoryConfig | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        if not isinstance(x, FakeTensor):
            raise FakeError(f"ttnn.{name} takes a tensor first, got {x!r}")
        if name == "clamp" and x.dtype in INTEGER:
            dtype = dtype or DataType.FLOAT32
        return self._out(x, dtype=dtype, layout=TILE_LAYOUT, memory_config=memory_config)

    def _binary(self, name: str, *args: Any, dtype: Enum | None = None, memory_config: MemoryConfig | None = None,
                **kwargs: Any) -> FakeTensor:  # fmt: skip
        ts = self._tensor_args(args)
        if not ts:
            raise FakeError(f"ttnn.{name} got no tensor operand")
        shape = broadcast(*(t.shape for t in ts))
        first = ts[0] if name != "where" or len(ts) == 1 else ts[1]
        if name == "divide" and first.dtype in INTEGER and kwargs.get("rounding_mode") is None:
            dtype = dtype or DataType.FLOAT32
        if name == "isclose" and first.dtype in INTEGER:  # TT-NN compares integers as float32
            dtype = dtype or DataType.FLOAT32
        if name == "where" and len(ts) == 1 and first.dtype in INTEGER:  # two scalar values: float32 out
            dtype = dtype or DataType.FLOAT32
        return self._out(first, shape, dtype=dtype, layout=TILE_LAYOUT, memory_config=memory_config)

    def _backward(self, name: str, grad: FakeTensor, x: FakeTensor, *args: Any, **kwargs: Any) -> list[FakeTensor]:
        return [self._out(x, layout=TILE_LAYOUT)]

    def _reduce(self, name: str, x: FakeTensor, dim: Any = None, keepdim: bool = False, *args: Any,
                memory_config: MemoryConfig | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(x, _reduced(_dims(x), dim, keepdim), layout=TILE_LAYOUT, memory_config=memory_config)

    # ------------------------------------------------------------------------------------------ named rules
    def op_typecast(self, x: FakeTensor, dtype: Enum, **kwargs: Any) -> FakeTensor:
        if dtype in BLOCK and x.layout != TILE_LAYOUT:
            raise FakeError(f"typecast to {dtype} needs a tile-layout tensor")
        return self._out(x, dtype=dtype, keep_values=True)

    def op_to_layout(self, x: FakeTensor, layout: Enum, dtype: Enum | None = None, memory_config: Any = None,
                     **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(x, layout=layout, dtype=dtype, memory_config=memory_config, keep_values=True)

    def op_to_memory_config(self, x: FakeTensor, memory_config: MemoryConfig, dtype: Enum | None = None,
                            **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(x, dtype=dtype, memory_config=memory_config)

    def op_bitcast(self, x: FakeTensor, dtype: Enum, **kwargs: Any) -> FakeTensor:
        return self._out(x, dtype=dtype)

    def op_clone(self, x: FakeTensor, dtype: Enum | None = None, memory_config: Any = None, **kw: Any) -> FakeTensor:
        return self._out(x, dtype=dtype, memory_config=memory_config)

    def op_full_like(self, tensor: FakeTensor, fill_value: Any = 0, dtype: Enum | None = None, layout: Any = None,
                     **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(tensor, dtype=dtype, layout=layout)

    def op_zeros_like(self, tensor: FakeTensor, dtype: Enum | None = None, layout: Any = None, **kw: Any) -> FakeTensor:
        return self._out(tensor, dtype=dtype, layout=layout)

    op_ones_like = op_zeros_like

    def op_reshape(self, x: FakeTensor, shape: Sequence[int], *args: Any, **kwargs: Any) -> FakeTensor:
        out = self._out(x, _reshape(_dims(x), list(shape)))
        out.values = None if x.values is None else np.asarray(x.values).reshape(list(out.shape))
        return out

    def op_permute(self, x: FakeTensor, dims: Sequence[int], *args: Any, **kwargs: Any) -> FakeTensor:
        shape = _dims(x)
        dims = [_norm(d, len(shape)) for d in dims]
        if sorted(dims) != list(range(len(shape))):
            raise FakeError(f"permute dims {dims} are not a permutation of rank {len(shape)}")
        return self._out(x, [shape[d] for d in dims])

    def op_unsqueeze(self, x: FakeTensor, dim: int, **kwargs: Any) -> FakeTensor:
        shape = _dims(x)
        d = dim % (len(shape) + 1)
        return self._out(x, [*shape[:d], 1, *shape[d:]])

    def op_slice(self, x: FakeTensor, starts: Sequence[int], ends: Sequence[int], steps: Sequence[int] | None = None,
                 **kwargs: Any) -> FakeTensor:  # fmt: skip
        shape = _dims(x)
        steps = list(steps) if steps is not None else [1] * len(shape)
        if not len(starts) == len(ends) == len(steps) == len(shape):
            raise FakeError(f"slice of a rank-{len(shape)} tensor with {len(starts)} starts, {len(ends)} ends")
        out = [max(0, -(-(min(e, n) - s) // st)) for s, e, st, n in zip(starts, ends, steps, shape)]
        return self._out(x, out)

    def op_concat(self, tensors: Sequence[FakeTensor], dim: int = 0, **kwargs: Any) -> FakeTensor:
        shapes = [_dims(t) for t in tensors]
        d = _norm(dim, len(shapes[0]))
        out = list(shapes[0])
        out[d] = sum(s[d] for s in shapes)
        return self._out(tensors[0], out)

    def op_stack(self, tensors: Sequence[FakeTensor], dim: int, **kwargs: Any) -> FakeTensor:
        shape = _dims(tensors[0])
        d = dim % (len(shape) + 1)
        return self._out(tensors[0], [*shape[:d], len(tensors), *shape[d:]])

    def op_pad(self, x: FakeTensor, padding: Sequence[Sequence[int]], value: float, **kwargs: Any) -> FakeTensor:
        shape = _dims(x)
        pads = [tuple(p) for p in padding]
        pads = [(0, 0)] * (len(shape) - len(pads)) + pads
        return self._out(x, [n + lo + hi for n, (lo, hi) in zip(shape, pads)])

    def op_expand(self, x: FakeTensor, shape: Sequence[int], **kwargs: Any) -> FakeTensor:
        src = [1] * (len(shape) - len(x.shape)) + _dims(x)
        return self._out(x, [s if n == -1 else n for s, n in zip(src, shape)])

    def op_repeat(self, x: FakeTensor, repeats: Sequence[int], **kwargs: Any) -> FakeTensor:
        return self._out(x, [n * r for n, r in zip(_dims(x), repeats)])

    def op_repeat_interleave(self, x: FakeTensor, repeats: int, dim: int, **kwargs: Any) -> FakeTensor:
        shape = _dims(x)
        d = _norm(dim, len(shape))
        shape[d] *= int(repeats)
        return self._out(x, shape)

    def op_gather(self, x: FakeTensor, dim: int, index: FakeTensor, **kwargs: Any) -> FakeTensor:
        return self._out(x, _dims(index))

    def op_scatter(self, x: FakeTensor, dim: int, index: FakeTensor, src: Any, **kwargs: Any) -> FakeTensor:
        return self._out(x)

    def op_sort(self, x: FakeTensor, dim: int = -1, descending: bool = False, stable: bool = False,
                **kwargs: Any) -> list[FakeTensor]:  # fmt: skip
        return [self._out(x), self._out(x, dtype=_index_dtype(x))]

    def op_topk(self, x: FakeTensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True,
                **kwargs: Any) -> list[FakeTensor]:  # fmt: skip
        shape = _dims(x)
        shape[_norm(dim, len(shape))] = int(k)
        return [self._out(x, shape), self._out(x, shape, dtype=_index_dtype(x))]

    def op_argmax(self, x: FakeTensor, dim: int | None = None, keepdim: bool = False, **kw: Any) -> FakeTensor:
        return self._out(x, _reduced(_dims(x), dim, keepdim), dtype=DataType.UINT32, layout=ROW_MAJOR_LAYOUT)

    def op_moreh_norm(self, x: FakeTensor, p: float = 2.0, dim: Any = None, keepdim: bool = False,
                      **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(x, _reduced(_dims(x), dim, keepdim))

    # matmuls
    def op_matmul(self, a: FakeTensor, b: FakeTensor, transpose_a: bool = False, transpose_b: bool = False,
                  dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        sa, sb = _dims(a), _dims(b)
        if len(sa) == 1:
            sa = [1, *sa]
        if len(sb) == 1:
            sb = [*sb, 1]
        if transpose_a:
            sa[-2:] = sa[-1], sa[-2]
        if transpose_b:
            sb[-2:] = sb[-1], sb[-2]
        if sa[-1] != sb[-2]:
            raise FakeError(f"matmul of {sa} and {sb}: inner dims differ")
        out = [*broadcast(sa[:-2], sb[:-2]), sa[-2], sb[-1]]
        if len(a.shape) == 1:
            out.pop(-2)
        if len(b.shape) == 1:
            out.pop(-1)
        return self._out(a, out, dtype=dtype)

    def op_linear(self, a: FakeTensor, b: FakeTensor, bias: Any = None, transpose_a: bool = False,
                  transpose_b: bool = False, dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self.op_matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, dtype=dtype)

    def op_addmm(self, bias: FakeTensor, a: FakeTensor, b: FakeTensor, alpha: float = 1.0, beta: float = 1.0,
                 dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self.op_matmul(a, b, dtype=dtype)

    def op_outer(self, a: FakeTensor, b: FakeTensor, **kwargs: Any) -> FakeTensor:
        return self._out(a, [math.prod(_dims(a)), math.prod(_dims(b))])

    # softmax, norms
    def op_moreh_softmax_backward(self, y: FakeTensor, grad: FakeTensor, dim: int, **kw: Any) -> FakeTensor:
        return self._out(grad)

    op_moreh_logsoftmax_backward = op_moreh_softmax_backward

    def op_moreh_group_norm(self, x: FakeTensor, num_groups: int, eps: float = 1e-5, gamma: Any = None,
                            beta: Any = None, are_required_outputs: Sequence[bool] = (True, False, False),
                            **kwargs: Any) -> list[FakeTensor | None]:  # fmt: skip
        n = _dims(x)[0]
        stat = [1, 1, n, int(num_groups)]
        outs = [self._out(x), self._out(x, stat), self._out(x, stat)]
        return [o if need else None for o, need in zip(outs, are_required_outputs)]

    def op_moreh_group_norm_backward(self, g: FakeTensor, x: FakeTensor, mean: FakeTensor, rstd: FakeTensor,
                                     num_groups: int, are_required_outputs: Sequence[bool] = (True, False, False),
                                     gamma: Any = None, **kwargs: Any) -> list[FakeTensor | None]:  # fmt: skip
        c = _dims(x)[1]
        outs = [self._out(x), self._out(x, [1, 1, 1, c]), self._out(x, [1, 1, 1, c])]
        return [o if need else None for o, need in zip(outs, are_required_outputs)]

    def op_moreh_layer_norm_backward(self, g: FakeTensor, x: FakeTensor, mean: FakeTensor, rstd: FakeTensor,
                                     normalized_dims: int, gamma: Any = None, input_grad: Any = None,
                                     gamma_grad: Any = None, beta_grad: Any = None,
                                     **kwargs: Any) -> list[Any]:  # fmt: skip
        return [input_grad, gamma_grad, beta_grad]

    # convolution and pooling (TT-NN returns [1, 1, N*H*W, C])
    def op_conv2d(self, *, input_tensor: FakeTensor, weight_tensor: FakeTensor, device: Any, in_channels: int,
                  out_channels: int, batch_size: int, input_height: int, input_width: int, kernel_size: Sequence[int],
                  stride: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0), dilation: Sequence[int] = (1, 1),
                  groups: int = 1, dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        pads = list(padding)
        pad_h, pad_w = (pads[0] + pads[1], pads[2] + pads[3]) if len(pads) == 4 else (2 * pads[0], 2 * pads[1])
        ho = _conv_out(input_height, kernel_size[0], stride[0], pad_h, dilation[0])
        wo = _conv_out(input_width, kernel_size[1], stride[1], pad_w, dilation[1])
        return self._out(input_tensor, [1, 1, batch_size * ho * wo, out_channels], dtype=dtype, layout=TILE_LAYOUT)

    def op_conv_transpose2d(self, *, input_tensor: FakeTensor, weight_tensor: FakeTensor, device: Any,
                            in_channels: int, out_channels: int, batch_size: int, input_height: int, input_width: int,
                            kernel_size: Sequence[int], stride: Sequence[int] = (1, 1),
                            padding: Sequence[int] = (0, 0), output_padding: Sequence[int] = (0, 0),
                            dilation: Sequence[int] = (1, 1), groups: int = 1, dtype: Enum | None = None,
                            **kwargs: Any) -> FakeTensor:  # fmt: skip
        ho, wo = ((n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
                  zip((input_height, input_width), stride, padding, dilation, kernel_size, output_padding))  # fmt: skip
        return self._out(input_tensor, [1, 1, batch_size * ho * wo, out_channels], dtype=dtype, layout=TILE_LAYOUT)

    def op_experimental__prepare_conv3d_weights(self, *, weight_tensor: FakeTensor, groups: int = 1,
                                                device: Any = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        o, i, kd, kh, kw = _dims(weight_tensor)
        align = int(kwargs.get("alignment", 32))
        block = int(kwargs.get("C_in_block", 0)) or i
        rows = kd * kh * kw * max(-(-i // align) * align, block)
        return FakeTensor(self, [rows, o], weight_tensor.dtype, ROW_MAJOR_LAYOUT, "DRAM", self.device)

    def op_experimental__conv3d(self, *, input_tensor: FakeTensor, output_channels: int, kernel_size: Sequence[int],
                                stride: Sequence[int] = (1, 1, 1), padding: Sequence[int] = (0, 0, 0),
                                dilation: Sequence[int] = (1, 1, 1), dtype: Enum | None = None,
                                **kwargs: Any) -> FakeTensor:  # fmt: skip
        n, d, h, w, _ = _dims(input_tensor)
        out = [_conv_out(s, k, st, 2 * p, dl) for s, k, st, p, dl in zip((d, h, w), kernel_size, stride, padding,
                                                                            dilation)]  # fmt: skip
        return self._out(input_tensor, [n, *out, output_channels], dtype=dtype, layout=ROW_MAJOR_LAYOUT)

    def _pool(self, x: FakeTensor, n: int, h: int, w: int, c: int, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], ceil: bool,
              dtype: Enum | None) -> FakeTensor:  # fmt: skip
        ho, wo = (_pool_out(s, k, st, p, d, ceil) for s, k, st, p, d in zip((h, w), kernel, stride, padding,
                                                                             dilation))  # fmt: skip
        return FakeTensor(self, [1, 1, n * ho * wo, c], dtype or x.dtype, ROW_MAJOR_LAYOUT, "L1", x.device())

    def op_max_pool2d(self, x: FakeTensor, n: int, h: int, w: int, c: int, kernel_size: Sequence[int],
                      stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool = False,
                      return_indices: bool = False, dtype: Enum | None = None, **kwargs: Any) -> Any:  # fmt: skip
        out = self._pool(x, n, h, w, c, kernel_size, stride, padding, dilation, ceil_mode, dtype)
        return [out, self._out(out, dtype=DataType.UINT16)] if return_indices else out

    def op_avg_pool2d(self, x: FakeTensor, n: int, h: int, w: int, c: int, kernel_size: Sequence[int],
                      stride: Sequence[int], padding: Sequence[int], ceil_mode: bool = False, *args: Any,
                      dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._pool(x, n, h, w, c, kernel_size, stride, padding, (1, 1), ceil_mode, dtype)

    def op_adaptive_avg_pool2d(self, x: FakeTensor, n: int, h: int, w: int, c: int, output_size: Sequence[int],
                               **kwargs: Any) -> FakeTensor:  # fmt: skip
        return FakeTensor(self, [1, 1, n * output_size[0] * output_size[1], c], x.dtype, ROW_MAJOR_LAYOUT, "L1",
                          x.device())  # fmt: skip

    op_adaptive_max_pool2d = op_adaptive_avg_pool2d

    # attention, rotary, embedding
    def op_transformer__scaled_dot_product_attention(self, q: FakeTensor, k: FakeTensor, v: FakeTensor,
                                                     **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(q, [*_dims(q)[:-1], _dims(v)[-1]])

    def op_experimental__rotary_embedding_hf(self, x: FakeTensor, *args: Any, **kwargs: Any) -> FakeTensor:
        return self._out(x)

    op_experimental__rotary_embedding_llama = op_experimental__rotary_embedding_hf

    def op_embedding(self, indices: FakeTensor, weight: FakeTensor, *, layout: Enum | None = None,
                     dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(weight, [*_dims(indices), _dims(weight)[-1]], dtype=dtype, layout=layout or ROW_MAJOR_LAYOUT)

    def op_embedding_bw(self, indices: FakeTensor, weight: FakeTensor, grad: FakeTensor, dtype: Enum | None = None,
                        **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._out(grad, [1, 1, *_dims(weight)[-2:]], dtype=dtype)

    # random
    def _random(self, shape: Sequence[int], device: Any, dtype: Enum, layout: Enum) -> FakeTensor:
        return FakeTensor(self, list(shape), dtype, layout, "DRAM", device)

    def op_rand(self, shape: Sequence[int], device: Any = None, *, dtype: Enum = DataType.BFLOAT16,
                layout: Enum = TILE_LAYOUT, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._random(shape, device, dtype, layout)

    def op_randn(self, shape: Sequence[int], device: Any = None, *, dtype: Enum = DataType.BFLOAT16,
                 layout: Enum = TILE_LAYOUT, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return self._random(shape, device, dtype, layout)

    def op_bernoulli(self, x: FakeTensor, seed: int = 0, dtype: Enum | None = None, **kwargs: Any) -> FakeTensor:
        return self._out(x, dtype=dtype)

    def op_experimental__dropout(self, x: FakeTensor, **kwargs: Any) -> FakeTensor:
        return self._out(x)

    # creation and transfers
    def op_full(self, shape: Sequence[int], fill_value: Any, dtype: Enum = DataType.BFLOAT16,
                layout: Enum = ROW_MAJOR_LAYOUT, device: Any = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return FakeTensor(self, list(shape), dtype, layout, "DRAM", device)

    def op_zeros(self, shape: Sequence[int], dtype: Enum = DataType.BFLOAT16, layout: Enum = ROW_MAJOR_LAYOUT,
                 device: Any = None, **kwargs: Any) -> FakeTensor:  # fmt: skip
        return FakeTensor(self, list(shape), dtype, layout, "DRAM", device)

    op_ones = op_zeros

    def op_arange(self, start: int = 0, end: int = 0, step: int = 1, dtype: Enum = DataType.BFLOAT16,
                  device: Any = None, layout: Enum = ROW_MAJOR_LAYOUT, **kwargs: Any) -> FakeTensor:  # fmt: skip
        n = max(0, -(-(end - start) // step))
        return FakeTensor(self, [n], dtype, layout, "DRAM", device)

    def op_Tensor(self, tensor: np.ndarray | None = None, data_type: Enum | None = None, device: Any = None,
                  layout: Enum = ROW_MAJOR_LAYOUT, *args: Any, **kwargs: Any) -> FakeTensor:  # fmt: skip
        arr = np.asarray(tensor)
        return FakeTensor(self, list(arr.shape), data_type or DataType.FLOAT32, layout, "DRAM", device)

    def op_to_device(self, x: FakeTensor, device: Any, memory_config: MemoryConfig | None = None,
                     **kwargs: Any) -> FakeTensor:  # fmt: skip
        return FakeTensor(self, list(x.shape), x.dtype, x.layout, memory_config.buffer if memory_config else "DRAM",
                          device)  # fmt: skip

    def op_from_device(self, x: FakeTensor, blocking: bool = True, **kwargs: Any) -> FakeTensor:
        return FakeTensor(self, list(x.shape), x.dtype, x.layout, "DRAM", None, x.values)

    def op_to_torch(self, x: FakeTensor, **kwargs: Any) -> np.ndarray:
        if x.values is not None:
            return np.array(x.values)
        return np.zeros(list(x.shape), np.float32)

    def op_GetDefaultDevice(self) -> FakeDevice:
        return self.device

    def op_init_device_compute_kernel_config(self, arch: Enum, *args: Any, **kwargs: Any) -> Opaque:
        return Opaque(self, "init_device_compute_kernel_config")

    def op_Conv2dConfig(self, *args: Any, **kwargs: Any) -> Opaque:
        return Opaque(self, "Conv2dConfig")

    op_Conv3dConfig = op_Conv2dConfig


def _index_dtype(x: FakeTensor) -> Enum:
    """The dtype of the indices TT-NN's sort and topk return: uint16 for bfloat16 values, else uint32."""
    return DataType.UINT16 if x.dtype == DataType.BFLOAT16 else DataType.UINT32


def _tensors_in(v: Any) -> list[FakeTensor]:
    if isinstance(v, FakeTensor):
        return [v]
    if isinstance(v, list | tuple):
        return [t for x in v for t in _tensors_in(x)]
    return []


_POSITIONS: dict[Any, list] = {}


def call_site() -> str:
    """``file:line:end_line:end_col`` of the innermost frame in ``kohakutt/kernels`` that led here: the position of
    the op library's call expression (its end tells apart calls nested on one line)."""
    f = sys._getframe(1)
    while f is not None:
        path = Path(f.f_code.co_filename)
        if path.is_relative_to(KERNELS):
            positions = _POSITIONS.get(f.f_code)
            if positions is None:
                positions = _POSITIONS[f.f_code] = list(f.f_code.co_positions())
            line, end_line, _, end_col = positions[f.f_lasti // 2]
            return f"{path.relative_to(KERNELS.parents[1]).as_posix()}:{line}:{end_line}:{end_col}"
        f = f.f_back
    return "?"


def names_used(fake: FakeTTNN, module_file: str) -> set[str]:
    """The ``ttnn`` names (as ``TTNN_NAMES`` spells them) the code of ``kohakutt/kernels/<module_file>`` read
    since :meth:`FakeTTNN.start`: functions, constants and enum members."""
    return {name for name, site in fake.touched if site.split(":", 1)[0].endswith("/" + module_file)}


def run_ttnn(fake: FakeTTNN, op: str, shapes: Sequence[Any], attrs: dict[str, Any] | None = None,
             numerics: Any = None, dtype: str = "bfloat16", values: dict[int, Any] | None = None) -> Any:  # fmt: skip
    """Run op ``op``'s TT-NN implementation through ``card_call`` on fake tensors of ``shapes`` (a number for a
    scalar operand; ``values`` gives some inputs' values): its result."""
    from kohakutt.ir import ops as irops
    from kohakutt.ir.dtypes import DType
    from kohakutt.ir.numerics import Numerics
    from kohakutt.ir.ops import ScalarSpec, TensorSpec
    from kohakutt.kernels import registry
    from kohakutt.kernels.ttnn_io import STORED, card_call

    d = irops.get(op)
    bound = d.bind_attrs(attrs or {})
    values = values or {}
    specs = [ScalarSpec(s) if isinstance(s, int | float) else
             TensorSpec(tuple(s), DType.INT32 if i in values else DType(dtype))
             for i, s in enumerate(shapes)]  # fmt: skip
    inputs = [s.value if isinstance(s, ScalarSpec) else
              fake.leaf(s.shape, getattr(DataType, STORED[s.dtype].upper()), Layout.ROW_MAJOR,
                        np.asarray(values[i]) if i in values else None) for i, s in enumerate(specs)]  # fmt: skip
    impl = registry.lookup(op, "ttnn", "ttnn")
    return card_call(impl, fake, inputs, specs, bound, numerics or Numerics(), d.infer(specs, bound))
