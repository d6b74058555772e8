"""Data movement and indexing on tt against the same ops on the CPU.

Tolerances. Moving values does no arithmetic, so every move, index, mask, sort and copy is checked bit for bit
(sign of zero and NaN included) against PyTorch's CPU result in the same dtype; so are the dtype casts of
``_to_copy`` (the card's packer rounds float32 to bfloat16 to nearest even, as the CPU does).
The reductions (scatter_add / scatter_reduce / index_add / index_put(accumulate) / the pad backward) add in fp32 in
index order: on integer-valued floats every partial sum is exact, so those checks are bit-exact too; on random
float32 data each output is a short sum (or product / mean) of k <= 4 terms, where the CPU's order may differ, so
the bound is k fp32 roundings of the magnitudes: rtol = 4 * 2^-24 (5e-7 used: 2^-21), atol = 1e-6.
Integer ``mean`` divides with floor, as PyTorch does.
"""

from __future__ import annotations

import pytest
import torch

from kohakutt.errors import CommandError, DtypeError, IndexOutOfRangeError
from kohakutt.frontends.torch.aten import KERNELS, all_kernels
from kohakutt.ir.ops import ShapeError

DEV = torch.device("tt", 0)
FLOATS = [torch.float32, torch.bfloat16]
MOVED = [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.uint8]
RTOL, ATOL = 2.0**-21, 1e-6


@pytest.fixture(autouse=True)
def own_kernels(knobs):
    """PyTorch's semantics (scatter's mean / include_self, sort of ints, NaN order) are the own kernels'; with
    KTT_CUSTOM_KERNELS=0 TT-NN's kernels run and refuse those cases (test_ttnn_kernels_refuse_what_they_lack)."""
    knobs(KTT_CUSTOM_KERNELS=1)


def tt(x: torch.Tensor) -> torch.Tensor:
    return x.to(DEV)


