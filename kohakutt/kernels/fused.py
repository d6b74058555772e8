"""The fused family: bias + GELU, the SiLU-gated product (silu_mul, swiglu), rotary embedding and their backwards.

Two kernels per op on the simulator (the op docs in ``kohakutt/ir/defs/fused.py`` state each one's arithmetic):

- provider "ttnn", the model of what TT-NN 0.81.1 computes. Where TT-NN has no fused op the model is the chain of
  TT-NN ops it takes (``ttnn.add`` then ``ttnn.gelu``; ``ttnn.silu`` then ``ttnn.multiply``; ``*_bw`` helpers), each
  result stored in the output dtype before the next op reads it. Each piece follows the element-wise family's model
  (``kohakutt/kernels/elementwise.py``): bf16 add on the FPU, DST in fp32 only for a 32-bit operand or ``fp32_acc``;
  bf16 multiply exact at HiFi4 (TT-NN's SFPU multiply), the FPU's phases below; float32 on the SFPU in IEEE fp32;
  gelu / silu as cardmath's SFPU model (``approx``: the LUT gelu). Rotary embedding is TT-NN's fused program
  (``rotary_embedding_hf`` for the half form, ``rotary_embedding_llama`` for the interleaved one): FPU products at
  the scope's fidelity, 16-bit DST by default, each product packed to an intermediate in its operand's format.
- provider "ktt", Kohaku-TT's own programs (``kohakutt/kernels/programs/fused.py``) as a vectorized model of the same
  arithmetic: intermediates in DST or in circular buffers, fp32 unless the scope sets ``fp32_acc=False``; the SFPU
  functions are the card's arithmetic core's (``hal/cardcore.py``: erf-form gelu, the tanh form for approximate
  "tanh"; the exact sigmoid), which the program runs too, so the program and the model give the same bits. The
  programs are written for 16-bit data: a float32 operand (or output) runs the ttnn model instead, since the FPU
  truncates float32 to TF32.

Real card: the ``@ttnn`` functions call the TT-NN ops named in :data:`TTNN_NAMES`: the chains above, and TT-NN's
rotary programs where they apply (one cos / sin matrix; head_dim 32 or a multiple of 64 for the half form, a multiple
of 32 for the interleaved one); other rotary calls are composed from TT-NN's element-wise and data-movement ops there
(the simulator models the fused program for them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal import cardcore
from kohakutt.hal.card import CardSpec
from kohakutt.ir.defs.fused import float_dtype
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Spec, TensorSpec, norm_dim
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels import cost
from kohakutt.kernels.elementwise import BACKWARD_F64, compute_values
from kohakutt.kernels.programs import fused as programs
from kohakutt.kernels.programs.launch import OpLauncher
from kohakutt.kernels.reduce import kernel_config, ttnn_dtype
from kohakutt.kernels.registry import Estimate, SimCall, register, sim, ttnn

TILE = 32

# Every TT-NN name the real-card functions use, as dotted paths from the ttnn module (checked against 0.81.1).
TTNN_NAMES: tuple[str, ...] = (
    "add", "multiply", "neg", "gelu", "GeluVariant.Accurate", "GeluVariant.Tanh", "GeluVariant.FastLut", "gelu_bw",
    "silu", "silu_bw", "slice", "concat", "reshape", "typecast", "bfloat16", "float32", "bfloat8_b", "bfloat4_b",
    "experimental.rotary_embedding_hf", "experimental.rotary_embedding_llama", "Tensor", "to_device", "TILE_LAYOUT",
    "init_device_compute_kernel_config", "MathFidelity.LoFi", "MathFidelity.HiFi2", "MathFidelity.HiFi3",
    "MathFidelity.HiFi4",
)  # fmt: skip
# The keywords passed by name to each TT-NN callable.
TTNN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "gelu": ("variant",),
    "gelu_bw": ("variant",),
    "experimental.rotary_embedding_hf": ("is_decode_mode", "compute_kernel_config"),
    "experimental.rotary_embedding_llama": ("is_decode_mode", "compute_kernel_config"),
    "Tensor": ("tensor", "data_type", "device", "layout"),
    "init_device_compute_kernel_config": ("math_fidelity", "math_approx_mode", "fp32_dest_acc_en", "packer_l1_acc"),
}


# ------------------------------------------------------------------------------------------------------- context
@dataclass(frozen=True)
class Ctx:
    """How one op's kernel computes: output dtype, DST width, fidelity, SFPU approximate mode."""

    dt: DType
    fp32: bool  # DST (and the own programs' intermediate CBs) in fp32
    fid: Fidelity
    approx: bool

    @property
    def fmt(self) -> str:
        return "float32" if self.dt is DType.FLOAT32 else "bfloat16"

    def store(self, x: np.ndarray) -> np.ndarray:
        """``x`` stored in the output dtype (what the next TT-NN op reads)."""
        return cm.round_to(x, self.fmt)

    def dst(self, x: np.ndarray) -> np.ndarray:
        """``x`` written to DST: bf16-rounded unless DST is fp32."""
        return cm.round_to(x, "float32" if self.fp32 else "bfloat16")

    @property
    def im(self) -> str:
        """The own programs' intermediate CB format."""
        return "float32" if self.fp32 else "bfloat16"


