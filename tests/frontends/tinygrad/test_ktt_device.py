"""The tinygrad device "KTT": registration, memory, kernels on the tile path, dtypes and the host fallback.

References are independent: NumPy float64 on the same (already stored) inputs. Tolerances follow the card's
arithmetic as the op library models it: float32 FPU operands are cut to TF32 (10 explicit mantissa bits, so one
product or reduced term is off by up to 2^-10 relative), bfloat16 keeps 8 bits (2^-8), a K-term sum adds about
sqrt(K) such errors; data movement (views, gathers, pads, copies) and int32 arithmetic are exact.
"""

from __future__ import annotations

import pathlib
import shutil
import warnings

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad")

from tinygrad import Context, Device, Tensor, Variable, dtypes  # noqa: E402

import kohakutt.tinygrad as ktg  # noqa: E402
from kohakutt import hal  # noqa: E402
from kohakutt.errors import ConfigError, DtypeError  # noqa: E402
from kohakutt.frontends.tinygrad import counters  # noqa: E402

TF32 = 2.0**-10
BF16 = 2.0**-8


@pytest.fixture(autouse=True)
def no_workers():
    with Context(PARALLEL=0):
        yield


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def ktt(a: np.ndarray, dtype=None) -> Tensor:
    return Tensor(a, device="KTT", dtype=dtype)


def close(got: np.ndarray, ref: np.ndarray, rel: float, scale: float | None = None) -> None:
    """|got - ref| <= rel * scale, scale = max |ref| unless given (a relative bound on the operation's magnitude)."""
    ref = np.asarray(ref, dtype=np.float64)
    scale = float(np.abs(ref).max(initial=1.0)) if scale is None else scale
    err = float(np.abs(np.asarray(got, dtype=np.float64) - ref).max(initial=0.0))
    assert err <= rel * scale, f"max error {err:.3g} > {rel * scale:.3g}"


# ------------------------------------------------------------------------------------------------ the device
def test_registered_without_touching_tinygrad_on_disk():
    runtime_dir = pathlib.Path(tinygrad.__file__).parent / "runtime"
    assert not (runtime_dir / "ops_ktt.py").exists()
    dev = Device["KTT"]
    assert type(dev).__name__ == "KTTDevice"
    shared = hal.open_device(0)
    try:
        assert dev.hal is shared  # the one open chip, shared with every frontend
    finally:
        shared.close()
    assert Device.canonicalize("ktt") == "KTT"


def test_copies_round_trip_exactly():
    a = rng().standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(ktt(a).numpy(), a)
    i = np.arange(-7, 8, dtype=np.int32)
    np.testing.assert_array_equal(ktt(i).numpy(), i)
    np.testing.assert_array_equal(Tensor(a, device="PYTHON").to("KTT").to("PYTHON").numpy(), a)
    assert ktt(np.array(2.5, np.float32)).item() == 2.5
    assert Tensor([[2.5]], device="KTT").sum().item() == 2.5
    assert ktt(np.zeros((0, 3), np.float32)).numpy().shape == (0, 3)
    b = Tensor(a, dtype=dtypes.bfloat16, device="PYTHON").to("KTT")  # tinygrad's own bf16 bytes, stored as they are
    np.testing.assert_array_equal(b.numpy(), Tensor(a, dtype=dtypes.bfloat16, device="PYTHON").numpy())
    close(b.numpy().astype(np.float32), a, BF16)


def test_allocations_go_through_the_shared_hal_device():
    dev = Device["KTT"].hal
    before = dev.memory_stats()["num_allocs"]
    t = ktt(np.ones((64, 64), np.float32)).realize()
    stats = dev.memory_stats()
    assert stats["num_allocs"] > before
    assert stats["allocated_bytes"] >= 64 * 64 * 4
    del t


def test_buffer_views_for_the_memory_planner():
    from tinygrad.device import Buffer

    base = Buffer("KTT", 128, dtypes.float32).allocate()
    base.copy_from(Buffer("PYTHON", 128, dtypes.float32, initial_value=np.arange(128, dtype=np.float32).tobytes()))
    view = base.view(8, dtypes.float32, 256)  # the planner's 256-byte blocks
    np.testing.assert_array_equal(view.ensure_allocated().numpy(), np.arange(64, 72, dtype=np.float32))


