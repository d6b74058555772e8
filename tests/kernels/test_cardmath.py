"""The card's arithmetic (kohakutt.kernels.cardmath) against independent models.

The multiplier reference below works on Python integers: math.frexp gives each value's significand, the source
register keeps its top 11 (TF32) or 8 (BF16) bits, each fidelity phase ANDs that integer with the phase's bit mask,
and products and sums are exact (math.fsum). The implementation instead masks float32 bit patterns and folds phases
into FP32 matmuls, so the two share no code.
"""

from __future__ import annotations

import enum
import math
import struct

import numpy as np
import pytest
import torch

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import ConfigError, FormatError, KohakuTTUnsupportedOperator
from kohakutt.ir.numerics import numerics
from kohakutt.kernels import cardmath as cm
from kohakutt.kernels.cardmath import Fidelity

# Phase masks on the 11-bit significand (implicit 1 = bit 10) of a source-register value.
SRCA_BITS = (0b11111000000, 0b00000111110)  # even phases, odd phases; bit 0 is never multiplied
SRCB_BITS = (0b11111110000, 0b00000001111)  # phases 0-1, phases 2-3
FP32_EPS = 2.0**-24  # half an FP32 ulp, relative
BF16_EPS = 2.0**-8  # half a BF16 ulp, relative (bound over a binade)


def src_fields(x: float, fp32_acc: bool = True) -> tuple[int, int, int]:
    """(sign, exponent, 11-bit significand) of x in a source register: |x| = significand * 2**(exponent - 11)."""
    if x == 0.0:
        return 1, 0, 0
    m, e = math.frexp(abs(x))  # |x| = m * 2**e with 0.5 <= m < 1
    sig24 = int(m * (1 << 24))  # exact for float32
    keep = 11 if fp32_acc else 8  # TF32 or BF16: truncation
    return (-1 if x < 0 else 1), e, (sig24 >> (24 - keep)) << (11 - keep)


def part(x: float, bits: int, fp32_acc: bool = True) -> float:
    sign, e, sig = src_fields(x, fp32_acc)
    return sign * math.ldexp(sig & bits, e - 11)


def term(srcb: float, srca: float, phase: int, fp32_acc: bool = True) -> float:
    return part(srcb, SRCB_BITS[phase >> 1], fp32_acc) * part(srca, SRCA_BITS[phase & 1], fp32_acc)


def rne_bf16(v: float) -> float:
    """Round a float32-representable value to bfloat16 with integer arithmetic (ties to even)."""
    (u,) = struct.unpack("<I", struct.pack("<f", v))
    low, high = u & 0xFFFF, u >> 16
    if low > 0x8000 or (low == 0x8000 and high & 1):
        high += 1
    return struct.unpack("<f", struct.pack("<I", (high << 16) & 0xFFFFFFFF))[0]