def _fid(num: Numerics) -> Fidelity:
    return Fidelity.HiFi4 if num.fidelity is None else num.fidelity  # LoFi is 0: never ``or`` a fidelity


def _tensor_specs(call: SimCall) -> list[TensorSpec]:
    return [s for s in call.in_specs if isinstance(s, TensorSpec)]


def ttnn_ctx(call: SimCall, fp32_default: bool | None = None) -> Ctx:
    """TT-NN's settings: an unset fp32_acc is a 32-bit DST when an operand or the output is float32 (the rotary
    programs: ``fp32_default``)."""
    num = call.numerics
    wide = any(s.dtype is DType.FLOAT32 for s in (*_tensor_specs(call), *call.out_specs))
    default = wide if fp32_default is None else fp32_default
    fp32 = default if num.fp32_acc is None else bool(num.fp32_acc)
    return Ctx(call.out_specs[0].dtype, fp32, _fid(num), bool(num.approx))


def ktt_ctx(call: SimCall) -> Ctx:
    num = call.numerics
    return Ctx(call.out_specs[0].dtype, programs.fp32_dst(num), _fid(num), bool(num.approx))


def takes_ttnn_path(specs: Sequence[Spec], outs: Sequence[TensorSpec]) -> bool:
    """Whether the own kernel hands this call to the ttnn model: a float32 operand or output."""
    return any(isinstance(s, TensorSpec) and s.dtype is DType.FLOAT32 for s in (*specs, *outs))


def _empty(call: SimCall) -> list[np.ndarray] | None:
    if all(s.numel for s in call.out_specs):
        return None
    return [np.zeros(s.shape, np.float32) for s in call.out_specs]


def _exact(fn: Callable[..., np.ndarray], *args: np.ndarray) -> np.ndarray:
    """One fused SFPU expression: float64 math on the operands, rounded once to fp32."""
    with np.errstate(all="ignore"):
        return np.asarray(fn(*(np.asarray(a, np.float64) for a in args)), np.float32)


# ------------------------------------------------------------------------------------------- TT-NN's pieces
def tt_add(a: np.ndarray, b: np.ndarray, c: Ctx) -> np.ndarray:
    """``ttnn.add``: bf16 on the FPU (sum in DST: fp32 or bf16), float32 on the SFPU (IEEE)."""
    if c.dt is DType.BFLOAT16:
        return cm.add(a, b, fp32_acc=c.fp32)
    with np.errstate(all="ignore"):
        return np.add(a, b, dtype=np.float32)


def tt_mul(a: np.ndarray, b: np.ndarray, c: Ctx) -> np.ndarray:
    """``ttnn.multiply``: bf16 below HiFi4 on the FPU's phases, else the exact product (SFPU) rounded to fp32."""
    if c.dt is DType.BFLOAT16 and c.fid < Fidelity.HiFi4:
        return cm.multiply(a, b, fidelity=c.fid, fp32_acc=c.fp32)
    with np.errstate(all="ignore"):
        return np.multiply(a, b, dtype=np.float32)


def _gelu_name(attrs: dict[str, Any]) -> str:
    return "gelu_tanh" if attrs["approximate"] == "tanh" else "gelu"


