"""The 1 x 2 mesh as a torch device: placements, propagation, collectives, views, training, save, capture.

Every result is checked against CPU float64 and against the same computation on one chip (``tt:0``).
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn
from tt_checks import gen, within

import kohakutt
from kohakutt.frontends.torch import mesh as tmesh
from kohakutt.mesh import Partial, Replicate, Sharded, Unaligned, Unplaced
from kohakutt.mesh import rules as mrules


@pytest.fixture(scope="module")
def mesh():
    dev = kohakutt.mesh([0, 1])
    yield dev
    torch.tt.synchronize(dev)
    tmesh.current().close()  # the chips' references go back: later tests close and reopen chips themselves


def tf32(x, dim):
    """The card's float32 reductions read TF32 operands: an error of up to 2^-9 of the terms' magnitudes."""
    return 2.0**-9 * x.double().abs().sum(dim) + 1e-6


def put(t, mesh, placement=None):
    return tmesh.distribute(t, mesh, placement)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = kohakutt.replicate(nn.LayerNorm(d))
        self.up = kohakutt.colwise(nn.Linear(d, 4 * d))
        self.down = kohakutt.rowwise(nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


# ------------------------------------------------------------------------------------------ the device, creation
def test_the_mesh_is_the_device_after_the_chips(mesh):
    assert mesh == torch.device("tt", 2) and kohakutt.mesh([0, 1]) == mesh
    assert torch.tt.device_count() == 2  # chips; the mesh is the index after them
    assert torch._C._get_accelerator().type == "tt"


def test_the_1_mib_rule(mesh):
    big = torch.randn(512, 1024, generator=gen(0)).bfloat16()  # exactly 1 MiB
    small = torch.randn(511, 1024, generator=gen(1)).bfloat16()
    b, s = big.to(mesh), small.to(mesh)
    assert str(kohakutt.placement(b)) == "Sharded(dim=0)"
    assert kohakutt.placement(s) == Replicate()
    assert torch.equal(b.cpu(), big) and torch.equal(s.cpu(), small)


def test_uneven_shards_round_trip_and_compute(mesh):
    x = torch.randn(7, 5, generator=gen(2))
    m = put(x, mesh, "S(0)")
    assert kohakutt.placement(m) == Sharded(0, (4, 3))
    assert torch.equal(m.cpu(), x)
    within((m * 3 - 1).cpu(), x.double() * 3 - 1, 1e-6, "uneven element-wise")
    within(m.sum(0).cpu(), x.double().sum(0), tf32(x, 0), "uneven sum over the sharded dim")
    within(m.sum(1).cpu(), x.double().sum(1), tf32(x, 1), "uneven sum over the other dim")


def test_placement_of_unwritten_and_misaligned(mesh):
    e = torch.empty(4096, 64, device=mesh)
    assert kohakutt.placement(e) == Unplaced()
    x = put(torch.arange(48.0).reshape(8, 6), mesh, "S(1)")
    assert isinstance(kohakutt.placement(x.reshape(-1)), Unaligned)
    with pytest.raises(kohakutt.mesh.PlacementError):
        kohakutt.placement(torch.zeros(2))


# --------------------------------------------------------------------------------------------------- views
@pytest.mark.parametrize("placement", ["S(0)", "S(1)", "R"])
def test_views_read_the_right_elements(mesh, placement):
    x = torch.randn(6, 10, generator=gen(3))
    m = put(x, mesh, placement)
    cases = {
        "t": lambda t: t.t(),
        "slice of dim 1": lambda t: t[:, 3:8],
        "step slice": lambda t: t[::2, 1::3],
        "select row": lambda t: t[4],
        "select column": lambda t: t[:, 7],
        "flatten": lambda t: t.reshape(-1),
        "head split": lambda t: t.reshape(6, 5, 2),
        "unsqueeze + expand": lambda t: t.unsqueeze(1).expand(6, 3, 10),
        "diagonal": lambda t: t[:, :6].diagonal(),
    }
    for name, f in cases.items():
        within(f(m).cpu(), f(x), 0, f"{placement} {name} (read)")
        within((f(m) * 2).cpu(), f(x) * 2, 0, f"{placement} {name} (an op on it)")
        within(f(m).contiguous().cpu(), f(x), 0, f"{placement} {name} (copied)")


@pytest.mark.parametrize("placement", ["S(0)", "S(1)"])
def test_writes_through_views_land_in_the_base(mesh, placement):
    x = torch.randn(6, 10, generator=gen(4))
    m = put(x, mesh, placement)
    ref = x.clone()
    for f, v in [
        (lambda t: t[:, 2:9], 1.5),
        (lambda t: t[1::2], -2.0),
        (lambda t: t.reshape(-1)[5:40], 3.0),
        (lambda t: t[:, 4], 7.0),
        (lambda t: t.t()[3], 0.25),
    ]:
        f(m).add_(v)
        f(ref).add_(v)
        within(m.cpu(), ref, 1e-6, f"{placement}: base after an in-place write through a view")
    m[2:5, 1:4] = torch.ones(3, 3)
    ref[2:5, 1:4] = 1
    within(m.cpu(), ref, 1e-6, f"{placement}: setitem")


# --------------------------------------------------------------------------------------------------- rules
def test_matmul_placements_and_values(mesh):
    a = torch.randn(64, 48, generator=gen(5))
    b = torch.randn(48, 40, generator=gen(6))
    ref = a.double() @ b.double()
    one = (a.to("tt:0") @ b.to("tt:0")).cpu()
    for pa, pb, out in [
        ("S(0)", "R", Sharded(0, (32, 32))),
        ("R", "S(1)", Sharded(1, (20, 20))),
        ("S(1)", "S(0)", Partial()),
        ("R", "R", Sharded(0, (32, 32))),
    ]:  # R @ R: a free split
        y = put(a, mesh, pa) @ put(b, mesh, pb)
        assert kohakutt.placement(y) == out, (pa, pb)
        within(y.cpu(), ref, 0.02 * ref.abs().max(), f"{pa} @ {pb} against float64")
        within(y.cpu(), one, 1e-5 * ref.abs().max(), f"{pa} @ {pb} against one chip")


def test_a_bf16_partial_is_rounded_on_each_chip_then_summed(mesh):
    a = torch.randn(32, 64, generator=gen(7)).bfloat16()
    b = torch.randn(64, 16, generator=gen(8)).bfloat16()
    y = put(a, mesh, "S(1)") @ put(b, mesh, "S(0)")
    assert kohakutt.placement(y) == Partial()
    d0 = torch.device("tt", 0)
    p0 = (a[:, :32].to(d0) @ b[:32].to(d0)).cpu()  # each chip's product, stored in bf16
    p1 = (a[:, 32:].to(d0) @ b[32:].to(d0)).cpu()
    assert torch.equal(y.cpu(), (p0.float() + p1.float()).bfloat16())


def test_reductions_over_the_sharded_dim(mesh):
    v = torch.randn(3001, generator=gen(9))  # one dim: the reduction must cross the chips
    mv = put(v, mesh, "S(0)")
    vd = v.double()
    with kohakutt.record_placements():
        s = mv.sum()
        assert kohakutt.placement(s) == Partial()
        within(s.cpu(), vd.sum(), tf32(v, 0), "sum")
        within(mv.mean().cpu(), vd.mean(), tf32(v, 0) / 3001, "mean")
        within(mv.amax(0).cpu(), vd.amax(0), 0, "amax")
        within(mv.max(), vd.max(), 0, "max")
        within(mv.logsumexp(0).cpu(), vd.logsumexp(0), 1e-3, "logsumexp")
        within(mv.argmax(0).cpu(), v.argmax(0), 0, "argmax")
    reasons = " ".join(r.reason for r in kohakutt.placement_log())
    assert "two results gathered" in reasons and "Partial" in reasons
    x = torch.randn(9, 12, generator=gen(10))
    m = put(x, mesh, "S(0)")
    xd = x.double()
    within(m.sum(0).cpu(), xd.sum(0), tf32(x, 0), "sum of a matrix")
    within(m.var(0).cpu(), xd.var(0), 4 * tf32(x * x, 0) / 8, "var")
    within(m.cumsum(0).cpu(), xd.cumsum(0), tf32(x, 0), "cumsum")
    within(m.softmax(0).cpu(), xd.softmax(0), 1e-5, "softmax over the sharded dim")
    within(m.softmax(1).cpu(), xd.softmax(1), 1e-5, "softmax over the other dim")


def test_elementwise_follows_the_most_sharded_input(mesh):
    x = put(torch.randn(64, 32, generator=gen(20)), mesh, "S(0)")
    bias = put(torch.randn(32, generator=gen(11)), mesh, "R")
    with kohakutt.record_placements():
        y = x + bias
    assert kohakutt.placement(y) == Sharded(0, (32, 32))
    (rec,) = kohakutt.placement_log()
    assert rec.op == "add" and rec.output == ("Sharded(dim=0)",) and not rec.conversions
    z = y + put(torch.randn(64, 32, generator=gen(12)), mesh, "S(1)")
    assert kohakutt.placement(z) == Sharded(0, (32, 32))


def test_ops_without_a_rule_are_gathered_and_logged(mesh):
    x = torch.randn(8, 6, generator=gen(13))
    m = put(x, mesh, "S(0)")
    before = torch.tt.mesh_stats()["fallbacks"].get("pad", 0)
    with kohakutt.record_placements():
        y = nn.functional.pad(m, (1, 2))
    (rec,) = [r for r in kohakutt.placement_log() if r.op == "pad"]
    assert "no rule" in rec.reason and rec.conversions and rec.conversions[0].kind == "all_gather"
    assert torch.tt.mesh_stats()["fallbacks"]["pad"] == before + 1
    within(y.cpu(), nn.functional.pad(x, (1, 2)), 0, "pad")


def test_parameters_stay_replicated_whatever_their_sizes(mesh):
    ln = nn.LayerNorm(16)
    x = torch.randn(16, 16, generator=gen(21))  # as many rows as features: the weight's size matches dim 0
    m = put(x, mesh, "S(0)")
    w, b = put(ln.weight.detach(), mesh, "R"), put(ln.bias.detach(), mesh, "R")
    y = nn.functional.layer_norm(m, (16,), w, b)
    assert kohakutt.placement(y) == Sharded(0, (8, 8))
    within(y.cpu(), ln(x), 1e-2, "layer norm")


def test_decisions_are_cached(mesh):
    x = put(torch.randn(16, 8, generator=gen(14)), mesh, "S(0)")
    (x * 2).sum()
    hits = torch.tt.mesh_stats()["decisions"].get("hit", 0)
    misses = torch.tt.mesh_stats()["decisions"].get("miss", 0)
    for _ in range(3):
        (x * 2).sum()
    st = torch.tt.mesh_stats()["decisions"]
    assert st["miss"] == misses and st["hit"] >= hits + 6
    assert len(mrules._cache) > 0


def test_a_chip_tensor_does_not_mix_with_the_mesh(mesh):
    with pytest.raises(RuntimeError, match="same device"):
        put(torch.ones(4), mesh) + torch.ones(4, device="tt:0")


# ------------------------------------------------------------------------------------------- modules, training
def _model(seed=0, d=64):
    torch.manual_seed(seed)
    return nn.Sequential(Block(d), Block(d))


def test_marks_place_a_module(mesh):
    m = _model().to(mesh)
    assert kohakutt.placement(m[0].up.weight) == Sharded(0, (128, 128))
    assert kohakutt.placement(m[0].up.bias) == Sharded(0, (128, 128))
    assert str(kohakutt.placement(m[0].down.weight)) == "Sharded(dim=1)"
    assert kohakutt.placement(m[0].down.bias) == Replicate()
    assert kohakutt.placement(m[0].norm.weight) == Replicate()
    w = m[1].up.weight
    assert kohakutt.place(m[1].up, weight="R") is m[1].up  # re-placed now, same parameter object
    assert m[1].up.weight is w and kohakutt.placement(w) == Replicate()
    assert kohakutt.shard(m[1].down, 0) is m[1].down and kohakutt.placement(m[1].down.weight) == Sharded(0, (32, 32))
    with pytest.raises(kohakutt.mesh.PlacementError):
        kohakutt.colwise(nn.LayerNorm(4))
    with pytest.raises(kohakutt.mesh.PlacementError):
        kohakutt.place(nn.Linear(2, 2), wieght="R")


def test_forward_matches_one_chip_and_float64(mesh):
    ref = _model()
    x = torch.randn(48, 64, generator=gen(15))
    y64 = copy.deepcopy(ref).double()(x.double())
    for dt, tol in ((torch.float32, 5e-3), (torch.bfloat16, 0.1)):
        one = copy.deepcopy(ref).to(dt).to("tt:0")(x.to(dt).to("tt:0")).detach().cpu().double()
        two = copy.deepcopy(ref).to(dt).to(mesh)(x.to(dt).to(mesh)).detach().cpu().double()
        within(two, y64, tol * y64.abs().max(), f"{dt} mesh against float64")
        within(two, one, (tol if dt is torch.bfloat16 else 1e-4) * y64.abs().max(), f"{dt} mesh against one chip")


def _train(model, dev, steps=4, dtype=torch.float32):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(32, 64, generator=gen(16)).to(dtype).to(dev)
    y = torch.randn(32, 64, generator=gen(17)).to(dtype).to(dev)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, opt


def test_adamw_training_matches_one_chip(mesh):
    ref = _model(1)
    one, _ = _train(copy.deepcopy(ref).to("tt:0"), "tt:0")
    with kohakutt.record_placements():
        two, opt = _train(copy.deepcopy(ref).to(mesh), mesh)
    cpu, _ = _train(copy.deepcopy(ref).double(), "cpu", dtype=torch.float64)
    assert all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(one, two)), (one, two)
    assert all(abs(a - b) <= 5e-3 * abs(b) for a, b in zip(two, cpu)), (two, cpu)
    log = kohakutt.placement_log()
    ops = {r.op for r in log}
    assert {"layer_norm_backward", "gelu_backward", "addmm", "lerp"} <= ops
    first_backward = next(i for i, r in enumerate(log) if r.op.endswith("_backward"))
    first_optim = next(i for i, r in enumerate(log) if r.op == "lerp")
    kinds = {c.kind for r in log[first_backward:first_optim] for c in r.conversions}
    assert kinds & {"all_gather", "reduce_scatter", "all_reduce"}, "the backward's collectives are logged"
    assert any(r.output and "Partial" in r.output[-1] for r in log if r.op == "layer_norm_backward")
    for p in opt.param_groups[0]["params"]:  # optimizer state lives where its parameter does
        st = opt.state[p]
        assert kohakutt.placement(st["exp_avg"]) == kohakutt.placement(p)


def test_a_training_loop_on_the_mesh_does_not_grow(mesh):
    from kohakutt.frontends.torch import runtime

    model = _model(4).to(mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(32, 64, generator=gen(22)).to(mesh)
    held = []
    for _ in range(4):
        opt.zero_grad(set_to_none=False)
        ((model(x) - x) ** 2).mean().backward()
        opt.step()
        torch.tt.synchronize(mesh)
        runtime.drain_frees()
        held.append([torch.tt.memory_allocated(c) for c in (0, 1)])
    assert held[1] == held[2] == held[3]


def test_a_second_mesh_or_a_lone_chip_is_refused(mesh, knobs):
    with pytest.raises(kohakutt.DeviceError, match="two distinct chips"):
        kohakutt.mesh([0, 0])
    knobs(KTT_SIM_DEVICES="1")
    with pytest.raises(kohakutt.DeviceError, match="KTT_SIM_DEVICES=2"):
        kohakutt.mesh([0, 1])


class _Attn(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.emb = kohakutt.colwise(nn.Embedding(50, d))
        self.qkv = kohakutt.colwise(nn.Linear(d, 3 * d))
        self.proj = kohakutt.rowwise(nn.Linear(d, d))
        self.head = nn.Linear(d, 50)

    def forward(self, ids):
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(x + self.proj(a.transpose(1, 2).reshape(b, t, d)))


@pytest.mark.parametrize("case", ["attention", "conv"])
def test_other_models_train_as_on_one_chip(mesh, case):
    torch.manual_seed(6)
    if case == "attention":
        ref = _Attn()
        inp, tgt = torch.randint(0, 50, (4, 8), generator=gen(23)), torch.randint(0, 50, (4, 8), generator=gen(24))
    else:
        ref = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32, 10))
        inp, tgt = torch.randn(8, 3, 4, 4, generator=gen(25)), torch.randint(0, 10, (8,), generator=gen(26))
    got = {}
    for dev in ("tt:0", mesh):
        m = copy.deepcopy(ref).to(dev)
        out = m(inp.to(dev))
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), tgt.to(dev).reshape(-1))
        loss.backward()
        got[str(dev)] = (loss.item(), [p.grad.cpu() for p in m.parameters()])
    (l1, g1), (l2, g2) = got["tt:0"], got[str(mesh)]
    assert abs(l1 - l2) <= 1e-5 * abs(l1)
    for a, b in zip(g1, g2):
        within(b, a, 1e-5 * a.abs().max() + 1e-7, f"{case} gradient")


def test_cpu_and_save_give_whole_tensors(mesh):
    ref = _model(2)
    m = copy.deepcopy(ref).to(mesh)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf)  # tagged as CPU tensors: they load anywhere, whole
    for k, v in ref.state_dict().items():
        assert sd[k].shape == v.shape and torch.equal(sd[k], v), k
    back = copy.deepcopy(m).cpu()
    for (k, a), b in zip(back.state_dict().items(), ref.state_dict().values()):
        assert a.device.type == "cpu" and torch.equal(a, b), k
    m.load_state_dict(ref.state_dict())  # whole tensors go back into their shards
    assert kohakutt.placement(m[0].down.weight) == Sharded(1, (128, 128))


def test_memory_per_chip_halves_when_sharded(mesh):
    torch.tt.synchronize(mesh)
    before = [torch.tt.memory_allocated(c) for c in (0, 1)]
    w = put(torch.zeros(1024, 1024), mesh, "S(0)")  # 4 MiB
    after = [torch.tt.memory_allocated(c) for c in (0, 1)]
    assert [a - b for a, b in zip(after, before)] == [2 << 20, 2 << 20]
    r = put(torch.zeros(1024, 1024), mesh, "R")
    assert [torch.tt.memory_allocated(c) - a for c, a in zip((0, 1), after)] == [4 << 20, 4 << 20]
    del w, r


def test_random_draws_match_one_chip(mesh):
    torch.manual_seed(5)
    one = torch.randn(600, 600, device="tt:0").cpu()
    torch.manual_seed(5)
    two = torch.randn(600, 600, device=mesh)
    assert kohakutt.placement(two) == Sharded(0, (300, 300))  # 1.4 MiB: sharded when created
    assert torch.equal(two.cpu(), one)


# ---------------------------------------------------------------------------------------------------- capture
def test_a_captured_mesh_step_replays_on_both_chips(mesh):
    ref = _model(3)
    losses = {}
    for dev in ("tt:0", mesh):
        model = copy.deepcopy(ref).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        x = torch.randn(32, 64, generator=gen(18)).to(dev)
        y = torch.randn(32, 64, generator=gen(19)).to(dev)

        def step(x, y, model=model, opt=opt):
            opt.zero_grad(set_to_none=False)
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        rep = kohakutt.capture(step, x, y, warmup=2)
        losses[str(dev)] = [rep(x, y).item() for _ in range(3)]
        rep.release()
    one, two = losses["tt:0"], losses[str(mesh)]
    assert all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(one, two)), (one, two)
    assert two[0] > two[1] > two[2]
