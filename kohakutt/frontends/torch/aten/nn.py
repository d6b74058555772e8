"""Neural-network aten ops on tt: convolution, pooling, embedding, normalization, attention and losses.

Each op runs on the card through the IR op of its family (``conv``, ``max_pool``, ``embedding``, ``layer_norm``,
``scaled_dot_product_attention``, ...), so its numerics are that op's (see the IR docs); the losses are short
compositions of IR ops (gather, comparisons, element-wise math, sums), never host code. (Softmax and log-softmax,
the other half of cross entropy, are the reduce family's: aten/reduce.py.)

How PyTorch 2.13 reaches these on a PrivateUse1 device:
- ``F.conv*`` -> ``aten::convolution`` -> ``convolution_overrideable``; backward ``convolution_backward_overrideable``.
- ``F.scaled_dot_product_attention``: the fused-kernel choice is a C++ dispatch stub PrivateUse1 cannot fill from
  Python, so PyTorch would take its math path (bmm + softmax). The device registers ``scaled_dot_product_attention``
  at AutogradPrivateUse1 instead and calls ``_scaled_dot_product_fused_attention_overrideable`` (whose autograd formula
  calls ``..._overrideable_backward``); dropout, a mask that needs a gradient or other ranks still take the math path.
- ``F.rms_norm`` is CompositeImplicitAutograd in 2.13 (``_fused_rms_norm`` too, with no autograd formula), so
  ``rms_norm`` is registered at AutogradPrivateUse1 with its own backward (IR ``rms_norm_backward``).
- ``F.layer_norm`` / ``F.group_norm`` / ``F.batch_norm`` reach ``native_layer_norm`` / ``native_group_norm`` /
  ``native_batch_norm`` (and the ``_native_batch_norm_legit*`` / ``_batch_norm_*`` forms that traced graphs use).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator
from kohakutt.frontends.torch import precision, runtime, tensors
from kohakutt.frontends.torch.aten.registry import Args, _same_device_error, computed, ir_tensors, kernel
from kohakutt.ir.defs.conv import CONV_ATTRS, conv_geometry

aten = torch.ops.aten
MEAN, SUM = 1, 2  # aten's reduction enum: 0 none, 1 mean, 2 sum


# ------------------------------------------------------------------------------------------------------ the card
class Card:
    """IR ops queued on ``tt:<index>``: each call returns its results as tt tensors (new ones, freed by torch like any
    other, or the ``out`` tensors given, written with a cast to their dtypes)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.dev = runtime.device(index)

    @classmethod
    def of(cls, *xs: Any) -> Card:
        """The card holding the tt tensors among ``xs`` (all on one chip)."""
        devs = {str(x.device) for x in xs if isinstance(x, torch.Tensor) and (x.device.type != "cpu" or x.dim())}
        tt = [d for d in devs if d.startswith("tt")]
        if len(devs) > 1 or not tt:
            raise _same_device_error(devs | {"tt:0"} if not tt else devs)
        return cls(int(tt[0].partition(":")[2] or 0))

    def __call__(
        self,
        op: str,
        *inputs: Any,
        out: Sequence[torch.Tensor] | None = None,
        provider: str | None = None,
        **attrs: Any,
    ) -> list[torch.Tensor]:
        return ir_tensors(op, inputs, attrs, out, self.index, provider)

    def one(self, op: str, *inputs: Any, **kw: Any) -> torch.Tensor:
        return self(op, *inputs, **kw)[0]

    def cast(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return x if x.dtype == dtype else self.one("typecast", x, dtype=tensors.check_dtype(dtype).value)

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return tensors.new(shape, None, dtype, self.index)


def _ints(v: Any, d: int, default: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """An aten ``int[d]`` argument as d ints (one value means all dims; empty means ``default``)."""
    vals = [int(x) for x in v] if isinstance(v, list | tuple) else ([] if v is None else [int(v)])
    if not vals:
        return None if default is None else tuple(default)
    return tuple(vals * d) if len(vals) == 1 else tuple(vals)


def _masked(x: torch.Tensor | None, keep: bool) -> torch.Tensor | None:
    return x if keep else None


# ---------------------------------------------------------------------------------------------------- convolution
def _conv_attrs(
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    d: int,
) -> dict[str, Any]:
    return {
        **CONV_ATTRS,
        "stride": _ints(stride, d, (1,) * d),
        "padding": _ints(padding, d, (0,) * d),
        "dilation": _ints(dilation, d, (1,) * d),
        "transposed": bool(transposed),
        "output_padding": _ints(output_padding, d, (0,) * d),
        "groups": int(groups),
    }


def _conv_layout(input: torch.Tensor, weight: torch.Tensor, shape: Sequence[int]) -> tuple[int, ...] | None:
    """Strides of a convolution result of ``shape`` (None: contiguous) as PyTorch's shape function lays it out, so
    compiled graphs see what the card returns: the memory format PyTorch picks for the backend that convolutions on
    this device take (``convolution_overrideable``), which is contiguous in PyTorch 2.13 even for a channels-last
    input; 1-d convolutions are judged as 2-d ones over a contiguous input, as its fake kernel does."""
    if weight.dim() == 3:
        input = torch.empty(input.shape, device="meta").unsqueeze(2)
        weight = torch.empty_strided(weight.shape, weight.stride(), device="meta").unsqueeze(2)
    fmt = torch._C._conv_determine_backend_memory_format(input, weight, torch._C._ConvBackend.Overrideable)
    if fmt == torch.contiguous_format:
        return None
    meta = torch.empty(tuple(shape), device="meta")
    if meta.dim() == 3 and fmt == torch.channels_last:
        return meta.unsqueeze(2).contiguous(memory_format=fmt).squeeze(2).stride()
    return meta.contiguous(memory_format=fmt).stride()


@kernel("convolution_overrideable", ir=("conv",))
def convolution(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
) -> torch.Tensor:
    card = Card.of(input, weight, bias)
    if input.dtype != weight.dtype or (bias is not None and bias.dtype != input.dtype):
        raise DtypeError(
            f"convolution: input ({input.dtype}), weight ({weight.dtype}) and bias "
            f"({None if bias is None else bias.dtype}) must have the same dtype; convert them with .to() first"
        )
    attrs = _conv_attrs(stride, padding, dilation, transposed, output_padding, groups, weight.dim() - 2)
    g = conv_geometry(tuple(input.shape), tuple(weight.shape), attrs, "convolution")
    out = tensors.new(g.out_shape, _conv_layout(input, weight, g.out_shape), input.dtype, card.index)
    card("conv", input, weight, *([bias] if bias is not None else []), out=[out], **attrs)
    return out


@kernel("convolution_backward_overrideable", ir=("conv_backward",))
def convolution_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    card = Card.of(grad_output, input, weight)
    attrs = _conv_attrs(stride, padding, dilation, transposed, output_padding, groups, weight.dim() - 2)
    g = conv_geometry(tuple(input.shape), tuple(weight.shape), attrs, "convolution_backward")
    mask = tuple(bool(m) for m in output_mask)
    shapes = (tuple(input.shape), tuple(weight.shape), (g.c_out,))
    strides = (_conv_layout(input, weight, input.shape), _conv_layout(input, weight, weight.shape), None)
    outs = [
        tensors.new(s if m else (0,), st if m else None, input.dtype, card.index)
        for s, st, m in zip(shapes, strides, mask)
    ]
    card("conv_backward", grad_output, input, weight, out=outs, **attrs, output_mask=mask)
    return tuple(_masked(o, m) for o, m in zip(outs, mask))  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------------- pooling
def _window(a: Args, d: int, dilation: bool = True) -> dict[str, Any]:
    kernel_size = _ints(a.kernel_size, d)
    attrs = {
        "kernel_size": kernel_size,
        "stride": _ints(a.stride, d, kernel_size),
        "padding": _ints(a.padding, d, (0,) * d),
        "ceil_mode": bool(a.ceil_mode),
    }
    if dilation:
        attrs["dilation"] = _ints(a.dilation, d, (1,) * d)
    return attrs


def _avg_attrs(a: Args, d: int) -> dict[str, Any]:
    div = a.divisor_override
    return {**_window(a, d, dilation=False), "count_include_pad": bool(a.count_include_pad),
            "divisor_override": None if div is None else int(div)}  # fmt: skip


def _indices(a: Args, card: Card) -> torch.Tensor:
    return card.cast(a.indices, torch.int32)


def _out_size(a: Args, d: int) -> dict[str, Any]:
    return {"output_size": tuple(int(s) for s in a.output_size)}


def _grad_size(a: Args, d: int) -> dict[str, Any]:
    return {"output_size": tuple(a.grad_output.shape[-d:])}


# aten name (``{d}`` the pooled dims), its out overload's suffix, the IR ops it queues, its operands (after the
# input, or the output gradient and the input for a backward) and its attributes
_POOLS: tuple[tuple[str, str, tuple[str, ...], Callable[..., list], Callable[[Args, int], dict]], ...] = (
    ("max_pool{d}d_with_indices", "out", ("max_pool",), lambda a, c: [],
     lambda a, d: {**_window(a, d), "return_indices": True}),
    ("max_pool{d}d_with_indices_backward", "grad_input", ("max_pool_backward", "typecast"),
     lambda a, c: [_indices(a, c)], _window),
    ("avg_pool{d}d", "out", ("avg_pool",), lambda a, c: [], _avg_attrs),
    ("avg_pool{d}d_backward", "grad_input", ("avg_pool_backward",), lambda a, c: [], _avg_attrs),
    ("_adaptive_avg_pool{d}d", "out", ("adaptive_avg_pool",), lambda a, c: [], _out_size),
    ("_adaptive_avg_pool{d}d_backward", "out", ("adaptive_avg_pool_backward",), lambda a, c: [], _grad_size),
    ("adaptive_max_pool{d}d", "out", ("adaptive_max_pool",), lambda a, c: [],
     lambda a, d: {**_out_size(a, d), "return_indices": True}),
    ("adaptive_max_pool{d}d_backward", "grad_input", ("adaptive_max_pool_backward", "typecast"),
     lambda a, c: [_indices(a, c)], _grad_size),
)  # fmt: skip


def _pool(op: str, operands: Callable[..., list], attrs: Callable[[Args, int], dict], d: int) -> Callable:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        card = Card(a._index)
        lead = [a.grad_output, a.self] if op.endswith("_backward") else [a.self]
        card(op, *lead, *operands(a, card), out=outs, **attrs(a, d))

    return impl


for _d in (2, 3):
    for _name, _suffix, _ir, _operands, _attrs in _POOLS:
        _aten = _name.format(d=_d)
        computed(_aten, f"{_aten}.{_suffix}", ir=_ir)(_pool(_ir[0], _operands, _attrs, _d))


# -------------------------------------------------------------------------------------------------------- embedding
@computed("embedding", "embedding.out", ir=("embedding",))
def _embedding(a: Args, outs: list[torch.Tensor]) -> None:
    Card(a._index)("embedding", a.weight, a.indices, out=outs)


@computed("embedding_dense_backward", "embedding_dense_backward.out", ir=("embedding_backward",))
def _embedding_backward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    pad = int(a.padding_idx)
    card("embedding_backward", a.grad_output, a.indices, out=outs, num_weights=int(a.num_weights),
         padding_idx=None if pad < 0 else pad, scale_grad_by_freq=bool(a.scale_grad_by_freq))  # fmt: skip


@kernel("embedding_renorm_", ir=("index_select", "vector_norm", "where", "index_put"))
def embedding_renorm_(self: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float) -> torch.Tensor:
    """F.embedding(max_norm=...): the rows at ``indices`` whose norm exceeds max_norm scaled down to it, in place."""
    card = Card.of(self, indices)
    if indices.numel() == 0:
        return self
    idx = card.cast(indices, torch.int32).reshape(-1)
    rows = card.one("index_select", self, idx, dim=0)
    norm = card.one("vector_norm", rows, p=float(norm_type), dims=(1,), keepdim=True)
    scale = card.one("div", float(max_norm), card.one("add", norm, 1e-7))  # PyTorch's scale
    scale = card.one("where", card.one("gt", norm, float(max_norm)), scale, 1.0)
    card("index_put", self, card.one("mul", rows, scale), idx, out=[self], dims=(0,))
    return self


# ---------------------------------------------------------------------------------------------------- normalization
def _params(**named: torch.Tensor | None) -> tuple[list[torch.Tensor], str]:
    """The parameter operands that are present and the IR's letters naming them (w, b, m, v)."""
    present = [(k, t) for k, t in named.items() if t is not None]
    return [t for _, t in present], "".join(k for k, _ in present)


def _empty_like_mask(card: Card, shape: Sequence[int], dtype: torch.dtype, keep: bool) -> torch.Tensor:
    return card.empty(shape if keep else (0,), dtype)


@computed("native_layer_norm", "native_layer_norm.out", ir=("layer_norm",))
def _layer_norm(a: Args, outs: list[torch.Tensor]) -> None:
    ps, names = _params(w=a.weight, b=a.bias)
    Card(a._index)("layer_norm", a.input, *ps, out=outs, normalized_shape=tuple(int(s) for s in a.normalized_shape),
                   eps=float(a.eps), params=names)  # fmt: skip


@kernel("native_layer_norm_backward", ir=("layer_norm_backward",))
def layer_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    normalized_shape: list[int],
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, ...]:
    card = Card.of(grad_out, input, mean, rstd, weight, bias)
    ns = tuple(int(s) for s in normalized_shape)
    mask = (bool(output_mask[0]), bool(output_mask[1]) and weight is not None,
            bool(output_mask[2]) and bias is not None)  # fmt: skip
    pdt = weight.dtype if weight is not None else (bias.dtype if bias is not None else input.dtype)
    outs = [
        _empty_like_mask(card, input.shape, input.dtype, mask[0]),
        _empty_like_mask(card, ns, pdt, mask[1]),
        _empty_like_mask(card, ns, pdt, mask[2]),
    ]
    ps, names = _params(w=weight, b=bias)
    card("layer_norm_backward", grad_out, input, mean, rstd, *ps, out=outs, normalized_shape=ns, params=names,
         output_mask=mask)  # fmt: skip
    return tuple(_masked(o, m) for o, m in zip(outs, mask))


@computed("native_group_norm", "native_group_norm.out", ir=("group_norm",))
def _group_norm(a: Args, outs: list[torch.Tensor]) -> None:
    ps, names = _params(w=a.weight, b=a.bias)
    Card(a._index)("group_norm", a.input, *ps, out=outs, num_groups=int(a.group), eps=float(a.eps), params=names)


@kernel("native_group_norm_backward", ir=("group_norm_backward",))
def group_norm_backward(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    N: int,
    C: int,
    HxW: int,
    group: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, ...]:
    card = Card.of(grad_out, input, mean, rstd, weight)
    mask = (bool(output_mask[0]), bool(output_mask[1]), bool(output_mask[2]))
    pdt = weight.dtype if weight is not None else input.dtype
    outs = [
        _empty_like_mask(card, input.shape, input.dtype, mask[0]),
        _empty_like_mask(card, (int(C),), pdt, mask[1]),
        _empty_like_mask(card, (int(C),), pdt, mask[2]),
    ]
    ps, names = _params(w=weight)
    card("group_norm_backward", grad_out, input, mean, rstd, *ps, out=outs, num_groups=int(group), params=names,
         output_mask=mask)  # fmt: skip
    return tuple(_masked(o, m) for o, m in zip(outs, mask))


def batch_norm_forward(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
    *,
    update: str = "inplace",
) -> tuple[torch.Tensor, ...]:
    """IR batch_norm for every aten form: returns (y, save_mean, save_invstd, new_running_mean, new_running_var).

    ``update``: "inplace" writes the new running statistics into the running tensors (native_batch_norm),
    "new" returns them as new tensors (the functional form)."""
    card = Card.of(input, weight, bias, running_mean, running_var)
    if running_mean is None and not training:
        raise ValueError("batch_norm: evaluation (training=False) needs running_mean and running_var")
    c = input.shape[1] if input.dim() > 1 else 0
    ps, names = _params(w=weight, b=bias, m=running_mean, v=running_var)
    stat = torch.float32  # statistics in float32 for every input dtype, as PyTorch computes them
    y = tensors.new(input.shape, tensors.preserved_strides(input), input.dtype, card.index)
    save = [card.empty((c,) if training else (0,), stat) for _ in range(2)]
    if training and running_mean is not None:
        runs = (
            [running_mean, running_var]
            if update == "inplace"
            else [card.empty(running_mean.shape, running_mean.dtype), card.empty(running_var.shape, running_var.dtype)]
        )
    else:
        runs = [card.empty((0,), stat), card.empty((0,), stat)]
    outs = [y, *save, *runs]
    card("batch_norm", input, *ps, out=outs, training=bool(training), momentum=float(momentum), eps=float(eps),
         params=names)  # fmt: skip
    if not training:  # as on CUDA (and in PyTorch's shape function): the running statistics it normalized with
        outs[1] = card.one("typecast", running_mean, dtype=tensors.check_dtype(stat).value)
        outs[2] = card.one("rsqrt", card.one("add", card.cast(running_var, stat), float(eps)))
    return tuple(outs)


def _stats_form(fixed_training: bool | None, has_running: bool = True) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A (y, save_mean, save_invstd) overload: its arguments are ``input, weight, bias``, then ``running_mean,
    running_var`` if it has them, then ``training`` unless fixed, then ``momentum, eps``."""

    def form(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, *rest: Any) -> tuple:
        running, rest = (rest[:2], rest[2:]) if has_running else ((None, None), rest)
        training, rest = (fixed_training, rest) if fixed_training is not None else (bool(rest[0]), rest[1:])
        momentum, eps = rest
        return batch_norm_forward(input, weight, bias, *running, training, momentum, eps)[:3]

    return form


for _name, _form in {
    "native_batch_norm": _stats_form(None),
    "_native_batch_norm_legit": _stats_form(None),
    "_native_batch_norm_legit.no_stats": _stats_form(None, has_running=False),
    "_native_batch_norm_legit_no_training": _stats_form(False),
}.items():
    kernel(_name, ir=("batch_norm",))(_form)


@kernel("_native_batch_norm_legit_functional", ir=("batch_norm",))
def native_batch_norm_legit_functional(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    y, sm, si, rm, rv = batch_norm_forward(
        input, weight, bias, running_mean, running_var, training, momentum, eps, update="new"
    )
    if not training:  # evaluation leaves the running statistics as they were
        card = Card.of(input)
        rm, rv = card.one("copy", running_mean), card.one("copy", running_var)
    return y, sm, si, rm, rv


def _update_form(training_of: Callable[[Any], bool]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A (y, save_mean, save_invstd, reserve) overload of ``input, weight, bias, running_mean, running_var, momentum,
    eps``; ``training_of(running_mean)`` says whether it normalizes with the batch's statistics."""

    def form(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, running_mean: Any,
             running_var: Any, momentum: float, eps: float) -> tuple[torch.Tensor, ...]:  # fmt: skip
        training = training_of(running_mean)
        y, sm, si, _, _ = batch_norm_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)
        return y, sm, si, Card.of(input).empty((0,), torch.uint8)

    return form


