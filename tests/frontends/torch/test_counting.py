"""unique, unique_consecutive, bincount and histc on tt (kohakutt/frontends/torch/aten/counting.py) against the CPU.

Their results are exact: values moved, integer counts, positions; a float32 histogram counts exactly below 2^24 and
places every element in the bin the CPU's float32 arithmetic gives it. So tt must match the CPU's results exactly:
values, dtypes and shapes (every output, also those PyTorch returns empty when not asked for).
"""

from __future__ import annotations

import pytest
import torch

import kohakutt  # noqa: F401  (registers the tt device)
from kohakutt.errors import DtypeError

DEV = torch.device("tt", 0)
NAN = float("nan")
aten = torch.ops.aten


def _tt(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def same_outputs(got, ref, what: str) -> None:
    got = got if isinstance(got, tuple) else (got,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(got) == len(ref), what
    for i, (g, r) in enumerate(zip(got, ref)):
        g = g.cpu()
        assert g.dtype == r.dtype and g.shape == r.shape, f"{what} output {i}: {g.dtype}{tuple(g.shape)} != " \
            f"{r.dtype}{tuple(r.shape)}"  # fmt: skip
        assert torch.equal(g, r) or torch.allclose(g, r, 0, 0, equal_nan=True), f"{what} output {i}: {g} != {r}"


def run_both(fn, *args, **kw):
    return fn(*[_tt(a) for a in args], **kw), fn(*args, **kw)


def _g(seed):
    return torch.Generator().manual_seed(seed)


X = torch.tensor([[3, 1], [3, 1], [2, 2]])
FLOATS = torch.tensor([NAN, 1.0, NAN, -0.0, 0.0, 1.0, -2.5])


# ---------------------------------------------------------------------------------------------------------- unique
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
@pytest.mark.parametrize(
    "x",
    [X, FLOATS, FLOATS.bfloat16(), torch.tensor([True, False, True]), torch.tensor(3.0), torch.zeros(0, 2),
     torch.randint(0, 9, (4, 10), generator=_g(0))],
    ids=["int", "float-nan", "bf16", "bool", "0-d", "empty", "random"],
)  # fmt: skip
def test_unique_matches_cpu(x, inverse, counts):
    for sorted_ in (True, False):  # the CPU sorts either way
        got, ref = run_both(torch._unique2, x, sorted_, inverse, counts)
        same_outputs(got, ref, f"_unique2 sorted={sorted_}")
    got, ref = run_both(torch.ops.aten._unique, x, True, inverse)
    same_outputs(got, ref, "_unique")
    got, ref = run_both(aten.unique_consecutive, x, inverse, counts, None)
    same_outputs(got, ref, "unique_consecutive")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_dim_matches_cpu(dim):
    x = torch.randint(0, 2, (5, 3, 4), generator=_g(1))
    for t in (x, x.float(), x.bfloat16()):
        for consecutive in (False, True):
            if consecutive:
                got, ref = run_both(aten.unique_dim_consecutive, t, dim, False, False)
                same_outputs(got, ref, "unique_dim_consecutive")
                got, ref = run_both(aten.unique_consecutive, t, True, True, dim)
            else:
                got, ref = run_both(aten.unique_dim, t, dim, True, False, False)  # inverse and counts anyway
            same_outputs(got, ref, f"unique dim={dim} consecutive={consecutive} {t.dtype}")


def test_unique_dim_empty_and_errors_as_the_cpu():
    for shape, dim in [((0, 3), 0), ((2, 0), 1), ((3, 0, 2), 1)]:
        got, ref = run_both(aten.unique_dim, torch.zeros(shape), dim, True, True, True)
        same_outputs(got, ref, f"empty {shape} dim {dim}")
    for shape, dim, message in [((2, 0), 0, "aren't selected"), ((0, 0), 0, "more than one")]:
        with pytest.raises(RuntimeError, match=message):
            aten.unique_dim(torch.zeros(shape, device=DEV), dim, True, True, True)


def test_torch_unique_api_and_the_synchronization():
    """torch.unique's Python API (return_inverse / return_counts / dim) on tt; the number of distinct values is read
    from the card (a data-dependent size, as on CUDA), and the device stays usable after."""
    x = torch.randint(0, 50, (300,), generator=_g(2))
    got, ref = run_both(torch.unique, x, return_inverse=True, return_counts=True)
    same_outputs(got, ref, "torch.unique")
    got, ref = run_both(torch.unique, X, dim=1, return_inverse=True)
    same_outputs(got, ref, "torch.unique dim=1")
    got, ref = run_both(torch.unique_consecutive, torch.tensor([1, 1, 2, 2, 3, 1, 1, 2]), return_counts=True)
    same_outputs(got, ref, "torch.unique_consecutive")
    u, inv = torch.unique(x.to(DEV), return_inverse=True)
    assert torch.equal(u[inv].cpu(), x)  # the inverse rebuilds the input


# -------------------------------------------------------------------------------------------------------- bincount
@pytest.mark.parametrize(
    ("x", "weights", "minlength"),
    [(torch.tensor([1, 2, 2, 5]), None, 0), (torch.tensor([1, 2, 2, 5]), None, 9),
     (torch.tensor([1, 2, 2, 5], dtype=torch.int32), torch.tensor([0.5, 1.0, 2.0, 3.0]), 0),
     (torch.tensor([], dtype=torch.long), None, 3), (torch.tensor([], dtype=torch.long), None, 0),
     (torch.randint(0, 40, (500,), generator=_g(3)), torch.rand(500, generator=_g(4)), 50),
     (torch.tensor([0, 0, 0], dtype=torch.uint8), None, 0)],
)  # fmt: skip
def test_bincount_matches_cpu(x, weights, minlength):
    """Counts are exact; float32 weights are added in index order in fp32, as the CPU adds them."""
    got = torch.bincount(x.to(DEV), None if weights is None else weights.to(DEV), minlength=minlength)
    same_outputs(got, torch.bincount(x, weights, minlength=minlength), "bincount")
    out = torch.empty(0, dtype=got.dtype, device=DEV)
    aten.bincount.out(x.to(DEV), None if weights is None else weights.to(DEV), minlength, out=out)
    same_outputs(out, torch.bincount(x, weights, minlength=minlength), "bincount out=")


def test_bincount_refusals():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1], device=DEV))
    with pytest.raises(RuntimeError, match="1-d"):
        torch.bincount(torch.ones(2, 2, dtype=torch.long, device=DEV))
    with pytest.raises(DtypeError, match="float64"):  # the CPU's histogram of bfloat16 weights is float64
        torch.bincount(torch.tensor([1], device=DEV), torch.ones(1, dtype=torch.bfloat16, device=DEV))
    assert torch.bincount(torch.tensor([1, 1], device=DEV)).cpu().tolist() == [0, 2]  # the device is usable


