"""The movement and creation families on the simulator, against torch CPU (float64) as the independent reference.

Moves are checked bit for bit: the inputs are the device's own stored values (bfloat16 already rounded, NaN as the
card's canonical 0x7fc0), so a move that does any arithmetic or rounding would show. Sums (scatter, index_put) are
checked against float64 with the bound for fp32 adds in index order plus one rounding to the output dtype:
|err| <= K * 2^-24 * sum|terms| + 2^-8 * |ref| for a bfloat16 output (half an ulp of 8 significant bits; 2^-24
for float32) with K terms.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kohakutt
from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, DtypeError, IndexOutOfRangeError
from kohakutt.hal.formats import quantize, round_bfloat16
from kohakutt.ir import DType, Graph, TensorSpec, decompose
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import movement as km


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def values(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Random values of ``dtype`` with the awkward ones mixed in (floats: NaN, +-Inf, -0.0, a subnormal)."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "int32":
        return rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-39, 3.0, 3.0], np.float32)
    flat[rng.permutation(flat.size)[: min(flat.size, specials.size)]] = specials[: min(flat.size, specials.size)]
    return round_bfloat16(x) if dtype == "bfloat16" else x


def put(dev, rng, shape, dtype, layout="row_major"):
    """A device tensor of random ``dtype`` values and the values it holds."""
    t = kk.from_numpy(dev, values(rng, shape, dtype), dtype, layout)
    return t, kk.to_numpy(t)


def run(op, inputs, attrs=None, **kw):
    return [kk.to_numpy(o) for o in kk.run(op, inputs, attrs or {}, **kw)]


def tref(a: np.ndarray) -> torch.Tensor:
    """A torch tensor of ``a``'s values: floats widened to float64 (exact), ints as int64, bool as bool."""
    a = np.asarray(a)
    return torch.from_numpy(
        a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64) if a.dtype.kind in "iu" else a.copy()
    )


def same_bits(got: np.ndarray, ref) -> None:
    """``got`` equals ``ref`` exactly: same shape, NaN where ref has NaN, otherwise the same bits (so -0.0 != 0.0)."""
    ref = ref.numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape}"
    if got.dtype.kind == "f":
        ref = ref.astype(np.float32)
        nan = np.isnan(ref)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32))
    else:
        assert np.array_equal(got, ref.astype(got.dtype))


# ------------------------------------------------------------------------------------------- exact moves
def _slice(t, d, s, e, st):
    return t[(slice(None),) * (d % t.ndim) + (slice(s, e, st),)]


# (op, attrs, input shape, torch reference)
MOVES = [
    ("permute", {"dims": (2, 0, -2)}, (3, 5, 37), lambda t: t.permute(2, 0, 1)),
    ("transpose", {"dim0": -1, "dim1": 0}, (3, 5, 37), lambda t: t.transpose(-1, 0)),
    ("reshape", {"shape": (5, -1, 3)}, (3, 5, 37), lambda t: t.reshape(5, -1, 3)),
    ("expand", {"shape": (2, 3, -1, 33)}, (3, 1, 1), lambda t: t.expand(2, 3, -1, 33)),
    ("broadcast_to", {"shape": (4, 3, 7)}, (3, 1), lambda t: t.broadcast_to(4, 3, 7)),
    ("slice", {"dim": -1, "start": -30, "end": 1000, "step": 3}, (3, 5, 37), lambda t: _slice(t, -1, -30, 1000, 3)),
    ("slice", {"dim": 1, "start": 4, "end": 2, "step": 1}, (3, 5, 37), lambda t: _slice(t, 1, 4, 2, 1)),
    ("select", {"dim": -2, "index": -1}, (3, 5, 37), lambda t: t.select(-2, -1)),
    ("flip", {"dims": (0, -1)}, (3, 5, 37), lambda t: t.flip(0, -1)),
    ("roll", {"shifts": (2, -7), "dims": (1, 2)}, (3, 5, 37), lambda t: t.roll((2, -7), (1, 2))),
    ("roll", {"shifts": 11, "dims": None}, (3, 5, 37), lambda t: t.roll(11)),
    ("repeat", {"repeats": (2, 1, 3, 2)}, (3, 5, 7), lambda t: t.repeat(2, 1, 3, 2)),
    ("repeat_interleave", {"repeats": 3, "dim": -2}, (3, 5, 7), lambda t: t.repeat_interleave(3, dim=-2)),
    ("repeat_interleave", {"repeats": 2}, (3, 5), lambda t: t.repeat_interleave(2)),
    ("tril", {"diagonal": -1}, (2, 5, 37), lambda t: t.tril(-1)),
    ("triu", {"diagonal": 3}, (2, 37, 5), lambda t: t.triu(3)),
    ("diagonal", {"offset": -1, "dim1": 2, "dim2": 0}, (6, 5, 4), lambda t: t.diagonal(-1, 2, 0)),
    ("as_strided", {"size": (4, 3), "stride": (7, 2), "offset": 5}, (5, 8), lambda t: t.as_strided((4, 3), (7, 2), 5)),
    ("pad", {"pads": (2, 3, -1, 1)}, (3, 5, 7), lambda t: F.pad(t, (2, 3, -1, 1), value=0)),
    ("pad", {"pads": (1, 2), "value": 2.5}, (3, 5, 7), lambda t: F.pad(t, (1, 2), value=2.5)),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int32", "bool"])
@pytest.mark.parametrize("op,attrs,shape,ref", MOVES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MOVES)])
def test_moves_are_exact(dev, op, attrs, shape, ref, dtype):
    rng = np.random.default_rng(abs(hash((op, dtype))) % 2**32)
    t, x = put(dev, rng, shape, dtype)
    (got,) = run(op, [t], attrs)
    expected = ref(tref(x))
    if op == "pad" and dtype in ("int32", "bool"):  # torch pads ints / bools with the value cast to them
        v = attrs.get("value", 0.0)
        expected = F.pad(tref(x).double(), attrs["pads"], value=v)
        expected = expected.bool() if dtype == "bool" else expected.long()
    same_bits(got, expected)
    assert got.dtype == DType.of(dtype).compute


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_match_torch(dev, mode):
    t, x = put(dev, np.random.default_rng(1), (2, 3, 6, 33), "bfloat16")
    (got,) = run("pad", [t], {"pads": (5, 2, 1, 3), "mode": mode})
    same_bits(got, F.pad(tref(x), (5, 2, 1, 3), mode=mode))


