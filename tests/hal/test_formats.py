"""Host tile conversions (kohakutt.hal.formats, native/runtime/formats.c) against the independent NumPy model in
format_reference.py, bit for bit, plus the worked examples of notes/blackhole.md and the native build itself."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import format_reference as ref
import numpy as np
import pytest
from ttnn_env import MOCK_P150, NO_TTNN, find_ttnn_python, ttnn_env

from kohakutt.errors import FormatError, KohakuTTError
from kohakutt.hal import _native, formats
from kohakutt.hal.layout import Format, nbytes

FLOAT_FORMATS = ["float32", "bfloat16", "bfloat8_b", "bfloat4_b"]
BLOCK_FORMATS = ["bfloat8_b", "bfloat4_b"]
SHAPES = [(), (1,), (5,), (32,), (33,), (100,), (1, 1), (32, 32), (31, 33), (64, 96), (3, 40, 70), (2, 3, 17, 65)]
REPO = Path(__file__).resolve().parents[2]


def f32(*bits: int) -> np.ndarray:
    return np.array(bits, dtype=np.uint32).view(np.float32)


def bits(x: np.ndarray) -> np.ndarray:
    """Comparable form of float32 data: its bit patterns (NaN payloads and -0.0 included)."""
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.flatnonzero(bits(got).reshape(-1) != bits(want).reshape(-1))
    g, w = bits(got).reshape(-1), bits(want).reshape(-1)
    assert diff.size == 0, f"{diff.size} values differ, first at {diff[0]}: {g[diff[0]]:#010x} != {w[diff[0]]:#010x}"


def assert_same_bytes(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.uint8 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    diff = np.flatnonzero(got != want)
    assert diff.size == 0, f"{diff.size} bytes differ, first at {diff[0]}: {got[diff[0]]:#04x} != {want[diff[0]]:#04x}"


def wide_floats(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values scaled over a wide exponent range, so face rows mix magnitudes."""
    scale = np.exp2(rng.integers(-40, 40, size=shape)).astype(np.float32)
    return (rng.standard_normal(shape).astype(np.float32) * scale).astype(np.float32)


def random_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniformly random float32 bit patterns: NaNs, Infs, subnormals and zeros of both signs all turn up."""
    return rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.float32)


# Values the rules single out, as bit patterns.
SPECIALS = f32(
    0x00000000, 0x80000000,  # +-0
    0x00000001, 0x007FFFFF, 0x80000001, 0x807FFFFF,  # subnormals
    0x00800000, 0x80800000,  # smallest normals
    0x7F800000, 0xFF800000,  # +-Inf
    0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF,  # NaNs with high payload
    0x7F800001, 0xFF800001, 0x7F810000, 0x7F810001, 0x7F900000, 0x7F900001, 0x7F8FFFFF,  # low-payload NaNs, ties
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F000000, 0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7E8000,  # largest values, bf16 ties
    0x3F800000, 0x3FFFFFFF, 0x3FFFDF3B, 0x3FF00000, 0x3F810000, 0x3F830000, 0x3F808000, 0x3F818000,  # ties, rounding up
    0x00008000, 0x00018000, 0x3C000001, 0xBC000000,  # subnormal bf16 ties, 2^-7 (+ a bit)
)  # fmt: skip


def adversarial(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Each element a special value, a random normal, or a special scaled by a power of two."""
    picks = rng.choice(SPECIALS, size=shape)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (picks * np.exp2(rng.integers(-3, 4, size=shape))).astype(np.float32)
    mix = rng.integers(0, 3, size=shape)
    return np.where(mix == 0, picks, np.where(mix == 1, scaled, wide_floats(rng, shape))).astype(np.float32)