def tt_silu(x: np.ndarray, c: Ctx) -> np.ndarray:
    return c.store(cm.sfpu("silu", x, approx=c.approx))


def silu_bw(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``ttnn.silu_bw``: g * silu'(x) as one SFPU expression, rounded once to fp32."""
    return _exact(lambda u, v: BACKWARD_F64["silu_backward"](u, v, {}), g, x)


def halves(x: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The two halves of ``x`` along ``dim`` (first, second)."""
    a, b = np.split(x, 2, axis=norm_dim(dim, x.ndim))
    return a, b


# ------------------------------------------------------------------------------------------------ TT-NN models
def ttnn_bias_gelu(call: SimCall) -> np.ndarray:
    c = ttnn_ctx(call)
    x, b = compute_values(call, c.dt)
    s = c.store(tt_add(x, b, c))
    return cm.sfpu(_gelu_name(call.attrs), s, approx=c.approx)


def ttnn_bias_gelu_backward(call: SimCall) -> np.ndarray:
    c = ttnn_ctx(call)
    g, x, b = compute_values(call, c.dt)
    s = c.store(tt_add(x, b, c))
    return _exact(lambda u, v: BACKWARD_F64["gelu_backward"](u, v, call.attrs), g, s)


def tt_silu_mul(gate: np.ndarray, up: np.ndarray, c: Ctx) -> np.ndarray:
    return tt_mul(tt_silu(gate, c), up, c)


def tt_silu_mul_backward(g: np.ndarray, gate: np.ndarray, up: np.ndarray, c: Ctx) -> tuple[np.ndarray, np.ndarray]:
    s = tt_silu(gate, c)
    gu = c.store(tt_mul(g, up, c))
    return silu_bw(gu, gate), tt_mul(g, s, c)


def ttnn_silu_mul(call: SimCall) -> np.ndarray:
    c = ttnn_ctx(call)
    return tt_silu_mul(*compute_values(call, c.dt), c)


def ttnn_silu_mul_backward(call: SimCall) -> list[np.ndarray]:
    c = ttnn_ctx(call)
    return list(tt_silu_mul_backward(*compute_values(call, c.dt), c))


def ttnn_swiglu(call: SimCall) -> np.ndarray:
    c = ttnn_ctx(call)
    (x,) = compute_values(call, c.dt)
    return tt_silu_mul(*halves(x, call.attrs["dim"]), c)


def ttnn_swiglu_backward(call: SimCall) -> np.ndarray:
    c = ttnn_ctx(call)
    g, x = compute_values(call, c.dt)
    dim = call.attrs["dim"]
    da, db = tt_silu_mul_backward(g, *halves(x, dim), c)
    return np.concatenate([da, db], axis=norm_dim(dim, x.ndim))


def _storage(dt: DType) -> str:
    return "float32" if dt is DType.FLOAT32 else "bfloat16"


def tile_matmul(x: np.ndarray, m: np.ndarray, c: Ctx, out_format: str) -> np.ndarray:
    """Every 32-wide column tile of ``x`` (zero padded) times the 32 x 32 tile ``m`` on the FPU (``x`` in SrcB), at
    the context's fidelity and DST; the result packed to ``out_format`` and cut back to ``x``'s width."""
    d = x.shape[-1]
    pad = -d % TILE
    xp = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)]) if pad else x
    rows = np.ascontiguousarray(xp, np.float32).reshape(-1, TILE)
    with np.errstate(all="ignore"):
        r = cm.matmul(rows, m, fidelity=c.fid, fp32_acc=c.fp32, out_format=out_format)
    return r.reshape(xp.shape)[..., :d]


def tt_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool, c: Ctx,
              fmts: tuple[str, str, str]) -> np.ndarray:  # fmt: skip
    """TT-NN's rotary program: rot(x) packed in x's format (a -1 scalar multiply of the second half for the half
    form's whole-tile halves, exact otherwise; the llama form's matmul by the +-1 tile), then rot(x) * sin and
    x * cos each packed in sin's / cos's format, then their sum."""
    fx, fc, fs = fmts
    d = x.shape[-1]
    if interleaved:
        rot = tile_matmul(x, programs.rotation_matrix(d, True), c, fx)
    else:
        x1, x2 = np.split(x, 2, axis=-1)
        if d % (2 * TILE) == 0:  # mul_tiles_bcast_scalar by -1 on the FPU (SrcA keeps 5 bits at LoFi)
            neg = cm.round_to(cm.multiply(x2, np.float32(-1.0), fidelity=c.fid, fp32_acc=c.fp32), fx)
        else:
            neg = -x2
        rot = np.concatenate([neg, x1], axis=-1)
    with np.errstate(all="ignore"):
        q = cm.round_to(cm.multiply(rot, sin, fidelity=c.fid, fp32_acc=c.fp32), fs)
        p = cm.round_to(cm.multiply(x, cos, fidelity=c.fid, fp32_acc=c.fp32), fc)
        return cm.add(p, q, fp32_acc=c.fp32)


def _rotary_formats(call: SimCall) -> tuple[str, str, str]:
    return tuple(_storage(s.dtype) for s in _tensor_specs(call))  # type: ignore[return-value]


def ttnn_rotary(call: SimCall) -> np.ndarray:
    c = ttnn_ctx(call, fp32_default=False)
    x, cos, sin = compute_values(call, c.dt)
    return tt_rotary(x, cos, sin, bool(call.attrs["interleaved"]), c, _rotary_formats(call))


def ttnn_rotary_backward(call: SimCall) -> np.ndarray:
    """The forward program on grad with ``ttnn.neg(sin)`` (exact): rot^T(g * sin) = rot(g) * -sin for a RoPE cache."""
    c = ttnn_ctx(call, fp32_default=False)
    g, cos, sin = compute_values(call, c.dt)
    return tt_rotary(g, cos, -sin, bool(call.attrs["interleaved"]), c, _rotary_formats(call))


# ------------------------------------------------------------------------------------ Kohaku-TT's own kernels
def sim_sfpu(name: str, x: np.ndarray, approx: bool = False) -> np.ndarray:
    """The SFPU functions the own programs run, on DST values (the card's arithmetic core, exact modes): sigmoid, and
    gelu in its erf form or (``approx``: the program's GELU_TANH variant) its tanh form."""
    op = "gelu_tanh" if name == "gelu" and approx else name
    return cardcore.sfpu(op, x)


def ktt_bias_gelu(call: SimCall) -> np.ndarray:
    """add_tiles(x, bias) into DST, gelu_tile there, one pack."""
    if takes_ttnn_path(call.in_specs, call.out_specs):
        return ttnn_bias_gelu(call)
    c = ktt_ctx(call)
    x, b = compute_values(call, c.dt)
    s = cm.add(x, b, fp32_acc=c.fp32)
    return c.dst(sim_sfpu("gelu", s, approx=call.attrs["approximate"] == "tanh"))


def ktt_silu_mul_values(gate: np.ndarray, up: np.ndarray, c: Ctx) -> np.ndarray:
    """sigmoid(gate) and gate * up each packed to an intermediate CB, then their product (sigmoid in SrcA)."""
    sig = cm.round_to(c.dst(sim_sfpu("sigmoid", gate)), c.im)
    gu = cm.round_to(cm.multiply(gate, up, fidelity=c.fid, fp32_acc=c.fp32), c.im)
    with np.errstate(all="ignore"):
        return cm.multiply(sig, gu, fidelity=c.fid, fp32_acc=c.fp32)


def ktt_silu_mul(call: SimCall) -> np.ndarray:
    if takes_ttnn_path(call.in_specs, call.out_specs):
        return ttnn_silu_mul(call)
    c = ktt_ctx(call)
    return ktt_silu_mul_values(*compute_values(call, c.dt), c)


def ktt_swiglu(call: SimCall) -> np.ndarray:
    if takes_ttnn_path(call.in_specs, call.out_specs):
        return ttnn_swiglu(call)
    c = ktt_ctx(call)
    (x,) = compute_values(call, c.dt)
    return ktt_silu_mul_values(*halves(x, call.attrs["dim"]), c)


def ktt_rotary_values(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool, backward: bool,
                      c: Ctx) -> np.ndarray:  # fmt: skip
    """The own rotary program: p = x * cos; matmul form q = (x @ R) * sin (backward (x * sin) @ R^T), swap form
    q = x_other * sin (backward x_other * sin_other); out = p + q, or p - q where the rotation negates; every
    product packed to an intermediate CB. Widths the program does not take (the half form with head_dim above 32
    and not a multiple of 64) run the swap form's arithmetic element by element."""
    d = x.shape[-1]
    form = programs.rotary_form(d, interleaved)

    def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return cm.round_to(cm.multiply(a, b, fidelity=c.fid, fp32_acc=c.fp32), c.im)

    with np.errstate(all="ignore"):
        p = mul(x, cos)
        if form == "matmul":
            r = programs.rotation_matrix(d, interleaved, transpose=backward)
            q = tile_matmul(mul(x, sin), r, c, c.im) if backward else mul(tile_matmul(x, r, c, c.im), sin)
            return cm.add(p, q, fp32_acc=c.fp32)
        h = d // 2

        def swap(v: np.ndarray) -> np.ndarray:
            return np.concatenate([v[..., h:], v[..., :h]], axis=-1)

        q = mul(swap(x), swap(np.broadcast_to(sin, np.broadcast_shapes(sin.shape, x.shape))) if backward else sin)
        first = (np.arange(d) < h) != backward  # where the rotation's sign is negative: p - q
        return np.where(first, cm.sub(p, q, fp32_acc=c.fp32), cm.add(p, q, fp32_acc=c.fp32))


def ktt_rotary(call: SimCall, backward: bool = False) -> np.ndarray:
    if takes_ttnn_path(call.in_specs, call.out_specs):
        return (ttnn_rotary_backward if backward else ttnn_rotary)(call)
    c = ktt_ctx(call)
    x, cos, sin = compute_values(call, c.dt)
    return ktt_rotary_values(x, cos, sin, bool(call.attrs["interleaved"]), backward, c)


def _nonempty(fn: Callable[[SimCall], Any]) -> Callable[[SimCall], Any]:
    def run(call: SimCall) -> Any:
        done = _empty(call)
        if done is not None:
            return done if len(done) > 1 else done[0]
        return fn(call)

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


# ---------------------------------------------------------------------------------------------------- costs
SFPU, FPU = cost.SFPU_TILE_CYCLES, cost.FPU_TILE_CYCLES


def _stages(card: CardSpec, *stages: tuple[Sequence[Spec], Sequence[TensorSpec], float]) -> float:
    """Device time of TT-NN ops run one after another: each pays a launch and the larger of its traffic and its
    ``cycles`` per output tile."""
    return sum(cost.memory_bound(i, o, card, k) for i, o, k in stages)


def _mul_cycles(num: Numerics) -> float:
    return FPU * ((num.fidelity if num.fidelity is not None else Fidelity.HiFi4) + 1)


def ttnn_bias_gelu_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    return _stages(card, (ins, outs, FPU), (outs, outs, 2 * SFPU))  # add, then gelu


def ttnn_bias_gelu_backward_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    return _stages(card, (ins[1:], outs, FPU), ([ins[0], *outs], outs, 4 * SFPU))  # add, then gelu_bw


def ttnn_silu_mul_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    return _stages(card, (ins[:1], outs, 2 * SFPU), ([outs[0], ins[1]], outs, SFPU))  # silu, then multiply


def ttnn_silu_mul_backward_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    g, gate, up = ins
    s = outs[:1]
    return _stages(card, ([gate], s, 2 * SFPU), ([g, up], s, SFPU), ([*s, gate], s, 4 * SFPU), ([g, *s], s, SFPU))


def ttnn_swiglu_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    h = outs[0]
    return _stages(card, (ins, [h, h], 0), ([h], [h], 2 * SFPU), ([h, h], outs, SFPU))  # slices, silu, multiply


def ttnn_swiglu_backward_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    g, x = ins
    return _stages(card, ([x], [g, g], 0), ([g], [g], 2 * SFPU), ([g, g], [g], SFPU), ([g, g], [g], 4 * SFPU),
                   ([g, g], [g], SFPU), ([g, g], outs, 0))  # fmt: skip


def _rotary_cycles(num: Numerics, card: CardSpec, interleaved: bool) -> float:
    """Per tile: rot(x) (a matmul tile, or a -1 scalar multiply), two multiplies at the fidelity, an add."""
    fid = num.fidelity if num.fidelity is not None else Fidelity.HiFi4
    return (cost.matmul_tile_cycles(card, fid) if interleaved else _mul_cycles(num)) + 2 * _mul_cycles(num) + FPU


def ttnn_rotary_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    return _stages(card, (ins, outs, _rotary_cycles(num, card, bool(attrs["interleaved"]))))


def ttnn_rotary_backward_cost(ins: list, outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    return _stages(card, (ins[2:], ins[2:], SFPU)) + ttnn_rotary_cost(ins, outs, attrs, num, card)  # neg(sin) first


def _own(ttnn_cost: Estimate, cycles: Callable[[list, dict, Numerics, CardSpec], float]) -> Estimate:
    """The own program's time: one launch, every operand read and the output written once, ``cycles`` per output
    tile; float32 calls take the ttnn path and its time."""

    def estimate(ins: list[Spec], outs: list[TensorSpec], attrs: dict, num: Numerics, card: CardSpec) -> float:
        if takes_ttnn_path(ins, outs):
            return ttnn_cost(ins, outs, attrs, num, card)
        return cost.memory_bound(ins, outs, card, cycles(outs, attrs, num, card))

    return estimate


def _ktt_rotary_cycles(outs: list, attrs: dict, num: Numerics, card: CardSpec) -> float:
    fid = num.fidelity if num.fidelity is not None else Fidelity.HiFi4
    matmul = programs.rotary_form(outs[0].shape[-1], bool(attrs["interleaved"])) == "matmul"
    return (cost.matmul_tile_cycles(card, fid) if matmul else 0) + 2 * _mul_cycles(num) + FPU


ktt_bias_gelu_cost = _own(ttnn_bias_gelu_cost, lambda o, a, n, card: FPU + 2 * SFPU)
ktt_silu_mul_cost = _own(ttnn_silu_mul_cost, lambda o, a, n, card: FPU + SFPU + 2 * _mul_cycles(n))
ktt_swiglu_cost = _own(ttnn_swiglu_cost, lambda o, a, n, card: FPU + SFPU + 2 * _mul_cycles(n))
ktt_rotary_cost = _own(ttnn_rotary_cost, _ktt_rotary_cycles)
ktt_rotary_backward_cost = _own(ttnn_rotary_backward_cost, _ktt_rotary_cycles)


# ------------------------------------------------------------------------------------------------ registration
_PROGRAM_DTYPES = (DType.BFLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B)


def _takes(in_specs: Any, out_specs: Any, attrs: Any) -> bool:
    """Operands the own programs take (bfloat16 or block floats; the builders check the rest)."""
    return all(s.dtype in _PROGRAM_DTYPES for s in (*in_specs, *out_specs))


LAUNCH = {op: OpLauncher(op, programs.build, _takes) for op in programs.BUILDERS}


def _no_program(op: str) -> Callable[..., Any]:
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise KohakuTTUnsupportedOperator(
            f"{op}: Kohaku-TT's own program takes bfloat16 or block-float tensors in tile-sized shapes; these "
            "operands run TT-NN's kernel: set KTT_CUSTOM_KERNELS=0 to choose it"
        )

    return fn


sim("bias_gelu", estimate=ttnn_bias_gelu_cost)(_nonempty(ttnn_bias_gelu))
sim("bias_gelu", provider="ktt", estimate=ktt_bias_gelu_cost, program=programs.bias_gelu_program,
    launch=LAUNCH["bias_gelu"])(
    _nonempty(ktt_bias_gelu))  # fmt: skip
sim("bias_gelu_backward", estimate=ttnn_bias_gelu_backward_cost)(_nonempty(ttnn_bias_gelu_backward))
sim("silu_mul", estimate=ttnn_silu_mul_cost)(_nonempty(ttnn_silu_mul))
sim("silu_mul", provider="ktt", estimate=ktt_silu_mul_cost, program=programs.glu_program, launch=LAUNCH["silu_mul"])(
    _nonempty(ktt_silu_mul)
)
sim("silu_mul_backward", estimate=ttnn_silu_mul_backward_cost)(_nonempty(ttnn_silu_mul_backward))
sim("swiglu", estimate=ttnn_swiglu_cost)(_nonempty(ttnn_swiglu))
sim("swiglu", provider="ktt", estimate=ktt_swiglu_cost, program=programs.glu_program, launch=LAUNCH["swiglu"])(
    _nonempty(ktt_swiglu)
)
sim("swiglu_backward", estimate=ttnn_swiglu_backward_cost)(_nonempty(ttnn_swiglu_backward))
sim("rotary_embedding", estimate=ttnn_rotary_cost)(_nonempty(ttnn_rotary))
sim("rotary_embedding", provider="ktt", estimate=ktt_rotary_cost, program=programs.rotary_program,
    launch=LAUNCH["rotary_embedding"])(
    _nonempty(ktt_rotary))  # fmt: skip
sim("rotary_embedding_backward", estimate=ttnn_rotary_backward_cost)(_nonempty(ttnn_rotary_backward))
sim("rotary_embedding_backward", provider="ktt", estimate=ktt_rotary_backward_cost,
    program=programs.BUILDERS["rotary_embedding_backward"], launch=LAUNCH["rotary_embedding_backward"])(
    _nonempty(lambda call: ktt_rotary(call, backward=True)))  # fmt: skip


# On a card the own programs run through generic_op: the same launchers, over the card's buffers.
for _op, _launch in LAUNCH.items():
    register(_op, "ttnn", "ktt", estimate=None, program=programs.BUILDERS[_op], launch=_launch)(_no_program(_op))


# ============================================================================================ TT-NN (a real card)
def _as(tt: Any, t: Any, dt: DType) -> Any:
    """``t`` in the op's compute dtype (block floats and mixed operands are typecast first)."""
    want = ttnn_dtype(tt, dt)
    return t if t.dtype == want else tt.typecast(t, want)


def _operands(tt: Any, inputs: Sequence[Any], out_specs: Sequence[TensorSpec]) -> list[Any]:
    return [_as(tt, t, out_specs[0].dtype) for t in inputs]


def _variant(tt: Any, attrs: dict[str, Any], num: Numerics, backward: bool = False) -> Any:
    if num.approx and not backward:
        return tt.GeluVariant.FastLut
    return tt.GeluVariant.Tanh if attrs["approximate"] == "tanh" else tt.GeluVariant.Accurate


def _bias_row(tt: Any, bias: Any, n: int) -> Any:
    """A 1-D bias of ``n`` values as a (1, n) row, which TT-NN's binary ops broadcast over the rows of x."""
    return tt.reshape(bias, [1, n])


@ttnn("bias_gelu")
def bias_gelu_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    x, bias = _operands(tt, inputs, out_specs)
    return tt.gelu(tt.add(x, _bias_row(tt, bias, out_specs[0].shape[-1])), variant=_variant(tt, attrs, num))


@ttnn("bias_gelu_backward")
def bias_gelu_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    g, x, bias = _operands(tt, inputs, out_specs)
    s = tt.add(x, _bias_row(tt, bias, out_specs[0].shape[-1]))
    return tt.gelu_bw(g, s, variant=_variant(tt, attrs, num, backward=True))[0]


def _tt_silu_mul(tt: Any, gate: Any, up: Any) -> Any:
    return tt.multiply(tt.silu(gate), up)


def _tt_silu_mul_backward(tt: Any, g: Any, gate: Any, up: Any) -> list[Any]:
    return [tt.silu_bw(tt.multiply(g, up), gate)[0], tt.multiply(g, tt.silu(gate))]


def _tt_halves(tt: Any, x: Any, dim: int) -> tuple[Any, Any]:
    shape = [int(n) for n in tuple(x.shape)]
    d = norm_dim(dim, len(shape))
    mid = [n // 2 if i == d else n for i, n in enumerate(shape)]
    second = [n // 2 if i == d else 0 for i, n in enumerate(shape)]
    return tt.slice(x, [0] * len(shape), mid), tt.slice(x, second, shape)


@ttnn("silu_mul")
def silu_mul_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    return _tt_silu_mul(tt, *_operands(tt, inputs, out_specs))


@ttnn("silu_mul_backward")
def silu_mul_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    return _tt_silu_mul_backward(tt, *_operands(tt, inputs, out_specs))


@ttnn("swiglu")
def swiglu_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    (x,) = _operands(tt, inputs, out_specs)
    return _tt_silu_mul(tt, *_tt_halves(tt, x, attrs["dim"]))


@ttnn("swiglu_backward")
def swiglu_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    g, x = _operands(tt, inputs, out_specs)
    d = norm_dim(attrs["dim"], len(tuple(x.shape)))
    return tt.concat(_tt_silu_mul_backward(tt, g, *_tt_halves(tt, x, d)), d)


def _trans_mat(tt: Any, like: Any, head_dim: int, interleaved: bool) -> Any:
    """The +-1 tile TT-NN's llama rotary multiplies by, on ``like``'s device."""
    m = programs.rotation_matrix(head_dim, interleaved).reshape(1, 1, TILE, TILE)
    host = tt.Tensor(tensor=m, data_type=tt.bfloat16, device=None, layout=tt.TILE_LAYOUT)
    return tt.to_device(host, like.device())


def _tt_rot(tt: Any, x: Any, shape: list[int], interleaved: bool) -> Any:
    """rot(x) from TT-NN data-movement ops (the fallback for widths and caches the fused programs refuse)."""
    n, d = len(shape), shape[-1]
    if interleaved:
        pairs = tt.reshape(x, [*shape[:-1], d // 2, 2])
        ends = [*shape[:-1], d // 2]
        even = tt.slice(pairs, [0] * (n + 1), [*ends, 1])
        odd = tt.slice(pairs, [0] * n + [1], [*ends, 2])
        return tt.reshape(tt.concat([tt.neg(odd), even], n), shape)
    first = tt.slice(x, [0] * n, [*shape[:-1], d // 2])
    second = tt.slice(x, [0] * (n - 1) + [d // 2], shape)
    return tt.concat([tt.neg(second), first], n - 1)


def _tt_rotary(tt: Any, x: Any, cos: Any, sin: Any, attrs: dict, num: Numerics) -> Any:
    shape = [int(n) for n in tuple(x.shape)]
    s, d = shape[-2], shape[-1]
    interleaved = bool(attrs["interleaved"])
    lead = math.prod(shape[:-2])
    single_cache = all(math.prod(int(n) for n in tuple(c.shape)[:-2]) == 1 for c in (cos, sin))
    fits = d % TILE == 0 if interleaved else (d == TILE or d % (2 * TILE) == 0)
    if not (single_cache and fits):
        return tt.add(tt.multiply(x, cos), tt.multiply(_tt_rot(tt, x, shape, interleaved), sin))
    cfg = kernel_config(tt, x, num, fp32_acc=False, approx=True)
    x4 = tt.reshape(x, [1, lead, s, d])
    c4, s4 = tt.reshape(cos, [1, 1, s, d]), tt.reshape(sin, [1, 1, s, d])
    if interleaved:
        y = tt.experimental.rotary_embedding_llama(x4, c4, s4, _trans_mat(tt, x, d, True), is_decode_mode=False,
                                                   compute_kernel_config=cfg)  # fmt: skip
    else:
        y = tt.experimental.rotary_embedding_hf(x4, c4, s4, is_decode_mode=False, compute_kernel_config=cfg)
    return tt.reshape(y, shape)


@ttnn("rotary_embedding")
def rotary_embedding_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics, out_specs: list[TensorSpec]) -> Any:
    return _tt_rotary(tt, *_operands(tt, inputs, out_specs), attrs, num)


@ttnn("rotary_embedding_backward")
def rotary_embedding_backward_ttnn(tt: Any, inputs: list, attrs: dict, num: Numerics,
                                   out_specs: list[TensorSpec]) -> Any:  # fmt: skip
    g, cos, sin = _operands(tt, inputs, out_specs)
    return _tt_rotary(tt, g, cos, tt.neg(sin), attrs, num)


__all__ = ["TTNN_NAMES", "TTNN_SIGNATURES", "Ctx", "float_dtype", "ktt_ctx", "takes_ttnn_path", "ttnn_ctx"]
