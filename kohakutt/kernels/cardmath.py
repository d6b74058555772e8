"""The card's arithmetic as pure functions over NumPy float32 arrays: the numeric core of the simulator's op library.

Inputs hold values exactly representable in their storage format (a bfloat16 tensor is a float32 array already
rounded to bfloat16); outputs are float32 arrays. NumPy (its BLAS) and torch's CPU kernels are only the engine.

The model, with its sources (``docs/concepts/numerics.md`` has the long form and the measured errors):

- Source registers. The unpacker puts each FPU operand into SrcA / SrcB as a 19-bit value: sign, 8-bit exponent,
  10-bit mantissa (TF32). FP32 data is truncated, never rounded (``DatumBits >> 13`` in the UNPACR functional model;
  ``SrcFormatModel._fp32_to_tf32`` in tt-llk's test goldens). With a 16-bit DST (``fp32_acc=False``) the LLK unpacks
  FP32 to BF16 instead, again by truncation (tt-llk ``data_format_inference.py``).
- Fidelity. One multiplier pass uses at most 5 bits of SrcA and 7 of SrcB (implicit 1 included). SrcA: even phases
  take the implicit 1 and the top 4 mantissa bits, odd phases the next 5 (the TF32 LSB of SrcA is never used); SrcB:
  phases 0-1 the implicit 1 and the top 6 bits, phases 2-3 the last 4. LoFi runs phase 0, HiFi2 0-1, HiFi3 0-2,
  HiFi4 0-3; each phase's products accumulate into DST (ISA docs, ``SrcASrcB.md`` and ``ELWMUL.md``; tt-llk
  ``FidelityMasking``). matmul: in0 -> SrcB, in1 -> SrcA (``MVMUL`` is ``Dst += SrcB @ SrcA``; tt-llk
  ``llk_unpack_AB_matmul.h``). Element-wise FPU ops: in0 -> SrcA, in1 -> SrcB (``llk_unpack_AB.h``). A reduction
  puts the data in SrcA and the scaler in SrcB (``llk_unpack_reduce.h``).
- DST. FP32 when ``fp32_acc`` (``fp32_dest_acc_en``), else BF16: then every accumulation into DST is rounded to
  BF16. One ``MVMUL`` sums 16 products (K = 16) in FP32 before adding them to DST, and the LLK matmul runs a whole
  tile per fidelity phase, so a BF16 DST is rounded after every 16-wide K half-tile of every phase.
- Storage. The packer rounds FP32 to BF16 to nearest, ties to even here (as the host packing measured in
  ``notes/blackhole.md``); NaN stays NaN, overflow goes to Inf.
- SFPU. Transcendentals run in FP32 on DST values; exact modes are modelled as correctly rounded FP32 math, the
  approximate modes of exp, reciprocal, gelu and sigmoid as the LLK algorithms (see :func:`sfpu`).
Not modelled: denormal flushing, the FPU's non-IEEE Inf / NaN handling, stochastic rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from kohakutt.errors import ConfigError, FormatError, KohakuTTUnsupportedOperator
from kohakutt.ir.numerics import Fidelity  # the IR's enum, importable from here too

TILE = 32
MVMUL_K = 16  # products one MVMUL sums in FP32 before adding them to DST

_TF32 = 0xFFFFE000  # FP32 -> TF32 source register: the low 13 mantissa bits are dropped
_BF16 = 0xFFFF0000  # FP32 -> BF16 source register (16-bit DST): the low 16 bits are dropped
_SRCA_HI = 0xFFF80000  # SrcA, even phases: sign, exponent, implicit 1 and the top 4 mantissa bits
_SRCA_ALL = 0xFFFFC000  # SrcA, both phases: the top 9 mantissa bits (the TF32 LSB is never multiplied)
_SRCB_HI = 0xFFFE0000  # SrcB, phases 0-1: sign, exponent, implicit 1 and the top 6 mantissa bits


# ---------------------------------------------------------------------------------------------------------- bits


def _f32(x: npt.ArrayLike) -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    return a if a.flags.c_contiguous else a.copy()


def _masked(x: np.ndarray, mask: int) -> np.ndarray:
    """A new float32 array: ``x``'s bits ANDed with ``mask``."""
    return np.asarray(x.view(np.uint32) & np.uint32(mask)).view(np.float32)