# ---- against the reference -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_pack_unpack_match_reference_on_random_values(shape: tuple[int, ...], fmt: str) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((shape, fmt)).encode()))
    x = wide_floats(rng, shape)
    packed = formats.pack(x, fmt)
    assert packed.size == nbytes(shape, fmt, "tile")
    assert_same_bytes(packed, ref.pack(x, fmt))
    back = formats.unpack(packed, shape, fmt)
    assert back.dtype == np.float32
    assert_same_bits(back, ref.unpack(packed, shape, fmt))
    assert_same_bits(formats.quantize(x, fmt), back)


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
@pytest.mark.parametrize("make", [random_bits, adversarial])
@pytest.mark.parametrize("shape", [(7,), (64, 64), (2, 45, 50)], ids=str)
def test_pack_unpack_match_reference_on_adversarial_values(shape, make, fmt: str) -> None:
    rng = np.random.default_rng(7)
    x = make(rng, shape)
    packed = formats.pack(x, fmt)
    assert_same_bytes(packed, ref.pack(x, fmt))
    assert_same_bits(formats.unpack(packed, shape, fmt), ref.unpack(packed, shape, fmt))


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_unpack_of_arbitrary_bytes_matches_reference(fmt: str) -> None:
    # Any exponent byte with any magnitude: tiny shared exponents (subnormal results), exponent 255 with small
    # magnitudes, negative zero codes. The packer never makes some of these; unpack must still be exact.
    rng = np.random.default_rng(3)
    shape = (3, 64, 32)
    raw = rng.integers(0, 256, size=nbytes(shape, fmt, "tile"), dtype=np.uint8)
    tile_bytes = Format(fmt).tile_bytes
    raw.reshape(-1, tile_bytes)[0, :64] = np.arange(64)  # exponents 0..63
    raw.reshape(-1, tile_bytes)[1, :64] = 255
    assert_same_bits(formats.unpack(raw, shape, fmt), ref.unpack(raw, shape, fmt))


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_unpack_ignores_flush_to_zero_mode(fmt: str) -> None:
    # Tiny shared exponents decode to subnormals; a caller that set flush-to-zero / denormals-are-zero (as
    # torch.set_flush_denormal(True) does) must still get them exactly.
    torch = pytest.importorskip("torch")
    shape = (32, 32)
    raw = np.random.default_rng(8).integers(0, 256, size=nbytes(shape, fmt, "tile"), dtype=np.uint8)
    raw[:64] = np.arange(64) % 10  # shared exponents 0..9
    want = ref.unpack(raw, shape, fmt)
    assert (np.abs(want[want != 0]) < 2.0**-126).any()
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode to switch on")
    try:
        got = formats.unpack(raw, shape, fmt)
    finally:
        torch.set_flush_denormal(False)
    assert_same_bits(got, want)


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
def test_large_input_split_over_threads_matches_reference(fmt: str) -> None:
    rng = np.random.default_rng(11)
    x = wide_floats(rng, (1000, 1100))  # over the C side's parallel threshold, edges not on tile boundaries
    x[::37, ::41] = np.inf
    packed = formats.pack(x, fmt)
    assert_same_bytes(packed, ref.pack(x, fmt))
    assert_same_bits(formats.unpack(packed, x.shape, fmt), ref.unpack(packed, x.shape, fmt))


@pytest.mark.parametrize("pad_value", [0.0, -1.5, 4.0, 1e30, float("inf"), float("nan")])
@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
def test_padding_is_filled_with_pad_value(fmt: str, pad_value: float) -> None:
    x = wide_floats(np.random.default_rng(5), (2, 20, 40))
    packed = formats.pack(x, fmt, pad_value=pad_value)
    assert_same_bytes(packed, ref.pack(x, fmt, pad_value))


# ---- tilize / untilize -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32, np.uint16])
@pytest.mark.parametrize("shape", [(), (40,), (31, 33), (2, 64, 96), (2, 1, 3, 5)], ids=str)
def test_tilize_untilize_match_reference(shape: tuple[int, ...], dtype) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, np.iinfo(np.uint16).max, size=shape).astype(dtype)
    t = formats.tilize(x, pad_value=7)
    assert t.dtype == np.dtype(dtype) and t.ndim == 1
    np.testing.assert_array_equal(t, ref.tile_order(x, 7))
    back = formats.untilize(t, shape)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, x)


