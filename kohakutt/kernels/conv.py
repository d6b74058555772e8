"""The conv family on each backend: the simulator's implicit-GEMM model of the card's convolutions, and TT-NN's calls.

The engine runs torch's CPU convolutions on the operands as the multiplier sees them (``merged_products``: the
input in SrcB, the weights in SrcA at the fidelity), which gives the card's products summed in fp32 (up to order).
A bf16 DST is modelled per kernel row: the partial convolution over one row of the kernel (kw x C/groups products,
TT-NN's activation block width) is summed in fp32, added to DST and DST is rounded to bf16, row after row. One float32
convolution gives every row's partials and NumPy adds and rounds them (:func:`_accumulate_rows`) on every CPU: the
numerics never depend on which CPU runs the simulator (a oneDNN bf16 engine on AMX / AVX512-BF16 was faster but sums
in another float32 order, so it was removed).

Providers: ``ttnn`` models TT-NN's kernels and refuses what TT-NN cannot run (transposed 3-d convolutions; 3-d
convolutions with uneven 'same' padding): ``ttnn.conv1d`` / ``conv2d`` / ``conv_transpose2d`` take NHWC input, so an
NCHW input costs two permutes, and a grouped convolution runs as a dense one over block-diagonal weights (TT-NN
expands the weights), which the estimate counts; what it refuses runs on the ``host`` provider (the same
arithmetic). ``ktt`` is Kohaku-TT's own kernel, run when asked for by name (a card has no launcher for it yet):
every case, groups run as separate GEMMs, channels-first or channels-last read in place. The numerics are the
same. For 1-d and 2-d forward
convolutions the own kernel is also a hal program (``kohakutt/kernels/programs/conv.py``, registered as the ktt
implementation's ``program``): the same arithmetic tile by tile, its bf16 DST an fp32 DST over each kernel row
packed to a bfloat16 CB between rows; the tests check it against this model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal import formats
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.conv import ConvGeometry, conv_geometry, conv_numerics
from kohakutt.ir.defs.matmul import split_counts
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import UNSET, Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath, cost
from kohakutt.kernels.matmul import (
    FIDELITY_AND_DTYPE_NAMES,
    compute_config,
    dtype_of,
    merged_products,
    split_ns,
    split_pairs,
    ttnn_dtype,
)
from kohakutt.kernels.programs.conv import conv_program
from kohakutt.kernels.registry import SimCall, host, sim, ttnn

TTNN_NAMES = (
    "conv1d", "conv2d", "conv_transpose2d", "experimental.conv3d", "experimental.prepare_conv3d_weights",
    "Conv2dConfig", "Conv3dConfig", "permute", "reshape", "pad", "to_layout", "from_device", "to_device",
    "ROW_MAJOR_LAYOUT", "TILE_LAYOUT", "init_device_compute_kernel_config",
    *FIDELITY_AND_DTYPE_NAMES,
)  # fmt: skip


def _ieee(fn: Any) -> Any:
    """``fn`` (a torch CPU convolution) run in full float32: in float64 when torch's own settings would let oneDNN cut
    float32 operands (the products are exact either way; only the order and width of the sums differ)."""

    def conv(x: torch.Tensor, w: torch.Tensor, *args: Any) -> torch.Tensor:
        if cardmath.torch_is_ieee("conv"):
            return fn(x, w, *args)
        return fn(x.double(), w.double(), *args).float()

    return conv


_CONV = {d: _ieee(f) for d, f in ((1, F.conv1d), (2, F.conv2d), (3, F.conv3d))}
_CONV_T = {d: _ieee(f) for d, f in ((1, F.conv_transpose1d), (2, F.conv_transpose2d), (3, F.conv_transpose3d))}


# ------------------------------------------------------------------------------------------------------- engine
CHUNK_ELEMS = 256 * 1024  # DST values summed per step of the row accumulation: the rows' partials stay in cache


def _round_bf16_(t: torch.Tensor) -> None:
    t.copy_(t.to(torch.bfloat16))


def _round_bf16_np_(a: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """Round a C-contiguous float32 array to bf16 in place (nearest even; the host converter, single-threaded)."""
    bits = formats.to_bfloat16(a, out=scratch)
    formats.from_bfloat16(bits, out=a)


def _fast_layout(ts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors in channels-last memory order, where torch's CPU convolutions (oneDNN) run fastest. The copy is
    NumPy's, one thread: torch's two-thread copy stalls whenever another process holds a core."""
    nd = ts[0].ndim
    if nd not in (4, 5):
        return [t.contiguous() for t in ts]
    fmt = torch.channels_last if nd == 4 else torch.channels_last_3d
    out = []
    for t in ts:
        if not t.is_contiguous(memory_format=fmt):
            a = np.ascontiguousarray(t.numpy().transpose(0, *range(2, nd), 1))
            t = torch.from_numpy(a).permute(0, nd - 1, *range(1, nd - 1))
        out.append(t)
    return out


