"""Kohaku-TT's conv program (``kohakutt/kernels/programs/conv.py``), run tile by tile by its circular-buffer semantics,
against the op library's fast path (``kernels.run(..., provider="ktt")``, the vectorized model).

The two compute the same arithmetic and may differ only in the order of float32 sums inside DST (torch's convolution
sums in its own order, the program tile by tile). So:
- On a grid where every float32 sum is exact in any order (values +-(1 + m/128), m < 128: bf16 values in [1, 2), so
  every product at any fidelity is a multiple of 2^-14 below 4, and a sum of fewer than 256 of them stays below 2^10,
  inside float32's 24 bits), the program and the fast path agree bit for bit.
- On normal data, per element, with S = sum |x||w| + |bias| (the same convolution of magnitudes), K_tot the products
  per output and KH the kernel rows: the float32 orders differ by at most 2 K_tot 2^-24 S. A bf16 DST is rounded once
  per kernel row and a bf16 output once more; a sum on either side of a rounding boundary differs by one bf16 ulp
  (<= 2^-7 S) per rounding: (KH + 1) 2^-7 S. An fp32 DST with a bias is truncated to TF32 before the add: one TF32
  ulp, 2^-10 S. And at least 99% of the elements agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sim_modes import sim_kernels

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import KohakuTTUnsupportedOperator, ProgramError
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Fidelity, Numerics, numerics
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels.programs import conv as pc

F32, BF16_ULP = 2.0**-24, 2.0**-7


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def grid(rng, *shape):
    """Values whose float32 sums are exact in any order (see the module docstring)."""
    return (rng.choice([-1.0, 1.0], shape) * (1 + rng.integers(0, 128, shape) / 128)).astype(np.float32)


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def fast_path(dev, x, w, b, attrs, dtypes, num):
    """The op through kernels.run with the own kernel, and the operands as stored. The program is the one-pass
    convolution: float32 operands as TF32 (``fp32_matmul="high"``; the default "highest" splits them first)."""
    ins = [kk.from_numpy(dev, a, dt, "tile" if DType.of(dt).format.is_block else "row_major")
           for a, dt in zip((x, w, b), dtypes) if a is not None]
    with numerics(fp32_matmul="high", **num):
        (y,) = kk.run("conv", ins, attrs, provider="ktt")
    return kk.to_numpy(y), [kk.to_numpy(t) for t in ins]


def program(dev, stored, attrs, dtypes, num, max_cores=3, w_resident=None):
    """The program's output run from its kernels' C++; its Python twin must give the same bits."""
    x, w, *rest = stored
    fp32 = num.get("fp32_acc", dtypes[0] == "float32" and dtypes[1] == "float32")
    outs = []
    for mode in ("cpp", "python"):
        with sim_kernels(mode):
            outs.append(pc.run_conv_program(dev, x, w, rest[0] if rest else None, attrs, x_dtype=dtypes[0],
                                            w_dtype=dtypes[1], bias_dtype=dtypes[2] if rest else None,
                                            fidelity=num.get("fidelity", "HiFi4"), fp32_acc=fp32,
                                            w_resident=w_resident, max_cores=max_cores))  # fmt: skip
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32), err_msg="C++ != twin")
    return outs[0]


# name: x shape, w shape, attrs, (x, w, bias) dtypes (bias None: no bias), numerics
CASES = {
    "padded 3x3": ((2, 4, 10, 9), (6, 4, 3, 3), {"padding": 1}, ("bfloat16",) * 3, {}),
    "fp32 DST": ((2, 4, 10, 9), (6, 4, 3, 3), {"padding": 1}, ("bfloat16",) * 3, {"fp32_acc": True}),
    "float32": ((2, 4, 10, 9), (6, 4, 3, 3), {"padding": 1}, ("float32",) * 3, {}),
    "float32, bf16 DST, HiFi2": ((1, 3, 8, 9), (5, 3, 3, 3), {"padding": 1}, ("float32",) * 3,
                                 {"fp32_acc": False, "fidelity": "HiFi2"}),
    "channels last": ((2, 9, 8, 4), (6, 4, 3, 3), {"padding": 1, "channels_last": True}, ("bfloat16",) * 3, {}),
    "groups 2 strided dilated": ((2, 4, 12, 10), (6, 2, 3, 3), {"groups": 2, "stride": 2, "dilation": (2, 1),
                                                                "padding": (2, 1)}, ("bfloat16",) * 3, {}),
    "depthwise LoFi": ((2, 8, 7, 7), (8, 1, 3, 3), {"groups": 8, "padding": 1}, ("bfloat16",) * 3,
                       {"fidelity": "LoFi"}),
    "depthwise channels last HiFi2": ((1, 6, 7, 6), (6, 1, 3, 3), {"groups": 6, "padding": 1, "channels_last": True},
                                      ("bfloat16",) * 3, {"fidelity": "HiFi2"}),
    "HiFi3 no bias": ((2, 4, 10, 9), (6, 4, 3, 3), {"padding": 1}, ("bfloat16", "bfloat16", None),
                      {"fidelity": "HiFi3"}),
    "wide: 2 K tiles, 2 DST blocks": ((1, 24, 6, 7), (150, 24, 2, 3), {"padding": (1, 0)}, ("bfloat16",) * 3, {}),
    "groups 2 channels last, float32 out": ((2, 7, 9, 6), (70, 3, 2, 3), {"groups": 2, "stride": (1, 3),
                                                                        "channels_last": True},
                                            ("bfloat16", "float32", "bfloat16"), {"fp32_acc": False}),
    "same, even kernel": ((6, 9, 8), (5, 6, 4, 2), {"padding": "same"}, ("bfloat16",) * 3, {}),
    "conv1d groups 2 strided": ((2, 6, 19), (4, 3, 5), {"padding": 2, "groups": 2, "stride": 2},
                                ("bfloat16",) * 3, {}),
    "conv1d channels last fp32 DST": ((2, 19, 6), (4, 6, 5), {"dilation": 2, "channels_last": True},
                                      ("bfloat16",) * 3, {"fp32_acc": True}),
}  # fmt: skip


STREAMED = {"padded 3x3", "float32, bf16 DST, HiFi2", "groups 2 strided dilated", "wide: 2 K tiles, 2 DST blocks",
            "groups 2 channels last, float32 out"}  # also run with the weights streamed per block


@pytest.mark.parametrize("name, resident", [(n, None) for n in CASES] + [(n, False) for n in sorted(STREAMED)])
def test_program_is_bit_exact_where_sums_are_exact(dev, name, resident):
    xs, ws, attrs, dtypes, num = CASES[name]
    rng = np.random.default_rng(len(name))
    x, w = grid(rng, *xs), grid(rng, *ws)
    b = grid(rng, ws[0]) if dtypes[2] else None
    want, stored = fast_path(dev, x, w, b, attrs, dtypes, num)
    got = program(dev, stored, attrs, dtypes, num, w_resident=resident)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["padded 3x3", "float32, bf16 DST, HiFi2", "channels last",
                                  "groups 2 channels last, float32 out", "conv1d channels last fp32 DST"])
def test_cpp_and_python_twins_agree_bit_for_bit(dev, knobs, name):
    """The program run from its C++ (the host build of the kernel API, the card's rules checked at every call: NoC
    alignment, CB balance) and from its Python twins gives the same bits on normal data."""
    xs, ws, attrs, dtypes, num = CASES[name]
    rng = np.random.default_rng(7)
    x, w = normal(rng, *xs), normal(rng, *ws)
    b = normal(rng, ws[0]) if dtypes[2] else None
    _, stored = fast_path(dev, x, w, b, attrs, dtypes, num)
    got = {}
    for mode in ("cpp", "python"):
        knobs(KTT_SIM_KERNELS=mode)
        got[mode] = program(dev, stored, attrs, dtypes, num)
    np.testing.assert_array_equal(got["cpp"].view(np.uint32), got["python"].view(np.uint32))


def _magnitudes(x, w, b, attrs):
    """S per output: the convolution of |x| and |w| (float64), plus |bias|, in the op's layout."""
    nd = w.ndim - 2
    cl = attrs.get("channels_last", False)
    xt = torch.as_tensor(np.abs(x), dtype=torch.float64)
    if cl:
        xt = xt.movedim(-1, 1 if xt.ndim == nd + 2 else 0)
    a = {k: v for k, v in attrs.items() if k != "channels_last"}
    out = getattr(F, f"conv{nd}d")(xt, torch.as_tensor(np.abs(w), dtype=torch.float64), None, **a)
    if cl:
        out = out.movedim(1 if out.ndim == nd + 2 else 0, -1)
    out = out.numpy()
    if b is not None:
        out = out + np.abs(b).reshape((-1,) + (1,) * (0 if cl else nd))
    return out