def data(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """CPU values of ``dtype``: floats with both zeros, a NaN and an Inf among them; small ints; random bools."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype is torch.bool:
        return (torch.rand(n, generator=g) > 0.5).reshape(shape)
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g) * 10
        specials = torch.tensor([0.0, -0.0, float("nan"), float("inf")])[: max(0, n - 1)]
        x[1 : 1 + len(specials)] = specials
        return x.to(dtype).reshape(shape)
    lo = 0 if dtype is torch.uint8 else -100
    return torch.randint(lo, 100, (n,), generator=g).to(dtype).reshape(shape)


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit-exact equality of a tt result with a CPU result (dtype, shape, every bit; a NaN is any NaN, since the
    card's packer canonicalizes NaN payloads)."""
    assert got.device.type == "tt"
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.is_floating_point:
        assert torch.equal(got.isnan(), want.isnan()), (got, want)
        view = torch.int32 if want.dtype == torch.float32 else torch.int16
        bits = [t.nan_to_num(0.0, float("inf"), float("-inf")).contiguous().view(view) for t in (got, want)]
        assert torch.equal(*bits), (got, want)
    else:
        assert torch.equal(got, want), (got, want)


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.device.type == "tt"
    torch.testing.assert_close(got.cpu(), want, rtol=RTOL, atol=ATOL, equal_nan=True)


# ---------------------------------------------------------------------------------------------------- joining, padding
@pytest.mark.parametrize("dtype", MOVED)
def test_cat_stack(dtype):
    a, b, c = data((2, 3, 4), dtype, 1), data((2, 5, 4), dtype, 2), data((2, 3, 4), dtype, 3)
    same(torch.cat([tt(a), tt(b)], 1), torch.cat([a, b], 1))
    same(torch.cat([tt(a), tt(c)], -1), torch.cat([a, c], -1))
    same(torch.cat([tt(a), tt(torch.empty(0, dtype=dtype)), tt(c)]), torch.cat([a, torch.empty(0, dtype=dtype), c]))
    same(torch.stack([tt(a), tt(c)], 2), torch.stack([a, c], 2))
    same(
        torch.cat([tt(a).transpose(0, 2), tt(c).transpose(0, 2)], 1),
        torch.cat([a.transpose(0, 2), c.transpose(0, 2)], 1),
    )


def test_cat_promotes_and_out():
    a, b = data((2, 3), torch.int32), data((1, 3), torch.float32)
    same(torch.cat([tt(a), tt(b)]), torch.cat([a, b]))
    out = tt(torch.zeros(0))
    torch.cat([tt(b), tt(b)], out=out)
    same(out, torch.cat([b, b]))
    x = data((2, 3, 4, 5))
    y = torch.cat([tt(x), tt(x)], 1).contiguous(memory_format=torch.channels_last)
    same(y, torch.cat([x, x], 1).contiguous(memory_format=torch.channels_last))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_constant_pad(dtype):
    x = data((2, 3, 4), dtype)
    for pads, value in [((1, 2), 0), ((1, 0, 2, 3), 7), ((-1, 2, 0, -2), 3), ((1, 1, 1, 1, 1, 1), -1)]:
        same(torch.nn.functional.pad(tt(x), pads, value=value), torch.nn.functional.pad(x, pads, value=value))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pad_modes(mode, k):
    x = data((2, 3, 4, 5, 6)[: 2 + k], torch.float32, k)
    pads = (2, 1, 1, 3, 0, 2)[: 2 * k]
    same(torch.nn.functional.pad(tt(x), pads, mode=mode), torch.nn.functional.pad(x, pads, mode=mode))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("pads", [(-1, 1, -2, 1), (-4, 5, 0, 0), (2, -3, 1, -1)])
def test_pad_negative_crops(mode, pads):
    """Negative reflect / replicate pads crop what the positive ones made (PyTorch's index rule), grads too."""
    x = data((2, 3, 6, 7), torch.float32, 8)
    same(torch.nn.functional.pad(tt(x), pads, mode=mode), torch.nn.functional.pad(x, pads, mode=mode))
    xc, xt = x.clone().requires_grad_(), tt(x).requires_grad_()
    yc = torch.nn.functional.pad(xc, pads, mode=mode)
    g = torch.randint(-50, 50, yc.shape).float()
    yc.backward(g)
    torch.nn.functional.pad(xt, pads, mode=mode).backward(tt(g))
    same(xt.grad, xc.grad)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pad_backward(mode, k):
    """The gradient of reflect / replicate pad on the card (integer-valued gradients: the sums are exact)."""
    x = data((2, 3, 4, 5, 6)[: 2 + k], torch.float32, k)
    pads = (2, 1, 1, 3, 0, 2)[: 2 * k]
    xc, xt = x.clone().requires_grad_(), tt(x).requires_grad_()
    yc = torch.nn.functional.pad(xc, pads, mode=mode)
    g = torch.randint(-50, 50, yc.shape).float()
    yc.backward(g)
    torch.nn.functional.pad(xt, pads, mode=mode).backward(tt(g))
    same(xt.grad, xc.grad)


def test_pad_backward_random_grad_bf16():
    x = data((2, 3, 9, 7), torch.float32)
    g = data((2, 3, 13, 10), torch.float32, 5).nan_to_num(0.0, 0.0, 0.0)
    want = torch.ops.aten.reflection_pad2d_backward(g.double(), x.double(), [1, 2, 3, 1])
    got = torch.ops.aten.reflection_pad2d_backward(tt(g), tt(x), [1, 2, 3, 1])
    close(got, want.float())
    gb = torch.ops.aten.replication_pad2d_backward(tt(g).bfloat16(), tt(x).bfloat16(), [1, 2, 3, 1]).cpu()
    wb = torch.ops.aten.replication_pad2d_backward(g.bfloat16().double(), x.double(), [1, 2, 3, 1])
    torch.testing.assert_close(gb.double(), wb, rtol=2.0**-8, atol=1e-6)  # one bf16 rounding of the fp32 sum


# ---------------------------------------------------------------------------------------------------- reordering
@pytest.mark.parametrize("dtype", MOVED)
def test_flip_roll_repeat_triangles(dtype):
    x = data((3, 4, 5), dtype)
    t = tt(x)
    same(t.flip(0, 2), x.flip(0, 2))
    same(t.flip(-1), x.flip(-1))
    same(t.roll(2, 1), x.roll(2, 1))
    same(t.roll((1, -3), (0, 2)), x.roll((1, -3), (0, 2)))
    same(t.roll(7), x.roll(7))
    same(t.repeat(2, 1, 3), x.repeat(2, 1, 3))
    same(t.repeat(2, 1, 1, 2), x.repeat(2, 1, 1, 2))
    for d in (-2, 0, 1, 3):
        same(t.tril(d), x.tril(d))
        same(t.triu(d), x.triu(d))
    t2 = tt(x)
    t2.tril_(1)
    same(t2, x.tril(1))
    same(torch.rot90(t, 1, (1, 2)), torch.rot90(x, 1, (1, 2)))


@pytest.mark.parametrize("dtype", MOVED)
def test_views_and_copies(dtype):
    """PyTorch's own views over tt storage, and copies of them through the card's copy."""
    x = data((4, 6, 5), dtype)
    t = tt(x)
    same(t.permute(2, 0, 1).contiguous(), x.permute(2, 0, 1).contiguous())
    same(t.narrow(1, 2, 3).clone(), x.narrow(1, 2, 3).clone())
    for a, b in zip(t.split_with_sizes([1, 3, 2], 1), x.split_with_sizes([1, 3, 2], 1)):
        same(a.contiguous(), b.contiguous())
    for a, b in zip(t.unbind(2), x.unbind(2)):
        same(a.contiguous(), b.contiguous())
    same(t[:, :1].squeeze(1).unsqueeze(0).contiguous(), x[:, :1].squeeze(1).unsqueeze(0).contiguous())
    same(t[:1].expand(3, 6, 5).contiguous(), x[:1].expand(3, 6, 5).contiguous())
    same(t[::2, 1::3].clone(), x[::2, 1::3].clone())
    same(t.diagonal(0, 1, 2).contiguous(), x.diagonal(0, 1, 2).contiguous())


@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("dst", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool])
def test_to_copy_casts(src, dst):
    x = data((5, 7), src, 4)
    if src.is_floating_point and not dst.is_floating_point:
        x = x.nan_to_num(0.0, 50.0, -50.0)  # float -> int of NaN / Inf is undefined in C++
    if src.is_floating_point and dst == torch.float32:
        x[0, :3] = torch.tensor([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-9, -(1.0 + 2.0**-9)]).to(src)
    elif src == torch.float32 and dst == torch.bfloat16:
        pass
    same(tt(x).to(dst), x.to(dst))
    same(tt(x).t().to(dst), x.t().to(dst))


