"""Neural-network ops on tt (kohakutt/frontends/torch/aten/nn.py) against the CPU: each op forward and backward
(autograd through the tt kernels), then a small CNN and a transformer block.

Ops run with the default providers (Kohaku-TT's own kernels where they exist, KTT_CUSTOM_KERNELS=1); with TT-NN's
kernels (KTT_CUSTOM_KERNELS=0) the numerics are TT-NN's (bf16 source registers, bf16 scalers) and only the routing of
what TT-NN cannot run is checked here. The reference is the same function on the CPU in float64 on exactly the
values the card holds (bfloat16 inputs are rounded on the host first). Bounds come from the card's numerics as the IR
ops document them, with ``S`` = the same computation on absolute values (|x|, |w|, |grad|), the magnitude every
rounding scales with:
- float32 operands of the FPU (convolution, the reduce unit's sums, matmuls) are truncated in the source registers:
  at HiFi4 SrcA keeps 10 significant bits (two 5-bit phases: within 2^-9) and SrcB 11 (7 + 4: within 2^-10), so a
  product is within 3 * 2^-10 and a sum of products within ``3 * 2^-10 * S`` (an fp32 DST adds ~2^-24 per term,
  negligible here). Tolerance: ``TF32 * S`` with TF32 = 3 * 2^-10, plus 1e-6 absolute.
- bfloat16: inputs are exact, products exact at HiFi4; a bf16 DST is rounded once per kernel row and the result once
  more, each round-to-nearest within 2^-8 (8 significant bits): within ``(R + 1) * 2^-8 * S`` for R roundings.
- exact: max pooling (values and indices), embedding rows, gathers, the scatter of nll_loss_backward.
- fp32 SFPU arithmetic and Kohaku-TT's own pool / softmax / embedding-gradient kernels: a few fp32 roundings, so
  ``FP32 = 2^-20`` relative to the magnitude (about 8 ulp).
- attention (provider ktt): S = QK^T from TF32 operands (error E_s <= TF32 * scale * max sum|q||k|), P = exp(S - M)
  rounded to bf16 for P @ V (2^-8), V in TF32 (2^-10): |out error| <= (2 * (E_s + 2^-8) + 2^-10) * max|v|; the
  gradients are two more products of such terms: within 8 * (E_s + 2^-8) of their largest magnitude.
- layer / RMS norm (provider ktt, its Metalium program): sums by matmul against a ones tile and the intermediates
  entering the FPU as TF32, so x - mean, times rstd, times weight are each within TF32 of their magnitudes (see
  ``rowwise_bounds``; two such steps on the output); their backward ops compute in fp32 but take the forward's
  statistics. Group / batch norm compute in fp32 (2^-16 and 2^-14 of the largest magnitude: a few hundred fp32
  roundings summed).
- whole models (CNN, transformer block): a chain of about five such steps, each within TF32 relative: 2^-6 of the
  largest magnitude of each result; a parameter whose true gradient cancels (a convolution's bias before batch norm)
  keeps the rounding noise of the gradients through it, 2^-10 of the largest parameter gradient.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import kohakutt
from kohakutt.errors import CommandError, DtypeError
from kohakutt.kernels import registry

DEV = torch.device("tt", 0)
TF32 = 3 * 2.0**-10
BF16 = 2.0**-8
FP32 = 2.0**-20


def has_kernel(op: str) -> bool:
    return bool(registry.providers(op, "sim"))


needs_norm = pytest.mark.skipif(
    not all(has_kernel(o) for o in ("layer_norm", "batch_norm", "group_norm", "rms_norm")),
    reason="the norm kernels (kohakutt/kernels/norm.py) are not in this checkout",
)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed)).to(dtype)


def run(fn, *inputs: torch.Tensor, grad_seed: int = 99, abs_run: bool = False):
    """fn on tt and on the CPU in float64 (and on |inputs| with |grad| when ``abs_run``), backward with one random
    output gradient: returns (tt out, tt grads, ref out, ref grads, abs out, abs grads) as float64 CPU tensors."""

    def once(xs, device, dtype, g, absolute=False):
        leaves = []
        for x in xs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                v = x.abs() if absolute else x
                leaves.append(v.detach().to(dtype).to(device).clone().requires_grad_(True))
            else:
                leaves.append(x.to(device) if isinstance(x, torch.Tensor) else x)
        y = fn(*leaves)
        gg = g.abs() if absolute else g
        y.backward(gg.to(y.dtype).to(device))
        grads = [x.grad.cpu().double() for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
        return y.detach().cpu().double(), grads

    wide = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        shape = fn(*wide).shape
    dt = next(x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point())
    g = torch.randn(shape, generator=gen(grad_seed)).to(dt).double()  # the output gradient as the card holds it
    yt, gt = once(inputs, DEV, dt, g)
    yd, gd = once(wide, "cpu", torch.float64, g)
    ya, ga = once(wide, "cpu", torch.float64, g, absolute=True) if abs_run else (None, None)
    return yt, gt, yd, gd, ya, ga


def within(actual: torch.Tensor, ref: torch.Tensor, bound, what: str = "") -> None:
    assert actual.shape == ref.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    err = (actual - ref).abs()
    excess = err - bound
    worst = int(torch.argmax(excess.reshape(-1))) if excess.numel() else 0
    assert bool((excess <= 0).all()), (
        f"{what}: error {err.reshape(-1)[worst].item():.3g} > bound "
        f"{(bound.reshape(-1)[worst] if isinstance(bound, torch.Tensor) else bound):.3g} at {worst}"
    )


def rel(ref: torch.Tensor, r: float, floor: float = 1e-6) -> float:
    return r * (ref.abs().max().item() if ref.numel() else 0.0) + floor


# ---------------------------------------------------------------------------------------------------- convolution
CONVS = [
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1), (2, 3, 10, 10), (4, 3, 3, 3)),
    ("conv2d strided dilated grouped", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2, dilation=2, groups=2),
     (2, 4, 11, 11), (6, 2, 3, 3)),
    ("conv2d depthwise", lambda x, w, b: F.conv2d(x, w, b, groups=4), (1, 4, 7, 6), (4, 1, 3, 2)),
    ("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     (2, 3, 5, 5), (3, 4, 3, 3)),
    ("conv_transpose2d grouped", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(1, 2), groups=2, dilation=2),
     (1, 4, 4, 5), (4, 3, 2, 3)),
    ("conv1d same", lambda x, w, b: F.conv1d(x, w, b, padding="same"), (2, 3, 12), (5, 3, 4)),
    ("conv_transpose1d", lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3), (2, 3, 6), (3, 2, 4)),
    ("conv3d", lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1)),
     (1, 2, 5, 6, 5), (3, 2, 2, 3, 2)),
    ("conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2), (1, 2, 3, 3, 2), (2, 3, 2, 2, 2)),
]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("name,fn,xs,ws", CONVS, ids=[c[0] for c in CONVS])
def test_convolution_forward_backward(name, fn, xs, ws):
    x, w = randn(*xs, seed=1), randn(*ws, seed=2)
    b = randn(fn(x, w, None).shape[1], seed=3)
    yt, gt, yd, gd, ya, ga = run(fn, x, w, b, abs_run=True)
    within(yt, yd, TF32 * ya + 1e-6, f"{name} forward")
    for a, r, s, n in zip(gt, gd, ga, ("input", "weight", "bias")):
        within(a, r, TF32 * s + 1e-6, f"{name} grad {n}")


def test_convolution_bf16_forward():
    x, w = randn(2, 3, 9, 9, seed=4, dtype=torch.bfloat16), randn(5, 3, 3, 3, seed=5, dtype=torch.bfloat16)
    yt = F.conv2d(x.to(DEV), w.to(DEV), padding=1).cpu()
    assert yt.dtype == torch.bfloat16
    yd = F.conv2d(x.double(), w.double(), padding=1)
    s = F.conv2d(x.double().abs(), w.double().abs(), padding=1)
    within(yt.double(), yd, (3 + 1) * BF16 * s + 1e-6, "bf16 conv2d")  # 3 kernel rows, one output rounding


def test_convolution_without_bias_and_unbatched():
    x, w = randn(3, 8, 8, seed=6), randn(4, 3, 3, 3, seed=7)
    xt = x.to(DEV).requires_grad_(True)
    wt = w.to(DEV).requires_grad_(True)
    y = F.conv2d(xt, wt, stride=2)  # unbatched input, no bias
    y.sum().backward()
    xd, wd = x.double().requires_grad_(True), w.double().requires_grad_(True)
    yd = F.conv2d(xd, wd, stride=2)
    yd.sum().backward()
    s = F.conv2d(x.double().abs(), w.double().abs(), stride=2)
    within(y.detach().cpu().double(), yd.detach(), TF32 * s + 1e-6, "unbatched conv2d")
    within(wt.grad.cpu().double(), wd.grad, rel(wd.grad, TF32 * 4), "unbatched conv2d weight grad")


def test_convolution_channels_last():
    x = randn(2, 3, 8, 8, seed=8).contiguous(memory_format=torch.channels_last)
    w = randn(4, 3, 3, 3, seed=9)
    xt, wt = x.to(DEV), w.to(DEV)
    y = F.conv2d(xt, wt, padding=1)
    with FakeTensorMode() as fake:  # laid out as PyTorch's shape function says (what torch.compile traces with)
        assert y.stride() == F.conv2d(fake.from_tensor(xt), fake.from_tensor(wt), padding=1).stride()
    s = F.conv2d(x.double().abs(), w.double().abs(), padding=1)
    within(y.cpu().double(), F.conv2d(x.double(), w.double(), padding=1), TF32 * s + 1e-6, "channels-last conv2d")


def test_what_ttnn_cannot_run_takes_the_host(knobs):
    """A transposed 3-d convolution, a 3-d pool, adaptive max pool indices: TT-NN has none, so the host runs them
    (counted), with either knob setting."""
    from kohakutt.kernels import host_runs

    knobs(KTT_CUSTOM_KERNELS="0")
    host_runs(reset=True)
    x, w = randn(1, 2, 3, 3, 2, seed=55), randn(2, 3, 2, 2, 2, seed=56)
    y = F.conv_transpose3d(x.to(DEV), w.to(DEV), stride=2).cpu().double()
    s = F.conv_transpose3d(x.double().abs(), w.double().abs(), stride=2)
    within(y, F.conv_transpose3d(x.double(), w.double(), stride=2), TF32 * s + 1e-6, "conv_transpose3d")
    x = randn(2, 3, 4, 4, 4, seed=57)
    assert torch.equal(F.max_pool3d(x.to(DEV), 2).cpu(), F.max_pool3d(x, 2))
    _, i = F.adaptive_max_pool2d(x[0].to(DEV), 3, return_indices=True)
    assert torch.equal(i.cpu(), F.adaptive_max_pool2d(x[0], 3, return_indices=True)[1])
    assert {"conv", "max_pool", "adaptive_max_pool"} <= set(host_runs())


def test_convolution_dtype_mismatch_is_a_typed_error():
    with pytest.raises(DtypeError, match="same dtype"):
        F.conv2d(randn(1, 2, 4, 4).to(DEV), randn(2, 2, 3, 3, dtype=torch.bfloat16).to(DEV))


# ---------------------------------------------------------------------------------------------------------- pooling
EXACT_POOLS = [
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 9, 9)),
    ("max_pool2d dilated", lambda x: F.max_pool2d(x, 2, 1, 0, dilation=2), (2, 3, 7, 8)),
    ("max_pool2d unbatched", lambda x: F.max_pool2d(x, 2), (3, 6, 6)),
    ("max_pool1d", lambda x: F.max_pool1d(x, 3, 2), (2, 3, 11)),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2, padding=1), (2, 2, 4, 5, 4)),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 4)), (2, 3, 9, 10)),
    ("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 4), (2, 3, 9)),
    ("adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, 2), (1, 3, 5, 5, 5)),
]
AVG_POOLS = [
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (2, 3, 9, 9)),
    ("avg_pool2d ceil", lambda x: F.avg_pool2d(x, 2, ceil_mode=True), (2, 3, 7, 7)),
    ("avg_pool1d", lambda x: F.avg_pool1d(x, 4, 2, 2), (2, 3, 11)),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 2, divisor_override=3), (2, 3, 4, 4, 4)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 3, 9, 10)),
    ("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x, 4), (2, 3, 9)),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), (1, 3, 5, 5, 5)),
]


@pytest.mark.parametrize("name,fn,shape", EXACT_POOLS, ids=[p[0] for p in EXACT_POOLS])
def test_max_pools_are_exact(name, fn, shape):
    x = randn(*shape, seed=10)
    yt, gt, yd, gd, _, _ = run(fn, x)
    assert torch.equal(yt, yd), f"{name}: max pooling moves values exactly"
    # overlapping windows add gradients (fp32 sums of a few terms)
    within(gt[0], gd[0], rel(gd[0], FP32), f"{name} grad")


def test_max_pool_indices_match_cpu():
    x = randn(2, 3, 9, 9, seed=11)
    v, i = F.max_pool2d(x.to(DEV), 3, 2, 1, return_indices=True)
    vc, ic = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert i.dtype == torch.int64 and torch.equal(i.cpu(), ic) and torch.equal(v.cpu(), vc)
    v, i = F.adaptive_max_pool2d(x.to(DEV), 4, return_indices=True)
    assert torch.equal(i.cpu(), F.adaptive_max_pool2d(x, 4, return_indices=True)[1])


@pytest.mark.parametrize("name,fn,shape", AVG_POOLS, ids=[p[0] for p in AVG_POOLS])
def test_average_pools(name, fn, shape):
    x = randn(*shape, seed=12)
    yt, gt, yd, gd, _, _ = run(fn, x)
    within(yt, yd, rel(yd, FP32), f"{name} forward")
    within(gt[0], gd[0], rel(gd[0], FP32), f"{name} grad")


# -------------------------------------------------------------------------------------------------------- embedding
def test_embedding_forward_backward():
    idx = torch.tensor([[1, 2, 3, 3], [3, 0, 4, 1]])
    w = randn(5, 6, seed=13)
    for kwargs in ({}, {"padding_idx": 0}, {"scale_grad_by_freq": True}):
        yt, gt, yd, gd, _, _ = run(lambda w, kw=kwargs: F.embedding(idx.to(w.device), w, **kw), w)
        assert torch.equal(yt, yd), "embedding moves rows exactly"
        within(gt[0], gd[0], rel(gd[0], FP32), f"embedding grad {kwargs}")
        if "padding_idx" in kwargs:
            assert not gt[0][0].any(), "the padding row gets no gradient"


def test_embedding_max_norm_renormalizes_rows_in_place():
    w, idx = randn(6, 4, seed=66) * 2, torch.tensor([[1, 2, 1], [5, 0, 0]])
    wt, wc = w.to(DEV), w.clone()
    yt = F.embedding(idx.to(DEV), wt, max_norm=1.5).cpu().double()
    yc = F.embedding(idx, wc, max_norm=1.5)
    # the norm comes from the reduce unit (TF32 squares): the scale within 2 * TF32
    within(yt, yc.double(), 2 * TF32 * yc.double().abs() + 1e-6, "renormalized rows")
    within(wt.cpu().double(), wc.double(), 2 * TF32 * wc.double().abs() + 1e-6, "weight after renorm")
    assert torch.equal(wt.cpu()[[3, 4]], w[[3, 4]]), "rows not looked up stay as they were"


def test_embedding_module_bf16():
    emb = torch.nn.Embedding(7, 4, dtype=torch.bfloat16)
    idx = torch.tensor([6, 0, 6])
    out = emb.to(DEV)(idx.to(DEV)).cpu()
    assert out.dtype == torch.bfloat16 and torch.equal(out, emb.weight.detach().cpu()[idx])


# ---------------------------------------------------------------------------------------------------- normalization
def rowwise_bounds(x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, k: int, center: bool):
    """Bounds for layer norm (center) / RMS norm over the last k dims from the magnitudes the TF32 steps scale with:
    the output ``(|x| + |mean|) * rstd * |w| + |b|``; grad_x ``rstd * (|g| + mean|g| + |xhat| mean|g xhat|)`` times
    ``1 + mean|x| * rstd`` (the forward's TF32 statistics feed every term); grad_w
    ``sum |grad| (|x| + |mean|) rstd``."""
    dims = tuple(range(x.dim() - k, x.dim()))
    xd = x.double()
    mu = xd.mean(dims, keepdim=True) if center else torch.zeros(())
    var = xd.var(dims, unbiased=False, keepdim=True) if center else (xd * xd).mean(dims, keepdim=True)
    rstd = (var + (1e-5 if center else 1e-6)).rsqrt()
    wd = w.double().abs() if w is not None else torch.ones(())
    spread = (xd.abs() + mu.abs()) * rstd
    fwd = 2 * TF32 * (spread * wd + (b.double().abs() if b is not None else 0)) + 1e-6
    grad = torch.randn(x.shape, generator=gen(99)).double()  # the output gradient run() uses
    g = grad.abs() * wd
    xhat = (xd - mu).abs() * rstd
    gx = rstd * (g + g.mean(dims, keepdim=True) + xhat * (g * xhat).mean(dims, keepdim=True))
    gx = TF32 * gx * (1 + xd.abs().mean(dims, keepdim=True) * rstd) + 1e-6
    lead = tuple(range(x.dim() - k))
    gw = 2 * TF32 * (grad.abs() * spread).sum(lead) + 1e-6
    return fwd, gx, gw


@needs_norm
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(affine):
    x = randn(3, 5, 40, seed=14) * 3 + 1
    w, b = randn(40, seed=15), randn(40, seed=16)
    fn = (lambda x, w, b: F.layer_norm(x, (40,), w, b)) if affine else (lambda x: F.layer_norm(x, (5, 40)))
    yt, gt, yd, gd, _, _ = run(fn, *((x, w, b) if affine else (x,)))
    fwd, gx, gw = rowwise_bounds(x, w if affine else None, b if affine else None, 1 if affine else 2, True)
    within(yt, yd, fwd, "layer_norm forward")
    within(gt[0], gd[0], gx, "layer_norm grad x")
    if affine:
        within(gt[1], gd[1], gw, "layer_norm grad weight")
        within(gt[2], gd[2], rel(gd[2], 2**-14), "layer_norm grad bias")  # an fp32 sum of the output gradient


@needs_norm
def test_group_norm():
    x, w, b = randn(2, 6, 5, 7, seed=17) * 2, randn(6, seed=18), randn(6, seed=19)
    yt, gt, yd, gd, _, _ = run(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b)
    within(yt, yd, rel(yd, 2**-16), "group_norm forward")
    for a, r, n in zip(gt, gd, ("x", "weight", "bias")):
        within(a, r, rel(r, 2**-14), f"group_norm grad {n}")


@needs_norm
def test_batch_norm_training_updates_running_stats():
    x, w, b = randn(4, 3, 5, 5, seed=20) * 2 + 1, randn(3, seed=21), randn(3, seed=22)
    rm, rv = torch.zeros(3), torch.ones(3)
    rmt, rvt = rm.to(DEV), rv.to(DEV)
    yt, gt, yd, gd, _, _ = run(lambda x, w, b: F.batch_norm(x, rmt if x.device.type == "tt" else rm.double(),
                                                           rvt if x.device.type == "tt" else rv.double(), w, b,
                                                           training=True, momentum=0.3), x, w, b)  # fmt: skip
    within(yt, yd, rel(yd, 2**-16), "batch_norm forward")
    for a, r, n in zip(gt, gd, ("x", "weight", "bias")):
        within(a, r, rel(r, 2**-14), f"batch_norm grad {n}")
    m = x.double().mean((0, 2, 3))
    v = x.double().var((0, 2, 3), unbiased=True)
    within(rmt.cpu().double(), 0.3 * m, rel(m, 2**-16), "running_mean")
    within(rvt.cpu().double(), 0.7 + 0.3 * v, rel(v, 2**-16), "running_var")


@needs_norm
def test_batch_norm_eval_and_no_stats():
    x, w, b = randn(4, 3, 6, seed=23), randn(3, seed=24), randn(3, seed=25)
    rm, rv = randn(3, seed=26) * 0.1, torch.rand(3, generator=gen(27)) + 0.5
    fn_eval = lambda x, w, b: F.batch_norm(x, rm.to(x.device).to(x.dtype), rv.to(x.device).to(x.dtype), w, b)  # noqa: E731
    yt, gt, yd, gd, _, _ = run(fn_eval, x, w, b)
    within(yt, yd, rel(yd, 2**-16), "batch_norm eval forward")
    for a, r, n in zip(gt, gd, ("x", "weight", "bias")):
        within(a, r, rel(r, 2**-14), f"batch_norm eval grad {n}")
    yt, gt, yd, gd, _, _ = run(lambda x: F.batch_norm(x, None, None, training=True), x)
    within(yt, yd, rel(yd, 2**-16), "batch_norm without running stats")
    within(gt[0], gd[0], rel(gd[0], 2**-14), "batch_norm without running stats grad")


@needs_norm
def test_norms_bf16_round_once():
    x = randn(4, 6, 5, 5, seed=67, dtype=torch.bfloat16)
    w, b = randn(5, seed=68, dtype=torch.bfloat16), randn(5, seed=69, dtype=torch.bfloat16)
    xd = x.double()
    y = F.layer_norm(x.to(DEV), (5,), w.to(DEV), b.to(DEV)).cpu()
    ref = F.layer_norm(xd, (5,), w.double(), b.double())
    assert y.dtype == torch.bfloat16  # the TF32 steps, then one bf16 rounding of the output
    within(y.double(), ref, rowwise_bounds(x, w, b, 1, True)[0] + BF16 * ref.abs(), "bf16 layer_norm")
    for name, fn in (("group_norm", lambda t: F.group_norm(t, 3)), ("batch_norm", lambda t: F.batch_norm(
            t, None, None, training=True))):  # fmt: skip
        y, ref = fn(x.to(DEV)).cpu(), fn(xd)
        assert y.dtype == torch.bfloat16
        within(y.double(), ref, BF16 * ref.abs() + rel(ref, 2**-16), f"bf16 {name}")


@needs_norm
def test_rms_norm():
    x, w = randn(3, 4, 48, seed=28) * 2, randn(48, seed=29)
    yt, gt, yd, gd, _, _ = run(lambda x, w: F.rms_norm(x, (48,), w, eps=1e-6), x, w)
    fwd, gx, gw = rowwise_bounds(x, w, None, 1, False)
    within(yt, yd, fwd, "rms_norm forward")
    within(gt[0], gd[0], gx, "rms_norm grad x")
    within(gt[1], gd[1], gw, "rms_norm grad weight")


# -------------------------------------------------------------------------------------------------------- attention
def _sdpa_bounds(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[float, float]:
    e_s = TF32 * scale * (q.double().abs() @ k.double().abs().transpose(-1, -2).repeat_interleave(
        q.shape[-3] // k.shape[-3], -3)).max().item()  # fmt: skip
    fwd = (2 * (e_s + BF16) + 2**-10) * v.abs().max().item()
    return fwd, 8 * (e_s + BF16)


ATTENTION = [
    ("plain", {}, (2, 3, 8, 16), (2, 3, 10, 16)),
    ("causal", {"is_causal": True}, (2, 3, 12, 16), (2, 3, 12, 16)),
    ("scale", {"scale": 0.4}, (1, 2, 9, 8), (1, 2, 33, 8)),
    ("gqa", {"enable_gqa": True}, (2, 4, 8, 16), (2, 2, 10, 16)),
    ("3-d", {}, (3, 8, 16), (3, 10, 16)),
]


@pytest.mark.parametrize("name,kw,qs,ks", ATTENTION, ids=[a[0] for a in ATTENTION])
def test_scaled_dot_product_attention(name, kw, qs, ks):
    q, k, v = randn(*qs, seed=30), randn(*ks, seed=31), randn(*ks, seed=32)
    yt, gt, yd, gd, _, _ = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), q, k, v)
    fwd, grad_rel = _sdpa_bounds(q, k, v, kw.get("scale") or 1 / math.sqrt(qs[-1]))
    within(yt, yd, fwd, f"sdpa {name} forward")
    for a, r, n in zip(gt, gd, "qkv"):
        within(a, r, rel(r, grad_rel), f"sdpa {name} grad {n}")


def test_sdpa_masks_and_the_fused_entry_point():
    q, k, v = randn(2, 2, 8, 16, seed=33), randn(2, 2, 12, 16, seed=34), randn(2, 2, 12, 16, seed=35)
    keep = torch.rand(8, 12, generator=gen(36)) > 0.3
    keep[:, 0] = True
    bias = randn(2, 1, 8, 12, seed=37)
    fwd, grad_rel = _sdpa_bounds(q, k, v, 0.25)
    for mask in (keep, bias):

        def attend(q, k, v, mask=mask):
            m = mask.to(q.device) if mask.dtype == torch.bool else mask.to(q.device).to(q.dtype)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

        yt, gt, yd, gd, _, _ = run(attend, q, k, v)
        within(yt, yd, fwd * (2 if mask.dtype != torch.bool else 1), f"sdpa mask {mask.dtype}")
        for a, r, n in zip(gt, gd, "qkv"):
            within(a, r, rel(r, 2 * grad_rel), f"sdpa mask {mask.dtype} grad {n}")
    qt = q.to(DEV).requires_grad_(True)
    with kohakutt.numerics(fp32_matmul="high"):  # float32 "highest" attention takes the math path
        y = F.scaled_dot_product_attention(qt, k.to(DEV), v.to(DEV))
    assert type(y.grad_fn).__name__ == "ScaledDotProductFusedAttentionOverrideableBackward0"


def test_sdpa_bf16():
    q, k, v = (randn(2, 2, 8, 32, seed=s, dtype=torch.bfloat16) for s in (38, 39, 40))
    yt = F.scaled_dot_product_attention(q.to(DEV), k.to(DEV), v.to(DEV)).cpu()
    assert yt.dtype == torch.bfloat16
    yd = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    # exact bf16 products; P rounded to bf16, the result rounded once: 3 roundings of 2^-8 of max|v|
    within(yt.double(), yd, 3 * BF16 * v.double().abs().max().item(), "bf16 sdpa")


# ----------------------------------------------------------------------------------------------------------- losses
TARGET = torch.tensor([1, 2, -100, 0, 6, 3])
WEIGHT = torch.rand(7, generator=gen(42)) + 0.5


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nll_and_cross_entropy(reduction, weighted):
    x = randn(6, 7, seed=43)
    for fn in (F.nll_loss, F.cross_entropy):

        def loss(x, fn=fn):
            w = WEIGHT.to(x.device).to(x.dtype) if weighted else None
            return fn(x, TARGET.to(x.device), weight=w, reduction=reduction)

        yt, gt, yd, gd, _, _ = run(loss, x)
        # sums go through the reduce unit (TF32 terms); mean divides by the TF32-summed weights
        within(yt, yd, rel(yd, 3 * TF32), f"{fn.__name__} {reduction}")
        within(gt[0], gd[0], rel(gd[0], 3 * TF32), f"{fn.__name__} {reduction} grad")


def test_nll_loss2d_and_unbatched():
    x, t = randn(2, 5, 3, 4, seed=44), torch.randint(0, 5, (2, 3, 4), generator=gen(45))
    yt, gt, yd, gd, _, _ = run(lambda x: F.nll_loss(x, t.to(x.device), ignore_index=2), x)
    within(yt, yd, rel(yd, 3 * TF32), "nll_loss2d")
    within(gt[0], gd[0], rel(gd[0], 3 * TF32), "nll_loss2d grad")
    yt, gt, yd, gd, _, _ = run(lambda x: F.cross_entropy(x, torch.tensor(3).to(x.device)), randn(7, seed=46))
    within(yt, yd, rel(yd, 3 * TF32), "unbatched cross_entropy")
    within(gt[0], gd[0], rel(gd[0], 3 * TF32), "unbatched cross_entropy grad")


def test_nll_loss_target_out_of_range_raises():
    with pytest.raises(CommandError, match="IndexOutOfRangeError: gather: index 5 is out of range"):
        F.nll_loss(randn(2, 3).to(DEV), torch.tensor([0, 5]).to(DEV)).cpu()  # surfaces at the next sync


LOSSES = [
    ("mse", lambda x, y, r: F.mse_loss(x, y, reduction=r)),
    ("smooth_l1", lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.5)),
    ("smooth_l1 beta 0", lambda x, y, r: torch.ops.aten.smooth_l1_loss(x, y, {"none": 0, "mean": 1, "sum": 2}[r], 0.0)),
    ("huber", lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=0.7)),
]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("name,fn", LOSSES, ids=[loss[0] for loss in LOSSES])
def test_regression_losses(name, fn, reduction):
    x, y = randn(5, 8, seed=47), randn(5, 8, seed=48)
    yt, gt, yd, gd, _, _ = run(lambda x, y: fn(x, y, reduction), x, y)
    within(yt, yd, rel(yd, 2 * TF32), f"{name} {reduction}")  # SFPU terms, then a TF32 sum
    for a, r in zip(gt, gd):
        within(a, r, rel(r, FP32 * 4), f"{name} {reduction} grad")


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_binary_cross_entropy(reduction):
    x = torch.rand(5, 8, generator=gen(49)) * 0.98 + 0.01
    t, w = torch.rand(5, 8, generator=gen(50)), torch.rand(5, 8, generator=gen(51))

    def loss(x):
        return F.binary_cross_entropy(x, t.to(x.device).to(x.dtype), w.to(x.device).to(x.dtype), reduction=reduction)

    yt, gt, yd, gd, _, _ = run(loss, x)
    within(yt, yd, rel(yd, 2 * TF32), f"bce {reduction}")
    within(gt[0], gd[0], rel(gd[0], FP32 * 8), f"bce {reduction} grad")


def test_binary_cross_entropy_clamps_logs_like_pytorch():
    x, t = torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 0.5])
    yt = F.binary_cross_entropy(x.to(DEV), t.to(DEV), reduction="none").cpu()
    assert torch.equal(yt, F.binary_cross_entropy(x, t, reduction="none"))  # -100 where log(0)


# ----------------------------------------------------------------------------------------------------------- models
def _compare_models(cpu_model: torch.nn.Module, make_loss, seed: int) -> None:
    """One forward + backward of ``cpu_model`` on tt (float32) and on the CPU (float64), same weights."""
    ref = cpu_model.double()
    tt = __import__("copy").deepcopy(cpu_model).float().to(DEV)
    loss_t = make_loss(tt, DEV, torch.float32)
    loss_d = make_loss(ref, "cpu", torch.float64)
    loss_t.backward()
    loss_d.backward()
    within(loss_t.detach().cpu().double(), loss_d.detach(), rel(loss_d, 2**-6), "loss")
    grads = [(n, pt.grad.cpu().double(), pd.grad) for (n, pt), (_, pd) in zip(tt.named_parameters(),
                                                                              ref.named_parameters())]  # fmt: skip
    noise = 2**-10 * max(r.abs().max().item() for _, _, r in grads)
    for n, a, r in grads:
        within(a, r, rel(r, 2**-6, noise), f"grad of {n}")


@needs_norm
def test_small_cnn_forward_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    )  # fmt: skip
    x, y = randn(4, 3, 12, 12, seed=52), torch.randint(0, 10, (4,), generator=gen(53))
    _compare_models(model, lambda m, d, dt: F.cross_entropy(m(x.to(dt).to(d)), y.to(d)), 0)


class Block(torch.nn.Module):
    """A pre-norm transformer block: LayerNorm, multi-head self-attention (SDPA), LayerNorm, GELU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1]).to(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=True, attn_mask=causal)[0]
        return x + self.mlp(self.ln2(x))


