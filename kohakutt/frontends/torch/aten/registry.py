"""The table of aten kernels for ``tt``, and the generic machinery most of them share.

A kernel is registered for one or more aten overloads with :func:`kernel` (a plain function with the overload's
signature) or :func:`computed` (an ``impl(args, outs)`` that writes its results into tensors the machinery made:
the functional, ``.out`` and in-place forms of an op then share one implementation). Output sizes, strides and
dtypes come from PyTorch's own meta kernels, so type promotion, broadcasting and error messages are PyTorch's;
outputs exist before the work is queued, and the call returns at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import torch
from kohakutt import kernels as kk
from kohakutt.frontends.torch import precision, runtime, tensors
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import ScalarSpec, Spec, TensorSpec
from kohakutt.kernels.tensor import DeviceTensor

aten = torch.ops.aten


@dataclass
class AtenKernel:
    """One aten overload's tt implementation: ``kind`` is "kernel" (runs IR ops), "view" (metadata only) or
    "composite" (a decomposition into other aten ops, which run on tt)."""

    name: str
    fn: Callable[..., Any]
    kind: str = "kernel"
    ir: tuple[str, ...] = ()
    note: str = ""
    dispatch_key: str = "PrivateUse1"  # "AutogradPrivateUse1" for ops whose autograd the device defines itself


KERNELS: dict[str, AtenKernel] = {}


def overload(name: str) -> torch._ops.OpOverload:
    """``"add.Tensor"`` -> ``torch.ops.aten.add.Tensor`` (``"relu"`` means the default overload)."""
    packet, _, ov = name.partition(".")
    return getattr(getattr(aten, packet), ov or "default")


def kernel(
    *names: str, kind: str = "kernel", ir: Sequence[str] = (), note: str = "", dispatch_key: str = "PrivateUse1"
) -> Callable:
    """Register ``fn`` (with the overloads' own signature) for each of ``names`` (under ``dispatch_key``; table
    entries for other keys than PrivateUse1 are named ``"<overload>@<key>"``)."""

    def deco(fn: Callable) -> Callable:
        for n in names:
            key = n if dispatch_key == "PrivateUse1" else f"{n}@{dispatch_key}"
            KERNELS[key] = AtenKernel(n, fn, kind, tuple(ir), note, dispatch_key)
        return fn

    return deco


class Args(dict):
    """An overload's arguments by schema name (``a.self``, ``a.other``, ...)."""

    __getattr__ = dict.__getitem__


@dataclass
class _Binder:
    op: torch._ops.OpOverload
    names: list[str] = field(default_factory=list)
    defaults: list[Any] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    inplace: bool = False
    out: bool = False

    @classmethod
    def of(cls, op: torch._ops.OpOverload) -> _Binder:
        b = cls(op)
        for a in op._schema.arguments:
            b.names.append(a.name)
            b.defaults.append(a.default_value if a.has_default_value() else None)
            if a.alias_info is not None and a.alias_info.is_write:
                b.writes.append(a.name)
        b.inplace = op._schema.name.endswith("_") and "self" in b.writes
        b.out = bool(b.writes) and not b.inplace
        return b

    def bind(self, args: tuple, kwargs: dict) -> Args:
        a = Args(zip(self.names, self.defaults))
        a.update(zip(self.names, args))
        if kwargs:
            a.update(kwargs)
        return a


def _same_device_error(devs: Iterable[str]) -> RuntimeError:
    a, b = sorted(set(devs))[:2]
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def to_meta(x: Any, found: set[str]) -> Any:
    """``x`` with tt tensors replaced by meta tensors of the same sizes, strides and dtype (0-dim CPU tensors stay)."""
    if isinstance(x, torch.Tensor):
        if x.device.type == "tt":
            found.add(str(x.device))
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        if x.device.type != "meta" and x.dim() != 0:
            found.add(str(x.device))
        return x
    if isinstance(x, list | tuple):
        return type(x)(to_meta(y, found) for y in x)
    if isinstance(x, torch.Generator):
        return None  # a generator shapes no output (and meta references refuse one)
    return x


_FAKE = threading.local()  # a fake-tensor mode per thread, made on first use


