"""Where the elements of a view of a sharded storage live: the arithmetic behind ``MeshStorage.localize``.

A storage's bytes are laid out as a dense tensor of *physical* shape ``P`` (row-major). Sharded on physical dim
``p`` with ``sizes``, chip ``c`` holds the elements whose ``p`` coordinate is in ``[start_c, start_c + sizes[c])``,
as a dense tensor of shape ``P`` with ``P[p] = sizes[c]``. A view (sizes ``n``, strides ``s``, offset ``o``, in
elements) keeps the sharding when, after splitting each view dim into the physical dims it runs over, exactly one
split dim moves the ``p`` coordinate across the chips' boundary, it is the outermost part of its view dim, and every
other split dim stays inside one chip's block. Then each chip's part of the view is itself a strided view of that
chip's buffer, and the view is ``Sharded`` on the view dim holding that split dim.
"""

from __future__ import annotations

from collections.abc import Sequence


def contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


_physicals: dict[tuple, tuple[int, ...] | None] = {}


def physical(sizes: Sequence[int], strides: Sequence[int], nbytes: int, itemsize: int) -> tuple[int, ...] | None:
    """The physical shape of a storage of ``nbytes`` made for a tensor of ``sizes`` and ``strides``: its dims in
    memory order, when the tensor covers the storage densely (any permutation of a contiguous layout); else None."""
    key = (tuple(sizes), tuple(strides), nbytes, itemsize)
    got = _physicals.get(key, False)
    if got is False:
        if len(_physicals) >= 4096:
            _physicals.clear()
        got = _physicals[key] = _physical(sizes, strides, nbytes, itemsize)
    return got  # type: ignore[return-value]


def _physical(sizes: Sequence[int], strides: Sequence[int], nbytes: int, itemsize: int) -> tuple[int, ...] | None:
    dims = sorted(((st, n) for n, st in zip(sizes, strides) if n != 1), key=lambda d: -d[0])
    acc = 1
    for st, n in reversed(dims):
        if st != acc:
            return None
        acc *= n
    if acc * itemsize != nbytes:
        return None
    return tuple(n for _, n in dims)


def split_view(
    shape: Sequence[int], strides: Sequence[int], offset: int, p_shape: Sequence[int]
) -> list[tuple[int, int, int]] | None:
    """The view as (view dim, size, stride) parts, each moving within one physical dim (outer parts first within a
    view dim), or None when a view dim runs over physical dims in a way that does not split (a stride that is no
    multiple of a physical stride and carries)."""
    B = contiguous(p_shape)
    parts: list[tuple[int, int, int]] = []
    for j, (n, s) in enumerate(zip(shape, strides)):
        if n == 1 or s == 0:
            continue
        sub: list[tuple[int, int, int]] = []
        while True:
            q = next((i for i in range(len(B)) if B[i] <= s < B[i] * p_shape[i]), None)
            if q is None:  # a stride past the whole storage
                return None
            if s % B[q]:
                return None
            m = s // B[q]
            coord = (offset // B[q]) % p_shape[q]
            if coord + (n - 1) * m < p_shape[q]:
                sub.append((j, n, s))
                break
            # the dim carries past physical dim q: split it at q's radix (only whole runs of q split cleanly)
            if m != 1 or coord != 0 or n % p_shape[q] or q == 0:
                return None
            sub.append((j, p_shape[q], s))  # inner part first, reversed below
            n, s = n // p_shape[q], s * p_shape[q]
        parts.extend(reversed(sub))
    return parts


Located = tuple[int, tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]]
_located: dict[tuple, Located | None] = {}