# ----------------------------------------------------------------------------------------------------------- histc
@pytest.mark.parametrize(
    ("x", "bins", "lo", "hi"),
    [(torch.tensor([1.0, 2, 1]), 4, 0, 3), (torch.tensor([1.0, 2, 1, 7, NAN, -1]), 4, 0, 3),
     (torch.tensor([1.0, 2, 1]), 4, 0, 0), (torch.tensor([1.0, 1, 1]), 4, 0, 0),
     (torch.randn(2000, generator=_g(5)), 37, 0, 0), (torch.randn(3, 100, generator=_g(6)), 10, -1.3, 2.1),
     (torch.arange(101.0), 100, 0, 100), (torch.tensor([]), 5, 0, 1)],
)  # fmt: skip
def test_histc_matches_cpu(x, bins, lo, hi):
    """Bins are computed in fp32 as the CPU computes them (x == max in the last bin, outside and NaN skipped)."""
    got = torch.histc(x.to(DEV), bins=bins, min=lo, max=hi)
    same_outputs(got, torch.histc(x, bins=bins, min=lo, max=hi), "histc")
    out = torch.empty(0, device=DEV)
    torch.histc(x.to(DEV), bins=bins, min=lo, max=hi, out=out)
    same_outputs(out, torch.histc(x, bins=bins, min=lo, max=hi), "histc out=")


def test_histc_bfloat16_counts_in_fp32():
    """bfloat16 input: the bins of the CPU's float32 arithmetic on the same values; counts past 256 stay exact in
    fp32 until the one rounding into the bfloat16 result (the CPU adds in bfloat16, which stops at 256)."""
    x = torch.randn(1000, generator=_g(7)).bfloat16()
    ref = torch.histc(x.float(), bins=7).bfloat16()
    same_outputs(torch.histc(x.to(DEV), bins=7), ref, "histc bf16")
    many = torch.zeros(600, dtype=torch.bfloat16)
    assert torch.histc(many.to(DEV), bins=1).cpu().item() == 600  # 600 is a bfloat16 value


def test_histc_refusals_as_the_cpu():
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(torch.tensor([1.0, float("inf")], device=DEV), bins=3)
    with pytest.raises(DtypeError, match="floating point"):
        torch.histc(torch.tensor([1, 2], device=DEV), bins=3)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(torch.tensor([1.0], device=DEV), bins=3, min=2, max=1)
