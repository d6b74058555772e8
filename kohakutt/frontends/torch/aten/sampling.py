"""Ops that read or write values at computed positions on ``tt``: max unpooling, fractional max pooling, grid
sampling, and the sliding-window copies ``im2col`` / ``col2im`` (``F.unfold`` / ``F.fold``).

Each is a composition of other tt ops (kind "composite"): the positions are computed on the card (integer and fp32
element-wise math), the values moved by ``gather`` / ``scatter`` / ``scatter_add``, and interpolation weights applied
by element-wise products and sums. Nothing runs on the host. Numerics:
- max unpooling, fractional max pooling and ``im2col`` move values exactly;
- grid sampling computes source coordinates and weights in fp32 from the grid (a bfloat16 grid is widened first),
  multiplies the gathered values in fp32 and rounds once into the output's dtype (so bfloat16 results err by the
  final rounding, 2^-8 relative, plus fp32-level terms); the nearest mode rounds half to even, as PyTorch;
- ``col2im`` and the backward ops sum overlapping contributions with ``scatter_add`` (fp32 adds in index order).

``F.fractional_max_pool2d/3d`` draw their window offsets with ``torch.rand`` on the input's device, so on tt they come
from the card's random stream (reproducible under ``torch.manual_seed``, not the CPU's numbers); given
``_random_samples``, tt places the windows exactly as the CPU does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from kohakutt.errors import DtypeError
from kohakutt.frontends.torch.aten.registry import Args, composite, kernel

aten = torch.ops.aten
_MOVE = ("scatter", "gather", "copy")


def _spatial_out(x: torch.Tensor, out: torch.Tensor, flat: torch.Tensor) -> None:
    """``flat`` (the result with its spatial dims flattened) into ``out``, whose shape it has once unflattened."""
    out.copy_(flat.reshape(out.shape))


# --------------------------------------------------------------------------------------------------- max unpool
def _max_unpool(a: Args, outs: list[torch.Tensor], d: int) -> None:
    """Every value of ``self`` placed at its flat index into its (N, C) plane of zeros; the rest stay zero."""
    x, idx, out = a.self, a.indices, outs[0]
    if idx.dtype not in (torch.int64, torch.int32):
        raise DtypeError(f"max_unpool{d}d: indices must be int64 (as max_pool{d}d returns them), got {idx.dtype}")
    if out.numel() == 0:
        return
    lead = tuple(x.shape[:-d])
    plane = math.prod(out.shape[-d:])
    flat = torch.zeros((*lead, plane), dtype=out.dtype, device=out.device)
    flat.scatter_(-1, idx.reshape(*lead, -1), x.reshape(*lead, -1).to(out.dtype))
    _spatial_out(x, out, flat)


composite("max_unpool2d", "max_unpool2d.out", ir_ops=_MOVE)(lambda a, outs: _max_unpool(a, outs, 2))
composite("max_unpool3d", "max_unpool3d.out", ir_ops=_MOVE)(lambda a, outs: _max_unpool(a, outs, 3))


# ---------------------------------------------------------------------------------------- fractional max pooling
_FMP_SAMPLE = {2: (1, 0), 3: (0, 1, 2)}  # spatial dim -> the column of random_samples that places its windows


def _window_starts(u: torch.Tensor, size: int, out: int, pool: int) -> torch.Tensor:
    """PyTorch's pseudo-random window starts for one spatial dim: ``trunc((i + u) * alpha) - trunc(u * alpha)`` with
    ``alpha = (size - pool) / (out - 1)``, the last window flush with the end. ``u``: (N, C) fp32; result (N, C, out)
    int64."""
    last = torch.full((*u.shape, 1), size - pool, dtype=torch.int64, device=u.device)
    if out == 1:
        return last
    alpha = (size - pool) / (out - 1)
    i = torch.arange(out - 1, dtype=torch.float32, device=u.device)
    starts = ((i + u.unsqueeze(-1)) * alpha).trunc() - (u * alpha).trunc().unsqueeze(-1)
    return torch.cat([starts.to(torch.int64), last], dim=-1)


def _fractional_max_pool(
    x: torch.Tensor, kernel_size: Sequence[int], output_size: Sequence[int], samples: torch.Tensor, d: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, flat indices into each input plane) of the fractional max pool, batch dim present."""
    n, c, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    ks, outs = tuple(int(k) for k in kernel_size), tuple(int(o) for o in output_size)
    u = samples.to(torch.float32)
    flat = None
    for k in range(d):
        starts = _window_starts(u[..., _FMP_SAMPLE[d][k]], sizes[k], outs[k], ks[k])  # (N, C, out_k)
        pos = starts.unsqueeze(-1) + torch.arange(ks[k], dtype=torch.int64, device=x.device)  # (N, C, out_k, k_k)
        shape = [n, c] + [outs[k] if j == k else 1 for j in range(d)] + [ks[k] if j == k else 1 for j in range(d)]
        term = pos.reshape(shape) * math.prod(sizes[k + 1 :])
        flat = term if flat is None else flat + term
    assert flat is not None
    windows = flat.reshape(n, c, *outs, math.prod(ks))  # kernel positions in row-major order, as the CPU scans
    values = torch.gather(x.reshape(n, c, -1), 2, windows.reshape(n, c, -1)).reshape(windows.shape)
    best, arg = values.max(dim=-1)
    return best, torch.gather(windows, -1, arg.unsqueeze(-1)).squeeze(-1)


