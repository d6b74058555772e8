"""The conv family on the simulator against torch CPU float64 convolutions of the same stored (bf16) inputs.

Tolerances: with an fp32 DST the products are exact (bf16 operands at HiFi4) and the sum is within
K * 2^-24 * sum|x||w| of float64 (K = C/groups * kernel volume), where sum|x||w| is the same convolution of the
absolute values; a bf16 output adds 2^-8 relative. The bf16-DST reference is built independently: one float64
convolution per kernel row, accumulated with a bf16 rounding after each row.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, KohakuTTUnsupportedOperator
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import Numerics, numerics
from kohakutt.ir.ops import ShapeError, TensorSpec
from kohakutt.kernels import conv as conv_kernels

EPS32, BF16_REL = 2.0**-24, 2.0**-8
RNG = np.random.default_rng(99)
pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same.:UserWarning")  # the reference's, not ours


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def bf16(*shape: int) -> np.ndarray:
    return round_bfloat16(RNG.standard_normal(shape).astype(np.float32))


def torch_conv(
    x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1, transposed=False, output_padding=0, channels_last=False
):
    """float64 torch reference in the op's own layout."""
    nd = w.ndim - 2
    xt = torch.as_tensor(np.asarray(x, np.float64))
    wt = torch.as_tensor(np.asarray(w, np.float64))
    bt = None if b is None else torch.as_tensor(np.asarray(b, np.float64))
    if channels_last:
        xt = xt.movedim(-1, 1 if xt.ndim == nd + 2 else 0)
    if transposed:
        out = getattr(F, f"conv_transpose{nd}d")(xt, wt, bt, stride, padding, output_padding, groups, dilation)
    else:
        out = getattr(F, f"conv{nd}d")(xt, wt, bt, stride, padding, dilation, groups)
    if channels_last:
        out = out.movedim(1 if out.ndim == nd + 2 else 0, -1)
    return out.numpy()


def run_conv(dev, x, w, b=None, dtype="bfloat16", provider=None, **attrs):
    num = attrs.pop("num", {})
    ins = [kk.from_numpy(dev, x, dtype), kk.from_numpy(dev, w, dtype)]
    if b is not None:
        ins.append(kk.from_numpy(dev, b, dtype))
    with numerics(**num):
        (y,) = kk.run("conv", ins, attrs, provider=provider)
    return kk.to_numpy(y)


CASES = [
    ("conv1d", (2, 4, 19), (6, 4, 3), {"padding": 1}),
    ("conv1d strided dilated", (3, 4, 23), (6, 2, 4), {"stride": 2, "dilation": 3, "groups": 2}),
    ("conv2d", (2, 5, 11, 13), (7, 5, 3, 3), {"padding": 1}),
    ("conv2d grouped strided", (2, 6, 12, 9), (9, 2, 3, 2), {"groups": 3, "stride": (2, 1), "padding": (1, 0)}),
    ("conv2d dilated", (1, 3, 14, 15), (4, 3, 3, 3), {"dilation": (2, 3), "padding": 2}),
    ("depthwise", (2, 8, 10, 10), (8, 1, 5, 5), {"groups": 8, "padding": 2}),
    ("same even kernel", (2, 3, 9, 8), (4, 3, 4, 2), {"padding": "same"}),
    ("unbatched", (3, 10, 7), (4, 3, 3, 3), {"padding": 1}),
    ("channels last", (2, 9, 8, 5), (6, 5, 3, 3), {"padding": 1, "channels_last": True}),
    ("conv3d", (2, 3, 6, 7, 5), (4, 3, 3, 2, 3), {"padding": 1, "stride": (1, 2, 1)}),
    ("conv3d grouped channels last", (1, 5, 6, 4, 4), (4, 2, 2, 3, 3), {"groups": 2, "channels_last": True}),
    ("transposed 2d", (2, 4, 5, 6), (4, 3, 3, 3), {"transposed": True, "stride": 2, "padding": 1, "output_padding": 1}),
    (
        "transposed grouped dilated",
        (2, 4, 5, 6),
        (4, 2, 3, 2),
        {"transposed": True, "stride": (2, 3), "groups": 2, "dilation": 2, "output_padding": (1, 0)},
    ),
    ("transposed 1d", (2, 3, 7), (3, 5, 4), {"transposed": True, "stride": 3, "padding": 1}),
    ("transposed 3d", (1, 3, 4, 3, 5), (3, 2, 3, 3, 2), {"transposed": True, "stride": 2, "padding": (1, 0, 1)}),
]