# --------------------------------------------------------------------------------------------- tile kernels
def test_elementwise_with_broadcasting_matches_numpy():
    g = rng(1)
    a, b = g.standard_normal((3, 5)).astype(np.float32), g.standard_normal((1, 5)).astype(np.float32)
    ta, tb = ktt(a), ktt(b)
    close(((ta + tb) * 2 - tb).numpy(), (a + b) * 2 - b, 4 * TF32)
    close((ta * tb).numpy(), a.astype(np.float64) * b, 2 * TF32)
    close((ta / (tb.abs() + 1)).numpy(), a / (np.abs(b) + 1.0), 4 * TF32)
    close(ta.relu().numpy(), np.maximum(a, 0), 0)
    close(ta.exp().numpy(), np.exp(a.astype(np.float64)), 8 * TF32)
    close((ta.abs() + 0.5).log().numpy(), np.log(np.abs(a) + 0.5), 8 * TF32, scale=1.0)
    close((ta.abs()).sqrt().numpy(), np.sqrt(np.abs(a)), 4 * TF32)
    np.testing.assert_array_equal((ta < tb).numpy(), a < b)
    np.testing.assert_array_equal((ta < 0).where(ta, 0).numpy(), np.where(a < 0, a, 0))


def test_int32_arithmetic_is_exact():
    before = counters.stats()["host_total"]
    x = np.array([7, -7, 9, 0, -1, 2**20], np.int32)
    t = ktt(x)
    np.testing.assert_array_equal((t // 2).numpy(), x // 2)
    np.testing.assert_array_equal((t % 4).numpy(), x % 4)
    np.testing.assert_array_equal((t * 3 + 1).numpy(), x * 3 + 1)
    np.testing.assert_array_equal(t.maximum(1).numpy(), np.maximum(x, 1))
    np.testing.assert_array_equal((t << 2).numpy(), x << 2)
    assert counters.stats()["host_total"] == before  # none of these needs the host


def test_matmul_runs_on_the_matrix_engine_with_its_epilogue():
    g = rng(2)
    a, b = g.standard_normal((5, 37)).astype(np.float32), g.standard_normal((37, 3)).astype(np.float32)
    bias = g.standard_normal(3).astype(np.float32)
    before = counters.stats()
    out = (ktt(a) @ ktt(b) + ktt(bias)).relu().numpy()
    after = counters.stats()
    assert after["matmuls"] == before["matmuls"] + 1
    assert after["host_total"] == before["host_total"]
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    close(out, ref, np.sqrt(37) * TF32 * 2, scale=float(np.abs(a).max() * np.abs(b).max() * np.sqrt(37)))
    # transposed and batched forms are matmuls too
    close((ktt(a).T @ ktt(a)).numpy(), a.T.astype(np.float64) @ a, 5 * TF32 * 2)
    x, y = g.standard_normal((2, 4, 6)).astype(np.float32), g.standard_normal((2, 6, 3)).astype(np.float32)
    close((ktt(x) @ ktt(y)).numpy(), x.astype(np.float64) @ y, 6 * TF32)
    assert counters.stats()["matmuls"] == before["matmuls"] + 3


def test_conv2d_is_an_implicit_matmul():
    g = rng(3)
    x, w = g.standard_normal((2, 3, 7, 6)).astype(np.float32), g.standard_normal((4, 3, 3, 3)).astype(np.float32)
    before = counters.stats()["matmuls"]
    out = ktt(x).conv2d(ktt(w), padding=1).numpy()
    assert counters.stats()["matmuls"] > before
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 4, 7, 6))
    for ky in range(3):
        for kx in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, ky : ky + 7, kx : kx + 6], w[:, :, ky, kx])
    close(out, ref, np.sqrt(27) * TF32 * 2, scale=float(np.abs(ref).max()))


def test_reductions_and_softmax_ignore_padding():
    g = rng(4)
    a = g.standard_normal((5, 33)).astype(np.float32)
    t = ktt(a)
    close(t.sum(axis=1).numpy(), a.astype(np.float64).sum(1), np.sqrt(33) * TF32, scale=float(np.abs(a).sum(1).max()))
    np.testing.assert_array_equal(t.max(axis=1).numpy(), a.max(1))  # max values are exact
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), a.argmax(1))
    np.testing.assert_array_equal(t.max().numpy(), a.max())
    sm = t.softmax(axis=1).numpy()
    ref = np.exp(a - a.max(1, keepdims=True))
    close(sm, ref / ref.sum(1, keepdims=True), 16 * TF32, scale=1.0)
    close(t.mean().numpy(), a.astype(np.float64).mean(), 8 * TF32, scale=float(np.abs(a).mean()))
    close(
        t.cumsum(axis=1).numpy(),
        np.cumsum(a.astype(np.float64), 1),
        np.sqrt(33) * TF32,
        scale=float(np.abs(a).sum(1).max()),
    )


