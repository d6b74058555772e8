"""``kohakutt.capture``: a step recorded once as a device trace and replayed as one command.

A replay runs the very commands an eager step queues, so its results are compared with an eager twin bit for bit:
the same model and data, the same optimizer settings, the same place in the chip's random stream. Misuse (host
reads, host state, shapes that differ) must raise ``TraceError`` and leave the device and tensors as they were.
"""

from __future__ import annotations

import gc
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kohakutt
from kohakutt.errors import TraceError

DEV = torch.device("tt", 0)


def settle() -> int:
    gc.collect()
    torch.tt.synchronize()
    return torch.tt.memory_allocated()


def mlp(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 96), nn.LayerNorm(96), nn.Dropout(dropout), nn.SiLU(), nn.Linear(96, 10)
    ).to(DEV)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(32, 64, generator=g).to(DEV), torch.randint(0, 10, (32,), generator=g).to(DEV)


def trainer(model: nn.Module, opt: torch.optim.Optimizer):
    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.AdamW(p, lr=1e-2),
    lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.01),
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
], ids=["adamw", "adam", "sgd-momentum"])
def test_replayed_training_matches_eager_steps_bit_for_bit(make_opt):
    """Dropout included: each replay draws the next block of the random stream, as the eager step would."""
    model = mlp(dropout=0.2)
    opt = make_opt(model.parameters())
    x, y = data()
    torch.manual_seed(5)
    replay = kohakutt.capture(trainer(model, opt), x, y, warmup=2)
    got = [replay(x, y).item() for _ in range(4)]

    twin = mlp(dropout=0.2)
    topt = make_opt(twin.parameters())
    for group in topt.param_groups:
        if "capturable" in group:
            group["capturable"] = True  # what the capture switched its optimizer to
    step = trainer(twin, topt)
    torch.manual_seed(5)
    step(x, y), step(x, y)  # the warmup
    with torch.no_grad():
        twin(x)  # the recorded call: it took its random block without running
    want = [step(x, y).item() for _ in range(4)]
    assert got == want
    assert got[-1] < got[0]
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.cpu(), q.cpu())
    if "capturable" in opt.param_groups[0]:
        assert replay.optimizers == [opt] and opt.param_groups[0]["capturable"]
        assert opt.state[next(iter(model.parameters()))]["step"].device.type == "tt"
    replay.release()


def test_replay_with_new_inputs_binds_whole_tensors_and_copies_views():
    w = torch.randn(48, 16).to(DEV)

    def f(a, scale):
        return torch.relu(a @ w) * scale

    a = torch.randn(8, 48).to(DEV)
    replay = kohakutt.capture(f, a, 2.0, warmup=1)
    for _ in range(2):
        b = torch.randn(8, 48)
        out = replay(b.to(DEV), 2.0)  # a whole tensor: used in place of the captured one
        assert torch.equal(out.cpu(), f(b.to(DEV), 2.0).cpu())
    big = torch.randn(20, 48)
    view = big.to(DEV)[4:12]  # a view into a larger storage: copied in
    out = replay(view, 2.0)
    assert torch.equal(out.cpu(), f(big[4:12].to(DEV), 2.0).cpu())
    assert out is replay.outputs  # the same tensor every replay
    replay.release()


def test_a_step_that_writes_its_input_writes_the_callers_tensor():
    def bump(t):
        t.mul_(2)
        return t.sum()

    a = torch.ones(4, 32).to(DEV)
    replay = kohakutt.capture(bump, a, warmup=0)
    b = torch.arange(128.0).reshape(4, 32)
    whole = b.to(DEV)  # bound: the replay writes it directly
    replay(whole)
    assert torch.equal(whole.cpu(), b * 2)
    big = torch.zeros(8, 32).to(DEV)
    big[2:6] = b.to(DEV)
    s = replay(big[2:6])  # a view: copied in, and back
    assert s.item() == (b * 2).sum().item()
    assert torch.equal(big.cpu()[2:6], b * 2) and torch.equal(big.cpu()[:2], torch.zeros(2, 32))
    replay.release()