@pytest.mark.parametrize("name", ["padded 3x3", "float32", "float32, bf16 DST, HiFi2", "groups 2 strided dilated",
                                  "wide: 2 K tiles, 2 DST blocks", "groups 2 channels last, float32 out",
                                  "conv1d channels last fp32 DST"])  # fmt: skip
def test_program_matches_the_fast_path_on_normal_data(dev, name):
    xs, ws, attrs, dtypes, num = CASES[name]
    rng = np.random.default_rng(7 + len(name))
    x, w = normal(rng, *xs), normal(rng, *ws)
    b = normal(rng, ws[0]) if dtypes[2] else None
    want, stored = fast_path(dev, x, w, b, attrs, dtypes, num)
    got = program(dev, stored, attrs, dtypes, num, max_cores=None)
    s = _magnitudes(stored[0], stored[1], stored[2] if b is not None else None, attrs)
    kh = ws[2] if len(ws) == 4 else 1
    k_tot = int(np.prod(ws[1:]))
    fp32_dst = num.get("fp32_acc", dtypes[0] == dtypes[1] == "float32")
    out_bf16 = "float32" not in [d for d in dtypes if d]
    roundings = (0 if fp32_dst else kh) + (1 if out_bf16 else 0)
    tol = 2 * k_tot * F32 * s + roundings * BF16_ULP * s + (2.0**-10 * s if fp32_dst and b is not None else 0)
    assert np.all(np.abs(got - want) <= tol), name
    assert np.mean(got == want) >= 0.99, name