def _fmp_forward(d: int):
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        x = a.self
        if outs[0].numel() == 0:
            return
        batched = x.dim() == d + 2
        xb = x if batched else x.unsqueeze(0)
        samples = a.random_samples
        values, indices = _fractional_max_pool(xb, a.kernel_size, a.output_size, samples, d)
        outs[0].copy_(values if batched else values.squeeze(0))
        outs[1].copy_(indices if batched else indices.squeeze(0))

    return impl


def _scatter_planes(grad: torch.Tensor, indices: torch.Tensor, like: torch.Tensor, d: int) -> torch.Tensor:
    """The gradient of a max over windows: each output's gradient added at the input position it took."""
    lead = tuple(like.shape[:-d])
    flat = torch.zeros((*lead, math.prod(like.shape[-d:])), dtype=grad.dtype, device=grad.device)
    flat.scatter_add_(-1, indices.reshape(*lead, -1), grad.reshape(*lead, -1))
    return flat.reshape(like.shape)


def _fmp_backward(d: int):
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        outs[0].copy_(_scatter_planes(a.grad_output, a.indices, a.self, d))

    return impl


composite("fractional_max_pool2d", "fractional_max_pool2d.output", ir_ops=(*_MOVE, "max_with_indices"))(_fmp_forward(2))
composite("fractional_max_pool3d", "fractional_max_pool3d.output", ir_ops=(*_MOVE, "max_with_indices"))(_fmp_forward(3))
composite(
    "fractional_max_pool2d_backward", "fractional_max_pool2d_backward.grad_input", ir_ops=("scatter_add", "copy")
)(_fmp_backward(2))


@kernel("fractional_max_pool3d_backward", kind="composite", ir=("scatter_add",))  # (no meta kernel in PyTorch)
def fractional_max_pool3d_backward(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    kernel_size: list[int],
    output_size: list[int],
    indices: torch.Tensor,
) -> torch.Tensor:
    return _scatter_planes(grad_output, indices, self, 3)


@kernel("fractional_max_pool3d_backward.grad_input", kind="composite", ir=("scatter_add", "copy"))
def fractional_max_pool3d_backward_out(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    kernel_size: list[int],
    output_size: list[int],
    indices: torch.Tensor,
    *,
    grad_input: torch.Tensor,
) -> torch.Tensor:
    grad_input.resize_(self.shape)
    return grad_input.copy_(_scatter_planes(grad_output, indices, self, 3))


# ------------------------------------------------------------------------------------------------ grid sampling
BILINEAR, NEAREST, BICUBIC = 0, 1, 2  # aten's interpolation_mode
ZEROS, BORDER, REFLECTION = 0, 1, 2  # aten's padding_mode
_CUBIC_A = -0.75  # the bicubic kernel's parameter, as PyTorch's


