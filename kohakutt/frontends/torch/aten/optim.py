"""Optimizer kernels on ``tt``: the ``_foreach_*`` ops of ``torch.optim`` (``foreach=True``) and gradient clipping,
and the fused SGD / Adam / AdamW steps (``fused=True``).

A ``_foreach_*`` op runs one IR op per tensor of its lists, straight into the destination (no meta kernel per tensor:
each result has the shape and dtype of its ``self`` tensor). A tensor whose operands need PyTorch's type promotion or
broadcasting (integer tensors, mixed dtypes, differing shapes, other devices) goes through the single-tensor aten op
instead, which runs on tt too and keeps PyTorch's rules and errors.

The fused steps are compositions of element-wise IR ops per parameter, with PyTorch's semantics (its CPU kernels are
the reference): gradients are unscaled in place by ``grad_scale``; ``found_inf`` != 0 leaves every tensor unchanged,
decided on the device (each update is committed through ``where``, no host synchronization); ``maximize`` negates the
gradient without writing it back; the step counts are read on the device, and Adam's bias corrections are computed
as ``-expm1(step * ln(beta))`` (accurate for small ``1 - beta**step``, where ``1 - pow`` cancels). Arithmetic is the
card's element-wise arithmetic in the tensors' dtypes: float32 state updates as float32 SFPU math, bfloat16 parameters
rounded after every op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from kohakutt.frontends.torch import tensors
from kohakutt.frontends.torch.aten.core import copy_from, fill_scalar
from kohakutt.frontends.torch.aten.reduce import extreme
from kohakutt.frontends.torch.aten.registry import _Binder, ir, kernel, overload, release
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels.tensor import DeviceTensor
from kohakutt.mesh.storage import MeshTensor
from torch.autograd.graph import increment_version

aten = torch.ops.aten
Operand = DeviceTensor | torch.Tensor | float


# --------------------------------------------------------------------------------------------------- helpers
def _check_lists(op: str, *lists: Sequence[Any]) -> int:
    n = len(lists[0])
    if n == 0:
        raise ShapeError(f"{op}: the tensor list is empty; pass at least one tensor")
    for other in lists[1:]:
        if len(other) != n:
            raise ShapeError(
                f"{op}: the lists must have the same number of tensors, got {n} and {len(other)}; pass one entry "
                "per tensor of self"
            )
    return n


def _is_scalar(x: Any) -> bool:
    return isinstance(x, int | float | bool)


def _fast(s: torch.Tensor, operands: Sequence[Any]) -> bool:
    """Whether ``s`` and ``operands`` need no promotion or broadcasting: a float tt tensor, other tensors of its
    device, dtype and shape (or 0-d float tensors), real Python numbers."""
    if s.device.type != "tt" or not s.is_floating_point():
        return False
    for o in operands:
        if isinstance(o, torch.Tensor):
            if o.dim() == 0 and o.is_floating_point() and (o.device.type == "cpu" or o.device == s.device):
                continue
            if o.device != s.device or o.dtype != s.dtype or o.shape != s.shape:
                return False
        elif not _is_scalar(o):
            return False
    return True


# ------------------------------------------------------------------------------------------ element-wise lists
# foreach name -> (IR op, torch function used when a tensor needs PyTorch's promotion rules, attribute argument)
_FOREACH: dict[str, tuple[str, str]] = {  # foreach name -> (IR op, the single-tensor torch function)
    "add": ("add", "add"),
    "sub": ("sub", "sub"),
    "mul": ("mul", "mul"),
    "div": ("div", "div"),
    "maximum": ("maximum", "maximum"),
    "minimum": ("minimum", "minimum"),
    "clamp_min": ("maximum", "clamp_min"),
    "clamp_max": ("minimum", "clamp_max"),
    "pow": ("pow", "pow"),
    "addcmul": ("addcmul", "addcmul"),
    "addcdiv": ("addcdiv", "addcdiv"),
    "lerp": ("lerp", "lerp"),
}
_UNARY = (
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac", "lgamma",
    "log", "log10", "log1p", "log2", "neg", "reciprocal", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh",
    "trunc",
)  # fmt: skip


def _foreach_kernel(name: str, overload_name: str) -> Callable[..., Any]:
    """The tt kernel of ``aten::<overload_name>``, a ``_foreach_<name>`` overload."""
    op = overload(overload_name)
    binder = _Binder.of(op)
    inplace = binder.inplace
    ir_op, torch_name = _FOREACH.get(name, (name, name))
    schema = op._schema.arguments
    lists = {a.name for a in schema if isinstance(a.type, torch.ListType)}
    operands = [a.name for a in schema if not a.kwarg_only]
    attr_arg, attr = ("alpha", "alpha") if any(a.name == "alpha" for a in schema) else (None, None)
    if name in ("addcmul", "addcdiv"):  # value / scalars: the IR op's attribute, not an operand
        attr_arg, attr = operands.pop(), "value"
    types = {a.name: a.type for a in schema}
    per_tensor = isinstance(types.get(attr_arg), torch.TensorType)  # addcmul.Tensor: a 1-D tensor of values
    head = "self" if "self" in lists else operands[1]  # pow.ScalarAndTensor: a number, then the list

    def fn(*args: Any, **kwargs: Any) -> Any:
        a = binder.bind(args, kwargs)
        n = _check_lists(overload_name, *(a[x] for x in operands if x in lists))
        values: list[Any] | None = None
        if attr_arg is not None:
            v = a[attr_arg]
            values = v.tolist() if per_tensor else list(v) if attr_arg in lists else [v] * n
            if len(values) != n:
                raise ShapeError(f"{overload_name}: {attr_arg} has {len(values)} values for {n} tensors")
        results, written = [], []
        for i in range(n):
            ops = [a[x][i] if x in lists else a[x] for x in operands]
            attrs = {attr: values[i]} if values is not None else {}
            s = a[head][i]
            if _fast(s, ops):
                index = s.device.index or 0
                dst = s if inplace else tensors.new(s.shape, None, s.dtype, index)
                ir(ir_op, ops, attrs or None, [dst], index)
                if inplace:
                    written.append(dst)
            else:
                dst = _per_tensor(torch_name, inplace, ops, attrs)
            results.append(dst)
        if written:  # as CUDA's fused foreach kernels do: in-place writes are seen (autograd checks, caches)
            increment_version(written)
        return None if inplace else results

    fn.__name__ = f"tt_{overload_name.replace('.', '_')}"
    return fn


def _per_tensor(torch_name: str, inplace: bool, ops: list[Any], attrs: dict[str, Any]) -> torch.Tensor:
    """One element through the single-tensor aten op (PyTorch's promotion, broadcasting and errors)."""
    if torch_name in ("maximum", "minimum") and _is_scalar(ops[1]):
        torch_name = "clamp_min" if torch_name == "maximum" else "clamp_max"
    if inplace:
        return getattr(torch.Tensor, torch_name + "_")(*ops, **attrs)
    if isinstance(ops[0], int | float):  # pow(Scalar, Tensor)
        return torch.pow(ops[0], ops[1])
    return getattr(torch, torch_name)(*ops, **attrs)


def _register_foreach() -> None:
    for name in (*_FOREACH, *_UNARY):
        for packet in (f"_foreach_{name}", f"_foreach_{name}_"):
            pk = getattr(aten, packet, None)
            if pk is None:
                continue
            for ov in pk.overloads():
                if ov.endswith("out"):
                    continue
                full = packet if ov == "default" else f"{packet}.{ov}"
                ir_op = _FOREACH.get(name, (name, name))[0]
                kernel(full, ir=(ir_op,), note="one IR op per tensor")(_foreach_kernel(name, full))


_register_foreach()


@kernel("_foreach_zero_", ir=("full",))
def foreach_zero_(self: list[torch.Tensor]) -> None:
    for t in self:
        fill_scalar(t, 0)
    increment_version(list(self))


@kernel("_foreach_copy_", ir=("copy",))
def foreach_copy_(self: list[torch.Tensor], src: list[torch.Tensor], non_blocking: bool = False) -> None:
    _check_lists("_foreach_copy_", self, src)
    for dst, s in zip(self, src):
        copy_from(s, dst, non_blocking)
    increment_version(list(self))


@kernel("_foreach_norm.Scalar", ir=("vector_norm",))
def foreach_norm(self: list[torch.Tensor], ord: Any = 2, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    p = float(ord.item() if isinstance(ord, torch.Tensor) else ord)
    out = []
    for t in self:
        if t.device.type != "tt" or not t.is_floating_point():
            out.append(torch.linalg.vector_norm(t, p, dtype=dtype))
            continue
        index = t.device.index or 0
        res = tensors.new((), None, dtype or t.dtype, index)
        ir("vector_norm", [t], {"p": p, "dims": None, "keepdim": False}, [res], index, dtype or t.dtype)
        out.append(res)
    return out


@kernel("_foreach_max", ir=("amax", "max_with_indices"))
def foreach_max(self: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for t in self:
        if t.device.type != "tt" or t.numel() == 0:
            out.append(torch.amax(t))  # PyTorch's error for an empty tensor
            continue
        index = t.device.index or 0
        res = tensors.new((), None, t.dtype, index)
        extreme("amax", t, None, False, res, index)
        out.append(res)
    return out


# ------------------------------------------------------------------------------------------------ fused steps
class _Step:
    """IR ops of one parameter's update: scratch results freed at the end, and updates committed into the state
    tensors directly, or through ``where(skip, old, new)`` when a ``found_inf`` decides on the device."""

    def __init__(self, index: int, skip: DeviceTensor | None):
        self.index, self.skip = index, skip
        self.scratch: list[DeviceTensor] = []

    def tmp(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any] | None = None) -> Any:
        if all(not isinstance(x, DeviceTensor | MeshTensor | torch.Tensor) for x in inputs):
            return _host(op, inputs, attrs)
        r = ir(op, inputs, attrs, None, self.index)[0]
        self.scratch.append(r)
        return r

    def commit(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any] | None, dst: torch.Tensor) -> Any:
        """``dst = op(inputs)`` (unless skipped); returns the new value for the ops that follow."""
        if self.skip is None:
            ir(op, inputs, attrs, [dst], self.index)
            return dst
        new = self.tmp(op, inputs, attrs)
        ir("where", [self.skip, dst, new], None, [dst], self.index)
        return new

    def done(self) -> None:
        release(self.index, *self.scratch)


def _host(op: str, inputs: Sequence[Any], attrs: dict[str, Any] | None) -> float:
    """A scalar op on Python numbers (a CPU step count or learning rate), in double precision."""
    a = [float(x) for x in inputs]
    if op == "mul":
        return a[0] * a[1]
    if op == "add":
        return a[0] + (attrs or {}).get("alpha", 1) * a[1]
    if op == "sub":
        return a[0] - (attrs or {}).get("alpha", 1) * a[1]
    if op == "div":
        return a[0] / a[1]
    if op == "sqrt":
        return math.sqrt(a[0])
    if op == "neg":
        return -a[0]
    if op == "expm1":
        return math.expm1(a[0])
    raise ValueError(f"no host form of {op}")


def _value(x: Any, index: int) -> Any:
    """A scalar argument (lr, grad_scale, a step count) as a Python number (CPU) or the tt tensor itself."""
    if x is None or _is_scalar(x):
        return x
    if x.device.type == "tt":
        if (x.device.index or 0) != index:
            raise ShapeError(f"a scalar tensor on {x.device} was passed for parameters on tt:{index}; move it there")
        return x
    return x.item()


def _skip(found_inf: torch.Tensor | None, index: int) -> tuple[bool, DeviceTensor | None]:
    """(skip on the host, skip mask on the device) for ``found_inf``."""
    v = _value(found_inf, index)
    if v is None or not isinstance(v, torch.Tensor):
        return bool(v), None
    return False, ir("ne", [v, 0.0], None, None, index)[0]


def _lists_of(op: str, self: Sequence[torch.Tensor], *lists: Sequence[torch.Tensor]) -> int:
    _check_lists(op, self, *lists)
    index = self[0].device.index or 0
    for group in (self, *lists):
        for t in group:
            if t.device.type != "tt" or (t.device.index or 0) != index:
                raise ShapeError(f"{op}: every tensor must be on tt:{index}, found one on {t.device}")
    return index


def _fused_sgd(
    self: list[torch.Tensor], grads: list[torch.Tensor], momentum_buffer_list: list[torch.Tensor], *,
    weight_decay: float, momentum: float, lr: Any, dampening: float, nesterov: bool, maximize: bool,
    is_first_step: bool, grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
) -> None:  # fmt: skip
    bufs = momentum_buffer_list if momentum != 0 else []
    index = _lists_of("_fused_sgd_", self, grads, *([bufs] if momentum != 0 else []))
    host_skip, skip = _skip(found_inf, index)
    if host_skip:
        return
    lr, scale = _value(lr, index), _value(grad_scale, index)
    for i, (p, g) in enumerate(zip(self, grads)):
        st = _Step(index, skip)
        if scale is not None:
            g = st.commit("div", [g, scale], None, g)
        d = st.tmp("neg", [g]) if maximize else g
        if weight_decay != 0:
            d = st.tmp("add", [d, p], {"alpha": weight_decay})
        if momentum != 0:
            buf = bufs[i]
            if is_first_step:
                b = st.commit("copy", [d], None, buf)
            else:
                b = st.commit("add", [st.tmp("mul", [buf, momentum]), d], {"alpha": 1 - dampening}, buf)
            d = st.tmp("add", [d, b], {"alpha": momentum}) if nesterov else b
        if isinstance(lr, torch.Tensor):
            st.commit("sub", [p, st.tmp("mul", [d, lr])], None, p)
        else:
            st.commit("sub", [p, d], {"alpha": lr}, p)
        st.done()
    if skip is not None:
        release(index, skip)


def _fused_adam(adamw: bool) -> Callable[..., None]:
    name = "_fused_adamw_" if adamw else "_fused_adam_"

    def step(
        self: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor], max_exp_avg_sqs: list[torch.Tensor], state_steps: list[torch.Tensor], *,
        lr: Any, beta1: float, beta2: float, weight_decay: float, eps: float, amsgrad: bool, maximize: bool,
        grad_scale: torch.Tensor | None = None, found_inf: torch.Tensor | None = None,
    ) -> None:  # fmt: skip
        index = _lists_of(name, self, grads, exp_avgs, exp_avg_sqs, *([max_exp_avg_sqs] if amsgrad else []))
        _check_lists(name, self, state_steps)
        host_skip, skip = _skip(found_inf, index)
        if host_skip:
            return
        lr, scale = _value(lr, index), _value(grad_scale, index)
        ln1, ln2 = math.log(beta1) if beta1 > 0 else -math.inf, math.log(beta2) if beta2 > 0 else -math.inf
        for i, (p, g, m, v) in enumerate(zip(self, grads, exp_avgs, exp_avg_sqs)):
            st = _Step(index, skip)
            count = _value(state_steps[i], index)
            if scale is not None:
                g = st.commit("div", [g, scale], None, g)
            d = st.tmp("neg", [g]) if maximize else g
            p_now: Any = p
            if weight_decay != 0 and adamw:  # p *= 1 - lr * weight_decay
                p_now = st.commit("mul", [p, st.tmp("sub", [1.0, st.tmp("mul", [lr, weight_decay])])], None, p)
            elif weight_decay != 0:
                d = st.tmp("add", [d, p], {"alpha": weight_decay})
            m_new = st.commit("lerp", [m, d, 1.0 - beta1], None, m)
            v_new = st.commit("addcmul", [st.tmp("mul", [v, beta2]), d, d], {"value": 1.0 - beta2}, v)
            bc1 = st.tmp("neg", [st.tmp("expm1", [st.tmp("mul", [count, ln1])])]) if beta1 > 0 else 1.0
            bc2 = st.tmp("neg", [st.tmp("expm1", [st.tmp("mul", [count, ln2])])]) if beta2 > 0 else 1.0
            if amsgrad:
                v_new = st.commit("maximum", [max_exp_avg_sqs[i], v_new], None, max_exp_avg_sqs[i])
            denom = st.tmp("add", [st.tmp("div", [st.tmp("sqrt", [v_new]), st.tmp("sqrt", [bc2])]), eps])
            step_size = st.tmp("div", [lr, bc1])
            if isinstance(step_size, float):
                st.commit("addcdiv", [p_now, m_new, denom], {"value": -step_size}, p)
            else:
                st.commit("sub", [p_now, st.tmp("mul", [st.tmp("div", [m_new, denom]), step_size])], None, p)
            st.done()
        if skip is not None:
            release(index, skip)

    step.__name__ = f"tt{name}"
    return step


kernel("_fused_sgd_", "_fused_sgd_.tensor_lr", ir=("div", "neg", "add", "mul", "sub", "copy", "where"))(_fused_sgd)
_ADAM_IR = ("div", "neg", "add", "mul", "sub", "lerp", "addcmul", "addcdiv", "expm1", "sqrt", "maximum", "where")
kernel("_fused_adam_", "_fused_adam_.tensor_lr", ir=_ADAM_IR)(_fused_adam(False))
kernel("_fused_adamw_", "_fused_adamw_.tensor_lr", ir=_ADAM_IR)(_fused_adam(True))
