"""float32 precision on tt follows PyTorch's own knobs, and float32 reductions are exact float32 by default.

References are CPU float64 on the same inputs. Bounds: a float32 result of a K-term sum is within about
K * 2^-24 of the sum of its terms' magnitudes (the standard worst case; typical errors are far smaller), so
"float32-accurate" here means within a small multiple of 2^-24 of sum |terms|; one pass on TF32 operands errs by
up to about 2^-10 of it, a HiFi2 pass (in0 keeps 7 significant bits) by up to about 2^-6.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kohakutt
from kohakutt.errors import ConfigError

TT = "tt"
EPS = 2.0**-24
MODES = ("highest", "high", "medium")


@contextlib.contextmanager
def matmul_precision(mode: str):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(mode)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def generic_precision(value: str):
    """torch's newer backend-neutral setting (``torch.backends.fp32_precision``), restored after (through torch's own
    context manager: PyTorch's test utilities may have disabled setting the flags directly)."""
    return torch.backends.flags(fp32_precision=value)


@contextlib.contextmanager
def cpu_matmul_precision(value: str):
    """oneDNN's own float32 matmul setting (``torch.backends.mkldnn.matmul.fp32_precision``), restored after."""
    before = torch._C._get_fp32_precision_getter("mkldnn", "matmul")
    torch._C._set_fp32_precision_setter("mkldnn", "matmul", value)
    try:
        yield
    finally:
        torch._C._set_fp32_precision_setter("mkldnn", "matmul", before)


def rel_err(got: torch.Tensor, ref: torch.Tensor, mag: torch.Tensor) -> float:
    """max |got - ref| / |terms| elementwise (``mag``: the sum of the terms' magnitudes), in float64."""
    return float(((got.cpu().double() - ref).abs() / mag.clamp_min(1e-300)).max())


def gen(seed: int, *shape: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# --------------------------------------------------------------------------------------------- matmul modes
CASES = {
    "mm": (lambda a, b: a @ b, [(33, 70), (70, 45)]),
    "bmm": (torch.bmm, [(3, 20, 64), (3, 64, 17)]),
    "matmul broadcast": (torch.matmul, [(2, 3, 20, 64), (64, 17)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), [(33, 45), (33, 70), (70, 45)]),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0), [(3, 20, 17), (3, 20, 64), (3, 64, 17)]),
    "linear": (F.linear, [(4, 9, 70), (45, 70), (45,)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 8, 9, 9), (6, 8, 3, 3), (6,)]),
    "sdpa": (F.scaled_dot_product_attention, [(2, 2, 40, 16), (2, 2, 40, 16), (2, 2, 40, 16)]),
}


def _magnitude(name: str, fn, ins: list[torch.Tensor]) -> torch.Tensor:
    """The sum of the magnitudes of each output's terms (float64): the op on |inputs| (for SDPA: |out| + its own
    scale, as softmax weights sum to 1, |P| @ |V| bounds the output)."""
    if name == "sdpa":
        q, k, v = (t.double() for t in ins)
        p = torch.softmax(q @ k.transpose(-1, -2) / 4, -1)
        return p @ v.abs() + (q.abs() @ k.abs().transpose(-1, -2) / 4).amax(-1, keepdim=True) * v.abs().amax()
    return fn(*(t.double().abs() for t in ins)).abs() + fn(*(t.double() for t in ins)).abs()


@pytest.mark.parametrize("name", list(CASES))
def test_float32_matmul_precision_picks_the_mode(name):
    """ "highest" (PyTorch's default) is float32-accurate; "high" is the card's TF32 operands, about 2^-10 of the
    terms' magnitudes; "medium" one HiFi2 pass, coarser still. Every float32 GEMM on tt follows it."""
    fn, shapes = CASES[name]
    ins = [gen(i + 7, *s) for i, s in enumerate(shapes)]
    ref = fn(*(t.double() for t in ins))
    mag = _magnitude(name, fn, ins)
    errs = {}
    for mode in MODES:
        with matmul_precision(mode):
            errs[mode] = rel_err(fn(*(t.to(TT) for t in ins)), ref, mag)
    assert torch.get_float32_matmul_precision() == "highest"
    assert errs["highest"] < 2**5 * EPS, errs
    assert 2**-16 < errs["high"] < 2**-9, errs
    assert errs["high"] < errs["medium"] < 2**-5, errs


