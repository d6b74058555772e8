"""Matrix products on ``tt``: mm, bmm, addmm, baddbmm, addbmm, mv, addmv, dot, vdot, addr and addmm + activation;
and pairwise distances (cdist, pdist and their backward).

Each runs the matmul family's IR ops, so the card's numerics apply: TT-NN's defaults by operand dtype (HiFi4 with
fp32 accumulation for float32, whose values reach the multiplier as TF32; HiFi2 for bfloat16; LoFi for block floats),
or the enclosing ``kohakutt.numerics(...)`` scope. Integer matrices are a DtypeError (the matrix engine multiplies
floats). ``matmul`` and ``linear`` are PyTorch compositions (CompositeImplicitAutograd) that reach these kernels, so
they keep PyTorch's autograd.

Distances are computed from the differences of the rows in fp32 (element-wise, then a sum: the sum's TF32 operands
are the only rounding beyond fp32: under 2^-10 relative, the terms of a p-norm being non-negative), not from the
matrix-product identity, which cancels for close points.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from kohakutt.frontends.torch.aten.registry import Args, composite, computed, ir, release
from kohakutt.ir.numerics import numerics
from kohakutt.kernels.tensor import DeviceTensor


def _num(x: Any) -> float:
    return float(x.item() if isinstance(x, torch.Tensor) else x)


def _mm(op: str) -> Any:
    """mm / bmm, also with an ``out_dtype`` (float32 results of bfloat16 operands accumulate in fp32 DST)."""

    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        other = a["mat2"]
        if a.get("out_dtype") == torch.float32 and a.self.dtype != torch.float32:
            with numerics(fp32_acc=True):
                ir(op, [a.self, other], None, outs, a._index)
            return
        ir(op, [a.self, other], None, outs, a._index)

    return impl


computed("mm", "mm.out", "mm.dtype", "mm.dtype_out", ir=("matmul",))(_mm("matmul"))
computed("bmm", "bmm.out", "bmm.dtype", "bmm.dtype_out", ir=("bmm",))(_mm("bmm"))


def _addmm(op: str, m1: str, m2: str) -> Any:
    """beta * self + alpha * (m1 @ m2) as one IR op (the product stored, scaled, then the input added)."""

    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        attrs = {"beta": _num(a.get("beta", 1)), "alpha": _num(a.get("alpha", 1))}
        if a.get("out_dtype") == torch.float32 and a.self.dtype != torch.float32:
            with numerics(fp32_acc=True):
                ir(op, [a.self, a[m1], a[m2]], attrs, outs, a._index)
            return
        ir(op, [a.self, a[m1], a[m2]], attrs, outs, a._index)

    return impl


computed("addmm", "addmm.out", "addmm_", "addmm.dtype", "addmm.dtype_out", ir=("addmm",))(
    _addmm("addmm", "mat1", "mat2")
)
computed("baddbmm", "baddbmm.out", "baddbmm_", "baddbmm.dtype", "baddbmm.dtype_out", ir=("baddbmm",))(
    _addmm("baddbmm", "batch1", "batch2")
)


def _addmm_activation(a: Args, outs: list[torch.Tensor]) -> None:
    attrs = {"beta": _num(a.beta), "alpha": _num(a.alpha)}
    prod = ir("addmm", [a.self, a.mat1, a.mat2], attrs, None, a._index)[0]
    if a.use_gelu:
        ir("gelu", [prod], {"approximate": "tanh"}, outs, a._index)
    else:
        ir("relu", [prod], None, outs, a._index)
    release(a._index, prod)


computed("_addmm_activation", "_addmm_activation.out", ir=("addmm", "relu", "gelu"))(_addmm_activation)


def _combine(a: Args, product: DeviceTensor, outs: list[torch.Tensor]) -> None:
    """outs = beta * self + alpha * product (beta = 0 ignores self, NaN included, as PyTorch)."""
    beta, alpha = _num(a.get("beta", 1)), _num(a.get("alpha", 1))
    if beta == 0:
        ir("mul", [product, alpha], None, outs, a._index)
        return
    scratch = []
    base: Any = a.self
    if beta != 1:
        base = ir("mul", [a.self, beta], None, None, a._index)[0]
        scratch.append(base)
    ir("add", [base, product], {"alpha": alpha}, outs, a._index)
    release(a._index, *scratch)


def _addbmm(a: Args, outs: list[torch.Tensor]) -> None:
    products = ir("bmm", [a.batch1, a.batch2], None, None, a._index)[0]
    total = ir("sum", [products], {"dims": [0], "keepdim": False}, None, a._index)[0]
    _combine(a, total, outs)
    release(a._index, products, total)


computed("addbmm", "addbmm.out", "addbmm_", ir=("bmm", "sum", "mul", "add"))(_addbmm)


def _addr(a: Args, outs: list[torch.Tensor]) -> None:
    product = ir("outer", [a.vec1, a.vec2], None, None, a._index)[0]
    _combine(a, product, outs)
    release(a._index, product)


computed("addr", "addr.out", "addr_", ir=("outer", "mul", "add"))(_addr)


def _mv(a: Args, outs: list[torch.Tensor]) -> None:
    ir("matmul", [a.self, a.vec], None, outs, a._index)


computed("mv", "mv.out", ir=("matmul",))(_mv)


def _addmv(a: Args, outs: list[torch.Tensor]) -> None:
    # as addmm on (n, k) @ (k, 1): the vectors become column views of the same storage
    attrs = {"beta": _num(a.beta), "alpha": _num(a.alpha)}
    col = [o.unsqueeze(1) for o in outs]
    ir("addmm", [a.self.unsqueeze(-1), a.mat, a.vec.unsqueeze(1)], attrs, col, a._index)


computed("addmv", "addmv.out", "addmv_", ir=("addmm",))(_addmv)


def _dot(a: Args, outs: list[torch.Tensor]) -> None:
    ir("matmul", [a.self, a["tensor" if "tensor" in a else "other"]], None, outs, a._index)


computed("dot", "dot.out", "vdot", "vdot.out", ir=("matmul",))(_dot)


# ------------------------------------------------------------------------------------------------------ distances
_PAIR_CHUNK = 1 << 22  # elements of one (rows, R, M) difference block: bounds the scratch of large cdists


def _pair_norms(x1: torch.Tensor, x2: torch.Tensor, p: float) -> torch.Tensor:
    """The p-norm distance of every row of x1 (..., P, M) to every row of x2 (..., R, M): (..., P, R) in fp32.

    Computed from the differences (never the matrix-product identity |a|^2 + |b|^2 - 2ab, which cancels for close
    points and whose TF32 operands would cost most of the result's bits), ``chunk`` rows of x1 at a time."""
    x1, x2 = x1.to(torch.float32), x2.to(torch.float32)
    rows, r, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    chunk = max(1, _PAIR_CHUNK // max(1, r * m))
    parts = []
    for start in range(0, rows, chunk):
        diff = x1[..., start : start + chunk, :].unsqueeze(-2) - x2.unsqueeze(-3)
        if p == 0:
            parts.append((diff != 0).sum(-1, dtype=torch.float32))
        elif p == 1:
            parts.append(diff.abs().sum(-1))
        elif p == 2:
            parts.append(diff.square().sum(-1).sqrt())
        elif math.isinf(p):
            parts.append(diff.abs().amax(-1))
        else:
            parts.append(diff.abs().pow(p).sum(-1).pow(1.0 / p))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)


def _pair_norms_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float, dist: torch.Tensor):
    """d(sum grad * dist) / d x1 for dist = _pair_norms(x1, x2, p), PyTorch's conventions at zero distances (no
    gradient) and for p < 1 at zero differences (none either). fp32, shaped as x1."""
    x1, x2 = x1.to(torch.float32), x2.to(torch.float32)
    g, dist = grad.to(torch.float32).unsqueeze(-1), dist.to(torch.float32).unsqueeze(-1)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)  # (..., P, R, M)
    if p == 0:
        return torch.zeros_like(x1.expand(*diff.shape[:-3], *x1.shape[-2:]))
    if p == 1:
        terms = diff.sign() * g
    elif p == 2:
        terms = torch.where(dist == 0, 0.0, diff * g / dist)
    elif math.isinf(p):  # the maximum recomputed exactly: a bfloat16 cdist no longer equals its fp32 element
        terms = diff.sign() * (diff.abs() == diff.abs().amax(-1, keepdim=True)) * g
    else:
        scale = g / dist.pow(p - 1)
        terms = diff.sign() * diff.abs().pow(p - 1) * scale
        dead = (dist == 0) | ((diff == 0) & (p < 1))
        terms = torch.where(dead, 0.0, terms)
    return terms.sum(-2)


