"""Training on KTT (optimizers, TRAINING, cross-entropy), TinyJit replays, the numerics scope and random numbers.

The training reference is the same tinygrad code on tinygrad's own device (CPU where clang exists, else PYTHON) from
the same seed: the card's float32 matmuls and FPU multiplies work on TF32 operands (2^-10 relative), so losses over a
few steps agree to a few 2^-10.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("tinygrad")

import itertools

from tinygrad import Context, Tensor, TinyJit, nn

import kohakutt.tinygrad as ktg
from kohakutt.errors import ConfigError
from kohakutt.frontends.tinygrad import counters


@pytest.fixture(autouse=True)
def no_workers():
    with Context(PARALLEL=0):
        yield


class Net:
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 4):
        self.hidden, self.out = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, d_out)

    def __call__(self, x: Tensor) -> Tensor:
        return self.out(self.hidden(x).silu())


REFERENCE = "CPU" if shutil.which("clang") else "PYTHON"  # tinygrad's own device (CPU needs clang)


def train(device: str, opt: str, steps: int = 3) -> list[float]:
    Tensor.manual_seed(1)
    g = np.random.default_rng(1)
    model = Net()
    params = [model.hidden.weight, model.hidden.bias, model.out.weight, model.out.bias]
    for p in params:
        p.to_(device)
    x = Tensor(g.standard_normal((8, 16)).astype(np.float32), device=device)
    y = Tensor(np.array([0, 1, 2, 3] * 2, np.int32), device=device)
    o = {
        "SGD": lambda: nn.optim.SGD(params, lr=0.1),
        "Adam": lambda: nn.optim.Adam(params, lr=1e-2),
        "AdamW": lambda: nn.optim.AdamW(params, lr=1e-2, weight_decay=0.01),
    }[opt]()
    losses = []
    with Context(TRAINING=1):
        for _ in range(steps):
            loss = model(x).sparse_categorical_crossentropy(y)
            o.zero_grad()
            loss.backward()
            o.step()
            losses.append(loss.item())
    return losses


@pytest.mark.parametrize("opt", ["SGD", "Adam", "AdamW"])
def test_optimizers_match_tinygrads_own_device(opt):
    before = counters.stats()
    losses = train("KTT", opt)
    after = counters.stats()
    np.testing.assert_allclose(losses, train(REFERENCE, opt), rtol=2e-3)
    assert losses[-1] < losses[0]
    assert after["host_total"] == before["host_total"]  # the whole step runs on the card
    assert after["matmuls"] >= before["matmuls"] + 3 * 5  # forward 2, backward 3 per step at least


def test_readme_example_runs_on_the_card():
    before = counters.stats()
    model = Net(256, 512, 4)
    params = nn.state.get_parameters(model)
    for p in params:
        p.to_("KTT")
    opt = nn.optim.AdamW(params, lr=1e-3)
    x = Tensor.randn(64, 256, device="KTT")
    y = Tensor([0, 1, 2, 3] * 16, device="KTT")
    losses = []
    with Context(TRAINING=1):
        for _ in range(3):
            loss = model(x).sparse_categorical_crossentropy(y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    with ktg.numerics(fidelity=3):
        acc = (model(x).argmax(axis=1) == y).mean().item()
    assert losses[2] < losses[0] and 0.0 <= acc <= 1.0 and acc > 0.5
    assert counters.stats()["host_total"] == before["host_total"]


def test_tinyjit_replays_as_a_trace():
    g = np.random.default_rng(2)
    w = Tensor(g.standard_normal((6, 5)).astype(np.float32), device="KTT")

    @TinyJit
    def f(x: Tensor) -> Tensor:
        h = (x @ w).relu().contiguous()
        return ((h * 2 + 1).contiguous().exp2() + h).sum(axis=1).realize()

    before = counters.stats()["graph_replays"]
    for _i in range(5):
        xn = g.standard_normal((3, 6)).astype(np.float32)
        got = f(Tensor(xn, device="KTT")).numpy()
        h = (Tensor(xn, device="KTT") @ w).relu()
        eager = ((h * 2 + 1).exp2() + h).sum(axis=1).numpy()
        np.testing.assert_allclose(got, eager, rtol=1e-6, atol=1e-6)  # same programs, same numerics
    assert counters.stats()["graph_replays"] >= before + 3


def test_tinyjit_training_step():
    Tensor.manual_seed(3)
    model = Net()
    params = nn.state.get_parameters(model)
    for p in params:
        p.to_("KTT")
    opt = nn.optim.AdamW(params, lr=1e-2)
    x = Tensor(np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32), device="KTT")
    y = Tensor([0, 1, 2, 3] * 2, device="KTT")

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        with Context(TRAINING=1):
            loss = model(x).sparse_categorical_crossentropy(y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.realize()

    losses = [step(x, y).item() for _ in range(6)]
    assert losses[-1] < losses[0]
    assert all(b < a for a, b in itertools.pairwise(losses))  # replays keep training


def test_numerics_scope_narrows_matmul_precision():
    g = np.random.default_rng(4)
    a, b = g.standard_normal((8, 64)).astype(np.float32), g.standard_normal((64, 8)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    errs = {}
    for fid in (0, 2, 4):  # one-pass matmuls (ALLOW_TF32=1): a split one runs its parts at HiFi4
        with ktg.numerics(fidelity=fid, fp32_matmul="high"):
            errs[fid] = float(np.abs((Tensor(a, device="KTT") @ Tensor(b, device="KTT")).numpy() - ref).max())
    assert errs[0] > errs[2] > errs[4]  # LoFi keeps fewest product bits
    assert errs[4] < 64 * 2.0**-10 * float(np.abs(a).max() * np.abs(b).max())
    with pytest.raises(ConfigError, match="MathFidelity"), ktg.numerics(fidelity=1):
        pass
    assert ktg.fidelity_of("HiFi3") == ktg.fidelity_of(3)


def test_fidelity_has_one_meaning_in_both_scopes():
    """tinygrad's ``numerics(fidelity=)`` and ``kohakutt.numerics`` read a number alike (TT-Metal's MathFidelity)."""
    import kohakutt

    g = np.random.default_rng(5)
    a, b = g.standard_normal((8, 64)).astype(np.float32), g.standard_normal((64, 8)).astype(np.float32)
    got = {}
    for scope in (ktg.numerics, kohakutt.numerics):
        for fid in (2, "HiFi2", 3):
            with scope(fidelity=fid, fp32_matmul="high") as num:
                got[scope, fid] = (Tensor(a, device="KTT") @ Tensor(b, device="KTT")).numpy()
            assert num.fidelity is kohakutt.Fidelity.of(fid) and int(num.fidelity) == (fid if fid != "HiFi2" else 2)
    for scope in (ktg.numerics, kohakutt.numerics):
        assert np.array_equal(got[scope, 2], got[ktg.numerics, "HiFi2"])
        assert not np.array_equal(got[scope, 2], got[scope, 3])


def test_random_on_the_card_is_reproducible():
    before = counters.stats()["random_kernels"]
    Tensor.manual_seed(5)
    a = Tensor.rand(1000, device="KTT")
    b = Tensor.rand(1000, device="KTT")
    Tensor.manual_seed(5)
    a2 = Tensor.rand(1000, device="KTT")
    an, bn = a.numpy(), b.numpy()
    np.testing.assert_array_equal(an, a2.numpy())
    assert not np.array_equal(an, bn)
    assert an.min() >= 0.0 and an.max() < 1.0 and abs(an.mean() - 0.5) < 0.05
    assert counters.stats()["random_kernels"] >= before + 3
    n = Tensor.randn(4000, device="KTT").numpy()
    assert abs(n.mean()) < 0.08 and abs(n.std() - 1.0) < 0.08
    with Context(TRAINING=1):
        d = Tensor.ones(1000, device="KTT").dropout(0.25).numpy()
    assert set(np.unique(d)) <= {0.0, np.float32(1 / 0.75)} and abs((d == 0).mean() - 0.25) < 0.06


def test_random_host_stream_is_tinygrads(knobs):
    knobs(KTT_TINYGRAD_RAND="host")
    Tensor.manual_seed(6)
    host = Tensor.rand(5, device="KTT").numpy()
    Tensor.manual_seed(6)
    ref = Tensor.rand(5, device="PYTHON").numpy()
    np.testing.assert_array_equal(host, ref)


def test_memory_planner_suballocates_under_tinyjit(monkeypatch):
    from kohakutt.frontends.tinygrad.device import KTTAllocator

    views: list[tuple[int, int]] = []
    offset = KTTAllocator._offset
    monkeypatch.setattr(
        KTTAllocator, "_offset", lambda self, b, size, off: views.append((size, off)) or offset(self, b, size, off)
    )
    w = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, device="KTT").realize()

    def chain(a: Tensor) -> Tensor:  # three intermediates that no tensor holds: the planner's to place
        return (((a * 2).contiguous().exp2() + 1).contiguous() @ w).contiguous().sum(axis=1).realize()

    outs = {}
    for planner in (True, False):
        views.clear()
        with Context(NO_MEMORY_PLANNER=int(not planner)):
            f = TinyJit(chain)
            outs[planner] = [f(Tensor(np.full((8, 8), i / 4, np.float32), device="KTT")).numpy() for i in range(4)]
        assert bool(views) == planner  # planned intermediates are offset views of one arena
    np.testing.assert_array_equal(np.array(outs[True]), np.array(outs[False]))


def test_replay_host_cost_is_measured():
    w = Tensor(np.eye(4, dtype=np.float32), device="KTT").realize()
    f = TinyJit(lambda x: ((x @ w + 1).contiguous().exp2() + 1).sum(axis=1).realize())  # two kernels: one batch
    before = ktg.stats()
    for i in range(4):
        f(Tensor(np.full((2, 4), i, np.float32), device="KTT"))
    after = ktg.stats()
    replays = after["graph_replays"] - before["graph_replays"]
    assert replays >= 2
    assert 0.0 < after["graph_replay_host_s"] - before["graph_replay_host_s"] < 10.0 * replays