def _bound(x, w, attrs):
    """sum|x||w| per output (the convolution of the magnitudes) and an upper bound on the terms per sum."""
    mag = torch_conv(np.abs(x), np.abs(w), **attrs)
    return mag, max(w.shape[0], w.shape[1]) * int(np.prod(w.shape[2:]))


@pytest.mark.parametrize("name, xs, ws, attrs", CASES, ids=[c[0] for c in CASES])
def test_conv_fp32_dst_matches_float64(dev, name, xs, ws, attrs):
    x, w = bf16(*xs), bf16(*ws)
    bias = bf16(ws[1] * attrs.get("groups", 1) if attrs.get("transposed") else ws[0])
    if conv_kernels.ttnn_supports(conv_kernels.conv_geometry(xs, ws, {**irops.get("conv").attrs, **attrs})):
        # TT-NN cannot run it: asked for by name it is refused, typed; by default the host runs it
        with pytest.raises(CommandError, match="KohakuTTUnsupportedOperator: conv: TT-NN"):
            run_conv(dev, x, w, bias, provider="ttnn", **attrs)
    got = run_conv(dev, x, w, bias, num={"fidelity": "HiFi4", "fp32_acc": True}, **attrs)
    ref = torch_conv(x, w, bias, **attrs)
    mag, k = _bound(x, w, attrs)
    assert got.shape == ref.shape
    # fp32 sum of exact products, the bias add (the sum truncated to a TF32 source: 2^-10), one bf16 rounding
    tol = k * EPS32 * mag + 2.0**-10 * (mag + np.abs(bias).max()) + BF16_REL * np.abs(ref)
    assert np.all(np.abs(got - ref) <= tol + 1e-6)


def _row_blocked_reference(x, w, **attrs):
    """bf16 DST per kernel row (all leading kernel indices): a float64 convolution of each row, then DST rounded."""
    acc = None
    for idx in itertools.product(*(range(k) for k in w.shape[2:-1])):
        wi = np.zeros_like(w)
        wi[(slice(None), slice(None), *idx)] = w[(slice(None), slice(None), *idx)]
        part = torch_conv(x, wi, **attrs)
        acc = round_bfloat16(((0 if acc is None else acc) + part).astype(np.float32)).astype(np.float64)
    return acc


@pytest.mark.parametrize(
    "attrs, spatial",
    [
        ({"padding": 1}, (12, 10)),
        ({"stride": (2, 1), "padding": 1}, (12, 10)),
        ({"groups": 2, "dilation": 2}, (12, 10)),
        ({"groups": 2, "padding": 1}, (5, 6, 5)),
    ],
)
def test_bf16_dst_accumulates_per_kernel_row(dev, attrs, spatial):
    x, w = bf16(2, 4, *spatial), bf16(6, 4 // attrs.get("groups", 1), *(3,) * len(spatial))
    got = run_conv(dev, x, w, **attrs)  # bf16 operands: TT-NN's default, HiFi4 with a bf16 DST
    ref = _row_blocked_reference(x, w, **attrs)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(ref), 1e-30))) - 7)
    assert np.mean(got == ref) > 0.9 and np.all(np.abs(got - ref) <= 2 * ulp)
    exact = torch_conv(x, w, **attrs)
    fp32 = run_conv(dev, x, w, num={"fp32_acc": True}, **attrs)
    assert np.abs(got - exact).mean() > np.abs(fp32 - exact).mean()


def test_fidelity_masks_the_input_not_the_weights(dev):
    x, w = bf16(2, 4, 9, 9), bf16(5, 4, 3, 3)
    got = run_conv(dev, x, w, dtype="float32", num={"fidelity": "HiFi2", "fp32_matmul": "high"}, padding=1)
    x7 = (x.view(np.uint32) & np.uint32(0xFFFE0000)).view(np.float32)  # SrcB: implicit 1 + 6 mantissa bits
    ref = torch_conv(x7, w, padding=1)
    mag, k = _bound(x, w, {"padding": 1})
    assert np.all(np.abs(got - ref) <= k * EPS32 * mag + 1e-6)
    assert np.abs(got - torch_conv(x, w, padding=1)).max() > 1e-3