def shape_function(op: Any, args: tuple, kwargs: dict, margs: tuple, mkw: dict) -> Any:
    """``op``'s outputs for tt arguments ``args`` / ``kwargs`` as ``torch.compile`` sees them: PyTorch's shape
    functions run on fake tensors of the tt device, since some depend on the device (on plain meta tensors they take
    CUDA's branch: channels-last padding, linear-algebra layouts). Where fake tensors cannot shape the call, the meta
    stand-ins ``margs`` / ``mkw`` (:func:`to_meta`) do."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    mode = getattr(_FAKE, "mode", None)
    if mode is None:
        mode = _FAKE.mode = FakeTensorMode(allow_non_fake_inputs=True, allow_fallback_kernels=False)

    def conv(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.device.type != "tt":
                return x  # 0-dim CPU tensors: the mode takes them as they are
            return FakeTensor(mode, torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta"), x.device)
        if isinstance(x, list | tuple):
            return type(x)(conv(y) for y in x)
        return None if isinstance(x, torch.Generator) else x

    try:
        fargs, fkw = conv(args), {k: conv(v) for k, v in kwargs.items()}
        with mode:
            return op(*fargs, **fkw)
    except Exception:  # the meta kernels decide, and raise the user's error if there is one
        return op(*margs, **mkw)


# Output metadata by call signature: PyTorch's meta kernels (often Python references) cost more than the rest of
# queueing an op, and outputs depend only on sizes, strides, dtypes, devices and the non-tensor arguments.
_META_CACHE: dict[tuple, tuple[int, list[torch.Tensor], list[tuple]]] = {}
META_CACHE_SIZE = 8192
_Tensor = torch.Tensor


def _sig(x: Any) -> Any:
    if isinstance(x, _Tensor):
        return (x.device, x.dtype, x.shape, x.stride())
    t = type(x)
    if t is list or t is tuple:
        return (t, *[_sig(y) for y in x])
    if t is bool or t is int or t is float or t is complex:
        return (t, x)
    return x


def meta_key(op: Any, args: tuple, kwargs: dict) -> tuple | None:
    """A hashable signature of a call for the output-metadata cache, or None when it has none."""
    key = (
        (op, *[_sig(x) for x in args], *[(k, _sig(v)) for k, v in kwargs.items()])
        if kwargs
        else (op, *[_sig(x) for x in args])
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _cached_meta(key: tuple | None) -> Any:
    """The output-metadata cache's entry for ``key`` (None when absent); ``key`` may still be unhashable."""
    if key is None:
        return None
    try:
        return _META_CACHE.get(key)
    except TypeError:
        return None


def _output(meta: torch.Tensor) -> tuple:
    """How to make a tt tensor like ``meta``: the arguments of :func:`tensors.new_storage` but the device index."""
    size, stride = [int(s) for s in meta.shape], [int(s) for s in meta.stride()]
    return len(size), runtime.dims(size, stride), meta.dtype, tensors.nbytes_of(size, stride, meta.dtype)


def device_index(found: set[str]) -> int:
    tt = [d for d in found if d.startswith("tt")]
    if len(found) > 1:
        raise _same_device_error(found)
    return int(tt[0].partition(":")[2] or 0) if tt else torch.tt.current_device()


def resize_out(out: torch.Tensor, meta: torch.Tensor) -> None:
    if out.shape != meta.shape:
        if out.numel() != 0:
            import warnings

            warnings.warn(
                f"An output with one or more elements was resized since it had shape {tuple(out.shape)}, "
                f"which does not match the required output shape {tuple(meta.shape)}.",
                stacklevel=4,
            )
        out.resize_(meta.shape)
        if meta.dim() and meta.stride() != out.stride() and not meta.is_contiguous():
            out.as_strided_(meta.shape, meta.stride())


def computed(*names: str, ir: Sequence[str] = (), note: str = "") -> Callable:
    """Register ``impl(args, outs)`` for the functional, ``.out`` and in-place overloads in ``names``."""

    def deco(impl: Callable[[Args, list[torch.Tensor]], None]) -> Callable:
        for n in names:
            KERNELS[n] = AtenKernel(n, _generic(n, impl), "kernel", tuple(ir), note)
        return impl

    return deco


