"""The card's arithmetic core (``native/runtime/cardmath.c``) for NumPy float32 arrays.

One model of what the FPU and SFPU compute: source-register truncation, the fidelity phases' operand slices,
element-wise products and tile matmuls into a BF16 or FP32 DST, reductions, and the SFPU functions in their exact
and approximate modes. The simulator's host build of the kernel API runs every compute op through the same C
functions, the programs' Python twins call them through this module, and the op library's vectorized models
(``kohakutt.kernels.cardmath``) take their operand slices and SFPU values from here, so all three agree to the bit.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal import _native

TILE = 32
SRCA, SRCB = 0, 1  # the FPU's source registers: element-wise in0 and matmul in1 go to SrcA
PHASE_ALL = -1  # fidelity_slice: every bit any phase multiplies
ALL, HIGH, LOW = "all", "high", "low"  # the parts of a source-register value the phases multiply
# The fidelity phases folded into as few exact products as possible, (SrcA part, SrcB part) each: phase p multiplies
# SrcA's slice p & 1 by SrcB's slice p >> 1, so phases 0-1 take SrcB's high part times all of SrcA, phase 2 SrcB's
# low part times SrcA's high part, and all four multiply the whole values (1 LoFi .. 4 HiFi4).
FOLDED_PHASES: dict[int, tuple[tuple[str, str], ...]] = {
    1: ((HIGH, HIGH),),
    2: ((ALL, HIGH),),
    3: ((ALL, HIGH), (HIGH, LOW)),
    4: ((ALL, ALL),),
}

# SFPU op names -> the C core's op codes (ktt_runtime.h, enum ktt_sfpu_op).
SFPU_OPS = {
    "exp": 0, "log": 1, "sqrt": 2, "rsqrt": 3, "reciprocal": 4, "sigmoid": 5, "tanh": 6, "gelu": 7, "gelu_tanh": 8,
    "silu": 9, "sin": 10, "cos": 11, "erf": 12, "relu": 13, "abs": 14, "negative": 15, "square": 16,
    "add": 17, "sub": 18, "mul": 19, "div": 20, "rsub": 21,
}  # fmt: skip
# the ops with an approximate algorithm on the card
APPROX_SFPU_OPS = ("exp", "reciprocal", "gelu", "gelu_tanh", "sigmoid")


def _f32(x: npt.ArrayLike) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _ptr(a: np.ndarray, out: bool = False) -> object:
    """A C pointer to ``a``'s float32 data (``out``: the function writes it)."""
    return _native.lib().ffi.from_buffer("float[]", a, require_writable=out)


def source_register(x: npt.ArrayLike, fp32_acc: bool) -> np.ndarray:
    """What the unpacker puts in SrcA / SrcB: float32 truncated to TF32 (FP32 DST) or to BF16 (16-bit DST)."""
    a = _f32(x)
    out = np.empty_like(a)
    _native.lib().lib.ktt_source_register(_ptr(a), _ptr(out, True), a.size, int(fp32_acc))
    return out


def fidelity_slice(x: npt.ArrayLike, operand: int, phase: int, fp32_acc: bool) -> np.ndarray:
    """The bits of ``x`` the multiplier uses as ``operand`` (SRCA / SRCB) in fidelity ``phase`` (0..3, or PHASE_ALL),
    as values; Inf and NaN appear in phase 0 and PHASE_ALL only."""
    a = _f32(x)
    out = np.empty_like(a)
    _native.lib().lib.ktt_fidelity_slice(_ptr(a), _ptr(out, True), a.size, int(operand), int(phase), int(fp32_acc))
    return out


@functools.cache
def slice_bits(operand: int, part: str, fp32_acc: bool = True) -> int:
    """Significant bits (implicit one included) of ``operand``'s whole source-register value (ALL) or of the high
    slice the first phases multiply (HIGH), as the C core defines them."""
    if part not in (ALL, HIGH):
        raise ValueError(f"slice_bits: part is ALL or HIGH, not {part!r} (LOW is ALL less HIGH)")
    return int(_native.lib().lib.ktt_slice_bits(int(operand), int(part == HIGH), int(fp32_acc)))


def bits_mask(bits: int) -> int:
    """The int32 mask (signed, for NumPy and torch int32 views) keeping a float32's top ``bits`` significant bits."""
    m = (0xFFFFFFFF << (24 - bits)) & 0xFFFFFFFF
    return m - (1 << 32) if m >= 1 << 31 else m