def test_bf16_rounding_ties_to_even():
    x = torch.tensor([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-9, -(1.0 + 2.0**-8), 3.4e38, 1e-40])
    same(tt(x).to(torch.bfloat16), x.to(torch.bfloat16))


# ---------------------------------------------------------------------------------------------------- scatters of views
def test_view_scatters():
    x, s = data((4, 5, 6)), data((4, 2, 6), seed=1)
    same(torch.slice_scatter(tt(x), tt(s), 1, 1, 5, 2), torch.slice_scatter(x, s, 1, 1, 5, 2))
    same(torch.slice_scatter(tt(x), tt(data((4, 5, 6), seed=2))), torch.slice_scatter(x, data((4, 5, 6), seed=2)))
    r = data((4, 6), seed=3)
    same(torch.select_scatter(tt(x), tt(r), 1, -2), torch.select_scatter(x, r, 1, -2))
    dg = data((4, 5), seed=4)
    same(torch.diagonal_scatter(tt(x), tt(dg), 0, 1, 2), torch.diagonal_scatter(x, dg, 0, 1, 2))
    dg1 = data((6, 3), seed=5)
    same(torch.diagonal_scatter(tt(x), tt(dg1), -1, 0, 1), torch.diagonal_scatter(x, dg1, -1, 0, 1))
    a = data((3, 3), seed=6)
    same(torch.as_strided_scatter(tt(x), tt(a), (3, 3), (7, 2), 5), torch.as_strided_scatter(x, a, (3, 3), (7, 2), 5))