def _generic(name: str, impl: Callable[[Args, list[torch.Tensor]], None]) -> Callable:
    op = overload(name)
    b = _Binder.of(op)
    single = len(op._schema.returns) == 1
    defaults = dict(zip(b.names, b.defaults))
    names = b.names

    def run(*args: Any, **kwargs: Any) -> Any:
        key = (
            (name, *[_sig(x) for x in args], *[(k, _sig(v)) for k, v in kwargs.items()])
            if kwargs
            else (name, *[_sig(x) for x in args])
        )
        hit = _cached_meta(key)
        if hit is None:
            found: set[str] = set()
            margs, mkw = to_meta(args, found), {k: to_meta(v, found) for k, v in kwargs.items()}
            index = device_index(found)
            meta = shape_function(op, args, kwargs, margs, mkw)
            metas = [meta] if isinstance(meta, torch.Tensor) else list(meta)
            made = [_output(m) for m in metas] if not (b.inplace or b.out) else []
            if meta_key(name, args, kwargs) is not None:  # hashable
                while len(_META_CACHE) >= META_CACHE_SIZE:
                    with suppress(KeyError, RuntimeError, StopIteration):  # another thread may evict the same one
                        del _META_CACHE[next(iter(_META_CACHE))]  # the oldest signature
                _META_CACHE[key] = (index, metas, made)
        else:
            index, metas, made = hit
        a = Args(defaults)
        a.update(zip(names, args))
        if kwargs:
            a.update(kwargs)
        a["_index"] = index
        if b.inplace:
            outs = [a["self"]]
            if metas[0].shape != outs[0].shape:  # the shape functions resize an empty self; the CPU refuses
                raise RuntimeError(
                    f"output with shape {list(outs[0].shape)} doesn't match the broadcast shape {list(metas[0].shape)}"
                )
        elif b.out:
            outs = [a[w] for w in b.writes]
            for o, m in zip(outs, metas):
                resize_out(o, m)
        else:
            outs = [tensors.new_storage(ndim, dims, dtype, nbytes, index) for ndim, dims, dtype, nbytes in made]
        impl(a, outs)
        if b.inplace:
            return outs[0]
        return outs[0] if single else tuple(outs)

    run.__name__ = f"tt_{name.replace('.', '_')}"
    return run


# ---------------------------------------------------------------------------------------------------- IR calls
def operand(x: Any, dev_index: int, compute: torch.dtype | None = None) -> Any:
    """A kernel operand: tt tensors as device tensors (cast to ``compute`` on the device when it differs), CPU 0-dim
    tensors and numbers as Python scalars."""
    return _operand(x, dev_index, compute, None)[0]


def _operand(x: Any, dev_index: int, compute: torch.dtype | None, stream: Any) -> tuple[Any, bool]:
    """:func:`operand`, and whether it is a cast made here (scratch for the caller to free)."""
    if isinstance(x, _Tensor):
        if not x.is_cpu:
            t = tensors.tt_view(x)
            if t is None and x.device.type == "tt":
                t = tensors.to_device_tensor(x)  # the rare cases: zero bytes, a closed device (raises)
            if t is not None:
                if compute is not None and x.dtype != compute:
                    c = cast(t, compute, dev_index, stream)
                    return c, c is not t
                return t, False
        if x.dim() == 0:
            v = x.item()
            if compute is not None:
                v = float(v) if compute.is_floating_point else (bool(v) if compute is torch.bool else int(v))
            return v, False
        raise _same_device_error({f"tt:{dev_index}", str(x.device)})
    return x, False


def cast(t: DeviceTensor, dtype: torch.dtype, dev_index: int, stream: Any = None) -> DeviceTensor:
    ir = tensors.check_dtype(dtype)
    if t.dtype is ir:
        return t
    return kk.run("typecast", [t], {"dtype": ir.value}, stream=stream or runtime.current_stream(dev_index))[0]