def test_concat_and_stack_promote_and_skip_empty_1d(dev):
    rng = np.random.default_rng(2)
    a, xa = put(dev, rng, (2, 3, 5), "bfloat16")
    b, xb = put(dev, rng, (2, 4, 5), "int32")
    e = kk.from_numpy(dev, np.zeros((0,), np.float32), "bfloat16")
    z = kk.from_numpy(dev, np.zeros((2, 0, 5), np.float32), "bfloat16")
    (out,) = kk.run("concat", [a, e, b, z], {"dim": -2})
    assert out.dtype is DType.BFLOAT16 and out.shape == (2, 7, 5)
    got = kk.to_numpy(out)
    ref = torch.cat([tref(xa), tref(xb).double(), torch.zeros(2, 0, 5, dtype=torch.float64)], dim=-2)
    same_bits(got, round_bfloat16(ref.numpy().astype(np.float32)))  # ints become bfloat16 by one rounding
    c, xc = put(dev, rng, (2, 3, 5), "bfloat16")
    (got,) = run("stack", [a, c], {"dim": -1})
    same_bits(got, torch.stack([tref(xa), tref(xc)], dim=-1))


def test_split_decomposes_into_slices(dev):
    t, x = put(dev, np.random.default_rng(3), (3, 37), "float32")
    outs = run("split", [t], {"split_size": 16, "dim": -1})
    for got, ref in zip(outs, torch.split(tref(x), 16, dim=-1), strict=True):
        same_bits(got, ref)
    outs = run("split", [t], {"split_size": (1, 0, 2), "dim": 0})
    assert [o.shape for o in outs] == [(1, 37), (0, 37), (2, 37)]


def test_strided_views_are_read_in_logical_order(dev):
    base = kk.from_numpy(dev, np.arange(60, dtype=np.float32).reshape(6, 10), "bfloat16")
    view = kk.DeviceTensor(base.buffer, TensorSpec((3, 4), DType.BFLOAT16), strides=(1, 10), offset=12)  # transposed
    ref = np.arange(60, dtype=np.float32)[12:][np.arange(3)[:, None] + 10 * np.arange(4)[None, :]]
    (got,) = run("permute", [view], {"dims": (1, 0)})
    same_bits(got, ref.T)
    (got,) = run("reshape", [view], {"shape": (12,)})
    same_bits(got, ref.reshape(-1))
    i = np.array([[2, 0, 0, 1]], np.int32)
    (got,) = run("gather", [view, kk.from_numpy(dev, i)], {"dim": 0})
    same_bits(got, torch.gather(torch.from_numpy(ref), 0, torch.from_numpy(i).long()))
    ix = kk.from_numpy(dev, np.array([9, 9, 7, 7, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9], np.int32))
    iview = kk.DeviceTensor(ix.buffer, TensorSpec((2, 2), DType.INT32), strides=(3, 1), offset=2)  # [[7, 7], [1, 2]]
    zeros = kk.DeviceTensor(ix.buffer, TensorSpec((2,), DType.INT32), strides=(0,), offset=5)  # [0, 0]
    (got,) = run("index_select", [view, zeros], {})
    same_bits(got, ref[[0, 0]])
    pair = kk.DeviceTensor(ix.buffer, TensorSpec((1, 2), DType.INT32), strides=(0, 1), offset=6)  # [[1, 2]]
    (got,) = run("gather", [view, pair], {"dim": 1})
    same_bits(got, ref[0, [1, 2]][None])
    with pytest.raises(CommandError, match="IndexOutOfRangeError: gather: index 7"):
        kk.to_numpy(kk.run("gather", [view, iview], {"dim": 0})[0])