# ---------------------------------------------------------------------------------------------------- gather, scatter
@pytest.mark.parametrize("dtype", MOVED)
def test_gather(dtype):
    x = data((4, 5, 6), dtype)
    g = torch.Generator().manual_seed(7)
    for dim in (0, 1, -1):
        idx = torch.randint(0, x.shape[dim], (3, 4, 5), generator=g)
        same(torch.gather(tt(x), dim, tt(idx)), torch.gather(x, dim, idx))
        same(torch.gather(tt(x), dim, tt(idx.int())), torch.gather(x, dim, idx.int()))
    along = torch.randint(0, 6, (4, 5, 3), generator=g)
    same(torch.take_along_dim(tt(x), tt(along), 2), torch.take_along_dim(x, along, 2))
    s, one, i1 = x[0, 0, 0], x[0, 0, :2], torch.tensor([0, 0, 0])
    same(torch.gather(tt(s), 0, tt(i1)), torch.gather(s, 0, i1))  # 0-d and 1-d mix, as PyTorch allows
    same(torch.gather(tt(one), 0, tt(torch.tensor(1))), torch.gather(one, 0, torch.tensor(1)))
    out = tt(torch.empty(0, dtype=dtype))
    torch.gather(tt(x), -1, tt(idx), out=out)
    same(out, torch.gather(x, -1, idx))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