def ir(
    op: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any] | None,
    outs: Sequence[torch.Tensor] | None,
    index: int,
    compute: torch.dtype | None = None,
    provider: str | None = None,
) -> list[DeviceTensor]:
    """Queue IR op ``op`` on ``tt:<index>``: the one way the torch frontend queues an op. Operands as
    :func:`operand` makes them; results go into ``outs`` (tt tensors, cast to their dtypes; nothing is queued when
    every one is empty) or new device tensors. ``provider`` asks for one provider's kernel (the op library picks
    otherwise)."""
    dev = runtime.device(index)
    stream = runtime.current_stream(index)
    ops, scratch = [], []
    for x in inputs:
        v, made = _operand(x, index, compute, stream)
        ops.append(v)
        if made:
            scratch.append(v)
    result = None
    if outs is None:
        out = None
    else:
        out = [tensors.tt_view(o) or tensors.to_device_tensor(o) for o in outs]
        if all(0 in o.spec.shape for o in out):
            result = out  # nothing to compute into empty outputs
    if out is None or result is not out:
        result = kk.run(op, ops, attrs, out=out, device=dev, stream=stream, provider=provider,
                        defaults=precision.defaults())  # fmt: skip
    for t in scratch:  # the casts made above are freed once the op has read them
        dev.free(t.buffer, stream)
    return result


def ir_tensors(
    op: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any] | None,
    outs: Sequence[torch.Tensor] | None,
    index: int,
    provider: str | None = None,
) -> list[torch.Tensor]:
    """:func:`ir` with its results as tt tensors: ``outs``, or new ones of the shapes and dtypes the op infers."""
    if outs is None:
        d = irops.get(op)
        specs = d.infer([_spec(operand(x, index)) for x in inputs], d.bind_attrs(attrs))
        outs = [tensors.new(s.shape, None, _torch_dtype(s.dtype), index) for s in specs]
    ir(op, inputs, attrs, outs, index, provider=provider)
    return list(outs)


def _spec(x: Any) -> Spec:
    spec = getattr(x, "spec", None)  # a device tensor, or a mesh tensor (kohakutt.mesh)
    return spec if isinstance(spec, TensorSpec) else ScalarSpec(x)


def _torch_dtype(dt: DType) -> torch.dtype:
    return tensors.FROM_IR.get(dt, torch.bfloat16 if dt.is_float else torch.int32)


# ------------------------------------------------------------------------------------- helpers for the op modules
def scratch(shape: Sequence[int], dtype: torch.dtype, index: int) -> torch.Tensor:
    """A new contiguous tt tensor for intermediate results (torch owns it: freed, stream-ordered, when dropped)."""
    return tensors.new(list(shape), None, dtype, index)


def as_dtype(x: Any, dtype: torch.dtype) -> Any:
    """``x`` converted to ``dtype`` on its device (numbers and tensors already in ``dtype`` pass through)."""
    return x.to(dtype) if isinstance(x, torch.Tensor) and x.dtype != dtype else x


def index_of(*xs: Any) -> int:
    """The chip the tt tensors among ``xs`` live on (the same-device error of PyTorch when they disagree)."""
    found: set[str] = set()
    to_meta(list(xs), found)
    return device_index(found)


def composite(*names: str, ir_ops: Sequence[str] = ()) -> Callable:
    """:func:`computed` for an op written as other tt ops (marked "composite" in the kernel table)."""

    def deco(impl: Callable[[Args, list[torch.Tensor]], None]) -> Callable:
        computed(*names, ir=ir_ops)(impl)
        for n in names:
            KERNELS[n].kind = "composite"
        return impl

    return deco


def release(index: int, *scratch: DeviceTensor) -> None:
    """Free intermediate device tensors once the work queued so far (which reads them) is done."""
    dev, stream = runtime.device(index), runtime.current_stream(index)
    for t in scratch:
        dev.free(t.buffer, stream)


def wrap(t: DeviceTensor, index: int) -> torch.Tensor:
    """A new tt tensor holding a copy of device tensor ``t`` (for results the op library allocated)."""
    from kohakutt.frontends.torch.tensors import FROM_IR

    res = tensors.new(
        t.shape, None, FROM_IR.get(t.dtype, torch.float32) if t.dtype is not DType.INT64 else torch.int64, index
    )
    ir("copy", [t], None, [res], index)
    return res