for _name, _form in {
    "_batch_norm_with_update": _update_form(lambda running_mean: True),
    "_batch_norm_no_update": _update_form(lambda running_mean: running_mean is None),  # no running stats: batch's
}.items():
    kernel(_name, ir=("batch_norm",))(_form)


def batch_norm_grad(
    grad_out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    save_mean: torch.Tensor | None,
    save_invstd: torch.Tensor | None,
    train: bool,
    eps: float,
    output_mask: Sequence[bool],
) -> tuple[torch.Tensor | None, ...]:
    """IR batch_norm_backward: the forward's saved statistics when training, else the running ones."""
    card = Card.of(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd)
    mean, invstd = (save_mean, save_invstd) if train else (running_mean, running_var)
    if mean is None or invstd is None:
        raise ValueError(
            "batch_norm_backward: needs save_mean / save_invstd when training, running_mean / running_var otherwise"
        )
    c = input.shape[1]
    mask = tuple(bool(m) for m in output_mask)
    pdt = weight.dtype if weight is not None else input.dtype
    outs = [
        tensors.new(input.shape, _grad_input_strides(grad_out, input, train), input.dtype, card.index)
        if mask[0]
        else card.empty((0,), input.dtype),
        _empty_like_mask(card, (c,), pdt, mask[1]),
        _empty_like_mask(card, (c,), pdt, mask[2]),
    ]
    ps, names = _params(w=weight)
    card("batch_norm_backward", grad_out, input, mean, invstd, *ps, out=outs, training=bool(train), eps=float(eps),
         params=names, output_mask=mask)  # fmt: skip
    return tuple(_masked(o, m) for o, m in zip(outs, mask))


