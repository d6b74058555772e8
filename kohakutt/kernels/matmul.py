"""The matmul family on each backend: the simulator's model of TT-NN's matmul kernels, and the TT-NN calls.

The engine, :func:`card_matmul`, takes the operands as the multiplier sees them at a fidelity (cardmath's phases,
folded into as few exact products as possible) and runs them through torch's CPU matmul: an fp32 DST is one fp32
matmul per folded phase group; a bf16 DST is accumulated in K blocks of :data:`K_BLOCK` values, each block summed in
fp32 and DST rounded to bf16 after it (see ``kohakutt/ir/defs/matmul.py`` for how this compares with the card).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.matmul import linear_shapes, matmul_numerics
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec
from kohakutt.kernels import cardmath, cost
from kohakutt.kernels.registry import SimCall, sim, ttnn

K_BLOCK = 128  # K values per bf16 DST rounding (4 K tiles; TT-NN defaults to 2, see the module docstring)
CACHE_ELEMS = 1 << 21  # fp32 DST values the bf16 accumulation works on at once (8 MB: few, large torch calls)

FIDELITY_AND_DTYPE_NAMES = (
    "MathFidelity.LoFi",
    "MathFidelity.HiFi2",
    "MathFidelity.HiFi3",
    "MathFidelity.HiFi4",
    "float32",
    "bfloat16",
    "bfloat8_b",
    "bfloat4_b",
)  # what compute_config and ttnn_dtype reach for
TTNN_NAMES = (
    "matmul", "linear", "addmm", "multiply", "add", "reshape", "expand",
    "init_device_compute_kernel_config", *FIDELITY_AND_DTYPE_NAMES,
)  # fmt: skip


# ------------------------------------------------------------------------------------------------------- engine
def merged_products(
    a: np.ndarray, b: np.ndarray, fidelity: Fidelity | str, fp32_acc: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The fidelity phases of ``a @ b`` (in0 = a in SrcB, in1 = b in SrcA) folded into as few exact operand pairs as
    possible: the sum over pairs of ``x @ y`` is the FPU's product sum. Any shapes: the masks are element-wise."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    # cardmath's own folding of the phases (the sum of fidelity_operands' phase products; checked in the tests)
    return cardmath.merged_operands(a, b, fidelity, fp32_acc)


def _round_bf16_(acc: torch.Tensor, scratch: torch.Tensor) -> None:
    """Round an fp32 tensor to bf16 in place (nearest, ties to even), through a preallocated bf16 scratch."""
    scratch.copy_(acc)
    acc.copy_(scratch)


def blocked_bf16_sum(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], k_block: int) -> torch.Tensor:
    """``sum_i xs[i] @ ys[i]`` (2-D, or 3-D with one batch) into a bf16 DST: each K block of ``k_block`` values is
    summed over all pairs in fp32 and added to DST, which is rounded to bf16 after every block."""
    x0, y0 = xs[0], ys[0]
    out = torch.empty((*x0.shape[:-1], y0.shape[-1]), dtype=torch.float32)
    # Work through the output a slab of leading rows (or batch entries) at a time, so DST stays in the CPU's cache.
    per_lead = out[0].numel() if out.shape[0] else 1
    lead = max(1, CACHE_ELEMS // max(per_lead, 1))
    scratch = torch.empty((min(lead, out.shape[0]), *out.shape[1:]), dtype=torch.bfloat16)
    for r0 in range(0, out.shape[0], lead):
        acc = out[r0 : r0 + lead]
        acc.zero_()
        add = acc.addmm_ if x0.ndim == 2 else acc.baddbmm_
        rows = [x[r0 : r0 + lead] for x in xs]
        cols = ys if y0.ndim == 2 else [y[r0 : r0 + lead] for y in ys]
        for k0 in range(0, x0.shape[-1], k_block):
            for x, y in zip(rows, cols):
                add(x[..., k0 : k0 + k_block], y[..., k0 : k0 + k_block, :])
            _round_bf16_(acc, scratch[: acc.shape[0]])
    return out


def card_matmul(
    a: np.ndarray, b: np.ndarray, *, fidelity: Fidelity | str, fp32_acc: bool, k_block: int = K_BLOCK
) -> np.ndarray:
    """``a @ b`` for (..., M, K) @ (..., K, N) (batch dims broadcast) as the card's matmul leaves it in DST: float32
    values, before the packer rounds them to the output format. An empty K gives zeros."""
    pairs = merged_products(a, b, fidelity, fp32_acc)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    xs = [torch.from_numpy(x) for x, _ in pairs]
    ys = [torch.from_numpy(y) for _, y in pairs]
    if k == 0 or m == 0 or n == 0 or 0 in batch:
        return np.zeros((*batch, m, n), np.float32)
    if fp32_acc:
        out = torch.matmul(xs[0], ys[0])
        for x, y in zip(xs[1:], ys[1:]):
            out += torch.matmul(x, y)
        return out.numpy()
    if b.ndim == 2:  # a plain weight matrix: a's batch folds into its rows
        xs = [x.reshape(-1, k) for x in xs]
    elif batch:
        xs = [x.broadcast_to((*batch, m, k)).reshape(-1, m, k) for x in xs]
        ys = [y.broadcast_to((*batch, k, n)).reshape(-1, k, n) for y in ys]
    return blocked_bf16_sum(xs, ys, k_block).reshape(*batch, m, n).numpy()


def _fmt(dtype: DType) -> str:
    return "float32" if dtype is DType.FLOAT32 else "bfloat16"


def stored(x: np.ndarray, dtype: DType) -> np.ndarray:
    """``x`` as a TT-NN op between two kernels stores it in ``dtype`` (block floats as their bf16 compute format)."""
    return cardmath.round_to(x, _fmt(dtype))


def _in_dtypes(call: SimCall, *idx: int) -> list[DType]:
    return [call.in_specs[i].dtype for i in idx]  # type: ignore[union-attr]


def _mm(call: SimCall, a: np.ndarray, b: np.ndarray, idx: tuple[int, int]) -> tuple[np.ndarray, bool]:
    fid, acc = matmul_numerics(call.numerics, _in_dtypes(call, *idx), call.out_specs[0].dtype)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    return card_matmul(a2, b2, fidelity=fid, fp32_acc=acc), acc


# -------------------------------------------------------------------------------------------------------- costs
def _bmnk(a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int, int]:
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    batch = int(np.prod(np.broadcast_shapes(a2[:-2], b2[:-2]), dtype=np.int64))
    return batch, a2[-2], b2[-1], a2[-1]


def _traffic(ins: Sequence[Spec], outs: Sequence[TensorSpec]) -> float:
    return float(sum(cost.tile_bytes(s) for s in ins) + sum(cost.tile_bytes(s) for s in outs))


def _fid(num: Numerics, ins: Sequence[Spec], out: TensorSpec) -> Fidelity:
    return matmul_numerics(num, [s.dtype for s in ins if isinstance(s, TensorSpec)], out.dtype)[0]


def estimate_matmul(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Tile matmuls at the fidelity over the cores, against the operands' DRAM traffic."""
    a, b = ins[-2:]
    fid = _fid(num, ins[-2:], outs[0])
    return cost.matmul_ns(*_bmnk(a.shape, b.shape), fid, card, _traffic(ins, outs))


