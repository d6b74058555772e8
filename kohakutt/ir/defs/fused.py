"""IR ops of the fused family: the element-wise pieces of a transformer block that run as one kernel where the card
has one: bias + GELU, SwiGLU (split and two-input forms), rotary position embedding, and their backwards.

Dtype rules: float tensors only (integer / bool operands are refused: cast first); the result has the operands'
promoted float dtype, block floats (bfloat8_b, bfloat4_b) computing and returning bfloat16. The output keeps the
first operand's layout.

Numerics (two kernels exist for each op on the sim; ``KTT_CUSTOM_KERNELS=0`` picks TT-NN's):
- "ttnn": the model of TT-NN 0.81.1's calls: where TT-NN composes several ops, each intermediate is stored in the
  output dtype (bf16) between them; SFPU functions follow ``numerics(approx=)`` (gelu's LUT, sigmoid's LUT). An
  unset ``fp32_acc`` is TT-NN's default: a 32-bit DST when an operand is float32 (the rotary ops: 16-bit).
- "ktt": Kohaku-TT's own fused program (``kohakutt/kernels/programs/fused.py``): one reader / compute / writer
  program, intermediates kept in DST or in circular buffers, fp32 ones unless the scope sets ``fp32_acc=False``
  (then bf16). It is written for 16-bit data: a float32 operand takes the ttnn path (the FPU would truncate it to
  TF32; TT-NN's SFPU path keeps it whole).
Each op's doc states what its kernels do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.errors import DtypeError
from kohakutt.hal.layout import Layout
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, broadcast_shapes, define, norm_dim

FAMILY = "fused"
# fp32_acc unset: each provider's own default (module docstring).
FUSED_MATH = Numerics(Fidelity.HiFi4, None, False)
# TT-NN's rotary_embedding_hf / _llama default compute config: HiFi4, approx on, 16-bit DST (their docstrings).
ROTARY_MATH = Numerics(Fidelity.HiFi4, None, True)


def _tensors(inputs: Sequence[Spec], names: Sequence[str], op: str) -> list[TensorSpec]:
    out = []
    for s, n in zip(inputs, names):
        if not isinstance(s, TensorSpec):
            raise ShapeError(f"{op}: {n} must be a tensor, not the Python number {s.value!r}")
        out.append(s)
    return out


def float_dtype(specs: Sequence[TensorSpec], op: str) -> DType:
    """The dtype a fused op computes and returns: the promoted float dtype (block floats -> bfloat16)."""
    dt = promote(*(s.dtype for s in specs))
    if not dt.is_float:
        raise DtypeError(f"{op} takes float tensors, got {[s.dtype.value for s in specs]}; cast them with typecast")
    return DType.BFLOAT16 if dt.is_block else dt


def _out(specs: Sequence[TensorSpec], shape: tuple[int, ...], op: str) -> TensorSpec:
    return TensorSpec(tuple(shape), float_dtype(specs, op), specs[0].layout)


def _approximate(attrs: dict[str, Any], op: str) -> None:
    if attrs["approximate"] not in ("none", "tanh"):
        raise ShapeError(f"{op}: approximate={attrs['approximate']!r} is not 'none' or 'tanh'")


# ------------------------------------------------------------------------------------------------------ bias_gelu
def _bias_gelu_infer(op: str, names: Sequence[str]):
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        _approximate(attrs, op)
        specs = _tensors(inputs, names, op)
        *front, x, bias = specs
        if x.ndim < 1 or bias.shape != (x.shape[-1],):
            raise ShapeError(f"{op}: bias must be 1-D with x's last dim ({x.shape[-1] if x.ndim else 'none'}), "
                             f"got bias {bias.shape} for x {x.shape}")  # fmt: skip
        for f in front:
            if f.shape != x.shape:
                raise ShapeError(f"{op}: grad {f.shape} must have x's shape {x.shape}")
        return [_out([x, bias, *front], x.shape, op)]

    return infer


_GELU_KTT = (
    "ktt: one program, x + bias on the FPU (the fp32 sum in DST: fp32 unless fp32_acc=False, then rounded to bf16), "
    "then gelu_tile on DST (erf form; the tanh form for approximate='tanh', as the kernel's approximate mode), "
    "packed once to the output; the reader copies the bias tile's row 0 to all 32 rows."
)
define(
    "bias_gelu",
    FAMILY,
    ["x", "bias"],
    _bias_gelu_infer("bias_gelu", ("x", "bias")),
    attrs={"approximate": "none"},
    numerics=FUSED_MATH,
    doc="gelu(x + bias), bias 1-D along x's last dim (a linear layer's bias and activation). gelu is the erf form "
    "x * Phi(x) (approximate='none') or the tanh form (approximate='tanh'). ttnn: add then gelu as two TT-NN ops, "
    "the sum stored in the output dtype between them; gelu on the SFPU (exact model; approx=True: the LUT "
    f"gelu, <= 0.024 absolute error). {_GELU_KTT}",
)
define(
    "bias_gelu_backward",
    FAMILY,
    ["grad", "x", "bias"],
    _bias_gelu_infer("bias_gelu_backward", ("grad", "x", "bias")),
    attrs={"approximate": "none"},
    numerics=FUSED_MATH,
    doc="grad * gelu'(x + bias): the gradient of bias_gelu for x (for bias, sum it over every dim but the last). "
    "ttnn: add (stored in the output dtype), then gelu_bw, modelled as one fused SFPU expression rounded once. "
    "No own (ktt) kernel.",
)


# --------------------------------------------------------------------------------------------------------- swiglu
def _split_shape(x: TensorSpec, dim: int, op: str) -> tuple[int, tuple[int, ...]]:
    if x.ndim == 0:
        raise ShapeError(f"{op}: x must have at least one dim to split")
    d = norm_dim(dim, x.ndim, op)
    if x.shape[d] % 2:
        raise ShapeError(f"{op}: dim {dim} of x {x.shape} has odd size {x.shape[d]}; it must split into two halves")
    return d, tuple(n // 2 if i == d else n for i, n in enumerate(x.shape))


def _swiglu_infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    (x,) = _tensors(inputs, ("x",), "swiglu")
    _, shape = _split_shape(x, attrs["dim"], "swiglu")
    return [_out([x], shape, "swiglu")]


def _swiglu_backward_infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    g, x = _tensors(inputs, ("grad", "x"), "swiglu_backward")
    _, half = _split_shape(x, attrs["dim"], "swiglu_backward")
    if g.shape != half:
        raise ShapeError(f"swiglu_backward: grad {g.shape} must have the forward output's shape {half}")
    return [_out([g, x], x.shape, "swiglu_backward")]


_SILU_TTNN = (
    "ttnn: silu on the SFPU (exact model) stored in the output dtype, then TT-NN's multiply (bf16 at HiFi4: the "
    "exact product rounded once)."
)
_SILU_KTT = (
    "ktt: one program: sigmoid(gate) on the SFPU and gate * up on the FPU, each packed to an intermediate circular "
    "buffer (fp32 unless fp32_acc=False, then bf16), then their FPU product at the scope's fidelity (sigmoid in "
    "SrcA, gate * up in SrcB), packed once."
)
define(
    "swiglu",
    FAMILY,
    ["x"],
    _swiglu_infer,
    attrs={"dim": -1},
    numerics=FUSED_MATH,
    doc="silu(a) * b where (a, b) are the two halves of x along `dim` (a first); silu(a) = a * sigmoid(a). Note: "
    "TT-NN's own ttnn.swiglu computes a * silu(b); this op follows the common (LLaMA MLP) order. "
    f"{_SILU_TTNN} {_SILU_KTT} The ktt program needs halves of whole tiles along `dim` (a multiple of 32 when "
    "`dim` is one of the last two); other splits run the same arithmetic in the simulator's model only.",
)
define(
    "swiglu_backward",
    FAMILY,
    ["grad", "x"],
    _swiglu_backward_infer,
    attrs={"dim": -1},
    numerics=FUSED_MATH,
    doc="The gradient of swiglu for x: the halves (grad * b * silu'(a), grad * silu(a)) joined along `dim`. ttnn: "
    "silu(a) and grad * b stored in the output dtype, grad * silu(a) one multiply, silu_bw modelled as one fused SFPU "
    "expression rounded once. No own (ktt) kernel.",
)


def _silu_mul_infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    gate, up = _tensors(inputs, ("gate", "up"), "silu_mul")
    if gate.shape != up.shape:
        raise ShapeError(f"silu_mul: gate {gate.shape} and up {up.shape} must have the same shape")
    return [_out([gate, up], gate.shape, "silu_mul")]


def _silu_mul_backward_infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    g, gate, up = _tensors(inputs, ("grad", "gate", "up"), "silu_mul_backward")
    if not g.shape == gate.shape == up.shape:
        raise ShapeError(f"silu_mul_backward: grad {g.shape}, gate {gate.shape} and up {up.shape} must match")
    out = _out([g, gate, up], gate.shape, "silu_mul_backward")
    return [out, out]


define(
    "silu_mul",
    FAMILY,
    ["gate", "up"],
    _silu_mul_infer,
    numerics=FUSED_MATH,
    doc=f"silu(gate) * up, element-wise (SwiGLU with the projections kept apart). {_SILU_TTNN} {_SILU_KTT}",
)
define(
    "silu_mul_backward",
    FAMILY,
    ["grad", "gate", "up"],
    _silu_mul_backward_infer,
    numerics=FUSED_MATH,
    outputs=2,
    doc="The gradients of silu_mul: (grad * up * silu'(gate), grad * silu(gate)), silu'(g) = s (1 + g (1 - s)), "
    "s = sigmoid(g). ttnn: silu(gate) and grad * up stored in the output dtype, then a multiply and silu_bw "
    "(modelled as one fused SFPU expression rounded once). No own (ktt) kernel.",
)


# ---------------------------------------------------------------------------------------------------------- rotary
def _rotary_infer(op: str, first: str):
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        x, cos, sin = _tensors(inputs, (first, "cos", "sin"), op)
        if x.ndim < 2:
            raise ShapeError(f"{op}: {first} must be (..., seq, head_dim), got {x.shape}")
        if x.shape[-1] % 2:
            raise ShapeError(f"{op}: head_dim {x.shape[-1]} must be even to rotate pairs")
        for n, c in (("cos", cos), ("sin", sin)):
            if c.ndim < 2 or c.shape[-2:] != x.shape[-2:]:
                raise ShapeError(f"{op}: {n} {c.shape} must end with {first}'s (seq, head_dim) {x.shape[-2:]} "
                                 "(slice the cache to the sequence first)")  # fmt: skip
            if broadcast_shapes(x.shape, c.shape) != x.shape:
                raise ShapeError(f"{op}: {n} {c.shape} does not broadcast to {first} {x.shape}")
        return [_out([x, cos, sin], x.shape, op)]

    return infer


_ROT = (
    "rot(x) is (-x2, x1) for the halves x1, x2 of the head dim (GPT-NeoX, interleaved=False) or "
    "(-x[1], x[0], -x[3], x[2], ...) for adjacent pairs (GPT-J / Meta, interleaved=True); cos and sin are full "
    "head_dim caches (the half form repeats the frequencies over the halves, the interleaved form over pairs), "
    "shaped (..., seq, head_dim) and broadcast over x's leading dims."
)
define(
    "rotary_embedding",
    FAMILY,
    ["x", "cos", "sin"],
    _rotary_infer("rotary_embedding", "x"),
    attrs={"interleaved": False},
    numerics=ROTARY_MATH,
    doc=f"x * cos + rot(x) * sin. {_ROT} ttnn: rotary_embedding_hf (half form) / rotary_embedding_llama with its "
    "transformation matrix (interleaved): x * cos and rot(x) * sin on the FPU at the scope's fidelity, each packed "
    "to a circular buffer in x's format, then added; rot(x) of the interleaved form is an FPU matmul by a +-1 tile, "
    "exact at HiFi3 and above (LoFi / HiFi2 keep 7 bits of x), and a non-finite value spreads NaN over its tile row. "
    "ktt: the same program shape with its intermediates in fp32 circular buffers unless fp32_acc=False (then "
    "bf16); rot(x) of the interleaved form, and of the half form when head_dim <= 32, is the FPU matmul by a +-1 "
    "tile the reader builds; the half form with whole-tile halves reads the swapped tile and negates by "
    "subtracting. TT-NN needs a head_dim of 32 or a multiple of 64 for the half form, the ktt program up to 32 or "
    "a multiple of 64; other widths run in the simulator's model only.",
)
define(
    "rotary_embedding_backward",
    FAMILY,
    ["grad", "cos", "sin"],
    _rotary_infer("rotary_embedding_backward", "grad"),
    attrs={"interleaved": False},
    numerics=ROTARY_MATH,
    doc="The gradient of rotary_embedding for x: grad * cos + rot^T(grad * sin), rot^T = -rot. For a RoPE cache "
    "(sin repeated over the halves / pairs) this is the rotation by -sin, which is what ttnn runs: the forward op "
    "with a negated sin (one more TT-NN op, stored in sin's format; exact). ktt: its own program computes the "
    "general form, grad * sin rotated (by the transposed +-1 tile, or the swapped tiles of grad and sin), "
    "intermediates as in the forward.",
)


def layout_of(x: TensorSpec) -> Layout:
    return x.layout
