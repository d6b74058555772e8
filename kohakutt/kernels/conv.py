"""The conv family on each backend: the simulator's implicit-GEMM model of the card's convolutions, and TT-NN's calls.

The engine runs torch's CPU convolutions on the operands as the multiplier sees them (``merged_products``: the
input in SrcB, the weights in SrcA at the fidelity), which gives the card's products summed in fp32 (up to order).
A bf16 DST is modelled per kernel row: the partial convolution over one row of the kernel (kw x C/groups products,
TT-NN's activation block width) is summed in fp32, added to DST and DST is rounded to bf16, row after row.

Providers: ``ttnn`` models TT-NN's kernels and refuses what TT-NN cannot run (transposed 3-d convolutions; 3-d
convolutions with uneven 'same' padding): ``ttnn.conv1d`` / ``conv2d`` / ``conv_transpose2d`` take NHWC input, so an
NCHW input costs two permutes, and a grouped convolution runs as a dense one over block-diagonal weights (TT-NN
expands the weights), which the estimate counts. ``ktt`` is Kohaku-TT's own kernel: every case, groups run as
separate GEMMs, channels-first or channels-last read in place. The numerics are the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.conv import ConvGeometry, conv_geometry, conv_numerics
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath, cost
from kohakutt.kernels.matmul import FIDELITY_AND_DTYPE_NAMES, compute_config, dtype_of, merged_products, ttnn_dtype
from kohakutt.kernels.registry import SimCall, sim, ttnn

TTNN_NAMES = (
    "conv1d", "conv2d", "conv_transpose2d", "experimental.conv3d", "experimental.prepare_conv3d_weights",
    "Conv2dConfig", "Conv3dConfig", "permute", "reshape", "to_layout", "from_device", "to_device",
    "ROW_MAJOR_LAYOUT", "TILE_LAYOUT", "init_device_compute_kernel_config",
    *FIDELITY_AND_DTYPE_NAMES,
)  # fmt: skip

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


# ------------------------------------------------------------------------------------------------------- engine
def _round_bf16_(t: torch.Tensor) -> None:
    t.copy_(t.to(torch.bfloat16))


def _fast_layout(ts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors in channels-last memory order, where torch's CPU convolutions (oneDNN) run fastest."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(ts[0].ndim, torch.contiguous_format)
    return [t.contiguous(memory_format=fmt) for t in ts]


def _flat_pads(pads: Sequence[tuple[int, int]]) -> list[int]:
    """(before, after) per spatial dim as F.pad wants them: last dim first."""
    return [p for lo_hi in reversed(pads) for p in lo_hi]


def conv_forward(
    xs: Sequence[torch.Tensor],
    ws: Sequence[torch.Tensor],
    *,
    stride: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
    fp32_acc: bool,
) -> torch.Tensor:
    """``sum_i conv(xs[i], ws[i])`` (N, C, *S) -> (N, K, *O), accumulated as DST: fp32, or bf16 rounded per kernel
    row (one block for a 1-d kernel)."""
    d = len(stride)
    xs, ws = _fast_layout(xs), _fast_layout(ws)
    pad = [lo for lo, _ in pads]
    if any(lo != hi for lo, hi in pads):  # uneven ('same') padding: pad first, convolve unpadded
        xs, pad = [F.pad(x, _flat_pads(pads)) for x in xs], [0] * d
    conv = _CONV[d]
    if fp32_acc or d == 1:
        out = sum(conv(x, w, None, stride, pad, dilation, groups) for x, w in zip(xs, ws))
        if not fp32_acc:
            _round_bf16_(out)
        return out  # type: ignore[return-value]
    n, k_out, k = xs[0].shape[0], ws[0].shape[0], ws[0].shape[2:]
    padded = [i + 2 * p for i, p in zip(xs[0].shape[2:], pad)]
    o = [(p - dl * (kk - 1) - 1) // s + 1 for p, dl, kk, s in zip(padded, dilation, k, stride)]
    rows = list(itertools.product(*(range(kk) for kk in k[:-1])))
    row_stride, row_dil = (1,) * (d - 1) + (stride[-1],), (1,) * (d - 1) + (dilation[-1],)
    kg = k_out // groups
    if all(s == 1 for s in stride[:-1]):
        # One convolution with every kernel row's weights stacked on the output channels (per group): its output,
        # shifted by a kernel row's offset in the leading dims, is that row's partial sum.
        y = None
        for x, w in zip(xs, ws):
            w_rows = w.reshape(groups, kg, w.shape[1], len(rows), k[-1]).permute(0, 3, 1, 2, 4)
            w_rows = w_rows.reshape(groups * len(rows) * kg, w.shape[1], *(1,) * (d - 1), k[-1])
            part = conv(x, _fast_layout([w_rows])[0], None, row_stride, pad, row_dil, groups)
            y = part if y is None else y.add_(part)
        y = y.unflatten(1, (groups, len(rows), kg))  # type: ignore[union-attr]
        acc = None
        for j, idx in enumerate(rows):
            part = y[
                (
                    slice(None),
                    slice(None),
                    j,
                    slice(None),
                    *(slice(i * dl, i * dl + oo) for i, dl, oo in zip(idx, dilation, o)),
                )
            ]
            if acc is None:
                acc = part.to(torch.bfloat16).float()  # in y's memory order
                continue
            if j == len(rows) - 1:  # the last row's sum lands in a contiguous (N, K, *O) tensor
                acc = torch.add(acc, part, out=torch.empty((n, groups, kg, *o), dtype=torch.float32))
            else:
                acc.add_(part)
            _round_bf16_(acc)
        return acc.flatten(1, 2)  # type: ignore[union-attr]
    xs = [F.pad(x, _flat_pads([(p, p) for p in pad])) for x in xs] if any(pad) else xs
    acc = torch.zeros((n, k_out, *o), dtype=torch.float32)
    for idx in rows:  # strided leading dims: one convolution per kernel row, over the rows it reads
        lead_x = [slice(i * dl, i * dl + (oo - 1) * s + 1) for i, dl, oo, s in zip(idx, dilation, o, stride)]
        lead_w = [slice(i, i + 1) for i in idx]
        for x, w in zip(xs, ws):
            acc += conv(
                x[(slice(None), slice(None), *lead_x)],
                w[(slice(None), slice(None), *lead_w)],
                None,
                stride,
                0,
                row_dil,
                groups,
            )
        _round_bf16_(acc)
    return acc


def conv_transposed(
    xs: Sequence[torch.Tensor],
    ws: Sequence[torch.Tensor],
    *,
    stride: Sequence[int],
    crop: Sequence[int],
    out_spatial: Sequence[int],
    dilation: Sequence[int],
    groups: int,
    fp32_acc: bool,
) -> torch.Tensor:
    """``sum_i conv_transpose(xs[i], ws[i])`` with the full (unpadded) output cropped to ``out_spatial`` from offset
    ``crop`` (zeros past its end: output padding), accumulated as DST like :func:`conv_forward`."""
    d = len(stride)
    xs, ws = _fast_layout(xs), _fast_layout(ws)
    k = ws[0].shape[2:]
    full = [(i - 1) * s + dl * (kk - 1) + 1 for i, s, dl, kk in zip(xs[0].shape[2:], stride, dilation, k)]
    size = [max(f, c + o) for f, c, o in zip(full, crop, out_spatial)]
    out = torch.zeros((xs[0].shape[0], ws[0].shape[1] * groups, *size), dtype=torch.float32)
    conv_t = _CONV_T[d]
    blocks = [()] if fp32_acc or d == 1 else list(itertools.product(*(range(kk) for kk in k[:-1])))
    for idx in blocks:
        lead_w = [slice(i, i + 1) for i in idx]
        dil = dilation if not idx else (1,) * (d - 1) + (dilation[-1],)
        part = sum(
            conv_t(x, w[(slice(None), slice(None), *lead_w)], None, stride, 0, 0, groups, dil) for x, w in zip(xs, ws)
        )
        where = [slice(i * dl, i * dl + n) for i, dl, n in zip(idx, dilation, part.shape[2:])]  # type: ignore
        where += [slice(0, n) for n in part.shape[2 + len(idx) :]]  # type: ignore[union-attr]
        region = out[(slice(None), slice(None), *where)]
        region += part
        if not fp32_acc:
            _round_bf16_(region)
    return out[(slice(None), slice(None), *(slice(c, c + o) for c, o in zip(crop, out_spatial)))]


def _channels_first(t: torch.Tensor, g: ConvGeometry) -> torch.Tensor:
    t = t if g.batched else t.unsqueeze(0)
    return t.movedim(-1, 1) if g.channels_last else t


def _own_layout(t: torch.Tensor, g: ConvGeometry) -> np.ndarray:
    t = t.movedim(1, -1) if g.channels_last else t
    return (t if g.batched else t[0]).numpy()


def conv_dst(x: np.ndarray, w: np.ndarray, g: ConvGeometry, fidelity: Fidelity | str, fp32_acc: bool) -> torch.Tensor:
    """The convolution of ``x`` (in its own layout) with ``w`` as DST holds it, channels first and batched."""
    pairs = merged_products(x, w, fidelity, fp32_acc)  # in its own layout: the masks are element-wise
    xs = [_channels_first(torch.from_numpy(p), g) for p, _ in pairs]
    ws = [torch.from_numpy(q) for _, q in pairs]
    if g.transposed:
        return conv_transposed(
            xs,
            ws,
            stride=g.stride,
            crop=[lo for lo, _ in g.padding],
            out_spatial=g.out_spatial,
            dilation=g.dilation,
            groups=g.groups,
            fp32_acc=fp32_acc,
        )
    return conv_forward(
        xs, ws, stride=g.stride, pads=g.padding, dilation=g.dilation, groups=g.groups, fp32_acc=fp32_acc
    )


def _with_bias(dst: torch.Tensor, bias: np.ndarray | None, fp32_acc: bool) -> torch.Tensor:
    """The bias added as TT-NN's conv adds it: DST packed to the intermediate format, then an FPU add."""
    if bias is None:
        return dst
    shape = (1, -1) + (1,) * (dst.ndim - 2)
    return torch.from_numpy(cardmath.add(dst.numpy(), bias.reshape(shape), fp32_acc=fp32_acc))