def test_ttnn_model_refuses_what_ttnn_cannot_run(dev):
    x, w = kk.from_numpy(dev, bf16(1, 2, 3, 3, 3), "bfloat16"), kk.from_numpy(dev, bf16(2, 2, 2, 2, 2), "bfloat16")
    kk.run("conv", [x, w], {"transposed": True}, provider="ttnn")
    with pytest.raises(CommandError, match="no transposed 3-d convolution"):
        dev.synchronize()
    (ok,) = kk.run("conv", [x, w], {"transposed": True}, provider="ktt")
    assert kk.to_numpy(ok).shape == (1, 2, 4, 4, 4)
    assert (
        conv_kernels.ttnn_supports(
            conv_kernels.conv_geometry((1, 2, 5, 5), (2, 1, 3, 3), {**irops.get("conv").attrs, "groups": 2})
        )
        is None
    )


def test_providers_agree_where_both_run(dev):
    x, w = kk.from_numpy(dev, bf16(2, 4, 8, 8), "bfloat16"), kk.from_numpy(dev, bf16(4, 2, 3, 3), "bfloat16")
    a = {"groups": 2, "padding": 1}
    (t,), (k,) = kk.run("conv", [x, w], a, provider="ttnn"), kk.run("conv", [x, w], a, provider="ktt")
    np.testing.assert_array_equal(kk.to_numpy(t), kk.to_numpy(k))


def test_empty_batch(dev):
    out = run_conv(dev, np.zeros((0, 3, 5, 5), np.float32), bf16(4, 3, 3, 3))
    assert out.shape == (0, 4, 3, 3)


