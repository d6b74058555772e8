"""Ops that subtract a maximum or compare reduced values with their inputs, on extreme rows, against CPU float64.

A float32 value read through the FPU's source registers is cut to TF32 (10 mantissa bits), so a maximum taken there
need not be an element of the row: ``x - max`` of the largest element can then be up to 2^-10 |max| instead of 0,
and ``logsumexp([1.03e6])`` used to give inf. These tests run each op on rows with large magnitudes (1e6, 3e38),
near-ties inside one TF32 step, exact ties, all -inf, +inf and NaN, in float32 and bfloat16, forward and backward.

The reference is the op in float64 on the values the card holds (a bfloat16 input is rounded on the host first),
rounded to the dtype; where float32 itself overflows (a CPU float32 result of inf), the CPU in the dtype is the
reference. Bounds: float32, a few float32 roundings (2^-20 relative, own kernels); bfloat16, two bf16 roundings
(2^-7). Ties: where PyTorch leaves the order of equal values open (topk), the indices are checked by the values
they select.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from kohakutt import config

DEV = torch.device("tt", 0)
OWN = bool(config.get("KTT_CUSTOM_KERNELS"))
INF, NAN = math.inf, math.nan

ROWS = {
    "1e6": [1.03e6, 1.03e6 + 0.0625, 1.0300001e6, -5.0],
    "3e38": [3.0e38, 2.9999998e38, 1e38, -3e38],
    "-3e38": [-3.0e38, -2.9999998e38, -3.3e38, -3.1e38],
    "near_ties": [1.0000001, 1.0000002, 1.0, 0.9999999],
    "ties": [7.0000005, 7.0000005, 7.0, 7.0000005],
    "all_-inf": [-INF, -INF, -INF, -INF],
    "some_-inf": [-INF, 2.0, -INF, 1.0000001],
    "+inf": [INF, 1.0, INF, -INF],
    "nan": [NAN, 1.0, 2.0, 3.0],
}

FORWARD = {
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "logsumexp_dims": lambda x: torch.logsumexp(x.reshape(2, 2, 2), (0, 2)),
    "logsumexp_all": lambda x: torch.logsumexp(x, (0, 1)),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "logcumsumexp": lambda x: torch.logcumsumexp(x, -1),
    "amax": lambda x: torch.amax(x, -1),
    "amin": lambda x: torch.amin(x, -1),
    "amax_dims": lambda x: x.reshape(2, 2, 2).amax((0, 2)),
    "max": lambda x: x.max(),
    "max_dim": lambda x: x.max(-1).values,
    "max_dim_index": lambda x: x.max(-1).indices,
    "min_dim_index": lambda x: x.min(-1).indices,
    "argmax": lambda x: x.argmax(-1),
    "argmin": lambda x: x.argmin(-1),
    "topk": lambda x: x.topk(2, -1).values,
    "topk_selects": lambda x: x.gather(-1, x.topk(2, -1).indices),
    "sort": lambda x: x.sort(-1).values,
    "cummax": lambda x: x.cummax(-1).values,
    "clamp_by_amax": lambda x: x.clamp(max=x.amax(-1, keepdim=True)),
    "eq_amax": lambda x: x == x.amax(-1, keepdim=True),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.tensor([1, 0], device=x.device)),
    "max_pool_index": lambda x: F.max_pool1d(x.unsqueeze(1), 2, return_indices=True)[1],
    "max_pool": lambda x: F.max_pool1d(x.unsqueeze(1), 2),
}

BACKWARD = {
    "amax": lambda x: torch.amax(x, -1).sum(),
    "max": lambda x: x.max(),
    "max_dim": lambda x: x.max(-1).values.sum(),
    "logsumexp": lambda x: torch.logsumexp(x, -1).sum(),
    "softmax": lambda x: (torch.softmax(x, -1) * torch.arange(4.0, device=x.device)).sum(),
    "log_softmax": lambda x: (torch.log_softmax(x, -1) * torch.arange(4.0, device=x.device)).sum(),
    "max_pool": lambda x: F.max_pool1d(x.unsqueeze(1), 2).sum(),
    "cross_entropy": lambda x: F.cross_entropy(x, torch.tensor([1, 0], device=x.device)),
}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _rows(name: str, dtype: torch.dtype) -> torch.Tensor:
    r = ROWS[name]
    return torch.tensor([r, r[::-1]], dtype=torch.float32).to(dtype)


def _check(got: torch.Tensor, x: torch.Tensor, fn, dtype: torch.dtype) -> None:
    ref64 = fn(x.double())
    ref = ref64.to(dtype) if ref64.is_floating_point() else ref64
    if ref64.is_floating_point():
        same_dtype = fn(x)  # where float32 itself overflows, the CPU in the dtype is the reference
        ref = torch.where(torch.isinf(same_dtype) & torch.isfinite(ref), same_dtype, ref)
        tol = 2.0**-20 if dtype == torch.float32 else 2.0**-7
        torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=1e-30, equal_nan=True)
    else:
        assert torch.equal(got.to(ref.dtype), ref), (got, ref)


pytestmark = pytest.mark.skipif(not OWN, reason="bounds of Kohaku-TT's own kernels (KTT_CUSTOM_KERNELS=1)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("op", FORWARD)
def test_forward_on_extreme_rows(op: str, row: str, dtype: str) -> None:
    dt = DTYPES[dtype]
    x = _rows(row, dt)
    _check(FORWARD[op](x.to(DEV)).cpu(), x, FORWARD[op], dt)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("op", BACKWARD)
def test_backward_on_extreme_rows(op: str, row: str, dtype: str) -> None:
    dt = DTYPES[dtype]
    x = _rows(row, dt)
    xt = x.to(DEV).requires_grad_()
    BACKWARD[op](xt).backward()

    def grad(t: torch.Tensor) -> torch.Tensor:
        t = t.clone().requires_grad_()
        BACKWARD[op](t).backward()
        return t.grad

    got = xt.grad.cpu()
    ref = grad(x.double()).to(dt)
    if not torch.allclose(got.double(), ref.double(), rtol=2.0**-7, atol=1e-30, equal_nan=True):
        ref = grad(x)  # the gradient the CPU gives in the dtype (its roundings: bf16's logsumexp result, ...)
    tol = 2.0**-20 if dt == torch.float32 else 2.0**-6
    # bfloat16: a gradient such as g - exp(y) * sum(g) cancels, so the forward's bf16 rounding of y (which may differ
    # from the CPU's by an ulp: TT-NN's kernels round their own way) shows as an absolute error at the scale of the
    # largest gradient, not relative to a cancelled element
    atol = 2.0**-20 if dt == torch.float32 else 2.0**-6 * float(ref.double().abs().nan_to_num(0, 0, 0).max())
    torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=max(atol, 2.0**-20), equal_nan=True)


def test_logsumexp_of_one_large_value() -> None:
    """The reported case: the max is subtracted exactly, so exp(x - max) of the largest element is exp(0) = 1."""
    for v in (1.03e6, 3e38, -3e38, 123456.789):
        x = torch.tensor([v])
        assert torch.logsumexp(x.to(DEV), 0).item() == torch.logsumexp(x, 0).item()


# ------------------------------------------------------------------------------ found by the extreme-input sweep
def _ref(fn, x: torch.Tensor) -> torch.Tensor:
    return fn(x.double()).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "name",
    ["threshold", "hardshrink", "softshrink", "relu_grad", "hardtanh_grad", "hardshrink_grad", "threshold_grad"],
)
def test_nan_is_kept(name: str, dtype: str) -> None:
    """PyTorch tests ``x <= threshold`` (and ``-lambd <= x <= lambd``), so a NaN input gives NaN (its gradient passes
    the incoming gradient); these once gave the fill value."""
    x = torch.tensor([NAN, -2.0, 0.25, 3.0], dtype=DTYPES[dtype])
    fns = {
        "threshold": lambda t: F.threshold(t, 1.0, -5.0),
        "hardshrink": F.hardshrink,
        "softshrink": F.softshrink,
    }
    if name in fns:
        _check(fns[name](x.to(DEV)).cpu(), x, fns[name], DTYPES[dtype])
        return
    fn = {"relu_grad": F.relu, "hardtanh_grad": F.hardtanh, "hardshrink_grad": F.hardshrink,
          "threshold_grad": lambda t: F.threshold(t, 1.0, -5.0)}[name]  # fmt: skip
    xt, xc = x.to(DEV).requires_grad_(), x.clone().requires_grad_()
    fn(xt).sum().backward()
    fn(xc).sum().backward()
    assert torch.equal(xt.grad.cpu(), xc.grad), (xt.grad, xc.grad)


def test_i0_of_huge_values_is_inf() -> None:
    x = torch.tensor([3e38, -3e38, 3.4028235e38, 100.0, -20.0])  # i0(inf) is NaN in PyTorch (float64 too)
    torch.testing.assert_close(torch.i0(x.to(DEV)).cpu(), _ref(torch.i0, x), rtol=2.0**-20, atol=0)


def test_sinc_of_bfloat16_near_integers() -> None:
    """pi x was rounded to bfloat16 before the sine: sinc(1) came out 3e-4 instead of 0."""
    x = torch.tensor([1.0, -1.0, 2.0, 7.0, 0.5, 0.0, 100.0], dtype=torch.bfloat16)
    got = torch.sinc(x.to(DEV)).cpu().double()
    ref = torch.sinc(x.double())
    assert torch.all((got - ref).abs() <= 2.0**-8 * ref.abs() + 1e-6), (got, ref)


NORM_ROWS = [[1e20, 0.0, -5e19, 3.3e19], [3e38, 0.0, -1.5e38, 1e38], [1e-30, 3e-30, 0.0, -2e-30], [5e30] * 4]


@pytest.mark.parametrize(
    "name",
    ["norm2", "norm3", "norm_half", "std", "var", "var_mean", "std_mean", "mean", "layer_norm", "rms_norm"],
)
def test_statistics_of_large_and_tiny_rows(name: str) -> None:
    """Squares of 1e20 overflow float32 (and of 1e-30 underflow) although the norm, std or normalized row is an
    ordinary number: the own kernels scale such a row by a power of two first. The float64 result, rounded to
    float32, is the reference (inf only where it is beyond float32)."""
    fn = {
        "norm2": lambda t: torch.linalg.vector_norm(t, dim=1),
        "norm3": lambda t: torch.linalg.vector_norm(t, 3, dim=1),
        "norm_half": lambda t: torch.linalg.vector_norm(t, 0.5, dim=1),
        "std": lambda t: t.std(1),
        "var": lambda t: t.var(1),
        "var_mean": lambda t: torch.cat(torch.var_mean(t, 1)),
        "std_mean": lambda t: torch.cat(torch.std_mean(t, 1)),
        "mean": lambda t: t.mean(1),
        "layer_norm": lambda t: F.layer_norm(t, (4,)),
        "rms_norm": lambda t: F.rms_norm(t, (4,)),
    }[name]
    x = torch.tensor(NORM_ROWS)
    got = fn(x.to(DEV)).cpu().double()
    ref = fn(x.double()).float().double()
    torch.testing.assert_close(got, ref, rtol=2.0**-19, atol=2.0**-60, equal_nan=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["batch_norm", "group_norm", "instance_norm", "norm", "normalize", "cosine"])
def test_channel_statistics_of_large_values(name: str, dtype: str) -> None:
    """Batch / group / instance norm of 1e20s gave 0 (their float32 var overflowed, so rstd was 0), and a bfloat16
    2-norm of 1e20s was inf (so normalize gave 0 and cosine similarity 0)."""
    dt = DTYPES[dtype]
    x = torch.tensor([[1e20, 0.0, -5e19, 3.3e19], [1e30, 2e29, -7e29, 0.0]]).to(dt)
    fn = {
        "batch_norm": lambda t: F.batch_norm(t.T, None, None, training=True),
        "group_norm": lambda t: F.group_norm(t.reshape(2, 4, 1), 2),
        "instance_norm": lambda t: F.instance_norm(t.reshape(2, 1, 4)),
        "norm": lambda t: torch.linalg.vector_norm(t, dim=1),
        "normalize": lambda t: F.normalize(t, dim=1),
        "cosine": lambda t: F.cosine_similarity(t, t.flip(1), dim=1),
    }[name]
    got = fn(x.to(DEV)).cpu().double()
    ref = fn(x.double())
    tol = 2.0**-19 if dt == torch.float32 else 2.0**-6
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