def test_backward_follows_the_mode():
    """The backward's GEMMs (grad_input, grad_weight) are float32 matmuls too."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.Tanh(), nn.Linear(96, 8))
    x, y = torch.randn(32, 64), torch.randint(0, 8, (32,))
    ref = nn.Sequential(*(m for m in model)).double()
    F.cross_entropy(ref(x.double()), y).backward()
    errs = {}
    for mode in ("highest", "high"):
        tt_model = nn.Sequential(nn.Linear(64, 96), nn.Tanh(), nn.Linear(96, 8))
        tt_model.load_state_dict(model.state_dict())
        tt_model = tt_model.to(TT)
        with matmul_precision(mode):
            F.cross_entropy(tt_model(x.to(TT)), y.to(TT)).backward()
        errs[mode] = max(float((p.grad.cpu().double() - r.grad).abs().max() / r.grad.abs().max())
                         for p, r in zip(tt_model.parameters(), ref.parameters()))  # fmt: skip
    assert errs["highest"] < 2**-20 < errs["high"], errs


def test_bfloat16_inputs_are_the_same_in_every_mode():
    a, b = gen(1, 40, 64).bfloat16().to(TT), gen(2, 64, 24).bfloat16().to(TT)
    outs = []
    for mode in MODES:
        with matmul_precision(mode):
            outs.append((a @ b).cpu())
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_torch_backends_fp32_precision_applies():
    """PyTorch's newer API: the backend-neutral ``torch.backends.fp32_precision`` ("ieee", "tf32", "bf16") speaks for
    tt, which has no setting of its own (the CUDA / oneDNN ones do not apply)."""
    a, b = gen(3, 33, 70), gen(4, 70, 45)
    with matmul_precision("high"):
        tf32 = (a.to(TT) @ b.to(TT)).cpu()
    with generic_precision("tf32"):
        assert torch.equal((a.to(TT) @ b.to(TT)).cpu(), tf32)
    with matmul_precision("highest"), generic_precision("ieee"):
        accurate = (a.to(TT) @ b.to(TT)).cpu()
    ref = a.double() @ b.double()
    assert rel_err(accurate, ref, a.double().abs() @ b.double().abs()) < 2**5 * EPS
    with generic_precision("none"), cpu_matmul_precision("bf16"):  # the CPU's own setting: not tt's
        assert torch.equal((a.to(TT) @ b.to(TT)).cpu(), accurate)


def test_numerics_scope_overrides_torch():
    """``kohakutt.numerics(fp32_matmul=...)`` wins over PyTorch's setting for the ops queued inside; a scope
    fidelity shapes one-pass matmuls only (the split runs its parts at HiFi4)."""
    a, b = gen(5, 33, 70), gen(6, 70, 45)
    ref, mag = a.double() @ b.double(), a.double().abs() @ b.double().abs()
    with matmul_precision("medium"), kohakutt.numerics(fp32_matmul="highest", fidelity="LoFi"):
        assert rel_err(a.to(TT) @ b.to(TT), ref, mag) < 2**5 * EPS
    with kohakutt.numerics(fp32_matmul="high"):
        high = (a.to(TT) @ b.to(TT)).cpu()
    with matmul_precision("high"):
        assert torch.equal((a.to(TT) @ b.to(TT)).cpu(), high)
    with pytest.raises(ConfigError, match="fp32_matmul"), kohakutt.numerics(fp32_matmul="tf32"):
        pass
    with pytest.raises(ConfigError, match="fp32_reduce"), kohakutt.numerics(fp32_reduce="fast"):
        pass


def test_fidelity_takes_tt_metals_numbers_names_and_the_enum():
    """``kohakutt.numerics(fidelity=)`` reads numbers as TT-Metal's MathFidelity does (0 LoFi, 2 HiFi2, 3 HiFi3,
    4 HiFi4), as the tinygrad frontend does: 2, "HiFi2" and Fidelity.HiFi2 run the same bits; 1 is refused."""
    a, b = gen(9, 33, 70).to(torch.bfloat16), gen(10, 70, 45).to(torch.bfloat16)
    out = {}
    for fid in (2, "hifi2", kohakutt.Fidelity.HiFi2, 3, "HiFi3", 4):
        with kohakutt.numerics(fidelity=fid) as num:
            out[fid] = (a.to(TT) @ b.to(TT)).cpu()
        assert num.fidelity is kohakutt.Fidelity.of(fid)
    assert torch.equal(out[2], out["hifi2"]) and torch.equal(out[2], out[kohakutt.Fidelity.HiFi2])
    assert torch.equal(out[3], out["HiFi3"]) and not torch.equal(out[2], out[3])
    ref = a.double() @ b.double()
    assert (out[2].double() - ref).abs().max() > (out[4].double() - ref).abs().max()  # HiFi2 keeps fewer bits
    for bad in (1, 5, "HiFi5", True):
        with pytest.raises(ConfigError, match="unknown math fidelity"), kohakutt.numerics(fidelity=bad):
            pass


def test_a_captured_step_keeps_the_mode_it_was_captured_in():
    """Numerics are recorded per op when queued: a replay runs as captured, whatever the setting is later."""
    a, b = gen(7, 33, 70).to(TT), gen(8, 70, 45).to(TT)
    out = torch.empty(33, 45, device=TT)

    def step(x, y):
        torch.matmul(x, y, out=out)
        return out

    with matmul_precision("high"):
        eager_high = step(a, b).cpu()
        replay = kohakutt.capture(step, a, b, warmup=1)
    assert torch.equal(replay(a, b).cpu(), eager_high)
    assert not torch.equal(step(a, b).cpu(), eager_high)  # eager now runs "highest"


def test_split_mode_costs_more_card_time():
    """The simulator charges the split what it costs on the card: six HiFi4 passes of the parts, the split's
    element-wise ops and the adds."""
    a, b = gen(9, 1024, 1024).to(TT), gen(10, 1024, 1024).to(TT)
    card = {}
    for mode in MODES:
        with matmul_precision(mode):
            a @ b  # warm the caches
            torch.tt.synchronize()
            start, end = torch.tt.Event(enable_timing=True), torch.tt.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            torch.tt.synchronize()
            card[mode] = start.elapsed_time(end)
    assert card["highest"] > 6 * card["high"] > 0 and card["medium"] <= card["high"], card


# ----------------------------------------------------------------------------------------- float32 reductions
def test_issue_figures_are_exact():
    """The issue's two examples: arange(4096.).sum() was off by 3584, a softmax row summed to 0.9993 on tt."""
    assert torch.arange(4096.0, device=TT).sum().item() == 4096 * 4095 / 2
    x = gen(11, 8, 4096) * 4
    rows = torch.softmax(x.to(TT), -1).sum(-1).cpu().double()
    assert float((rows - 1).abs().max()) < 2**-20


