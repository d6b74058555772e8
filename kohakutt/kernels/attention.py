"""The attention family: the simulator's model of TT-NN's SDPA (provider "ttnn"), Kohaku-TT's own flash attention
(provider "ktt", a hal program in ``kohakutt/kernels/programs/attention.py``), the backward ops, and the TT-NN calls.

Provider ktt runs two ways. ``run`` takes the vectorized model here (:func:`flash_forward`): the program's (Q tile,
128-key K chunk) pairs, formats, rounding and order of operations, with torch's CPU bmm as the engine, heads in
blocks that fit in cache. The program itself runs tile by tile through ``device.run_program``
(:func:`kohakutt.kernels.programs.attention.run_flash_program`); the tests check that the two agree bit for bit
where float32 sums are exact, and within one bf16 rounding of a P element elsewhere (the sums' order differs).

Numerics of provider ktt (fp32 DST, HiFi4 unless a numerics scope says otherwise), per K chunk: S = Q K^T (bf16
products exact, summed in fp32) times the scale, stored fp32; where a mask tile exists (the user's mask, causal
diagonal tiles, padded keys) S is read back as TF32 (the unpacker's truncation to 19 bits) and the mask (TF32) added;
every later read of S is TF32. m = max(rowmax S, M_old) and M = m broadcast along the rows by a matmul with a ones
row (exact at HiFi3 / HiFi4; at LoFi / HiFi2 SrcB keeps 7 bits of m, and that M is used throughout); P = exp(S - M)
in fp32, stored bf16; alpha = exp(M_old - M); l = alpha * l + the row sums of P tile by tile, O = alpha * O + P V,
with alpha taking SrcA's 10 bits and l, O their TF32 bits. Finally out = O * R with R = 1 / (l + 2^-100) (broadcast
like M; a row without any visible key gives 0) and logsumexp = M + log(l) (-inf for such a row).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal import cardcore
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.matmul import default_fidelity
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels import cost
from kohakutt.kernels.matmul import card_matmul
from kohakutt.kernels.registry import SimCall, host, sim, ttnn

TTNN_NAMES = (
    "transformer.scaled_dot_product_attention", "init_device_compute_kernel_config", "MathFidelity.LoFi",
    "MathFidelity.HiFi2", "MathFidelity.HiFi3", "MathFidelity.HiFi4", "matmul", "multiply", "add", "subtract", "exp",
    "log", "max", "sum", "where", "isneginf", "full", "triu", "reshape", "permute", "repeat_interleave", "slice",
    "concat", "typecast", "to_torch", "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16",
    "uint8", "TILE_LAYOUT",
)  # fmt: skip
# The keywords passed by name to each TT-NN callable (checked by tests/hal/test_ttnn_contract.py).
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "transformer.scaled_dot_product_attention": ("attn_mask", "is_causal", "scale", "compute_kernel_config"),
    "init_device_compute_kernel_config": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc"),
    "matmul": ("transpose_a", "transpose_b", "compute_kernel_config"),
    "max": ("dim", "keepdim"), "sum": ("dim", "keepdim"), "full": ("dtype", "layout", "device"),
    "triu": ("diagonal",), "repeat_interleave": ("dim",), "concat": ("dim",),
}  # fmt: skip

K_CHUNK = 128  # keys per K chunk of the own kernel (4 tiles)
TTNN_CHUNK = 32  # TT-NN's default q_chunk_size / k_chunk_size (no program config)
TINY = 2.0**-100  # added to the row sum before 1/l: 0 for rows that see no key, no change to any sum >= 2^-75
NEG_FLOOR = -3.4028234663852886e38  # the running max starts at -FLT_MAX: finite, so -inf - M is -inf, not NaN
_TF32 = -(1 << 13)  # int32 mask: TF32 (11 significant bits), what the unpacker keeps of fp32 data
_UNSET = Numerics()  # every field left to the provider's default


# ------------------------------------------------------------------------------------------------------ inputs
def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _cut_(t: torch.Tensor, mask: int) -> torch.Tensor:
    """Truncate float32 ``t`` in place to the bits ``mask`` keeps (the unpacker's TF32, SrcA's 10 bits, ...)."""
    t.view(torch.int32).bitwise_and_(mask)
    return t


def _cut(t: torch.Tensor, mask: int) -> torch.Tensor:
    return _cut_(t.clone(), mask)


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(torch.float32)


def additive_mask(mask: np.ndarray | None) -> np.ndarray | None:
    """A bool mask (True = attend) as 0 / -inf; a float mask as is (float32)."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype == np.bool_:
        return np.where(m, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)
    return m.astype(np.float32, copy=False)


def resolve_scale(scale: float | None, d: int) -> float:
    """The scale as the kernels use it: float32 of ``scale``, or of 1/sqrt(D)."""
    if scale is None:
        return float(np.float32(1.0 / math.sqrt(d))) if d else 1.0
    return float(np.float32(scale))


def _gqa(t: torch.Tensor, g: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B * Hkv * g, S, D): each key/value head repeated for its g query heads."""
    b, h, s, d = t.shape
    if g == 1:
        return t.reshape(b * h, s, d)
    return t[:, :, None].expand(b, h, g, s, d).reshape(b * h * g, s, d)


def _group_sum(t: torch.Tensor, b: int, hkv: int, g: int) -> torch.Tensor:
    s, d = t.shape[-2:]
    return t.reshape(b, hkv, g, s, d).sum(2) if g > 1 else t.reshape(b, hkv, s, d)


def _mask_rows(mask: np.ndarray | None, b: int, h: int, sq: int, skv: int) -> torch.Tensor | None:
    """The additive mask broadcast to (B * H, Sq, Skv) as a strided view (no copy)."""
    if mask is None:
        return None
    m = _t(mask).reshape((1,) * (4 - mask.ndim) + mask.shape).expand(b, h, sq, skv)
    return m.reshape(b * h, sq, skv)  # a view when one mask serves every head, else a copy


# -------------------------------------------------------------------------------------------- products (fidelity)
def _parts(fid: Fidelity) -> tuple[str, str] | None:
    """(in0's part in SrcB, in1's part in SrcA) when the card core folds ``fid``'s phases into one product."""
    folded = cardcore.FOLDED_PHASES[fid.phases]
    return (folded[0][1], folded[0][0]) if len(folded) == 1 else None


def _src_mask(fid: Fidelity, in0: bool) -> int:
    """The int32 mask of in0's (SrcB) or in1's (SrcA) part at a one-product ``fid``, with an fp32 DST."""
    parts = _parts(fid)
    assert parts is not None
    return cardcore.slice_mask(cardcore.SRCB if in0 else cardcore.SRCA, parts[0] if in0 else parts[1])