def test_tile_layouts_and_block_floats(dev):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 40, 70)) * np.exp2(rng.integers(-8, 8, (3, 40, 70)))).astype(np.float32)
    t = kk.from_numpy(dev, x, "bfloat8_b", "tile")
    stored = kk.to_numpy(t)
    (p,) = kk.run("permute", [t], {"dims": (0, 2, 1)})
    assert p.spec.layout.value == "tile" and p.dtype is DType.BFLOAT8_B
    # the values move exactly, then each output face row gets its own shared exponent again
    same_bits(kk.to_numpy(p), quantize(np.transpose(stored, (0, 2, 1)), "bfloat8_b"))
    b = kk.from_numpy(dev, round_bfloat16(x), "bfloat16", "tile")
    (s,) = run("slice", [b], {"dim": 2, "start": 3, "end": 65, "step": 2})
    same_bits(s, round_bfloat16(x)[:, :, 3:65:2])


def test_empty_and_zero_d(dev):
    rng = np.random.default_rng(5)
    e = kk.from_numpy(dev, np.zeros((0, 3), np.float32), "bfloat16")
    assert run("permute", [e], {"dims": (1, 0)})[0].shape == (3, 0)
    assert run("sort", [e], {"dim": 0})[0].shape == (0, 3)
    assert run("gather", [e, kk.from_numpy(dev, np.zeros((0, 2), np.int32))], {"dim": 1})[0].shape == (0, 2)
    idx, count = run("nonzero", [e])
    assert idx.shape == (0, 2) and count == 0
    t, x = put(dev, rng, (5,), "bfloat16")
    (s,) = run("select", [t], {"dim": 0, "index": 3})
    assert s.shape == () and same_bits(s, x[3]) is None
    (r,) = run("reshape", [kk.from_numpy(dev, np.array(2.5, np.float32))], {"shape": (1, 1)})
    assert r.tolist() == [[2.5]]
    vals, order = run("sort", [kk.from_numpy(dev, np.array(7, np.int32))])
    assert vals == 7 and order == 0
    (f,) = run("full", [], {"shape": (), "value": -1.5}, device=dev)
    assert f.shape == () and f == -1.5


# ------------------------------------------------------------------------------------------------- indexing
def test_gather_index_select_and_range_errors(dev):
    rng = np.random.default_rng(6)
    t, x = put(dev, rng, (4, 6, 35), "bfloat16")
    i = rng.integers(0, 6, (3, 9, 20)).astype(np.int32)
    (got,) = run("gather", [t, kk.from_numpy(dev, i)], {"dim": -2})
    same_bits(got, torch.gather(tref(x), -2, torch.from_numpy(i).long()))
    (got64,) = run("gather", [t, kk.from_numpy(dev, i.astype(np.int64))], {"dim": -2})  # int64 storage works too
    same_bits(got64, got)
    j = np.array([34, 0, 0, 17], np.int32)
    (got,) = run("index_select", [t, kk.from_numpy(dev, j)], {"dim": 2})
    same_bits(got, torch.index_select(tref(x), 2, torch.from_numpy(j).long()))
    bad = kk.from_numpy(dev, np.array([[[1, 6]]], np.int32))
    kk.run("gather", [t, bad], {"dim": 1})
    with pytest.raises(CommandError, match=r"'gather' failed: IndexOutOfRangeError: gather: index 6 is out of range"):
        dev.synchronize()
    neg = kk.from_numpy(dev, np.array([-1], np.int32))
    with pytest.raises(CommandError) as info:
        kk.to_numpy(kk.run("index_select", [t, neg], {"dim": 0})[0])
    assert isinstance(info.value.cause, IndexOutOfRangeError)
    (again,) = run("gather", [t, kk.from_numpy(dev, i)], {"dim": -2})  # the device is still usable
    same_bits(again, torch.gather(tref(x), -2, torch.from_numpy(i).long()))
    with pytest.raises(DtypeError, match="integer tensor"):
        kk.run("gather", [t, kk.from_numpy(dev, i.astype(np.float32))], {"dim": 0})
    with pytest.raises(ShapeError, match="exceeds x's size"):
        kk.run("gather", [t, kk.from_numpy(dev, np.zeros((5, 1, 1), np.int32))], {"dim": 1})