def localize(
    shape: Sequence[int], strides: Sequence[int], offset: int, p_shape: Sequence[int], p: int, sizes: Sequence[int]
) -> Located | None:
    """Where a view of a storage sharded on physical dim ``p`` with ``sizes`` lives: (the view dim that is sharded,
    per chip (local shape, local strides, local offset)), or None when the view does not keep the sharding.
    Cached: a training step's tensors repeat a few layouts."""
    key = (tuple(shape), tuple(strides), offset, tuple(p_shape), p, tuple(sizes))
    got = _located.get(key, False)
    if got is not False:
        return got  # type: ignore[return-value]
    got = _localize(shape, strides, offset, p_shape, p, sizes)
    if len(_located) >= 4096:
        _located.clear()
    _located[key] = got
    return got


def _localize(
    shape: Sequence[int], strides: Sequence[int], offset: int, p_shape: Sequence[int], p: int, sizes: Sequence[int]
) -> Located | None:
    parts = split_view(shape, strides, offset, p_shape)
    if parts is None:
        return None
    B = contiguous(p_shape)
    Bp, Pp = B[p], p_shape[p]
    block = Bp * Pp
    starts = [0]
    for s in sizes[:-1]:
        starts.append(starts[-1] + s)
    o_outer, rem = divmod(offset, block)
    o_p, o_in = divmod(rem, Bp)
    touching, inner_span = [], o_in
    for k, (_j, n, s) in enumerate(parts):
        if s >= block:
            if s % block:
                return None
        elif s >= Bp:
            touching.append(k)
        else:
            inner_span += (n - 1) * s
    if inner_span >= Bp or not touching:
        return None  # a view inside one p coordinate lives on one chip: not sharded
    star = max(touching, key=lambda k: parts[k][2])
    m_star = parts[star][2] // Bp
    span = sum((parts[k][1] - 1) * (parts[k][2] // Bp) for k in touching if k != star)
    j_star, n_star = parts[star][0], parts[star][1]
    # the split dim must be its view dim's outermost part, so a chip's share of that view dim is one range
    if next(k for k, pt in enumerate(parts) if pt[0] == j_star) != star:
        return None
    ends = [st + sz for st, sz in zip(starts, sizes)]
    below = [0]  # how many t have their block start below each chip's end
    for e in ends:
        k = min(max(-(-(e - o_p) // m_star), 0), n_star)
        if k and o_p + (k - 1) * m_star + span >= e:
            return None  # the block of t = k - 1 straddles the boundary
        below.append(k)
    if below[-1] != n_star:
        return None
    counts = [below[c + 1] - below[c] for c in range(len(sizes))]
    out = []
    first = 0
    for c, kc in enumerate(sizes):
        t0 = first
        first += counts[c]
        o_pc = o_p + t0 * m_star - starts[c] if counts[c] else 0
        loc_off = o_outer * (Bp * kc) + max(o_pc, 0) * Bp + o_in
        lparts = []
        for k, (j, n, s) in enumerate(parts):
            ls = s // block * (Bp * kc) if s >= block else s
            lparts.append((j, counts[c] if k == star else n, ls))
        shp, st = _merge(shape, lparts)
        if shp is None:
            return None
        out.append((shp, st, loc_off if counts[c] else 0))
    return j_star, tuple(out)


def _merge(shape: Sequence[int], parts: list[tuple[int, int, int]]) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    """Local (shape, strides) of the view from its split parts (outer first within a view dim): each view dim's
    parts must merge (outer stride = inner stride x inner size), else (None, ())."""
    shp = [1 if n == 1 else n for n in shape]
    st = [0] * len(shape)
    by_dim: dict[int, list[tuple[int, int]]] = {}
    for j, n, s in parts:
        by_dim.setdefault(j, []).append((n, s))
    for j in range(len(shape)):
        ps = by_dim.get(j)
        if not ps:  # size 1, or broadcast (stride 0)
            shp[j], st[j] = shape[j], 0 if shape[j] != 1 else 1
            continue
        size, stride = ps[-1]
        for n, s in reversed(ps[:-1]):
            if size == 0 or n == 0:
                size, stride = 0, stride
                continue
            if s != stride * size and n > 1:
                return None, ()
            size *= n
        shp[j], st[j] = size, stride
    return tuple(shp), tuple(st)