def test_movement_is_exact():
    a = rng(5).standard_normal((4, 6)).astype(np.float32)
    t = ktt(a)
    np.testing.assert_array_equal(t.pad(((1, 0), (0, 2))).numpy(), np.pad(a, ((1, 0), (0, 2))))
    np.testing.assert_array_equal(t.cat(t * 1, dim=0).numpy()[:4], a)
    np.testing.assert_array_equal(t.flip(1).contiguous().numpy(), a[:, ::-1])
    np.testing.assert_array_equal(t.T.contiguous().numpy(), a.T)
    np.testing.assert_array_equal(t[1:3, ::2].contiguous().numpy(), a[1:3, ::2])
    idx = np.array([[0, 5], [2, 2], [1, 0], [3, 4]], np.int32)
    np.testing.assert_array_equal(t.gather(1, ktt(idx)).numpy(), np.take_along_axis(a, idx, 1))
    np.testing.assert_array_equal(t.reshape(6, 4).permute(1, 0).contiguous().numpy(), a.reshape(6, 4).T)


def test_bfloat16_kernels_run_on_the_card():
    a = rng(6).standard_normal((4, 8)).astype(np.float32)
    before = counters.stats()["host_total"]
    t = ktt(a, dtypes.bfloat16)
    out = (t * t + 1).numpy().astype(np.float32)
    stored = t.numpy().astype(np.float64)
    close(out, stored * stored + 1, 2 * BF16)
    assert counters.stats()["host_total"] == before


# ------------------------------------------------------------------------------------------- host fallback
def test_other_dtypes_run_on_the_host_counted_and_warned_once(monkeypatch):
    monkeypatch.setattr(counters, "_warned", set())
    before = counters.stats()["host_kernels"].get("dtype:half", 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = Tensor([1.0, 2.0, 3.0], dtype=dtypes.float16, device="KTT")
        np.testing.assert_array_equal((h * 2).numpy(), [2, 4, 6])
        np.testing.assert_array_equal((h + 1).numpy(), [2, 3, 4])
    ours = [w for w in caught if issubclass(w.category, ktg.HostFallbackWarning)]
    assert len(ours) == 1 and "half" in str(ours[0].message)
    assert counters.stats()["host_kernels"]["dtype:half"] == before + 2


@pytest.mark.parametrize(
    "dtype, kind", [(dtypes.int8, "dtype:char"), (dtypes.uint8, "dtype:uchar"), (dtypes.int64, "dtype:long")]
)
def test_other_integers_and_stored_bools_are_counted_by_dtype(dtype, kind):
    before = counters.stats()["host_kernels"]
    x = np.array([1, -2, 3], np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ktg.HostFallbackWarning)
        got = (Tensor(x, dtype=dtype, device="KTT") * 3).numpy()
        mask = (ktt(x.astype(np.float32)) < 0).numpy()  # a stored bool
    np.testing.assert_array_equal(got, (x * 3).astype(got.dtype))
    np.testing.assert_array_equal(mask, x < 0)
    after = counters.stats()["host_kernels"]
    assert after.get(kind, 0) > before.get(kind, 0)
    assert after.get("dtype:bool", 0) > before.get("dtype:bool", 0)


def test_int64_kernels_are_exact_past_int32():
    """tinygrad's int64 kernels run on the host (counted), so values past int32 come back exact, never wrapped."""
    x = np.array([2**40 + 3, -(2**35) - 1, 7, 2**62], np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ktg.HostFallbackWarning)
        t = Tensor(x, dtype=dtypes.int64, device="KTT")
        np.testing.assert_array_equal((t * 3 + 2**33).numpy(), x * 3 + 2**33)
        assert int(t.sum().item()) == int(x.sum())


@pytest.mark.parametrize("how", ["c", "python"])
def test_host_kernels_run_as_compiled_c_or_interpreted_and_agree(knobs, how):
    if how == "c" and shutil.which("clang") is None:
        pytest.skip("the compiled host path needs clang (make setup installs it)")
    knobs(KTT_TINYGRAD_HOST="cpu" if how == "c" else "python")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 7)).astype(np.float16)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    before = counters.stats()["host_runs"][how]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ktg.HostFallbackWarning)
        h = Tensor(a, device="KTT")
        got = (h * h + 1).numpy()  # a float16 kernel: tinygrad computes it wide and rounds the result once
        mask = (ktt(x) > 0.25).numpy()  # a stored bool
        n = Variable("n", 1, 4)  # a symbolic kernel: one program, its size bound per call
        rows = [(ktt(x)[: n.bind(k)] * 2).sum(axis=0).numpy() for k in (2, 3)]
    np.testing.assert_array_equal(got, (a.astype(np.float64) ** 2 + 1).astype(np.float16))
    np.testing.assert_array_equal(mask, x > 0.25)
    for k, r in zip((2, 3), rows):
        close(r, (x[:k].astype(np.float64) * 2).sum(axis=0), 1e-6, scale=float(np.abs(x[:k]).sum()))
    assert counters.stats()["host_runs"][how] >= before + 2