def test_tile_order_is_faces_of_rows() -> None:
    x = np.arange(64 * 64, dtype=np.int32).reshape(64, 64)
    t = formats.tilize(x).reshape(4, 4, 16, 16)  # tiles, faces, rows, cols
    np.testing.assert_array_equal(t[0, 0], x[:16, :16])
    np.testing.assert_array_equal(t[0, 1], x[:16, 16:32])
    np.testing.assert_array_equal(t[0, 2], x[16:32, :16])
    np.testing.assert_array_equal(t[0, 3], x[16:32, 16:32])
    np.testing.assert_array_equal(t[1, 0], x[:16, 32:48])  # tiles row-major over the grid
    np.testing.assert_array_equal(t[2, 0], x[32:48, :16])


def test_one_dimensional_is_one_tile_row_with_data_in_row_zero() -> None:
    x = np.arange(1, 41, dtype=np.float32)
    t = formats.tilize(x, pad_value=-1).reshape(2, 4, 16, 16)
    np.testing.assert_array_equal(t[0, 0, 0], x[:16])
    np.testing.assert_array_equal(t[0, 1, 0], x[16:32])
    np.testing.assert_array_equal(t[1, 0, 0, :8], x[32:])
    assert (t[1, 0, 0, 8:] == -1).all() and (t[:, :, 1:] == -1).all() and (t[:, 2:] == -1).all()
    assert formats.pack(np.float32(3.0), "float32").view(np.float32)[0] == 3.0


def test_int_formats_pack_their_own_dtype() -> None:
    x = np.array([[-5, 2**31 - 1]], dtype=np.int32)
    packed = formats.pack(x, "int32", pad_value=-2)
    assert_same_bytes(packed, ref.pack(x, "int32", -2))
    back = formats.unpack(packed, x.shape, "int32")
    assert back.dtype == np.int32
    np.testing.assert_array_equal(back, x)
    u = np.array([2**32 - 1, 0], dtype=np.uint32)
    np.testing.assert_array_equal(formats.unpack(formats.pack(u, "uint32"), u.shape, "uint32"), u)
    np.testing.assert_array_equal(formats.unpack(formats.pack(np.int16([-3]), "int32"), (1,), "int32"), [-3])


# ---- bfloat16 --------------------------------------------------------------------------------------------------


def test_bfloat16_rules() -> None:
    x = f32(0x3F808000, 0x3F818000, 0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0x00000001, 0x00018000, 0x80000000,
            0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF800000)  # fmt: skip
    want = [0x3F80, 0x3F82, 0x7F7F, 0x7F80, 0x7F80, 0x0000, 0x0002, 0x8000, 0x7FC0, 0x7FC0, 0x7FC0, 0xFF80]
    np.testing.assert_array_equal(formats.to_bfloat16(x), np.array(want, dtype=np.uint16))
    assert bits(formats.round_bfloat16(f32(0x00010000)))[0] == 0x00010000  # subnormals kept
    assert bits(formats.quantize(np.float32(-0.0), "bfloat16"))[()] == 0x80000000  # -0.0 kept


def test_bfloat16_matches_reference_and_torch() -> None:
    torch = pytest.importorskip("torch")
    x = random_bits(np.random.default_rng(4), (1 << 16,))
    got = formats.to_bfloat16(x)
    np.testing.assert_array_equal(got, ref.bf16_bits(x))
    ok = ~np.isnan(x)  # torch keeps NaN payloads; TT-NN does not
    want = torch.from_numpy(x[ok]).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(got[ok], want)
    assert_same_bits(formats.from_bfloat16(got), ref.bf16_values(got))
    assert formats.to_bfloat16(np.zeros((2, 0, 3))).shape == (2, 0, 3)


# ---- the worked examples of notes/blackhole.md -------------------------------------------------------------------


def test_alignment_truncates_before_rounding() -> None:
    x = np.array([1.0, 2.0**-7 + 2.0**-30], dtype=np.float32)
    assert formats.quantize(x, "bfloat8_b")[1] == 0.0  # rounding without truncation would give 2^-6
    assert ref.quantize(x, "bfloat8_b")[1] == 0.0


@pytest.mark.parametrize(("fmt", "value", "want"), [("bfloat8_b", 1.999, 1.984375), ("bfloat4_b", 1.875, 1.75),
                                                    ("bfloat8_b", 3.4028235e38, 127 * 2.0**121),
                                                    ("bfloat4_b", 3.4028235e38, 7 * 2.0**125)])  # fmt: skip
