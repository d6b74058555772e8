"""``torch.compile(backend="ktt_tt" / "ktt_tt_aot")``: graphs replayed as device traces.

A replayed graph runs the commands the eager ops would queue, so results compare with eager mode on the same
device bit for bit (the reference for the device's numerics themselves is the rest of the suite).

(pytest's log capture makes torch compile a few more small graphs of its own; the counts below are lower bounds.)
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kohakutt.frontends.torch import compile as ktt_compile

DEV = torch.device("tt", 0)  # opened on first use: the HAL tests run first (see tests/conftest.py)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    ktt_compile.stats.clear()
    yield
    torch._dynamo.reset()


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 96), nn.LayerNorm(96), nn.GELU(), nn.Linear(96, 10)).to(DEV)


def test_backends_are_found_by_name():
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("ktt_tt") is ktt_compile.ktt_tt
    assert lookup_backend("ktt_tt_aot") is ktt_compile.ktt_tt_aot


def test_inference_replays_the_forward_and_returns_fresh_outputs():
    model = net()
    compiled = torch.compile(model, backend="ktt_tt")
    xs = [torch.randn(32, 64).to(DEV) for _ in range(4)]
    with torch.no_grad():
        want = [model(x).cpu() for x in xs]
        outs = [compiled(x) for x in xs]
    assert ktt_compile.stats["captures"] >= 1 and ktt_compile.stats["replays"] >= 3
    for out, w in zip(outs, want):  # each call's result kept its values: outputs are copies, not the trace's
        assert torch.equal(out.cpu(), w)


def test_under_autograd_the_inference_backend_runs_op_by_op():
    model = net()
    twin = net()
    compiled = torch.compile(model, backend="ktt_tt")
    x = torch.randn(32, 64).to(DEV)
    for _ in range(3):
        compiled(x).square().sum().backward()
        twin(x).square().sum().backward()
    assert ktt_compile.stats["captures"] == 0 and ktt_compile.stats["eager_runs"] >= 3
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad.cpu(), q.grad.cpu())


def test_training_with_the_aot_backend_matches_eager_training():
    def train(compiled: bool) -> tuple[list[float], list[torch.Tensor]]:
        model = net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(32, 64, generator=g).to(DEV), torch.randint(0, 10, (32,), generator=g).to(DEV)
        m = torch.compile(model, backend="ktt_tt_aot") if compiled else model
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    got, got_params = train(True)
    assert ktt_compile.stats["captures"] >= 2 and ktt_compile.stats["replays"] >= 6  # forward and backward
    want, want_params = train(False)
    assert got == want and got[-1] < got[0]
    for p, q in zip(got_params, want_params):
        assert torch.equal(p, q)


def test_a_graph_the_card_cannot_record_runs_op_by_op_and_says_why():
    def f(a):
        return torch.linalg.inv(a) @ a  # inv checks for singular matrices: a host read of the factorization

    compiled = torch.compile(f, backend="ktt_tt")
    a = torch.randn(8, 8, dtype=torch.float64) + 8 * torch.eye(8, dtype=torch.float64)
    for _ in range(3):
        got = compiled(a.float().to(DEV))
    assert ktt_compile.stats["not_captured"] >= 1
    assert any("cannot be captured" in r for r in ktt_compile.reasons.values())
    torch.testing.assert_close(got.cpu().double(), torch.eye(8, dtype=torch.float64), rtol=0, atol=1e-2)


def test_batch_norm_training_updates_its_running_statistics_through_the_aot_backend():
    def conv_net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(8, 4),
        ).to(DEV)

    model, twin = conv_net(), conv_net()
    compiled = torch.compile(model, backend="ktt_tt_aot")
    for i in range(3):
        x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(i)).to(DEV)
        got, want = compiled(x), twin(x)
        got.sum().backward()
        want.sum().backward()
        assert torch.equal(got.detach().cpu(), want.detach().cpu())
    assert ktt_compile.stats["replays"] >= 2
    assert torch.equal(model[1].running_mean.cpu(), twin[1].running_mean.cpu())  # the buffer mutation reached it
    assert torch.equal(model[1].running_var.cpu(), twin[1].running_var.cpu())
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad.cpu(), q.grad.cpu())


def test_a_dynamic_shape_graph_gets_a_trace_per_size():
    model = net()
    compiled = torch.compile(model, backend="ktt_tt", dynamic=True)
    with torch.no_grad():
        for b in (4, 8, 4, 8, 4, 12, 12, 12):
            x = torch.randn(b, 64).to(DEV)
            assert torch.equal(compiled(x).cpu(), model(x).cpu())
    assert ktt_compile.stats["captures"] >= 3 and ktt_compile.stats["replays"] >= 5


def test_arguments_aliasing_differently_get_their_own_trace():
    def f(a, b):
        return a + 2 * b

    compiled = torch.compile(f, backend="ktt_tt")
    x = torch.randn(4, 4).to(DEV)
    for _ in range(3):
        compiled(x, x[0])
    y, z = torch.randn(4, 4).to(DEV), torch.randn(4, 4).to(DEV)
    assert torch.equal(compiled(y, z[0]).cpu(), f(y, z[0]).cpu())


def test_a_view_output_of_an_input_stays_a_view_on_replays():
    def f(x):
        x.mul_(2)
        return x.t(), x.sum()

    compiled = torch.compile(f, backend="ktt_tt")
    with torch.no_grad():
        for _ in range(3):
            a, b = torch.ones(3, 3).to(DEV), torch.ones(3, 3).to(DEV)
            va, _ = f(a)
            vb, _ = compiled(b)
            va.add_(1)
            vb.add_(1)
            assert torch.equal(b.cpu(), a.cpu()) and torch.equal(b.cpu(), torch.full((3, 3), 3.0))
    assert ktt_compile.stats["replays"] >= 1