@pytest.mark.parametrize("dims,shapes", [((0, 2), [(4, 1), (5,)]), ((1, 2), [(2, 3), (3,)]), ((2,), [(7, 2)])])
def test_advanced_index_matches_torch(dev, dims, shapes):
    rng = np.random.default_rng(7)
    t, x = put(dev, rng, (4, 5, 6, 3), "float32")
    xs = tuple(tref(x).shape)
    idx = [rng.integers(-xs[d], xs[d], s).astype(np.int32) for d, s in zip(dims, shapes)]
    (got,) = run("index", [t, *(kk.from_numpy(dev, i) for i in idx)], {"dims": dims})
    key = [slice(None)] * 4
    for d, i in zip(dims, idx):
        key[d] = torch.from_numpy(i).long()
    same_bits(got, tref(x)[tuple(key)])
    with pytest.raises(CommandError, match="IndexOutOfRangeError"):
        kk.to_numpy(kk.run("index", [t, kk.from_numpy(dev, np.array([4], np.int32))], {"dims": (0,)})[0])


def test_index_put_accumulates_every_duplicate(dev):
    rng = np.random.default_rng(8)
    t, x = put(dev, rng, (6, 4), "bfloat16")
    x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    t = kk.from_numpy(dev, x, "bfloat16")
    rows = np.array([1, 1, 1, 5, -1, 0] * 50, np.int32)  # -1 is row 5 again
    v = round_bfloat16(rng.standard_normal((rows.size, 4)).astype(np.float32))
    (got,) = run(
        "index_put",
        [t, kk.from_numpy(dev, v, "bfloat16"), kk.from_numpy(dev, rows)],
        {"dims": (0,), "accumulate": True},
    )
    ref = tref(x).index_put((torch.from_numpy(rows).long(),), tref(v), accumulate=True).numpy()
    terms = np.abs(x).copy()
    np.add.at(terms, rows, np.abs(v))
    assert np.all(np.abs(got - ref) <= rows.size * 2.0**-24 * terms + 2.0**-8 * np.abs(ref))
    (last,) = run(
        "index_put",
        [t, 9.0, kk.from_numpy(dev, np.array([2, 2], np.int32)), kk.from_numpy(dev, np.array([0, 3], np.int32))],
        {"dims": (0, 1)},
    )
    assert last[2, 0] == 9 and last[2, 3] == 9 and last[2, 1] == x[2, 1]


def test_masked_ops(dev):
    rng = np.random.default_rng(9)
    t, x = put(dev, rng, (3, 5, 7), "bfloat16")
    m = rng.random((5, 1)) < 0.5
    mt = kk.from_numpy(dev, m)
    (got,) = run("masked_fill", [t, mt, 1e9])
    same_bits(got, round_bfloat16(tref(x).masked_fill(torch.from_numpy(m), 1e9).numpy().astype(np.float32)))
    (got,) = run("masked_fill", [t, mt, kk.from_numpy(dev, np.array(-2.0, np.float32))])
    same_bits(got, tref(x).masked_fill(torch.from_numpy(m), -2.0))
    vals, count = run("masked_select", [t, mt])
    ref = torch.masked_select(tref(x), torch.from_numpy(m))
    assert count == ref.numel() and vals.shape == (3 * 5 * 7,)
    same_bits(vals[:count], ref)
    assert not vals[count:].any()
    with pytest.raises(DtypeError, match="bool tensor"):
        kk.run("masked_fill", [t, kk.from_numpy(dev, m.astype(np.int32)), 0.0])


def test_nonzero_pattern(dev):
    x = np.array([[0.0, -0.0, np.nan], [1e-40, 0.0, 2.0]], np.float32)
    t = kk.from_numpy(dev, x)
    idx, count = run("nonzero", [t])
    ref = torch.nonzero(torch.from_numpy(x))
    assert idx.shape == (6, 2) and idx.dtype == np.int32 and count.shape == () and count == len(ref)
    assert idx[:count].tolist() == ref.tolist() and not idx[count:].any()
    (narrow,) = run("slice", [kk.run("nonzero", [t])[0]], {"dim": 0, "end": int(count)})  # the frontend's pattern
    assert narrow.tolist() == ref.tolist()


