"""Matrix products on ``tt``: mm, bmm, addmm, baddbmm, addbmm, mv, addmv, dot, vdot, addr and addmm + activation.

Each runs the matmul family's IR ops, so the card's numerics apply: TT-NN's defaults by operand dtype (HiFi4 with
fp32 accumulation for float32, whose values reach the multiplier as TF32; HiFi2 for bfloat16; LoFi for block floats),
or the enclosing ``kohakutt.numerics(...)`` scope. Integer matrices are a DtypeError (the matrix engine multiplies
floats). ``matmul`` and ``linear`` are PyTorch compositions (CompositeImplicitAutograd) that reach these kernels, so
they keep PyTorch's autograd.
"""

from __future__ import annotations

from typing import Any

import torch
from kohakutt.frontends.torch.aten.reduce import release
from kohakutt.frontends.torch.aten.registry import Args, computed, ir
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
