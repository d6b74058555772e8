"""Precision as a scope: ``with kohakutt.numerics(fidelity="HiFi4"):`` applies to every op queued inside it.

Each op records the resolved settings when it is queued (or captured), so a later replay keeps them. Fields left
as ``None`` take the op family's default, which follows TT-NN's default for that family.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import IntEnum

from kohakutt.errors import ConfigError


class Fidelity(IntEnum):
    """How many multiplier passes a matmul or FPU multiply takes (more passes, more product bits)."""

    LoFi = 0
    HiFi2 = 1
    HiFi3 = 2
    HiFi4 = 3

    @classmethod
    def of(cls, value: Fidelity | str | int) -> Fidelity:
        if isinstance(value, str):
            for f in cls:
                if f.name.lower() == value.strip().lower():
                    return f
        elif isinstance(value, int) and 0 <= value <= 3:
            return cls(value)
        raise ConfigError(f"unknown fidelity {value!r}; use 'LoFi', 'HiFi2', 'HiFi3', 'HiFi4' (or 0..3)")


@dataclass(frozen=True)
class Numerics:
    """Settings that change an op's arithmetic on the card. ``None`` means: the family's default."""

    fidelity: Fidelity | None = None
    fp32_acc: bool | None = None  # accumulate in fp32 DST (fp32_dest_acc_en)
    approx: bool | None = None  # SFPU approximate mode (math_approx_mode)

    def over(self, base: Numerics) -> Numerics:
        """These settings, with ``base`` filling the ones left unset."""
        return Numerics(
            self.fidelity if self.fidelity is not None else base.fidelity,
            self.fp32_acc if self.fp32_acc is not None else base.fp32_acc,
            self.approx if self.approx is not None else base.approx,
        )

    def __str__(self) -> str:
        parts = []
        if self.fidelity is not None:
            parts.append(f"fidelity={self.fidelity.name}")
        if self.fp32_acc is not None:
            parts.append(f"fp32_acc={self.fp32_acc}")
        if self.approx is not None:
            parts.append(f"approx={self.approx}")
        return ", ".join(parts)


UNSET = Numerics()
_local = threading.local()


def current() -> Numerics:
    """The settings of the innermost open scope on this thread (all ``None`` outside any scope)."""
    return getattr(_local, "stack", [UNSET])[-1]


@contextmanager
def numerics(fidelity: Fidelity | str | int | None = None, fp32_acc: bool | None = None,
             approx: bool | None = None) -> Iterator[Numerics]:
    """Ops queued inside take these settings; unset fields keep the enclosing scope's (or the op's default)."""
    mine = Numerics(None if fidelity is None else Fidelity.of(fidelity), fp32_acc, approx)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = [UNSET]
    merged = mine.over(stack[-1])
    stack.append(merged)
    try:
        yield merged
    finally:
        stack.pop()


def resolve(family_default: Numerics) -> Numerics:
    """The settings an op of a family with ``family_default`` runs with here and now."""
    return current().over(family_default)


__all__ = ["Fidelity", "Numerics", "current", "numerics", "replace", "resolve"]