def _low(full: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``full - high``: the bits of ``full`` below ``high``'s, as a value (exact); 0 where ``full`` is Inf or NaN."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(full), full - high, np.float32(0.0))


def _finite_only(x: np.ndarray) -> np.ndarray:
    """``x`` with Inf and NaN replaced by 0 (``x`` itself when it is all finite)."""
    finite = np.isfinite(x)
    return x if finite.all() else np.where(finite, x, np.float32(0.0))


def _special_in_first(pairs: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Phase products with Inf / NaN carried by the first pair only. The first pair multiplies the operands' high
    parts, which keep Inf and NaN and are nonzero for every normal number, so its product alone has IEEE special
    values (Inf * finite nonzero = Inf, Inf * 0 = NaN); in later pairs a special value would meet a part that is 0
    only because the other operand has no bits there (Inf * 0 = NaN where the card gives Inf), so it becomes 0."""
    return pairs[:1] + [(_finite_only(x), _finite_only(y)) for x, y in pairs[1:]]


def _round_bf16_(x: np.ndarray) -> np.ndarray:
    """Round a float32 array to bfloat16 in place: nearest, ties to even; NaN stays NaN (quiet), overflow -> Inf."""
    u = x.view(np.uint32)
    nan = np.isnan(x)
    has_nan = bool(nan.any())
    if has_nan:
        nan_bits = (u[nan] | np.uint32(0x00400000)) & np.uint32(_BF16)
    bias = u >> np.uint32(16)
    bias &= np.uint32(1)
    bias += np.uint32(0x7FFF)
    u += bias
    u &= np.uint32(_BF16)
    if has_nan:
        u[nan] = nan_bits
    return x


def _format(fmt: Any) -> str:
    name = str(getattr(fmt, "value", fmt)).strip().lower()
    if name in ("float32", "bfloat16"):
        return name
    if name in ("bfloat8_b", "bfloat4_b"):
        raise FormatError(f"{name} is a block format: quantize it with kohakutt.hal.formats.quantize")
    raise FormatError(f"unknown storage format {fmt!r}: use 'bfloat16' or 'float32'")


def round_to(x: npt.ArrayLike, fmt: Any = "bfloat16") -> np.ndarray:
    """``x`` as stored in ``fmt``: "bfloat16" rounds to nearest, ties to even (NaN stays NaN, overflow becomes Inf);
    "float32" is the identity (the input itself may be returned). Block formats belong to ``kohakutt.hal.formats``."""
    if _format(fmt) == "float32":
        return np.asarray(x, dtype=np.float32)
    return _round_bf16_(np.array(x, dtype=np.float32, copy=True))


def to_source_register(x: npt.ArrayLike, *, fp32_acc: bool = True) -> np.ndarray:
    """The value the unpacker puts in SrcA / SrcB for float32 data: truncated (not rounded) to TF32 (19 bits) when DST
    is FP32, to BF16 when DST is 16-bit. BF16 data passes unchanged either way."""
    return _masked(_f32(x), _TF32 if fp32_acc else _BF16)


# ------------------------------------------------------------------------------------------------------ fidelity


def _srca_parts(x: np.ndarray, fp32_acc: bool) -> tuple[np.ndarray, np.ndarray]:
    """The SrcA value as the even-phase and odd-phase multiplier inputs."""
    full = _masked(x, (_TF32 if fp32_acc else _BF16) & _SRCA_ALL)
    high = _masked(full, _SRCA_HI)
    return high, _low(full, high)


def _srcb_parts(x: np.ndarray, fp32_acc: bool) -> tuple[np.ndarray, np.ndarray]:
    """The SrcB value as the phase 0-1 and phase 2-3 multiplier inputs."""
    full = to_source_register(x, fp32_acc=fp32_acc)
    high = _masked(full, _SRCB_HI)
    return high, _low(full, high)


def fidelity_operands(
    a: npt.ArrayLike, b: npt.ArrayLike, fidelity: Any, *, op: str = "matmul", fp32_acc: bool = True
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One ``(a_part, b_part)`` pair per fidelity phase, in phase order: what the multiplier really sees. The sum over
    phases of ``a_part @ b_part`` (``op="matmul"``: a = in0 in SrcB, b = in1 in SrcA) or of ``a_part * b_part``
    (``op="eltwise"``: a = in0 in SrcA, b = in1 in SrcB) is the FPU's product. Inf and NaN appear only in phase 0's
    pair (as themselves); in later phases their parts are 0, so the phase sum follows IEEE (Inf * 1 = Inf)."""
    fid = Fidelity.of(fidelity)
    a, b = _f32(a), _f32(b)
    if op == "matmul":
        srcb, srca = _srcb_parts(a, fp32_acc), _srca_parts(b, fp32_acc)
        return _special_in_first([(srcb[p >> 1], srca[p & 1]) for p in range(fid.phases)])
    if op == "eltwise":
        srca, srcb = _srca_parts(a, fp32_acc), _srcb_parts(b, fp32_acc)
        return _special_in_first([(srca[p & 1], srcb[p >> 1]) for p in range(fid.phases)])
    raise ConfigError(f"fidelity_operands: op must be 'matmul' or 'eltwise', not {op!r}")


def merged_operands(
    a: npt.ArrayLike, b: npt.ArrayLike, fidelity: Any, fp32_acc: bool = True
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The operand pairs of ``a @ b`` (in0 = ``a`` in SrcB, in1 = ``b`` in SrcA) at ``fidelity``, with the phases
    folded into as few exact products as possible: the sum over pairs of ``x @ y`` equals the sum of
    :func:`fidelity_operands`' phase products (so also for element-wise ``x * y``; the masks are element-wise and the
    operands keep their shapes). Phases 0 and 1 share SrcB's top bits, so they multiply them by the whole SrcA value;
    HiFi4 multiplies both whole source-register values; HiFi3 adds SrcB's low bits times SrcA's top bits. LoFi, HiFi2
    and HiFi4 give one pair, HiFi3 two. Inf and NaN are carried by the first pair only, as in
    :func:`fidelity_operands`."""
    fid = Fidelity.of(fidelity)
    a, b = _f32(a), _f32(b)
    src = _TF32 if fp32_acc else _BF16
    if fid == Fidelity.LoFi:
        return [(_masked(a, _SRCB_HI & src), _masked(b, _SRCA_HI & src))]
    b_all = _masked(b, _SRCA_ALL & src)
    if fid == Fidelity.HiFi2:
        return [(_masked(a, _SRCB_HI & src), b_all)]
    if fid == Fidelity.HiFi4:
        return [(_masked(a, src), b_all)]
    b_high, b_low = _srcb_parts(a, fp32_acc)
    return _special_in_first([(b_high, b_all), (b_low, _masked(b, _SRCA_HI & src))])


# -------------------------------------------------------------------------------------------------------- matmul


def _torch_matmul_is_ieee() -> bool:
    """Whether torch runs FP32 matmuls on the CPU in full FP32 (a user may have allowed BF16 or TF32 shortcuts)."""
    chain = [getattr(torch.backends.mkldnn, "matmul", None), torch.backends.mkldnn, torch.backends]
    for setting in (getattr(obj, "fp32_precision", "none") for obj in chain):
        if setting != "none":
            return setting == "ieee"
    return torch.get_float32_matmul_precision() == "highest"


def _mm(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """An exact-FP32 matmul (batch dims broadcast). torch's BLAS is the engine: a second BLAS thread pool (NumPy's)
    would fight torch's for the cores; NumPy only stands in when torch's FP32 matmuls run in reduced precision."""
    if _torch_matmul_is_ieee():
        return torch.matmul(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    return np.matmul(x, y)


def _bf16_accumulate(chunks: Iterable[torch.Tensor], shape: tuple[int, ...]) -> np.ndarray:
    """A BF16 DST: start at 0, add each FP32 chunk in turn and round to BF16 after every addition."""
    dst = torch.zeros(shape, dtype=torch.bfloat16)
    total = torch.zeros(shape, dtype=torch.float32)
    for chunk in chunks:
        torch.add(dst, chunk, out=total)  # exact BF16 -> FP32, one FP32 rounding
        dst.copy_(total)  # torch's float -> bfloat16 is round-to-nearest-even (agreement is tested)
    return total.copy_(dst).numpy()


def _stacked_products(x: np.ndarray, y: np.ndarray, width: int) -> np.ndarray:
    """``x[:, k:k+width] @ y[k:k+width, :]`` for every K chunk (K zero-padded): shape (chunks, M, N), FP32."""
    m, k = x.shape
    n = y.shape[1]
    chunks = max(1, -(-k // width))
    pad = chunks * width - k
    if pad:
        x = np.pad(x, ((0, 0), (0, pad)))
        y = np.pad(y, ((0, pad), (0, 0)))
    x = np.ascontiguousarray(x.reshape(m, chunks, width).transpose(1, 0, 2))  # a strided stack is far slower
    return _mm(x, np.ascontiguousarray(y.reshape(chunks, width, n)))


def _matmul_bf16_dst(a: np.ndarray, b: np.ndarray, fid: Fidelity, k_block: int | None) -> np.ndarray:
    """One 2-D matmul into a BF16 DST, processed in row blocks to bound the memory of the stacked chunk products."""
    m, k = a.shape
    n = b.shape[1]
    if k_block is None:  # every MVMUL: per K tile, per phase, per 16-wide half
        pairs, width = fidelity_operands(a, b, fid, fp32_acc=False), MVMUL_K
    else:  # the coarse model: each block of 32 * k_block K values is summed in FP32, then rounded once
        pairs, width = merged_operands(a, b, fid, fp32_acc=False), TILE * k_block
    chunks = max(1, -(-k // width))
    out = np.empty((m, n), dtype=np.float32)
    rows = max(1, min(m, (1 << 24) // max(1, len(pairs) * chunks * n)))
    for r0 in range(0, m, rows):
        products = [torch.from_numpy(_stacked_products(x[r0 : r0 + rows], y, width)) for x, y in pairs]
        if k_block is None:
            order = ((p, 2 * t + h) for t in range(-(-chunks // 2)) for p in range(len(pairs)) for h in (0, 1))
            steps = (products[p][i] for p, i in order if i < chunks)
        else:
            steps = iter(sum(products[1:], products[0]))
        out[r0 : r0 + rows] = _bf16_accumulate(steps, (min(rows, m - r0), n))
    return out


def matmul(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    fidelity: Any,
    fp32_acc: bool = True,
    out_format: Any = "bfloat16",
    k_block: int | None = None,
) -> np.ndarray:
    """``a @ b`` (``...,M,K`` @ ``...,K,N``, batch dims broadcast) with the card's products and accumulation.

    in0 = ``a`` goes to SrcB, in1 = ``b`` to SrcA; each operand is first truncated to its source register format.
    ``fp32_acc=True``: DST is FP32; the phase products are summed in FP32 (one exact FP32 matmul per folded phase
    group, order unspecified like the card's) and rounded once to ``out_format``. ``fp32_acc=False``: DST is BF16 and
    FP32 inputs are truncated to BF16; with ``k_block=None`` DST is rounded to BF16 after every MVMUL (each 16-wide
    K half-tile of each phase, tile by tile, the LLK's order); with ``k_block=n`` the coarser model sums each block of
    ``32 * n`` K values over all phases in FP32, then rounds DST once per block. ``k_block`` is ignored for FP32 DST.
    """
    fid = Fidelity.of(fidelity)
    fmt = _format(out_format)
    a, b = _f32(a), _f32(b)
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ConfigError(f"matmul: shapes {a.shape} @ {b.shape} do not match as (...,M,K) @ (...,K,N)")
    if k_block is not None and (not isinstance(k_block, int) or k_block < 1):
        raise ConfigError(f"matmul: k_block must be a positive number of K tiles or None, not {k_block!r}")
    if fp32_acc:
        pairs = merged_operands(a, b, fid, fp32_acc=True)
        out = _mm(*pairs[0])
        for x, y in pairs[1:]:
            out += _mm(x, y)
    else:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a3 = np.broadcast_to(a, (*batch, *a.shape[-2:])).reshape(-1, *a.shape[-2:])
        b3 = np.broadcast_to(b, (*batch, *b.shape[-2:])).reshape(-1, *b.shape[-2:])
        out = np.stack([_matmul_bf16_dst(x, y, fid, k_block) for x, y in zip(a3, b3)])
        out = out.reshape(*batch, a.shape[-2], b.shape[-1])
    return _round_bf16_(out) if fmt == "bfloat16" else out


# --------------------------------------------------------------------------------------------- element-wise FPU


def _into_dst(terms: Iterable[np.ndarray], fp32_acc: bool) -> np.ndarray:
    """DST after ``Dst += term`` for each term in turn, from zero; a BF16 DST is rounded after each addition."""
    acc: np.ndarray | None = None
    for term in terms:
        acc = term.copy() if acc is None else acc + term
        if not fp32_acc:
            _round_bf16_(acc)
    assert acc is not None, "at least one term is expected"
    return acc


def multiply(a: npt.ArrayLike, b: npt.ArrayLike, *, fidelity: Any, fp32_acc: bool = True) -> np.ndarray:
    """FPU ``mul_tiles(a, b)``: a = in0 in SrcA, b = in1 in SrcB; each fidelity phase's product (exact) is added to
    DST in turn (ELWMUL). Returns DST (FP32, or BF16 values when ``fp32_acc=False``) before storage rounding."""
    a, b = np.broadcast_arrays(_f32(a), _f32(b))
    pairs = fidelity_operands(a, b, fidelity, op="eltwise", fp32_acc=fp32_acc)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf * 0 = NaN and overflow to Inf are the card's results
        return _into_dst((x * y for x, y in pairs), fp32_acc)


def add(a: npt.ArrayLike, b: npt.ArrayLike, *, fp32_acc: bool = True) -> np.ndarray:
    """FPU ``add_tiles``: the source-register values summed in FP32 (ELWADD has no fidelity phases); DST returned."""
    return _into_dst([to_source_register(a, fp32_acc=fp32_acc) + to_source_register(b, fp32_acc=fp32_acc)], fp32_acc)


def sub(a: npt.ArrayLike, b: npt.ArrayLike, *, fp32_acc: bool = True) -> np.ndarray:
    """FPU ``sub_tiles``: like :func:`add` with ``a - b``."""
    return _into_dst([to_source_register(a, fp32_acc=fp32_acc) - to_source_register(b, fp32_acc=fp32_acc)], fp32_acc)


# ---------------------------------------------------------------------------------------------------- reductions


def _axes(ndim: int, axes: int | Sequence[int] | None) -> tuple[int, ...]:
    found = range(ndim) if axes is None else [axes] if isinstance(axes, int | np.integer) else list(axes)
    if any(not -ndim <= int(ax) < ndim for ax in found):
        raise ConfigError(f"reduction axes {axes!r} do not fit an array of {ndim} dims")
    return tuple(sorted({int(ax) % ndim for ax in found}))


def _tiles_last(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``x`` with the reduced axes flattened into tiles of 32 (zero padded) on the last two axes: (..., T, 32)."""
    keep = [ax for ax in range(x.ndim) if ax not in axes]
    flat = np.transpose(x, keep + list(axes)).reshape(*[x.shape[ax] for ax in keep], -1)
    pad = -flat.shape[-1] % TILE if flat.shape[-1] else TILE
    flat = np.pad(flat, [(0, 0)] * (flat.ndim - 1) + [(0, pad)])
    return flat.reshape(*flat.shape[:-1], -1, TILE)


def _restore(out: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return out.reshape([1 if ax in axes else n for ax, n in enumerate(shape)]) if keepdims else out


def reduce_sum(
    x: npt.ArrayLike,
    axes: int | Sequence[int] | None = None,
    fp32_acc: bool = True,
    *,
    scaler: float = 1.0,
    fidelity: Any = Fidelity.HiFi4,
    keepdims: bool = False,
) -> np.ndarray:
    """``sum(x * scaler)`` over ``axes`` as ``reduce_tile`` computes it: the FPU multiplies the data (SrcA) by the
    scaler tile (SrcB) under ``fidelity``, sums each 32-element tile of the reduced axes in FP32, and accumulates the
    tiles into DST, rounding to BF16 after each tile when ``fp32_acc=False``. A scaler of 1.0 is exact in SrcB; the
    data still loses bits at LoFi (SrcA's 5-bit phase 0). Returns DST (FP32) before storage rounding."""
    x = _f32(x)
    ax = _axes(x.ndim, axes)
    pairs = fidelity_operands(x, np.float32(scaler), fidelity, op="eltwise", fp32_acc=fp32_acc)
    with np.errstate(invalid="ignore", over="ignore"):  # Inf - Inf = NaN and overflow to Inf are the card's too
        scaled = _into_dst((p * s for p, s in pairs), fp32_acc=True)
        partial = _tiles_last(scaled, ax).sum(axis=-1, dtype=np.float32)  # (..., T) per-tile sums in FP32
    if fp32_acc:
        out = partial.sum(axis=-1, dtype=np.float32)
    else:
        out = _bf16_accumulate(torch.from_numpy(np.moveaxis(partial, -1, 0).copy()), partial.shape[:-1])
    return _restore(out, x.shape, ax, keepdims)


def reduce_max(
    x: npt.ArrayLike, axes: int | Sequence[int] | None = None, fp32_acc: bool = True, *, keepdims: bool = False
) -> np.ndarray:
    """``max`` over ``axes`` of the source-register values (GMPOOL with a 1.0 scaler: exact, no fidelity); a NaN
    anywhere in a reduced group gives NaN. Returns DST (FP32)."""
    x = to_source_register(x, fp32_acc=fp32_acc)
    return np.max(x, axis=_axes(x.ndim, axes), keepdims=keepdims, initial=-np.inf)


# ---------------------------------------------------------------------------------------------------------- SFPU


def torch64(fn: Callable[[torch.Tensor], torch.Tensor], x: npt.ArrayLike) -> np.ndarray:
    """A torch float64 function (erf, lgamma, digamma, ...) on NumPy values of any shape, 0-d included: a NumPy
    scalar or 0-d array gives a 0-d array (``np.ascontiguousarray`` would make it 1-d, ``torch.from_numpy`` refuses
    a NumPy scalar)."""
    a = np.asarray(x, dtype=np.float64)
    return fn(torch.from_numpy(a if a.flags.c_contiguous else a.copy())).numpy()


def _erf64(x: np.ndarray, complement: bool = False) -> np.ndarray:
    return torch64(torch.special.erfc if complement else torch.special.erf, x)


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # no cancellation on either side
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_GELU_TANH_C = math.sqrt(2.0 / math.pi)

# Exact modes: float64 math rounded once to float32 (a correctly rounded FP32 result).
_EXACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "sigmoid": _sigmoid64,
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * _erf64(-x / math.sqrt(2.0), complement=True),  # = 0.5x(1 + erf(x/sqrt2))
    "gelu_tanh": lambda x: x * _sigmoid64(2.0 * _GELU_TANH_C * (x + 0.044715 * x**3)),  # = 0.5x(1 + tanh(...))
    "silu": lambda x: x * _sigmoid64(x),
    "sin": np.sin,
    "cos": np.cos,
    "erf": _erf64,
}


def _exp_approx(x: np.ndarray) -> np.ndarray:
    """Schraudolph's exp (tt-llk ``_init_exponential_`` FAST_APPROX with CLAMP_NEGATIVE): clamp x at -88.5; one FP32
    MAD ``t = A*x + (B-C)`` with A = 256/ln2; SFPSTOCHRND to an unsigned 16-bit integer (|t| rounded to nearest, ties
    away, saturating at 65535); shift left by 15 into the FP32 bit pattern (integer part -> exponent, 8 fraction bits
    -> mantissa). Exponent field 255 (x >= ~88.72) reads as Inf or NaN, as on the card."""
    a = np.float32(256.0) * np.float32(1.4426950408889634)
    t = (np.maximum(x, np.float32(-88.5)).astype(np.float64) * float(a) + 32500.818359375).astype(np.float32)
    i = np.floor(np.abs(t.astype(np.float64)) + 0.5)
    i = np.where(np.isnan(i), 65535.0, np.minimum(i, 65535.0)).astype(np.uint32)  # NaN saturates too
    return (i << np.uint32(15)).view(np.float32)


def _recip_approx(x: np.ndarray) -> np.ndarray:
    """SFPARECIP (Blackhole, ~7 bits, used by the LLK's approximate reciprocal): exponent 253 - e and a 7-bit
    mantissa from a 128-entry table indexed by the top 7 mantissa bits; |x| < 2**-126 gives Inf, |x| >= 2**126 (Inf,
    NaN) gives 0; the sign is kept. Table entry i is round(128 * (255 - 2i) / (257 + 2i)), the reciprocal of the
    interval midpoint: this reproduces the ISA documentation's table entry for entry (checked when written)."""
    i = np.arange(128)
    table = np.minimum(127, np.floor(128 * (255 - 2 * i) / (257 + 2 * i) + 0.5)).astype(np.uint32)
    u = x.view(np.uint32)
    sign, mag = u & np.uint32(0x80000000), u & np.uint32(0x7FFFFFFF)
    e = mag >> np.uint32(23)
    normal = ((np.uint32(253) - np.minimum(e, np.uint32(252))) << np.uint32(23)) | (
        table[(mag >> np.uint32(16)) & np.uint32(0x7F)] << np.uint32(16)
    )
    out = np.where(mag < 0x00800000, np.uint32(0x7F800000), np.where(mag < 0x7E800000, normal, np.uint32(0)))
    return (out | sign).astype(np.uint32).view(np.float32)


def _lut16(code: int) -> float:
    """SFPLUTFP32's 16-bit coefficient: FP16 layout, but exponent 0 is a normal number and exponent 31 means 0."""
    exp, man = (code >> 10) & 0x1F, code & 0x3FF
    return 0.0 if exp == 0x1F else (-1.0) ** (code >> 15) * (1 + man / 1024) * 2.0 ** (exp - 15)


def _lut6(x: np.ndarray, cuts: Sequence[float], slopes: Sequence[int], offsets: Sequence[int]) -> np.ndarray:
    """The 6-piece SFPLUTFP32: ``A_i * |x| + B_i`` in one FP32 MAD, the piece chosen by |x| against ``cuts``."""
    ax = np.abs(x).astype(np.float64)
    piece = np.searchsorted(np.asarray(cuts), ax, side="right")
    a = np.array([_lut16(c) for c in slopes])[piece]
    b = np.array([_lut16(c) for c in offsets])[piece]
    return (a * ax + b).astype(np.float32)


# tt-llk ckernel_sfpu_gelu.h _init_gelu_: 6-entry FP16 table 1 (last piece from 3.0), sign not retained.
_GELU_LUT = ((0.5, 1.0, 1.5, 2.0, 3.0), (0x322B, 0x37E7, 0x38F3, 0x38E1, 0x3852, 0x3800),
             (0x86D8, 0xB122, 0xB479, 0xB437, 0xAFA4, 0x7C00))  # fmt: skip
# tt-llk ckernel_sfpu_sigmoid.h _init_sigmoid_: lut2(..., mode 0) is table 2 (last piece from 4.0), sign retained.
_SIGMOID_LUT = ((0.5, 1.0, 1.5, 2.0, 4.0), (0x33D9, 0x32F4, 0x318A, 0x300A, 0x2A35, 0x7C00),
                (0x9018, 0x23C8, 0x2BAA, 0x3027, 0x34CC, 0x37FF))  # fmt: skip


def _gelu_approx(x: np.ndarray) -> np.ndarray:
    """tt-llk ``_calculate_gelu_appx_``: ``0.5*x + LUT(|x|)``, a 6-piece linear fit of ``0.5*|x|*erf(|x|/sqrt2)``."""
    return (x * np.float32(0.5)) + _lut6(x, *_GELU_LUT)


def _sigmoid_approx(x: np.ndarray) -> np.ndarray:
    """tt-llk ``_calculate_sigmoid_``: ``copysign(LUT(|x|), x) + 0.5``; saturates at 0.49976 + 0.5 beyond |x| = 4."""
    return np.copysign(_lut6(x, *_SIGMOID_LUT), x) + np.float32(0.5)


_APPROX: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": _exp_approx,
    "reciprocal": _recip_approx,
    "gelu": _gelu_approx,
    "gelu_tanh": _gelu_approx,
    "sigmoid": _sigmoid_approx,
}

SFPU_OPS = tuple(_EXACT)


def sfpu(op: str, x: npt.ArrayLike, approx: bool = False) -> np.ndarray:
    """An SFPU unary op on DST values (float32 in, float32 out, before storage rounding).

    ``approx=False``: correctly rounded FP32 (float64 math rounded once), IEEE special values: at most half an FP32
    ulp from float64 (so within half a BF16 ulp once stored); the card's exact modes are within about one BF16 ulp.
    ``approx=True`` models the LLK's approximate algorithms; max error vs float64 over all BF16 inputs of the range
    (measured in the tests): exp, Schraudolph bit trick: 3.11% relative on [-87, 88] (median 2.1%, biased low);
    reciprocal, SFPARECIP: 0.56% relative on the normal range; gelu and gelu_tanh, 0.5x + 6-piece linear LUT of the
    erf form: 0.0234 absolute (worst near |x| = 0.25; relu beyond |x| = 3); sigmoid, 6-piece linear LUT: 0.0177
    absolute (worst at |x| = 4, saturated at 0.99976 beyond).
    Other ops have no separate approximate model: ``approx=True`` computes the exact model. Ops: ``SFPU_OPS``.
    """
    if op not in _EXACT:
        raise KohakuTTUnsupportedOperator(f"sfpu: no op {op!r}; the SFPU ops are {', '.join(SFPU_OPS)}")
    x = _f32(x)
    if approx and op in _APPROX:
        with np.errstate(all="ignore"):
            return _APPROX[op](x)
    with np.errstate(all="ignore"):
        return np.asarray(_EXACT[op](x.astype(np.float64)), dtype=np.float32)