def test_rounding_overflow_clamps(fmt: str, value: float, want: float) -> None:
    got = formats.quantize(np.array([value, -value], dtype=np.float32), fmt)
    np.testing.assert_array_equal(got, np.array([want, -want], dtype=np.float32))


def test_ties_go_to_even() -> None:
    x = np.array([1 + 2**-7, 1 + 3 * 2**-7, 1.0, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(formats.quantize(x, "bfloat8_b"), [1.0, 1 + 4 * 2**-7, 1.0, 1.0])
    x = np.array([1 + 2**-3, 1 + 3 * 2**-3, 2**-3, 1.0], dtype=np.float32)  # 2^-3: tie at the last bit, 0 even
    np.testing.assert_array_equal(formats.quantize(x, "bfloat4_b"), [1.0, 1.5, 0.0, 1.0])


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_zeros_subnormals_and_signs(fmt: str) -> None:
    x = f32(0x80000000, 0x00000001, 0x807FFFFF, 0x3F800000, 0xB0000000, 0xBF800000)
    got = formats.quantize(x, fmt)
    assert list(bits(got)) == [0, 0, 0, 0x3F800000, 0, 0xBF800000]  # -0, subnormals, tiny negatives -> +0
    packed = formats.pack(x, fmt)
    assert packed[0] == 127  # shared exponent of face row 0: 1.0's


@pytest.mark.parametrize("fmt", BLOCK_FORMATS)
def test_inf_or_nan_takes_over_its_face_row_only(fmt: str) -> None:
    x = np.ones((2, 32), dtype=np.float32) * 1.5
    x[0, :4] = f32(0x7F800000, 0x3F800000, 0xC0000000, 0x7149F2CA)  # Inf, 1.0, -2.0, 1e30
    x[0, 16] = np.float32(np.nan)
    got = formats.quantize(x, fmt)
    assert bits(got)[0, 0] == 0x7F800000
    assert (got[0, 1:16] == 0).all() and (bits(got[0, 1:16]) == 0).all()  # ordinary values of that row -> +0
    assert np.isnan(got[0, 16]) and (got[0, 17:] == 0).all()
    assert (got[1] == 1.5).all()  # other face rows unaffected
    packed = formats.pack(x, fmt)
    assert packed[0] == 255 and packed[16] == 255 and packed[1] == 127


def test_huge_values_survive_in_an_inf_row() -> None:
    # Resolution of "zeroes the row's ordinary values": the row is aligned to exponent 255 like any other row, so
    # values above 2^121 (bfloat8_b) / 2^125 (bfloat4_b) keep a coarse magnitude, as blockfloat_common.cpp does.
    x = np.array([np.inf, 2.0**127, 1.5 * 2.0**122, 2.0**121], dtype=np.float32)
    # 1.5 * 2^122 is aligned six places down to 0b11.0000..., rounds half-even to 2; 2^121 is an exact tie -> 0
    np.testing.assert_array_equal(formats.quantize(x, "bfloat8_b"), [np.inf, 2.0**127, 2.0**123, 0.0])
    np.testing.assert_array_equal(formats.quantize(x, "bfloat4_b"), [np.inf, 2.0**127, 0.0, 0.0])


@pytest.mark.parametrize(("fmt", "nan", "want"), [
    ("bfloat8_b", 0x7FC00000, 0x7FC00000), ("bfloat8_b", 0xFFC00000, 0xFFC00000),  # canonical NaNs survive
    ("bfloat8_b", 0x7F800001, 0x7F800000), ("bfloat8_b", 0xFF800001, 0xFF800000),  # low payload -> +-Inf
    ("bfloat8_b", 0x7F810000, 0x7F800000), ("bfloat8_b", 0x7F810001, 0x7F820000),  # the tie, just above it
    ("bfloat8_b", 0xFFFFFFFF, 0xFFFE0000),  # payload rounds up past the top: clamped
    ("bfloat4_b", 0x7F900000, 0x7F800000), ("bfloat4_b", 0xFF900001, 0xFFA00000),
    ("bfloat4_b", 0x7FC00000, 0x7FC00000), ("bfloat4_b", 0x7FFFFFFF, 0x7FE00000),
])  # fmt: skip
def test_nan_keeps_sign_but_low_payload_becomes_inf(fmt: str, nan: int, want: int) -> None:
    got = formats.quantize(f32(nan, 0x3F800000), fmt)
    assert bits(got)[0] == want, f"{bits(got)[0]:#010x}"
    assert got[1] == 0.0


def test_pad_value_counts_toward_the_shared_exponent() -> None:
    x = np.array([1 + 2**-6], dtype=np.float32)
    packed = formats.pack(x, "bfloat8_b", pad_value=4.0)
    assert packed[0] == 129  # 4.0's exponent
    assert formats.unpack(packed, x.shape, "bfloat8_b")[0] == 1.0  # aligned two places down: 2^-6 is lost
    assert formats.quantize(x, "bfloat8_b")[0] == 1 + 2**-6  # quantize pads with zeros, as the card does


# ---- errors ----------------------------------------------------------------------------------------------------


def test_wrong_byte_count_names_expected_and_got() -> None:
    packed = formats.pack(np.zeros((32, 64), np.float32), "bfloat8_b")
    with pytest.raises(FormatError, match=r"expects 2176 bytes .* got 2175"):
        formats.unpack(packed[:-1], (32, 64), "bfloat8_b")
    with pytest.raises(FormatError, match=r"expects 1088 bytes"):
        formats.unpack(packed, (32, 32), "bfloat8_b")


def test_bad_formats_and_dtypes_raise_format_error() -> None:
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(FormatError, match="unknown format"):
        formats.pack(x, "bfloat7")
    with pytest.raises(FormatError, match="no host tile conversion for uint8"):
        formats.pack(x, "uint8")
    with pytest.raises(FormatError, match="needs int32 values"):
        formats.pack(x, "int32")
    with pytest.raises(FormatError, match="tilize works on"):
        formats.tilize(x.astype(np.float64))
    with pytest.raises(FormatError, match="expects 1024 elements"):
        formats.untilize(np.zeros(1000, np.float32), (32, 32))
    with pytest.raises(FormatError, match="quantize works on float formats"):
        formats.quantize(x, "int32")
    with pytest.raises(FormatError, match="not representable as int32"):
        formats.pack(x.astype(np.int32), "int32", pad_value=0.5)
    with pytest.raises(FormatError, match="out must be a uint8 array"):
        formats.pack(x, "bfloat16", out=np.empty(10, np.uint8))
    with pytest.raises(FormatError, match="from_bfloat16 takes bfloat16 bits"):
        formats.from_bfloat16(x)


def test_out_receives_the_result() -> None:
    x = wide_floats(np.random.default_rng(9), (40, 50))
    out = np.empty(nbytes(x.shape, "bfloat8_b", "tile"), np.uint8)
    assert formats.pack(x, "bfloat8_b", out=out) is out
    back = np.empty(x.shape, np.float32)
    assert formats.unpack(out, x.shape, "bfloat8_b", out=back) is back
    assert_same_bits(back, ref.quantize(x, "bfloat8_b"))
    assert_same_bits(formats.unpack(bytes(out), x.shape, "bfloat8_b"), back)  # bytes are accepted too


def test_misaligned_buffers_are_copied_or_refused() -> None:
    x = wide_floats(np.random.default_rng(10), (33, 40))
    raw = np.empty(x.nbytes + 1, np.uint8)
    shifted = raw[1:].view(np.float32).reshape(x.shape)  # a float32 array one byte off alignment
    shifted[...] = x
    packed = formats.pack(shifted, "bfloat8_b")
    assert_same_bytes(packed, ref.pack(x, "bfloat8_b"))
    raw = np.empty(packed.size + 1, np.uint8)
    raw[1:] = packed
    assert_same_bits(formats.unpack(raw[1:], x.shape, "bfloat8_b"), ref.quantize(x, "bfloat8_b"))
    with pytest.raises(FormatError, match="4-byte aligned"):
        formats.pack(x, "bfloat8_b", out=raw[1:])


def test_empty_tensors() -> None:
    for fmt in FLOAT_FORMATS:
        assert formats.pack(np.zeros((0, 5), np.float32), fmt).size == 0
        assert formats.unpack(np.zeros(0, np.uint8), (3, 0), fmt).shape == (3, 0)


# ---- the native build ------------------------------------------------------------------------------------------


def test_missing_compiler_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(_native.NativeBuildError, match="KTT_CC"):
        _native.find_compiler("no-such-compiler-ktt")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(_native.NativeBuildError, match="install gcc") as info:
        _native.find_compiler(None)
    assert isinstance(info.value, KohakuTTError) and "KTT_CC" in str(info.value)


def test_failed_build_raises_and_leaves_no_files(tmp_path: Path) -> None:
    with pytest.raises(_native.NativeBuildError, match="failed"):
        _native.build(tmp_path, ["false"])
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


@pytest.mark.slow
def test_racing_builds_both_load_one_library(tmp_path: Path) -> None:
    code = (
        "from kohakutt.hal import _native, formats; import numpy as np; "
        "assert formats.quantize(np.float32([1.999]), 'bfloat8_b')[0] == 1.984375; print(_native.lib().path)"
    )
    env = {**os.environ, "KTT_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-c", code]
    procs = [
        subprocess.Popen(run, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p.name for p in files] == ["libktt_runtime.so"], files


def test_build_key_follows_sources_compiler_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    cc = _native.find_compiler(None)
    key = _native.build_key(cc)
    assert _native.build_key(cc) == key
    monkeypatch.setattr(_native, "CFLAGS", (*_native.CFLAGS, "-DKTT_TEST_FLAG"))
    assert _native.build_key(cc) != key


# ---- TT-NN's own packer as a second reference (optional) -------------------------------------------------------

TTNN_PYTHON = find_ttnn_python()
TTNN_SCRIPT = """
import sys
import numpy as np
import ttnn
cases, out = np.load(sys.argv[1]), {}
for name in cases.files:
    for fmt in ("bfloat16", "bfloat8_b", "bfloat4_b"):
        t = ttnn.Tensor(cases[name], getattr(ttnn, fmt), None, ttnn.TILE_LAYOUT)
        shard = t.host_buffer().get_shard(ttnn.MeshCoordinate([0, 0]))
        out[name + "/" + fmt] = np.from_dlpack(shard).view(np.uint8).reshape(-1).copy()
        if fmt != "bfloat16":  # numpy has no bfloat16 to hand those values back in
            out[name + "/" + fmt + "/values"] = np.asarray(t.to_numpy(), dtype=np.float32)
np.savez(sys.argv[2], **out)
"""


@pytest.mark.skipif(TTNN_PYTHON is None, reason=NO_TTNN)
def test_pack_and_unpack_match_ttnn_bit_for_bit(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    cases = {
        "adversarial": adversarial(rng, (64, 64)),
        "random_bits": random_bits(rng, (2, 45, 50)),
        "wide": wide_floats(rng, (3, 40, 70)),
        "one_d": wide_floats(rng, (45,)),
        "inf_row": np.array(
            [[np.inf, 2.0**127, 1.5 * 2.0**122, 2.0**121, 3e38, -3.3e38, 1.0] + [0.0] * 9] * 2, dtype=np.float32
        ),
        "nans": SPECIALS[:32].reshape(2, 16),
    }
    np.savez(tmp_path / "cases.npz", **cases)
    (tmp_path / "p150.yaml").write_text(MOCK_P150)
    env = ttnn_env(TT_METAL_MOCK_CLUSTER_DESC_PATH=str(tmp_path / "p150.yaml"))
    run = [str(TTNN_PYTHON), "-c", TTNN_SCRIPT, str(tmp_path / "cases.npz"), str(tmp_path / "out.npz")]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0 and "ModuleNotFoundError" in done.stderr:
        pytest.skip(f"{TTNN_PYTHON} cannot import ttnn and numpy: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, f"TT-NN packing failed:\n{done.stderr[-3000:]}"
    theirs = np.load(tmp_path / "out.npz")
    for name, x in cases.items():
        for fmt in ("bfloat16", "bfloat8_b", "bfloat4_b"):
            packed = theirs[f"{name}/{fmt}"]
            assert_same_bytes(formats.pack(x, fmt), packed)
            if fmt != "bfloat16":
                assert_same_bits(formats.unpack(packed, x.shape, fmt), theirs[f"{name}/{fmt}/values"].reshape(x.shape))