@needs_norm
def test_transformer_block_forward_backward():
    torch.manual_seed(0)
    x = randn(2, 12, 32, seed=54)
    _compare_models(Block(), lambda m, d, dt: (m(x.to(dt).to(d)) ** 2).mean(), 0)


class OpsSeen(torch.autograd.profiler.profile):
    """Records the names of the aten ops run (the fast paths' entry points among them)."""

    @property
    def ops(self) -> set[str]:
        return {e.name for e in self.function_events}


def _graph_names(t: torch.Tensor) -> set[str]:
    seen, todo, names = set(), [t.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        todo.extend(f for f, _ in fn.next_functions)
    return names


@needs_norm
def test_transformer_block_uses_the_fused_attention():
    """float32 attention takes the fused kernel under "high" / "medium"; under "highest" (PyTorch's default) its
    math path, float32-accurate (tests/frontends/torch/test_precision.py); bfloat16 always the fused kernel."""
    x = randn(2, 12, 32, seed=58)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        out = Block().to(DEV)(x.to(DEV))
    finally:
        torch.set_float32_matmul_precision(before)
    assert "ScaledDotProductFusedAttentionOverrideableBackward0" in _graph_names(out)
    assert "ScaledDotProductFusedAttentionOverrideableBackward0" not in _graph_names(Block().to(DEV)(x.to(DEV)))
    out = Block().to(DEV).bfloat16()(x.to(DEV).bfloat16())
    assert "ScaledDotProductFusedAttentionOverrideableBackward0" in _graph_names(out)


@needs_norm
def test_inference_mode_takes_the_tt_kernels():
    q, k, v = randn(2, 2, 8, 16, seed=59), randn(2, 2, 8, 16, seed=60), randn(2, 2, 8, 16, seed=61)
    x, w = randn(3, 32, seed=62), randn(32, seed=63)
    with torch.inference_mode():
        y = F.scaled_dot_product_attention(q.to(DEV), k.to(DEV), v.to(DEV), is_causal=True).cpu().double()
        r = F.rms_norm(x.to(DEV), (32,), w.to(DEV)).cpu().double()
    fwd, _ = _sdpa_bounds(q, k, v, 0.25)
    within(y, F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True), fwd, "sdpa")
    within(r, F.rms_norm(x.double(), (32,), w.double()), rowwise_bounds(x, w, None, 1, False)[0], "rms_norm")