def test_dtype_policy_error_raises(knobs):
    knobs(KTT_TINYGRAD_DTYPES="error")
    with pytest.raises(DtypeError, match="KTT_TINYGRAD_DTYPES"):
        (Tensor([1.0, 2.0], dtype=dtypes.float64, device="KTT") + 1).realize()
    knobs(KTT_TINYGRAD_DTYPES="host")
    np.testing.assert_array_equal((ktt(np.array([1.0, 2.0], np.float32)) + 1).numpy(), [2, 3])  # still usable


def test_fp8_is_a_clear_error():
    with pytest.raises(DtypeError, match="fp8"):
        (Tensor([1.0, 2.0], dtype=dtypes.fp8e4m3, device="KTT") + 1).realize()


def test_compile_in_worker_processes():
    with Context(PARALLEL=2):
        a = rng(7).standard_normal((3, 4)).astype(np.float32)
        x, y = ktt(a), ktt(a + 1)
        p, q = (x * 3 + 0.25).exp2(), (y - x).sum(axis=0)
        Tensor.realize(p, q)
    close(p.numpy(), np.exp2(a.astype(np.float64) * 3 + 0.25), 16 * TF32)
    close(q.numpy(), np.ones(4) * 3, 4 * TF32)


def test_split_fp32_matmul_is_near_fp32():
    """ALLOW_TF32=0 (tinygrad's default): three bf16-exact parts per operand pass the unpacker unchanged, their
    products are exact at HiFi4, and the dropped cross terms are below 2^-24 of |a||b| each; with fp32 accumulation
    (about sqrt(K) * 2^-24) the error stays below 2^-20 of sum |a||b|, where one card matmul (ALLOW_TF32=1) is off by
    up to 2^-10. The numerics scope overrides ALLOW_TF32, by its old names too."""
    g = rng(8)
    a, b = g.uniform(-2, 2, (9, 65)).astype(np.float32), g.uniform(-2, 2, (65, 7)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    scale = np.abs(a).astype(np.float64) @ np.abs(b)

    def err() -> float:
        return float((np.abs((ktt(a) @ ktt(b)).numpy() - ref) / scale).max())

    before = counters.stats()["split_matmuls"]
    errs = {"default": err()}
    with Context(ALLOW_TF32=1):
        errs["tf32"] = err()
        with ktg.numerics(fp32_matmul="split"):
            errs["split in tf32"] = err()
    with ktg.numerics(fp32_matmul="card"):
        errs["card"] = err()
    with ktg.numerics(fp32_matmul="medium"):
        errs["medium"] = err()
    assert counters.stats()["split_matmuls"] == before + 2
    assert max(errs["default"], errs["split in tf32"]) < 2.0**-20 < 2.0**-13 < errs["card"] < 2 * TF32
    assert errs["card"] == errs["tf32"] < errs["medium"] < 2 * 2.0**-6  # HiFi2: in0 keeps 7 significant bits
    a[0, 3], a[1, 5] = np.inf, np.nan  # the split keeps Inf and NaN where NumPy has them
    with np.errstate(invalid="ignore"):
        got, ref = (ktt(a) @ ktt(b)).numpy(), a.astype(np.float64) @ b
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    close(got[2:], ref[2:], 2.0**-20, scale=float(scale.max()))
    with pytest.raises(ConfigError, match="fp32_matmul"), ktg.numerics(fp32_matmul="exact"):
        pass
