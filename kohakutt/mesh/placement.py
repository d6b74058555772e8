"""Placements: how a tensor's values are spread over the chips of a mesh.

``Replicate()``: every chip holds all of it. ``Sharded(dim, sizes)``: chip ``c`` holds ``sizes[c]`` consecutive
indices of ``dim`` (the first chip the first ones; uneven sizes are fine). ``Partial()``: every chip holds a tensor
of the full shape and the value is their sum. The same classes describe a storage (``dim`` a physical dim) and a
tensor view (``dim`` one of the view's dims).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kohakutt.errors import KohakuTTError


class PlacementError(KohakuTTError, ValueError):
    """A placement that does not fit its tensor, or a placement string that does not parse."""


class Placement:
    """A tensor's placement on a mesh."""

    __slots__ = ()

    @property
    def sharded(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Replicate(Placement):
    def __str__(self) -> str:
        return "Replicate"


@dataclass(frozen=True, slots=True)
class Partial(Placement):
    op: str = "sum"

    def __str__(self) -> str:
        return f"Partial({self.op})"


@dataclass(frozen=True, slots=True)
class Sharded(Placement):
    dim: int
    sizes: tuple[int, ...] = ()  # per chip; empty: not bound to a shape yet (a mark)

    @property
    def sharded(self) -> bool:
        return True

    @property
    def starts(self) -> tuple[int, ...]:
        out, acc = [], 0
        for s in self.sizes:
            out.append(acc)
            acc += s
        return tuple(out)

    @property
    def even(self) -> bool:
        return self.sizes == split(sum(self.sizes), len(self.sizes))

    def __str__(self) -> str:
        if not self.sizes or self.even:
            return f"Sharded(dim={self.dim})"
        return f"Sharded(dim={self.dim}, sizes={self.sizes})"


@dataclass(frozen=True, slots=True)
class Unplaced(Placement):
    """A tensor whose storage was never written: it takes a placement when it is."""

    def __str__(self) -> str:
        return "Unplaced"


@dataclass(frozen=True, slots=True)
class Unaligned(Placement):
    """A view that does not keep its storage's sharding (``storage`` says how the storage is placed): ops gather it
    when they read it."""

    storage: Placement

    def __str__(self) -> str:
        return f"Unaligned(storage {self.storage}: gathered when read)"


def split(n: int, chips: int) -> tuple[int, ...]:
    """``n`` indices over ``chips`` chips as ``torch.chunk`` would: the first chips take ceil(n / chips)."""
    step = -(-n // chips) if chips else 0
    out, left = [], n
    for _ in range(chips):
        take = min(step, left)
        out.append(take)
        left -= take
    return tuple(out)


_SHARD = re.compile(r"^\s*(?:s|shard|sharded)\s*\(\s*(?:dim\s*=\s*)?(-?\d+)\s*\)\s*$", re.I)


def parse(p: Placement | str | None) -> Placement | None:
    """``"R"`` / ``"Replicate"``, ``"S(1)"`` / ``"Sharded(dim=1)"``, ``"P"`` / ``"Partial"``, or a placement."""
    if p is None or isinstance(p, Placement):
        return p
    if not isinstance(p, str):
        raise PlacementError(f"a placement is 'R', 'S(dim)' or a Placement object, got {p!r}")
    s = p.strip().lower()
    if s in ("r", "replicate", "replicated", "replicate()"):
        return Replicate()
    if s in ("p", "partial", "partial(sum)", "partial()"):
        return Partial()
    m = _SHARD.match(p)
    if m:
        return Sharded(int(m.group(1)))
    raise PlacementError(f"cannot read placement {p!r}: write 'R' (replicated), 'S(d)' (sharded on dim d) or 'Partial'")


def bind(p: Placement, shape: tuple[int, ...], chips: int) -> Placement:
    """``p`` for a tensor of ``shape``: a ``Sharded`` mark gets its dim normalized and even sizes. A dim of size 1
    (or a 0-d tensor) cannot be split: that is an error, as is a dim out of range."""
    if not isinstance(p, Sharded):
        return p
    nd = len(shape)
    if not -nd <= p.dim < nd or nd == 0:
        raise PlacementError(f"Sharded(dim={p.dim}) does not fit a tensor of shape {tuple(shape)}")
    d = p.dim % nd
    if p.sizes:
        if len(p.sizes) != chips or sum(p.sizes) != shape[d]:
            raise PlacementError(f"{p!r} does not split dim {d} of size {shape[d]} over {chips} chips")
        return Sharded(d, p.sizes)
    return Sharded(d, split(shape[d], chips))
