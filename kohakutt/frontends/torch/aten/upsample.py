"""Resizing on ``tt`` (``F.interpolate`` / ``nn.Upsample``): the nearest, nearest-exact, (bi / tri)linear and bicubic
``upsample_*`` ops and their backward.

Every mode is separable, so each spatial dim is resized in turn as a composition of tt ops (kind "composite"): the
source positions and weights of the output positions along that dim come from fp32 element-wise math on the card
(PyTorch's formulas: ``area_pixel_compute_source_index``, half-pixel centres unless ``align_corners``, the scale from
``scales_*`` when given), the values from ``index_select`` along the dim, and the weighted taps (1 nearest, 2 linear,
4 cubic with A = -0.75, indices clamped at the borders) are summed in fp32; the result is rounded once into the
output's dtype. The backward ops apply the transposed steps in reverse order: each tap's weighted gradient is added
back with ``index_add`` (fp32 adds in index order). The antialiased ``_upsample_*_aa`` ops are not covered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from kohakutt.frontends.torch.aten.registry import Args, composite

NEAREST, EXACT, LINEAR, CUBIC = "nearest", "nearest-exact", "linear", "cubic"
_A = -0.75  # the cubic convolution's parameter, as PyTorch's


def _scale(size_in: int, size_out: int, align: bool, scale: float | None) -> float:
    """PyTorch's area_pixel_compute_scale: input pixels per output pixel."""
    if align:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size_in / size_out


def _taps(mode: str, size_in: int, size_out: int, align: bool, scale: float | None, device: torch.device):
    """[(source index (size_out,) int64, weight (size_out,) fp32 or None)] for one dim."""
    dst = torch.arange(size_out, dtype=torch.float32, device=device)
    if mode in (NEAREST, EXACT):
        if size_out == size_in:
            return [(torch.arange(size_out, dtype=torch.int64, device=device), None)]
        s = 1.0 / scale if scale is not None and scale > 0 else size_in / size_out
        src = torch.floor((dst + 0.5) * s if mode == EXACT else dst * s)
        return [(src.to(torch.int64).clamp_max(size_in - 1), None)]
    s = _scale(size_in, size_out, align, scale)
    src = dst * s if align else (dst + 0.5) * s - 0.5
    if mode == LINEAR:
        src = src.clamp_min(0)
        low = torch.floor(src)
        frac = src - low
        i0 = low.to(torch.int64).clamp_max(size_in - 1)
        i1 = (i0 + 1).clamp_max(size_in - 1)
        return [(i0, 1 - frac), (i1, frac)]
    low = torch.floor(src)
    t = src - low
    near = lambda x: ((_A + 2) * x - (_A + 3)) * x * x + 1  # noqa: E731  (|x| <= 1)
    far = lambda x: ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A  # noqa: E731  (1 < |x| < 2)
    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    base = low.to(torch.int64)
    return [((base + k - 1).clamp(0, size_in - 1), w) for k, w in enumerate(weights)]


def _along(x: torch.Tensor, dim: int, taps: list) -> torch.Tensor:
    """Σ_k w_k * x.index_select(dim, i_k), the weights broadcast along ``dim``."""
    shape = [1] * x.dim()
    shape[dim] = -1
    total = None
    for index, weight in taps:
        picked = torch.index_select(x, dim, index)
        term = picked if weight is None else picked * weight.view(shape)
        total = term if total is None else total + term
    assert total is not None
    return total


def _along_backward(grad: torch.Tensor, dim: int, size_in: int, taps: list) -> torch.Tensor:
    """The transpose of :func:`_along`: each tap's weighted gradient added back at its source index."""
    shape = [1] * grad.dim()
    shape[dim] = -1
    out_shape = list(grad.shape)
    out_shape[dim] = size_in
    total = torch.zeros(out_shape, dtype=torch.float32, device=grad.device)
    for index, weight in taps:
        total.index_add_(dim, index, grad if weight is None else grad * weight.view(shape))
    return total


def _scales(a: Args, d: int) -> list[float | None]:
    names = ["scales"] if d == 1 else (["scales_h", "scales_w"] if d == 2 else ["scales_d", "scales_h", "scales_w"])
    return [a.get(n) for n in names]


def resize(
    x: torch.Tensor, size: Sequence[int], mode: str, align: bool, scales: Sequence[float | None]
) -> torch.Tensor:
    """x (N, C, *spatial) resized to ``size`` in fp32."""
    d = len(size)
    y = x.to(torch.float32)
    for k in range(d):
        dim = x.dim() - d + k
        y = _along(y, dim, _taps(mode, x.shape[dim], int(size[k]), align, scales[k], x.device))
    return y


def resize_backward(grad: torch.Tensor, input_size: Sequence[int], mode: str, align: bool,
                    scales: Sequence[float | None]) -> torch.Tensor:  # fmt: skip
    """The gradient of :func:`resize` for an input of ``input_size`` (N, C, *spatial), fp32."""
    d = len(input_size) - 2
    g = grad.to(torch.float32)
    for k in reversed(range(d)):
        dim = 2 + k
        g = _along_backward(g, dim, int(input_size[dim]), _taps(mode, int(input_size[dim]), grad.shape[dim],
                                                               align, scales[k], grad.device))  # fmt: skip
    return g


def _forward(mode: str, d: int) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        if outs[0].numel():
            outs[0].copy_(resize(a.self, a.output_size, mode, bool(a.get("align_corners", False)), _scales(a, d)))

    return impl


def _backward(mode: str, d: int) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        if outs[0].numel():
            g = resize_backward(a.grad_output, a.input_size, mode, bool(a.get("align_corners", False)), _scales(a, d))
            outs[0].copy_(g)

    return impl


_OPS = {  # aten packet -> (mode, spatial dims)
    "upsample_nearest1d": (NEAREST, 1), "upsample_nearest2d": (NEAREST, 2), "upsample_nearest3d": (NEAREST, 3),
    "_upsample_nearest_exact1d": (EXACT, 1), "_upsample_nearest_exact2d": (EXACT, 2),
    "_upsample_nearest_exact3d": (EXACT, 3),
    "upsample_linear1d": (LINEAR, 1), "upsample_bilinear2d": (LINEAR, 2), "upsample_trilinear3d": (LINEAR, 3),
    "upsample_bicubic2d": (CUBIC, 2),
}  # fmt: skip
for _name, (_mode, _d) in _OPS.items():
    composite(_name, f"{_name}.out", ir_ops=("index_select", "mul", "add", "copy"))(_forward(_mode, _d))
    composite(f"{_name}_backward", f"{_name}_backward.grad_input", ir_ops=("index_put", "mul", "copy"))(
        _backward(_mode, _d)
    )
