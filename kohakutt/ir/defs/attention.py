"""IR ops of the attention family: scaled dot-product attention (MHA, GQA, MQA; causal; additive or boolean masks),
its packed variable-length form (flash-attn's varlen API) and the backward ops of both.

Shapes follow PyTorch: q (B, Hq, Sq, D), k (B, Hkv, Skv, D), v (B, Hkv, Skv, Dv) with Hq a multiple of Hkv (query
head h reads key/value head h // (Hq / Hkv)); the mask is bool (True = attend) or float (added to the scaled scores)
and broadcasts to (B, Hq, Sq, Skv). ``is_causal`` masks key j for query i when j > i (PyTorch's top-left alignment,
also when Sq != Skv); the varlen ops align causal masks bottom-right per sequence, as flash-attn >= 2.1 does. A query
row that sees no key gives 0 and a logsumexp of -inf (PyTorch's convention). The second output, logsumexp, is the
float32 log of each row's softmax denominator over the scaled, masked scores (what the backward ops take).

Numerics: left unset (``Numerics()``), so each provider applies its own default: provider ttnn calls
``ttnn.transformer.scaled_dot_product_attention`` with a compute config of HiFi4, an fp32 DST and exact exp (TT-NN's
own defaults, ``init_device_compute_kernel_config(arch, cfg, HiFi2, true, false, false)``, put bf16 attention a few
percent off); its intermediates are bf16 and it works in 32 x 32 Q and K chunks; provider ktt (Kohaku-TT's flash
attention program) runs at HiFi4 with an fp32 DST. A ``numerics(...)`` scope's fidelity applies to
both; fp32_acc and approx apply to provider ttnn only (the own kernel always keeps fp32 statistics and exact exp).
Both are one pass on TF32 (float32) or bf16 operands, with P rounded to bf16: ``fp32_matmul="medium"`` moves the own
kernel to HiFi2, "highest" does not split them (PyTorch's float32 attention under "highest", its default, takes the
math path on tt instead: split matmuls and an exact softmax).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, broadcast_shapes, define

FAMILY = "attention"
ATTENTION_MATH = Numerics()  # every field: the provider's default (see the module docstring)


def _tensor(s: Spec, op: str, name: str, *, ndim: int | None = None, floats: bool = True) -> TensorSpec:
    if not isinstance(s, TensorSpec):
        raise ShapeError(f"{op}: {name} must be a tensor, not the Python number {s}")
    if floats and not s.dtype.is_float:
        raise DtypeError(f"{op}: {name} is {s.dtype.value}; attention takes float32, bfloat16, bfloat8_b or "
                         "bfloat4_b tensors (typecast it first)")  # fmt: skip
    if ndim is not None and s.ndim != ndim:
        raise ShapeError(f"{op}: {name} must be {ndim}-D, got shape {s.shape}")
    return s


def _check_attrs(op: str, attrs: dict[str, Any]) -> None:
    if float(attrs.get("dropout_p", 0.0)) != 0.0:
        raise KohakuTTUnsupportedOperator(f"{op}: dropout_p={attrs['dropout_p']} is not supported (only 0.0); "
                                          "apply dropout to the output outside attention")  # fmt: skip
    scale = attrs.get("scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
        raise ShapeError(f"{op}: scale must be a number or None (1/sqrt(D)), not {scale!r}")


def attention_shapes(q: Sequence[int], k: Sequence[int], v: Sequence[int], op: str = "scaled_dot_product_attention"
                     ) -> tuple[int, int, int, int, int, int, int]:  # fmt: skip
    """(B, Hq, Hkv, Sq, Skv, D, Dv) of 4-D q / k / v, or a ShapeError naming what does not fit."""
    b, hq, sq, d = q
    bk, hkv, skv, dk = k
    bv, hv, sv, dv = v
    if (bk, hkv, skv) != (bv, hv, sv):
        raise ShapeError(f"{op}: k {tuple(k)} and v {tuple(v)} must agree in batch, heads and length")
    if bk != b:
        raise ShapeError(f"{op}: q has batch {b} but k/v have {bk}")
    if dk != d:
        raise ShapeError(f"{op}: q and k head dims differ ({d} vs {dk}); the scores need q @ k^T")
    if hkv == 0 or hq % hkv:
        raise ShapeError(f"{op}: {hq} query heads are not a multiple of {hkv} key/value heads (GQA needs Hq = "
                         "g * Hkv; repeat k/v heads or pick other head counts)")  # fmt: skip
    return b, hq, hkv, sq, skv, d, dv


def check_mask(m: Spec, full: tuple[int, ...], op: str) -> TensorSpec:
    """The mask spec, checked to be bool or float and broadcastable to ``full`` = (B, Hq, Sq, Skv)."""
    m = _tensor(m, op, "attn_mask", floats=False)
    if not (m.dtype.is_float or m.dtype is DType.BOOL):
        raise DtypeError(f"{op}: attn_mask is {m.dtype.value}; pass a bool mask (True = attend) or a float mask "
                         "(added to the scores)")  # fmt: skip
    try:
        if m.ndim > 4 or broadcast_shapes(m.shape, full) != full:
            raise ShapeError("")
    except ShapeError:
        raise ShapeError(f"{op}: attn_mask of shape {m.shape} does not broadcast to (B, Hq, Sq, Skv) = "
                         f"{full}") from None  # fmt: skip
    return m


def _sdpa(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    op = "scaled_dot_product_attention"
    if len(inputs) > 4:
        raise ShapeError(f"{op} takes q, k, v and an optional attn_mask, got {len(inputs)} operands")
    q, k, v = (_tensor(s, op, n, ndim=4) for s, n in zip(inputs, "qkv"))
    _check_attrs(op, attrs)
    b, hq, _, sq, skv, _, dv = attention_shapes(q.shape, k.shape, v.shape, op)
    if len(inputs) == 4:
        check_mask(inputs[3], (b, hq, sq, skv), op)
    dt = promote(q.dtype, k.dtype, v.dtype)
    return [TensorSpec((b, hq, sq, dv), dt), TensorSpec((b, hq, sq), DType.FLOAT32)]


def _sdpa_backward(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    op = "sdpa_backward"
    if len(inputs) > 7:
        raise ShapeError(f"{op} takes grad_out, q, k, v, out, logsumexp and an optional attn_mask, got "
                         f"{len(inputs)} operands")  # fmt: skip
    names = ("grad_out", "q", "k", "v", "out")
    g, q, k, v, o = (_tensor(s, op, n, ndim=4) for s, n in zip(inputs, names))
    lse = _tensor(inputs[5], op, "logsumexp", ndim=3)
    _check_attrs(op, attrs)
    b, hq, _, sq, skv, _, dv = attention_shapes(q.shape, k.shape, v.shape, op)
    if g.shape != (b, hq, sq, dv) or o.shape != g.shape:
        raise ShapeError(f"{op}: grad_out {g.shape} and out {o.shape} must be the forward's output shape "
                         f"{(b, hq, sq, dv)}")  # fmt: skip
    if lse.shape != (b, hq, sq):
        raise ShapeError(f"{op}: logsumexp {lse.shape} must be (B, Hq, Sq) = {(b, hq, sq)}")
    if len(inputs) == 7:
        check_mask(inputs[6], (b, hq, sq, skv), op)
    return [TensorSpec(q.shape, q.dtype), TensorSpec(k.shape, k.dtype), TensorSpec(v.shape, v.dtype)]


def _varlen_common(op: str, q: Spec, k: Spec, v: Spec, cq: Spec, ck: Spec, attrs: dict[str, Any]):
    q, k, v = (_tensor(s, op, n, ndim=3) for s, n in zip((q, k, v), "qkv"))
    for s, n in ((cq, "cu_seqlens_q"), (ck, "cu_seqlens_k")):
        s = _tensor(s, op, n, ndim=1, floats=False)
        if s.dtype is not DType.INT32:
            raise DtypeError(f"{op}: {n} must be int32 (cumulative sequence starts, batch + 1 values), got "
                             f"{s.dtype.value}")  # fmt: skip
    if cq.shape != ck.shape or cq.shape[0] < 1:
        raise ShapeError(f"{op}: cu_seqlens_q {cq.shape} and cu_seqlens_k {ck.shape} must both hold batch + 1 values")
    _check_attrs(op, attrs)
    for name in ("max_seqlen_q", "max_seqlen_k"):
        val = attrs[name]
        if isinstance(val, bool) or not isinstance(val, int) or val < 0:
            raise ShapeError(f"{op}: {name} must be a non-negative int, not {val!r}")
    if k.shape[:2] != v.shape[:2]:
        raise ShapeError(f"{op}: k {k.shape} and v {v.shape} must agree in tokens and heads")
    if q.shape[2] != k.shape[2]:
        raise ShapeError(f"{op}: q and k head dims differ ({q.shape[2]} vs {k.shape[2]})")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ShapeError(f"{op}: {q.shape[1]} query heads are not a multiple of {k.shape[1]} key/value heads")
    return q, k, v


def _varlen(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    q, k, v = _varlen_common("sdpa_varlen", *inputs, attrs)
    tq, hq = q.shape[:2]
    return [TensorSpec((tq, hq, v.shape[2]), promote(q.dtype, k.dtype, v.dtype)), TensorSpec((hq, tq), DType.FLOAT32)]


def _varlen_backward(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    op = "sdpa_varlen_backward"
    g, q, k, v, o, lse, cq, ck = inputs
    q, k, v = _varlen_common(op, q, k, v, cq, ck, attrs)
    g, o = _tensor(g, op, "grad_out", ndim=3), _tensor(o, op, "out", ndim=3)
    lse = _tensor(lse, op, "logsumexp", ndim=2)
    want = (q.shape[0], q.shape[1], v.shape[2])
    if g.shape != want or o.shape != want:
        raise ShapeError(f"{op}: grad_out {g.shape} and out {o.shape} must be the forward's output shape {want}")
    if lse.shape != (q.shape[1], q.shape[0]):
        raise ShapeError(f"{op}: logsumexp {lse.shape} must be (Hq, total_q) = {(q.shape[1], q.shape[0])}")
    return [TensorSpec(q.shape, q.dtype), TensorSpec(k.shape, k.dtype), TensorSpec(v.shape, v.dtype)]


_ATTRS = {"is_causal": False, "scale": None, "dropout_p": 0.0}
_VARLEN_ATTRS = {"max_seqlen_q": 0, "max_seqlen_k": 0, "is_causal": False, "scale": None, "dropout_p": 0.0}

_TTNN_FWD = (
    "provider ttnn models ttnn.transformer.scaled_dot_product_attention with its defaults: bf16 operands, Q and K "
    "in 32 x 32 chunks, QK^T on the FPU at HiFi2 into a 16-bit DST, stored bf16; times the scale (bf16, FPU at the "
    "fidelity); plus the mask (bf16); row max (GMPOOL); exp(x - max) with the approximate (Schraudolph) exp; row sums "
    "by the reduce LLK; P @ V at HiFi2; the running max, sum and output rescaled per K chunk with exp(old - new), "
    "every intermediate stored bf16; finally 1/sum with the approximate reciprocal and one more multiply. Its "
    "logsumexp (which TT-NN's kernel does not return) is composed from ttnn ops: scores, max, exp, sum, log, in bf16. "
)
_KTT_FWD = (
    "provider ktt is Kohaku-TT's flash attention program (kohakutt/kernels/programs/attention.py): per 32-row Q tile "
    "and 128-key K chunk, S = Q K^T at HiFi4 into an fp32 DST, times the scale and plus the mask in fp32, stored fp32; "
    "running max (fp32, K chunks past the causal diagonal skipped), P = exp(S - max) exact and stored bf16 for P @ V, "
    "running sum and output in fp32 rescaled by exp(old max - new max); fp32 values passing through a circular "
    "buffer reach the FPU as TF32 (as the simulator's unpacker model has it); out = O * (1 / sum), rounded once to "
    "the output dtype. Padding keys (Skv not a multiple of 32) are masked with -inf."
)

define("scaled_dot_product_attention", FAMILY, ["q", "k", "v", "*attn_mask"], _sdpa, attrs=dict(_ATTRS),
       numerics=ATTENTION_MATH, outputs=2,
       doc="(out, logsumexp) = softmax(q k^T * scale + mask) v and the rows' log-sum-exp, PyTorch's "
           "F.scaled_dot_product_attention (scale None = 1/sqrt(D); is_causal top-left; GQA/MQA when Hq > Hkv; "
           "dropout_p must be 0). " + _TTNN_FWD + _KTT_FWD)  # fmt: skip
define("sdpa_backward", FAMILY, ["grad_out", "q", "k", "v", "out", "logsumexp", "*attn_mask"], _sdpa_backward,
       attrs=dict(_ATTRS), numerics=ATTENTION_MATH, outputs=3,
       doc="(dq, dk, dv) of scaled_dot_product_attention given grad_out, the inputs, the forward's out and "
           "logsumexp: P = exp(S - lse), dv = P^T dO, dS = P * (dO v^T - rowsum(dO * out)), dq = dS k * scale, "
           "dk = dS^T q * scale; dk and dv summed over each GQA group. TT-NN 0.81 has no SDPA backward, so provider "
           "ttnn composes it from ttnn.matmul (HiFi4 and an fp32 DST by default), ttnn.multiply / subtract / exp / "
           "sum, every intermediate stored bf16. provider host (flash-attention-2 style): scores, P, dP and dS in "
           "fp32, P and dS rounded to bf16 as matmul operands, HiFi4 matmuls into fp32 DST.")  # fmt: skip
define("sdpa_varlen", FAMILY, ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k"], _varlen, attrs=dict(_VARLEN_ATTRS),
       numerics=ATTENTION_MATH, outputs=2,
       doc="flash-attn's varlen attention over packed sequences: q (total_q, Hq, D), k / v (total_k, Hkv, D/Dv), "
           "cu_seqlens_q / cu_seqlens_k int32 (batch + 1 cumulative starts), max_seqlen_q / max_seqlen_k (bounds, "
           "checked when run); sequence i attends q rows cu_q[i]:cu_q[i+1] to k rows cu_k[i]:cu_k[i+1] only; causal "
           "is aligned bottom-right. Returns (out (total_q, Hq, Dv), logsumexp (Hq, total_q) float32). Each sequence "
           "runs as scaled_dot_product_attention does on each provider (TT-NN's SDPA packs sequences only as "
           "self-attention windows, cu_window_seqlens; provider ttnn runs its SDPA per sequence).")  # fmt: skip
define("sdpa_varlen_backward", FAMILY, ["grad_out", "q", "k", "v", "out", "logsumexp", "cu_seqlens_q",
       "cu_seqlens_k"], _varlen_backward, attrs=dict(_VARLEN_ATTRS), numerics=ATTENTION_MATH, outputs=3,
       doc="(dq, dk, dv) of sdpa_varlen, each sequence as sdpa_backward computes it on each provider.")  # fmt: skip
