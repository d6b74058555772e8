"""IR ops of the matmul family: matmul (PyTorch's broadcasting rules), bmm, linear, addmm, baddbmm and outer.

Numerics (TT-NN 0.81.1's defaults, from tt-metal ``matmul_device_operation.cpp`` ``create_matmul_attributes``):
without a program config TT-NN runs a matmul at HiFi2, at LoFi when both operands are block floats (bfloat8_b /
bfloat4_b), at HiFi4 when both are float32; ``fp32_dest_acc_en`` is on exactly when the output is float32 and
``packer_l1_acc`` when it is not; ``math_approx_mode`` is off. The family default therefore leaves fidelity and
fp32_acc unset (``None``): :func:`matmul_numerics` fills them from the operand dtypes that way, and a
``kohakutt.numerics(...)`` scope overrides either. float32 operands follow the ``fp32_matmul`` setting (the scope's,
else the frontend's: ``torch.set_float32_matmul_precision``, tinygrad's ``ALLOW_TF32``): ``"highest"`` (the default)
splits every float32 operand into three bfloat16-exact parts and sums their six leading products (each exact at HiFi4)
in an fp32 DST, smallest first: float32 accuracy for six matmul passes (:func:`split_counts`); ``"high"`` is one pass
on the TF32 source registers at the fidelity above; ``"medium"`` the same at HiFi2 unless the scope names a
fidelity. The card's products are modelled by ``cardmath``: in0 in SrcB,
in1 in SrcA (TF32 source registers, fidelity phases); an fp32 DST sums in fp32, a bf16 DST is modelled as rounding
to bf16 once per K block of 128 values (4 K tiles). The card rounds more often: TT-NN's default ``in0_block_w`` is 2
tiles (each block packed and L1-accumulated in bf16), and inside a block DST is rounded after each 16-wide MVMUL of
each fidelity phase. The coarser block keeps the simulator within 2x of a CPU fp32 matmul; the simulated
bf16-accumulation error is therefore a lower bound of the card's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, broadcast_shapes, define

FAMILY = "matmul"
MATMUL_DEFAULT = Numerics(None, None, False)  # fidelity / fp32_acc follow TT-NN's dtype rules: matmul_numerics()
OUTER_DEFAULT = Numerics(Fidelity.HiFi4, None, False)  # ttnn.outer is an element-wise multiply

NUMERICS_NOTE = (
    "Numerics: a float32 operand under fp32_matmul='highest' (the default) is split into three bf16-exact parts "
    "and the six leading part products (exact at HiFi4) are summed in an fp32 DST: float32 accuracy; otherwise "
    "TT-NN's matmul defaults by dtype (HiFi2; LoFi when both operands are block floats; HiFi4 when both are float32, "
    "HiFi2 under fp32_matmul='medium'; fp32 accumulation exactly when the output is float32), products as the FPU "
    "forms them at the fidelity (in0 in SrcB, in1 in SrcA, float32 truncated to TF32), a bf16 DST rounded once per "
    "128-value K block; the result rounded to the output dtype as stored."
)


def split_counts(num: Numerics, in_dtypes: Sequence[DType]) -> tuple[int, int] | None:
    """How many bfloat16 parts each operand of a split (``fp32_matmul="highest"``) matmul has: 3 for a float32
    operand, 1 for any other; None when the matmul is one pass (no float32 operand, or "high" / "medium")."""
    if num.matmul_mode != "highest" or not any(d is DType.FLOAT32 for d in in_dtypes):
        return None
    return 3 if in_dtypes[0] is DType.FLOAT32 else 1, 3 if in_dtypes[1] is DType.FLOAT32 else 1


def split_products(parts: tuple[int, int]) -> list[tuple[int, int]]:
    """The (part of in0, part of in1) products a split matmul sums, smallest first: every pair whose weight is at
    least 2^-16 of the leading product's (parts i + j <= 2), the rest being below float32's resolution."""
    return [(i, j) for order in (2, 1, 0) for i in range(order + 1) if i < parts[0] and order - i < parts[1]
            for j in (order - i,)]  # fmt: skip


def default_fidelity(num: Numerics, in_dtypes: Sequence[DType], single: Fidelity) -> Fidelity:
    """The scope's fidelity, else ``single`` (the family's one-pass default), HiFi2 for a float32 operand under
    ``fp32_matmul="medium"``."""
    if num.fidelity is not None:
        return num.fidelity
    if num.fp32_matmul == "medium" and any(d is DType.FLOAT32 for d in in_dtypes):
        return Fidelity.HiFi2
    return single


def matmul_numerics(num: Numerics, in_dtypes: Sequence[DType], out_dtype: DType) -> tuple[Fidelity, bool]:
    """The fidelity and fp32 accumulation a one-pass matmul runs with: the scope's settings, else TT-NN's dtype
    defaults (HiFi2 for float32 operands under ``fp32_matmul="medium"``). A split matmul (:func:`split_counts`)
    runs its parts at HiFi4 into an fp32 DST whatever these say."""
    if all(d is DType.FLOAT32 for d in in_dtypes):
        single = Fidelity.HiFi4
    elif all(d.is_block for d in in_dtypes):
        single = Fidelity.LoFi
    else:
        single = Fidelity.HiFi2
    acc = num.fp32_acc if num.fp32_acc is not None else out_dtype is DType.FLOAT32
    return default_fidelity(num, in_dtypes, single), bool(acc)


def float_tensor(s: Spec, op: str, name: str) -> TensorSpec:
    """``s`` as a float tensor spec, or a typed error saying what to pass instead."""
    if not isinstance(s, TensorSpec):
        raise ShapeError(f"{op}: {name} must be a tensor, not the Python number {s}")
    if not s.dtype.is_float:  # not a TypeError: torch's ``a @ b`` would turn that into a bare "unsupported operand"
        raise KohakuTTUnsupportedOperator(
            f"{op}: {name} is {s.dtype.value}; the matrix engine multiplies floats only (float32, bfloat16, float16, "
            "bfloat8_b, bfloat4_b): typecast it first"
        )
    return s


def matmul_shape(a: Sequence[int], b: Sequence[int], op: str = "matmul") -> tuple[int, ...]:
    """The shape of ``a @ b`` under PyTorch's rules (1-D operands, broadcast batch dims)."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeError(f"{op}: both operands need at least one dim, got shapes {tuple(a)} and {tuple(b)}")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ShapeError(
            f"{op}: shapes {tuple(a)} and {tuple(b)} cannot be multiplied: a has {a2[-1]} columns, b has {b2[-2]} rows"
        )
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    return (*batch, *(() if len(a) == 1 else (a2[-2],)), *(() if len(b) == 1 else (b2[-1],)))


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    try:
        return broadcast_shapes(shape, target) == tuple(target)
    except ShapeError:
        return False