def _flat_pads(pads: Sequence[tuple[int, int]]) -> list[int]:
    """(before, after) per spatial dim as F.pad wants them: last dim first."""
    return [p for lo_hi in reversed(pads) for p in lo_hi]


def _accumulate_rows(y: torch.Tensor, rows: Sequence[tuple[int, ...]], dilation: Sequence[int], o: Sequence[int],
                     groups: int, round_dst: bool, channels_last_out: bool) -> torch.Tensor:  # fmt: skip
    """A bf16 DST over kernel rows: ``y`` (N, groups * rows * K/groups, *P) holds each row's partial convolution
    (stacked per group), offset in the leading dims by the row's kernel index times the dilation. DST = the first
    row's partial, then for each further row DST + partial, rounded to bf16 after each row (after the last only with
    ``round_dst``). Returns (N, K, *o) float32, in channels-last memory when ``channels_last_out``.

    NumPy works through one image and a band of output rows at a time, so the partials stay in cache."""
    n, d = y.shape[0], len(o)
    r = len(rows)
    yl = y.permute(0, *range(2, d + 2), 1)
    yn = (yl.numpy() if yl.is_contiguous() else np.ascontiguousarray(yl.numpy())).reshape(
        n, *y.shape[2:], groups, r, -1)  # fmt: skip
    kg = yn.shape[-1]
    k = groups * kg
    inner = int(np.prod(o[1:], dtype=np.int64)) * k
    band = max(1, CHUNK_ELEMS // max(inner, 1))
    out = np.empty((n, *o, groups, kg) if channels_last_out else (n, groups, kg, *o), np.float32)
    buf = np.empty((min(band, o[0]), *o[1:], groups, kg), np.float32)
    scratch = np.empty(buf.shape, np.uint16)
    for b in range(n):
        for h0 in range(0, o[0], band):
            h1 = min(o[0], h0 + band)
            acc, sc = buf[: h1 - h0], scratch[: h1 - h0]
            dst = out[b, h0:h1] if channels_last_out else np.moveaxis(out[b, :, :, h0:h1], (0, 1), (-2, -1))
            for j, idx in enumerate(rows):
                lead = [slice(h0 + idx[0] * dilation[0], h1 + idx[0] * dilation[0])]
                lead += [slice(i * dl, i * dl + oo) for i, dl, oo in zip(idx[1:], dilation[1:], o[1:])]
                part = yn[(b, *lead, slice(None), slice(None), j, slice(None))]
                last = j == r - 1
                target = dst if last else acc
                if j == 0:
                    np.copyto(target, part)
                else:
                    np.add(acc, part, out=target)
                if not last:
                    _round_bf16_np_(acc, sc)
    if round_dst:
        _round_bf16_np_(out)
    if channels_last_out:
        return torch.from_numpy(out.reshape(n, *o, k)).permute(0, d + 1, *range(1, d + 1))
    return torch.from_numpy(out.reshape(n, k, *o))


def conv_forward(
    xs: Sequence[torch.Tensor],
    ws: Sequence[torch.Tensor],
    *,
    stride: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
    fp32_acc: bool,
    round_dst: bool = True,
    channels_last_out: bool = False,
) -> torch.Tensor:
    """``sum_i conv(xs[i], ws[i])`` (N, C, *S) -> (N, K, *O), accumulated as DST: fp32, or bf16 rounded per kernel
    row (one block for a 1-d kernel). ``round_dst=False`` leaves a bf16 DST's last rounding to the caller (whose
    bfloat16 store rounds the same way); ``channels_last_out`` asks for the result in channels-last memory."""
    d = len(stride)
    xs, ws = _fast_layout(xs), _fast_layout(ws)
    pad = [lo for lo, _ in pads]
    if any(lo != hi for lo, hi in pads):  # uneven ('same') padding: pad first, convolve unpadded
        xs, pad = [F.pad(x, _flat_pads(pads)) for x in xs], [0] * d
    conv = _CONV[d]
    if fp32_acc or d == 1:
        out = sum(conv(x, w, None, stride, pad, dilation, groups) for x, w in zip(xs, ws))
        if not fp32_acc and round_dst:
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
        assert y is not None
        return _accumulate_rows(y, rows, dilation, o, groups, round_dst, channels_last_out)
    xs = [F.pad(x, _flat_pads([(p, p) for p in pad])) for x in xs] if any(pad) else xs
    acc = torch.zeros((n, k_out, *o), dtype=torch.float32)
    for j, idx in enumerate(rows):  # strided leading dims: one convolution per kernel row, over the rows it reads
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
        if j < len(rows) - 1 or round_dst:
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


def operand_pairs(a: np.ndarray, b: np.ndarray, fidelity: Fidelity | str, fp32_acc: bool,
                  split: tuple[int, int] | None) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """The exact operand pairs of an implicit GEMM of ``a`` by ``b``: the split's bf16 parts (``split`` from
    ``split_counts``: an fp32 DST) or the fidelity's folded phases."""
    return split_pairs(a, b, split) if split is not None else merged_products(a, b, fidelity, fp32_acc)


def conv_dst(x: np.ndarray, w: np.ndarray, g: ConvGeometry, fidelity: Fidelity | str, fp32_acc: bool,
             round_dst: bool = True, split: tuple[int, int] | None = None) -> torch.Tensor:  # fmt: skip
    """The convolution of ``x`` (in its own layout) with ``w`` as DST holds it, channels first and batched (in
    channels-last memory for a channels-last op). ``round_dst=False``: see :func:`conv_forward`. ``split``: the
    split convolution (its parts' products summed in an fp32 DST)."""
    fp32_acc = fp32_acc or split is not None
    pairs = operand_pairs(x, w, fidelity, fp32_acc, split)  # in its own layout: the masks are element-wise
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
    return conv_forward(xs, ws, stride=g.stride, pads=g.padding, dilation=g.dilation, groups=g.groups,
                        fp32_acc=fp32_acc, round_dst=round_dst, channels_last_out=g.channels_last)  # fmt: skip


def _with_bias(dst: torch.Tensor, bias: np.ndarray | None, fp32_acc: bool, split: bool = False) -> torch.Tensor:
    """The bias added as TT-NN's conv adds it: DST packed to the intermediate format, then an FPU add (after a split
    convolution, an fp32 add on the SFPU)."""
    if bias is None:
        return dst
    shape = (1, -1) + (1,) * (dst.ndim - 2)
    if split:
        return dst + torch.from_numpy(np.asarray(bias, np.float32).reshape(shape))
    return torch.from_numpy(cardmath.add(dst.numpy(), bias.reshape(shape), fp32_acc=fp32_acc))


def _run_conv(call: SimCall) -> np.ndarray:
    x, w = call.inputs[0], call.inputs[1]
    g = conv_geometry(x.shape, w.shape, call.attrs)
    dts = (call.in_specs[0].dtype, call.in_specs[1].dtype)  # type: ignore[union-attr]
    fid, acc = conv_numerics(call.numerics, *dts)
    split = split_counts(call.numerics, dts)
    if g.n == 0 or 0 in g.out_spatial:
        return np.zeros(g.out_shape, np.float32)
    bias = call.inputs[2] if len(call.inputs) == 3 else None
    # a bf16 output stores DST as its last bf16 rounding would leave it: the store's rounding is that rounding
    last_by_store = bias is None and call.out_specs[0].dtype is DType.BFLOAT16
    dst = conv_dst(x, w, g, fid, acc, not last_by_store, split)
    return _own_layout(_with_bias(dst, bias, acc, split is not None), g)


# -------------------------------------------------------------------------------------------------------- costs
def _conv_ns(
    ins: Sequence[Spec], outs: Sequence[TensorSpec], attrs: dict, num: Numerics, card: CardSpec, dense_groups: bool
) -> float:
    x, w = ins[0], ins[1]
    g = conv_geometry(x.shape, w.shape, attrs)
    fid = conv_numerics(num, x.dtype, w.dtype)[0]  # type: ignore[union-attr]
    split = split_counts(num, (x.dtype, w.dtype))  # type: ignore[union-attr]
    rows = g.n * int(np.prod(g.out_spatial))
    kvol = int(np.prod(g.kernel))
    traffic = float(sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs))
    if dense_groups:  # TT-NN: block-diagonal dense weights, NHWC data (an NCHW input is permuted in and out)
        gemm = (1, rows, g.c_out, g.c_in * kvol)
        if not g.channels_last:
            traffic += 2 * (cost.tile_bytes(x) + cost.tile_bytes(outs[0]))
    else:
        gemm = (g.groups, rows, g.c_out // g.groups, g.c_in // g.groups * kvol)
    if split is not None:
        return split_ns([x, w], split, gemm, outs[0], card)
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
    if g.d == 3 and g.groups != 1 and (g.c_in // g.groups) % 16:
        return f"TT-NN's conv3d needs the {g.c_in // g.groups} channels per group to be a multiple of 16"
    return None


def _ttnn_conv_supports(specs: list, attrs: dict, num: Numerics = UNSET) -> str | None:
    return ttnn_supports(conv_geometry(specs[0].shape, specs[1].shape, attrs))


def _refused(why: str) -> KohakuTTUnsupportedOperator:
    """What TT-NN's convolution raises, asked for by name, for a convolution it cannot run (the default passes such
    calls to the host provider)."""
    return KohakuTTUnsupportedOperator(f"conv: {why}; the default runs it on the host (provider 'host')")


@sim("conv", provider="ttnn", estimate=estimate_conv_ttnn, supports=_ttnn_conv_supports)
def conv_ttnn_model(call: SimCall) -> np.ndarray:
    why = ttnn_supports(conv_geometry(call.inputs[0].shape, call.inputs[1].shape, call.attrs))
    if why:
        raise _refused(why)
    return _run_conv(call)


@sim("conv", provider="ktt", estimate=estimate_conv_ktt, program=conv_program)
def conv_ktt(call: SimCall) -> np.ndarray:
    return _run_conv(call)


# what TT-NN's convolution refuses (transposed 3-d, uneven 3-d padding): the host, with the card's formats
host("conv", estimate=estimate_conv_ktt)(_run_conv)


def _weight_grad(
    grads: Sequence[torch.Tensor], xs: Sequence[torch.Tensor], w_shape: Sequence[int], g: ConvGeometry, fp32_acc: bool
) -> torch.Tensor:
    """grad_weight: per product pair, torch's weight gradient; a bf16 DST is rounded once per batch entry."""
    pads = [lo for lo, _ in g.padding]
    if not g.transposed and any(lo != hi for lo, hi in g.padding):  # uneven padding: pad x, convolve unpadded
        xs = [F.pad(x, _flat_pads(g.padding)) for x in xs]
        pads = [0] * g.d
    weight = torch.empty(tuple(w_shape))

    ieee = cardmath.torch_is_ieee("conv")

    def one(gr: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if not ieee:  # torch's settings would let oneDNN cut float32 operands: float64 (see _ieee)
            return _one(gr.double(), x.double(), weight.double()).float()
        return _one(gr, x, weight)

    def _one(gr: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
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


@host("conv_backward", estimate=estimate_conv_backward)
def conv_backward(call: SimCall) -> list[np.ndarray]:
    grad, x, w = call.inputs
    g = conv_geometry(x.shape, w.shape, call.attrs)
    gdt, xdt, wdt = (s.dtype for s in call.in_specs)  # type: ignore[union-attr]
    fid, acc = conv_numerics(call.numerics, xdt, wdt)
    split_gw, split_gx = split_counts(call.numerics, (gdt, wdt)), split_counts(call.numerics, (gdt, xdt))
    mask = call.attrs["output_mask"]
    outs: list[np.ndarray] = [np.zeros((0,), np.float32)] * 3
    gout = lambda t: _channels_first(t, g)  # noqa: E731  (grad_out is laid out like the output, i.e. like x)
    if mask[0]:
        if g.n == 0:
            outs[0] = np.zeros(x.shape, np.float32)
        else:
            pairs = operand_pairs(grad, w, fid, acc, split_gw)
            gs, ws = [gout(torch.from_numpy(p)) for p, _ in pairs], [torch.from_numpy(q) for _, q in pairs]
            acc_i = acc or split_gw is not None
            if g.transposed:  # the adjoint of a transposed convolution is a plain one
                gi = conv_forward(
                    gs, ws, stride=g.stride, pads=g.padding, dilation=g.dilation, groups=g.groups, fp32_acc=acc_i
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
                    fp32_acc=acc_i,
                )
            outs[0] = _own_layout(gi, g)
    if mask[1]:
        pairs = operand_pairs(grad, x, fid, acc, split_gx)
        gs, xs = [gout(torch.from_numpy(p)) for p, _ in pairs], [gout(torch.from_numpy(q)) for _, q in pairs]
        acc_w = acc or split_gx is not None
        outs[1] = _weight_grad(gs, xs, w.shape, g, acc_w).numpy() if g.n else np.zeros(w.shape, np.float32)
    if mask[2]:
        gc = gout(torch.from_numpy(np.ascontiguousarray(grad))).numpy()
        axes = (0, *range(2, gc.ndim))
        if not gc.size:
            outs[2] = np.zeros(g.c_out, np.float32)
        elif gdt is DType.FLOAT32 and call.numerics.exact_sums:  # fp32 adds on the SFPU
            outs[2] = np.sum(gc, axis=axes, dtype=np.float32)
        else:
            outs[2] = cardmath.reduce_sum(gc, axes, fp32_acc=acc, fidelity=fid)
    return outs


# ----------------------------------------------------------------------------------------------- TT-NN (a card)
def _host_weights(tt: Any, w: Any) -> Any:
    """Conv weights as TT-NN's conv ops take them: a row-major host tensor, prepared by the op; a 1-d kernel
    (O, I, K) as the 2-d (O, I, 1, K) of the height-1 convolution it runs as."""
    shape = tuple(w.shape)
    if len(shape) == 3:
        w = tt.reshape(w, (*shape[:2], 1, shape[2]))
    if w.dtype in (tt.bfloat8_b, tt.bfloat4_b):  # block floats exist in tiles only; their values all fit bfloat16
        w = tt.typecast(w, tt.bfloat16)
    w = w if w.layout == tt.ROW_MAJOR_LAYOUT else tt.to_layout(w, tt.ROW_MAJOR_LAYOUT)
    return tt.from_device(w)


@ttnn("conv", supports=_ttnn_conv_supports)
def conv_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    x, w = inputs[0], inputs[1]
    g = conv_geometry(tuple(x.shape), tuple(w.shape), attrs)
    why = ttnn_supports(g)
    if why:
        raise _refused(why)
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
        if g.d == 3:  # conv3d takes a 2-d (1, C) bias on the device (0.81.1 checks the rank)
            bias = tt.to_layout(tt.reshape(inputs[2], (1, g.c_out)), tt.TILE_LAYOUT)
        else:  # conv1d / conv2d prepare a [1, 1, 1, C] host bias themselves
            bias = tt.from_device(tt.to_layout(tt.reshape(inputs[2], (1, 1, 1, g.c_out)), tt.ROW_MAJOR_LAYOUT))
    dtype = ttnn_dtype(tt, out_specs[0].dtype)
    pads = [p for lo_hi in g.padding for p in lo_hi]  # (before, after) per dim: TT-NN's [top, bottom, left, right]
    if g.d == 3:
        x = tt.to_layout(x, tt.ROW_MAJOR_LAYOUT)
        # one C_in block of all input channels, padded with zero channels to the 16 L1 alignment TT-NN's conv3d
        # needs (a zero channel adds exact zeros); TT-NN's default blocks and aligns C_in by 32
        c_in = g.c_in // g.groups
        block = -(-c_in // 16) * 16
        if block != c_in:
            if g.groups != 1:
                raise KohakuTTUnsupportedOperator(f"conv: TT-NN's conv3d needs {c_in} channels per group to be a "
                                                  "multiple of 16")  # fmt: skip
            x = tt.pad(x, [(0, 0)] * 4 + [(0, block - c_in)], 0.0)
        w5 = tt.experimental.prepare_conv3d_weights(weight_tensor=weight, groups=g.groups, C_in_block=block,
                                                    alignment=16, device=dev)  # fmt: skip
        out = tt.experimental.conv3d(
            input_tensor=x,
            weight_tensor=w5,
            config=tt.Conv3dConfig(C_in_block=block, alignment=16),
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
    return out if g.batched else tt.reshape(out, tuple(out.shape)[1:])