def test_an_output_that_is_a_view_of_an_argument_follows_the_new_argument():
    a = torch.randn(8, 16).to(DEV)
    replay = kohakutt.capture(lambda t: (t.t(), t * 2), a, warmup=0)
    b = torch.randn(8, 16)
    view, doubled = replay(b.to(DEV))
    assert torch.equal(view.cpu(), b.t()) and torch.equal(doubled.cpu(), b * 2)
    replay.release()


def test_replay_refuses_arguments_unlike_the_captured_ones_and_stays_usable():
    a = torch.randn(8, 32).to(DEV)
    replay = kohakutt.capture(lambda t, k: t * k, a, 3.0, warmup=0)
    with pytest.raises(TraceError, match="shape, dtype"):
        replay(torch.randn(4, 32).to(DEV), 3.0)
    with pytest.raises(TraceError, match=r"captured as 3\.0"):
        replay(a, 4.0)
    with pytest.raises(TraceError, match="2 positional"):
        replay(a, 3.0, 1)
    b = torch.randn(8, 32)
    assert torch.equal(replay(b.to(DEV), 3.0).cpu(), (b.to(DEV) * 3.0).cpu())
    replay.release()
    scaled = kohakutt.capture(lambda t, k: t * k, a, torch.tensor(2.0), warmup=0)  # a host number: its value is held
    assert torch.equal(scaled(b.to(DEV), torch.tensor(2.0)).cpu(), (b.to(DEV) * 2.0).cpu())
    with pytest.raises(TraceError, match="host number"):
        scaled(a, torch.tensor(5.0))
    scaled.release()
    with pytest.raises(TraceError, match="released"):
        replay(a, 3.0)


def test_host_work_inside_a_capture_is_refused_and_nothing_is_lost():
    a = torch.arange(16.0).reshape(4, 4).to(DEV)
    before = settle()

    def reads(t):
        return t * float((t + 1).sum().item())  # a host read of a result that does not exist yet

    with pytest.raises(TraceError, match=r"while capturing 'reads'.*cannot be captured"):
        kohakutt.capture(reads, a, warmup=1)
    counter = torch.zeros(())

    def counts(t):
        counter.add_(1)  # host state a replay would not advance
        return t + 1

    with pytest.raises(TraceError, match="changes a CPU tensor"):
        kohakutt.capture(counts, a, warmup=0)
    with pytest.raises(TraceError, match="cpu tensor"):
        kohakutt.capture(lambda t: t + 1, torch.ones(3))
    assert torch.equal(a.cpu(), torch.arange(16.0).reshape(4, 4))  # values kept
    assert torch.equal((a * 2).cpu(), torch.arange(16.0).reshape(4, 4) * 2)  # the device still runs ops
    assert settle() == before  # the failed captures' buffers were freed


def test_an_optimizer_without_a_warmup_step_is_refused():
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = data()
    with pytest.raises(TraceError, match="warmup >= 1"):
        kohakutt.capture(trainer(model, opt), x, y, warmup=0)


def test_release_frees_the_intermediates_and_keeps_held_outputs():
    base = settle()
    w = torch.randn(64, 64).to(DEV)

    def f(a):
        h = torch.tanh(a @ w)
        return h.sum(dim=0), h * 2

    a = torch.randn(64, 64).to(DEV)
    replay = kohakutt.capture(f, a, warmup=1)
    during = settle()
    assert during > base + 2 * 64 * 64 * 4  # the trace holds its intermediates
    for _ in range(5):
        replay(a)
    assert settle() == during  # replays allocate nothing
    total = replay.outputs[0]
    replay.release()
    del replay
    want = torch.tanh(a.cpu().double() @ w.cpu().double()).sum(dim=0)
    torch.testing.assert_close(total.cpu().double(), want, rtol=2e-2, atol=0.5)  # held output still readable
    del total
    assert settle() == base + 2 * 64 * 64 * 4  # only w and a remain