def operand_pairs(a: torch.Tensor, b: torch.Tensor, fid: Fidelity, exact: tuple[bool, bool] = (False, False)
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
    """The exact operand pairs of ``a @ b`` at ``fid`` with an fp32 DST (cardmath's folding of the phases): the sum of
    the pairs' products is what the FPU sums. ``exact`` says an operand already fits its source register slice."""
    if _parts(fid) is None:
        pairs = cm.merged_operands(a.numpy(), b.numpy(), fid, True)
        return [(_t(x), _t(y)) for x, y in pairs]
    x = a if exact[0] else _cut(a, _src_mask(fid, True))
    y = b if exact[1] else _cut(b, _src_mask(fid, False))
    return [(x, y)]


def _fits(dtype: DType, fid: Fidelity, in0: bool) -> bool:
    """Whether a tensor of ``dtype`` passes a source register slice unchanged (bf16 in a whole-value part)."""
    if dtype is DType.FLOAT32:
        return False
    parts = _parts(fid)
    return parts is not None and parts[0 if in0 else 1] == cardcore.ALL


def _bmm(pairs: list[tuple[torch.Tensor, torch.Tensor]], transpose: bool = False) -> torch.Tensor:
    out = None
    for x, y in pairs:
        p = cm.engine_matmul(x, y.transpose(1, 2) if transpose else y)
        out = p if out is None else out.add_(p)
    assert out is not None
    return out


def _srca_mul(alpha: torch.Tensor, x: torch.Tensor, fid: Fidelity) -> torch.Tensor:
    """mul_tiles(alpha in SrcA, x in SrcB) into an fp32 DST (x already TF32)."""
    if fid == Fidelity.HiFi4:
        # SrcA's whole value times 11 TF32 bits: the product is exact, rounded once to fp32
        return _cut(alpha, cardcore.slice_mask(cardcore.SRCA, cardcore.ALL)) * x
    a, xb = torch.broadcast_tensors(alpha, x)
    return _t(cm.multiply(a.contiguous().numpy(), xb.contiguous().numpy(), fidelity=fid.name, fp32_acc=True))


# ------------------------------------------------------------------------------------ Kohaku-TT's flash attention

_BLOCK_BYTES = 1 << 21  # the score block (heads x rows x K chunk, fp32) the model keeps in cache at a time


def _is_pow2(x: float) -> bool:
    return x > 0 and math.isfinite(x) and math.frexp(x)[0] == 0.5


def flash_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *, scale: float,
                  causal: bool, offset: int = 0, fidelity: Fidelity = Fidelity.HiFi4,
                  dtypes: tuple[DType, DType, DType] = (DType.BFLOAT16,) * 3, k_chunk: int = K_CHUNK,
                  ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The own kernel's result (out (B, Hq, Sq, Dv), logsumexp (B, Hq, Sq)) for device values q / k / v and an
    additive mask broadcastable to (B, Hq, Sq, Skv); ``causal`` hides key j from query i when j > i + ``offset``.

    The program's (Q tile, K chunk) pairs are run: for each 128-key chunk, the Q tiles from the first one holding a
    row that sees a key of the chunk. Heads go in blocks whose scores fit in cache."""
    b, hq, sq, d = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    g, bh = hq // hkv, b * hq
    if bh == 0 or sq == 0:
        return np.zeros((b, hq, sq, dv), np.float32), np.full((b, hq, sq), -np.inf, np.float32)
    fid = Fidelity(fidelity)
    scale32 = float(np.float32(scale))
    tq = _t(q).reshape(bh, sq, d)
    tk, tv = _gqa(_t(k), g), _gqa(_t(v), g)
    qk_pairs = operand_pairs(tq, tk, fid, (_fits(dtypes[0], fid, True), _fits(dtypes[1], fid, False)))
    folded = _is_pow2(scale32)  # S * 2^e is exact, so the scale may ride on in0 (the products and sums scale too)
    if folded:
        qk_pairs = [(x * scale32, y) for x, y in qk_pairs]
    srca_all = cardcore.slice_mask(cardcore.SRCA, cardcore.ALL)  # in1 at HiFi3 (the folded pairs keep it whole)
    tv = tv if _fits(dtypes[2], fid, False) else _cut(tv, srca_all if _parts(fid) is None else _src_mask(fid, False))
    srca_high = cardcore.slice_mask(cardcore.SRCA, cardcore.HIGH)  # p in SrcA of a LoFi reduce_tile
    cut7 = cardcore.slice_mask(cardcore.SRCB, cardcore.HIGH)  # what a LoFi / HiFi2 matmul by a ones row keeps of in0
    tmask = _mask_rows(mask, b, hq, sq, skv)
    narrow = fid in (Fidelity.LoFi, Fidelity.HiFi2)  # the column broadcast keeps 7 bits of M and of 1 / l
    m_run = torch.full((bh, sq), float(_cut(torch.tensor([NEG_FLOOR]), _TF32)), dtype=torch.float32)
    l_run = torch.zeros((bh, sq), dtype=torch.float32)
    o_run = torch.zeros((bh, sq, dv), dtype=torch.float32)
    hb = max(1, _BLOCK_BYTES // (sq * k_chunk * 4))
    for h0 in range(0, bh, hb):
        hs = slice(h0, min(h0 + hb, bh))
        for k0 in range(0, skv, k_chunk):
            k1 = min(k0 + k_chunk, skv)
            r0 = (max(0, k0 - offset) // 32) * 32 if causal else 0  # the first Q tile that sees a key of the chunk
            if r0 >= sq:
                break
            s = _bmm([(x[hs, r0:], y[hs, k0:k1]) for x, y in qk_pairs], transpose=True)
            if not folded:
                s.mul_(scale32)
            if tmask is not None:
                _cut_(s, _TF32).add_(_cut(tmask[hs, r0:, k0:k1], _TF32))  # S packed fp32, then add_tiles(S, mask)
            diag = max(0, min(sq, k1 - 1 - offset) - r0) if causal else 0  # rows with keys of the chunk hidden
            if diag:
                s[:, :diag].add_(_causal_tile(r0 + offset - k0, diag, k1 - k0))
            _cut_(s, _TF32)  # S is stored fp32 and read back as TF32
            m_old = m_run[hs, r0:]
            m_new = torch.maximum(m_old, s.amax(-1))
            if narrow:
                _cut_(m_new, cut7)
            s.sub_(m_new[..., None])
            _exp_(s) if tmask is not None else s.exp_()  # a mask may hold big negatives: torch's slow path
            p = _bf16(s)
            del s
            alpha = torch.exp(m_old - m_new)
            l_view, o_view = l_run[hs, r0:], o_run[hs, r0:]
            _cut_(l_view, _TF32)  # l and O are stored fp32 and read back as TF32 (cutting twice changes nothing)
            _cut_(o_view, _TF32)
            if fid == Fidelity.HiFi4:  # alpha's 10 SrcA bits times 11 TF32 bits: exact, rounded once to fp32
                _cut_(alpha, srca_all)
                l_view.mul_(alpha)
                o_view.mul_(alpha[..., None])
            else:
                l_view.copy_(_srca_mul(alpha, l_view, fid))
                o_view.copy_(_srca_mul(alpha[..., None], o_view, fid))
            for tile_sum in _tile_sums(_cut(p, srca_high) if fid == Fidelity.LoFi else p):
                l_view.add_(tile_sum)  # reduce_tile adds one tile's row sums at a time
            o_view.add_(_bmm(operand_pairs(p, tv[hs, k0:k1], fid, (fid == Fidelity.HiFi4, True))))
            m_run[hs, r0:] = m_new
    l_t = _cut(l_run, _TF32)
    recip = _cut_(1.0 / (l_t + TINY), cut7 if narrow else _TF32)
    out = _srca_mul(recip[..., None], _cut(o_run, _TF32), fid)
    lse = torch.log(l_t) + m_run
    return out.reshape(b, hq, sq, dv).numpy(), lse.reshape(b, hq, sq).numpy()


_EXP_LOW, _EXP_ZERO = -87.0, -104.0  # below: float32 exp is subnormal (torch's scalar slow path); below that 0


def _exp_(x: torch.Tensor) -> torch.Tensor:
    """In-place float32 exp (torch's own results), with arguments below -87 (-inf from masks, subnormal results),
    which torch's vectorized exp sends one by one down a slow path, computed apart."""
    if x.numel() == 0 or float(x.amin()) >= _EXP_LOW:
        return x.exp_()
    low = x < _EXP_LOW
    mid = low & (x >= _EXP_ZERO)
    vals = x[mid]
    x.clamp_(min=_EXP_LOW).exp_().masked_fill_(low, 0.0)
    if vals.numel():
        x[mid] = vals.exp()
    return x


@functools.lru_cache(maxsize=64)
def _causal_tile(shift: int, rows: int, cols: int) -> torch.Tensor:
    """(rows, cols) additive mask: -inf where column c > row r + ``shift`` (the causal diagonal of a score block)."""
    c, r = torch.arange(cols)[None, :], torch.arange(rows)[:, None]
    return torch.zeros(rows, cols).masked_fill_(c > r + shift, -math.inf)


def _tile_sums(p: torch.Tensor) -> list[torch.Tensor]:
    """Row sums of each 32-column tile of ``p`` (the last one zero padded, as the program's padded keys give 0)."""
    n = p.shape[-1]
    if n % 32:
        p = torch.nn.functional.pad(p, (0, 32 - n % 32))
    return list(p.unflatten(-1, (-1, 32)).sum(-1).unbind(-1))


# ------------------------------------------------------------------------------------------- TT-NN's SDPA model
def _ttnn_setup(num: Numerics) -> tuple[Fidelity, bool, bool]:
    """The compute config Kohaku-TT gives TT-NN's SDPA where the scope leaves a field unset: HiFi4, an fp32 DST and
    exact exp (TT-NN's own defaults, HiFi2, a 16-bit DST and approximate exp, put bf16 attention a few percent off;
    a ``numerics(fidelity="HiFi2", fp32_acc=False, approx=True)`` scope asks for them)."""
    fid = num.fidelity if num.fidelity is not None else Fidelity.HiFi4
    acc = bool(num.fp32_acc) if num.fp32_acc is not None else True
    approx = bool(num.approx) if num.approx is not None else False
    return Fidelity(fid), acc, approx


def _store(x: np.ndarray, acc: bool) -> np.ndarray:
    """An intermediate as TT-NN's SDPA stores it: its im / stats CBs are bf16 (fp32 CBs disabled, issue 13364)."""
    return cm.round_to(x, "bfloat16")


def _scores(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None, scale: float, causal: bool, offset: int,
            fid: Fidelity, acc: bool) -> np.ndarray:  # fmt: skip
    """TT-NN's QK^T (FPU at the fidelity), stored bf16, times the bf16 scale on the FPU, plus the mask: (B,H,Sq,Skv)."""
    g = q.shape[1] // k.shape[1]
    kk = np.repeat(k, g, axis=1) if g > 1 else k
    s = _store(card_matmul(q, np.swapaxes(kk, -1, -2), fidelity=fid, fp32_acc=acc), acc)
    s = _store(cm.multiply(s, np.float32(cm.round_to(np.float32(scale))), fidelity=fid.name, fp32_acc=acc), acc)
    if mask is not None:
        s = _store(cm.add(s, mask, fp32_acc=acc), acc)  # the mask CB keeps the mask's dtype
    if causal:
        sq, skv = s.shape[-2:]
        s = np.where(np.arange(skv)[None, :] > np.arange(sq)[:, None] + offset, np.float32(-np.inf), s)
    return s.astype(np.float32, copy=False)


def ttnn_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *, scale: float,
                 causal: bool, offset: int = 0, num: Numerics = _UNSET) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """ttnn.transformer.scaled_dot_product_attention as the card computes it (the FlashAttention-2 program with
    32 x 32 chunks, bf16 intermediates), and the logsumexp composed from ttnn ops. Rows whose scores are all -inf
    (TT-NN's kernel gives NaN there: exp(-inf - -inf)) are set to 0 and their logsumexp to -inf with ttnn.where, the
    op's contract; so are all rows when there is no key at all."""
    fid, acc, approx = _ttnn_setup(num)
    b, hq, sq, _ = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    if b * hq * sq == 0 or skv == 0:
        return np.zeros((b, hq, sq, dv), np.float32), np.full((b, hq, sq), -np.inf, np.float32)
    s = _scores(q, k, mask, scale, causal, offset, fid, acc)
    vv = np.repeat(v, hq // hkv, axis=1) if hq > hkv else v
    skip = causal and offset == 0 and mask is None and sq == skv  # is_causal: K chunks past the diagonal skipped;
    # otherwise the triangle travels in the mask and every chunk runs (a fully masked one still rescales by
    # the approximate exp(0))
    with np.errstate(all="ignore"):
        # logsumexp: ttnn.max, then ttnn.exp (exact) of s - max, ttnn.sum, ttnn.log, ttnn.add; all stored bf16
        mx = cm.reduce_max(s, -1, acc, keepdims=True)
        e = _store(cm.sfpu("exp", _store(cm.sub(s, mx, fp32_acc=acc), acc)), acc)
        tot = _store(cm.reduce_sum(e, -1, acc, fidelity=fid.name, keepdims=True), acc)
        lse = _store(cm.add(mx, _store(cm.sfpu("log", tot), acc), fp32_acc=acc), acc)[..., 0]
        out_acc = prev_sum = prev_max = None
        for j, k0 in enumerate(range(0, skv, TTNN_CHUNK)):
            r0 = (k0 // TTNN_CHUNK) * TTNN_CHUNK if skip else 0
            if r0 >= sq:
                break
            qk = s[..., r0:, k0 : k0 + TTNN_CHUNK]
            cur_max = cm.reduce_max(qk, -1, acc, keepdims=True)
            if j > 0:
                cur_max = np.maximum(cur_max, prev_max[..., r0:, :])
            p = _store(cm.sfpu("exp", cm.sub(qk, cur_max, fp32_acc=acc), approx=approx), acc)
            cur_sum = _store(cm.reduce_sum(p, -1, acc, fidelity=fid.name, keepdims=True), acc)
            out_im = _store(card_matmul(p, vv[..., k0 : k0 + TTNN_CHUNK, :], fidelity=fid, fp32_acc=acc), acc)
            if j == 0:
                out_acc, prev_sum = out_im, cur_sum
            else:
                diff = _store(cm.sfpu("exp", cm.sub(prev_max[..., r0:, :], cur_max, fp32_acc=acc), approx=approx),
                              acc)  # fmt: skip
                ps = _store(cm.multiply(prev_sum[..., r0:, :], diff, fidelity=fid.name, fp32_acc=acc), acc)
                prev_sum = prev_sum.copy()
                prev_sum[..., r0:, :] = _store(cm.add(cur_sum, ps, fp32_acc=acc), acc)
                oa = _store(cm.multiply(out_acc[..., r0:, :], diff, fidelity=fid.name, fp32_acc=acc), acc)
                out_acc = out_acc.copy()
                out_acc[..., r0:, :] = _store(cm.add(oa, out_im, fp32_acc=acc), acc)
            if prev_max is None:
                prev_max = cur_max
            else:
                prev_max = prev_max.copy()
                prev_max[..., r0:, :] = cur_max
        recip = _store(cm.sfpu("reciprocal", prev_sum, approx=approx), acc)
        out = cm.multiply(out_acc, recip, fidelity=fid.name, fp32_acc=acc)
    dead = np.isneginf(mx)  # rows that see no key
    out, lse = np.where(dead, np.float32(0), out), np.where(dead[..., 0], -np.inf, lse)
    return out.astype(np.float32), lse.astype(np.float32)


# ------------------------------------------------------------------------------------------------------ backward
def _bwd_rows(mask: np.ndarray | None, causal: bool, offset: int, sq: int, skv: int) -> np.ndarray | None:
    """The additive mask with the causal -inf folded in, broadcastable to (B, H, Sq, Skv)."""
    m = mask
    if causal:
        tri = np.where(np.arange(skv)[None, :] > np.arange(sq)[:, None] + offset, np.float32(-np.inf), np.float32(0))
        m = tri if m is None else (m + tri).astype(np.float32)
    return m


def ktt_backward(g: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
                 mask: np.ndarray | None, *, scale: float, causal: bool, offset: int = 0,
                 fidelity: Fidelity = Fidelity.HiFi4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The own backward (flash-attention-2 style): S, P, dP and dS in fp32, P and dS rounded to bf16 as matmul
    operands, matmuls into an fp32 DST at the fidelity; dk / dv summed over each GQA group in fp32."""
    b, hq, sq, d = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    grp, bh = hq // hkv, b * hq
    fid = Fidelity(fidelity)
    tq, tg, to = _t(q).reshape(bh, sq, d), _t(g).reshape(bh, sq, dv), _t(o).reshape(bh, sq, dv)
    tk, tv = _gqa(_t(k), grp), _gqa(_t(v), grp)
    m = _mask_rows(_bwd_rows(mask, causal, offset, sq, skv), b, hq, sq, skv)
    tl = _t(lse).reshape(bh, sq, 1)

    def mm(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return _bmm(operand_pairs(a, c, fid))

    with np.errstate(all="ignore"):
        s = mm(tq, tk.transpose(1, 2).contiguous()).mul_(float(np.float32(scale)))
        if m is not None:
            s.add_(m)
        p = torch.exp(s - tl)
        p = torch.where(torch.isneginf(tl), torch.zeros_like(p), p)  # rows that saw no key: no gradient
        pb = _bf16(p)
        dv_ = mm(pb.transpose(1, 2).contiguous(), tg)
        dp = mm(tg, tv.transpose(1, 2).contiguous())
        dd = (tg * to).sum(-1, keepdim=True)
        dsb = _bf16(p * (dp - dd))
        dq = mm(dsb, tk).mul_(float(np.float32(scale)))
        dk = mm(dsb.transpose(1, 2).contiguous(), tq).mul_(float(np.float32(scale)))
    return (dq.reshape(b, hq, sq, d).numpy(), _group_sum(dk, b, hkv, grp).numpy(),
            _group_sum(dv_, b, hkv, grp).numpy())  # fmt: skip


def ttnn_backward(g: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
                  mask: np.ndarray | None, *, scale: float, causal: bool, offset: int = 0, num: Numerics = _UNSET
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The backward composed from ttnn ops (TT-NN 0.81 has no SDPA backward): ttnn.matmul and the element-wise ops on
    the FPU at the compute config (:func:`_ttnn_setup`: HiFi4 and an fp32 DST unless a scope says otherwise), every
    intermediate stored bf16."""
    fid, acc, _ = _ttnn_setup(num)
    hq, hkv = q.shape[1], k.shape[1]
    grp = hq // hkv
    kk = np.repeat(k, grp, axis=1) if grp > 1 else k
    vv = np.repeat(v, grp, axis=1) if grp > 1 else v

    def mm(a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return _store(card_matmul(a, c, fidelity=fid, fp32_acc=acc), acc)

    def mul(a: np.ndarray, c: Any) -> np.ndarray:
        return _store(cm.multiply(a, c, fidelity="HiFi4", fp32_acc=acc), acc)

    with np.errstate(all="ignore"):
        s = _scores(q, k, mask, scale, causal, offset, fid, acc)
        lb = cm.round_to(lse, "bfloat16")[..., None]
        p = _store(cm.sfpu("exp", _store(cm.sub(s, lb, fp32_acc=acc), acc)), acc)
        p = np.where(np.isneginf(lb), np.float32(0), p)
        dv_ = mm(np.swapaxes(p, -1, -2), g)
        dp = mm(g, np.swapaxes(vv, -1, -2))
        dd = _store(cm.reduce_sum(mul(g, o), -1, acc, keepdims=True), acc)
        ds = mul(p, _store(cm.sub(dp, dd, fp32_acc=acc), acc))
        sc = cm.round_to(np.float32(scale))
        dq = mul(mm(ds, kk), sc)
        dk = mul(mm(np.swapaxes(ds, -1, -2), q), sc)
    if grp > 1:  # ttnn.sum over the group dim after a reshape: the reduce LLK, stored bf16
        b, _, skv, d = k.shape
        dk = _store(cm.reduce_sum(dk.reshape(b, hkv, grp, skv, d), 2, acc), acc)
        dv_ = _store(cm.reduce_sum(dv_.reshape(b, hkv, grp, skv, v.shape[3]), 2, acc), acc)
    return dq, dk, dv_


# ------------------------------------------------------------------------------------------------ sim entries
def _dtypes(call: SimCall, idx: tuple[int, ...]) -> tuple[DType, ...]:
    return tuple(call.in_specs[i].dtype for i in idx)  # type: ignore[union-attr]


def _own_fid(call: SimCall) -> Fidelity:
    """The own kernel's fidelity: the scope's, else HiFi4 (HiFi2 for float32 operands under
    ``fp32_matmul="medium"``). The fused kernel is one pass on TF32 / bf16 operands whatever ``fp32_matmul`` says:
    PyTorch's float32 "highest" attention takes the math path (``frontends/torch/aten/nn.py``)."""
    return Fidelity(default_fidelity(call.numerics, [s.dtype for s in call.in_specs[:3]], Fidelity.HiFi4))


def _fwd_args(call: SimCall) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, float, bool]:
    q, k, v = (np.asarray(x, np.float32) for x in call.inputs[:3])
    mask = additive_mask(call.inputs[3]) if len(call.inputs) > 3 else None
    return q, k, v, mask, resolve_scale(call.attrs["scale"], q.shape[-1]), bool(call.attrs["is_causal"])


def _sdpa_ktt(call: SimCall) -> list[np.ndarray]:
    q, k, v, mask, scale, causal = _fwd_args(call)
    fid = _own_fid(call)
    return list(flash_forward(q, k, v, mask, scale=scale, causal=causal, fidelity=fid,
                              dtypes=_dtypes(call, (0, 1, 2))))  # type: ignore[arg-type]  # fmt: skip


def _sdpa_ttnn(call: SimCall) -> list[np.ndarray]:
    q, k, v, mask, scale, causal = _fwd_args(call)
    return list(ttnn_forward(q, k, v, mask, scale=scale, causal=causal, num=call.numerics))


def _bwd_args(call: SimCall) -> tuple[list[np.ndarray], np.ndarray | None, float, bool]:
    arrs = [np.asarray(x, np.float32) for x in call.inputs[:6]]
    mask = additive_mask(call.inputs[6]) if len(call.inputs) > 6 else None
    return arrs, mask, resolve_scale(call.attrs["scale"], arrs[1].shape[-1]), bool(call.attrs["is_causal"])


def _sdpa_backward_ktt(call: SimCall) -> list[np.ndarray]:
    arrs, mask, scale, causal = _bwd_args(call)
    fid = _own_fid(call)
    return list(ktt_backward(*arrs, mask, scale=scale, causal=causal, fidelity=fid))


def _sdpa_backward_ttnn(call: SimCall) -> list[np.ndarray]:
    arrs, mask, scale, causal = _bwd_args(call)
    return list(ttnn_backward(*arrs, mask, scale=scale, causal=causal, num=call.numerics))


# ------------------------------------------------------------------------------------------------------ varlen
def seq_bounds(cu_q: np.ndarray, cu_k: np.ndarray, tq: int, tk: int, max_q: int, max_k: int, op: str
               ) -> list[tuple[int, int, int, int]]:  # fmt: skip
    """[(q0, q1, k0, k1)] per sequence, after checking the cumulative lengths (a ShapeError says what is wrong)."""
    cu_q, cu_k = np.asarray(cu_q, np.int64).reshape(-1), np.asarray(cu_k, np.int64).reshape(-1)
    for cu, total, mx, name in ((cu_q, tq, max_q, "cu_seqlens_q"), (cu_k, tk, max_k, "cu_seqlens_k")):
        lens = np.diff(cu)
        if cu[0] != 0 or np.any(lens < 0) or cu[-1] > total:
            raise ShapeError(f"{op}: {name} = {cu.tolist()} must start at 0, never decrease and end at most at the "
                             f"{total} packed tokens")  # fmt: skip
        if lens.size and lens.max() > mx:
            raise ShapeError(f"{op}: a sequence of {int(lens.max())} tokens exceeds max_seqlen {mx} ({name})")
    return [(int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])) for i in range(cu_q.size - 1)]


def _heads_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (1, 0, 2)))[None]  # (T, H, D) -> (1, H, T, D)