def _check_p(p: float, op: str) -> float:
    if not p >= 0:
        raise RuntimeError(f"{op} only supports non-negative p values")
    return float(p)


@composite("_cdist_forward", "_cdist_forward.out", ir_ops=("sub", "abs", "pow", "sum", "sqrt", "amax"))
def _cdist_forward(a: Args, outs: list[torch.Tensor]) -> None:
    """torch.cdist (any p; ``compute_mode`` is a speed hint on the CPU: tt always computes from differences)."""
    p = _check_p(a.p, "cdist")
    if outs[0].numel():
        outs[0].copy_(_pair_norms(a.x1, a.x2, p))


@composite("_euclidean_dist", "_euclidean_dist.out", ir_ops=("sub", "square", "sum", "sqrt"))
def _euclidean_dist(a: Args, outs: list[torch.Tensor]) -> None:
    """The p = 2 cdist PyTorch uses for large inputs: computed from differences, as :func:`_cdist_forward`."""
    if outs[0].numel():
        outs[0].copy_(_pair_norms(a.x1, a.x2, 2.0))


@composite("_cdist_backward", "_cdist_backward.out", ir_ops=("sub", "sign", "pow", "div", "where", "sum"))
def _cdist_backward(a: Args, outs: list[torch.Tensor]) -> None:
    if outs[0].numel():
        outs[0].copy_(_pair_norms_backward(a.grad, a.x1, a.x2, float(a.p), a.cdist))


