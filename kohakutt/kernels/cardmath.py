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

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from kohakutt.errors import ConfigError, FormatError, KohakuTTUnsupportedOperator
from kohakutt.hal import cardcore
from kohakutt.ir.numerics import Fidelity  # the IR's enum, importable from here too

TILE = 32
MVMUL_K = 16  # products one MVMUL sums in FP32 before adding them to DST

_TF32 = 0xFFFFE000  # FP32 -> TF32 source register: the low 13 mantissa bits are dropped
_BF16 = 0xFFFF0000  # FP32 -> BF16 source register (16-bit DST): the low 16 bits are dropped


# ---------------------------------------------------------------------------------------------------------- bits


def _f32(x: npt.ArrayLike) -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    return a if a.flags.c_contiguous else a.copy()


def _masked(x: np.ndarray, mask: int) -> np.ndarray:
    """A new float32 array: ``x``'s bits ANDed with ``mask``."""
    return np.asarray(x.view(np.uint32) & np.uint32(mask)).view(np.float32)


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


BF16_MAX = 3.3895313892515355e38  # the largest finite bfloat16


def split_bf16(x: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """float32 values as three bfloat16-exact parts ``x = x0 + x1 + x2`` (each part passes the unpacker unchanged, so
    a HiFi4 product of two parts is exact), as the card makes them: ``x0`` the bf16 rounding (nearest, ties to even)
    of ``x`` clamped to bf16's finite range, ``x1`` that of the exact remainder, ``x2`` what is left (at most 8
    significant bits). Returns ``(x0, x0_finite, x1, x2)``: ``x0`` keeps Inf and NaN (``x1``, ``x2`` and
    ``x0_finite`` hold 0 there), so a split product carries them in its leading term only."""
    x = _f32(x)
    finite = np.isfinite(x)
    xf = x if finite.all() else np.where(finite, x, np.float32(0.0))
    x0f = round_to(np.clip(xf, -BF16_MAX, BF16_MAX), "bfloat16")
    rest = xf - x0f  # exact: x0f is within a factor of two of xf (Sterbenz)
    x1 = round_to(rest, "bfloat16")
    x2 = rest - x1  # exact, and bf16-exact: the 24 significant bits of x less the 16 of x0 and x1
    x0 = x0f if finite.all() else np.where(finite, x0f, x)
    return x0, x0f, x1, x2


def to_source_register(x: npt.ArrayLike, *, fp32_acc: bool = True) -> np.ndarray:
    """The value the unpacker puts in SrcA / SrcB for float32 data: truncated (not rounded) to TF32 (19 bits) when DST
    is FP32, to BF16 when DST is 16-bit. BF16 data passes unchanged either way."""
    return _masked(_f32(x), _TF32 if fp32_acc else _BF16)


# ------------------------------------------------------------------------------------------------------ fidelity


def _slice(x: np.ndarray, operand: int, phase: int, fp32_acc: bool) -> np.ndarray:
    return cardcore.fidelity_slice(x, operand, phase, fp32_acc).reshape(x.shape)


def fidelity_operands(
    a: npt.ArrayLike, b: npt.ArrayLike, fidelity: Any, *, op: str = "matmul", fp32_acc: bool = True
) -> list[tuple[np.ndarray, np.ndarray]]:
    """One ``(a_part, b_part)`` pair per fidelity phase, in phase order: what the multiplier really sees. The sum over
    phases of ``a_part @ b_part`` (``op="matmul"``: a = in0 in SrcB, b = in1 in SrcA) or of ``a_part * b_part``
    (``op="eltwise"``: a = in0 in SrcA, b = in1 in SrcB) is the FPU's product. Inf and NaN appear only in phase 0's
    pair (as themselves); in later phases their parts are 0, so the phase sum follows IEEE (Inf * 1 = Inf). The
    slices come from the card's arithmetic core (``kohakutt.hal.cardcore.fidelity_slice``)."""
    fid = Fidelity.of(fidelity)
    a, b = _f32(a), _f32(b)
    if op == "matmul":
        return [(_slice(a, cardcore.SRCB, p, fp32_acc), _slice(b, cardcore.SRCA, p, fp32_acc))
                for p in range(fid.phases)]  # fmt: skip
    if op == "eltwise":
        return [(_slice(a, cardcore.SRCA, p, fp32_acc), _slice(b, cardcore.SRCB, p, fp32_acc))
                for p in range(fid.phases)]  # fmt: skip
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
    a, b = _f32(a), _f32(b)
    return [(cardcore.part_slice(a, cardcore.SRCB, pb, fp32_acc, i == 0).reshape(a.shape),
             cardcore.part_slice(b, cardcore.SRCA, pa, fp32_acc, i == 0).reshape(b.shape))
            for i, (pa, pb) in enumerate(cardcore.FOLDED_PHASES[Fidelity.of(fidelity).phases])]  # fmt: skip


# -------------------------------------------------------------------------------------------------------- matmul


def torch_is_ieee(op: str = "matmul") -> bool:
    """Whether torch runs FP32 ``op``s ("matmul" or "conv") on the CPU in full FP32: a user may have allowed BF16 or
    TF32 shortcuts (``torch.set_float32_matmul_precision``, the ``fp32_precision`` settings), and the simulator's
    engine must not take them."""
    chain = [getattr(torch.backends.mkldnn, op, None), torch.backends.mkldnn, torch.backends]
    for setting in (getattr(obj, "fp32_precision", "none") for obj in chain):
        if setting != "none":
            return setting == "ieee"
    if op != "matmul":
        return True
    try:
        return torch.get_float32_matmul_precision() == "highest"
    except RuntimeError:  # torch refuses to answer when the legacy and the new settings were mixed
        return False


_torch_matmul_is_ieee = torch_is_ieee


def engine_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x @ y`` of float32 CPU tensors in full float32, whatever torch's own precision settings allow (NumPy's BLAS
    stands in when torch's would cut the operands)."""
    if torch_is_ieee():
        return torch.matmul(x, y)
    return torch.from_numpy(np.matmul(x.numpy(), y.numpy()))


def _mm(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """An exact-FP32 matmul (batch dims broadcast). torch's BLAS is the engine: a second BLAS thread pool (NumPy's)
    would fight torch's for the cores; NumPy only stands in when torch's FP32 matmuls run in reduced precision."""
    if torch_is_ieee():
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

SFPU_OPS = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "sin", "cos",
            "erf")  # fmt: skip


def sfpu(op: str, x: npt.ArrayLike, approx: bool = False) -> np.ndarray:
    """An SFPU unary op on DST values (float32 in, float32 out, before storage rounding), computed by the card's
    arithmetic core (``kohakutt.hal.cardcore``, the functions the simulator's programs run).

    ``approx=False``: correctly rounded FP32 (double math rounded once), IEEE special values: at most half an FP32
    ulp from float64 (so within half a BF16 ulp once stored); the card's exact modes are within about one BF16 ulp.
    ``approx=True`` models the LLK's approximate algorithms; max error vs float64 over all BF16 inputs of the range
    (measured in the tests): exp, Schraudolph's bit trick (tt-llk ``_init_exponential_`` FAST_APPROX, clamp at
    -88.5): 3.11% relative on [-87, 88] (median 2.1%, biased low); reciprocal, SFPARECIP (a 128-entry 7-bit
    mantissa table): 0.56% relative on the normal range; gelu and gelu_tanh, 0.5x + a 6-piece linear LUT of the erf
    form (tt-llk ``_calculate_gelu_appx_``): 0.0234 absolute (worst near |x| = 0.25; relu beyond |x| = 3); sigmoid,
    a 6-piece linear LUT (tt-llk ``_calculate_sigmoid_``): 0.0177 absolute (worst at |x| = 4, saturated at 0.99976
    beyond). Other ops have no separate approximate model: ``approx=True`` computes the exact model. Ops:
    ``SFPU_OPS``.
    """
    if op not in SFPU_OPS:
        raise KohakuTTUnsupportedOperator(f"sfpu: no op {op!r}; the SFPU ops are {', '.join(SFPU_OPS)}")
    return cardcore.sfpu(op, _f32(x), approx=approx).reshape(np.shape(x))