def test_scatter_exact(dtype):
    """scatter (last write wins: unique indices) and the integer-valued reductions, all bit-exact."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-8, 8, (5, 6), generator=g).to(dtype)
    src = torch.randint(-8, 8, (3, 6), generator=g).to(dtype)
    uniq = torch.stack([torch.randperm(5, generator=g)[:3] for _ in range(6)], 1)
    same(torch.scatter(tt(x), 0, tt(uniq), tt(src)), torch.scatter(x, 0, uniq, src))
    same(torch.scatter(tt(x), 0, tt(uniq), 3), torch.scatter(x, 0, uniq, 3))
    dup = torch.randint(0, 5, (3, 6), generator=g)
    same(torch.scatter_add(tt(x), 0, tt(dup), tt(src)), torch.scatter_add(x, 0, dup, src))
    same(torch.scatter(tt(x), 0, tt(dup), tt(src), reduce="add"), torch.scatter(x, 0, dup, src, reduce="add"))
    same(tt(x).scatter_(0, tt(dup), tt(src), reduce="multiply"), x.clone().scatter_(0, dup, src, reduce="multiply"))
    same(tt(x).scatter_(0, tt(dup), 2, reduce="add"), x.clone().scatter_(0, dup, 2, reduce="add"))
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            want = torch.scatter_reduce(x, 0, dup, src, reduce, include_self=include_self)
            same(torch.scatter_reduce(tt(x), 0, tt(dup), tt(src), reduce, include_self=include_self), want)
    s, i0 = x[0, 0], torch.tensor([0, 0])
    same(torch.scatter_add(tt(s), 0, tt(i0), tt(src[0, :2])), torch.scatter_add(s, 0, i0, src[0, :2]))
    same(torch.scatter(tt(s), 0, tt(i0[0]), 5), torch.scatter(s, 0, i0[0], 5))
    t = tt(x)
    t.scatter_add_(1, tt(dup[:, :4]), tt(src[:, :4]))
    same(t, x.clone().scatter_add_(1, dup[:, :4], src[:, :4]))


def test_scatter_reduce_random_floats():
    g = torch.Generator().manual_seed(11)
    x, src = torch.randn(6, 7, generator=g), torch.randn(6, 7, generator=g)
    idx = torch.randint(0, 6, (6, 7), generator=g)
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        want = torch.scatter_reduce(x.double(), 0, idx, src.double(), reduce).float()
        close(torch.scatter_reduce(tt(x), 0, tt(idx), tt(src), reduce), want)
    out = tt(torch.empty(0))
    torch.scatter_reduce(tt(x), 1, tt(idx), tt(src), "amax", include_self=False, out=out)
    same(out, torch.scatter_reduce(x, 1, idx, src, "amax", include_self=False))


# ---------------------------------------------------------------------------------------------------- advanced indexing
@pytest.mark.parametrize("dtype", MOVED)
def test_index(dtype):
    x = data((4, 5, 6), dtype)
    t = tt(x)
    i = torch.tensor([3, -1, 0, 0, 2])
    j = torch.tensor([[1, 4], [0, -5]])
    same(t[tt(i)], x[i])
    same(t[i], x[i])  # a CPU index, as CUDA allows
    same(t[:, tt(i)], x[:, i])
    same(t[tt(i), :, tt(i)], x[i, :, i])  # apart: the index dims lead
    same(t[:, tt(j), tt(j)], x[:, j, j])  # adjacent: in place
    same(t[1:3, tt(j)], x[1:3, j])
    same(t[tt(i.int())], x[i.int()])
    m = x.ne(0) if dtype is not torch.bool else x
    same(t[tt(m)], x[m])
    m2 = data((4, 5), torch.bool, 9)
    same(t[tt(m2)], x[m2])
    same(t[:, tt(m2[0])], x[:, m2[0]])
    same(t[tt(m2), tt(torch.tensor(2))], x[m2, torch.tensor(2)])
    same(torch.take(t, tt(j)), torch.take(x, j))
    same(torch.take(t, tt(torch.tensor([-1, 119, 0]))), torch.take(x, torch.tensor([-1, 119, 0])))
    same(torch.ops.aten._unsafe_index(t, [None, tt(i[:2])]), x[:, i[:2]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool])
def test_index_put(dtype):
    x = data((4, 5, 6), dtype)
    v = data((3, 6), dtype, 1)
    i, k = torch.tensor([2, 0, 3]), torch.tensor([1, 1, 4])
    t = tt(x)
    t[tt(i), tt(k)] = tt(v)
    want = x.clone()
    want[i, k] = v
    same(t, want)
    t[i] = tt(v[0])  # CPU indices, a broadcast value
    want[i] = v[0]
    same(t, want)
    m = data((4, 5), torch.bool, 2)
    t[tt(m)] = 1
    want[m] = 1
    same(t, want)
    aten = torch.ops.aten
    same(aten.index_put(tt(x), [None, tt(k)], tt(x[:, k])), aten.index_put(x, [None, k], x[:, k]))
    out = tt(torch.empty(0, dtype=dtype))
    torch.ops.aten.index_put.out(tt(x), [tt(i)], tt(x[i]), out=out)
    same(out, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
def test_index_put_accumulate(dtype):
    """Duplicates all add (integer values: exact sums); the autograd of x[i] for duplicate i is the same path."""
    x = torch.randint(-9, 9, (6, 4)).to(dtype)
    v = torch.randint(-9, 9, (7, 4)).to(dtype)
    i = torch.tensor([0, 5, 0, 2, 5, 5, 1])
    got = tt(x).index_put_((tt(i),), tt(v), accumulate=True)
    same(got, x.clone().index_put_((i,), v, accumulate=True))
    if dtype.is_floating_point:
        xt = tt(x).requires_grad_()
        xt[tt(i)].backward(tt(v))
        xc = x.clone().requires_grad_()
        xc[i].backward(v)
        same(xt.grad, xc.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
def test_index_select_add_copy_fill(dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-9, 9, (5, 6, 3), generator=g).to(dtype)
    i = torch.tensor([4, 0, 0, 2])
    for dim in (0, 1, -1):
        same(tt(x).index_select(dim, tt(i[:3] % x.shape[dim])), x.index_select(dim, i[:3] % x.shape[dim]))
    s = torch.randint(-9, 9, (5, 4, 3), generator=g).to(dtype)
    same(tt(x).index_add(1, tt(i), tt(s)), x.index_add(1, i, s))
    same(tt(x).index_add(1, tt(i), tt(s), alpha=2), x.index_add(1, i, s, alpha=2))
    perm = torch.tensor([3, 0, 5, 1])
    same(tt(x).index_copy(1, tt(perm), tt(s)), x.index_copy(1, perm, s))
    t = tt(x)
    t.index_copy_(0, tt(torch.tensor([4, 1])), tt(x[:2]))
    same(t, x.clone().index_copy_(0, torch.tensor([4, 1]), x[:2]))
    same(tt(x).index_fill(2, tt(torch.tensor([0, 2])), -3), x.index_fill(2, torch.tensor([0, 2]), -3))
    val = torch.tensor(7, dtype=dtype)
    same(tt(x).index_fill_(1, tt(torch.tensor([-1])), tt(val)), x.clone().index_fill_(1, torch.tensor([-1]), val))
    same(tt(x).index_fill_(1, tt(torch.tensor([1])), val), x.clone().index_fill_(1, torch.tensor([1]), val))
    out = tt(torch.empty(0, dtype=dtype))
    torch.index_select(tt(x), 0, tt(i), out=out)
    same(out, x.index_select(0, i))


def test_index_select_backward_is_index_add():
    x = torch.randn(5, 3)
    i = torch.tensor([1, 1, 4])
    xt, xc = tt(x).requires_grad_(), x.clone().requires_grad_()
    g = torch.randint(-5, 5, (3, 3)).float()
    xt.index_select(0, tt(i)).backward(tt(g))
    xc.index_select(0, i).backward(g)
    same(xt.grad, xc.grad)


# ---------------------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("dtype", MOVED)
def test_masked_fill_scatter_select(dtype):
    x = data((4, 5), dtype)
    m = data((4, 5), torch.bool, 3)
    row = data((5,), torch.bool, 4)
    fill = True if dtype is torch.bool else 3
    same(tt(x).masked_fill(tt(m), fill), x.masked_fill(m, fill))
    same(
        tt(x).masked_fill(tt(row), torch.tensor(fill, dtype=dtype)), x.masked_fill(row, torch.tensor(fill, dtype=dtype))
    )
    same(tt(x).masked_fill_(tt(m), tt(torch.tensor(fill, dtype=dtype))), x.clone().masked_fill_(m, fill))
    wide = data((3, 4, 5), torch.bool, 6)  # the functional form broadcasts self to the mask
    same(tt(x).masked_fill(tt(wide), fill), x.masked_fill(wide, fill))
    src = data((30,), dtype, 5)
    same(tt(x).masked_scatter(tt(m), tt(src)), x.masked_scatter(m, src))
    same(tt(x).masked_scatter(tt(row), tt(src)), x.masked_scatter(row, src))
    same(tt(x).masked_select(tt(m)), x.masked_select(m))
    same(tt(x).masked_select(tt(row)), x.masked_select(row))
    same(
        tt(x).masked_select(tt(torch.zeros(4, 5, dtype=torch.bool))),
        x.masked_select(torch.zeros(4, 5, dtype=torch.bool)),
    )
    out = tt(torch.empty(0, dtype=dtype))
    torch.masked_select(tt(x), tt(m), out=out)
    same(out, x.masked_select(m))


@pytest.mark.parametrize("dtype", MOVED)
def test_nonzero(dtype):
    x = data((3, 4, 5), dtype)
    same(torch.nonzero(tt(x)), torch.nonzero(x))
    same(torch.argwhere(tt(x)), torch.argwhere(x))
    for a, b in zip(torch.nonzero(tt(x), as_tuple=True), torch.nonzero(x, as_tuple=True)):
        same(a, b)
    same(torch.nonzero(tt(torch.zeros(3, 0, dtype=dtype))), torch.nonzero(torch.zeros(3, 0, dtype=dtype)))
    same(torch.nonzero(tt(torch.zeros(4, dtype=dtype))), torch.nonzero(torch.zeros(4, dtype=dtype)))
    same(torch.nonzero(tt(torch.ones((), dtype=dtype))), torch.nonzero(torch.ones((), dtype=dtype)))
    same(torch.nonzero_static(tt(x), size=7), torch.nonzero_static(x, size=7))
    same(torch.nonzero_static(tt(x), size=70, fill_value=-5), torch.nonzero_static(x, size=70, fill_value=-5))
    out = tt(torch.empty(0, dtype=torch.int64))
    torch.nonzero(tt(x), out=out)
    same(out, torch.nonzero(x))


def test_nonzero_special_floats():
    x = torch.tensor([0.0, -0.0, float("nan"), 1e-45, float("-inf")])
    same(torch.nonzero(tt(x)), torch.nonzero(x))


def test_repeat_interleave():
    x = data((3, 4))
    r = torch.tensor([2, 0, 3])
    same(torch.repeat_interleave(tt(r)), torch.repeat_interleave(r))
    same(tt(x).repeat_interleave(tt(r), 0), x.repeat_interleave(r, 0))
    same(tt(x).repeat_interleave(tt(r), 0, output_size=5), x.repeat_interleave(r, 0, output_size=5))
    same(tt(x).repeat_interleave(2, 1), x.repeat_interleave(2, 1))
    same(
        torch.repeat_interleave(tt(torch.zeros(0, dtype=torch.int64))),
        torch.repeat_interleave(torch.zeros(0, dtype=torch.int64)),
    )


# ---------------------------------------------------------------------------------------------------- sort, topk
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64])
def test_sort(dtype):
    """Stable sort: ties keep their order, NaN sorts above +Inf, -0.0 ties with +0.0 (bit-exact values and indices)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-5, 5, (4, 33), generator=g).to(dtype)
    if dtype.is_floating_point:
        x[0, :6] = torch.tensor([float("nan"), 0.0, -0.0, float("inf"), float("-inf"), float("nan")]).to(dtype)
    for dim in (1, 0):
        for descending in (False, True):
            got = torch.sort(tt(x), dim=dim, descending=descending, stable=True)
            want = torch.sort(x, dim=dim, descending=descending, stable=True)
            same(got.values, want.values)
            same(got.indices, want.indices)
    same(torch.argsort(tt(x), dim=1, stable=True), torch.argsort(x, dim=1, stable=True))
    v, i = tt(torch.empty(0, dtype=dtype)), tt(torch.empty(0, dtype=torch.int64))
    torch.sort(tt(x), dim=1, stable=True, out=(v, i))
    same(v, torch.sort(x, dim=1, stable=True).values)
    same(i, torch.sort(x, dim=1, stable=True).indices)
    distinct = torch.randperm(50, generator=g).to(dtype)  # no ties: the unstable sort's order is determined
    v, i = tt(torch.empty(0, dtype=dtype)), tt(torch.empty(0, dtype=torch.int64))
    torch.sort(tt(distinct), 0, True, out=(v, i))
    same(v, torch.sort(distinct, 0, True).values)
    same(i, torch.sort(distinct, 0, True).indices)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_topk(dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.stack([torch.randperm(40, generator=g) for _ in range(3)]).to(dtype) - 20  # distinct values per row
    for k, dim, largest in [(5, 1, True), (3, 1, False), (2, 0, True), (40, -1, False)]:
        got, want = torch.topk(tt(x), k, dim, largest), torch.topk(x, k, dim, largest)
        same(got.values, want.values)
        same(got.indices, want.indices)
    y = torch.tensor([1.0, float("nan"), 3.0, -1.0])
    same(torch.topk(tt(y), 2).values, torch.topk(y, 2).values)
    got = torch.topk(tt(x), 4, sorted=False)
    assert set(got.values.cpu()[0].tolist()) == set(torch.topk(x, 4).values[0].tolist())


# ---------------------------------------------------------------------------------------------------- errors
def test_index_out_of_range_is_typed():
    t = tt(data((3, 4)))
    with pytest.raises(CommandError) as e:
        torch.gather(t, 1, tt(torch.tensor([[0, 4]]))).cpu()
    assert isinstance(e.value.cause, IndexOutOfRangeError) and "gather" in str(e.value)
    with pytest.raises(CommandError) as e:
        t[tt(torch.tensor([3]))].cpu()
    assert isinstance(e.value.cause, IndexOutOfRangeError)
    with pytest.raises(CommandError):
        t.index_select(0, tt(torch.tensor([-1]))).cpu()
    same(t.clone(), data((3, 4)))  # the device is still usable


def test_what_ttnn_kernels_lack_runs_on_the_host(knobs):
    """TT-NN's scatter has no mean and its sort no int32: those calls run on the host (counted), the rest on TT-NN."""
    from kohakutt.kernels import host_runs

    knobs(KTT_CUSTOM_KERNELS=0)
    x, i = tt(torch.zeros(3)), tt(torch.tensor([0, 0, 2]))
    host_runs(reset=True)
    want = torch.scatter_reduce(torch.zeros(3), 0, torch.tensor([0, 0, 2]), torch.ones(3), "mean")
    same(torch.scatter_reduce(x, 0, i, tt(torch.ones(3)), "mean"), want)
    same(torch.sort(tt(torch.tensor([3, 1, 2], dtype=torch.int32))).values, torch.tensor([1, 2, 3], dtype=torch.int32))
    assert host_runs() == {"scatter": 1, "sort": 1}
    same(torch.scatter_add(x, 0, i, tt(torch.ones(3))), torch.tensor([2.0, 0.0, 1.0]))
    assert host_runs(reset=True) == {"scatter": 1, "sort": 1}  # TT-NN's scatter-add


def test_bad_arguments_are_typed():
    t = tt(data((3, 4)))
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        t[tt(torch.tensor([1.0]))]
    with pytest.raises(IndexError, match="does not match the shape"):
        t[tt(torch.ones(4, dtype=torch.bool))]
    with pytest.raises(IndexError, match="too many indices"):
        t[:, :, tt(torch.tensor([0]))]
    mask = tt(torch.ones(3, 4, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="bool"):
        t.masked_fill(mask, 1.0)
    with pytest.raises(DtypeError):
        t.index_put_((tt(torch.tensor([0])),), tt(torch.ones(1, 4, dtype=torch.int32)))
    with pytest.raises(DtypeError):
        tt(torch.ones(3, dtype=torch.bool)).index_put_(
            (tt(torch.tensor([0, 0])),), tt(torch.ones(2, dtype=torch.bool)), True
        )
    with pytest.raises(ShapeError):
        t.masked_scatter(tt(torch.ones(3, 4, dtype=torch.bool)), tt(torch.ones(5)))
    with pytest.raises(DtypeError):
        t.index_select(0, tt(torch.tensor([0.0])))
    with pytest.raises(RuntimeError, match="same device"):
        torch.gather(t, 0, torch.tensor([[0]]))
    with pytest.raises(RuntimeError, match="Padding size"):
        torch.nn.functional.pad(t[None], (4, 4), mode="reflect")


def test_kernel_table():
    all_kernels()
    for name in (
        "cat.out",
        "gather",
        "scatter_reduce.two",
        "index.Tensor",
        "_index_put_impl_",
        "nonzero",
        "sort.stable",
        "topk",
        "flip",
        "roll",
        "masked_select",
        "reflection_pad2d_backward",
        "repeat_interleave.Tensor",
    ):
        assert name in KERNELS and KERNELS[name].ir, name
    assert KERNELS["masked_scatter_"].kind == "composite"