def test_one_hot(dev):
    x = np.array([[0, 3], [2, 5]], np.int32)
    t = kk.from_numpy(dev, x)
    (got,) = run("one_hot", [t], {"num_classes": 6})
    assert got.dtype == np.int32 and np.array_equal(got, F.one_hot(torch.from_numpy(x).long(), 6).numpy())
    with pytest.raises(CommandError, match="class 5 is out of range"):
        kk.to_numpy(kk.run("one_hot", [t], {"num_classes": 5}, provider="host")[0])
    (zeros,) = run("one_hot", [t], {"num_classes": 5}, provider="ttnn")  # TT-NN's compare chain: a zero row
    assert not zeros[1, 1].any() and zeros[1, 0, 2] == 1


# -------------------------------------------------------------------------------------------------- scatter
@pytest.mark.parametrize("provider", ["ttnn", "host"])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin", None])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reductions_with_duplicates(dev, provider, reduce, include_self):
    rng = np.random.default_rng(10)
    x = round_bfloat16((rng.standard_normal((4, 9)) + 2).astype(np.float32))
    src = round_bfloat16((rng.random((4, 40)) + 0.5).astype(np.float32))
    idx = rng.integers(0, 7, (3, 40)).astype(np.int32)  # many duplicates per row; columns 7, 8 never hit
    args = [kk.from_numpy(dev, x, "bfloat16"), kk.from_numpy(dev, idx), kk.from_numpy(dev, src, "bfloat16")]
    attrs = {"dim": -1, "reduce": reduce, "include_self": include_self}
    if provider == "ttnn" and reduce is not None and (reduce == "mean" or not include_self):
        with pytest.raises(CommandError, match="KohakuTTUnsupportedOperator: scatter: TT-NN's scatter has no"):
            run("scatter", args, attrs, provider=provider)
        return
    (got,) = run("scatter", args, attrs, provider=provider)
    xt, it, st = tref(x), torch.from_numpy(idx).long(), tref(src)[:3]
    if reduce is None:
        ref = xt.scatter(-1, it[:, :1], st[:, :1])  # one write per position: no duplicate ambiguity
        (got,) = run("scatter", [args[0], kk.from_numpy(dev, idx[:, :1]), args[2]], attrs, provider=provider)
    else:
        ref = xt.scatter_reduce(-1, it, st, reduce=reduce, include_self=include_self)
    ref = ref.numpy()
    k = 40 + 1
    tol = 2.0**-8 * np.abs(ref) + (k * 2.0**-24 * (np.abs(ref) + 1) * (8.0**k if reduce == "prod" else 1))
    assert np.all(np.abs(got - ref) <= tol)
    assert np.array_equal(got[3], x[3]) and np.array_equal(got[:, 7:], x[:, 7:])  # untouched stay bit-exact


def test_scatter_add_keeps_every_duplicate_and_decomposes(dev):
    n = 1000
    x = kk.from_numpy(dev, np.zeros(3, np.float32))
    idx = kk.from_numpy(dev, np.zeros(n, np.int32))
    src = kk.from_numpy(dev, np.full(n, 0.5, np.float32))
    (got,) = run("scatter_add", [x, idx, src], {"dim": 0})
    assert got.tolist() == [500.0, 0.0, 0.0]
    g = Graph()
    v = g.add("scatter_add", g.input(x.spec), g.input(idx.spec), g.input(src.spec), dim=0)
    g.set_outputs(v)
    assert decompose(g) == 1 and [n.op for n in g] == ["scatter"] and g.nodes[0].attrs["reduce"] == "sum"