def _upper_pairs(n: int, device: torch.device) -> torch.Tensor:
    """The flat positions i * n + j (i < j, row-major) of pdist's pairs in an (n, n) matrix."""
    ij = torch.triu_indices(n, n, 1, device=device)
    return ij[0] * n + ij[1]


@composite("_pdist_forward", "_pdist_forward.out", ir_ops=("sub", "abs", "pow", "sum", "sqrt", "amax", "index"))
def _pdist_forward(a: Args, outs: list[torch.Tensor]) -> None:
    """The distances of every pair of rows i < j of self (N, M), in row-major pair order."""
    p = _check_p(a.p, "pdist")
    n = a.self.shape[0]
    if outs[0].numel():
        full = _pair_norms(a.self, a.self, p).reshape(-1)
        outs[0].copy_(full[_upper_pairs(n, full.device)])


@composite("_pdist_backward", "_pdist_backward.out", ir_ops=("index_put", "add", "sub", "sign", "pow", "sum"))
def _pdist_backward(a: Args, outs: list[torch.Tensor]) -> None:
    """pdist's gradient as cdist(x, x)'s with the pairs' gradients placed symmetrically in an (N, N) matrix."""
    x, n = a.self, a.self.shape[0]
    if not outs[0].numel():
        return
    g = torch.zeros(n * n, dtype=torch.float32, device=x.device)
    g[_upper_pairs(n, x.device)] = a.grad.to(torch.float32)
    g = g.reshape(n, n)
    g = g + g.t()
    full = _pair_norms(x, x, float(a.p))
    outs[0].copy_(_pair_norms_backward(g, x, x, float(a.p), full))