def estimate_linear(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    x, w = ins[0], ins[1]
    _, fin, fout = linear_shapes(x.shape, w.shape, bool(attrs["transpose_w"]))
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    return cost.matmul_ns(1, rows, fout, fin, _fid(num, ins[:2], outs[0]), card, _traffic(ins, outs))


def estimate_addmm(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """The matmul, then up to two element-wise passes (alpha scaling, the beta * input add) over the output."""
    steps = (attrs["alpha"] != 1) + (attrs["beta"] != 0) * (1 + (attrs["beta"] != 1))
    return estimate_matmul(ins, outs, attrs, num, card) + steps * cost.eltwise(ins[:1], outs, attrs, num, card)


# -------------------------------------------------------------------------------------------------- simulator
@sim("matmul", estimate=estimate_matmul)
def matmul(call: SimCall) -> np.ndarray:
    out, _ = _mm(call, call.inputs[0], call.inputs[1], (0, 1))
    return out.reshape(call.out_specs[0].shape)


@sim("bmm", estimate=estimate_matmul)
def bmm(call: SimCall) -> np.ndarray:
    return _mm(call, call.inputs[0], call.inputs[1], (0, 1))[0]


@sim("linear", estimate=estimate_linear)
def linear(call: SimCall) -> np.ndarray:
    x, w = call.inputs[0], call.inputs[1]
    out, acc = _mm(call, x, w.T if call.attrs["transpose_w"] else w, (0, 1))
    out = out.reshape(call.out_specs[0].shape)
    if len(call.inputs) == 3:  # TT-NN's fused bias: DST packed to the intermediate format, then an FPU add
        out = cardmath.add(out, call.inputs[2], fp32_acc=acc)
    return out


def _scaled_sum(call: SimCall, product: np.ndarray) -> np.ndarray:
    """ttnn.addmm after its matmul: ``multiply_(out, alpha)``, then ``add_(out, beta * input)``, each stored."""
    dt = call.out_specs[0].dtype
    out = stored(product, dt)
    alpha, beta = call.attrs["alpha"], call.attrs["beta"]
    if alpha != 1:
        out = stored(out * stored(np.float32(alpha), dt), dt)
    if beta != 0:
        bias, bias_dt = call.inputs[0], promote(call.in_specs[0].dtype)  # type: ignore[union-attr]
        if beta != 1:
            bias = stored(bias * stored(np.float32(beta), bias_dt), bias_dt)
        out = out + bias
    return out


@sim("addmm", estimate=estimate_addmm)
def addmm(call: SimCall) -> np.ndarray:
    return _scaled_sum(call, _mm(call, call.inputs[1], call.inputs[2], (1, 2))[0])


@sim("baddbmm", estimate=estimate_addmm)
def baddbmm(call: SimCall) -> np.ndarray:
    return _scaled_sum(call, _mm(call, call.inputs[1], call.inputs[2], (1, 2))[0])


@sim("outer", estimate=cost.eltwise)
def outer(call: SimCall) -> np.ndarray:
    a, b = call.inputs[0][..., :, None], call.inputs[1][..., None, :]
    fid = call.numerics.fidelity
    if call.out_specs[0].dtype is DType.FLOAT32 or fid is None or fid >= Fidelity.HiFi4:
        return a * b  # TT-NN's accurate multiply (bf16 HiFi4) or fp32 SFPU path: the exact product, rounded once
    return cardmath.multiply(a, b, fidelity=fid.name, fp32_acc=bool(call.numerics.fp32_acc))


# ----------------------------------------------------------------------------------------------- TT-NN (a card)
def ttnn_dtype(tt: Any, dtype: DType) -> Any:
    """TT-NN's DataType for ``dtype``."""
    return getattr(tt, dtype.value)


def dtype_of(t: Any) -> DType:
    """The IR dtype of a ttnn.Tensor."""
    return DType.of(str(getattr(t.dtype, "name", t.dtype)).split(".")[-1].lower())


def compute_config(
    tt: Any, device: Any, fidelity: Fidelity, fp32_acc: bool, approx: bool = False, packer_l1_acc: bool | None = None
) -> Any:
    """A compute kernel config from resolved numerics (packer L1 accumulation as TT-NN's matmul default)."""
    return tt.init_device_compute_kernel_config(
        device.arch(),
        math_fidelity=getattr(tt.MathFidelity, fidelity.name),
        math_approx_mode=bool(approx),
        fp32_dest_acc_en=bool(fp32_acc),
        packer_l1_acc=(not fp32_acc) if packer_l1_acc is None else packer_l1_acc,
    )


def _tt_mm_config(tt: Any, inputs: Sequence[Any], numerics: Numerics, out: TensorSpec) -> Any:
    fid, acc = matmul_numerics(numerics, [dtype_of(t) for t in inputs], out.dtype)
    return compute_config(tt, inputs[0].device(), fid, acc)


def _broadcast(x: Sequence[int], y: Sequence[int]) -> list[int]:
    n = max(len(x), len(y))
    xs, ys = [1] * (n - len(x)) + list(x), [1] * (n - len(y)) + list(y)
    return [max(p, q) if 1 in (p, q) else p for p, q in zip(xs, ys)]


def batched(tt: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` with the batch dims TT-NN's matmul takes: a 2-D ``b`` broadcasts as is; otherwise both get
    the same rank and the full broadcast batch (TT-NN broadcasts no batch dim of either operand then)."""
    sa, sb = list(a.shape), list(b.shape)
    if len(sa) < 2 or len(sb) <= 2:
        return a, b
    batch = _broadcast(sa[:-2], sb[:-2])

    def full(t: Any, s: list[int]) -> Any:
        if s[:-2] == batch:
            return t
        if len(s) - 2 < len(batch):
            t = tt.reshape(t, [1] * (len(batch) - len(s) + 2) + s)
        return tt.expand(t, [*batch, *s[-2:]])

    return full(a, sa), full(b, sb)


@ttnn("matmul")
def matmul_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    a, b = batched(tt, *inputs)
    return tt.matmul(
        a,
        b,
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
        compute_kernel_config=_tt_mm_config(tt, inputs, numerics, out_specs[0]),
    )


@ttnn("bmm")
def bmm_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    return matmul_ttnn(tt, inputs, attrs, numerics, out_specs)


@ttnn("linear")
def linear_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) == 3 else None
    return tt.linear(
        x,
        w,
        bias=bias,
        transpose_b=bool(attrs["transpose_w"]),
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
        compute_kernel_config=_tt_mm_config(tt, inputs[:2], numerics, out_specs[0]),
    )


@ttnn("addmm")
def addmm_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    bias, a, b = inputs
    if list(bias.shape) != [a.shape[0], b.shape[1]]:  # TT-NN's addmm broadcasts no bias: matmul, then add
        return baddbmm_ttnn(tt, inputs, attrs, numerics, out_specs)
    return tt.addmm(
        bias,
        a,
        b,
        alpha=float(attrs["alpha"]),
        beta=float(attrs["beta"]),
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
        compute_kernel_config=_tt_mm_config(tt, inputs[1:], numerics, out_specs[0]),
    )


@ttnn("baddbmm")
def baddbmm_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    bias, a, b = inputs
    a, b = batched(tt, a, b)
    out = tt.matmul(
        a,
        b,
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
        compute_kernel_config=_tt_mm_config(tt, inputs[1:], numerics, out_specs[0]),
    )
    if attrs["alpha"] != 1:
        out = tt.multiply(out, float(attrs["alpha"]))
    if attrs["beta"] != 0:
        out = tt.add(out, bias if attrs["beta"] == 1 else tt.multiply(bias, float(attrs["beta"])))
    return out


@ttnn("outer")
def outer_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    """The batched outer product (..., n) x (..., m) -> (..., n, m) as one broadcast multiply (the simulator's model;
    ``ttnn.outer`` flattens its operands instead). Below HiFi4 TT-NN's FPU multiply, as the ``mul`` op takes it."""
    a, b = inputs
    sa, sb = list(a.shape), list(b.shape)
    fid = numerics.fidelity
    fpu = bool(numerics.approx) or (fid is not None and fid < Fidelity.HiFi4)
    return tt.multiply(tt.reshape(a, [*sa, 1]), tt.reshape(b, [*sb[:-1], 1, sb[-1]]), fast_and_approximate_mode=fpu)