def _reflect(c: torch.Tensor, twice_low: int, twice_high: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``c`` folded back and forth into [twice_low / 2, twice_high / 2] (mirror images at the borders), and the
    derivative of the fold (+1 or -1)."""
    if twice_low == twice_high:
        return torch.zeros_like(c), torch.zeros_like(c)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = c - low
    mirrored = torch.where(shifted < 0, -1.0, 1.0)
    shifted = shifted.abs()
    extra = torch.fmod(shifted, span)
    even = torch.remainder(torch.floor(shifted / span), 2) == 0
    return torch.where(even, extra + low, span - extra + low), torch.where(even, mirrored, -mirrored)


def _padded(c: torch.Tensor, size: int, padding: int, align: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A source coordinate (in pixels) moved inside the input as ``padding`` says (ZEROS leaves it), and the
    derivative of the move (None: 1)."""
    grad = None
    if padding == REFLECTION:
        c, grad = _reflect(c, 0, 2 * (size - 1)) if align else _reflect(c, -1, 2 * size - 1)
    if padding in (BORDER, REFLECTION):
        inside = ((c > 0) & (c < size - 1)).to(torch.float32)  # clamping: no gradient at or past the borders
        grad = inside if grad is None else grad * inside
        c = c.clamp(0, size - 1)
    return c, grad


def _unnormalized(g: torch.Tensor, size: int, align: bool) -> torch.Tensor:
    """A grid coordinate in [-1, 1] as a pixel coordinate: -1 and 1 are the corner pixels' centres (align) or
    their outer edges."""
    return (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2


def _unnormalize_scale(size: int, align: bool) -> float:
    return (size - 1) / 2 if align else size / 2


def _cubic_weights(t: torch.Tensor, grad: bool) -> list[torch.Tensor]:
    """The four cubic-convolution weights of the taps at -1, 0, 1, 2 for a fraction ``t`` in [0, 1) (or, ``grad``,
    their derivatives by t)."""
    a = _CUBIC_A
    if grad:  # d/dt of near(t), near(1 - t), far(t + 1), far(2 - t)
        near = lambda x: (3 * (a + 2) * x - 2 * (a + 3)) * x  # noqa: E731
        far = lambda x: (3 * a * x - 10 * a) * x + 8 * a  # noqa: E731
        return [far(t + 1), near(t), -near(1 - t), -far(2 - t)]
    near = lambda x: ((a + 2) * x - (a + 3)) * x * x + 1  # noqa: E731  (|x| <= 1)
    far = lambda x: ((a * x - 5 * a) * x + 8 * a) * x - 4 * a  # noqa: E731  (1 < |x| < 2)
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@dataclass
class _Tap:
    """One read of every sample point: integral positions (fp32, (N, L), spatial order), the weight (None: 1) and,
    for the gradient, d weight / d (unnormalized) coordinate per spatial dim (None: no gradient)."""

    pos: list[torch.Tensor]
    weight: torch.Tensor | None
    dweight: list[torch.Tensor | None]


def _taps(raw: list[torch.Tensor], sizes: Sequence[int], mode: int, padding: int, align: bool, grad: bool):
    """The reads that interpolate at pixel coordinates ``raw`` (spatial order) as ``mode`` and ``padding`` say."""
    d = len(raw)
    if mode == BICUBIC:
        base = [torch.floor(c) for c in raw]
        ws = [_cubic_weights(c - b, False) for c, b in zip(raw, base)]
        dws = [_cubic_weights(c - b, True) for c, b in zip(raw, base)] if grad else None
        for i in range(4):
            for j in range(4):
                pos = [_padded(base[0] + (i - 1), sizes[0], padding, align)[0].trunc(),
                       _padded(base[1] + (j - 1), sizes[1], padding, align)[0].trunc()]  # fmt: skip
                dweight: list[torch.Tensor | None] = (
                    [dws[0][i] * ws[1][j], ws[0][i] * dws[1][j]] if dws is not None else [None, None]
                )
                yield _Tap(pos, ws[0][i] * ws[1][j], dweight)
        return
    moved = [_padded(c, size, padding, align) for c, size in zip(raw, sizes)]
    coords = [c for c, _ in moved]
    if mode == NEAREST:
        yield _Tap([torch.round(c) for c in coords], None, [None] * d)  # half to even, as nearbyint
        return
    base = [torch.floor(c) for c in coords]
    frac = [c - b for c, b in zip(coords, base)]
    for corner in range(2**d):
        bits = [(corner >> (d - 1 - k)) & 1 for k in range(d)]
        factors = [frac[k] if bit else 1 - frac[k] for k, bit in enumerate(bits)]
        dweight = []
        for k in range(d) if grad else ():
            others = [f for j, f in enumerate(factors) if j != k]
            dk = math.prod(others[1:], start=others[0]) if others else torch.ones_like(frac[k])
            dk = dk if bits[k] else -dk
            dweight.append(dk if moved[k][1] is None else dk * moved[k][1])
        yield _Tap([b + bit for b, bit in zip(base, bits)], math.prod(factors[1:], start=factors[0]),
                   dweight or [None] * d)  # fmt: skip


class _Reads:
    """Reads of an (N, C, *sizes) tensor at the positions of taps: flat indices (out-of-range positions clamped,
    with a validity mask)."""

    def __init__(self, sizes: Sequence[int], n: int, c: int) -> None:
        self.sizes, self.n, self.c = tuple(sizes), n, c

    def index(self, tap: _Tap) -> tuple[torch.Tensor, torch.Tensor]:
        """(int64 flat indices (N, C, L) into the flattened planes, bool mask (N, L) of the positions inside)."""
        valid, index = None, None
        for k, (p, size) in enumerate(zip(tap.pos, self.sizes)):
            inside = (p >= 0) & (p <= size - 1)
            valid = inside if valid is None else valid & inside
            term = p.clamp(0, size - 1) * math.prod(self.sizes[k + 1 :])
            index = term if index is None else index + term
        assert valid is not None and index is not None
        return index.to(torch.int64).unsqueeze(1).expand(self.n, self.c, -1), valid


def _grid_coords(x: torch.Tensor, grid: torch.Tensor, align: bool) -> list[torch.Tensor]:
    d = x.dim() - 2
    g = grid.to(torch.float32).reshape(grid.shape[0], -1, d)
    return [_unnormalized(g[..., d - 1 - k], x.shape[2 + k], align) for k in range(d)]  # spatial order (z,) y, x


def grid_sample(x: torch.Tensor, grid: torch.Tensor, interpolation: int, padding: int, align: bool) -> torch.Tensor:
    """``grid_sampler_2d`` / ``_3d``: (N, C, *out) fp32 samples of x (N, C, *sizes) at grid (N, *out, d)."""
    n, c, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    raw = _grid_coords(x, grid, align)
    reads, flat = _Reads(sizes, n, c), x.reshape(n, c, -1)
    total = torch.zeros((n, c, raw[0].shape[1]), dtype=torch.float32, device=x.device)
    for tap in _taps(raw, sizes, interpolation, padding, align, grad=False):
        index, valid = reads.index(tap)
        w = valid.to(torch.float32) if tap.weight is None else torch.where(valid, tap.weight, 0.0)
        total.add_(torch.gather(flat, 2, index).to(torch.float32) * w.unsqueeze(1))
    return total.reshape(n, c, *grid.shape[1:-1])


def grid_sample_backward(
    grad: torch.Tensor, x: torch.Tensor, grid: torch.Tensor, interpolation: int, padding: int, align: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(d/dx, d/dgrid) of sum(grad * grid_sample(x, grid)), fp32: the input's gradient is each output's gradient
    times its weight added at the positions read; the grid's is the values read times the weights' derivatives."""
    n, c, sizes = x.shape[0], x.shape[1], tuple(x.shape[2:])
    d = len(sizes)
    raw = _grid_coords(x, grid, align)
    reads, flat = _Reads(sizes, n, c), x.reshape(n, c, -1).to(torch.float32)
    go = grad.reshape(n, c, -1).to(torch.float32)
    grad_x = torch.zeros((n, c, math.prod(sizes)), dtype=torch.float32, device=x.device)
    per_channel = [torch.zeros_like(go) for _ in range(d)]  # summed over channels once, at the end
    for tap in _taps(raw, sizes, interpolation, padding, align, grad=True):
        index, valid = reads.index(tap)
        w = valid.to(torch.float32) if tap.weight is None else torch.where(valid, tap.weight, 0.0)
        grad_x.scatter_add_(2, index, go * w.unsqueeze(1))
        if all(dw is None for dw in tap.dweight):
            continue
        seen = torch.gather(flat, 2, index) * go  # values read times their outputs' gradients
        for k, dw in enumerate(tap.dweight):
            if dw is not None:
                per_channel[k].add_(seen * torch.where(valid, dw, 0.0).unsqueeze(1))
    grad_grid = torch.stack([per_channel[d - 1 - j].sum(1) * _unnormalize_scale(sizes[d - 1 - j], align)
                             for j in range(d)], dim=-1)  # fmt: skip
    return grad_x.reshape(x.shape), grad_grid.reshape(grid.shape)


def _grid_sampler(d: int):
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        mode, padding = int(a.interpolation_mode), int(a.padding_mode)
        if d == 3 and mode == BICUBIC:
            raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
        if outs[0].numel():
            outs[0].copy_(grid_sample(a.input, a.grid, mode, padding, bool(a.align_corners)))

    return impl


_GRID_IR = ("gather", "floor", "round", "fmod", "where", "mul", "add", "copy")
composite("grid_sampler_2d", "grid_sampler_2d.out", ir_ops=_GRID_IR)(_grid_sampler(2))
composite("grid_sampler_3d", "grid_sampler_3d.out", ir_ops=_GRID_IR)(_grid_sampler(3))


def _grid_sampler_backward(d: int):
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        mode, padding = int(a.interpolation_mode), int(a.padding_mode)
        mask = list(a.output_mask)
        if not any(o.numel() for o in outs):
            return
        gx, gg = grid_sample_backward(a.grad_output, a.input, a.grid, mode, padding, bool(a.align_corners))
        if mask[0]:
            outs[0].copy_(gx)
        if mask[1]:
            outs[1].copy_(gg)

    return impl


for _d in (2, 3):
    composite(f"grid_sampler_{_d}d_backward", f"grid_sampler_{_d}d_backward.out", ir_ops=(*_GRID_IR, "scatter_add"))(
        _grid_sampler_backward(_d)
    )


# ------------------------------------------------------------------------------------------------ im2col / col2im
def _window_index(
    size: Sequence[int], kernel: Sequence[int], dilation: Sequence[int], padding: Sequence[int],
    stride: Sequence[int], device: torch.device,
) -> tuple[torch.Tensor, int]:  # fmt: skip
    """(the flat positions (kh * kw * L,) in the zero-padded (H + 2ph, W + 2pw) plane that im2col reads, kernel
    position major, L = the number of windows; the padded width)."""
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = size, kernel, dilation, padding, stride
    hp, wp = h + 2 * ph, w + 2 * pw
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    ar = lambda n, step: torch.arange(n, dtype=torch.int64, device=device) * step  # noqa: E731
    rows = ar(kh, dh).view(kh, 1, 1, 1) + ar(oh, sh).view(1, 1, oh, 1)
    cols = ar(kw, dw).view(1, kw, 1, 1) + ar(ow, sw).view(1, 1, 1, ow)
    return (rows * wp + cols).reshape(-1), wp


def _pair(v: Sequence[int]) -> tuple[int, int]:
    vals = [int(x) for x in v]
    return (vals[0], vals[0]) if len(vals) == 1 else (vals[0], vals[1])


@composite("im2col", "im2col.out", ir_ops=("pad", "gather", "copy"))
def _im2col(a: Args, outs: list[torch.Tensor]) -> None:
    """Every kernel_size window of the zero-padded input as a column: (N, C * kh * kw, L)."""
    if not outs[0].numel():
        return
    x = a.self if a.self.dim() == 4 else a.self.unsqueeze(0)
    n, c, h, w = x.shape
    ph, pw = _pair(a.padding)
    index, _ = _window_index((h, w), _pair(a.kernel_size), _pair(a.dilation), (ph, pw), _pair(a.stride), x.device)
    padded = torch.constant_pad_nd(x, [pw, pw, ph, ph]).reshape(n, c, -1)
    cols = torch.gather(padded, 2, index.expand(n, c, -1))
    outs[0].copy_(cols.reshape(outs[0].shape))


@composite("col2im", "col2im.out", ir_ops=("scatter_add", "copy"))
def _col2im(a: Args, outs: list[torch.Tensor]) -> None:
    """The columns added back at the window positions they came from (overlaps sum), the padding cut off."""
    if not outs[0].numel():
        return
    cols = a.self if a.self.dim() == 3 else a.self.unsqueeze(0)
    h, w = _pair(a.output_size)
    kh, kw = _pair(a.kernel_size)
    ph, pw = _pair(a.padding)
    n, c = cols.shape[0], cols.shape[1] // (kh * kw)
    index, wp = _window_index((h, w), (kh, kw), _pair(a.dilation), (ph, pw), _pair(a.stride), cols.device)
    hp = h + 2 * ph
    plane = torch.zeros((n, c, hp * wp), dtype=torch.float32, device=cols.device)
    plane.scatter_add_(2, index.expand(n, c, -1), cols.reshape(n, c, -1).to(torch.float32))
    image = plane.reshape(n, c, hp, wp)[:, :, ph : ph + h, pw : pw + w]
    outs[0].copy_(image.reshape(outs[0].shape))
