"""Searching and counting on tt (kohakutt/frontends/torch/aten/search.py) against the CPU.

Every result here is an exact function of its inputs (equality tests, binary searches, integer counts), so tt must
give the CPU's values exactly, dtype and shape included.
"""

from __future__ import annotations

import pytest
import torch

import kohakutt  # noqa: F401  (registers the tt device)
from kohakutt.frontends.torch.aten import search

DEV = torch.device("tt", 0)
NAN, INF = float("nan"), float("inf")


def _tt(x):
    return x.to(DEV) if isinstance(x, torch.Tensor) else x


def same(got: torch.Tensor, ref: torch.Tensor, what: str = "") -> None:
    got = got.cpu()
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} != {ref.dtype}"
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert torch.equal(got, ref) or (got.is_floating_point() and torch.allclose(got, ref, 0, 0, equal_nan=True)), (
        f"{what}: {got} != {ref}"
    )


# ------------------------------------------------------------------------------------------------------------ isin
ISIN_CASES = [
    (torch.tensor([1, 2, 3, 50256]), torch.tensor([50256]), {}),
    (torch.tensor([[1, 2], [3, 4]]), torch.tensor([2, 3, 2]), {"invert": True}),
    (torch.tensor([1.0, NAN, INF, -0.0]), torch.tensor([NAN, 0.0, 1.0]), {}),
    (torch.tensor([1.0, NAN, INF, 3.0, -INF]), torch.tensor([NAN, INF, 3.0, NAN]), {}),
    (torch.tensor([1.0, NAN, INF, 3.0]), torch.tensor([NAN, 3.0]), {"assume_unique": True}),
    (torch.tensor([1, 2, 3]), 2, {}),
    (torch.tensor([1, 2, 3]), 2.5, {}),
    (3, torch.tensor([1, 2, 3]), {}),
    (7, torch.tensor([1, 2, 3]), {"invert": True}),
    (torch.tensor([1, 2, 3]), torch.tensor([2.0, 3.5]), {}),
    (torch.tensor([1.5, 2.0, 3.0]), torch.tensor([2, 3]), {}),
    (torch.randint(0, 50, (7, 9), generator=torch.Generator().manual_seed(0)),
     torch.randint(0, 50, (6, 5), generator=torch.Generator().manual_seed(1)), {}),
    (torch.randn(6, generator=torch.Generator().manual_seed(2)).bfloat16(),
     torch.randn(6, generator=torch.Generator().manual_seed(2)).bfloat16()[::2], {}),
    (torch.tensor([], dtype=torch.long), torch.tensor([1]), {}),
    (torch.tensor([1, 2]), torch.tensor([], dtype=torch.long), {}),
    (torch.tensor([1, 2]), torch.tensor([], dtype=torch.long), {"invert": True}),
    (torch.tensor(5), torch.tensor([[5]]), {}),
]  # fmt: skip


@pytest.mark.parametrize("way", ["broadcast", "sorted"])
@pytest.mark.parametrize("case", range(len(ISIN_CASES)))
def test_isin_matches_cpu(case, way, monkeypatch):
    if way == "sorted":  # the sort + binary search path, which large inputs take
        monkeypatch.setattr(search, "BROADCAST_LIMIT", 0)
    e, t, kw = ISIN_CASES[case]
    same(torch.isin(_tt(e), _tt(t), **kw), torch.isin(e, t, **kw), f"isin case {case}")


def test_isin_out_and_large_inputs_take_the_sorted_path():
    g = torch.Generator().manual_seed(3)
    e = torch.randint(0, 100_000, (3000,), generator=g)
    t = torch.randint(0, 100_000, (2000,), generator=g)
    assert e.numel() * t.numel() > search.BROADCAST_LIMIT
    same(torch.isin(e.to(DEV), t.to(DEV)), torch.isin(e, t), "large isin")
    out = torch.empty(0, dtype=torch.bool, device=DEV)
    torch.isin(e[:10].to(DEV), t.to(DEV), invert=True, out=out)
    same(out, torch.isin(e[:10], t, invert=True), "isin out=")


def test_isin_runs_on_the_card_without_reading_back(gate):
    """Queued behind a closed gate, isin returns at once: nothing waits for a value from the card."""
    e, t = torch.arange(6, device=DEV), torch.tensor([2, 5], device=DEV)
    found = torch.isin(e, t)
    gate.set()
    same(found, torch.isin(torch.arange(6), torch.tensor([2, 5])), "queued isin")


