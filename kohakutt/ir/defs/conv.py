"""IR ops of the conv family: one N-d convolution (1-, 2- and 3-d; grouped, dilated, strided, padded, transposed,
channels-last) and its backward.

Numerics: the card runs a convolution as an implicit GEMM (im2col rows of the input times the weight matrix), so its
products and accumulation are a matmul's: the input (activations, in0) in SrcB, the weights (in1) in SrcA, at the
scope's fidelity. Defaults are TT-NN 0.81.1's conv2d ones (tt-metal ``conv2d_utils.cpp``
``get_conv_default_compute_kernel_config``): HiFi4, ``math_approx_mode`` on, ``packer_l1_acc`` off and
``fp32_dest_acc_en`` only for a float32 input with float32 weights (fp32_acc is left unset here and filled so by
:func:`conv_numerics`). An fp32 DST sums in fp32; a bf16 DST is modelled as rounded once per block of one kernel
row (kw x C/groups products: TT-NN's activation block width), where the card also rounds after each 16-wide MVMUL.
float32 data follows ``fp32_matmul`` as a matmul does (the implicit GEMM is one): split into bf16 parts under
"highest" (the default), one TF32 pass under "high", HiFi2 under "medium".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kohakutt.ir.defs.matmul import default_fidelity, float_tensor
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, define

FAMILY = "conv"
CONV_DEFAULT = Numerics(None, None, True)  # fidelity: HiFi4 unless fp32_matmul says otherwise (conv_numerics)

CONV_ATTRS: dict[str, Any] = {
    "stride": 1,
    "padding": 0,
    "dilation": 1,
    "groups": 1,
    "transposed": False,
    "output_padding": 0,
    "channels_last": False,
}


def conv_numerics(num: Numerics, x: DType, w: DType) -> tuple[Fidelity, bool]:
    """The fidelity and fp32 accumulation a one-pass convolution runs with: the scope's, else TT-NN's conv2d defaults
    (HiFi2 for float32 operands under ``fp32_matmul="medium"``). Under ``fp32_matmul="highest"`` a float32
    convolution is split like a matmul (``kohakutt.ir.defs.matmul.split_counts``): parts at HiFi4, fp32 DST."""
    acc = num.fp32_acc if num.fp32_acc is not None else (x is DType.FLOAT32 and w is DType.FLOAT32)
    return default_fidelity(num, (x, w), Fidelity.HiFi4), bool(acc)


def per_dim(value: Any, d: int, name: str, op: str, minimum: int = 0) -> tuple[int, ...]:
    """An int-or-sequence attribute as one int per spatial dim, checked against ``minimum``."""
    vals = (value,) * d if isinstance(value, int) else tuple(value)
    if len(vals) != d or not all(isinstance(v, int) and v >= minimum for v in vals):
        raise ShapeError(f"{op}: {name} must be an int >= {minimum} or {d} of them, got {value!r}")
    return tuple(int(v) for v in vals)


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution's shapes resolved from its operands and attributes (input in channels-first order)."""

    d: int  # spatial dims
    batched: bool
    n: int
    c_in: int
    c_out: int
    groups: int
    spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]  # (before, after) per spatial dim
    dilation: tuple[int, ...]
    output_padding: tuple[int, ...]
    transposed: bool
    channels_last: bool
    out_spatial: tuple[int, ...]

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The output's shape in the input's own layout (channels last when the input is)."""
        body = (*self.out_spatial, self.c_out) if self.channels_last else (self.c_out, *self.out_spatial)
        return (self.n, *body) if self.batched else body

    @property
    def in_shape(self) -> tuple[int, ...]:
        body = (*self.spatial, self.c_in) if self.channels_last else (self.c_in, *self.spatial)
        return (self.n, *body) if self.batched else body


def conv_geometry(x: Sequence[int], w: Sequence[int], attrs: dict[str, Any], op: str = "conv") -> ConvGeometry:
    """Check a convolution's operand shapes and attributes; a typed error says what does not fit."""
    d = len(w) - 2
    if d not in (1, 2, 3):
        raise ShapeError(f"{op}: the weight must be 3-, 4- or 5-D (out, in / groups, *kernel), got shape {tuple(w)}")
    if len(x) not in (d + 1, d + 2):
        raise ShapeError(
            f"{op}: a {d}-d convolution takes a {d + 2}-D (batched) or {d + 1}-D input, got shape {tuple(x)}"
        )
    batched = len(x) == d + 2
    n = x[0] if batched else 1
    body = tuple(x[1:] if batched else x)
    cl = bool(attrs["channels_last"])
    c_in, spatial = (body[-1], body[:-1]) if cl else (body[0], body[1:])
    groups = attrs["groups"]
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}")
    transposed = bool(attrs["transposed"])
    if c_in % groups:
        raise ShapeError(f"{op}: {c_in} input channels do not split into {groups} groups")
    if transposed:
        if w[0] != c_in:
            raise ShapeError(
                f"{op}: a transposed convolution's weight is (in_channels, out_channels / groups, "
                f"*kernel): got {tuple(w)} for an input with {c_in} channels"
            )
        c_out = w[1] * groups
    else:
        if w[1] * groups != c_in:
            raise ShapeError(
                f"{op}: the weight {tuple(w)} takes {w[1] * groups} input channels ({w[1]} per group, "
                f"{groups} groups) but the input has {c_in}"
            )
        if w[0] % groups:
            raise ShapeError(f"{op}: {w[0]} output channels do not split into {groups} groups")
        c_out = w[0]
    kernel = tuple(w[2:])
    if 0 in kernel:
        raise ShapeError(f"{op}: the kernel {kernel} has an empty dim")
    stride = per_dim(attrs["stride"], d, "stride", op, 1)
    dilation = per_dim(attrs["dilation"], d, "dilation", op, 1)
    output_padding = per_dim(attrs["output_padding"], d, "output_padding", op, 0)
    pad = attrs["padding"]
    if isinstance(pad, str):
        if pad not in ("same", "valid") or transposed:
            raise ShapeError(
                f"{op}: padding {pad!r} is not supported here; use 'same' or 'valid' (normal "
                "convolutions only) or explicit ints"
            )
        if pad == "same" and any(s != 1 for s in stride):
            raise ShapeError(f"{op}: padding='same' needs stride 1, got stride {stride}")
        total = [0 if pad == "valid" else dl * (k - 1) for dl, k in zip(dilation, kernel)]
        padding = tuple((t // 2, t - t // 2) for t in total)  # an odd total pads one more after, as PyTorch
    else:
        padding = tuple((p, p) for p in per_dim(pad, d, "padding", op, 0))
    if transposed:
        for s, dl, op_ in zip(stride, dilation, output_padding):
            if op_ >= max(s, dl):
                raise ShapeError(
                    f"{op}: output_padding {output_padding} must be smaller than the stride or the "
                    f"dilation in each dim ({stride}, {dilation})"
                )
        out = tuple(
            (i - 1) * s - lo - hi + dl * (k - 1) + op_ + 1
            for i, s, (lo, hi), dl, k, op_ in zip(spatial, stride, padding, dilation, kernel, output_padding)
        )
    else:
        if any(output_padding):
            raise ShapeError(f"{op}: output_padding applies only to transposed convolutions")
        out = tuple(
            (i + lo + hi - dl * (k - 1) - 1) // s + 1
            for i, s, (lo, hi), dl, k in zip(spatial, stride, padding, dilation, kernel)
        )
    if any(o < 1 for o in out):
        raise ShapeError(
            f"{op}: the kernel {kernel} (dilation {dilation}) is larger than the padded input "
            f"{tuple(spatial)} (padding {[p for p, _ in padding]}): the output would be {out}"
        )
    return ConvGeometry(
        d,
        batched,
        n,
        c_in,
        c_out,
        groups,
        spatial,
        kernel,
        stride,
        padding,
        dilation,
        output_padding,
        transposed,
        cl,
        out,
    )


def _conv(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    if len(inputs) > 3:
        raise ShapeError(f"conv takes x, w and an optional bias, got {len(inputs)} operands")
    x, w = float_tensor(inputs[0], "conv", "x"), float_tensor(inputs[1], "conv", "w")
    g = conv_geometry(x.shape, w.shape, attrs)
    specs = [x, w]
    if len(inputs) == 3:
        bias = float_tensor(inputs[2], "conv", "bias")
        if bias.shape != (g.c_out,):
            raise ShapeError(f"conv: the bias must have shape ({g.c_out},), one per output channel, got {bias.shape}")
        specs.append(bias)
    return [TensorSpec(g.out_shape, promote(*(s.dtype for s in specs)), x.layout)]


def _conv_backward(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    grad, x, w = (float_tensor(s, "conv_backward", n) for s, n in zip(inputs, ("grad_out", "x", "w")))
    g = conv_geometry(x.shape, w.shape, attrs, "conv_backward")
    if grad.shape != g.out_shape:
        raise ShapeError(
            f"conv_backward: grad_out has shape {grad.shape} but the convolution's output is {g.out_shape}"
        )
    mask = tuple(attrs["output_mask"])
    if len(mask) != 3:
        raise ShapeError(f"conv_backward: output_mask is three bools (input, weight, bias), got {mask!r}")
    dt = promote(grad.dtype, x.dtype, w.dtype)
    shapes = (x.shape, w.shape, (g.c_out,))
    return [TensorSpec(tuple(s) if m else (0,), dt, x.layout) for s, m in zip(shapes, mask)]


define(
    "conv",
    FAMILY,
    ["x", "w", "*bias"],
    _conv,
    attrs=dict(CONV_ATTRS),
    numerics=CONV_DEFAULT,
    doc="A 1-, 2- or 3-d convolution as PyTorch's (cross-correlation): x is (N, C, *spatial) or unbatched "
    "(C, *spatial), or channels-last (N, *spatial, C) with channels_last=True (the output then is too); w is "
    "(out, in / groups, *kernel), or (in, out / groups, *kernel) when transposed; optional bias (out,). "
    "stride / padding / dilation / output_padding are ints or one per dim; padding may be 'same' or 'valid'. "
    "Numerics: an implicit-GEMM matmul (TT-NN conv2d): products at the scope's fidelity (default HiFi4, "
    "input in SrcB, weights in SrcA), an fp32 DST for float32 x and w, else a bf16 DST rounded once per "
    "kernel row of products; the bias added after the DST is packed to the intermediate format; the result "
    "rounded to the output dtype.",
)
define(
    "conv_backward",
    FAMILY,
    ["grad_out", "x", "w"],
    _conv_backward,
    attrs={**CONV_ATTRS, "output_mask": (True, True, True)},
    numerics=CONV_DEFAULT,
    outputs=3,
    doc="The gradients (grad_input, grad_weight, grad_bias) of conv for grad_out, with conv's attributes; an "
    "output whose output_mask entry is False comes back empty, shape (0,). Numerics: three implicit GEMMs "
    "with conv's products at the scope's fidelity (grad_out in SrcB); grad_input accumulates as conv does, "
    "grad_weight sums over the batch with a bf16 DST rounded once per batch entry, grad_bias is the reduce "
    "unit's sum (bf16 DST rounded per 32-value tile); fp32 DST for float32 operands or fp32_acc=True; results "
    "rounded to the output dtype.",
)