def test_a_trace_keeps_its_buffers_when_its_outputs_are_dropped():
    """A dropped output's memory stays with the trace: a later tensor cannot take it while replays write it."""
    a = torch.randn(32, 32).to(DEV)
    replay = kohakutt.capture(lambda t: t * 2 + 1, a, warmup=0)
    ref = (a * 2 + 1).cpu()
    out = replay.outputs
    replay.outputs = None
    del out
    gc.collect()
    keep = torch.full((32, 32), 7.0, device=DEV)  # same size: would reuse a freed block
    replay(a)
    torch.tt.synchronize()
    assert torch.equal(keep.cpu(), torch.full((32, 32), 7.0))
    replay.release()
    assert torch.equal(ref, (a * 2 + 1).cpu())


def test_a_transformer_block_under_autocast_replays_as_its_eager_twin():
    """Attention and layer norm (the own programs), autocast to bf16, on a side stream."""

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.qkv, self.out = nn.LayerNorm(64), nn.Linear(64, 192), nn.Linear(64, 64)

        def forward(self, x):
            q, k, v = self.qkv(self.norm(x)).view(2, 32, 3, 4, 16).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.out(a.transpose(1, 2).reshape(2, 32, 64))

    def trainer(model, opt):
        def step(x):
            opt.zero_grad(set_to_none=False)
            with torch.autocast("tt", dtype=torch.bfloat16):
                loss = model(x).float().square().mean()
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    torch.manual_seed(0)
    model = Block().to(DEV)
    torch.manual_seed(0)
    twin = Block().to(DEV)
    x = torch.randn(2, 32, 64).to(DEV)
    step = trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    twin_step = trainer(twin, torch.optim.AdamW(twin.parameters(), lr=1e-3, capturable=True))
    with torch.tt.stream(torch.tt.Stream()):
        replay = kohakutt.capture(step, x, warmup=1)
        twin_step(x)
        got = [replay(x).item() for _ in range(3)]
        want = [twin_step(x).item() for _ in range(3)]
    assert got == want and got[-1] < got[0]
    replay.release()


def test_a_draw_from_a_generator_object_cannot_be_captured():
    g = torch.Generator(device="tt").manual_seed(1)
    a = torch.ones(8, 8).to(DEV)
    with pytest.raises(TraceError, match="generator object cannot be captured"):
        kohakutt.capture(lambda t: t * torch.rand(8, 8, device=DEV, generator=g), a, warmup=0)
    assert torch.equal((a * 2).cpu(), torch.full((8, 8), 2.0))  # the device still runs ops


# ------------------------------------------------------------------ found by review: each failed before its fix
def test_arguments_that_shared_a_storage_must_share_it_on_replay():
    x = torch.randn(4, 4).to(DEV)
    replay = kohakutt.capture(lambda a, b: a + 2 * b, x, x, warmup=0)  # recorded as one buffer
    y, z = torch.randn(4, 4).to(DEV), torch.randn(4, 4).to(DEV)
    assert torch.equal(replay(y, y).cpu(), (y + 2 * y).cpu())
    with pytest.raises(TraceError, match="share storages differently"):
        replay(y, z)
    replay.release()


def test_a_view_argument_goes_through_a_private_copy_never_into_the_callers_tensor():
    base = torch.randn(10, 4)
    t1 = base.to(DEV)
    replay = kohakutt.capture(lambda v: v * 2 + 1, t1[1:], warmup=0)
    other = torch.randn(12, 4)
    assert torch.equal(replay(other.to(DEV)[3:]).cpu(), (other.to(DEV)[3:] * 2 + 1).cpu())
    assert torch.equal(t1.cpu(), base)  # the tensor given at capture is untouched
    replay.release()


