"""The fused LSTM and GRU cells on ``tt``, which ``nn.LSTM`` / ``nn.GRU`` / ``nn.LSTMCell`` / ``nn.GRUCell`` reach.

PyTorch's RNN code (``aten/src/ATen/native/RNN.cpp``) computes a layer's input and hidden projections with ``linear``
and, for an input on a CUDA, XPU or PrivateUse1 device, the gate math with ``_thnn_fused_lstm_cell`` /
``_thnn_fused_gru_cell`` and their backward. Those have kernels for CUDA and XPU only, not for the CPU: that is why
LSTM and GRU failed on tt even with the CPU fallback on (the fallback had nothing to run). Here they are compositions
of tt element-wise ops with CUDA's definitions (``aten/src/ATen/native/cuda/RNN.cu``):

- LSTM: gates = input_gates + hidden_gates (+ both biases), chunks (i, f, g, o); i, f, o = sigmoid, g = tanh;
  cy = f * cx + i * g, hy = o * tanh(cy); the workspace keeps the activated gates (N, 4H) for the backward, which
  applies the chain rule to them (an undefined grad_hy / grad_cy counts as zero); the bias gradient is the gate
  gradient summed over the batch.
- GRU: chunks (r, z, n); r, z = sigmoid of the input and hidden parts summed, n = tanh(in + r * (hn + b_hn)),
  hy = n + z * (hx - n); the workspace keeps (r, z, n, hx, hn + b_hn) (N, 5H).

As on CUDA the math runs in fp32 (bfloat16 operands are widened) and the results are rounded once into the
operands' dtype; the SFPU's sigmoid and tanh are within an fp32 ulp or two of the true functions.
"""

from __future__ import annotations

import torch
from kohakutt.frontends.torch.aten.registry import kernel

_F32 = torch.float32
_IR = ("add", "sigmoid", "tanh", "mul", "sub", "concat", "sum", "copy")


def _f32(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.to(_F32)


def _gates(ig: torch.Tensor, hg: torch.Tensor, ib: torch.Tensor | None, hb: torch.Tensor | None) -> torch.Tensor:
    g = _f32(ig) + _f32(hg)
    if ib is not None:
        g = g + _f32(ib)
    if hb is not None:
        g = g + _f32(hb)
    return g


# ------------------------------------------------------------------------------------------------------------ LSTM
@kernel("_thnn_fused_lstm_cell", kind="composite", ir=_IR)  # (its meta kernel fails without biases)
def lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
              input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    i, f, g, o = _gates(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    c = f * _f32(cx) + i * g
    dt = input_gates.dtype
    return (o * c.tanh()).to(dt), c.to(dt), torch.cat([i, f, g, o], 1).to(dt)


def _lstm_backward(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None, cx: torch.Tensor, cy: torch.Tensor,
                   workspace: torch.Tensor, has_bias: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    i, f, g, o = _f32(workspace).chunk(4, 1)
    zero = torch.zeros_like(i)
    go = _f32(grad_hy) if grad_hy is not None else zero
    goc = _f32(grad_cy) if grad_cy is not None else zero
    t = _f32(cy).tanh()
    gc = go * o * (1 - t * t) + goc
    grad_gates = torch.cat(
        [gc * g * (1 - i) * i, gc * _f32(cx) * (1 - f) * f, gc * i * (1 - g * g), go * t * (1 - o) * o], 1
    )
    dt = workspace.dtype
    grad_bias = grad_gates.sum(0).to(dt) if has_bias else torch.empty(0, dtype=dt, device=workspace.device)
    return grad_gates.to(dt), (gc * f).to(cx.dtype), grad_bias


@kernel("_thnn_fused_lstm_cell_backward_impl", kind="composite", ir=_IR)
def lstm_cell_backward_impl(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None, cx: torch.Tensor,
                            cy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return _lstm_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias)


# ------------------------------------------------------------------------------------------------------------- GRU
@kernel("_thnn_fused_gru_cell", kind="composite", ir=_IR)
def gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
             input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    ir_, ii, in_ = _f32(input_gates).chunk(3, 1)
    hr, hi, hn = _f32(hidden_gates).chunk(3, 1)
    if input_bias is not None:
        b1r, b1i, b1n = _f32(input_bias).chunk(3)
        ir_, ii, in_ = ir_ + b1r, ii + b1i, in_ + b1n
    if hidden_bias is not None:
        b2r, b2i, b2n = _f32(hidden_bias).chunk(3)
        hr, hi, hn = hr + b2r, hi + b2i, hn + b2n
    r, z = (ir_ + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    h = _f32(hx)
    dt = input_gates.dtype
    return (n + z * (h - n)).to(dt), torch.cat([r, z, n, h, hn], 1).to(dt)


@kernel("_thnn_fused_gru_cell_backward", kind="composite", ir=_IR)
def gru_cell_backward(grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    r, z, n, h, hn = _f32(workspace).chunk(5, 1)
    go = _f32(grad_hy)
    gz = go * (h - n) * (1 - z) * z
    gn = go * (1 - z) * (1 - n * n)
    gr = gn * hn * (1 - r) * r
    dt = workspace.dtype
    grad_input = torch.cat([gr, gz, gn], 1)
    grad_hidden = torch.cat([gr, gz, gn * r], 1)
    if has_bias:
        bias_in, bias_hidden = grad_input.sum(0).to(dt), grad_hidden.sum(0).to(dt)
    else:
        bias_in = bias_hidden = torch.empty(0, dtype=dt, device=workspace.device)
    return grad_input.to(dt), grad_hidden.to(dt), (go * z).to(dt), bias_in, bias_hidden
