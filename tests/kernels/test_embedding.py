"""embedding and embedding_backward on the simulator.

The forward is a row move: checked bit for bit against NumPy indexing of the stored table. The backward is checked
against torch's embedding_backward in float64 on the same (stored) grads, with the bound for K fp32 adds in index
order plus one rounding to the output dtype: |err| <= K * 2^-24 * sum|terms| + u * |ref|, u = 2^-8 for a bfloat16
output (half an ulp of 8 significant bits), 2^-24 for float32. TT-NN's kernel truncates every partial sum to
bfloat16; it is checked against an independent scalar model written here from the ISA's SFPSTORE definition.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

import kohakutt
from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.errors import CommandError, IndexOutOfRangeError
from kohakutt.hal.card import P150A
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir import DType, TensorSpec
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import embedding as ke


@pytest.fixture(scope="module")
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def run(op, inputs, attrs=None, **kw):
    return [kk.to_numpy(o) for o in kk.run(op, inputs, attrs or {}, **kw)]


def torch_grad(grad: np.ndarray, idx: np.ndarray, n: int, padding_idx=None, scale=False) -> np.ndarray:
    g = torch.from_numpy(grad.astype(np.float64))
    i = torch.from_numpy(idx.astype(np.int64))
    p = -1 if padding_idx is None else padding_idx % n
    return torch.ops.aten.embedding_backward(g, i, n, p, scale, False).numpy()


def bound(grad: np.ndarray, idx: np.ndarray, n: int, ref: np.ndarray, u: float) -> np.ndarray:
    terms = np.zeros((n, grad.shape[-1]))
    np.add.at(terms, idx.reshape(-1), np.abs(grad.reshape(-1, grad.shape[-1])))
    k = np.bincount(idx.reshape(-1), minlength=n)[:, None]
    return k * 2.0**-24 * terms + u * np.abs(ref)


# ------------------------------------------------------------------------------------------------- forward
@pytest.mark.parametrize(
    "dtype,layout", [("bfloat16", "row_major"), ("float32", "row_major"), ("bfloat16", "tile"), ("bfloat8_b", "tile")]
)
def test_embedding_moves_rows_exactly(dev, dtype, layout):
    rng = np.random.default_rng(0)
    w = kk.from_numpy(dev, rng.standard_normal((50, 70)).astype(np.float32), dtype, layout)
    table = kk.to_numpy(w)
    idx = rng.integers(0, 50, (3, 33)).astype(np.int32)
    (out,) = kk.run("embedding", [w, kk.from_numpy(dev, idx)], {"padding_idx": 4})
    assert out.shape == (3, 33, 70) and out.dtype is (DType.BFLOAT16 if dtype == "bfloat8_b" else DType.of(dtype))
    got = kk.to_numpy(out)
    assert np.array_equal(got.view(np.uint32), table[idx].view(np.uint32))  # padding_idx: the row, as torch


def test_embedding_index_errors(dev):
    w = kk.from_numpy(dev, np.ones((5, 8), np.float32), "bfloat16")
    for bad in ([0, 5], [-1, 2]):
        kk.run("embedding", [w, kk.from_numpy(dev, np.array(bad, np.int32))])
        with pytest.raises(CommandError) as info:
            dev.synchronize()
        assert isinstance(info.value.cause, IndexOutOfRangeError) and "'embedding'" in str(info.value)
    assert run("embedding", [w, kk.from_numpy(dev, np.array([4], np.int32))])[0].tolist() == [[1.0] * 8]
    with pytest.raises(ShapeError, match="padding_idx 5 is outside"):
        kk.run("embedding", [w, kk.from_numpy(dev, np.array([1], np.int32))], {"padding_idx": 5})
    with pytest.raises(ShapeError, match=r"weight must be \[num_embeddings, dim\]"):
        kk.run("embedding", [kk.from_numpy(dev, np.ones(5, np.float32)), kk.from_numpy(dev, np.zeros(1, np.int32))])


# ------------------------------------------------------------------------------------------------ backward
@pytest.mark.parametrize("gdtype", ["bfloat16", "float32"])
def test_host_backward_accumulates_in_fp32(dev, gdtype):
    rng = np.random.default_rng(1)
    n = 37
    idx = rng.integers(0, n, (4, 150)).astype(np.int32)
    idx[0, :100] = 3  # a hot token: 100+ duplicates
    g = kk.from_numpy(dev, rng.standard_normal((4, 150, 65)).astype(np.float32), gdtype)
    grad = kk.to_numpy(g)
    (got,) = run("embedding_backward", [g, kk.from_numpy(dev, idx)], {"num_weights": n}, provider="host")
    ref = torch_grad(grad, idx, n)
    u = 2.0**-8 if gdtype == "bfloat16" else 2.0**-24
    assert got.shape == (n, 65)
    assert np.all(np.abs(got - ref) <= bound(grad, idx, n, ref, u))
    assert not got[np.setdiff1d(np.arange(n), idx)].any()  # rows no index names stay zero


def test_padding_idx_and_scale_grad_by_freq(dev):
    rng = np.random.default_rng(2)
    n = 9
    idx = rng.integers(0, n, (64,)).astype(np.int32)
    idx[:20] = 8
    g = kk.from_numpy(dev, rng.standard_normal((64, 32)).astype(np.float32), "bfloat16")
    grad = kk.to_numpy(g)
    i = kk.from_numpy(dev, idx)
    for provider in ("ttnn", "host"):
        (got,) = run("embedding_backward", [g, i], {"num_weights": n, "padding_idx": -1}, provider=provider)
        assert not got[8].any() and got[idx[20]].any()
    (got,) = run("embedding_backward", [g, i], {"num_weights": n, "scale_grad_by_freq": True}, provider="host")
    ref = torch_grad(grad, idx, n, scale=True)
    assert np.all(np.abs(got - ref) <= bound(grad, idx, n, ref, 2.0**-8) + 2.0**-23 * np.abs(ref))  # + the 1/count
    (default,) = run("embedding_backward", [g, i], {"num_weights": n, "scale_grad_by_freq": True})
    assert np.array_equal(default, got)  # TT-NN's embedding_bw declares it cannot: the host runs it, as on a card
    with pytest.raises(CommandError, match="KohakuTTUnsupportedOperator: embedding_backward: TT-NN's"):
        run("embedding_backward", [g, i], {"num_weights": n, "scale_grad_by_freq": True}, provider="ttnn")


def _truncate(v: float) -> float:
    """SFPSTORE to a 16-bit DST (ISA ToBF16): flush a denormal to signed zero, keep the top 16 bits."""
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    if not bits & 0x7F800000:
        bits &= 0x80000000
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFF0000))[0]


def _f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def test_ttnn_backward_truncates_every_partial_sum(dev):
    rng = np.random.default_rng(3)
    n, dim = 6, 4
    idx = rng.integers(0, n, 200).astype(np.int32)
    grad = rng.standard_normal((200, dim)).astype(np.float32) * np.float32(0.37)
    g = kk.from_numpy(dev, grad)  # float32: TT-NN's op takes bfloat16, the model rounds first
    (got,) = run("embedding_backward", [g, kk.from_numpy(dev, idx)], {"num_weights": n}, provider="ttnn")
    rows = round_bfloat16(grad)
    expect = [[0.0] * dim for _ in range(n)]
    for k, r in enumerate(idx):  # scalar model: fp32 add, then truncating store, row after row in index order
        for c in range(dim):
            expect[r][c] = _truncate(_f32(expect[r][c] + float(rows[k, c])))
    assert np.array_equal(got, np.array(expect, np.float32))
    on_host = run("embedding_backward", [g, kk.from_numpy(dev, idx)], {"num_weights": n}, provider="host")[0]
    assert not np.array_equal(got, on_host)  # the two numerics differ on this data


def test_long_runs_stall_on_ttnn_and_not_on_host(dev):
    idx = kk.from_numpy(dev, np.zeros(1000, np.int32))
    g = kk.from_numpy(dev, np.ones((1000, 32), np.float32), "bfloat16")
    (tt,) = run("embedding_backward", [g, idx], {"num_weights": 2}, provider="ttnn")
    (hs,) = run("embedding_backward", [g, idx], {"num_weights": 2}, provider="host")
    assert tt[0, 0] == 256.0 and hs[0, 0] == 1000.0  # 256 + 1 truncates back to 256 in a bfloat16 DST
    with kohakutt.numerics(fp32_acc=False):  # the host math modelling a 16-bit DST behaves like TT-NN's
        (hs16,) = run("embedding_backward", [g, idx], {"num_weights": 2}, provider="host")
    assert np.array_equal(hs16, tt)


def test_backward_shape_errors_and_empty(dev):
    g = kk.from_numpy(dev, np.ones((3, 8), np.float32))
    with pytest.raises(ShapeError, match="must be indices' shape"):
        kk.run("embedding_backward", [g, kk.from_numpy(dev, np.zeros(4, np.int32))], {"num_weights": 5})
    kk.run("embedding_backward", [g, kk.from_numpy(dev, np.array([0, 5, 1], np.int32))], {"num_weights": 5})
    with pytest.raises(CommandError, match="index 5 is out of range"):
        dev.synchronize()
    e = kk.from_numpy(dev, np.zeros((0, 8), np.float32))
    (got,) = run("embedding_backward", [e, kk.from_numpy(dev, np.zeros(0, np.int32))], {"num_weights": 4})
    assert got.shape == (4, 8) and not got.any()


def test_estimates():
    w = TensorSpec((32000, 4096), DType.BFLOAT16)
    idx = TensorSpec((8, 512), DType.INT32)
    out = TensorSpec((8, 512, 4096), DType.BFLOAT16)
    t = ke.embedding_cost([w, idx], [out], {}, None, P150A)
    rows_and_out = 2 * 8 * 512 * 4096 * 2
    assert t == pytest.approx(2e3 + (rows_and_out + 16 * 4096) / 500e9 * 1e9)  # 16 int32 index tiles
    b = ke.embedding_backward_cost([out, idx], [TensorSpec((32000, 4096), DType.BFLOAT16)], {}, None, P150A)
    assert b > t  # read-modify-write of output tiles per index tile