def slice_mask(operand: int, part: str, fp32_acc: bool = True) -> int:
    """:func:`bits_mask` of :func:`slice_bits`: what a vectorized model ANDs a float32's bits with."""
    return bits_mask(slice_bits(operand, part, fp32_acc))


def part_slice(x: npt.ArrayLike, operand: int, part: str, fp32_acc: bool, first: bool = True) -> np.ndarray:
    """:func:`fidelity_slice` by part: ALL (every bit), HIGH (the top slice) or LOW (the rest). Inf and NaN stay only
    in the ``first`` of the :data:`FOLDED_PHASES` products (phase 0's); a later product's parts hold 0 there."""
    if part == ALL:
        return fidelity_slice(x, operand, PHASE_ALL, fp32_acc)
    later = 2 if operand == SRCA else 1  # a phase past 0 that takes the same slice
    phase = (0 if first else later) if part == HIGH else (1 if operand == SRCA else 2)
    return fidelity_slice(x, operand, phase, fp32_acc)


def fpu_mul(srca: npt.ArrayLike, srcb: npt.ArrayLike, phases: int, fp32_acc: bool) -> np.ndarray:
    """``mul_tiles``: DST after adding each fidelity phase's product (source-register operands, broadcast)."""
    a, b = (np.ascontiguousarray(v) for v in np.broadcast_arrays(_f32(srca), _f32(srcb)))
    out = np.empty_like(a)
    _native.lib().lib.ktt_fpu_mul(_ptr(a), _ptr(b), _ptr(out, True), a.size, int(phases), int(fp32_acc))
    return out


def matmul_tile(dst: npt.ArrayLike, in0: npt.ArrayLike, in1: npt.ArrayLike, phases: int, fp32_acc: bool
                ) -> np.ndarray:  # fmt: skip
    """``matmul_tiles`` on one 32 x 32 tile: the new DST, ``dst + in0 @ in1`` (in0 in SrcB, in1 in SrcA)."""
    out = np.array(dst, dtype=np.float32, copy=True, order="C")
    a, b = _f32(in0), _f32(in1)
    if out.shape != (TILE, TILE) or a.shape != (TILE, TILE) or b.shape != (TILE, TILE):
        raise ValueError(f"matmul_tile takes 32 x 32 tiles, got {out.shape}, {a.shape}, {b.shape}")
    _native.lib().lib.ktt_fpu_matmul_tile(_ptr(out, True), _ptr(a), _ptr(b), int(phases), int(fp32_acc))
    return out


def reduce_tile(dst: npt.ArrayLike, x: npt.ArrayLike, scaler: float, pool: str, dim: str, phases: int,
                fp32_acc: bool, fresh: bool) -> np.ndarray:  # fmt: skip
    """``reduce_tile`` of one tile into ``dst`` (returned new): pool sum / avg / max over dim row / col / scalar."""
    out = np.array(dst, dtype=np.float32, copy=True, order="C")
    a = _f32(x)
    d = {"row": 0, "col": 1, "scalar": 2}[dim]
    _native.lib().lib.ktt_fpu_reduce_tile(_ptr(out, True), _ptr(a), float(np.float32(scaler)), int(pool == "max"), d,
                                          int(phases), int(fp32_acc), int(fresh))  # fmt: skip
    return out


def sfpu(op: str, x: npt.ArrayLike, approx: bool = False, param: float = 0.0) -> np.ndarray:
    """An SFPU op on DST values (float32 in, float32 out, before storage rounding); ``param`` is the scalar of add,
    sub, mul, div and rsub. Ops: ``SFPU_OPS``; ``approx`` picks the card's approximate algorithm for
    ``APPROX_SFPU_OPS`` (the others have one mode)."""
    code = SFPU_OPS.get(op)
    if code is None:
        raise KohakuTTUnsupportedOperator(f"sfpu: no op {op!r}; the SFPU ops are {', '.join(SFPU_OPS)}")
    a = _f32(x)
    out = np.empty_like(a)
    _native.lib().lib.ktt_sfpu(code, _ptr(a), _ptr(out, True), a.size, int(approx), float(np.float32(param)))
    return out


__all__ = ["ALL", "APPROX_SFPU_OPS", "FOLDED_PHASES", "HIGH", "LOW", "PHASE_ALL", "SFPU_OPS", "SRCA", "SRCB",
           "bits_mask", "fidelity_slice", "fpu_mul", "matmul_tile", "part_slice", "reduce_tile", "sfpu",
           "slice_bits", "slice_mask", "source_register"]  # fmt: skip