def test_registered_kernel_is_the_program(dev):
    impl = kk.lookup("conv", "sim", "ktt")
    assert impl.program is pc.conv_program
    spec = pc.conv_spec((8, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}, bias_dtype="bfloat16", fidelity="HiFi2")
    prog = impl.program(spec)
    kinds = {k.kind: k for k in prog.kernels}
    assert set(kinds) == {"reader", "compute", "writer"} and prog.tensors == ("x", "weights", "bias", "out")
    assert kinds["compute"].fp32_dest_acc_en and kinds["compute"].fidelity.name == "HiFi2"
    assert "tilize_block" in kinds["compute"].source and "matmul_tiles" in kinds["compute"].source
    assert "noc_async_read(" in kinds["reader"].source and "noc_async_write(" in kinds["writer"].source
    assert len(prog.cores()) == dev.card.cores  # 784 M tiles of work over the whole grid
    s = spec.shape
    bufs = [dev.allocate(shape=(8, 64, 56, 56), fmt="bfloat16"),
            dev.allocate(shape=(s.kh * s.krt * 32, s.nt * 32), fmt="bfloat16", layout="tile"),
            dev.allocate(shape=(64,), fmt="bfloat16"), dev.allocate(shape=(8, 64, 56, 56), fmt="bfloat16")]
    try:
        prog.validate(dev.card, bufs, {})  # L1, CB ids, runtime args, entry points
        est = prog.estimate_ns(dev.card, bufs, {})
    finally:
        for buf in bufs:
            dev.free(buf)
    x, w = TensorSpec((8, 64, 56, 56), DType.BFLOAT16), TensorSpec((64, 64, 3, 3), DType.BFLOAT16)
    attrs = irops.get("conv").bind_attrs({"padding": 1})
    num = Numerics(fidelity=Fidelity.HiFi2)
    op_est = impl.estimate([x, w], irops.infer("conv", [x, w], attrs), attrs, num, dev.card)
    assert 0.25 < est / op_est < 4  # the program's own count of its work and the op's estimate agree roughly


def test_program_refuses_what_it_does_not_run(dev):
    with pytest.raises(KohakuTTUnsupportedOperator, match="transposed and 3-d"):
        pc.conv_spec((1, 4, 5, 5), (4, 2, 3, 3), {"transposed": True})
    with pytest.raises(KohakuTTUnsupportedOperator, match="transposed and 3-d"):
        pc.conv_spec((1, 2, 4, 4, 4), (2, 2, 2, 2, 2), {})
    with pytest.raises(KohakuTTUnsupportedOperator, match="input is bfloat8_b"):
        pc.conv_spec((1, 4, 5, 5), (4, 4, 3, 3), {}, x_dtype="bfloat8_b")
    with pytest.raises(KohakuTTUnsupportedOperator, match="output is bfloat8_b"):
        pc.conv_spec((1, 4, 5, 5), (4, 4, 3, 3), {}, out_dtype="bfloat8_b")
    big = pc.conv_spec((1, 4096, 9, 9), (8, 4096, 3, 3), {"padding": 1})  # 3 x 384 resident K tiles: 2.3 MB of L1
    bufs = [dev.allocate(shape=(1, 4096, 9, 9), fmt="bfloat16"),
            dev.allocate(shape=(3 * 384 * 32, 32), fmt="bfloat16", layout="tile"),
            dev.allocate(shape=(1, 8, 9, 9), fmt="bfloat16")]
    try:
        with pytest.raises(ProgramError, match="circular buffers on core"):
            dev.run_program(pc.conv_program(big), bufs)
    finally:
        for buf in bufs:
            dev.free(buf)


def test_block_float_weights_keep_their_stored_values(dev):
    """bfloat8_b weights are regrouped as bfloat16 (exact), so the program sees the values the op stores."""
    rng = np.random.default_rng(5)
    x, w = grid(rng, 2, 4, 9, 9), normal(rng, 6, 4, 3, 3)
    want, stored = fast_path(dev, x, w, None, {"padding": 1}, ("bfloat16", "bfloat8_b"), {})
    got = pc.run_conv_program(dev, stored[0], w, None, {"padding": 1}, w_dtype="bfloat8_b", max_cores=2)
    assert np.mean(got == want) >= 0.99 and np.allclose(got, want, rtol=2**-6, atol=1e-3)