def test_generate_stopping_criterion_checks_eos_on_tt():
    """What transformers' EosTokenCriteria asks of the device in every generate() with an end-of-sequence token."""
    ids = torch.tensor([[5, 9, 50256], [5, 7, 11], [1, 2, 0]])
    eos = torch.tensor([50256, 0])
    done = torch.isin(ids[:, -1].to(DEV), eos.to(DEV))
    same(done, torch.tensor([True, False, True]), "eos")
    assert done.device == DEV


# ------------------------------------------------------------------------------------------ searchsorted, bucketize
SEQ = torch.tensor([1.0, 2, 2, 3, NAN])
SEARCH_CASES = [
    (SEQ, torch.tensor([[0.0, 2, 2.5, 3, 9, NAN]]), {}),
    (SEQ.bfloat16(), torch.tensor([0.0, 2, 2.5, NAN]).bfloat16(), {}),
    (torch.tensor([[1, 2, 3], [2, 4, 6]]), torch.tensor([[2, 3], [2, 7]]), {"out_int32": True}),
    (torch.tensor([1, 2, 3]), 2.5, {}),
    (torch.tensor([1, 2, 3]), torch.tensor([2.5, 3.0]), {}),
    (torch.tensor([1.0, 2.0, 3.0]).bfloat16(), torch.tensor([2.5, 3.0]), {}),
    (torch.tensor([3, 1, 2]), torch.tensor([2, 0, 9]), {"sorter": torch.tensor([1, 2, 0])}),
    (torch.tensor([], dtype=torch.float32), torch.tensor([1.0]), {}),
    (torch.tensor([1.0, 2.0]), torch.tensor([], dtype=torch.float32), {}),
    (torch.tensor([1.0, 2.0]), torch.tensor(1.5), {}),
]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("case", range(len(SEARCH_CASES)))
def test_searchsorted_matches_cpu(case, side):
    seq, values, kw = SEARCH_CASES[case]
    kw = {**kw, "side": side}
    ref = torch.searchsorted(seq, values, **kw)
    got = torch.searchsorted(seq.to(DEV), _tt(values), **{k: _tt(v) for k, v in kw.items()})
    same(got, ref, f"searchsorted case {case} {side}")
    kw2 = {k: v for k, v in kw.items() if k != "side"}
    kw2["right"] = side == "right"
    same(torch.searchsorted(seq.to(DEV), _tt(values), **{k: _tt(v) for k, v in kw2.items()}), ref, "right=")


@pytest.mark.parametrize("right", [False, True])
def test_bucketize_matches_cpu(right):
    bounds = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    x = torch.tensor([[-3.0, -1.0, 0.25], [0.5, 2.0, 7.0]])
    same(torch.bucketize(x.to(DEV), bounds.to(DEV), right=right), torch.bucketize(x, bounds, right=right), "tensor")
    same(torch.bucketize(0.5, bounds.to(DEV), right=right), torch.bucketize(0.5, bounds, right=right), "scalar")
    out = torch.empty(0, dtype=torch.int32, device=DEV)
    torch.bucketize(x.to(DEV), bounds.to(DEV), right=right, out_int32=True, out=out)
    same(out, torch.bucketize(x, bounds, right=right, out_int32=True), "out=")


def test_searchsorted_large_and_queued(gate):
    """A long sorted sequence and many values (the binary search's ~17 steps), queued behind a closed gate: the
    search runs on the card and returns at once."""
    g = torch.Generator().manual_seed(5)
    seq = torch.randint(-(10**6), 10**6, (100_000,), generator=g).sort().values
    v = torch.randint(-(10**6), 10**6, (5000,), generator=g)
    got = torch.searchsorted(seq.to(DEV), v.to(DEV), right=True)
    gate.set()
    same(got, torch.searchsorted(seq, v, right=True), "large")


def test_searchsorted_errors_are_pytorchs():
    with pytest.raises(RuntimeError, match="boundaries tensor must be 1 dimension"):
        torch.bucketize(torch.tensor([1.0], device=DEV), torch.ones(2, 2, device=DEV))
    with pytest.raises(RuntimeError, match="side"):
        torch.searchsorted(torch.ones(3, device=DEV), torch.ones(1, device=DEV), right=True, side="left")
