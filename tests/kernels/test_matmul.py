"""The matmul family on the simulator against float64 NumPy references computed from the same stored inputs.

Tolerances: an fp32 sum of K exact products is within K * 2^-24 * sum|a||b| of the float64 sum (the standard
worst-case bound); a bf16 output adds one rounding, 2^-8 relative (8 significant bits); a bf16 DST adds one such
rounding of the accumulated value per K block. Fidelity references mask the operands by hand from the card's
documented multiplier widths (notes/blackhole.md: SrcB keeps the implicit 1 and 6 mantissa bits in phases 0-1, SrcA
1 + 4 bits in even phases).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fake_ttnn import FakeTTNN, names_used, run_ttnn

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, KohakuTTUnsupportedOperator
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics, numerics
from kohakutt.ir.ops import ShapeError, TensorSpec
from kohakutt.kernels import cardmath
from kohakutt.kernels import matmul as mm_kernels
from kohakutt.kernels.cost import matmul_ns

EPS32 = 2.0**-24
BF16_REL = 2.0**-8
RNG = np.random.default_rng(1234)


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def bf16(*shape: int, scale: float = 1.0) -> np.ndarray:
    return round_bfloat16((RNG.standard_normal(shape) * scale).astype(np.float32))


def put(dev, x, dtype="bfloat16", layout="row_major"):
    return kk.from_numpy(dev, x, dtype, layout)


def run(op, inputs, attrs=None, **num):
    with numerics(**num):
        outs = kk.run(op, inputs, attrs)
    return [kk.to_numpy(o) for o in outs]


def keep_bits(x: np.ndarray, mask: int) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(mask)).view(np.float32).astype(np.float64)


def srcb_hi(a):  # in0 in SrcB, phases 0-1: sign, exponent, implicit 1 + 6 mantissa bits
    return keep_bits(a, 0xFFFE0000)


def srca_hi(b):  # in1 in SrcA, even phases: implicit 1 + 4 mantissa bits
    return keep_bits(b, 0xFFF80000)


def fp32_bound(a, b):
    """Worst-case fp32 summation error of a @ b (float64 magnitudes), plus one fp32 output rounding."""
    k = a.shape[-1]
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return k * EPS32 * mag + EPS32 * mag + 1e-30


# ----------------------------------------------------------------------------------------------- products
def test_hifi4_fp32_dst_is_the_exact_product_sum(dev):
    a, b = bf16(37, 70), bf16(70, 45)  # bf16 values in float32 tensors: output float32, default HiFi4 + fp32 DST
    (got,) = run("matmul", [put(dev, a, "float32"), put(dev, b, "float32")])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert got.dtype == np.float32 and got.shape == (37, 45)
    assert np.all(np.abs(got - ref) <= fp32_bound(a, b))


@pytest.mark.parametrize("fidelity", ["LoFi", "HiFi2", "HiFi3"])
def test_low_fidelity_products_match_hand_masked_operands(dev, fidelity):
    a, b = bf16(33, 65), bf16(65, 40)
    (got,) = run(
        "matmul", [put(dev, a, "float32"), put(dev, b, "float32")], fidelity=fidelity, fp32_acc=True, fp32_matmul="high"
    )  # one pass at the fidelity (a split matmul runs its parts at HiFi4)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if fidelity == "LoFi":
        ref = srcb_hi(a) @ srca_hi(b)
    elif fidelity == "HiFi2":
        ref = srcb_hi(a) @ b64
    else:  # HiFi3 adds phase 2: SrcB's low bits times SrcA's top bits
        ref = srcb_hi(a) @ b64 + (a64 - srcb_hi(a)) @ srca_hi(b)
    assert np.all(np.abs(got - ref) <= fp32_bound(a, b))
    assert np.abs(got - a64 @ b64).max() > 1e-3  # the fidelity visibly cuts bits


def test_error_shrinks_with_fidelity(dev):
    a, b = bf16(64, 256), bf16(256, 64)
    ta, tb = put(dev, a), put(dev, b)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    errs = [np.abs(run("matmul", [ta, tb], fidelity=f, fp32_acc=True)[0] - ref).mean() for f in Fidelity]
    assert errs[0] > 2 * errs[1] > 0 and errs[1] > errs[3]
    assert errs[3] <= BF16_REL * np.abs(ref).mean()  # HiFi4 bf16: only the output rounding is left


def test_merged_products_equal_the_phase_products():
    a, b = bf16(8, 40) * np.float32(1.0009765625), bf16(40, 6)  # a has bits below bf16: TF32 matters
    for fid in Fidelity:
        phases = cardmath.fidelity_operands(a, b, fid.name, op="matmul", fp32_acc=True)
        ref = sum(x.astype(np.float64) @ y.astype(np.float64) for x, y in phases)
        got = sum(x.astype(np.float64) @ y.astype(np.float64) for x, y in mm_kernels.merged_products(a, b, fid, True))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_bf16_dst_rounds_per_k_block(dev):
    k = 4 * mm_kernels.K_BLOCK
    a, b = bf16(16, k), bf16(k, 24)
    ta, tb = put(dev, a), put(dev, b)
    (fp32,) = run("matmul", [ta, tb], fidelity="HiFi4", fp32_acc=True)
    (bf,) = run("matmul", [ta, tb], fidelity="HiFi4", fp32_acc=False)
    # reference: each block's exact sum added to a bf16-rounded accumulator
    acc = np.zeros((16, 24))
    for k0 in range(0, k, mm_kernels.K_BLOCK):
        acc = round_bfloat16(
            (
                acc
                + a[:, k0 : k0 + mm_kernels.K_BLOCK].astype(np.float64)
                @ b[k0 : k0 + mm_kernels.K_BLOCK].astype(np.float64)
            ).astype(np.float32)
        )
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(acc), 1e-30))) - 7)
    assert np.mean(bf == acc) > 0.9 and np.all(np.abs(bf - acc) <= 2 * ulp)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(bf - ref).mean() > np.abs(fp32 - ref).mean()  # more roundings, more error


# ----------------------------------------------------------------------------------------------- shapes
@pytest.mark.parametrize(
    "sa, sb",
    [
        ((2, 1, 5, 7), (3, 7, 4)),
        ((7,), (7, 3)),
        ((4, 7), (7,)),
        ((7,), (7,)),
        ((3, 7), (2, 7, 5)),
        ((1, 33, 65), (65, 31)),
    ],
)
def test_matmul_shapes_follow_pytorch(dev, sa, sb):
    a, b = bf16(*sa), bf16(*sb)
    (got,) = run("matmul", [put(dev, a, "float32"), put(dev, b, "float32")])
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_empty_dims(dev):
    (z,) = run("matmul", [put(dev, np.zeros((3, 0), np.float32)), put(dev, np.zeros((0, 4), np.float32))])
    assert z.shape == (3, 4) and not z.any()
    (e,) = run("matmul", [put(dev, np.zeros((0, 5), np.float32)), put(dev, bf16(5, 4))])
    assert e.shape == (0, 4)


def test_bmm_and_bf16_default_numerics(dev):
    a, b = bf16(3, 9, 40), bf16(3, 40, 11)
    ta, tb = put(dev, a), put(dev, b)
    (got,) = run("bmm", [ta, tb])
    (explicit,) = run("bmm", [ta, tb], fidelity="HiFi2", fp32_acc=False)  # TT-NN's bf16 default
    np.testing.assert_array_equal(got, explicit)
    ref = srcb_hi(a) @ b.astype(np.float64)
    assert np.all(np.abs(got - ref) <= BF16_REL * np.abs(ref) + fp32_bound(a, b))


def test_fp32_matmul_modes(dev):
    """fp32_matmul: "highest" (the default) is float32-accurate, "high" one pass on TF32 operands (about 1e-3
    relative), "medium" one HiFi2 pass (in0 keeps 7 significant bits); bf16 operands are the same in every mode."""
    a = RNG.standard_normal((20, 50)).astype(np.float32)
    b = RNG.standard_normal((50, 30)).astype(np.float32)
    ta, tb = put(dev, a, "float32"), put(dev, b, "float32")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    rel = {}
    for mode in ("highest", "high", "medium", None):
        (got,) = run("matmul", [ta, tb], fp32_matmul=mode)
        rel[mode] = np.abs(got - ref).max() / np.abs(ref).max()
    assert rel[None] == rel["highest"] and np.all(np.abs(got - ref) <= fp32_bound(a, b))
    assert rel["highest"] < 1e-6 < rel["high"] < 2e-3 < rel["medium"] < 2e-2
    (tf32_default,) = run("matmul", [ta, tb], fp32_matmul="high", fidelity="HiFi4")
    (medium_hifi4,) = run("matmul", [ta, tb], fp32_matmul="medium", fidelity="HiFi4")  # a scope fidelity wins
    np.testing.assert_array_equal(tf32_default, medium_hifi4)
    tx, ty = put(dev, bf16(20, 50)), put(dev, bf16(50, 30))
    outs = [run("matmul", [tx, ty], fp32_matmul=m)[0] for m in ("highest", "high", "medium")]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_split_matmul_sums_exact_part_products(dev):
    """The split: a = a0 + a1 + a2 in bf16-exact parts (so every HiFi4 part product is exact); the six leading
    products summed in fp32 are within the fp32 bound of the float64 product, for values spread over many binades,
    batched, and with one float32 operand against a bfloat16 one."""
    a = (RNG.standard_normal((3, 17, 70)) * np.exp2(RNG.integers(-20, 20, (3, 17, 70)))).astype(np.float32)
    b = (RNG.standard_normal((70, 33)) * np.exp2(RNG.integers(-20, 20, (70, 33)))).astype(np.float32)
    x0, _, x1, x2 = cardmath.split_bf16(a)
    assert np.array_equal(x0.astype(np.float64) + x1 + x2, a.astype(np.float64))
    for part in (x0, x1, x2):
        np.testing.assert_array_equal(round_bfloat16(part), part)
    (got,) = run("matmul", [put(dev, a, "float32"), put(dev, b, "float32")])
    ref = a.astype(np.float64) @ b.astype(np.float64)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.all(np.abs(got - ref) <= (70 + 6) * EPS32 * mag + 1e-30)
    hb = bf16(70, 33)
    (mixed,) = run("matmul", [put(dev, a, "float32"), put(dev, hb)])
    ref = a.astype(np.float64) @ hb.astype(np.float64)
    mag = np.abs(a.astype(np.float64)) @ np.abs(hb.astype(np.float64))
    assert mixed.dtype == np.float32 and np.all(np.abs(mixed - ref) <= (70 + 3) * EPS32 * mag + 1e-30)


def test_split_cost_is_six_passes(dev):
    """The estimate charges a split matmul its passes: six HiFi4 products of the parts (plus the split's element-wise
    ops and the adds), so for a compute-bound shape it costs more than six one-pass matmuls at HiFi4."""
    n = 4096  # compute-bound at HiFi4 in the cost model
    a, b = TensorSpec((n, n), DType.FLOAT32), TensorSpec((n, n), DType.FLOAT32)
    out = [TensorSpec((n, n), DType.FLOAT32)]
    est = {m: mm_kernels.estimate_matmul([a, b], out, {}, Numerics(fp32_matmul=m), hal.P150A)
           for m in ("highest", "high", "medium")}  # fmt: skip
    one_pass = matmul_ns(1, n, n, n, Fidelity.HiFi4, hal.P150A)  # launch + the matrix engine's time, no traffic
    assert est["high"] == one_pass and est["highest"] > 6 * (one_pass - 2000)
    assert est["medium"] < est["high"] < est["highest"]


def test_block_float_weights(dev):
    a, w = bf16(40, 64), RNG.standard_normal((64, 48)).astype(np.float32)
    tw8, tw4 = put(dev, w, "bfloat8_b", "tile"), put(dev, w, "bfloat4_b", "tile")
    w8 = kk.to_numpy(tw8)
    (got,) = run("matmul", [put(dev, a), tw8])  # mixed bf16 x bfp8: HiFi2
    ref = srcb_hi(a) @ w8.astype(np.float64)
    assert got.dtype == np.float32 and np.all(np.abs(got - ref) <= BF16_REL * np.abs(ref) + fp32_bound(a, w8))
    a8 = put(dev, a, "bfloat8_b", "tile")
    (both,) = run("matmul", [a8, tw4])  # both block floats: TT-NN's LoFi default
    (lofi,) = run("matmul", [a8, tw4], fidelity="LoFi")
    np.testing.assert_array_equal(both, lofi)
    assert kk.run("matmul", [a8, tw4])[0].dtype is DType.BFLOAT16


def test_nan_and_inf_propagate(dev):
    a, b = bf16(4, 8), bf16(8, 3)
    a[1, 2], a[2, 5] = np.nan, np.inf
    (got,) = run("matmul", [put(dev, a), put(dev, b)])
    assert np.isnan(got[1]).all() and not np.isfinite(got[2]).any() and np.isfinite(got[[0, 3]]).all()


# ------------------------------------------------------------------------------------ linear, addmm, outer
@pytest.mark.parametrize("transpose_w", [True, False])
def test_linear_with_bias(dev, transpose_w):
    x, w, bias = bf16(2, 5, 24), bf16(12, 24), bf16(12)
    wt = w if transpose_w else np.ascontiguousarray(w.T)
    (got,) = run("linear", [put(dev, x), put(dev, wt), put(dev, bias)], {"transpose_w": transpose_w})
    mmr = srcb_hi(x) @ w.T.astype(np.float64)
    ref = round_bfloat16(mmr.astype(np.float32)).astype(np.float64) + bias  # the bf16 DST result, then the add
    assert got.shape == (2, 5, 12)
    assert np.all(np.abs(got - ref) <= BF16_REL * np.abs(ref) + BF16_REL * np.abs(mmr) + 1e-6)
    (nob,) = run("linear", [put(dev, x), put(dev, wt)], {"transpose_w": transpose_w})
    assert np.all(np.abs(nob - mmr) <= BF16_REL * np.abs(mmr) + fp32_bound(x, w.T))


def test_addmm_and_baddbmm_scale_like_ttnn(dev):
    m1, m2, inp = bf16(6, 20), bf16(20, 7), bf16(7)
    (got,) = run("addmm", [put(dev, inp), put(dev, m1), put(dev, m2)], {"alpha": 0.5, "beta": 2.0})
    prod = round_bfloat16((srcb_hi(m1) @ m2.astype(np.float64)).astype(np.float32))
    ref = prod * 0.5 + 2.0 * inp  # alpha, beta exact in bf16; every step stored in bf16
    assert np.all(np.abs(got - ref) <= 2 * BF16_REL * (np.abs(prod) + np.abs(2 * inp)) + 1e-6)
    nan_in = np.full(7, np.nan, np.float32)
    (ignored,) = run("addmm", [put(dev, nan_in), put(dev, m1), put(dev, m2)], {"beta": 0.0})
    assert np.isfinite(ignored).all()
    b1, b2, bi = bf16(2, 3, 8), bf16(2, 8, 4), bf16(2, 3, 4)
    (bb,) = run("baddbmm", [put(dev, bi, "float32"), put(dev, b1, "float32"), put(dev, b2, "float32")], {"alpha": -1.0})
    np.testing.assert_allclose(bb, bi - b1.astype(np.float64) @ b2, rtol=1e-5, atol=1e-5)


def test_outer(dev):
    a, b = bf16(3, 5), bf16(4)
    (got,) = run("outer", [put(dev, a), put(dev, b)])
    assert got.shape == (3, 5, 4)
    np.testing.assert_array_equal(got, round_bfloat16((a[..., :, None] * b[None, :]).astype(np.float32)))


# --------------------------------------------------------------------------------------------------- errors
def test_bad_shapes_and_dtypes_raise_typed_errors(dev):
    a, b = put(dev, bf16(3, 4)), put(dev, bf16(5, 6))
    with pytest.raises(ShapeError, match="a has 4 columns, b has 5 rows"):
        kk.run("matmul", [a, b])
    with pytest.raises(KohakuTTUnsupportedOperator, match="typecast"):
        kk.run("matmul", [put(dev, np.ones((3, 4), np.int32), "int32"), put(dev, bf16(4, 2))])
    with pytest.raises(ShapeError, match="bmm takes two 3-D"):
        kk.run("bmm", [a, put(dev, bf16(4, 2))])
    with pytest.raises(ShapeError, match="takes 6"):
        kk.run("linear", [a, b])
    with pytest.raises(ShapeError, match="does not broadcast"):
        kk.run("addmm", [put(dev, bf16(5)), a, put(dev, bf16(4, 2))])
    with pytest.raises(ShapeError, match="at least one dim"):
        kk.run("matmul", [put(dev, np.float32(2.0)), a])
    (ok,) = run("matmul", [a, put(dev, bf16(4, 2))])  # the device stays usable
    assert ok.shape == (3, 2)


def test_failure_in_a_kernel_is_reported_and_the_device_recovers(dev, monkeypatch):
    impl = kk.lookup("matmul", "sim")
    monkeypatch.setattr(impl, "fn", lambda call: 1 / 0)
    kk.run("matmul", [put(dev, bf16(2, 2)), put(dev, bf16(2, 2))])
    with pytest.raises(CommandError, match="matmul"):
        dev.synchronize()
    monkeypatch.undo()
    assert run("matmul", [put(dev, np.eye(2, dtype=np.float32)), put(dev, np.eye(2, dtype=np.float32))])[0][0, 0] == 1


# ----------------------------------------------------------------------------------------- cost and TT-NN
def test_estimate_scales_with_fidelity_and_size(dev):
    impl = kk.lookup("matmul", "sim")
    specs = [TensorSpec((2048, 2048), DType.BFLOAT16)] * 2
    out = irops.infer("matmul", specs)
    est = [impl.estimate(specs, out, {}, Numerics(f, False, False), dev.card) for f in Fidelity]
    assert est == sorted(est) and est[3] > 1.5 * est[0]  # LoFi is DRAM-bound here, HiFi4 compute-bound
    assert est[2] == pytest.approx(matmul_ns(1, 2048, 2048, 2048, Fidelity.HiFi3, dev.card))  # compute-bound
    small = impl.estimate(
        [TensorSpec((32, 32), DType.BFLOAT16)] * 2, [TensorSpec((32, 32), DType.BFLOAT16)], {}, Numerics(), dev.card
    )
    assert small < est[0]


def check_ttnn_names(family_module, calls):
    """Run each TT-NN implementation through ``card_call`` on the suite's fake TT-NN (tests/ttnn/fake_ttnn.py);
    every ttnn name the family's own code reads must be declared in its TTNN_NAMES. Returns the names read."""
    fake = FakeTTNN()
    for op, shapes, attrs in calls:
        run_ttnn(fake, op, shapes, attrs)
    log = names_used(fake, Path(family_module.__file__).name)
    undeclared = sorted(log - set(family_module.TTNN_NAMES))
    assert not undeclared, f"TT-NN names used but not in TTNN_NAMES: {undeclared}"
    return log


def test_ttnn_calls_use_only_declared_names():
    log = check_ttnn_names(
        mm_kernels,
        [
            ("matmul", [(4, 8), (8, 2)], {}),
            ("bmm", [(2, 4, 8), (2, 8, 2)], {}),
            ("linear", [(4, 8), (2, 8), (2,)], {}),
            ("addmm", [(2,), (4, 8), (8, 2)], {"alpha": 2.0}),  # a broadcast bias: matmul, then add
            ("addmm", [(4, 2), (4, 8), (8, 2)], {"alpha": 2.0}),
            ("baddbmm", [(2, 4, 2), (2, 4, 8), (2, 8, 2)], {"alpha": 2.0, "beta": 3.0}),
            ("outer", [(4,), (3,)], {}),
        ],
    )
    assert {"matmul", "linear", "addmm", "multiply", "init_device_compute_kernel_config"} <= log