def _run_conv(call: SimCall) -> np.ndarray:
    x, w = call.inputs[0], call.inputs[1]
    g = conv_geometry(x.shape, w.shape, call.attrs)
    fid, acc = conv_numerics(call.numerics, call.in_specs[0].dtype, call.in_specs[1].dtype)  # type: ignore
    if g.n == 0 or 0 in g.out_spatial:
        return np.zeros(g.out_shape, np.float32)
    out = _with_bias(conv_dst(x, w, g, fid, acc), call.inputs[2] if len(call.inputs) == 3 else None, acc)
    return _own_layout(out, g)


# -------------------------------------------------------------------------------------------------------- costs
def _conv_ns(
    ins: Sequence[Spec], outs: Sequence[TensorSpec], attrs: dict, num: Numerics, card: CardSpec, dense_groups: bool
) -> float:
    x, w = ins[0], ins[1]
    g = conv_geometry(x.shape, w.shape, attrs)
    fid = conv_numerics(num, x.dtype, w.dtype)[0]  # type: ignore[union-attr]
    rows = g.n * int(np.prod(g.out_spatial))
    kvol = int(np.prod(g.kernel))
    traffic = float(sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs))
    if dense_groups:  # TT-NN: block-diagonal dense weights, NHWC data (an NCHW input is permuted in and out)
        gemm = (1, rows, g.c_out, g.c_in * kvol)
        if not g.channels_last:
            traffic += 2 * (cost.tile_bytes(x) + cost.tile_bytes(outs[0]))
    else:
        gemm = (g.groups, rows, g.c_out // g.groups, g.c_in // g.groups * kvol)
    return cost.matmul_ns(*gemm, fid, card, traffic)


def estimate_conv_ttnn(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """TT-NN: one dense implicit GEMM (groups expanded), plus the NHWC permutes of channels-first data."""
    return _conv_ns(ins, outs, attrs, num, card, dense_groups=True)


def estimate_conv_ktt(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Kohaku-TT: one implicit GEMM per group, the data read in its own layout."""
    return _conv_ns(ins, outs, attrs, num, card, dense_groups=False)


def estimate_conv_backward(
    ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec
) -> float:
    """Two GEMMs of the forward's size (grad_input, grad_weight) where asked for, plus the grad_bias reduction."""
    grad, x, w = ins
    mask = attrs["output_mask"]
    fwd = estimate_conv_ktt([x, w], [grad], attrs, num, card) - cost.LAUNCH_NS  # type: ignore[list-item]
    return (
        cost.LAUNCH_NS
        + fwd * (bool(mask[0]) + bool(mask[1]))
        + bool(mask[2]) * cost.dram_ns(cost.tile_bytes(grad), card)
    )


# -------------------------------------------------------------------------------------------------- simulator
def ttnn_supports(g: ConvGeometry) -> str | None:
    """Why TT-NN 0.81.1 cannot run this convolution, or None when it can."""
    if g.d == 3 and g.transposed:
        return "TT-NN has no transposed 3-d convolution"
    if g.d == 3 and any(lo != hi for lo, hi in g.padding):
        return "ttnn.experimental.conv3d takes one padding per dim, not uneven ('same') padding"
    return None


@sim("conv", provider="ttnn", estimate=estimate_conv_ttnn)
def conv_ttnn_model(call: SimCall) -> np.ndarray:
    why = ttnn_supports(conv_geometry(call.inputs[0].shape, call.inputs[1].shape, call.attrs))
    if why:
        raise KohakuTTUnsupportedOperator(f"conv: {why}; Kohaku-TT's own kernel runs it (KTT_CUSTOM_KERNELS=1)")
    return _run_conv(call)


@sim("conv", provider="ktt", estimate=estimate_conv_ktt)
def conv_ktt(call: SimCall) -> np.ndarray:
    return _run_conv(call)


def _weight_grad(
    grads: Sequence[torch.Tensor], xs: Sequence[torch.Tensor], w_shape: Sequence[int], g: ConvGeometry, fp32_acc: bool
) -> torch.Tensor:
    """grad_weight: per product pair, torch's weight gradient; a bf16 DST is rounded once per batch entry."""
    pads = [lo for lo, _ in g.padding]
    if not g.transposed and any(lo != hi for lo, hi in g.padding):  # uneven padding: pad x, convolve unpadded
        xs = [F.pad(x, _flat_pads(g.padding)) for x in xs]
        pads = [0] * g.d
    weight = torch.empty(tuple(w_shape))

    def one(gr: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.convolution_backward(
            gr,
            x,
            weight,
            None,
            list(g.stride),
            pads,
            list(g.dilation),
            g.transposed,
            list(g.output_padding),
            g.groups,
            [False, True, False],
        )[1]

    if fp32_acc:
        return sum(one(gr, x) for gr, x in zip(grads, xs))  # type: ignore[return-value]
    acc = torch.zeros(tuple(w_shape))
    for n in range(g.n):
        acc += sum(one(gr[n : n + 1], x[n : n + 1]) for gr, x in zip(grads, xs))
        _round_bf16_(acc)
    return acc


@sim("conv_backward", provider="ktt", estimate=estimate_conv_backward)
def conv_backward(call: SimCall) -> list[np.ndarray]:
    grad, x, w = call.inputs
    g = conv_geometry(x.shape, w.shape, call.attrs)
    fid, acc = conv_numerics(call.numerics, call.in_specs[1].dtype, call.in_specs[2].dtype)  # type: ignore
    mask = call.attrs["output_mask"]
    outs: list[np.ndarray] = [np.zeros((0,), np.float32)] * 3
    gout = lambda t: _channels_first(t, g)  # noqa: E731  (grad_out is laid out like the output, i.e. like x)
    if mask[0]:
        if g.n == 0:
            outs[0] = np.zeros(x.shape, np.float32)
        else:
            pairs = merged_products(grad, w, fid, acc)
            gs, ws = [gout(torch.from_numpy(p)) for p, _ in pairs], [torch.from_numpy(q) for _, q in pairs]
            if g.transposed:  # the adjoint of a transposed convolution is a plain one
                gi = conv_forward(
                    gs, ws, stride=g.stride, pads=g.padding, dilation=g.dilation, groups=g.groups, fp32_acc=acc
                )
                gi = gi[(slice(None), slice(None), *(slice(0, s) for s in g.spatial))]
            else:
                gi = conv_transposed(
                    gs,
                    ws,
                    stride=g.stride,
                    crop=[lo for lo, _ in g.padding],
                    out_spatial=g.spatial,
                    dilation=g.dilation,
                    groups=g.groups,
                    fp32_acc=acc,
                )
            outs[0] = _own_layout(gi, g)
    if mask[1]:
        pairs = merged_products(grad, x, fid, acc)
        gs, xs = [gout(torch.from_numpy(p)) for p, _ in pairs], [gout(torch.from_numpy(q)) for _, q in pairs]
        outs[1] = _weight_grad(gs, xs, w.shape, g, acc).numpy() if g.n else np.zeros(w.shape, np.float32)
    if mask[2]:
        gc = gout(torch.from_numpy(np.ascontiguousarray(grad))).numpy()
        axes = (0, *range(2, gc.ndim))
        outs[2] = (
            cardmath.reduce_sum(gc, axes, fp32_acc=acc, fidelity=fid) if gc.size else np.zeros(g.c_out, np.float32)
        )
    return outs


# ----------------------------------------------------------------------------------------------- TT-NN (a card)
def _host_weights(tt: Any, w: Any) -> Any:
    """Conv weights as TT-NN's conv ops take them: a row-major host tensor, prepared by the op."""
    w = w if w.layout == tt.ROW_MAJOR_LAYOUT else tt.to_layout(w, tt.ROW_MAJOR_LAYOUT)
    return tt.from_device(w)


@ttnn("conv")
def conv_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    x, w = inputs[0], inputs[1]
    g = conv_geometry(tuple(x.shape), tuple(w.shape), attrs)
    why = ttnn_supports(g)
    if why:
        raise KohakuTTUnsupportedOperator(f"conv: {why}")
    fid, acc = conv_numerics(numerics, dtype_of(x), dtype_of(w))
    dev = x.device()
    cfg = compute_config(tt, dev, fid, acc, approx=bool(numerics.approx), packer_l1_acc=False)
    n = g.n
    if not g.batched:
        x = tt.reshape(x, (1, *x.shape))
    if not g.channels_last:  # TT-NN convolutions take NHWC
        x = tt.permute(x, (0, *range(2, g.d + 2), 1))
    weight = _host_weights(tt, w)
    bias = None
    if len(inputs) == 3:
        if g.d == 3:  # conv3d takes a [1, 1, 1, 32, C] tile-padded bias on the device
            bias = tt.to_layout(tt.reshape(inputs[2], (1, 1, 1, 1, g.c_out)), tt.TILE_LAYOUT)
        else:  # conv1d / conv2d prepare a [1, 1, 1, C] host bias themselves
            bias = tt.from_device(tt.to_layout(tt.reshape(inputs[2], (1, 1, 1, g.c_out)), tt.ROW_MAJOR_LAYOUT))
    dtype = ttnn_dtype(tt, out_specs[0].dtype)
    pads = [p for lo_hi in g.padding for p in lo_hi]  # (before, after) per dim: TT-NN's [top, bottom, left, right]
    if g.d == 3:
        x = tt.to_layout(x, tt.ROW_MAJOR_LAYOUT)
        w5 = tt.experimental.prepare_conv3d_weights(weight_tensor=weight, groups=g.groups, device=dev)
        out = tt.experimental.conv3d(
            input_tensor=x,
            weight_tensor=w5,
            device=dev,
            bias_tensor=bias,
            dtype=dtype,
            output_channels=g.c_out,
            kernel_size=list(g.kernel),
            stride=list(g.stride),
            padding=[lo for lo, _ in g.padding],
            dilation=list(g.dilation),
            groups=g.groups,
            compute_kernel_config=cfg,
        )
    else:
        hw = (1, *g.spatial) if g.d == 1 else g.spatial
        if g.d == 1:  # a 1-d convolution is a 2-d one of height 1
            x = tt.reshape(x, (n, 1, g.spatial[0], g.c_in))
        k2, s2, d2 = ((1, *v) if g.d == 1 else tuple(v) for v in (g.kernel, g.stride, g.dilation))
        p4 = [0, 0, *pads] if g.d == 1 else pads
        common = dict(
            input_tensor=x,
            weight_tensor=weight,
            device=dev,
            in_channels=g.c_in,
            out_channels=g.c_out,
            batch_size=n,
            input_height=hw[0],
            input_width=hw[1],
            kernel_size=list(k2),
            stride=list(s2),
            padding=p4,
            dilation=list(d2),
            groups=g.groups,
            dtype=dtype,
            bias_tensor=bias,
            compute_config=cfg,
        )
        if g.transposed:
            op2 = (0, *g.output_padding) if g.d == 1 else tuple(g.output_padding)
            common["padding"] = [lo for lo, _ in ((0, 0),) * (g.d == 1) + g.padding]
            out = tt.conv_transpose2d(**common, output_padding=list(op2))
        else:
            out = tt.conv2d(**common)
    out = tt.reshape(out, (n, *g.out_spatial, g.c_out))  # TT-NN returns [1, 1, N*H*W, C]
    if not g.channels_last:
        out = tt.permute(out, (0, g.d + 1, *range(1, g.d + 1)))
    return out if g.batched else tt.reshape(out, tuple(out.shape[1:]))
