"""Running KTT programs: tile programs as IR ops through the op library, host programs through tinygrad's interpreter.

A :class:`TileRunner` is built once per program (tinygrad caches runtimes): static index arithmetic (the addresses a
reader kernel generates) is evaluated here on the host, affine loads and stores become strided views of the kernel's
buffers, the others gathers with an uploaded index list. Each call then queues the program's IR ops with
``kohakutt.kernels.run`` on the device's current stream and frees its intermediates after them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from kohakutt import config
from kohakutt import kernels as kk
from kohakutt.errors import BufferUseError
from kohakutt.frontends.tinygrad import counters as stats
from kohakutt.frontends.tinygrad.translate import Node, TileProgram, affine, evaluate_static
from kohakutt.hal.buffer import Buffer
from kohakutt.hal.device import Device
from kohakutt.ir.defs.matmul import split_counts
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.numerics import current as current_numerics
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.tensor import DeviceTensor, contiguous_strides

_DT = {
    "float32": DType.FLOAT32,
    "bfloat16": DType.BFLOAT16,
    "int32": DType.INT32,
    "bool": DType.BOOL,
    "index": DType.INT32,
}
_NP = {"float32": np.float32, "bfloat16": np.float32, "int32": np.int32, "bool": np.bool_, "index": np.int32}
_BY_TF32 = {False: Numerics(fp32_matmul="highest"), True: Numerics(fp32_matmul="high")}


def defaults() -> Numerics:
    """The numerics tinygrad's own settings ask of a kernel run now: its ``ALLOW_TF32`` (default 0) picks float32
    matmuls split into bf16 parts (float32 accuracy, ``fp32_matmul="highest"``) or on the card's TF32 operands
    (``"high"``); a ``kohakutt.numerics`` / ``kohakutt.tinygrad.numerics`` scope overrides it."""
    from tinygrad.helpers import ALLOW_TF32

    return _BY_TF32[bool(ALLOW_TF32.value)]


class KTTBuffer:
    """What the KTT allocator hands tinygrad: ``nbytes`` bytes of a hal buffer from byte ``offset``."""

    __slots__ = ("__weakref__", "buf", "keepalive", "nbytes", "offset", "owned")

    def __init__(self, buf: Buffer, offset: int, nbytes: int, owned: bool):
        self.buf, self.offset, self.nbytes, self.owned = buf, offset, nbytes, owned
        self.keepalive: object = None  # what owns the memory of a borrowed buffer (a torch tensor for from_blob)

    def view(self, nbytes: int, offset: int) -> KTTBuffer:
        return KTTBuffer(self.buf, self.offset + offset, nbytes, False)

    def __repr__(self) -> str:
        return f"KTTBuffer(hal buffer {self.buf.id}, offset={self.offset}, nbytes={self.nbytes})"


def _strides(t: DeviceTensor) -> tuple[int, ...]:
    return t.strides if t.strides is not None else contiguous_strides(t.shape)


def _view(t: DeviceTensor, shape: Sequence[int], strides: Sequence[int], offset: int | None = None) -> DeviceTensor:
    return DeviceTensor(
        t.buffer, TensorSpec(tuple(shape), t.dtype), tuple(strides), t.offset if offset is None else offset
    )


def _expand(t: DeviceTensor, shape: tuple[int, ...]) -> DeviceTensor:
    """``t`` broadcast to ``shape`` (same rank) as a stride-0 view."""
    if t.shape == shape:
        return t
    st = _strides(t)
    return _view(t, shape, [0 if n == 1 and m != 1 else s for n, m, s in zip(t.shape, shape, st)])


class _Call:
    """One call of a tile program: its values, and the intermediates to free afterwards."""

    def __init__(self, runner: TileRunner, bufs: dict[int, KTTBuffer]):
        self.r, self.bufs, self.temps = runner, bufs, []
        self.dev = runner.dev
        self.defaults = defaults()

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any] | None = None, **kw: Any) -> DeviceTensor:
        stats.count_op(op)
        outs = kk.run(op, inputs, attrs, device=self.dev, defaults=self.defaults, **kw)
        if "out" not in kw:
            self.temps.extend(outs)
        return outs[0]

    def cast(self, v: Any, dtype: str) -> Any:
        if not isinstance(v, DeviceTensor) or v.dtype is _DT[dtype]:
            return v
        if dtype == "bool":
            return self.run("ne", [v, 0])
        return self.run("typecast", [v], {"dtype": _DT[dtype].value})

    def param(self, slot: int, dtype: str) -> tuple[KTTBuffer, int, int]:
        kb = self.bufs[slot]
        size = _DT[dtype].itemsize
        if kb.offset % size:
            raise BufferUseError(f"KTT: a {dtype} buffer view at byte offset {kb.offset} is not aligned to {size}")
        return kb, kb.offset // size, kb.nbytes // size

    def load(self, i: int, n: Node, vals: dict[int, Any]) -> DeviceTensor:
        kb, base, numel = self.param(n.args[0], n.dtype)
        plan = self.r.plans.get(i)
        spec = TensorSpec(self.r.prog.shape(n.axes), _DT[n.dtype])
        if plan is not None and plan[0] == "view":
            _, off, strides = plan
            return DeviceTensor(kb.buf, spec, strides, base + off)
        flat = DeviceTensor(kb.buf, TensorSpec((numel,), _DT[n.dtype]), None, base)
        stats.count("gathers")
        if plan is not None:
            _, idx, valid = plan
        else:
            idx = self.cast(vals[n.srcs[0]], "int32")
            valid = vals[n.srcs[1]] if len(n.srcs) > 1 else None
            if valid is not None:
                idx = self.run("where", [valid, idx, 0])
        if not isinstance(idx, DeviceTensor):
            raise BufferUseError("KTT: a load through a constant index has no view plan")
        v = self.run("index", [flat, idx], {"dims": (0,)})
        if valid is not None:
            v = self.run("where", [valid, v, 0])
        return v

    def alu(self, n: Node, xs: list[Any]) -> Any:
        op = n.args[0]
        if any(isinstance(x, DeviceTensor) and x.dtype is DType.INT32 for x in xs):  # a weak int takes int32's range
            xs = [(x + 2**31) % 2**32 - 2**31 if type(x) is int else x for x in xs]
        bools = all(not isinstance(x, DeviceTensor) or x.dtype is DType.BOOL for x in xs)
        if op == "maximum" and bools:
            op = "logical_or"
        if op == "cdiv" or (op == "div" and n.dtype in ("int32", "index")):
            out = self.run("div", xs, {"rounding_mode": "trunc"})
        else:
            out = self.run(op, xs)
        return self.cast(out, n.dtype)

    def reduce(self, n: Node, x: Any) -> Any:
        op, axes = n.args
        src_axes = self.r.prog.nodes[n.srcs[0]].axes
        present = tuple(a for a in axes if a in src_axes)
        absent = 1
        for a in axes:
            if a not in src_axes:
                absent *= self.r.prog.sizes[a]
        if present:
            if x.dtype is DType.BOOL:
                x = self.run(
                    "any" if op == "max" else "all" if op == "prod" else "sum", [x], {"dims": present, "keepdim": True}
                )
            elif op in ("sum", "prod") and x.dtype is DType.FLOAT32:
                for d in present:
                    x = self.tree(x, d, "add" if op == "sum" else "mul")
            elif op == "max" and x.dtype.is_float:
                # the SFPU compare path keeps max values exact (tinygrad's argmax tests x == max); the FPU reduce
                # would cut float32 values to TF32 first
                for d in present:
                    x = self.run("max_with_indices", [x], {"dim": d, "keepdim": True})
            else:
                x = self.run(op, [x], {"dims": present, "keepdim": True})
        if absent != 1 and op == "sum":
            x = self.run("mul", [x, absent])
        elif absent != 1 and op == "prod":
            x = self.run("pow", [x, absent])
        return self.cast(x, n.dtype)

    def tree(self, x: DeviceTensor, d: int, op: str) -> DeviceTensor:
        """The sum (``op="add"``) or product (``"mul"``) of ``x`` over dim ``d`` as a pairwise tree of SFPU float32
        ops (each rounded once), Kohaku-TT's own reduction: TT-NN's FPU reduce and product would cut every float32
        term to TF32 first, and tinygrad sums one-hot products for its gathers, which must stay exact."""
        while x.shape[d] > 1:
            n, st = x.shape[d], list(_strides(x))
            half = n // 2
            shape = list(x.shape)
            shape[d] = half
            lo = _view(x, shape, st)
            hi = _view(x, shape, st, x.offset + half * st[d])
            y = self.run(op, [lo, hi])
            if n % 2:
                shape[d] = 1
                y = self.run("concat", [y, _view(x, shape, st, x.offset + (n - 1) * st[d])], {"dim": d})
            x = y
        return x

    def group(self, t: DeviceTensor, groups: Sequence[Sequence[int]]) -> DeviceTensor:
        """``t`` (over the program's axes) as a tensor with one dim per group of axes (a view where it can be)."""
        sizes = self.r.prog.sizes
        st = _strides(t)
        axes = [a for g in groups for a in g]
        shape = [sizes[a] for a in axes]
        strides = [0 if t.shape[a] == 1 else st[a] for a in axes]
        merged_shape, merged_strides, ok, k = [], [], True, 0
        for g in groups:
            dims = list(range(k, k + len(g)))
            k += len(g)
            n = int(np.prod([shape[d] for d in dims])) if dims else 1
            for a, b in itertools.pairwise(dims):
                if shape[b] != 1 and strides[a] != strides[b] * shape[b] and shape[a] != 1:
                    ok = False
            real = [d for d in dims if shape[d] != 1]
            merged_shape.append(n)
            merged_strides.append(strides[real[-1]] if real else 0)
        if ok:
            return _view(t, merged_shape, merged_strides)
        dense = self.run("copy", [_view(t, shape, strides)])
        return _view(dense, merged_shape, contiguous_strides(merged_shape))

    def matmul(self, n: Node, a: Any, b: Any) -> DeviceTensor:
        batch, m, nn, k = n.args
        stats.count("matmuls")
        a3 = self.group(a, [batch, m, k])
        b3 = self.group(b, [batch, k, nn])
        if a3.shape[0] == 1:
            a3 = _view(a3, a3.shape[1:], _strides(a3)[1:])
            b3 = _view(b3, b3.shape[1:], _strides(b3)[1:])
        if split_counts(current_numerics().over(self.defaults), [a3.dtype, b3.dtype]) is not None:
            stats.count("split_matmuls")  # the op library splits it (kohakutt.ir.defs.matmul)
        c = self.run("matmul", [a3, b3])
        sizes = self.r.prog.sizes
        order = [*batch, *m, *nn]
        cst = contiguous_strides([sizes[x] for x in order])
        where = {ax: s for ax, s in zip(order, cst)}
        shape = self.r.prog.shape(frozenset(order))
        c = _view(c, shape, [where.get(j, 0) for j in range(len(sizes))])
        return self.cast(c, n.dtype)

    def store(self, i: int, n: Node, v: Any) -> None:
        kb, base, _ = self.param(n.args[0], n.dtype)
        _, off, strides = self.r.plans[i]
        shape = self.r.prog.shape(n.axes)
        out = DeviceTensor(kb.buf, TensorSpec(shape, _DT[n.dtype]), strides, base + off)
        if isinstance(v, DeviceTensor):
            if v.shape != shape:
                v = _expand(v, shape)
            self.run("copy", [v], out=[out])
        else:
            self.run("full", [], {"shape": shape, "value": v, "dtype": _DT[n.dtype].value}, out=[out])

    def uniform(self, n: Node) -> None:
        kb, base, _ = self.param(n.args[0], n.dtype)
        numel = n.args[1]
        out = DeviceTensor(kb.buf, TensorSpec((numel,), _DT[n.dtype]), None, base)
        self.run("uniform", [], {"shape": (numel,), "dtype": _DT[n.dtype].value}, out=[out])

    def execute(self) -> None:
        prog, vals = self.r.prog, dict(self.r.consts)
        try:
            for i, n in enumerate(prog.nodes):
                if i in vals:
                    continue
                if n.kind == "store":
                    self.store(i, n, vals[n.srcs[1]])
                elif n.kind == "uniform":
                    self.uniform(n)
                elif n.static:
                    continue  # consumed only by plans (addresses) or already a constant
                elif n.kind == "load":
                    vals[i] = self.load(i, n, vals)
                elif n.kind == "alu":
                    vals[i] = self.alu(n, [vals[s] for s in n.srcs])
                elif n.kind == "cast":
                    vals[i] = self.cast(vals[n.srcs[0]], n.dtype)
                elif n.kind == "reduce":
                    vals[i] = self.reduce(n, vals[n.srcs[0]])
                elif n.kind == "matmul":
                    vals[i] = self.matmul(n, vals[n.srcs[0]], vals[n.srcs[1]])
                else:
                    raise BufferUseError(f"KTT: unknown tile node {n.kind}")
        finally:
            for t in self.temps:
                kk.free(t)


class TileRunner:
    """A tile program made ready to run on ``dev``: view plans, uploaded index lists and constants."""

    def __init__(self, dev: Device, prog: TileProgram, globals_: tuple[int, ...]):
        self.dev, self.prog, self.globals = dev, prog, globals_
        self.plans: dict[int, tuple] = {}
        self.consts: dict[int, Any] = {}
        self._owned: list[DeviceTensor] = []
        cache: dict[int, Any] = {}
        consumers: dict[int, set[int]] = {}
        for i, n in enumerate(prog.nodes):
            for s in n.srcs:
                consumers.setdefault(s, set()).add(i)
        for i, n in enumerate(prog.nodes):
            if n.kind in ("load", "store") and all(
                prog.nodes[s].static for s in n.srcs[: 1 if n.kind == "store" else None]
            ):
                self._plan(i, n, cache)
        for i, n in enumerate(prog.nodes):
            if n.static and any(self._needs_value(i, u) for u in consumers.get(i, ())):
                self.consts[i] = self._constant(evaluate_static(prog, i, cache), n.dtype, n.axes)

    def _needs_value(self, i: int, u: int) -> bool:
        """Whether node ``u`` uses static node ``i`` as a value (not only as an address it was planned with)."""
        un = self.prog.nodes[u]
        if un.static:
            return False
        if un.kind == "store":
            return un.srcs[1] == i
        return not (un.kind == "load" and u in self.plans)

    def _constant(self, value: Any, dtype: str, axes: frozenset[int]) -> Any:
        arr = np.asarray(value)
        if arr.ndim == 0 or arr.size == 1:
            item = arr.reshape(()).item()
            return bool(item) if dtype == "bool" else item
        arr = np.ascontiguousarray(np.broadcast_to(arr, self.prog.shape(axes)).astype(_NP[dtype]))
        t = kk.from_numpy(self.dev, arr, _DT[dtype])
        self._owned.append(t)
        return t

    def _plan(self, i: int, n: Node, cache: dict[int, Any]) -> None:
        shape = self.prog.shape(n.axes)
        idx = np.broadcast_to(np.asarray(evaluate_static(self.prog, n.srcs[0], cache)), shape)
        valid = None
        if n.kind == "load" and len(n.srcs) > 1:
            valid = np.broadcast_to(np.asarray(evaluate_static(self.prog, n.srcs[1], cache), dtype=np.bool_), shape)
            if valid.all():
                valid = None
        aff = affine(idx, self.prog.sizes) if valid is None else None
        if aff is not None:
            self.plans[i] = ("view", aff[0], aff[1])
            return
        idx = np.where(valid, idx, 0) if valid is not None else idx
        if idx.size and (idx.min() < 0 or idx.max() >= 2**31):
            raise BufferUseError(f"KTT: kernel {self.prog.name} indexes outside a buffer ({idx.min()}..{idx.max()})")
        gidx = kk.from_numpy(self.dev, np.ascontiguousarray(idx, dtype=np.int32), DType.INT32)
        self._owned.append(gidx)
        gvalid = None
        if valid is not None:
            gvalid = kk.from_numpy(self.dev, np.ascontiguousarray(valid), DType.BOOL)
            self._owned.append(gvalid)
        self.plans[i] = ("gather", gidx, gvalid)

    def __call__(self, bufs: Sequence[KTTBuffer]) -> None:
        _Call(self, dict(zip(self.globals, bufs))).execute()

    def release(self) -> None:
        for t in self._owned:
            if t.buffer.is_live and not t.device.closed:
                kk.free(t)
        self._owned = []


class _HostBuffer:
    """A 64-byte-aligned host copy of a KTT buffer, addressed as tinygrad's CPU programs address their buffers."""

    def __init__(self, data: np.ndarray):
        raw = np.empty(data.nbytes + 64, dtype=np.uint8)
        start = -raw.ctypes.data % 64
        self.array = raw[start : start + data.nbytes]
        self.array[:] = data.reshape(-1).view(np.uint8)
        self.va_addr = self.array.ctypes.data


class HostRunner:
    """A kernel with no tile form, run on host copies of its buffers: as C compiled by tinygrad's CPU device where that
    was built (clang present) and ``KTT_TINYGRAD_HOST=cpu`` (the default), else by tinygrad's PYTHON interpreter."""

    def __init__(self, dev: Device, payload: dict[str, Any]):
        from tinygrad.device import TinyELF
        from tinygrad.helpers import Target
        from tinygrad.runtime.ops_python import PythonProgram

        self.dev, self.kind, self.detail, self.outs = dev, payload["kind"], payload["detail"], payload["outs"]
        self.globals, self.vars = payload["globals"], payload.get("vars", ())
        self.program = PythonProgram(None, TinyELF(payload["lib"], payload["name"], Target(device="PYTHON"), ()))
        self.cpu: tuple[Any, Any] | None = None
        if payload.get("cpu") is not None:
            from tinygrad.device import Device as TGDevice

            elf, info = payload["cpu"]
            self.cpu = (TGDevice["CPU"].runtime(elf), info)

    @property
    def how(self) -> str:
        """``c`` or ``python``: how the next call runs (``KTT_TINYGRAD_HOST``, and whether C was built)."""
        return "c" if self.cpu is not None and config.get("KTT_TINYGRAD_HOST") == "cpu" else "python"

    def __call__(
        self,
        bufs: Sequence[KTTBuffer],
        global_size: tuple[int, ...],
        local_size: tuple[int, ...] | None,
        vals: tuple[int, ...],
    ) -> None:
        host = [self.dev.read(b.buf, b.offset, b.nbytes) for b in bufs]
        if self.how == "c":
            runtime, info = self.cpu
            var_vals = {name: int(v) for name, v in zip(self.vars, vals) if v is not None}
            by_slot = dict(zip(self.globals, (_HostBuffer(h) for h in host)))
            gs, ls = info.launch_dims(var_vals)
            runtime(*[by_slot[s] for s in info.globals], global_size=gs, local_size=ls, vals=info.vals(var_vals))
            outs = {pos: by_slot[self.globals[pos]].array for pos in self.outs}
        else:
            mvs = [memoryview(bytearray(h.tobytes())) for h in host]
            self.program(*mvs, global_size=global_size, local_size=local_size or (1, 1, 1), vals=vals)
            outs = {pos: np.frombuffer(mvs[pos], dtype=np.uint8) for pos in self.outs}
        for pos, data in outs.items():
            self.dev.write(bufs[pos].buf, data, bufs[pos].offset)