def direct_matmul(a: np.ndarray, b: np.ndarray, fid: Fidelity, *, swap: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Exact sum over k and phases of the masked products; also the sum of |terms| for the FP32 error bound."""
    m, k = a.shape
    n = b.shape[1]
    out, mag = np.zeros((m, n)), np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            terms = [
                term(b[kk, j], a[i, kk], p) if swap else term(a[i, kk], b[kk, j], p)
                for kk in range(k)
                for p in range(fid.phases)
            ]
            out[i, j], mag[i, j] = math.fsum(terms), math.fsum(abs(t) for t in terms)
    return out, mag


def bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.asarray(x, np.float32)).bfloat16().float().numpy()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# ------------------------------------------------------------------------------------------------- fidelity enum


def test_fidelity_of_names_numbers_and_members():
    assert Fidelity.of("HiFi2") is Fidelity.HiFi2
    assert Fidelity.of(" lofi ") is Fidelity.LoFi
    assert Fidelity.of(Fidelity.HiFi3) is Fidelity.HiFi3
    assert [Fidelity.of(n) for n in (0, 2, 3, 4)] == list(Fidelity)  # TT-Metal's MathFidelity values
    assert Fidelity.of(np.int64(3)) is Fidelity.HiFi3

    class MathFidelity(enum.Enum):  # TT-NN's and the IR's enums are read by name
        HiFi2 = 2

    assert Fidelity.of(MathFidelity.HiFi2) is Fidelity.HiFi2
    assert [f.phases for f in Fidelity] == [1, 2, 3, 4]
    for bad in (1, 5, -1, "HiFi5", True, None, 2.0):
        with pytest.raises(ConfigError, match="math fidelity"):
            Fidelity.of(bad)


# ------------------------------------------------------------------------------------------ storage rounding


def test_round_bf16_ties_to_even_and_specials():
    one = 1.0
    cases = {
        one + 2.0**-8: 1.0,  # tie, 1.0 is even
        one + 3 * 2.0**-8: one + 2.0**-6,  # tie, rounds up to the even neighbour
        -(one + 3 * 2.0**-8): -(one + 2.0**-6),
        one + 2.0**-8 + 2.0**-20: one + 2.0**-7,  # just past the tie
        one + 2.0**-8 - 2.0**-20: 1.0,
        3.4028234663852886e38: math.inf,  # FP32 max overflows
        -3.4028234663852886e38: -math.inf,
        3.3895313892515355e38: 3.3895313892515355e38,  # BF16 max stays
        math.inf: math.inf,
        -math.inf: -math.inf,
        1.5 * 2.0**-131: 1.5 * 2.0**-131,  # subnormals are kept
    }
    got = cm.round_to(np.array(list(cases), np.float32))
    np.testing.assert_array_equal(got, np.array(list(cases.values()), np.float32))
    neg_zero = cm.round_to(np.float32([-0.0]))
    assert neg_zero[0] == 0 and math.copysign(1, neg_zero[0]) < 0
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF], np.uint32)
    assert np.isnan(cm.round_to(nan_bits.view(np.float32))).all()  # including NaNs with only low payload bits


def test_round_bf16_matches_torch_on_random_bit_patterns(rng):
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x, before = bits.view(np.float32), bits.copy()
    ours, ref = cm.round_to(x), bf16(x)
    same = (ours.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(ours) & np.isnan(ref))
    assert same.all(), f"{(~same).sum()} of {x.size} differ from torch's bfloat16 conversion"
    np.testing.assert_array_equal(bits, before)  # the input is left alone


def test_round_to_float32_and_block_formats():
    x = np.float32([1.0 + 2.0**-20])
    assert cm.round_to(x, "float32")[0] == x[0]
    with pytest.raises(FormatError, match="block format"):
        cm.round_to(x, "bfloat8_b")
    with pytest.raises(FormatError, match="unknown storage format"):
        cm.round_to(x, "float16")


def test_to_source_register_truncates():
    x = np.float32([1 + 2.0**-10 + 2.0**-11, -(1 + 2.0**-10 + 2.0**-11), 1 + 2.0**-7 + 2.0**-8, 1.9999999])
    np.testing.assert_array_equal(
        cm.to_source_register(x), np.float32([1 + 2.0**-10, -(1 + 2.0**-10), x[2], 1.9990234375])
    )
    np.testing.assert_array_equal(
        cm.to_source_register(x, fp32_acc=False), np.float32([1, -1, 1 + 2.0**-7, 1.9921875])
    )  # BF16 source with a 16-bit DST, also truncated


# ------------------------------------------------------------------------------------------ fidelity and matmul


@pytest.mark.parametrize("fid", list(Fidelity))
@pytest.mark.parametrize("kind", ["float32", "bfloat16"])
def test_matmul_matches_direct_multiplier_model(fid, kind, rng):
    a = rng.standard_normal((5, 64)).astype(np.float32)
    b = rng.standard_normal((64, 4)).astype(np.float32)
    if kind == "bfloat16":
        a, b = bf16(a), bf16(b)
    ref, mag = direct_matmul(a.astype(float), b.astype(float), fid)
    ours = cm.matmul(a, b, fidelity=fid, out_format="float32")
    bound = 64 * 2 * FP32_EPS * mag  # FP32 accumulation of 64 * phases exact products, any order
    assert np.all(np.abs(ours - ref) <= bound), np.max(np.abs(ours - ref) / mag)
    per_phase = sum(x @ y for x, y in cm.fidelity_operands(a, b, fid))  # the phase pairs say the same
    assert len(cm.fidelity_operands(a, b, fid)) == fid.phases
    with pytest.raises(ConfigError, match="op must be"):
        cm.fidelity_operands(a, b, fid, op="conv")
    assert np.all(np.abs(per_phase - ref) <= bound)


def test_direct_model_detects_swapped_operands(rng):
    a, b = rng.standard_normal((4, 32)).astype(np.float32), rng.standard_normal((32, 4)).astype(np.float32)
    ours = cm.matmul(a, b, fidelity="LoFi", out_format="float32")
    swapped, mag = direct_matmul(a.astype(float), b.astype(float), Fidelity.LoFi, swap=True)
    assert np.max(np.abs(ours - swapped) / mag) > 1e-3, "in0 must be the 7-bit SrcB operand, in1 the 5-bit SrcA"


def test_hifi4_on_bf16_is_float64_rounded(rng):
    a = bf16(rng.standard_normal((64, 256)))
    b = bf16(rng.standard_normal((256, 48)))
    exact = a.astype(np.float64) @ b.astype(np.float64)  # BF16 products are exact at HiFi4
    f32 = cm.matmul(a, b, fidelity="HiFi4", out_format="float32")
    assert np.all(np.abs(f32 - exact) <= 256 * 2 * FP32_EPS * (np.abs(a) @ np.abs(b)))
    ours = cm.matmul(a, b, fidelity="HiFi4")
    ref = np.array([rne_bf16(v) for v in exact.astype(np.float32).ravel()], np.float32).reshape(exact.shape)
    assert np.mean(ours == ref) > 0.99  # differ only where FP32 accumulation lands on the other side of a tie
    assert np.all(np.abs(ours - ref) <= 2 * BF16_EPS * np.abs(ref))


def test_error_shrinks_with_fidelity(rng):
    a = bf16(rng.standard_normal((64, 512)))
    b = bf16(rng.standard_normal((512, 64)))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    med = {
        f.name: float(np.median(np.abs(cm.matmul(a, b, fidelity=f, out_format="float32") - exact) / np.abs(exact)))
        for f in Fidelity
    }
    # measured: LoFi 2.6e-2, HiFi2 4.0e-3, HiFi3 9.5e-5, HiFi4 9.2e-8 (FP32 accumulation only)
    assert med["LoFi"] > 2 * med["HiFi2"] > 20 * med["HiFi3"] > 100 * med["HiFi4"], med
    assert med["HiFi4"] < 1e-6, med


def test_matmul_batches_broadcast(rng):
    a = bf16(rng.standard_normal((2, 1, 8, 40)))
    b = bf16(rng.standard_normal((3, 40, 6)))
    for acc in (True, False):
        out = cm.matmul(a, b, fidelity="HiFi2", fp32_acc=acc)
        assert out.shape == (2, 3, 8, 6)
        np.testing.assert_array_equal(out[1, 2], cm.matmul(a[1, 0], b[2], fidelity="HiFi2", fp32_acc=acc))


def test_matmul_stays_exact_when_torch_allows_bf16_matmuls(rng):
    a, b = rng.standard_normal((32, 256)).astype(np.float32), rng.standard_normal((256, 32)).astype(np.float32)
    want = cm.matmul(a, b, fidelity="HiFi4", out_format="float32")
    before = torch.backends.mkldnn.matmul.fp32_precision
    try:
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"  # a user's speed setting must not change the model
        got = cm.matmul(a, b, fidelity="HiFi4", out_format="float32")
    finally:
        torch.backends.mkldnn.matmul.fp32_precision = before
    assert np.all(np.abs(got - want) <= 256 * 2 * FP32_EPS * (np.abs(a) @ np.abs(b)))


def test_matmul_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="do not match"):
        cm.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32), fidelity="LoFi")
    with pytest.raises(ConfigError, match="k_block"):
        cm.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), fidelity="LoFi", fp32_acc=False, k_block=0)


# --------------------------------------------------------------------------------------------- BF16 accumulation


def integer_operands(rng: np.random.Generator, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """8-bit integers: every phase product, 16-term sum and DST addition is exact in FP32, only BF16 rounds."""
    a = rng.integers(-255, 256, size=(m, k)).astype(np.float32)
    b = rng.integers(-255, 256, size=(k, n)).astype(np.float32)
    return a, b


def direct_bf16_dst(a: np.ndarray, b: np.ndarray, fid: Fidelity, k_block: int | None) -> np.ndarray:
    m, k = a.shape
    out = np.zeros((m, b.shape[1]), np.float32)
    for i in range(m):
        for j in range(b.shape[1]):
            acc = 0.0
            if k_block is None:  # per tile, per phase, per 16-wide half: one MVMUL each
                steps = [
                    [(kk, p) for kk in range(t * 32 + h * 16, min(k, t * 32 + h * 16 + 16))]
                    for t in range(-(-k // 32))
                    for p in range(fid.phases)
                    for h in (0, 1)
                ]
            else:
                w = 32 * k_block
                steps = [[(kk, p) for kk in range(s, min(k, s + w)) for p in range(fid.phases)] for s in range(0, k, w)]
            for step in steps:
                chunk = math.fsum(term(a[i, kk], b[kk, j], p, fp32_acc=False) for kk, p in step)
                acc = rne_bf16(acc + chunk)
            out[i, j] = acc
    return out


@pytest.mark.parametrize("fid", [Fidelity.LoFi, Fidelity.HiFi2, Fidelity.HiFi4])
@pytest.mark.parametrize("k_block", [None, 1, 2])
def test_bf16_dst_rounds_at_the_modelled_points(fid, k_block, rng):
    a, b = integer_operands(rng, 4, 80, 5)  # 2.5 tiles of K
    ours = cm.matmul(a, b, fidelity=fid, fp32_acc=False, out_format="float32", k_block=k_block)
    np.testing.assert_array_equal(ours, direct_bf16_dst(a, b, fid, k_block))


def test_bf16_dst_models_differ(rng):
    a, b = integer_operands(rng, 8, 256, 8)
    fine = cm.matmul(a, b, fidelity="HiFi4", fp32_acc=False, out_format="float32")
    coarse = cm.matmul(a, b, fidelity="HiFi4", fp32_acc=False, out_format="float32", k_block=1)
    assert np.mean(fine != coarse) > 0.5, "rounding per MVMUL and rounding per tile must be told apart"  # 0.81


def test_bf16_dst_error_grows_with_k(rng):
    a = bf16(rng.standard_normal((16, 4096)))
    b = bf16(rng.standard_normal((4096, 16)))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def median_error(fp32_acc: bool) -> float:
        out = cm.matmul(a, b, fidelity="HiFi4", fp32_acc=fp32_acc, out_format="float32")
        return float(np.median(np.abs(out - exact) / np.abs(exact)))

    # measured: BF16 DST 2.2e-2, FP32 DST 1.4e-7
    assert median_error(False) > 1000 * median_error(True)


# ------------------------------------------------------------------------------------------ element-wise FPU


@pytest.mark.parametrize("fid", list(Fidelity))
@pytest.mark.parametrize("fp32_acc", [True, False])
def test_multiply_matches_direct_model(fid, fp32_acc, rng):
    a = rng.standard_normal(300).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    ref = []
    for x, y in zip(a.tolist(), b.tolist()):
        acc = np.float32(0.0)
        for p in range(fid.phases):  # ELWMUL: in0 in SrcA, in1 in SrcB, one DST addition per phase
            acc = np.float32(acc + np.float32(term(y, x, p, fp32_acc)))
            if not fp32_acc:
                acc = np.float32(rne_bf16(float(acc)))
        ref.append(acc)
    np.testing.assert_array_equal(cm.multiply(a, b, fidelity=fid, fp32_acc=fp32_acc), np.array(ref, np.float32))


def test_multiply_operand_roles_and_broadcast():
    x = np.float32([1 + 2.0**-6])  # 7 significant bits: whole in SrcB, cut to 5 in SrcA at LoFi
    assert cm.multiply(x, np.float32(1.0), fidelity="LoFi")[0] == 1.0  # in0 is SrcA
    assert cm.multiply(np.float32(1.0), x, fidelity="LoFi")[0] == x[0]  # in1 is SrcB
    assert cm.multiply(np.ones((2, 3), np.float32), np.float32([1, 2, 3]), fidelity="HiFi4").shape == (2, 3)


def test_add_sub_exact_then_rounded():
    a, b = np.float32([1 + 2.0**-10, 1.0]), np.float32([2.0**-12, 2.0**-9 + 2.0**-20])
    np.testing.assert_array_equal(cm.add(a, b), np.float32([1 + 2.0**-10 + 2.0**-12, 1 + 2.0**-9]))
    np.testing.assert_array_equal(cm.add(a, b, fp32_acc=False), np.float32([1.0, 1.0]))  # BF16 sources and DST
    np.testing.assert_array_equal(cm.sub(a, b), np.float32([1 + 2.0**-10 - 2.0**-12, 1 - 2.0**-9]))


# ------------------------------------------------------------------------------------------------ reductions


def test_reduce_sum_accumulation(rng):
    x = rng.integers(-255, 256, size=(3, 5, 200)).astype(np.float32)  # exact sums in FP32
    np.testing.assert_array_equal(cm.reduce_sum(x, -1), x.sum(-1))
    np.testing.assert_array_equal(cm.reduce_sum(x, (0, 2), keepdims=True), x.sum((0, 2), keepdims=True))
    tiles = np.pad(x, ((0, 0), (0, 0), (0, 24))).reshape(3, 5, 7, 32).sum(-1)
    ref = np.zeros((3, 5), np.float32)
    for t in range(7):  # a BF16 DST rounds after every tile
        ref = bf16(ref + tiles[..., t])
    np.testing.assert_array_equal(cm.reduce_sum(x, 2, False), ref)
    assert np.any(cm.reduce_sum(x, 2, False) != x.sum(-1))


def test_reduce_sum_fidelity_and_scaler():
    x = np.float32([[1 + 2.0**-6, 3.0]])  # 1 + 2**-6 needs 7 significant bits
    assert cm.reduce_sum(x, 1)[0] == np.float32(4 + 2.0**-6)
    assert cm.reduce_sum(x, 1, fidelity="LoFi")[0] == 4.0  # the data sits in SrcA: 5 bits at phase 0
    assert cm.reduce_sum(x, 1, scaler=0.5)[0] == np.float32(2 + 2.0**-7)


def test_reduce_max(rng):
    x = rng.standard_normal((4, 70)).astype(np.float32)
    np.testing.assert_array_equal(cm.reduce_max(x, 1), cm.to_source_register(x).max(1))
    np.testing.assert_array_equal(cm.reduce_max(bf16(x), (0, 1)), bf16(x).max())
    assert np.isnan(cm.reduce_max(np.float32([1.0, np.nan]), 0))
    with pytest.raises(ConfigError, match="axes"):
        cm.reduce_max(x, 2)


# ------------------------------------------------------------------------------------------------- Inf and NaN
# The card multiplies Inf by a finite nonzero value to Inf: the fidelity split must not add an Inf * 0 (a zero
# phase part of the other operand) that IEEE makes NaN. The references are IEEE float64 products and sums, written
# element by element (no BLAS, which may skip zeros).

FIDELITIES = list(Fidelity)
# values with zero low slices (bf16 1.0, -2.5) and nonzero ones (float32 1/3, 1 + 2**-20 has only a TF32-cut bit)
SPECIAL_A = np.float32([np.inf, -np.inf, np.inf, -np.inf, 1.5, 0.0, np.nan, np.inf, 1 / 3, np.inf, -np.inf, np.inf])
SPECIAL_B = np.float32([1.0, 1.0, 0.0, -2.5, np.inf, np.inf, 1.0, np.inf, -np.inf, 1 / 3, 1 + 2.0**-20, -np.inf])


def assert_same_specials(got: np.ndarray, ref: np.ndarray) -> None:
    """NaN exactly where ref is NaN, +-Inf exactly where ref is (same sign), finite elsewhere."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))


@pytest.mark.parametrize("fp32_acc", [True, False])
@pytest.mark.parametrize("fid", FIDELITIES)
def test_multiply_inf_nan_follow_ieee(fid, fp32_acc):
    with np.errstate(invalid="ignore"):
        ref = SPECIAL_A.astype(np.float64) * SPECIAL_B.astype(np.float64)
    assert ref[0] == np.inf and np.isnan(ref[2]) and ref[3] == np.inf and ref[11] == -np.inf  # IEEE, as the card
    for a, b in ((SPECIAL_A, SPECIAL_B), (SPECIAL_B, SPECIAL_A)):  # Inf in SrcA and in SrcB
        assert_same_specials(cm.multiply(a, b, fidelity=fid, fp32_acc=fp32_acc), ref)
    # finite products are unchanged by a neighbouring Inf
    fin = np.float32([1 / 3, 1.5, 1 + 2.0**-20])
    mixed = cm.multiply(np.append(fin, np.inf), np.float32([1 / 7, 1 / 3, 3.0, 1.0]), fidelity=fid, fp32_acc=fp32_acc)
    np.testing.assert_array_equal(
        mixed[:3], cm.multiply(fin, np.float32([1 / 7, 1 / 3, 3.0]), fidelity=fid, fp32_acc=fp32_acc)
    )
    assert mixed[3] == np.inf


@pytest.mark.parametrize("fp32_acc", [True, False])
@pytest.mark.parametrize("fid", FIDELITIES)
def test_reduce_sum_with_inf_and_nan(fid, fp32_acc):
    assert cm.reduce_sum(np.float32([np.inf, 1.0]), fidelity=fid, fp32_acc=fp32_acc) == np.inf
    assert cm.reduce_sum(np.float32([-np.inf, 1 / 3]), fidelity=fid, fp32_acc=fp32_acc) == -np.inf
    assert np.isnan(cm.reduce_sum(np.float32([np.inf, -np.inf]), fidelity=fid, fp32_acc=fp32_acc))
    assert np.isnan(cm.reduce_sum(np.float32([np.nan, 1.0]), fidelity=fid, fp32_acc=fp32_acc))
    assert cm.reduce_sum(np.float32([np.inf, 1.0]), scaler=1 / 3, fidelity=fid, fp32_acc=fp32_acc) == np.inf
    assert np.isnan(cm.reduce_sum(np.float32([np.inf, 1.0]), scaler=0.0, fidelity=fid, fp32_acc=fp32_acc))
    # 3 x 70 (not a multiple of 32): one row with +Inf, one with -Inf in its second tile, one finite
    x = np.arange(210, dtype=np.float32).reshape(3, 70) / 7
    clean = cm.reduce_sum(x, 1, fp32_acc, fidelity=fid)
    x[0, 3], x[1, 40] = np.inf, -np.inf
    out = cm.reduce_sum(x, 1, fp32_acc, fidelity=fid)
    assert out[0] == np.inf and out[1] == -np.inf and out[2] == clean[2]


@pytest.mark.parametrize("fp32_acc, k_block", [(True, None), (False, None), (False, 1)])
@pytest.mark.parametrize("fid", FIDELITIES)
def test_matmul_with_inf_and_nan(fid, fp32_acc, k_block, rng):
    """Inf in either operand against bf16 weights (zero low slices) and float32 ones (nonzero low slices)."""
    m, k, n = 4, 40, 3
    a = rng.uniform(0.5, 2.0, (m, k)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, (k, n)).astype(np.float32)
    a[0, 5], a[1, 7], a[2, 9] = np.inf, -np.inf, np.nan
    b[5, 1] = 0.0  # a[0] . b[:, 1] has Inf * 0: NaN
    b[33, 2] = -np.inf  # column 2: -Inf, and +Inf - Inf with row 0's +Inf
    for bb in (bf16(b), b):
        for x, y in ((a, bb), (bb.T.copy(), a.T.copy())):  # Inf in in0 (SrcB) and in in1 (SrcA)
            with np.errstate(invalid="ignore"):
                ref = (x.astype(np.float64)[:, :, None] * y.astype(np.float64)[None, :, :]).sum(1)
            out = cm.matmul(x, y, fidelity=fid, fp32_acc=fp32_acc, k_block=k_block, out_format="float32")
            assert_same_specials(out, ref)
            assert np.isfinite(out).sum() == np.isfinite(ref).sum() > 0
    assert np.isnan(cm.matmul(a[:1], b, fidelity=fid, fp32_acc=fp32_acc))[0, 1]


@pytest.mark.parametrize("fid", FIDELITIES)
def test_sim_sum_and_matmul_with_inf(fid):
    """The same through the op library on the simulator: the reduce path and a bf16 matmul."""
    dev = hal.open_device(0)
    try:
        with numerics(fidelity=fid, fp32_acc=False):
            for dtype in ("bfloat16", "float32"):
                (s,) = kk.run("sum", [kk.from_numpy(dev, np.float32([np.inf, 1.0]), dtype)])
                assert kk.to_numpy(s) == np.inf
            a = kk.from_numpy(dev, np.float32([[np.inf, 1, 1], [1, 1, 1]]), "bfloat16")
            w = kk.from_numpy(dev, np.float32([[1, 0], [1, 1], [1, 1]]), "bfloat16")  # zero low slices
            (y,) = kk.run("matmul", [a, w])
            got = kk.to_numpy(y)
        assert got[0, 0] == np.inf and np.isnan(got[0, 1]) and got[1].tolist() == [3.0, 2.0]
    finally:
        dev.close()


def test_fidelity_operands_keep_specials_in_phase_0():
    pairs = cm.fidelity_operands(np.float32([np.inf]), np.float32([1.0]), "HiFi4", op="eltwise")
    assert pairs[0][0][0] == np.inf and all(np.isfinite(p).all() for pair in pairs[1:] for p in pair)
    merged = cm.merged_operands(np.float32([np.inf]), np.float32([1.0]), "HiFi3")
    assert merged[0][0][0] == np.inf and np.isfinite(merged[1][0]).all() and np.isfinite(merged[1][1]).all()


# ------------------------------------------------------------------------------------------------------- SFPU


def bf16_grid(lo: float, hi: float) -> np.ndarray:
    """Every finite BF16 value in [lo, hi]."""
    v = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    return np.sort(v[np.isfinite(v) & (v >= lo) & (v <= hi)])


def f64(op: str, x: np.ndarray) -> np.ndarray:
    """float64 references, in forms without cancellation for large negative inputs."""
    x = x.astype(np.float64)
    t = torch.from_numpy(x)
    erfc = np.vectorize(math.erfc)
    return {
        "exp": lambda: np.exp(x),
        "log": lambda: np.log(x),
        "sqrt": lambda: np.sqrt(x),
        "rsqrt": lambda: torch.rsqrt(t).numpy(),
        "reciprocal": lambda: torch.reciprocal(t).numpy(),
        "sigmoid": lambda: 1.0 / (1.0 + np.exp(-x)),
        "tanh": lambda: np.tanh(x),
        "gelu": lambda: 0.5 * x * erfc(-x / math.sqrt(2.0)),
        "gelu_tanh": lambda: x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
        "silu": lambda: x / (1.0 + np.exp(-x)),
        "sin": lambda: np.sin(x),
        "cos": lambda: np.cos(x),
        "erf": lambda: np.vectorize(math.erf)(x),
    }[op]()


# domains where the float64 result is a normal FP32 number
DOMAINS = {
    "exp": (-87.0, 88.0),
    "log": (1e-30, 1e30),
    "sqrt": (1e-30, 1e30),
    "rsqrt": (1e-30, 1e30),
    "reciprocal": (2.0**-125, 2.0**125),
    "sigmoid": (-80.0, 80.0),
    "tanh": (-10.0, 10.0),
    "gelu": (-8.0, 8.0),
    "gelu_tanh": (-8.0, 8.0),
    "silu": (-80.0, 80.0),
    "sin": (-100.0, 100.0),
    "cos": (-100.0, 100.0),
    "erf": (-4.0, 4.0),
}


def test_sfpu_covers_the_ops():
    assert set(cm.SFPU_OPS) == set(DOMAINS)
    with pytest.raises(KohakuTTUnsupportedOperator, match="sfpu"):
        cm.sfpu("cbrt", np.float32([1.0]))


@pytest.mark.parametrize("op", sorted(DOMAINS))
def test_sfpu_exact_is_correctly_rounded_fp32(op):
    x = bf16_grid(*DOMAINS[op])
    x = np.concatenate([x, -x]) if op in ("reciprocal",) else x
    ref = f64(op, x)
    keep = np.abs(ref) >= 2.0**-126  # a normal FP32 result: relative bounds hold
    y = cm.sfpu(op, x).astype(np.float64)
    assert np.all(np.abs(y - ref)[keep] <= (FP32_EPS + 1e-15) * np.abs(ref[keep]))
    stored = cm.round_to(cm.sfpu(op, x)).astype(np.float64)  # within half a BF16 ulp once stored
    assert np.all(np.abs(stored - ref)[keep] <= (BF16_EPS + FP32_EPS) * np.abs(ref[keep]))


def test_sfpu_exact_special_values():
    y = cm.sfpu
    assert np.isnan(y("log", np.float32([-1.0])))[0] and y("log", np.float32([0.0]))[0] == -np.inf
    assert np.isnan(y("sqrt", np.float32([-1.0])))[0] and y("rsqrt", np.float32([0.0]))[0] == np.inf
    assert y("reciprocal", np.float32([-0.0]))[0] == -np.inf and y("exp", np.float32([100.0]))[0] == np.inf


# (op, domain, relative error?, documented bound, least difference from exact)
APPROX = [
    ("exp", (-87.0, 88.0), True, 0.032, 0.01),
    ("reciprocal", (2.0**-125, 2.0**125), True, 0.0056, 0.001),
    ("gelu", (-8.0, 8.0), False, 0.024, 0.01),
    ("gelu_tanh", (-8.0, 8.0), False, 0.024, 0.01),
    ("sigmoid", (-80.0, 80.0), False, 0.018, 0.01),
]


@pytest.mark.parametrize(("op", "domain", "relative", "bound", "apart"), APPROX)
def test_sfpu_approx_within_documented_bound(op, domain, relative, bound, apart):
    x = bf16_grid(*domain)
    ref = f64(op, x)
    approx, exact = cm.sfpu(op, x, approx=True).astype(float), cm.sfpu(op, x).astype(float)
    scale = np.abs(ref) if relative else 1.0
    # measured: exp 3.11e-2 rel, reciprocal 5.58e-3 rel, gelu 2.34e-2 abs, sigmoid 1.77e-2 abs
    assert np.max(np.abs(approx - ref) / scale) <= bound
    assert np.max(np.abs(approx - exact) / scale) >= apart, "approx mode must differ measurably from exact mode"


def test_sfpu_approx_bit_patterns():
    # exp(0): round(32500.818359375) = 32501, shifted left 15 -> 0x3F7A8000
    assert cm.sfpu("exp", np.float32([0.0]), approx=True).view(np.uint32)[0] == 0x3F7A8000
    assert cm.sfpu("exp", np.float32([-1000.0]), approx=True)[0] < 1e-37  # clamped at -88.5
    assert np.isnan(cm.sfpu("exp", np.float32([89.0]), approx=True)[0])  # exponent field 255 with a mantissa
    # SFPARECIP: 1.0 -> 0.99609375 (ISA documentation); 0 -> Inf; Inf -> 0; the sign is kept
    np.testing.assert_array_equal(
        cm.sfpu("reciprocal", np.float32([1.0, -2.0, 0.0, np.inf]), approx=True),
        np.float32([0.99609375, -0.498046875, np.inf, 0.0]),
    )
    sig0 = cm.sfpu("sigmoid", np.float32([0.0, 10.0, -10.0]), approx=True)
    b0, b5 = (1 + 24 / 1024) * 2.0**-11, (1 + 1023 / 1024) * 2.0**-2  # LUT offsets 0x9018 (negative), 0x37FF
    np.testing.assert_allclose(sig0, [0.5 + b0, 0.5 + b5, 0.5 - b5], rtol=1e-7)
    assert cm.sfpu("gelu", np.float32([3.5, -3.5]), approx=True).tolist() == [3.5, 0.0]  # relu past 3


@pytest.mark.parametrize("fp32_acc", [True, False])
def test_the_cores_slice_widths_and_folded_phases_are_its_phase_products(fp32_acc):
    """The widths and the folding the vectorized models use come from the C core: a mask of ``slice_bits`` is the
    core's whole / high slice, and each fidelity's folded products sum to the core's per-phase products (exactly:
    every partial product and sum is exact in float64)."""
    from kohakutt.hal import cardcore as cc

    g = np.random.default_rng(11)
    a, b = ((g.standard_normal(4096) * 2.0 ** g.integers(-20, 20, 4096)).astype(np.float32) for _ in range(2))
    for operand in (cc.SRCA, cc.SRCB):
        for part, phase in ((cc.ALL, cc.PHASE_ALL), (cc.HIGH, 0)):
            masked = (a.view(np.int32) & np.int32(cc.slice_mask(operand, part, fp32_acc))).view(np.float32)
            np.testing.assert_array_equal(masked, cc.fidelity_slice(a, operand, phase, fp32_acc))
    for fid in Fidelity:
        phases = sum(cc.fidelity_slice(a, cc.SRCA, p, fp32_acc).astype(np.float64)
                     * cc.fidelity_slice(b, cc.SRCB, p, fp32_acc) for p in range(fid.phases))  # fmt: skip
        folded = sum(cc.part_slice(a, cc.SRCA, pa, fp32_acc, i == 0).astype(np.float64)
                     * cc.part_slice(b, cc.SRCB, pb, fp32_acc, i == 0)
                     for i, (pa, pb) in enumerate(cc.FOLDED_PHASES[fid.phases]))  # fmt: skip
        np.testing.assert_array_equal(folded, phases, err_msg=fid.name)