def _targets(t: torch.Tensor) -> torch.Tensor:
    return torch.arange(t.shape[0] * t.shape[1], device=t.device) % t.shape[-1]


REDUCTIONS = {
    "sum": lambda t: t.sum(-1),
    "sum all": lambda t: t.sum(),
    "sum dims": lambda t: t.sum((0, 2)),
    "mean": lambda t: t.mean(-1),
    "mean 0": lambda t: t.mean(0),
    "var": lambda t: t.var(-1),
    "std": lambda t: t.std(0),
    "norm": lambda t: t.norm(dim=-1),
    "norm 1": lambda t: torch.linalg.vector_norm(t, 1, dim=-1),
    "norm 3": lambda t: torch.linalg.vector_norm(t, 3, dim=-1),
    "norm inf": lambda t: torch.linalg.vector_norm(t, float("inf"), dim=-1),
    "norm -inf": lambda t: torch.linalg.vector_norm(t, float("-inf"), dim=0),
    "cumsum": lambda t: t.cumsum(-1),
    "prod": lambda t: (t[..., :24] / 2 + 1).prod(-1),
    "softmax": lambda t: F.softmax(t, -1),
    "log_softmax": lambda t: F.log_softmax(t, 1),
    "logsumexp": lambda t: t.logsumexp(-1),
    "layer_norm": lambda t: F.layer_norm(t, (t.shape[-1],)),
    "rms_norm": lambda t: F.rms_norm(t, (t.shape[-1],)),
    "group_norm": lambda t: F.group_norm(t, 2),
    "cross_entropy": lambda t: F.cross_entropy(t.reshape(-1, t.shape[-1]), _targets(t)),
    "cosine_similarity": lambda t: F.cosine_similarity(t, t.flip(-1), dim=-1),
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_float32_reductions_match_float64(name):
    """Each within a few float32 roundings of CPU float64 (relative to the result's scale), where the FPU reduce on
    TF32 operands errs by about 2^-11 of the terms."""
    fn = REDUCTIONS[name]
    x = gen(12, 4, 6, 777) * 3 + 0.5
    ref = fn(x.double())
    got = fn(x.to(TT)).cpu().double()
    assert got.shape == ref.shape
    scale = float(ref.abs().max()) if name not in ("var", "std", "cumsum") else float(ref.abs().max()) * 4
    assert float((got - ref).abs().max()) <= 64 * EPS * scale, float((got - ref).abs().max()) / scale


def test_norm_backward_matches_float64():
    """layer / RMS norm backward read the forward's statistics: exact statistics give float32-accurate gradients."""
    x, w, b, g = gen(13, 16, 300) * 2 + 1, gen(14, 300), gen(15, 300), gen(16, 16, 300)
    for fn in (lambda t, w, b: F.layer_norm(t, (300,), w, b), lambda t, w, b: F.rms_norm(t, (300,), w) + b):
        ins = [t.clone().requires_grad_() for t in (x, w, b)]
        tt_ins = [t.to(TT).requires_grad_() for t in (x, w, b)]
        ref_ins = [t.double().requires_grad_() for t in (x, w, b)]
        fn(*tt_ins).backward(g.to(TT))
        fn(*ref_ins).backward(g.double())
        for t, r in zip(tt_ins, ref_ins):
            assert float((t.grad.cpu().double() - r.grad).abs().max() / r.grad.abs().max()) < 2**-19
        del ins


def test_fp32_reduce_tf32_keeps_the_fpu_reduce():
    """``kohakutt.numerics(fp32_reduce="tf32")``: TT-NN's FPU reduce, which reads float32 as TF32 (the old default:
    the issue's 3584 off)."""
    t = torch.arange(4096.0, device=TT)
    with kohakutt.numerics(fp32_reduce="tf32"):
        fast = t.sum().item()
    assert fast != 4096 * 4095 / 2 and abs(fast - 4096 * 4095 / 2) <= 2**-9 * 4096 * 4095 / 2
    with matmul_precision("medium"):  # the matmul precision leaves reductions exact
        assert t.sum().item() == 4096 * 4095 / 2