def _grad_input_strides(grad_out: torch.Tensor, input: torch.Tensor, train: bool) -> tuple[int, ...]:
    """batch norm's input gradient laid out as PyTorch's shape function lays it out: an element-wise result of the
    output gradient and the input when training, of the output gradient alone in evaluation."""
    from torch._prims_common import compute_elementwise_output_strides

    return compute_elementwise_output_strides(grad_out, input) if train else tensors.preserved_strides(grad_out)


def _backward_form(updating: bool) -> Callable[..., tuple[torch.Tensor | None, ...]]:
    """A batch-norm backward overload: ``grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
    train, eps, output_mask`` (native_batch_norm_backward), or with ``updating`` (batch_norm_backward) ``update`` in
    place of ``train`` and a ``reserve`` after: _batch_norm_with_update's forward trained, _batch_norm_no_update's
    normalized with batch statistics only when it had no running ones (its evaluation returns the running statistics
    as save_mean / save_invstd, as on CUDA)."""

    def form(grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, running_mean: Any,
             running_var: Any, save_mean: Any, save_invstd: Any, train: bool, eps: float, output_mask: list[bool],
             *reserve: Any) -> tuple[torch.Tensor | None, ...]:  # fmt: skip
        if updating:
            train = bool(train) or running_mean is None or running_var is None
        return batch_norm_grad(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                               output_mask)  # fmt: skip

    return form


