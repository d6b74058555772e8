"""Random state as on CUDA: the ``torch.cuda``-shaped surface that torch's own utilities use (``_initialized``,
``get_rng_state`` / ``set_rng_state`` and their ``_all`` forms, ``default_generators``, ``fork_rng``), all over each
chip's one random stream, so ``torch.utils.checkpoint`` recomputes the dropout masks of the forward: gradients with
checkpointing equal those without, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

DEV = torch.device("tt", 0)


def draws(device: torch.device = DEV) -> list[torch.Tensor]:
    x = torch.ones(40, device=device)
    made = (torch.rand(40, device=device), torch.randn(7, 5, device=device), torch.nn.functional.dropout(x, 0.5))
    return [t.cpu() for t in (*made, torch.randint(0, 99, (9,), device=device))]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


def test_torch_tt_has_the_cuda_random_surface():
    assert torch.tt.is_initialized() and torch.tt._initialized
    gens = torch.tt.default_generators
    assert len(gens) == torch.tt.device_count() >= 2
    assert [g.device for g in gens] == [torch.device("tt", i) for i in range(len(gens))]
    assert torch.tt._get_generator(torch.device("tt", 1)) is gens[1]


def test_the_default_generator_is_the_chip_stream():
    g = torch.tt.default_generators[0]
    g.manual_seed(11)
    assert torch.tt.initial_seed() == 11 and g.initial_seed() == 11 and g.get_offset() == 0
    a = draws()
    assert g.get_offset() > 0 and torch.equal(g.get_state(), torch.tt.get_rng_state())
    torch.tt.manual_seed(11)
    assert same(a, draws())
    g.set_state(torch.tt.get_rng_state())  # round trip through the generator's own state format
    state = g.get_state()
    b = draws()
    torch.tt.set_rng_state(state)
    assert same(b, draws()) and not same(a, b)
    clone = g.clone_state()  # a copy of the state, not the stream: drawing from it leaves the stream alone
    assert torch.equal(clone.get_state(), g.get_state())
    offset = g.get_offset()
    from_clone = torch.rand(50, device=DEV, generator=clone).cpu()
    assert g.get_offset() == offset and torch.equal(from_clone, torch.rand(50, device=DEV).cpu())


def test_generator_default_draws_as_no_generator():
    torch.tt.manual_seed(5)
    a = torch.rand(30, device=DEV).cpu()
    torch.tt.manual_seed(5)
    b = torch.rand(30, device=DEV, generator=torch.tt.default_generators[0]).cpu()
    assert torch.equal(a, b)


def test_state_all_seed_all_and_fork_rng_cover_every_chip():
    devs = [torch.device("tt", i) for i in range(torch.tt.device_count())]
    torch.manual_seed(21)  # torch's global seed reaches every chip
    assert [torch.tt.get_rng_state(d)[:8].tolist() for d in devs] == [list((21).to_bytes(8, "little"))] * len(devs)
    states = torch.tt.get_rng_state_all()
    first = [draws(d) for d in devs]
    torch.tt.set_rng_state_all(states)
    assert all(same(f, draws(d)) for f, d in zip(first, devs))
    with torch.random.fork_rng(devices=range(len(devs)), device_type="tt"):
        inside = [draws(d) for d in devs]
    assert all(same(i, draws(d)) for i, d in zip(inside, devs))
    torch.tt.manual_seed_all(3)
    assert [torch.tt.get_rng_state(d)[:8].tolist() for d in devs] == [list((3).to_bytes(8, "little"))] * len(devs)


def test_seed_draws_a_new_seed_and_leaves_the_cpu_generator_alone():
    cpu = torch.get_rng_state()
    torch.tt.seed()
    s1 = torch.tt.initial_seed()
    torch.tt.seed_all()
    s2 = torch.tt.initial_seed()
    assert s1 != s2 and torch.equal(torch.get_rng_state(), cpu)


class Block(torch.nn.Module):
    """Two dropouts between linear layers: a recomputation with other masks changes every gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(16, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.dropout(torch.relu(self.a(x)), 0.3, self.training)
        h = torch.nn.functional.dropout(torch.tanh(self.b(h)), 0.5, self.training)
        return self.c(h)


def gradients(model: torch.nn.Module, x: torch.Tensor, seed: int, use_reentrant: bool | None) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    torch.manual_seed(seed)
    y = model(x) if use_reentrant is None else checkpoint(model, x, use_reentrant=use_reentrant)
    torch.rand(100, device=DEV)  # a draw between forward and backward: the recomputation must not see it
    (y * y).sum().backward()
    return [p.grad.cpu() for p in model.parameters()] + [x.grad.cpu()]


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpoint_recomputes_the_same_dropout_masks(use_reentrant: bool):
    torch.manual_seed(0)
    model = Block().to(DEV)
    x = torch.randn(8, 16).to(DEV)
    plain = gradients(model, x, 1, None)
    assert not same(plain, gradients(model, x, 2, None)), "other masks give other gradients: the check can fail"
    assert same(plain, gradients(model, x, 1, use_reentrant))


def test_a_captured_step_draws_from_the_stream_in_order_and_a_restored_state_replays_it():
    import kohakutt

    x = torch.ones(64, device=DEV)

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x, 0.5) + torch.rand(64, device=DEV)

    replay = kohakutt.capture(step, x, warmup=1)
    state = torch.tt.get_rng_state()
    first = replay(x).cpu()
    assert torch.tt.get_rng_state()[8:].view(torch.int64) > state[8:].view(torch.int64), "a replay draws"
    assert not torch.equal(replay(x).cpu(), first)
    torch.tt.set_rng_state(state)
    assert torch.equal(replay(x).cpu(), first)
    torch.tt.set_rng_state(state)
    assert torch.equal(step(x).cpu(), first)  # the replay drew what the eager step draws from that state