@needs_norm
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_inference_fast_path(need_weights):
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = randn(2, 10, 32, seed=64)
    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    tt = __import__("copy").deepcopy(mha).to(DEV)
    with torch.no_grad(), OpsSeen() as seen:
        xt = x.to(DEV)  # one tensor as query, key and value: self-attention, the fast path's case
        out, wts = tt(xt, xt, xt, key_padding_mask=pad.to(DEV), need_weights=need_weights)
    assert "aten::_native_multi_head_attention" in seen.ops
    with torch.no_grad():
        xd = x.double()
        ref, rwts = mha.double()(xd, xd, xd, key_padding_mask=pad, need_weights=need_weights)
    within(out.cpu().double(), ref, rel(ref, 2**-6), "MultiheadAttention output")
    if need_weights:
        within(wts.cpu().double(), rwts, rel(rwts, 2**-6), "MultiheadAttention weights")
    else:
        assert wts is None and rwts is None


@needs_norm
@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_encoder_layer_inference_fast_path(norm_first, activation):
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first, activation=activation)
    layer.eval()
    x = randn(2, 9, 32, seed=65)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[0, 6:] = True
    tt = __import__("copy").deepcopy(layer).to(DEV)
    with torch.no_grad(), OpsSeen() as seen:
        out = tt(x.to(DEV), src_key_padding_mask=pad.to(DEV)).cpu().double()
    assert "aten::_transformer_encoder_layer_fwd" in seen.ops
    with torch.no_grad():
        ref = layer.double()(x.double(), src_key_padding_mask=pad)
    within(out, ref, rel(ref, 2**-6), "TransformerEncoderLayer")


# ------------------------------------------------------------------------------------------------- channel_shuffle
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_channel_shuffle_moves_values_exactly(groups):
    x = randn(2, 6, 3, 2, seed=40)
    for dtype in (torch.float32, torch.bfloat16):
        t = x.to(dtype)
        assert torch.equal(F.channel_shuffle(t.to(DEV), groups).cpu(), F.channel_shuffle(t, groups))
        assert torch.equal(torch.nn.ChannelShuffle(groups)(t.to(DEV)).cpu(), F.channel_shuffle(t, groups))
    xt = x.to(DEV).requires_grad_()
    F.channel_shuffle(xt, groups).backward(randn(2, 6, 3, 2, seed=41).to(DEV))
    xc = x.clone().requires_grad_()
    F.channel_shuffle(xc, groups).backward(randn(2, 6, 3, 2, seed=41))
    assert torch.equal(xt.grad.cpu(), xc.grad)
    with pytest.raises(RuntimeError, match="divisible"):
        F.channel_shuffle(x.to(DEV), 4)