def test_scatter_out_of_range_and_nan(dev):
    x = kk.from_numpy(dev, np.array([1.0, np.nan, 3.0], np.float32))
    idx = kk.from_numpy(dev, np.array([0, 1, 3], np.int32))
    src = kk.from_numpy(dev, np.array([np.nan, 5.0, 9.0], np.float32))
    with pytest.raises(CommandError, match="IndexOutOfRangeError: scatter: index 3"):
        run("scatter", [x, idx, src], {"reduce": "amax"}, provider="host")
    (tt,) = run("scatter", [x, idx, src], {"reduce": "amax"}, provider="ttnn")  # skips 3; std::max keeps self
    assert tt[0] == 1.0 and np.isnan(tt[1]) and tt[2] == 3.0
    ok = kk.from_numpy(dev, np.array([0, 1, 1], np.int32))
    (hs,) = run("scatter", [x, ok, src], {"reduce": "amax"}, provider="host")  # torch: NaN propagates
    ref = tref(kk.to_numpy(x)).scatter_reduce(0, torch.tensor([0, 1, 1]), tref(kk.to_numpy(src)), "amax").numpy()
    assert np.array_equal(np.isnan(hs), np.isnan(ref)) and hs[2] == ref[2]
    # TT-NN 0.81.1's scatter reduces by add or multiply only: by default amax runs on the host, as on a card
    kk.host_runs(reset=True)
    (default,) = run("scatter", [x, ok, src], {"reduce": "amax"})
    assert np.array_equal(default, hs, equal_nan=True) and kk.host_runs().get("scatter") == 1
    (sc,) = run("scatter", [x, ok, 4.0])  # a number as src
    assert sc.tolist()[0] == 4.0 and sc[1] == 4.0


def test_scatter_mean_of_ints_floors(dev):
    x = kk.from_numpy(dev, np.array([1, -7, 4], np.int32))
    idx = kk.from_numpy(dev, np.array([1, 1, 0], np.int32))
    src = kk.from_numpy(dev, np.array([2, 2, -4], np.int32))
    (got,) = run("scatter", [x, idx, src], {"reduce": "mean"})
    ref = torch.tensor([1, -7, 4]).scatter_reduce(0, torch.tensor([1, 1, 0]), torch.tensor([2, 2, -4]), "mean")
    assert got.tolist() == ref.tolist()


# ------------------------------------------------------------------------------------------------ sort, topk
def test_sort_matches_torch_with_nan_ties_and_stability(dev):
    rng = np.random.default_rng(11)
    x = round_bfloat16(rng.integers(-3, 4, (5, 70)).astype(np.float32))
    x[0, [3, 9, 40]] = np.nan
    x[1, [2, 5]] = [-0.0, 0.0]
    x[2, [0, 1]] = [np.inf, -np.inf]
    t = kk.from_numpy(dev, x, "bfloat16")
    for desc in (False, True):
        vals, order = run("sort", [t], {"dim": -1, "descending": desc, "stable": True}, provider="host")
        rv, ro = torch.sort(tref(x), dim=-1, descending=desc, stable=True)
        same_bits(vals, rv)
        assert order.dtype == np.int32 and np.array_equal(order, ro.numpy())
    vals, order = run("sort", [t], {"dim": 0}, provider="host")  # unstable requested: a valid order still
    rv, _ = torch.sort(tref(x), dim=0)
    same_bits(vals, rv)
    assert np.array_equal(np.take_along_axis(kk.to_numpy(t), order, 0), vals, equal_nan=True)
    (ao,) = run("argsort", [t], {"dim": -1, "descending": True, "stable": True})
    assert np.array_equal(ao, torch.argsort(tref(x), dim=-1, descending=True, stable=True).numpy())


def test_ttnn_sort_model(dev):
    x = np.array([[2.0, np.nan, -1.0, np.inf, -0.0, 0.0]], np.float32)
    vals, order = run("sort", [kk.from_numpy(dev, x, "bfloat16")], {"stable": True}, provider="ttnn")
    assert vals.tolist() == [[-1.0, 0.0, 0.0, 2.0, np.inf, np.inf]]  # NaN compared and returned as +Inf
    assert order.tolist() == [[2, 4, 5, 0, 1, 3]]
    vals, _ = run("sort", [kk.from_numpy(dev, x)], {"stable": True}, provider="ttnn")
    assert np.signbit(vals[0, 1]) == np.False_ and np.isnan(vals[0, -1])  # float32: -0.0 canonicalized
    with pytest.raises(CommandError, match="DtypeError: sort: TT-NN's sort takes"):
        run("sort", [kk.from_numpy(dev, np.array([3, 1], np.int32))], provider="ttnn")
    kk.host_runs(reset=True)
    for provider in ("host", None):  # TT-NN's sort refuses int32: by default the host sorts it, as on a card
        vals, order = run("sort", [kk.from_numpy(dev, np.array([3, 1, 3, -5], np.int32))], provider=provider)
        assert vals.tolist() == [-5, 1, 3, 3] and order.tolist() == [3, 1, 0, 2]
    assert kk.host_runs().get("sort") == 2