def test_reading_an_argument_does_not_count_as_writing_it():
    replay = kohakutt.capture(lambda v: v * 2, torch.randn(4, 4).to(DEV), warmup=1)
    w = torch.randn(5, 4).to(DEV).requires_grad_()
    a = w * 3
    sq = a.pow(2)  # saves a for its backward
    replay(a[1:])  # a view: copied in, and not back (the step only reads it)
    sq.sum().backward()  # no "modified by an inplace operation"
    torch.testing.assert_close(w.grad.cpu(), 18 * w.detach().cpu(), rtol=2e-2, atol=1e-2)


def test_keyword_arguments_in_any_order():
    x, y = torch.randn(4, 4).to(DEV), torch.randn(4, 4).to(DEV)
    replay = kohakutt.capture(lambda p, q: p - q, p=x, q=y, warmup=0)
    assert torch.equal(replay(q=x, p=y).cpu(), (y - x).cpu())
    replay.release()


def test_a_refused_capture_changes_no_optimizer_and_leaks_nothing():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = data()
    step = trainer(model, opt)
    step(x, y)  # state exists, step counters on the host
    base = settle()
    with pytest.raises(TraceError, match="warmup >= 1"):
        kohakutt.capture(step, x, y, warmup=0)  # its first capturable step would be inside the recording
    assert not opt.param_groups[0]["capturable"]
    assert all(s["step"].device.type == "cpu" for s in opt.state.values())
    step(x, y)  # eager steps still work
    with pytest.raises(TraceError, match="returned a cpu tensor"):
        kohakutt.capture(lambda t: (t @ t.t(), torch.zeros(2)), x, warmup=0)  # recorded, then refused
    assert settle() == base


def test_a_second_capture_on_the_same_model_leaves_the_first_working():
    """Both steps set .grad to None: B frees the gradients A's trace owns; they stay A's until A is released."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data()

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    first = kohakutt.capture(step, x, y, warmup=1)
    first(x, y)
    second = kohakutt.capture(step, x[:8], y[:8], warmup=0)
    second(x[:8], y[:8])
    second.release()
    del second
    gc.collect()
    assert math.isfinite(first(x, y).item())
    first.release()


def test_capture_inside_an_autocast_region_casts_the_weights_on_every_replay():
    def make():
        torch.manual_seed(0)
        lin = nn.Linear(16, 16).to(DEV)
        return lin, torch.optim.SGD(lin.parameters(), lr=0.5)

    lin, opt = make()
    x = torch.randn(4, 16).to(DEV)

    def step(x):
        opt.zero_grad(set_to_none=False)
        loss = lin(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    with torch.autocast("tt", dtype=torch.bfloat16):  # one region around warmup, capture and replays
        replay = kohakutt.capture(step, x, warmup=2)
        got = [replay(x).item() for _ in range(4)]
    ref, ropt = make()
    want = []
    for _ in range(6):  # each eager step in a region of its own
        ropt.zero_grad(set_to_none=False)
        with torch.autocast("tt", dtype=torch.bfloat16):
            loss = ref(x).float().pow(2).mean()
        loss.backward()
        ropt.step()
        want.append(loss.item())
    assert got == want[2:]
    replay.release()


def test_foreach_optimizer_steps_count_as_in_place_writes():
    lin = nn.Linear(4, 4).to(DEV)
    opt = torch.optim.SGD(lin.parameters(), lr=0.5, foreach=True)
    lin(torch.randn(2, 4).to(DEV)).sum().backward()
    before = lin.weight._version
    opt.step()
    assert lin.weight._version > before  # as CUDA's fused foreach kernels bump it


def test_capture_and_compile_under_inference_mode():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).to(DEV)
    with torch.inference_mode():
        x, y = torch.randn(4, 16).to(DEV), torch.randn(4, 16).to(DEV)
        replay = kohakutt.capture(lambda t: model(t), x, warmup=1)
        assert torch.equal(replay(y).cpu(), model(y).cpu())
        z = torch.randn(8, 16).to(DEV)[4:]  # a slice: through the private copy
        assert torch.equal(replay(z).cpu(), model(z).cpu())
        replay.release()