def _varlen_forward(call: SimCall, fn: Callable[..., tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    q, k, v = (np.asarray(x, np.float32) for x in call.inputs[:3])
    a = call.attrs
    bounds = seq_bounds(call.inputs[3], call.inputs[4], q.shape[0], k.shape[0], a["max_seqlen_q"], a["max_seqlen_k"],
                        "sdpa_varlen")  # fmt: skip
    out = np.zeros(call.out_specs[0].shape, np.float32)
    lse = np.full(call.out_specs[1].shape, -np.inf, np.float32)
    scale = resolve_scale(a["scale"], q.shape[-1])
    for q0, q1, k0, k1 in bounds:
        if q1 == q0:
            continue
        o, ls = fn(_heads_first(q[q0:q1]), _heads_first(k[k0:k1]), _heads_first(v[k0:k1]), None, scale=scale,
                   causal=bool(a["is_causal"]), offset=(k1 - k0) - (q1 - q0))  # fmt: skip
        out[q0:q1] = np.transpose(o[0], (1, 0, 2))
        lse[:, q0:q1] = ls[0]
    return [out, lse]


def _varlen_backward(call: SimCall, fn: Callable[..., tuple[np.ndarray, ...]]) -> list[np.ndarray]:
    g, q, k, v, o, lse = (np.asarray(x, np.float32) for x in call.inputs[:6])
    a = call.attrs
    bounds = seq_bounds(call.inputs[6], call.inputs[7], q.shape[0], k.shape[0], a["max_seqlen_q"], a["max_seqlen_k"],
                        "sdpa_varlen_backward")  # fmt: skip
    dq, dk, dv = (np.zeros(s.shape, np.float32) for s in call.out_specs)
    scale = resolve_scale(a["scale"], q.shape[-1])
    for q0, q1, k0, k1 in bounds:
        if q1 == q0 or k1 == k0:
            continue
        parts = fn(*(_heads_first(x[q0:q1]) for x in (g, q)), _heads_first(k[k0:k1]), _heads_first(v[k0:k1]),
                   _heads_first(o[q0:q1]), lse[None, :, q0:q1], None, scale=scale, causal=bool(a["is_causal"]),
                   offset=(k1 - k0) - (q1 - q0))  # fmt: skip
        dq[q0:q1] += np.transpose(parts[0][0], (1, 0, 2))
        dk[k0:k1] += np.transpose(parts[1][0], (1, 0, 2))
        dv[k0:k1] += np.transpose(parts[2][0], (1, 0, 2))
    return [dq, dk, dv]


def _varlen_ktt(call: SimCall) -> list[np.ndarray]:
    fid = _own_fid(call)
    dts = _dtypes(call, (0, 1, 2))

    def fn(*args: Any, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        return flash_forward(*args, fidelity=fid, dtypes=dts, **kw)  # type: ignore[arg-type]

    return _varlen_forward(call, fn)


def _varlen_ttnn(call: SimCall) -> list[np.ndarray]:
    return _varlen_forward(call, lambda *a, **kw: ttnn_forward(*a, num=call.numerics, **kw))


def _varlen_backward_ktt(call: SimCall) -> list[np.ndarray]:
    fid = _own_fid(call)
    return _varlen_backward(call, lambda *a, **kw: ktt_backward(*a, fidelity=fid, **kw))


def _varlen_backward_ttnn(call: SimCall) -> list[np.ndarray]:
    return _varlen_backward(call, lambda *a, **kw: ttnn_backward(*a, num=call.numerics, **kw))


# --------------------------------------------------------------------------------------------------------- costs
def _visible_tiles(sq: int, skv: int, causal: bool) -> int:
    """(Q tile, K tile) pairs a causal kernel computes (all of them without causality)."""
    sqt, skt = -(-sq // 32), -(-skv // 32)
    return sum(min(skt, qt + 1) for qt in range(sqt)) if causal else sqt * skt


def attention_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec,
                   default: Fidelity = Fidelity.HiFi4) -> float:  # fmt: skip
    """Launch + max(DRAM traffic, compute) over the cores. Traffic: q and the outputs once, and the K and V tiles (and
    a mask tile) again for every (Q tile, K tile) pair computed: flash attention streams K and V once per 32-row Q
    tile. Compute: per pair, Dt + Dvt matmul tiles at the fidelity (the scope's, else ``default``: HiFi4, the config
    given to TT-NN) and four SFPU / FPU tile ops. A varlen call counts its packed lengths as one sequence."""
    q, k, v = ins[0], ins[1], ins[2]
    assert isinstance(q, TensorSpec) and isinstance(k, TensorSpec) and isinstance(v, TensorSpec)
    if q.ndim == 4:
        bh, sq, skv, d, dv = q.shape[0] * q.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]
    else:
        bh, sq, skv, d, dv = q.shape[1], q.shape[0], k.shape[0], q.shape[2], v.shape[2]
    fid = default_fidelity(num, [q.dtype, k.dtype, v.dtype], default)
    pairs = bh * _visible_tiles(sq, skv, bool(attrs.get("is_causal")))
    dt, dvt = -(-d // 32), -(-dv // 32)
    cycles = (dt + dvt) * cost.matmul_tile_cycles(card, fid) + 4 * cost.SFPU_TILE_CYCLES
    per_pair = dt * k.dtype.format.tile_bytes + dvt * v.dtype.format.tile_bytes
    if q.ndim == 4 and len(ins) > 3 and isinstance(ins[3], TensorSpec):
        per_pair += 4096  # an fp32 (own kernel) or bf16 + padding mask tile
    traffic = cost.tile_bytes(q) + sum(cost.tile_bytes(s) for s in outs) + pairs * per_pair
    return cost.LAUNCH_NS + max(cost.dram_ns(traffic, card), cost.compute_ns(pairs, cycles, card))


def flash_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    """:func:`attention_cost` for the own kernel (HiFi4 unless the scope says otherwise)."""
    return attention_cost(ins, outs, attrs, num, card, Fidelity.HiFi4)


def attention_backward_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec,
                            default: Fidelity = Fidelity.HiFi2) -> float:  # fmt: skip
    """About 2.5 forwards: five matmuls per (Q tile, K tile) pair instead of two."""
    fwd = attention_cost(ins[1:4], outs[:1], attrs, num, card, default)
    return cost.LAUNCH_NS + 2.5 * (fwd - cost.LAUNCH_NS)


def flash_backward_cost(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
    return attention_backward_cost(ins, outs, attrs, num, card, Fidelity.HiFi4)


def _program(*args: Any, **kw: Any) -> Any:
    from kohakutt.kernels.programs.attention import flash_attention_program

    return flash_attention_program(*args, **kw)


_FLASH_DTYPES = (DType.BFLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B)  # what TT-NN's SDPA and the own program take


def _ttnn_sdpa_supports(specs: list, attrs: dict, num: Numerics = _UNSET) -> str | None:
    """What TT-NN's SDPA takes (``_tt_forward``): bfloat16 or block-float queries, one head dim for keys and values."""
    q, k, v = specs[:3]
    if q.dtype not in _FLASH_DTYPES:
        return f"TT-NN's SDPA takes bfloat16 or block floats, not {q.dtype.value}"
    if k.shape[-1] != v.shape[-1]:
        return f"TT-NN's SDPA takes one head dim for keys and values, got {k.shape[-1]} and {v.shape[-1]}"
    return None


def _flash_supports(specs: list, attrs: dict, num: Numerics = _UNSET) -> str | None:
    """What the flash-attention program takes on the program path (:class:`FlashLauncher`): bfloat16 or block-float
    q / k / v, no dropout, no empty dim, and no mask or one of shape (B or 1, Hq or 1, Sq, Skv) (fewer leading dims
    count as 1): bool (True = attend) or an additive float32 / bfloat16 one, which the launcher makes float32."""
    q, k, v = specs[:3]
    if any(not isinstance(t, TensorSpec) or t.dtype not in _FLASH_DTYPES for t in (q, k, v)):
        return "the flash-attention program takes bfloat16 or block-float q, k and v"
    if attrs.get("dropout_p"):
        return "the flash-attention program has no dropout"
    if q.ndim != 4 or min(*q.shape, *k.shape, *v.shape) == 0:
        return "the flash-attention program takes non-empty (B, H, S, D) q, k and v"
    if len(specs) > 3:
        m = specs[3]
        b, hq, sq = q.shape[:3]
        full = (1,) * (4 - m.ndim) + tuple(m.shape) if isinstance(m, TensorSpec) and m.ndim <= 4 else ()
        if (not full or m.dtype not in (DType.FLOAT32, DType.BFLOAT16, DType.BOOL) or full[0] not in (1, b)
                or full[1] not in (1, hq) or full[2:] != (sq, k.shape[2])):  # fmt: skip
            return "the flash-attention program takes a bool or additive (B or 1, H or 1, Sq, Skv) mask"
    return None


class FlashLauncher:
    """The flash-attention program on the program path (``kernels.run``'s ``launch``; on a card, ``generic_op``):
    q, k, v [, mask] -> out and the program's logsumexp, one float32 row of 32 per Q tile, which a copy then brings
    to the IR's (B, H, Sq)."""

    def __init__(self) -> None:
        from kohakutt.kernels.custom import ProgramOp

        self.program_op = ProgramOp("ktt:scaled_dot_product_attention", self._builder)

    @staticmethod
    def _builder(sig: Any) -> Any:
        from kohakutt.kernels.programs.attention import flash_attention_program

        st = dict(sig.static)
        t = {r.name: r for r in sig.tensors}
        prog = flash_attention_program(
            st["shapes"][0], st["shapes"][1], st["shapes"][2], scale=st["scale"], causal=st["causal"],
            mask_shape=st["shapes"][3] if "mask" in t else None, fidelity=st["fidelity"],
            dtypes=[t[n].dtype for n in ("q", "k", "v")], out_dtype=t["out"].dtype)  # fmt: skip
        prog.tensors = sig.names
        return prog

    def __call__(self, inputs: list, outs: list, attrs: dict, num: Numerics, stream: Any = None) -> bool:
        from kohakutt.ir.dtypes import DType as D
        from kohakutt.kernels.runner import run
        from kohakutt.kernels.tensor import DeviceTensor, empty

        if not all(isinstance(x, DeviceTensor) for x in inputs):
            return False
        specs = [x.spec for x in inputs]
        if _flash_supports(specs, attrs) is not None:
            return False
        q, k, v = specs[:3]
        b, hq, sq, _ = q.shape
        sqt = -(-sq // 32)
        fid = Fidelity(default_fidelity(num, [q.dtype, k.dtype, v.dtype], Fidelity.HiFi4))
        static = {"shapes": tuple(s.shape for s in specs), "scale": float(resolve_scale(attrs["scale"], q.shape[-1])),
                  "causal": bool(attrs["is_causal"]), "fidelity": fid.name}  # fmt: skip
        dev = inputs[0].buffer.device
        inputs, made = list(inputs), []
        if len(inputs) > 3 and (specs[3].dtype is not D.FLOAT32 or specs[3].ndim != 4):  # the program's mask: float32
            m = inputs[3]  # additive, 4-D, as additive_mask gives the model
            if m.spec.dtype is D.BOOL:
                (m,) = run("where", [m, 0.0, float("-inf")], stream=stream)
            elif m.spec.dtype is not D.FLOAT32:
                (m,) = run("typecast", [m], {"dtype": "float32"}, stream=stream)  # exact from bfloat16
            made.append(m)
            if m.spec.ndim != 4:
                (m,) = run("reshape", [m], {"shape": (1,) * (4 - m.spec.ndim) + tuple(m.spec.shape)}, stream=stream)
                made.append(m)
            inputs[3] = m
            specs = [x.spec for x in inputs]
            static["shapes"] = tuple(sp.shape for sp in specs)
        lse_rows = empty(dev, TensorSpec((b * hq * sqt, 32), D.FLOAT32))
        names = ("q", "k", "v", "mask")[: len(inputs)]
        self.program_op.launch(dict(zip(names, inputs)), {"out": outs[0], "lse": lse_rows}, {}, static,
                               layouts={"lse": "row_major"}, stream=stream)  # fmt: skip
        rows = DeviceTensor(lse_rows.buffer, TensorSpec((b, hq, sq), D.FLOAT32), (hq * sqt * 32, sqt * 32, 1), 0)
        run("copy", [rows], out=[outs[1]], stream=stream)
        for t in (lse_rows, *made):
            dev.free(t.buffer, stream)  # once the work queued on the launch's stream is done
        return True


FLASH = FlashLauncher()
sim("scaled_dot_product_attention", estimate=attention_cost, supports=_ttnn_sdpa_supports)(_sdpa_ttnn)
sim("scaled_dot_product_attention", provider="ktt", estimate=flash_cost, program=_program, launch=FLASH,
    supports=_flash_supports)(_sdpa_ktt)  # fmt: skip
# what TT-NN's SDPA refuses: the host computes it as the own flash-attention program does (its numerics)
host("scaled_dot_product_attention", estimate=flash_cost)(_sdpa_ktt)
host("sdpa_varlen", estimate=flash_cost)(_varlen_ktt)
sim("sdpa_backward", estimate=attention_backward_cost)(_sdpa_backward_ttnn)
host("sdpa_backward", estimate=flash_backward_cost)(_sdpa_backward_ktt)
sim("sdpa_varlen", estimate=attention_cost, supports=_ttnn_sdpa_supports)(_varlen_ttnn)
sim("sdpa_varlen", provider="ktt", estimate=flash_cost, program=_program)(_varlen_ktt)
sim("sdpa_varlen_backward", estimate=attention_backward_cost)(_varlen_backward_ttnn)
host("sdpa_varlen_backward", estimate=flash_backward_cost)(_varlen_backward_ktt)


# ------------------------------------------------------------------------------------------ real card: TT-NN
def _config(tt: Any, x: Any, num: Numerics) -> Any:
    fid, acc, approx = _ttnn_setup(num)
    return tt.init_device_compute_kernel_config(x.device().arch(), math_fidelity=getattr(tt.MathFidelity, fid.name),
                                                math_approx_mode=approx, fp32_dest_acc_en=acc,
                                                packer_l1_acc=False)  # fmt: skip


def _tt_mask(tt: Any, mask: Any, like: Any) -> Any:
    """A mask as TT-NN's SDPA takes it: additive, in ``like``'s dtype, 4-D. A bool mask (which ``card_call`` hands
    over as int32) becomes 0 where kept and -inf where masked (TT-NN's where takes no integer condition)."""
    if mask is None:
        return None
    if mask.dtype in (tt.int32, tt.uint32, tt.uint16, tt.uint8):
        mask = tt.where(tt.typecast(mask, like.dtype), 0.0, -math.inf)
    elif mask.dtype != like.dtype:
        mask = tt.typecast(mask, like.dtype)
    shape = tuple(mask.shape)
    return tt.reshape(mask, (1,) * (4 - len(shape)) + shape) if len(shape) < 4 else mask


def _tt_causal(tt: Any, like: Any, sq: int, skv: int, offset: int) -> Any:
    """The causal mask as an additive (1, 1, Sq, Skv) tensor in ``like``'s dtype: -inf where key j > query i +
    offset."""
    full = tt.full((1, 1, sq, skv), -math.inf, dtype=like.dtype, layout=tt.TILE_LAYOUT, device=like.device())
    return tt.triu(full, diagonal=1 + offset)


def _tt_lse(tt: Any, q: Any, k: Any, mask: Any, scale: float, causal: bool, offset: int, num: Numerics
            ) -> tuple[Any, Any]:  # fmt: skip
    """(logsumexp (B, H, Sq) float32, rows that see no key (B, H, Sq, 1)), composed from ttnn ops (TT-NN's SDPA does
    not return the logsumexp): matmul, scale, mask, max, exp, sum, log."""
    hq, hkv = q.shape[1], k.shape[1]
    if hq > hkv:
        k = tt.repeat_interleave(k, hq // hkv, dim=1)
    cfg = _config(tt, q, num)
    s = tt.multiply(tt.matmul(q, k, transpose_b=True, compute_kernel_config=cfg), scale)
    if mask is not None:
        s = tt.add(s, mask)
    if causal:
        s = tt.add(s, _tt_causal(tt, q, q.shape[2], k.shape[2], offset))
    mx = tt.max(s, dim=-1, keepdim=True)
    dead = tt.isneginf(mx)
    lse = tt.add(mx, tt.log(tt.sum(tt.exp(tt.subtract(s, mx)), dim=-1, keepdim=True)))
    lse = tt.where(dead, -math.inf, lse)
    return tt.typecast(tt.reshape(lse, tuple(q.shape)[:3]), tt.float32), dead


def _tt_forward(tt: Any, q: Any, k: Any, v: Any, mask: Any, scale: float, causal: bool, offset: int,
                num: Numerics) -> list:  # fmt: skip
    """TT-NN's SDPA (is_causal only for top-left causal without a mask: TT-NN takes one or the other, so other cases
    pass the causal triangle inside the mask), with rows that see no key set to 0 (TT-NN's kernel gives NaN)."""
    sq, skv = q.shape[2], k.shape[2]
    if q.dtype not in (tt.bfloat16, tt.bfloat8_b, tt.bfloat4_b):
        raise KohakuTTUnsupportedOperator(f"scaled_dot_product_attention: TT-NN's SDPA takes bfloat16 or block "
                                          f"floats, not {q.dtype}")  # fmt: skip
    if k.shape[3] != v.shape[3]:
        raise KohakuTTUnsupportedOperator(f"scaled_dot_product_attention: TT-NN's SDPA takes one head dim for keys "
                                          f"and values, got {k.shape[3]} and {v.shape[3]}")  # fmt: skip
    if causal and (mask is not None or offset or sq != skv):
        tri = _tt_causal(tt, q, sq, skv, offset)
        mask, causal = (tri if mask is None else tt.add(mask, tri)), False
    out = tt.transformer.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                                      compute_kernel_config=_config(tt, q, num))  # fmt: skip
    lse, dead = _tt_lse(tt, q, k, mask, scale, causal, 0, num)
    return [tt.where(dead, 0.0, out), lse]


def _tt_fill(tt: Any, like: Any, shape: tuple, value: float, dtype: Any) -> Any:
    return tt.full(tuple(shape), value, dtype=dtype, layout=tt.TILE_LAYOUT, device=like.device())


def _tt_empty(tt: Any, like: Any, out_shape: tuple, lse_shape: tuple) -> list:
    """(zeros, -inf): attention with no key at all (TT-NN's SDPA needs at least one)."""
    return [_tt_fill(tt, like, out_shape, 0.0, like.dtype), _tt_fill(tt, like, lse_shape, -math.inf, tt.float32)]


# on a card the flash-attention program runs through generic_op: the same launcher, over the card's buffers
@ttnn("scaled_dot_product_attention", provider="ktt", program=_program, launch=FLASH, supports=_flash_supports)
def _flash_on_card(*args: Any, **kw: Any) -> Any:
    raise KohakuTTUnsupportedOperator("scaled_dot_product_attention: on a card the flash-attention program runs "
                                      "through its launcher, for the operands it takes (the default passes others "
                                      "to TT-NN's SDPA)")  # fmt: skip


@ttnn("scaled_dot_product_attention", supports=_ttnn_sdpa_supports)
def sdpa_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    q, k, v = inputs[:3]
    if k.shape[2] == 0:
        return _tt_empty(tt, q, out_specs[0].shape, out_specs[1].shape)
    mask = _tt_mask(tt, inputs[3] if len(inputs) > 3 else None, q)
    return _tt_forward(tt, q, k, v, mask, resolve_scale(attrs["scale"], q.shape[-1]), bool(attrs["is_causal"]), 0,
                       num)  # fmt: skip


def _tt_backward(tt: Any, g: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, mask: Any, scale: float, causal: bool,
                 offset: int, num: Numerics) -> list:  # fmt: skip
    """sdpa_backward from ttnn ops (no fused SDPA backward exists in TT-NN 0.81)."""
    hq, hkv = q.shape[1], k.shape[1]
    grp = hq // hkv
    kk = tt.repeat_interleave(k, grp, dim=1) if grp > 1 else k
    vv = tt.repeat_interleave(v, grp, dim=1) if grp > 1 else v
    cfg = _config(tt, q, num)
    s = tt.multiply(tt.matmul(q, kk, transpose_b=True, compute_kernel_config=cfg), scale)
    if mask is not None:
        s = tt.add(s, mask)
    if causal:
        s = tt.add(s, _tt_causal(tt, q, q.shape[2], k.shape[2], offset))
    lse4 = tt.reshape(tt.typecast(lse, q.dtype), (*tuple(lse.shape), 1))
    p = tt.where(tt.isneginf(lse4), 0.0, tt.exp(tt.subtract(s, lse4)))  # rows that saw no key: no gradient
    dv = tt.matmul(p, g, transpose_a=True, compute_kernel_config=cfg)
    dp = tt.matmul(g, vv, transpose_b=True, compute_kernel_config=cfg)
    dd = tt.sum(tt.multiply(g, o), dim=-1, keepdim=True)
    ds = tt.multiply(p, tt.subtract(dp, dd))
    dq = tt.multiply(tt.matmul(ds, kk, compute_kernel_config=cfg), scale)
    dk = tt.multiply(tt.matmul(ds, q, transpose_a=True, compute_kernel_config=cfg), scale)
    if grp > 1:
        b, _, skv, d = tuple(k.shape)
        dk = tt.sum(tt.reshape(dk, (b * hkv, grp, skv, d)), dim=1)
        dv = tt.sum(tt.reshape(dv, (b * hkv, grp, skv, v.shape[3])), dim=1)
        dk, dv = tt.reshape(dk, tuple(k.shape)), tt.reshape(dv, tuple(v.shape))
    return [dq, dk, dv]


@ttnn("sdpa_backward")
def sdpa_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    g, q, k, v, o, lse = inputs[:6]
    mask = _tt_mask(tt, inputs[6] if len(inputs) > 6 else None, q)
    return _tt_backward(tt, g, q, k, v, o, lse, mask, resolve_scale(attrs["scale"], q.shape[-1]),
                        bool(attrs["is_causal"]), 0, num)  # fmt: skip


def _tt_sequences(tt: Any, cu_q: Any, cu_k: Any) -> list[tuple[int, int, int, int]]:
    """The sequence bounds, read back to the host (the loop over sequences is host-side)."""
    hq, hk = (np.asarray(tt.to_torch(c)).reshape(-1).astype(np.int64) for c in (cu_q, cu_k))
    return [(int(hq[i]), int(hq[i + 1]), int(hk[i]), int(hk[i + 1])) for i in range(hq.size - 1)]


def _tt_seq(tt: Any, x: Any, a: int, z: int) -> Any:
    """Rows a:z of a packed (T, H, D) tensor as (1, H, z - a, D)."""
    part = tt.slice(x, (a, 0, 0), (z, x.shape[1], x.shape[2]))
    return tt.reshape(tt.permute(part, (1, 0, 2)), (1, x.shape[1], z - a, x.shape[2]))


@ttnn("sdpa_varlen", supports=_ttnn_sdpa_supports)
def sdpa_varlen_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    """Per sequence: TT-NN's SDPA on slices, causal aligned bottom-right (an explicit mask when Sq != Sk)."""
    q, k, v, cu_q, cu_k = inputs
    scale, causal = resolve_scale(attrs["scale"], q.shape[-1]), bool(attrs["is_causal"])
    hq, dv = q.shape[1], v.shape[2]
    outs, lses = [], []
    bounds = _tt_sequences(tt, cu_q, cu_k)
    for q0, q1, k0, k1 in bounds:
        if q1 == q0:
            continue
        qs = _tt_seq(tt, q, q0, q1)
        if k1 == k0:
            o, ls = _tt_empty(tt, q, (1, hq, q1 - q0, dv), (1, hq, q1 - q0))
        else:
            o, ls = _tt_forward(tt, qs, _tt_seq(tt, k, k0, k1), _tt_seq(tt, v, k0, k1), None, scale, causal,
                                (k1 - k0) - (q1 - q0), num)  # fmt: skip
        outs.append(tt.permute(tt.reshape(o, (hq, q1 - q0, dv)), (1, 0, 2)))
        lses.append(tt.reshape(ls, (hq, q1 - q0)))
    tail = q.shape[0] - (bounds[-1][1] if bounds else 0)  # packed rows after the last sequence: 0 and -inf
    if tail > 0 or not outs:
        outs.append(_tt_fill(tt, q, (tail, hq, dv), 0.0, q.dtype))
        lses.append(_tt_fill(tt, q, (hq, tail), -math.inf, tt.float32))
    return [tt.concat(outs, dim=0), tt.concat(lses, dim=1)]


@ttnn("sdpa_varlen_backward")
def sdpa_varlen_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    """Per sequence: the composed backward on slices; sequences without queries or keys give zero gradients."""
    g, q, k, v, o, lse, cu_q, cu_k = inputs
    scale, causal = resolve_scale(attrs["scale"], q.shape[-1]), bool(attrs["is_causal"])
    dqs, dks, dvs = [], [], []
    bounds = _tt_sequences(tt, cu_q, cu_k)
    for q0, q1, k0, k1 in bounds:
        if q1 == q0 or k1 == k0:
            for parts, x, a, z in ((dqs, q, q0, q1), (dks, k, k0, k1), (dvs, v, k0, k1)):
                if z > a:
                    parts.append(_tt_fill(tt, x, (z - a, x.shape[1], x.shape[2]), 0.0, x.dtype))
            continue
        seq = [_tt_seq(tt, x, q0, q1) for x in (g, q)] + [_tt_seq(tt, x, k0, k1) for x in (k, v)]
        ls = tt.reshape(tt.slice(lse, (0, q0), (lse.shape[0], q1)), (1, lse.shape[0], q1 - q0))
        dq, dk, dv = _tt_backward(tt, *seq, _tt_seq(tt, o, q0, q1), ls, None, scale, causal, (k1 - k0) - (q1 - q0),
                                  num)  # fmt: skip
        dqs.append(tt.permute(tt.reshape(dq, tuple(dq.shape)[1:]), (1, 0, 2)))
        dks.append(tt.permute(tt.reshape(dk, tuple(dk.shape)[1:]), (1, 0, 2)))
        dvs.append(tt.permute(tt.reshape(dv, tuple(dv.shape)[1:]), (1, 0, 2)))
    ends = (bounds[-1][1], bounds[-1][3]) if bounds else (0, 0)
    for parts, x, end in ((dqs, q, ends[0]), (dks, k, ends[1]), (dvs, v, ends[1])):
        if x.shape[0] > end or not parts:  # packed rows outside every sequence get no gradient
            parts.append(_tt_fill(tt, x, (x.shape[0] - end, x.shape[1], x.shape[2]), 0.0, x.dtype))
    return [tt.concat(dqs, dim=0), tt.concat(dks, dim=0), tt.concat(dvs, dim=0)]


# ------------------------------------------------------------------------------------------------- benchmark
def attention_case(device: Any = None, shape: tuple[int, int, int, int] = (4, 16, 1024, 64), causal: bool = True,
                   ) -> tuple[Callable[[], object], Callable[[], object]]:  # fmt: skip
    """``(sim_fn, ref_fn)`` for benchmarks/sim_kernels.py: the own kernel (provider ktt) on bf16 q / k / v of
    ``shape`` = (B, H, S, D) against torch CPU float32 F.scaled_dot_product_attention on the same values."""
    from kohakutt import hal
    from kohakutt import kernels as kk

    dev = device or hal.open_device(0)
    rng = np.random.default_rng(0)
    ts, refs = [], []
    for _ in range(3):
        t = kk.from_numpy(dev, rng.standard_normal(shape).astype(np.float32), "bfloat16")
        ts.append(t)
        refs.append(torch.from_numpy(kk.to_numpy(t)))

    def sim_fn() -> None:
        outs = kk.run("scaled_dot_product_attention", ts, {"is_causal": causal}, provider="ktt")
        dev.synchronize()
        for o in outs:
            kk.free(o)

    def ref_fn() -> object:
        return torch.nn.functional.scaled_dot_product_attention(*refs, is_causal=causal)

    return sim_fn, ref_fn


def measure_attention(repeat: int = 3, **kw: Any) -> tuple[float, float]:
    """(sim seconds, torch seconds), each the best of ``repeat`` warm runs of :func:`attention_case`."""
    fns = attention_case(**kw)
    best = [math.inf, math.inf]
    for f in fns:
        f()
    for _ in range(repeat):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best[0], best[1]