def test_topk_ties_nan_and_bounds(dev):
    x = np.array([[1.0, 5.0, 5.0, np.nan, -2.0, 5.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    t = kk.from_numpy(dev, x, "bfloat16")
    vals, idx = run("topk", [t], {"k": 3})
    assert np.isnan(vals[0, 0]) and vals[0, 1:].tolist() == [5.0, 5.0] and idx.tolist() == [[3, 1, 2], [0, 1, 2]]
    rv, _ = torch.topk(tref(x), 3)
    same_bits(vals, rv)
    vals, idx = run("topk", [t], {"k": 2, "largest": False, "dim": 1})
    assert vals.tolist() == [[-2.0, 1.0], [0.0, 0.0]] and idx.tolist() == [[4, 0], [0, 1]]
    assert run("topk", [t], {"k": 0})[0].shape == (2, 0)
    with pytest.raises(ShapeError, match="k=7 is out of range"):
        kk.run("topk", [t], {"k": 7})


# ------------------------------------------------------------------------------------------------ creation
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "uint8", "bool"])
def test_full_zeros_ones(dev, dtype):
    (f,) = run("full", [], {"shape": (3, 33), "value": 2.7, "dtype": dtype}, device=dev)
    ref = torch.full((3, 33), 2.7, dtype=torch.float64)
    expect = {
        "float32": np.float32(2.7),
        "bfloat16": round_bfloat16(np.float32(2.7)),
        "int32": 2,
        "uint8": 2,
        "bool": True,
    }[dtype]
    assert f.shape == tuple(ref.shape) and np.all(f == expect)
    assert not run("zeros", [], {"shape": (2, 0), "dtype": dtype}, device=dev)[0].size
    assert np.all(run("ones", [], {"shape": (5,), "dtype": dtype}, device=dev)[0] == 1)
    (b,) = run("full", [], {"shape": (40, 40), "value": -0.3, "dtype": "bfloat8_b", "layout": "tile"}, device=dev)
    assert np.all(b == quantize(np.full((40, 40), -0.3, np.float32), "bfloat8_b"))


@pytest.mark.parametrize("args", [(10,), (2, 11, 3), (5, -7, -2), (0.0, 1.0, 0.1), (-1.5, 2.25, 0.3), (3, 3)])
def test_arange_matches_torch(dev, args):
    attrs = dict(zip(("start", "end", "step"), args))
    (got,) = run("arange", [], attrs, device=dev)
    ref = torch.arange(*args, dtype=torch.float64 if any(isinstance(a, float) for a in args) else torch.int64)
    assert got.dtype == (np.float32 if ref.dtype == torch.float64 else np.int32)
    same_bits(got, ref.numpy().astype(got.dtype))
    (b,) = run("arange", [], {**attrs, "dtype": "bfloat16"}, device=dev)
    same_bits(b, round_bfloat16(ref.numpy().astype(np.float32)))
    with pytest.raises(ShapeError, match="sign of step"):
        kk.run("arange", [], {"start": 0, "end": 5, "step": -1}, device=dev)


def test_linspace_and_eye(dev):
    for start, end, steps in [(0.0, 1.0, 7), (-3.0, 10.0, 1), (2.0, -2.0, 64), (0.0, 1.0, 0)]:
        (got,) = run("linspace", [], {"start": start, "end": end, "steps": steps}, device=dev)
        same_bits(got, torch.linspace(start, end, steps, dtype=torch.float64).numpy().astype(np.float32))
    (e,) = run("eye", [], {"n": 3, "m": 5, "dtype": "bfloat16"}, device=dev)
    assert np.array_equal(e, torch.eye(3, 5).numpy())


# ----------------------------------------------------------------------------------- errors, graphs, cost
def test_shape_errors_say_what_is_wrong(dev):
    t = kk.from_numpy(dev, np.zeros((2, 3), np.float32))
    cases = [
        ("permute", {"dims": (0, 0)}, "name a dimension twice"),
        ("reshape", {"shape": (4, -1)}, "cannot infer"),
        ("slice", {"dim": 0, "step": -1}, "step must be positive"),
        ("expand", {"shape": (5, 3)}, "cannot expand"),
        ("pad", {"pads": (3, 0), "mode": "reflect"}, "smaller than the size"),
        ("as_strided", {"size": (2, 2), "stride": (3, 3), "offset": 3}, "reach past"),
        ("select", {"dim": 1, "index": 3}, "out of range"),
        ("tril", {}, None),
    ]
    for op, attrs, msg in cases:
        if msg is None:
            with pytest.raises(ShapeError, match="at least 2 dims"):
                kk.run(op, [kk.from_numpy(dev, np.zeros(3, np.float32))], attrs)
            continue
        with pytest.raises(ShapeError, match=msg):
            kk.run(op, [t], attrs)
    with pytest.raises(ShapeError, match="needs output_size"):
        kk.run("repeat_interleave", [t, kk.from_numpy(dev, np.array([1, 2], np.int32))], {"dim": 0})


def test_repeat_interleave_with_a_repeats_tensor(dev):
    t, x = put(dev, np.random.default_rng(12), (3, 4), "bfloat16")
    r = np.array([2, 0, 3], np.int32)
    (got,) = run("repeat_interleave", [t, kk.from_numpy(dev, r)], {"dim": 0, "output_size": 5})
    same_bits(got, torch.repeat_interleave(tref(x), torch.from_numpy(r).long(), dim=0))
    with pytest.raises(CommandError, match="repeats sum to 5, but output_size is 4"):
        run("repeat_interleave", [t, kk.from_numpy(dev, r)], {"dim": 0, "output_size": 4})


def test_transpose_decomposes_to_permute():
    g = Graph()
    x = g.input(TensorSpec((2, 3, 4), DType.BFLOAT16))
    g.set_outputs(g.add("transpose", x, dim0=0, dim1=-1))
    assert decompose(g) == 1 and g.nodes[0].op == "permute" and g.nodes[0].attrs["dims"] == (2, 1, 0)


def test_estimates_follow_the_data_movement():
    from kohakutt.hal.card import P150A

    x = TensorSpec((8, 512, 512), DType.BFLOAT16)
    out = TensorSpec((8, 512, 512), DType.BFLOAT16)
    keep_last = km.permute_cost([x], [out], {"dims": (1, 0, 2)}, None, P150A)
    move_last = km.permute_cost([x], [out], {"dims": (2, 0, 1)}, None, P150A)
    copy = 2e3 + 2 * 8 * 512 * 512 * 2 / 500e9 * 1e9  # launch + read and write at 500 GB/s
    assert keep_last == pytest.approx(copy) and move_last == pytest.approx(3 * copy)
    assert km.sort_cost([x], [out, out], {"dim": -1}, None, P150A) > copy
    idx = TensorSpec((8, 512, 512), DType.INT32)
    assert km.index_loop([x, idx], [out], {}, None, P150A) > copy


def test_numerics_scope_does_not_change_moves(dev):
    t, x = put(dev, np.random.default_rng(13), (4, 33), "bfloat16")
    with kohakutt.numerics(fidelity="LoFi", fp32_acc=False, approx=True):
        (got,) = run("permute", [t], {"dims": (1, 0)})
    same_bits(got, x.T)


def test_searchsorted_matches_torch_step_for_step(dev):
    """Lower and upper bounds in 1-d and batched sequences, with a sorter, with NaN in the values and (where torch's
    loop is not monotone) in the sequence: the same insertion points as torch's CPU kernel."""
    rng = np.random.default_rng(12)
    seq = np.sort(rng.integers(-5, 6, (3, 9)).astype(np.float32), axis=-1)
    seq[1, -2:] = np.nan  # torch sorts NaN last; its binary search then treats a NaN probe as below the value
    vals = rng.integers(-7, 8, (3, 4)).astype(np.float32)
    vals[0, 0], vals[2, 1] = np.nan, np.inf
    for right in (False, True):
        for s, v in ((seq, vals), (seq[0], vals), (seq[0], np.float32(2.0))):
            (got,) = run("searchsorted", [kk.from_numpy(dev, s), kk.from_numpy(dev, np.asarray(v))], {"right": right})
            ref = torch.searchsorted(torch.from_numpy(s), torch.from_numpy(np.asarray(v)), right=right)
            assert got.dtype == np.int32 and np.array_equal(got, ref.numpy()), (right, s.shape)
    shuffled = rng.permutation(np.arange(9, dtype=np.int32) * 3)
    sorter = np.argsort(shuffled).astype(np.int32)
    v = np.array([-1, 0, 4, 26, 30], np.int32)
    (got,) = run("searchsorted", [kk.from_numpy(dev, shuffled), kk.from_numpy(dev, v), kk.from_numpy(dev, sorter)])
    ref = torch.searchsorted(torch.from_numpy(shuffled), torch.from_numpy(v), sorter=torch.from_numpy(sorter).long())
    assert np.array_equal(got, ref.numpy())
    with pytest.raises(DtypeError, match="typecast one"):
        kk.run("searchsorted", [kk.from_numpy(dev, seq), kk.from_numpy(dev, v[:3])], {})
    with pytest.raises(ShapeError, match="leading dims"):
        kk.run("searchsorted", [kk.from_numpy(dev, seq), kk.from_numpy(dev, vals[:2])], {})
