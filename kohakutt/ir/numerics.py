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
from numbers import Integral
from typing import Any

from kohakutt.errors import ConfigError


class Fidelity(IntEnum):
    """Math fidelity: how many multiplier passes (phases) a matmul or FPU multiply takes (more passes, more product
    bits). The value is ``phases - 1``. The one fidelity enum above the HAL (``kohakutt.kernels.cardmath`` uses it)."""

    LoFi = 0
    HiFi2 = 1
    HiFi3 = 2
    HiFi4 = 3

    @property
    def phases(self) -> int:
        return int(self) + 1

    @classmethod
    def of(cls, value: Any) -> Fidelity:
        """A Fidelity from a member of this or any enum with the same names (TT-NN's ``MathFidelity``, the HAL's), a
        name (``"HiFi2"``, case-insensitive) or this enum's value 0..3. TT-Metal numbers its ``MathFidelity`` 0, 2, 3,
        4: pass those by name, as a bare 2 here means HiFi3."""
        if isinstance(value, cls):
            return value
        name = value if isinstance(value, str) else getattr(value, "name", None)
        if isinstance(name, str):
            for f in cls:
                if f.name.lower() == name.strip().lower():
                    return f
        elif isinstance(value, Integral) and not isinstance(value, bool) and 0 <= value <= 3:
            return cls(int(value))
        raise ConfigError(
            f"unknown fidelity {value!r}: the math fidelity is 'LoFi', 'HiFi2', 'HiFi3' or 'HiFi4' (or 0..3)"
        )


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