# ------------------------------------------------------------------------------------------------ backward
@pytest.mark.parametrize(
    "name, xs, ws, attrs",
    [
        c
        for c in CASES
        if c[0]
        in (
            "conv1d",
            "conv2d grouped strided",
            "conv2d dilated",
            "same even kernel",
            "channels last",
            "conv3d",
            "transposed 2d",
            "transposed grouped dilated",
            "unbatched",
        )
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_conv_backward_matches_autograd(dev, name, xs, ws, attrs):
    x, w = bf16(*xs), bf16(*ws)
    ref_out = torch_conv(x, w, **attrs)
    g = bf16(*ref_out.shape)
    xt, wt = (
        torch.tensor(x, dtype=torch.float64, requires_grad=True),
        torch.tensor(w, dtype=torch.float64, requires_grad=True),
    )
    out = torch_conv_t(xt, wt, attrs)
    gx, gw = torch.autograd.grad(out, (xt, wt), torch.as_tensor(g, dtype=torch.float64))
    ax, aw = (
        torch.tensor(np.abs(x), dtype=torch.float64, requires_grad=True),
        torch.tensor(np.abs(w), dtype=torch.float64, requires_grad=True),
    )
    mx, mw = torch.autograd.grad(torch_conv_t(ax, aw, attrs), (ax, aw), torch.as_tensor(np.abs(g), dtype=torch.float64))
    gb = g.astype(np.float64).sum(axis=tuple(i for i in range(g.ndim) if i != _channel_axis(g, ws, attrs)))
    ins = [kk.from_numpy(dev, a, "bfloat16") for a in (g, x, w)]
    with numerics(fp32_acc=True):
        gi_, gw_, gb_ = (kk.to_numpy(t) for t in kk.run("conv_backward", ins, attrs))
    n_sum = g.size // g.shape[_channel_axis(g, ws, attrs)]
    for got, ref, mag, k in (
        (gi_, gx.numpy(), mx.numpy(), g.size),
        (gw_, gw.numpy(), mw.numpy(), n_sum),
        (gb_, gb, np.abs(g).sum(), n_sum),
    ):
        assert got.shape == ref.shape
        assert np.all(np.abs(got - ref) <= k * EPS32 * mag + BF16_REL * np.abs(ref) + 1e-6), name


def _channel_axis(g, ws, attrs):
    return g.ndim - 1 if attrs.get("channels_last") else (0 if g.ndim == len(ws) - 1 else 1)


def torch_conv_t(xt, wt, attrs):
    nd = wt.ndim - 2
    a = {k: v for k, v in attrs.items() if k not in ("transposed", "channels_last")}
    if attrs.get("channels_last"):
        xt = xt.movedim(-1, 1)
    if attrs.get("transposed"):
        out = getattr(F, f"conv_transpose{nd}d")(xt, wt, **a)
    else:
        out = getattr(F, f"conv{nd}d")(xt, wt, **a)
    return out.movedim(1, -1) if attrs.get("channels_last") else out


def test_conv_backward_output_mask_and_bf16_default(dev):
    x, w = bf16(2, 3, 6, 6), bf16(4, 3, 3, 3)
    g = bf16(2, 4, 6, 6)
    ins = [kk.from_numpy(dev, a, "bfloat16") for a in (g, x, w)]
    gi, gw, gb = kk.run("conv_backward", ins, {"padding": 1, "output_mask": (False, True, False)})
    assert gi.shape == (0,) and gb.shape == (0,) and gw.shape == (4, 3, 3, 3)
    (_, gw_fp32, _) = kk.run("conv_backward", ins, {"padding": 1})
    ref = F.grad.conv2d_weight(
        torch.as_tensor(x, dtype=torch.float64), w.shape, torch.as_tensor(g, dtype=torch.float64), padding=1
    ).numpy()
    err_default = np.abs(kk.to_numpy(gw) - ref).max()
    assert err_default <= 4 * BF16_REL * np.abs(ref).max()  # bf16 DST, rounded once per batch entry
    np.testing.assert_array_equal(kk.to_numpy(gw), kk.to_numpy(gw_fp32))  # the mask changes no value


# --------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "xs, ws, attrs, match",
    [
        ((2, 3, 8, 8), (4, 2, 3, 3), {}, "takes 2 input channels"),
        ((2, 4, 8, 8), (6, 2, 3, 3), {"groups": 3}, "do not split into 3 groups"),
        ((2, 3, 2, 2), (4, 3, 3, 3), {}, "larger than the padded input"),
        ((3, 8), (4, 3, 3, 3), {}, "takes a 4-D"),
        ((2, 3, 5, 5), (3, 4, 3, 3), {"transposed": True, "stride": 2, "output_padding": 2}, "output_padding"),
        ((2, 3, 5, 5), (4, 3, 3, 3), {"padding": "same", "stride": 2}, "needs stride 1"),
        ((2, 3, 5, 5), (4, 3, 3, 3), {"stride": 0}, "stride must be"),
    ],
)
def test_bad_convolutions_raise_shape_errors(dev, xs, ws, attrs, match):
    x, w = kk.from_numpy(dev, bf16(*xs), "bfloat16"), kk.from_numpy(dev, bf16(*ws), "bfloat16")
    with pytest.raises(ShapeError, match=match):
        kk.run("conv", [x, w], attrs)


def test_bias_shape_and_device_stays_usable(dev):
    x, w = kk.from_numpy(dev, bf16(1, 3, 5, 5), "bfloat16"), kk.from_numpy(dev, bf16(4, 3, 3, 3), "bfloat16")
    with pytest.raises(ShapeError, match=r"bias must have shape \(4,\)"):
        kk.run("conv", [x, w, kk.from_numpy(dev, bf16(3), "bfloat16")])
    with pytest.raises(ShapeError, match="grad_out has shape"):
        kk.run("conv_backward", [x, x, w])
    assert kk.to_numpy(kk.run("conv", [x, w])[0]).shape == (1, 4, 3, 3)


# ----------------------------------------------------------------------------------------- cost and TT-NN
def test_estimates_count_ttnn_dense_groups(dev):
    x, w = TensorSpec((8, 256, 28, 28), DType.BFLOAT16), TensorSpec((256, 1, 3, 3), DType.BFLOAT16)
    attrs = irops.get("conv").bind_attrs({"groups": 256, "padding": 1})
    out = irops.infer("conv", [x, w], attrs)
    num = Numerics()
    t = kk.lookup("conv", "sim", "ttnn").estimate([x, w], out, attrs, num, dev.card)
    k = kk.lookup("conv", "sim", "ktt").estimate([x, w], out, attrs, num, dev.card)
    assert t > 2 * k  # a depthwise convolution as TT-NN's dense block-diagonal GEMM


def _matmul_tests():
    """tests/kernels/test_matmul.py as a module (its TT-NN name recorder), whatever pytest's import mode."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("ktt_kernels_test_matmul", Path(__file__).with_name("test_matmul.py"))
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_ttnn_calls_use_only_declared_names():
    check_ttnn_names = _matmul_tests().check_ttnn_names

    log = check_ttnn_names(
        conv_kernels,
        [
            ("conv", [(2, 3, 8, 8), (4, 3, 3, 3), (4,)], {"padding": 1}),
            ("conv", [(2, 3, 8), (4, 3, 3)], {"groups": 1}),
            ("conv", [(2, 3, 8, 8), (3, 4, 3, 3)], {"transposed": True, "stride": 2}),
            ("conv", [(2, 8, 8, 3), (4, 3, 3, 3)], {"channels_last": True}),
            ("conv", [(1, 3, 4, 4, 4), (4, 3, 2, 2, 2)], {}),
        ],
    )
    assert {"conv2d", "conv_transpose2d", "experimental.conv3d", "permute"} <= log
    with pytest.raises(KohakuTTUnsupportedOperator):
        check_ttnn_names(conv_kernels, [("conv", [(1, 3, 4, 4, 4), (3, 4, 2, 2, 2)], {"transposed": True})])


# --------------------------------------------------------------------------------------------- the bf16 DST
def _grid(rng, *shape):
    """bf16 values +-(1 + m/128): every float32 sum of fewer than 256 products is exact in any order."""
    values = rng.choice([-1.0, 1.0], shape) * (1 + rng.integers(0, 128, shape) / 128)
    return torch.from_numpy(values.astype(np.float32))


ENGINE_CASES = {  # x shape, w shape, conv_forward kwargs, pairs (HiFi3 gives two)
    "padded 3x3": ((2, 4, 10, 9), (6, 4, 3, 3), {"pads": ((1, 1), (1, 1)), "dilation": (1, 1)}, 1),
    "uneven pad": ((2, 3, 9, 8), (4, 3, 4, 2), {"pads": ((1, 2), (0, 1)), "dilation": (1, 1)}, 1),
    "w stride, dilation": ((2, 5, 12, 14), (7, 5, 3, 2), {"pads": ((2, 2), (1, 1)), "dilation": (2, 3),
                                                          "stride": (1, 2)}, 1),
    "two pairs, 1 x 3": ((1, 6, 7, 9), (5, 6, 1, 3), {"pads": ((0, 0), (1, 1)), "dilation": (1, 1)}, 2),
    "wide": ((1, 40, 9, 8), (70, 40, 3, 3), {"pads": ((1, 1), (1, 1)), "dilation": (1, 1)}, 2),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ENGINE_CASES))
def test_bf16_dst_is_rounded_per_kernel_row_on_any_cpu(name):
    """A bf16 DST: each kernel row's exact partial sum is added to DST in fp32 and DST is rounded to bf16, row after
    row (float64 reference, one kernel row at a time). One engine runs on every CPU, so these are the bits."""
    xs_, ws_, kw, pairs = ENGINE_CASES[name]
    rng = np.random.default_rng(len(name))
    stride = kw.get("stride", (1, 1))
    for cl in (False, True):
        xs = [_grid(rng, *xs_) for _ in range(pairs)]
        ws = [_grid(rng, *ws_) for _ in range(pairs)]
        got = conv_kernels.conv_forward([x.contiguous(memory_format=torch.channels_last) if cl else x for x in xs], ws,
                                        **{"stride": (1, 1), "groups": 1, "fp32_acc": False, **kw},
                                        channels_last_out=cl)  # fmt: skip
        flat = [p for lh in reversed(kw["pads"]) for p in lh]
        acc = None
        for r in range(ws_[2]):
            part = 0
            for x, w in zip(xs, ws):
                w_r = torch.zeros_like(w, dtype=torch.float64)
                w_r[:, :, r] = w[:, :, r].double()
                part = part + F.conv2d(F.pad(x.double(), flat), w_r, None, stride, 0, kw["dilation"])
            total = part if acc is None else acc + part
            acc = torch.from_numpy(round_bfloat16(total.float().numpy())).double()
        assert torch.equal(got.double(), acc), name
        assert got.is_contiguous(memory_format=torch.channels_last) == cl
