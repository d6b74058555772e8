"""``kohakutt.mesh.layout``: every view of a sharded storage maps to the right elements on each chip, checked
element by element against NumPy on random views (slices, transposes, reshapes, expands, as_strided)."""

from __future__ import annotations

import numpy as np
import pytest

from kohakutt.mesh import layout


def _chips(glob: np.ndarray, p: int, sizes: tuple[int, ...]) -> list[np.ndarray]:
    out, start = [], 0
    for s in sizes:
        out.append(np.ascontiguousarray(np.take(glob, range(start, start + s), axis=p)).ravel())
        start += s
    return out


def _view(flat: np.ndarray, shape, strides, offset) -> np.ndarray:
    if 0 in shape:
        return np.zeros(shape, flat.dtype)
    return np.lib.stride_tricks.as_strided(flat[offset:], shape, [s * flat.itemsize for s in strides])


def check(p_shape, p, sizes, shape, strides, offset, expect_dim=None):
    glob = np.arange(int(np.prod(p_shape)), dtype=np.int64).reshape(p_shape)
    want = _view(glob.ravel(), shape, strides, offset)
    got = layout.localize(shape, strides, offset, p_shape, p, sizes)
    if got is None:
        return None
    j, per = got
    chips = _chips(glob, p, sizes)
    pieces = [_view(chips[c], *per[c]) for c in range(len(sizes))]
    np.testing.assert_array_equal(np.concatenate(pieces, axis=j), want)
    if expect_dim is not None:
        assert j == expect_dim
    return j, tuple(v[0][j] for v in per)


def test_whole_and_transposed():
    assert check((8, 6), 0, (4, 4), (8, 6), (6, 1), 0, 0) == (0, (4, 4))
    assert check((8, 6), 1, (3, 3), (8, 6), (6, 1), 0, 1) == (1, (3, 3))
    assert check((8, 6), 1, (3, 3), (6, 8), (1, 6), 0, 0) == (0, (3, 3))  # .t()
    assert check((5, 7), 0, (3, 2), (7, 5), (1, 7), 0, 1) == (1, (3, 2))  # uneven


def test_slices_of_the_sharded_dim_are_sharded_unevenly():
    assert check((8, 6), 1, (3, 3), (8, 4), (6, 1), 1, 1) == (1, (2, 2))
    assert check((8, 6), 1, (3, 3), (8, 2), (6, 1), 4, 1) == (1, (0, 2))  # all on chip 1
    assert check((8, 6), 0, (4, 4), (3, 6), (12, 1), 0, 0) == (0, (2, 1))  # step 2


def test_head_split_and_flatten():
    # (B, S, D) sharded on B, flattened to (B*S, D): chip c holds a range of rows
    assert check((4, 3, 5), 0, (2, 2), (12, 5), (5, 1), 0, 0) == (0, (6, 6))
    # (S, H*hd) sharded on the feature dim, split into heads: sharded on the head dim
    assert check((3, 8), 1, (4, 4), (3, 4, 2), (8, 2, 1), 0, 1) == (1, (2, 2))
    # a head split that cuts a head in two cannot keep the sharding
    assert check((3, 8), 1, (3, 5), (3, 4, 2), (8, 2, 1), 0) is None


def test_views_that_cannot_keep_the_sharding():
    assert check((8, 6), 1, (3, 3), (48,), (1,), 0) is None  # flatten with the sharded dim inner
    assert check((8, 6), 1, (3, 3), (8,), (6,), 1) is None  # a column: one chip
    assert check((6, 6), 0, (3, 3), (6,), (7,), 0) is None  # diagonal


def test_expand_and_unsqueeze():
    assert check((8, 6), 0, (4, 4), (8, 3, 6), (6, 0, 1), 0, 0) == (0, (4, 4))
    assert check((8, 6), 1, (3, 3), (1, 8, 6), (48, 6, 1), 0, 2) == (2, (3, 3))


@pytest.mark.parametrize("seed", range(600))
def test_random_views_match_numpy(seed):
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(1, 4))
    p_shape = tuple(int(x) for x in rng.integers(1, 7, nd))
    p = int(rng.integers(0, nd))
    k0 = int(rng.integers(0, p_shape[p] + 1))
    sizes = (k0, p_shape[p] - k0)
    glob = np.arange(int(np.prod(p_shape))).reshape(p_shape)
    v = glob
    for _ in range(int(rng.integers(1, 4))):  # a random chain of view ops
        op = rng.integers(0, 5)
        if op == 0 and v.ndim >= 2:
            v = np.swapaxes(v, *rng.choice(v.ndim, 2, replace=False))
        elif op == 1 and v.ndim:
            d = int(rng.integers(0, v.ndim))
            a = int(rng.integers(0, v.shape[d] + 1))
            b = int(rng.integers(a, v.shape[d] + 1))
            step = int(rng.integers(1, 3))
            v = v[(slice(None),) * d + (slice(a, b, step),)]
        elif op == 2 and v.ndim >= 2 and v.flags.c_contiguous and v.size:
            v = v.reshape(-1, v.shape[-1])
        elif op == 3:
            v = np.expand_dims(v, int(rng.integers(0, v.ndim + 1)))
        elif op == 4 and v.ndim and v.shape[-1] % 2 == 0 and v.shape[-1]:
            v = v.reshape(*v.shape[:-1], 2, v.shape[-1] // 2)
    if v.size == 0 or not np.shares_memory(v, glob):
        return
    item = glob.itemsize
    offset = (v.__array_interface__["data"][0] - glob.__array_interface__["data"][0]) // item
    strides = tuple(s // item for s in v.strides)
    check(p_shape, p, sizes, v.shape, strides, offset)