kernel("native_batch_norm_backward", ir=("batch_norm_backward",))(_backward_form(updating=False))
kernel("batch_norm_backward", ir=("batch_norm_backward",))(_backward_form(updating=True))


def _rms_norm_forward(
    x: torch.Tensor, shape: tuple[int, ...], weight: torch.Tensor | None, eps: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """IR rms_norm: (y, rstd), rstd float32 with the normalized dims kept as ones."""
    card = Card.of(x, weight)
    y = card.empty(x.shape, torch.result_type(x, weight) if weight is not None else x.dtype)
    axis = x.dim() - len(shape)
    rstd = card.empty((*x.shape[:axis], *(1,) * len(shape)), torch.float32)
    ps, names = _params(w=weight)
    card("rms_norm", x, *ps, out=[y, rstd], normalized_shape=shape, eps=eps, params=names)
    return y, rstd


def _rms_norm_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    shape: tuple[int, ...],
    mask: tuple[bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """IR rms_norm_backward: the gradients of x and of the weight (None where ``mask`` says not needed)."""
    card = Card.of(grad, x)
    mask3 = (mask[0], weight is not None and mask[1], False)
    outs = [_empty_like_mask(card, x.shape, x.dtype, mask3[0]),
            _empty_like_mask(card, shape, weight.dtype if weight is not None else x.dtype, mask3[1]),
            card.empty((0,), x.dtype)]  # fmt: skip
    ps, names = _params(w=weight)
    card("rms_norm_backward", grad, x, rstd, *ps, out=outs, normalized_shape=shape, params=names, output_mask=mask3)
    return _masked(outs[0], mask3[0]), _masked(outs[1], mask3[1])


class _RMSNorm(torch.autograd.Function):
    """rms_norm through IR rms_norm / rms_norm_backward (PyTorch 2.13 has no rms_norm kernel to override)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shape: tuple[int, ...], weight: torch.Tensor | None, eps: float | None):
        y, rstd = _rms_norm_forward(x, shape, weight, eps)
        ctx.save_for_backward(x, rstd, weight)
        ctx.shape = shape
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor):
        x, rstd, weight = ctx.saved_tensors
        mask = (ctx.needs_input_grad[0], ctx.needs_input_grad[2])
        gx, gw = _rms_norm_backward(grad, x, rstd, weight, ctx.shape, mask)
        return gx, None, gw, None


@functools.cache
def _rms_norm_op() -> Any:
    """``ktt::rms_norm``: the same kernels as an opaque custom op with a fake implementation, for traced code
    (``torch.compile``, ``torch.export``): tracing runs ops on fake tensors, which the card's kernels cannot read,
    so the graph holds this op, and running the graph runs the kernels. Made on first use (eager code never needs
    it)."""

    @torch.library.custom_op("ktt::rms_norm_backward", mutates_args=())
    def backward_op(
        grad: torch.Tensor,
        x: torch.Tensor,
        rstd: torch.Tensor,
        weight: torch.Tensor | None,
        normalized_shape: list[int],
        mask: list[bool],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        gx, gw = _rms_norm_backward(grad, x, rstd, weight, tuple(normalized_shape), (mask[0], mask[1]))
        card = Card.of(x)
        return (card.empty((0,), x.dtype) if gx is None else gx), (card.empty((0,), x.dtype) if gw is None else gw)

    @backward_op.register_fake
    def _(grad, x, rstd, weight, normalized_shape, mask):
        gw = x.new_empty(tuple(normalized_shape), dtype=weight.dtype) if mask[1] and weight is not None else None
        return x.new_empty(x.shape if mask[0] else (0,)), (x.new_empty((0,)) if gw is None else gw)

    @torch.library.custom_op("ktt::rms_norm", mutates_args=())
    def op(
        x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None, eps: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _rms_norm_forward(x, tuple(normalized_shape), weight, eps)

    @op.register_fake
    def _(x, normalized_shape, weight, eps):
        axis = x.dim() - len(normalized_shape)
        y = x.new_empty(x.shape, dtype=torch.result_type(x, weight) if weight is not None else x.dtype)
        return y, x.new_empty((*x.shape[:axis], *(1,) * len(normalized_shape)), dtype=torch.float32)

    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, shape, weight, _ = inputs
        ctx.save_for_backward(x, output[1], weight)
        ctx.shape = list(shape)

    def backward(ctx: Any, grad: torch.Tensor, _grad_rstd: Any) -> tuple:
        x, rstd, weight = ctx.saved_tensors
        mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2]]
        gx, gw = backward_op(grad, x, rstd, weight, ctx.shape, mask)
        return (gx if mask[0] else None), None, (gw if mask[1] else None), None

    op.register_autograd(backward, setup_context=setup_context)
    return op


def _plain(*xs: torch.Tensor | None) -> bool:
    """True when every tensor is an ordinary one (no fake, functional or other subclass tensor of a tracer)."""
    return all(x is None or type(x) is torch.Tensor or type(x) is torch.nn.Parameter for x in xs)


@kernel("rms_norm", ir=("rms_norm", "rms_norm_backward"), dispatch_key="AutogradPrivateUse1")
@kernel("rms_norm", ir=("rms_norm",))  # reached when the autograd keys are off (torch.inference_mode)
def rms_norm(
    input: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None, eps: float | None = None
) -> torch.Tensor:
    shape = tuple(int(s) for s in normalized_shape)
    if _plain(input, weight):
        return _RMSNorm.apply(input, shape, weight, eps)
    return _rms_norm_op()(input, list(shape), weight, eps)[0]  # traced: an op with a fake implementation


# -------------------------------------------------------------------------------------------------------- attention
def _fp32_accurate(*ts: torch.Tensor) -> bool:
    """Whether float32 attention must be float32-accurate (``fp32_matmul="highest"``, PyTorch's default): then it
    takes the math path (split matmuls, an exact softmax), as PyTorch's flash kernels refuse float32 on CUDA; the
    fused kernel rounds P to bfloat16 and reads float32 operands as TF32 ("high" / "medium")."""
    return any(t.dtype == torch.float32 for t in ts) and precision.fp32_matmul_mode() == "highest"


@kernel("scaled_dot_product_attention", ir=("scaled_dot_product_attention",), dispatch_key="AutogradPrivateUse1",
        note="via _scaled_dot_product_fused_attention_overrideable; dropout etc.: the math path")  # fmt: skip
@kernel("scaled_dot_product_attention", ir=("scaled_dot_product_attention",))  # under torch.inference_mode
def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    fused = (
        dropout_p == 0.0
        and not _fp32_accurate(query, key, value)
        and query.dim() in (3, 4)
        and key.dim() == query.dim() == value.dim()
        and not (attn_mask is not None and (attn_mask.requires_grad or is_causal))
        and (enable_gqa or query.shape[-3] == key.shape[-3])
    )
    if not fused:
        if attn_mask is not None and attn_mask.dtype == torch.bool:  # the math op adds its mask: bool as 0 / -inf,
            # as PyTorch's own entry point converts it before choosing a kernel
            attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill_(~attn_mask, float("-inf"))
        return aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa
        )[0]
    three = query.dim() == 3
    if three:  # (H, S, D): one batch entry
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    out = aten._scaled_dot_product_fused_attention_overrideable(
        query, key, value, attn_mask, 0.0, is_causal, False, scale=scale
    )[0]
    return out.squeeze(0) if three else out


@kernel("_scaled_dot_product_fused_attention_overrideable", ir=("scaled_dot_product_attention",))
def sdpa_fused(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    scale: float | None = None,
) -> tuple[Any, ...]:
    if dropout_p:
        raise KohakuTTUnsupportedOperator(
            f"scaled_dot_product_attention on tt runs without dropout (got dropout_p={dropout_p}); "
            "F.scaled_dot_product_attention takes the math path for dropout"
        )
    card = Card.of(query, key, value, attn_bias)
    b, h, sq, _ = query.shape
    skv, dv = key.shape[2], value.shape[3]
    dtype = torch.promote_types(torch.promote_types(query.dtype, key.dtype), value.dtype)
    out = tensors.new((b, h, sq, dv), _query_layout(query, dv), dtype, card.index)
    lse = card.empty((b, h, sq), torch.float32)
    mask = [] if attn_bias is None else [attn_bias]
    card("scaled_dot_product_attention", query, key, value, *mask, out=[out, lse], is_causal=bool(is_causal),
         scale=scale)  # fmt: skip
    # PyTorch's shape function returns 0-dim philox seed and offset tensors (unused without dropout), as CUDA does
    seed, offset = card.empty((), torch.int64), card.empty((), torch.int64)
    return out, lse, None, None, sq, skv, seed, offset, None


def _query_layout(query: torch.Tensor, dv: int) -> tuple[int, ...]:
    """Strides for attention's (B, H, Sq, Dv) output stored in the query's dim order, as PyTorch's shape function
    makes it (a query transposed from (B, S, H, D) gives an output whose ``transpose(1, 2)`` is contiguous)."""
    if dv == query.shape[3]:
        return tensors.preserved_strides(query)
    shape = (*query.shape[:3], dv)
    order = sorted(range(4), key=lambda i: query.stride(i), reverse=True)  # stable: ties keep the dim order
    strides, step = [0] * 4, 1
    for i in reversed(order):
        strides[i] = step
        step *= shape[i]
    return tuple(strides)


@kernel("_scaled_dot_product_fused_attention_overrideable_backward", ir=("sdpa_backward",))
def sdpa_fused_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    grad_input_mask: list[bool],
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    philox_seed: Any,
    philox_offset: Any,
    scale: float | None = None,
) -> tuple[torch.Tensor | None, ...]:
    if len(grad_input_mask) > 3 and grad_input_mask[3]:
        raise KohakuTTUnsupportedOperator(
            "scaled_dot_product_attention on tt gives no gradient for attn_mask; F.scaled_dot_product_attention "
            "takes the math path when the mask requires grad"
        )
    card = Card.of(grad_out, query, key, value, out, logsumexp, attn_bias)
    outs = [tensors.new(t.shape, tensors.preserved_strides(t), t.dtype, card.index) for t in (query, key, value)]
    mask = [] if attn_bias is None else [attn_bias]
    card("sdpa_backward", grad_out, query, key, value, out, logsumexp, *mask, out=outs, is_causal=bool(is_causal),
         scale=scale)  # fmt: skip
    # as PyTorch's shape function: the three gradients always (all are computed), and one like the mask when there is
    # one (never written: tt refuses a gradient for the mask above)
    bias = None if attn_bias is None else tensors.new(attn_bias.shape, tensors.preserved_strides(attn_bias),
                                                      attn_bias.dtype, card.index)  # fmt: skip
    return (*outs, bias)


def _additive_mask(
    mask: torch.Tensor | None, mask_type: int | None, b: int, h: int, lq: int, lk: int, dtype: torch.dtype
):
    """The fast paths' merged mask as an additive (B, H, Lq, Lk)-broadcastable float mask: type 0 is (Lq, Lk), type
    1 a key padding mask (B, Lk), type 2 (B, H, Lq, Lk); a bool mask is True where a key is masked out."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        card = Card.of(mask)
        zeros = card.one("zeros", shape=tuple(mask.shape), dtype=tensors.check_dtype(dtype).value)
        mask = card.one("masked_fill", zeros, mask, float("-inf"))
    elif mask.dtype != dtype:
        mask = mask.to(dtype)
    if mask_type == 1:
        return mask.view(b, 1, 1, lk)
    if mask.dim() == 2:
        return mask.view(1, 1, lq, lk)
    return mask.view(b, -1, lq, lk) if mask.dim() == 3 else mask


def _project(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, b: int, h: int) -> torch.Tensor:
    """(B, L, D) @ w^T + bias as (B, H, L, D / H)."""
    y = F.linear(x, w, bias)
    return y.view(b, y.shape[1], h, -1).transpose(1, 2)


@kernel("_native_multi_head_attention", kind="composite", ir=("linear", "scaled_dot_product_attention", "softmax"),
        note="nn.MultiheadAttention inference fast path: projections, SDPA or explicit weights")  # fmt: skip
def native_multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    embed_dim: int,
    num_head: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    mask: torch.Tensor | None = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    mask_type: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if query.dim() != 3 or embed_dim % num_head:
        raise KohakuTTUnsupportedOperator(
            f"_native_multi_head_attention on tt takes batch-first (B, L, {embed_dim}) input with the embedding "
            f"dim divisible by {num_head} heads, got query {tuple(query.shape)}; call nn.MultiheadAttention in "
            "training mode or with grad enabled to take the general path"
        )
    b, lq, _ = query.shape
    lk = key.shape[1]
    wq, wk, wv = qkv_weight.chunk(3)
    bq, bk, bv = qkv_bias.chunk(3)
    q, k, v = _project(query, wq, bq, b, num_head), _project(key, wk, bk, b, num_head), _project(value, wv, bv, b,
                                                                                                num_head)  # fmt: skip
    attn_mask = _additive_mask(mask, mask_type, b, num_head, lq, lk, query.dtype)
    weights = None
    if need_weights:
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(embed_dim // num_head))
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = torch.softmax(scores, -1)
        o = torch.matmul(weights, v)
        if average_attn_weights:
            weights = weights.mean(1)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    out = F.linear(o.transpose(1, 2).reshape(b, lq, embed_dim), proj_weight, proj_bias)
    return out, weights


@kernel("_transformer_encoder_layer_fwd", kind="composite",
        ir=("layer_norm", "linear", "scaled_dot_product_attention", "gelu", "relu"),
        note="nn.TransformerEncoderLayer's inference fast path, composed of the tt ops")  # fmt: skip
def transformer_encoder_layer_fwd(
    src: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor,
    mask: torch.Tensor | None = None,
    mask_type: int | None = None,
) -> torch.Tensor:
    def attend(x: torch.Tensor) -> torch.Tensor:
        return native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                           proj_bias, mask, False, True, mask_type)[0]  # fmt: skip

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    def norm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), w, bias, eps)

    if norm_first:
        x = src + attend(norm(src, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(src + attend(src), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


# ----------------------------------------------------------------------------------------------------------- losses
def _reduce(card: Card, loss: torch.Tensor, reduction: int, out: torch.Tensor) -> None:
    """``loss`` (per element) reduced as aten's ``reduction`` asks, into ``out``."""
    if reduction == MEAN:
        card("mean", loss, out=[out])
    elif reduction == SUM:
        card("sum", loss, out=[out])
    else:
        card("copy", loss, out=[out])


def _nll_terms(card: Card, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore: int):
    """(class dim, target as int32 with ignored entries at class 0, per-entry weight: 0 where ignored)."""
    cdim = 1 if x.dim() >= 2 else 0
    t = card.cast(target, torch.int32)
    valid = card.one("ne", t, int(ignore))
    safe = card.one("where", valid, t, 0)
    if weight is None:
        w = card.cast(valid, x.dtype)
    else:
        picked = card.one("index_select", weight, safe.reshape(-1), dim=0).reshape(target.shape)
        w = card.one("where", valid, card.cast(picked, x.dtype), 0.0)
    return cdim, safe, w


def _nll_forward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    x, target = a.self, a.target
    cdim, safe, w = _nll_terms(card, x, target, a.weight, a.ignore_index)
    picked = card.one("gather", x, safe.unsqueeze(cdim), dim=cdim).squeeze(cdim)
    loss = card.one("mul", picked, w)
    out, total = outs
    if a.reduction == 0:
        card("neg", loss, out=[out])
        card("zeros", out=[total], shape=(), dtype=tensors.TO_IR[total.dtype].value)
        return
    card("sum", w, out=[total])
    s = card.one("sum", loss)
    if a.reduction == SUM:
        card("neg", s, out=[out])
    else:
        card("div", card.one("neg", s), total, out=[out])


def _nll_backward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    x, target = a.self, a.target
    cdim, safe, w = _nll_terms(card, x, target, a.weight, a.ignore_index)
    coef = card.one("mul", card.one("neg", w), card.cast(a.grad_output, x.dtype))
    if a.reduction == MEAN:
        coef = card.one("div", coef, card.cast(a.total_weight, x.dtype))
    zeros = card.one("zeros", shape=tuple(x.shape), dtype=tensors.TO_IR[x.dtype].value)
    card("scatter", zeros, safe.unsqueeze(cdim), coef.unsqueeze(cdim), out=outs, dim=cdim)


computed("nll_loss_forward", "nll_loss_forward.output", "nll_loss2d_forward", "nll_loss2d_forward.output",
         ir=("gather", "mul", "sum", "div"))(_nll_forward)  # fmt: skip
computed("nll_loss_backward", "nll_loss_backward.grad_input", "nll_loss2d_backward", "nll_loss2d_backward.grad_input",
         ir=("scatter", "mul", "div"))(_nll_backward)  # fmt: skip


@computed("mse_loss", "mse_loss.out", ir=("sub", "square", "mean", "sum"))
def _mse(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    d = card.one("sub", a.self, a.target)
    if a.reduction == 0:
        card("square", d, out=outs)
    else:
        _reduce(card, card.one("square", d), a.reduction, outs[0])


def _grad_scale(a: Args, factor: float) -> float:
    """``factor``, divided by the element count for a mean reduction (the count the forward averaged over)."""
    if a.reduction == MEAN:
        n = torch.broadcast_shapes(a.self.shape, a.target.shape).numel()
        return factor / n if n else float("nan")
    return factor


@computed("mse_loss_backward", "mse_loss_backward.grad_input", ir=("sub", "mul"))
def _mse_backward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    d = card.one("sub", a.self, a.target)
    card("mul", card.one("mul", d, _grad_scale(a, 2.0)), a.grad_output, out=outs)


@computed("binary_cross_entropy", "binary_cross_entropy.out", ir=("log", "clamp", "mul", "sub"))
def _bce(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    x, t = a.self, a.target
    log_x = card.one("clamp", card.one("log", x), min=-100.0)  # PyTorch clamps the logs at -100
    log_1mx = card.one("clamp", card.one("log", card.one("sub", 1.0, x)), min=-100.0)
    loss = card.one("sub", card.one("mul", card.one("sub", t, 1.0), log_1mx), card.one("mul", t, log_x))
    if a.weight is not None:
        loss = card.one("mul", loss, a.weight)
    _reduce(card, loss, a.reduction, outs[0])


@computed("binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input",
          ir=("sub", "mul", "clamp", "div"))  # fmt: skip
def _bce_backward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    x, t = a.self, a.target
    denom = card.one("clamp", card.one("mul", card.one("sub", 1.0, x), x), min=1e-12)  # PyTorch's EPSILON
    g = card.one("div", card.one("sub", x, t), denom)
    if a.weight is not None:
        g = card.one("mul", g, a.weight)
    card("mul", card.one("mul", g, _grad_scale(a, 1.0)), a.grad_output, out=outs)


def _l1_like(a: Args, outs: list[torch.Tensor], threshold: float, quad: float, lin_scale: float, lin_off: float):
    """where(|d| < threshold, quad * d^2, lin_scale * |d| - lin_off): smooth L1 and Huber losses."""
    card = Card(a._index)
    z = card.one("abs", card.one("sub", a.self, a.target))
    if threshold == 0:
        loss = z
    else:
        small = card.one("mul", card.one("square", z), quad)
        large = card.one("sub", card.one("mul", z, lin_scale), lin_off) if lin_scale != 1 else card.one(
            "sub", z, lin_off)  # fmt: skip
        loss = card.one("where", card.one("lt", z, threshold), small, large)
    _reduce(card, loss, a.reduction, outs[0])


@computed("smooth_l1_loss", "smooth_l1_loss.out", ir=("abs", "square", "where", "mean", "sum"))
def _smooth_l1(a: Args, outs: list[torch.Tensor]) -> None:
    beta = float(a.beta)
    _l1_like(a, outs, beta, 0.5 / beta if beta else 0.0, 1.0, 0.5 * beta)


@computed("huber_loss", "huber_loss.out", ir=("abs", "square", "where", "mean", "sum"))
def _huber(a: Args, outs: list[torch.Tensor]) -> None:
    delta = float(a.delta)
    _l1_like(a, outs, delta, 0.5, delta, 0.5 * delta * delta)


@computed("smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input", ir=("sub", "clamp", "sign", "mul"))
def _smooth_l1_backward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    d = card.one("sub", a.self, a.target)
    beta = float(a.beta)
    g = card.one("sign", d) if beta == 0 else card.one("clamp", card.one("div", d, beta), min=-1.0, max=1.0)
    card("mul", card.one("mul", g, _grad_scale(a, 1.0)), a.grad_output, out=outs)


@computed("huber_loss_backward", "huber_loss_backward.out", ir=("sub", "clamp", "mul"))
def _huber_backward(a: Args, outs: list[torch.Tensor]) -> None:
    card = Card(a._index)
    delta = float(a.delta)
    g = card.one("clamp", card.one("sub", a.self, a.target), min=-delta, max=delta)
    card("mul", card.one("mul", g, _grad_scale(a, 1.0)), a.grad_output, out=outs)