def _out(shape: tuple[int, ...], *specs: TensorSpec) -> list[TensorSpec]:
    return [TensorSpec(shape, promote(*(s.dtype for s in specs)), specs[0].layout)]


def _matmul(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    a, b = (float_tensor(s, "matmul", n) for s, n in zip(inputs, "ab"))
    return _out(matmul_shape(a.shape, b.shape), a, b)


def _bmm(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    a, b = (float_tensor(s, "bmm", n) for s, n in zip(inputs, "ab"))
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ShapeError(
            f"bmm takes two 3-D tensors with the same batch, got {a.shape} and {b.shape}; use matmul for broadcasting"
        )
    return _out(matmul_shape(a.shape, b.shape, "bmm"), a, b)


def linear_shapes(x: Sequence[int], w: Sequence[int], transpose_w: bool) -> tuple[tuple[int, ...], int, int]:
    """(output shape, in features, out features) of ``linear``; a typed error when they do not fit."""
    if len(w) != 2:
        raise ShapeError(f"linear: the weight must be 2-D (out_features, in_features), got shape {tuple(w)}")
    if len(x) == 0:
        raise ShapeError("linear: the input needs at least one dim (..., in_features)")
    fin, fout = (w[1], w[0]) if transpose_w else (w[0], w[1])
    if x[-1] != fin:
        layout = "(out_features, in_features)" if transpose_w else "(in_features, out_features)"
        raise ShapeError(f"linear: the input has {x[-1]} features but the weight {tuple(w)} {layout} takes {fin}")
    return (*x[:-1], fout), fin, fout


def _linear(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    if len(inputs) > 3:
        raise ShapeError(f"linear takes x, w and an optional bias, got {len(inputs)} operands")
    x, w = float_tensor(inputs[0], "linear", "x"), float_tensor(inputs[1], "linear", "w")
    shape, _, fout = linear_shapes(x.shape, w.shape, bool(attrs["transpose_w"]))
    specs = [x, w]
    if len(inputs) == 3:
        bias = float_tensor(inputs[2], "linear", "bias")
        if not broadcasts_to(bias.shape, shape):
            raise ShapeError(
                f"linear: bias of shape {bias.shape} does not broadcast to the output {shape} (pass ({fout},))"
            )
        specs.append(bias)
    return _out(shape, *specs)


def _addmm_like(op: str, ndim: int) -> Any:
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        bias, a, b = (float_tensor(s, op, n) for s, n in zip(inputs, ("input", "mat1", "mat2")))
        if a.ndim != ndim or b.ndim != ndim:
            raise ShapeError(f"{op} takes {ndim}-D mat1 and mat2, got {a.shape} and {b.shape}")
        if ndim == 3 and a.shape[0] != b.shape[0]:
            raise ShapeError(f"{op}: batch1 {a.shape} and batch2 {b.shape} must have the same batch size")
        shape = matmul_shape(a.shape, b.shape, op)
        if not broadcasts_to(bias.shape, shape):
            raise ShapeError(f"{op}: input of shape {bias.shape} does not broadcast to the product's shape {shape}")
        return _out(shape, a, b, bias)

    return infer


def _outer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    a, b = (float_tensor(s, "outer", n) for s, n in zip(inputs, "ab"))
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"outer takes vectors (..., n) and (..., m), got shapes {a.shape} and {b.shape}")
    batch = broadcast_shapes(a.shape[:-1], b.shape[:-1])
    return _out((*batch, a.shape[-1], b.shape[-1]), a, b)


def _bmm_decomposition(builder: Any, a: Any, b: Any) -> Any:
    return builder.add("matmul", a, b)


define(
    "matmul",
    FAMILY,
    ["a", "b"],
    _matmul,
    numerics=MATMUL_DEFAULT,
    doc="a @ b with PyTorch's rules: a 1-D a is a row, a 1-D b a column (that dim is dropped again), batch dims "
    "broadcast; float operands, the result in their promoted dtype (block floats give bfloat16). An empty K "
    "gives zeros. " + NUMERICS_NOTE,
)
define(
    "bmm",
    FAMILY,
    ["a", "b"],
    _bmm,
    numerics=MATMUL_DEFAULT,
    decomposition=_bmm_decomposition,
    doc="Batched a @ b of two 3-D tensors (B, M, K) @ (B, K, N) with the same B. " + NUMERICS_NOTE,
)
define(
    "linear",
    FAMILY,
    ["x", "w", "*bias"],
    _linear,
    attrs={"transpose_w": True},
    numerics=MATMUL_DEFAULT,
    doc="x @ w.T + bias (x @ w + bias with transpose_w=False) over the last dim of x, with an optional bias "
    "broadcast to the output (usually (out_features,)). As TT-NN's fused bias: the matmul result is packed "
    "to the intermediate format (bf16 unless fp32 accumulation), then the FPU adds the bias. " + NUMERICS_NOTE,
)
define(
    "addmm",
    FAMILY,
    ["input", "mat1", "mat2"],
    _addmm_like("addmm", 2),
    attrs={"beta": 1.0, "alpha": 1.0},
    numerics=MATMUL_DEFAULT,
    doc="beta * input + alpha * (mat1 @ mat2) for 2-D mat1, mat2 and an input broadcast to the product; beta=0 "
    "ignores input (NaN in it too). As ttnn.addmm: the product is stored in the output dtype, then scaled by "
    "alpha, then beta * input is added, each step rounded to the output dtype. " + NUMERICS_NOTE,
)
define(
    "baddbmm",
    FAMILY,
    ["input", "batch1", "batch2"],
    _addmm_like("baddbmm", 3),
    attrs={"beta": 1.0, "alpha": 1.0},
    numerics=MATMUL_DEFAULT,
    doc="beta * input + alpha * (batch1 @ batch2) for 3-D batches, as addmm per batch (a bmm, then the same "
    "element-wise steps, each rounded to the output dtype). " + NUMERICS_NOTE,
)
define(
    "outer",
    FAMILY,
    ["a", "b"],
    _outer,
    numerics=OUTER_DEFAULT,
    doc="The outer product a[..., :, None] * b[..., None, :] of vectors (leading dims broadcast, as ttnn.outer). "
    "Numerics: an element-wise multiply, as TT-NN runs it: for bfloat16 at HiFi4 (the default) the exact "
    "product, below HiFi4 the FPU's fidelity phases into DST; fp32 SFPU multiplies for float32; rounded to "
    "the output dtype.",
)
