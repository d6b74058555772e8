"""The matmul family on each backend: the simulator's model of TT-NN's matmul kernels, and the TT-NN calls.

The engine, :func:`card_matmul`, takes the operands as the multiplier sees them at a fidelity (cardmath's phases,
folded into as few exact products as possible) and runs them through torch's CPU matmul: an fp32 DST is one fp32
matmul per folded phase group; a bf16 DST is accumulated in K blocks of :data:`K_BLOCK` values, each block summed in
fp32 and DST rounded to bf16 after it (see ``kohakutt/ir/defs/matmul.py`` for how this compares with the card).

float32 operands under ``fp32_matmul="highest"`` (the default) are split into bfloat16-exact parts
(``cardmath.split_bf16``) and the six leading part products summed in fp32, smallest first (:func:`split_pairs`), as
TT-NN would run it: the split's element-wise ops, one HiFi4 matmul per product into an fp32 DST, fp32 adds. The
estimates charge exactly that (:func:`split_ns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.matmul import linear_shapes, matmul_numerics, split_counts, split_products
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
    "init_device_compute_kernel_config", "clamp", "isfinite", "where", "subtract", "typecast",
    *FIDELITY_AND_DTYPE_NAMES,
)  # fmt: skip
# The keywords passed by name to each TT-NN callable (checked by tests/hal/test_ttnn_contract.py).
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "matmul": ("transpose_b", "dtype", "compute_kernel_config"),
    "clamp": ("min", "max"),
}


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


def split_pairs(a: np.ndarray, b: np.ndarray, parts: tuple[int, int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The operand pairs of a split matmul ``a @ b`` (``parts``: bf16 parts of a and of b, 3 or 1, from
    ``split_counts``), smallest product first: each pair is bf16-exact, so its HiFi4 product is exact, and the sum
    of the pairs' products is the split matmul's. Inf and NaN ride on the leading pair only (as one card matmul
    gives them). Any shapes: the split is element-wise."""

    def pieces(x: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if n == 3:
            return cardmath.split_bf16(x)
        finite = np.isfinite(x)
        return x, (x if finite.all() else np.where(finite, x, np.float32(0.0)))

    pa, pb = pieces(a, parts[0]), pieces(b, parts[1])
    # pieces: (part 0 with Inf / NaN, part 0 finite, part 1, part 2); the leading product alone takes the former
    pick = lambda p, i, lead: p[0 if lead else 1] if i == 0 else p[i + 1]  # noqa: E731
    return [(pick(pa, i, i + j == 0), pick(pb, j, i + j == 0)) for i, j in split_products(parts)]


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
        add = (
            (acc.addmm_ if x0.ndim == 2 else acc.baddbmm_)
            if cardmath.torch_is_ieee()
            else (lambda x, y, acc=acc: acc.add_(cardmath.engine_matmul(x.contiguous(), y.contiguous())))
        )
        rows = [x[r0 : r0 + lead] for x in xs]
        cols = ys if y0.ndim == 2 else [y[r0 : r0 + lead] for y in ys]
        for k0 in range(0, x0.shape[-1], k_block):
            for x, y in zip(rows, cols):
                add(x[..., k0 : k0 + k_block], y[..., k0 : k0 + k_block, :])
            _round_bf16_(acc, scratch[: acc.shape[0]])
    return out


def card_matmul(
    a: np.ndarray,
    b: np.ndarray,
    *,
    fidelity: Fidelity | str,
    fp32_acc: bool,
    k_block: int = K_BLOCK,
    split: tuple[int, int] | None = None,
) -> np.ndarray:
    """``a @ b`` for (..., M, K) @ (..., K, N) (batch dims broadcast) as the card's matmul leaves it in DST: float32
    values, before the packer rounds them to the output format. An empty K gives zeros. ``split`` (bf16 parts of a
    and b, from ``split_counts``): the split matmul, its part products at HiFi4 summed in fp32, smallest first
    (``fidelity`` and ``fp32_acc`` do not apply)."""
    if split is not None:
        pairs, fp32_acc = split_pairs(a, b, split), True
    else:
        pairs = merged_products(a, b, fidelity, fp32_acc)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    xs = [torch.from_numpy(x) for x, _ in pairs]
    ys = [torch.from_numpy(y) for _, y in pairs]
    if k == 0 or m == 0 or n == 0 or 0 in batch:
        return np.zeros((*batch, m, n), np.float32)
    if fp32_acc:
        out = cardmath.engine_matmul(xs[0], ys[0])
        for x, y in zip(xs[1:], ys[1:]):
            out += cardmath.engine_matmul(x, y)
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
    """The product in DST and whether DST is fp32 (always for a split matmul)."""
    dts = _in_dtypes(call, *idx)
    fid, acc = matmul_numerics(call.numerics, dts, call.out_specs[0].dtype)
    split = split_counts(call.numerics, dts)
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    return card_matmul(a2, b2, fidelity=fid, fp32_acc=acc, split=split), acc or split is not None


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


SPLIT_OPS = 11  # TT-NN ops that split one float32 operand (_tt_split): isfinite, where, clamp, typecast to bf16
#                 and back, subtract, typecast to bf16 and back, subtract, typecast, where (Inf / NaN kept in x0)


def split_ns(
    operands: Sequence[Spec], parts: tuple[int, int], gemm: tuple[int, int, int, int], out: TensorSpec, card: CardSpec
) -> float:
    """What a split matmul costs on the card: :data:`SPLIT_OPS` element-wise passes over each float32 operand, one
    HiFi4 matmul per part product (bf16 parts in, the fp32 product out) and an fp32 add per product after the
    first. ``gemm``: (batch, M, N, K) of one product."""
    total = 0.0
    for spec, n in zip(operands, parts):
        if n == 3 and isinstance(spec, TensorSpec):
            total += SPLIT_OPS * cost.memory_bound([spec], [spec], card, cost.SFPU_TILE_CYCLES)
    part_bytes = sum(cost.tiles(s) * 2048 for s in operands)  # one bf16 part of each operand per product
    products = split_products(parts)
    total += len(products) * cost.matmul_ns(*gemm, Fidelity.HiFi4, card, part_bytes + cost.tile_bytes(out))
    return total + (len(products) - 1) * cost.memory_bound([out, out], [out], card, cost.SFPU_TILE_CYCLES)


def _gemm_ns(
    num: Numerics,
    operands: Sequence[Spec],
    gemm: tuple[int, int, int, int],
    ins: Sequence[Spec],
    outs: Sequence[TensorSpec],
    card: CardSpec,
) -> float:
    """One matmul of shape ``gemm`` over ``operands`` (in0, in1): split or one pass at the fidelity."""
    split = split_counts(num, [s.dtype for s in operands if isinstance(s, TensorSpec)])
    if split is not None:
        return split_ns(operands, split, gemm, outs[0], card)
    return cost.matmul_ns(*gemm, _fid(num, operands, outs[0]), card, _traffic(ins, outs))


def estimate_matmul(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """Tile matmuls at the fidelity over the cores, against the operands' DRAM traffic (a split matmul: its passes)."""
    a, b = ins[-2:]
    return _gemm_ns(num, ins[-2:], _bmnk(a.shape, b.shape), ins, outs, card)


def estimate_linear(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    x, w = ins[0], ins[1]
    _, fin, fout = linear_shapes(x.shape, w.shape, bool(attrs["transpose_w"]))
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    ns = _gemm_ns(num, ins[:2], (1, rows, fout, fin), ins, outs, card)
    if len(ins) == 3 and split_counts(num, [x.dtype, w.dtype]) is not None:  # the bias: an fp32 add of its own
        ns += cost.eltwise([outs[0], ins[2]], outs, attrs, num, card)
    return ns


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
    if len(call.inputs) == 3:
        if split_counts(call.numerics, _in_dtypes(call, 0, 1)) is not None:  # the split's sum, then an fp32 add
            return out + call.inputs[2].astype(np.float32)
        out = cardmath.add(out, call.inputs[2], fp32_acc=acc)  # TT-NN's fused bias: packed DST, then an FPU add
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


def _tt_split(tt: Any, x: Any, parts: int) -> tuple[Any, ...]:
    """TT-NN's form of ``cardmath.split_bf16``: (part 0 with Inf / NaN, part 0 finite, part 1, part 2) for a float32
    tensor (``parts`` 3), (x, x with Inf / NaN as 0) for any other."""
    finite = tt.isfinite(x)
    xf = tt.where(finite, x, 0.0)
    if parts == 1:
        return x, xf
    f32 = tt.float32
    x0 = tt.typecast(tt.clamp(xf, min=-cardmath.BF16_MAX, max=cardmath.BF16_MAX), tt.bfloat16)
    x0_wide = tt.typecast(x0, f32)
    rest = tt.subtract(xf, x0_wide)
    x1 = tt.typecast(rest, tt.bfloat16)
    x2 = tt.typecast(tt.subtract(rest, tt.typecast(x1, f32)), tt.bfloat16)
    return tt.where(finite, x0_wide, x), x0, x1, x2


def _tt_product(tt: Any, a: Any, b: Any, numerics: Numerics, out: TensorSpec, transpose_b: bool = False) -> Any:
    """``a @ b`` (``b`` transposed when asked) as the card runs it: split and summed smallest first under
    ``fp32_matmul="highest"`` with a float32 operand (an fp32 result), else one ttnn.matmul in ``out``'s dtype."""
    split = split_counts(numerics, [dtype_of(a), dtype_of(b)])
    if split is None:
        return tt.matmul(a, b, transpose_b=transpose_b, dtype=ttnn_dtype(tt, out.dtype),
                         compute_kernel_config=_tt_mm_config(tt, [a, b], numerics, out))  # fmt: skip
    pa, pb = _tt_split(tt, a, split[0]), _tt_split(tt, b, split[1])
    cfg = compute_config(tt, a.device(), Fidelity.HiFi4, True)
    total = None
    for i, j in split_products(split):
        x, y = (pa[0], pb[0]) if i + j == 0 else (pa[1 if i == 0 else i + 1], pb[1 if j == 0 else j + 1])
        p = tt.matmul(x, y, transpose_b=transpose_b, dtype=tt.float32, compute_kernel_config=cfg)
        total = p if total is None else tt.add(total, p)
    return total


@ttnn("matmul")
def matmul_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    a, b = batched(tt, *inputs)
    return _tt_product(tt, a, b, numerics, out_specs[0])


@ttnn("bmm")
def bmm_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    return matmul_ttnn(tt, inputs, attrs, numerics, out_specs)


@ttnn("linear")
def linear_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) == 3 else None
    if split_counts(numerics, [dtype_of(x), dtype_of(w)]) is not None:
        out = _tt_product(tt, x, w, numerics, out_specs[0], transpose_b=bool(attrs["transpose_w"]))
        return out if bias is None else tt.add(out, bias)
    return tt.linear(
        x,
        w,
        bias=bias,
        transpose_b=bool(attrs["transpose_w"]),
        dtype=ttnn_dtype(tt, out_specs[0].dtype),
        compute_kernel_config=_tt_mm_config(tt, inputs[:2], numerics, out_specs[0]),
    )


def _tt_scaled_sum(tt: Any, product: Any, bias: Any, attrs: dict) -> Any:
    """``beta * bias + alpha * product`` in TT-NN ops (alpha, then the beta-scaled bias)."""
    if attrs["alpha"] != 1:
        product = tt.multiply(product, float(attrs["alpha"]))
    if attrs["beta"] != 0:
        product = tt.add(product, bias if attrs["beta"] == 1 else tt.multiply(bias, float(attrs["beta"])))
    return product


@ttnn("addmm")
def addmm_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    bias, a, b = inputs
    if list(bias.shape) != [a.shape[0], b.shape[1]]:  # TT-NN's addmm broadcasts no bias: matmul, then add
        return baddbmm_ttnn(tt, inputs, attrs, numerics, out_specs)
    if split_counts(numerics, [dtype_of(a), dtype_of(b)]) is not None:
        return _tt_scaled_sum(tt, _tt_product(tt, a, b, numerics, out_specs[0]), bias, attrs)
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
    return _tt_scaled_sum(tt, _tt_product(tt, a, b, numerics, out_specs[0]), bias, attrs)


@ttnn("outer")
def outer_ttnn(tt: Any, inputs: list, attrs: dict, numerics: Numerics, out_specs: list[TensorSpec]) -> Any:
    """The batched outer product (..., n) x (..., m) -> (..., n, m) as one broadcast multiply (the simulator's model;
    ``ttnn.outer`` flattens its operands instead). Below HiFi4 TT-NN's FPU multiply, as the ``mul`` op takes it."""
    a, b = inputs
    sa, sb = list(a.shape), list(b.shape)
    fid = numerics.fidelity
    fpu = bool(numerics.approx) or (fid is not None and fid < Fidelity.HiFi4)
    return tt.multiply(tt.reshape(a, [*sa, 1]), tt.reshape(b, [*sb[:-1], 1, sb[-1]]), fast_and_approximate_mode=fpu)
