"""LSTM and GRU on tt: the fused cells (kohakutt/frontends/torch/aten/rnn.py) and the modules built on them, forward
and backward, against the CPU in float64 on the same float32 values.

- The cells alone are element-wise fp32 math (additions, products, the SFPU's correctly rounded sigmoid and tanh): a
  chain of a few roundings, within ``FP32 = 2^-20`` of the largest magnitude (about 8 ulp).
- The modules add the input and hidden projections, matmuls whose float32 operands the card reads as TF32: each
  projection within TF32 = 3 * 2^-10 of the sum of its terms' magnitudes. The gate functions are contractions
  (|sigmoid'| <= 1/4, |tanh'| <= 1, and the cell state is a convex mix), so the errors do not grow along the sequence;
  the tolerance is ``4 * TF32`` of the largest magnitude of each result (outputs, input gradients, weight gradients,
  whose sums over steps and batch have terms of about their own size here).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pack_sequence, pad_packed_sequence

import kohakutt  # noqa: F401  (registers the tt device)

DEV = torch.device("tt", 0)
FP32 = 2.0**-20
TF32 = 3 * 2.0**-10
aten = torch.ops.aten


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_g(seed))


def close(got: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> None:
    got = got.detach().cpu().double()
    ref = ref.detach().double()
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    bound = tol * max(1.0, ref.abs().max().item() if ref.numel() else 0.0)
    assert err <= bound, f"{what}: error {err:.3g} > {bound:.3g}"


# ------------------------------------------------------------------------------------------------------------ cells
@pytest.mark.parametrize("bias", [True, False])
def test_fused_lstm_cell_and_backward(bias):
    n, h = 3, 5
    ig, hg, cx = randn(n, 4 * h, seed=1), randn(n, 4 * h, seed=2), randn(n, h, seed=3)
    b1, b2 = (randn(4 * h, seed=4), randn(4 * h, seed=5)) if bias else (None, None)
    args = [ig, hg, cx, b1, b2]
    got = aten._thnn_fused_lstm_cell(*[a.to(DEV) if a is not None else None for a in args])
    gates = ig.double() + hg.double() + ((b1.double() + b2.double()) if bias else 0)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.double() + i * g
    for a, r, what in zip(got, (o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)), ("hy", "cy", "workspace")):
        close(a, r, FP32, what)
    ghy, gcy = randn(n, h, seed=6), randn(n, h, seed=7)
    gg, gcx, gb = aten._thnn_fused_lstm_cell_backward_impl(ghy.to(DEV), gcy.to(DEV), cx.to(DEV), got[1], got[2], bias)
    leaves = [t.double().requires_grad_() for t in (ig, cx)]
    gates = leaves[0] + hg.double() + ((b1.double() + b2.double()) if bias else 0)
    i, f, g, o = gates.chunk(4, 1)
    c = f.sigmoid() * leaves[1] + i.sigmoid() * g.tanh()
    torch.autograd.backward([o.sigmoid() * c.tanh(), c], [ghy.double(), gcy.double()])
    close(gg, leaves[0].grad, FP32 * 4, "grad gates")
    close(gcx, leaves[1].grad, FP32 * 4, "grad cx")
    if bias:
        close(gb, leaves[0].grad.sum(0), 2.0**-9 * 2, "grad bias")  # the card's sum over the batch


@pytest.mark.parametrize("bias", [True, False])
def test_fused_gru_cell_and_backward(bias):
    n, h = 3, 5
    ig, hg, hx = randn(n, 3 * h, seed=11), randn(n, 3 * h, seed=12), randn(n, h, seed=13)
    b1, b2 = (randn(3 * h, seed=14), randn(3 * h, seed=15)) if bias else (None, None)
    hy, ws = aten._thnn_fused_gru_cell(ig.to(DEV), hg.to(DEV), hx.to(DEV), *(
        (b1.to(DEV), b2.to(DEV)) if bias else ()))  # fmt: skip
    leaves = [t.double().requires_grad_() for t in (ig, hg, hx)]
    i_, h_ = leaves[0], leaves[1]
    if bias:
        i_, h_ = i_ + b1.double(), h_ + b2.double()
    ir, ii, in_ = i_.chunk(3, 1)
    hr, hi, hn = h_.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    nn_ = (in_ + r * hn).tanh()
    ref = nn_ + z * (leaves[2] - nn_)
    close(hy, ref, FP32, "hy")
    close(ws, torch.cat([r, z, nn_, leaves[2], hn], 1), FP32, "workspace")
    g = randn(n, h, seed=16)
    outs = aten._thnn_fused_gru_cell_backward(g.to(DEV), ws, bias)
    ref.backward(g.double())
    close(outs[0], leaves[0].grad, 4 * FP32, "grad input gates")
    close(outs[1], leaves[1].grad, 4 * FP32, "grad hidden gates")
    close(outs[2], leaves[2].grad, 4 * FP32, "grad hx")
    if bias:
        close(outs[3], leaves[0].grad.sum(0), 2 * 2.0**-9, "grad input bias")
        close(outs[4], leaves[1].grad.sum(0), 2 * 2.0**-9, "grad hidden bias")


# ---------------------------------------------------------------------------------------------------------- modules
def _flat(o):
    return [o] if isinstance(o, torch.Tensor) else [t for y in o for t in _flat(y)]


def compare_module(make, x: torch.Tensor, *state, seed: int = 0) -> None:
    """The module on tt against its float64 copy on the CPU: every output, the input gradient and every parameter's
    gradient for one random weighting of the outputs."""
    torch.manual_seed(seed)
    m = make()
    mt, md = copy.deepcopy(m).to(DEV), copy.deepcopy(m).double()
    move = lambda s, f: tuple(f(t) for t in s) if isinstance(s, tuple) else f(s)  # noqa: E731
    xd, xt = x.double().requires_grad_(), x.to(DEV).requires_grad_()
    od = _flat(md(xd, *[move(s, lambda t: t.double()) for s in state]))
    ot = _flat(mt(xt, *[move(s, lambda t: t.to(DEV)) for s in state]))
    ws = [torch.randn(o.shape, generator=_g(seed + 100 + i), dtype=torch.float64) for i, o in enumerate(od)]
    sum((o * w).sum() for o, w in zip(od, ws)).backward()
    sum((o * w.float().to(DEV)).sum() for o, w in zip(ot, ws)).backward()
    for i, (a, r) in enumerate(zip(ot, od)):
        close(a, r, 4 * TF32, f"output {i}")
    close(xt.grad, xd.grad, 4 * TF32, "input gradient")
    for (name, a), r in zip(mt.named_parameters(), md.parameters()):
        close(a.grad, r.grad, 4 * TF32, f"gradient of {name}")


MODULES = [
    ("lstm", lambda: torch.nn.LSTM(4, 5), (6, 2, 4)),
    ("lstm 2 layers bidirectional batch_first", lambda: torch.nn.LSTM(4, 5, 2, bidirectional=True, batch_first=True),
     (2, 5, 4)),
    ("lstm proj_size", lambda: torch.nn.LSTM(4, 5, proj_size=3), (4, 2, 4)),
    ("lstm no bias", lambda: torch.nn.LSTM(4, 5, bias=False), (4, 2, 4)),
    ("lstm unbatched", lambda: torch.nn.LSTM(4, 5), (4, 4)),
    ("gru", lambda: torch.nn.GRU(4, 5), (6, 2, 4)),
    ("gru 2 layers bidirectional", lambda: torch.nn.GRU(4, 5, 2, bidirectional=True), (5, 2, 4)),
    ("gru no bias batch_first", lambda: torch.nn.GRU(4, 5, bias=False, batch_first=True), (2, 4, 4)),
]  # fmt: skip


@pytest.mark.parametrize("name,make,shape", MODULES, ids=[m[0] for m in MODULES])
def test_modules_forward_backward(name, make, shape):
    compare_module(make, randn(*shape, seed=20))


def test_cells_and_initial_states():
    compare_module(lambda: torch.nn.LSTMCell(4, 5), randn(3, 4, seed=21), (randn(3, 5, seed=22), randn(3, 5, seed=23)))
    compare_module(lambda: torch.nn.GRUCell(4, 5), randn(3, 4, seed=24), randn(3, 5, seed=25))
    compare_module(lambda: torch.nn.LSTM(4, 5), randn(3, 2, 4, seed=26), (randn(1, 2, 5, seed=27),
                                                                          randn(1, 2, 5, seed=28)))  # fmt: skip


def test_packed_sequences():
    """pack_padded_sequence / pack_sequence through LSTM and GRU on tt (the lengths stay on the CPU, as PyTorch
    requires), then pad_packed_sequence: outputs, final states and gradients as the CPU's."""
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(4, 5, batch_first=True)
    x, lengths = randn(3, 6, 4, seed=30), torch.tensor([6, 4, 2])
    ld, lt = copy.deepcopy(lstm).double(), copy.deepcopy(lstm).to(DEV)
    xd, xt = x.double().requires_grad_(), x.to(DEV).requires_grad_()
    od, (hd, cd) = ld(pack_padded_sequence(xd, lengths, batch_first=True))
    ot, (ht, ct) = lt(pack_padded_sequence(xt, lengths, batch_first=True))
    pd, pl = pad_packed_sequence(od, batch_first=True)
    pt, tl = pad_packed_sequence(ot, batch_first=True)
    assert torch.equal(pl, tl)
    for a, r, what in ((pt, pd, "padded output"), (ht, hd, "h_n"), (ct, cd, "c_n")):
        close(a, r, 4 * TF32, what)
    (pd.sum() + hd.sum()).backward()
    (pt.sum() + ht.sum()).backward()
    close(xt.grad, xd.grad, 4 * TF32, "input gradient")
    gru = torch.nn.GRU(4, 5, bidirectional=True)
    seqs = [randn(5, 4, seed=31), randn(3, 4, seed=32)]
    packed = pack_sequence(seqs)
    rd, hd = copy.deepcopy(gru).double()(PackedSequence(packed.data.double(), packed.batch_sizes))
    rt, ht = copy.deepcopy(gru).to(DEV)(PackedSequence(packed.data.to(DEV), packed.batch_sizes))
    close(rt.data, rd.data, 4 * TF32, "packed GRU output")
    close(ht, hd, 4 * TF32, "packed GRU h_n")


def test_bfloat16_lstm_runs_and_rounds_once_per_cell():
    """A bfloat16 LSTM: the projections at the card's bf16 matmul numerics, the cells in fp32 rounded once to
    bfloat16; the result within a few bfloat16 roundings (2^-8 each) of the float64 reference."""
    torch.manual_seed(4)
    m = torch.nn.LSTM(4, 5)
    x = randn(3, 2, 4, seed=33).bfloat16()
    out, _ = copy.deepcopy(m).to(DEV).bfloat16()(x.to(DEV))
    ref, _ = copy.deepcopy(m).bfloat16().double()(x.double())
    assert out.dtype == torch.bfloat16
    close(out, ref, 8 * 2.0**-8, "bf16 LSTM")
