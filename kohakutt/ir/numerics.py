"""Precision as a scope: ``with kohakutt.numerics(fidelity="HiFi4"):`` applies to every op queued inside it.

Each op records the resolved settings when it is queued (or captured), so a later replay keeps them. A field left
as ``None`` by every open scope takes the frontend's setting where the frontend has one (PyTorch's
``torch.set_float32_matmul_precision``, tinygrad's ``ALLOW_TF32``: the ``defaults`` a frontend passes to
``kohakutt.kernels.run``), else the op family's default, which follows TT-NN's default for that family.

Two fields say what float32 data gets (``docs/concepts/numerics.md``, "float32 precision"):

- ``fp32_matmul``: ``"highest"`` (the default: each float32 operand split into three bfloat16-exact parts whose
  products, exact at HiFi4, are summed in an fp32 DST: float32 accuracy), ``"high"`` (one pass on the TF32 operands
  the unpacker makes, at the fidelity) or ``"medium"`` (one pass at HiFi2 unless the scope sets a fidelity: about
  bfloat16 precision). PyTorch's names, with PyTorch's meaning.
- ``fp32_reduce``: ``"exact"`` (the default: float32 sums are float32 adds on the SFPU) or ``"tf32"`` (TT-NN's FPU
  reduce, which reads float32 data as TF32).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from kohakutt.errors import ConfigError
from kohakutt.hal.program import MathFidelity

Fidelity = MathFidelity  # the one fidelity enum (TT-Metal's numbering: LoFi 0, HiFi2 2, HiFi3 3, HiFi4 4)


FP32_MATMUL_MODES = ("highest", "high", "medium")  # torch.set_float32_matmul_precision's names
FP32_REDUCE_MODES = ("exact", "tf32")


def _mode(field: str, value: Any, allowed: tuple[str, ...], what: str) -> str | None:
    if value is None:
        return None
    v = value.strip().lower() if isinstance(value, str) else value
    if v not in allowed:
        raise ConfigError(f"{field}={value!r}: {what}")
    return v


def fp32_matmul_mode(value: Any) -> str | None:
    """``value`` checked as an ``fp32_matmul`` setting (None passes)."""
    return _mode(
        "fp32_matmul",
        value,
        FP32_MATMUL_MODES,
        "use 'highest' (float32-accurate: split operands), 'high' (TF32 operands) or 'medium' (about bf16)",
    )


def fp32_reduce_mode(value: Any) -> str | None:
    """``value`` checked as an ``fp32_reduce`` setting (None passes)."""
    return _mode(
        "fp32_reduce",
        value,
        FP32_REDUCE_MODES,
        "use 'exact' (float32 adds on the SFPU) or 'tf32' (the FPU reduce on TF32 operands)",
    )


@dataclass(frozen=True)
class Numerics:
    """Settings that change an op's arithmetic on the card. ``None`` means: the family's default."""

    fidelity: Fidelity | None = None
    fp32_acc: bool | None = None  # accumulate in fp32 DST (fp32_dest_acc_en)
    approx: bool | None = None  # SFPU approximate mode (math_approx_mode)
    fp32_matmul: str | None = None  # float32 matmul operands: "highest" | "high" | "medium" (None: "highest")
    fp32_reduce: str | None = None  # float32 sums: "exact" | "tf32" (None: "exact")

    def over(self, base: Numerics) -> Numerics:
        """These settings, with ``base`` filling the ones left unset."""
        if base is UNSET:
            return self
        return Numerics(
            self.fidelity if self.fidelity is not None else base.fidelity,
            self.fp32_acc if self.fp32_acc is not None else base.fp32_acc,
            self.approx if self.approx is not None else base.approx,
            self.fp32_matmul if self.fp32_matmul is not None else base.fp32_matmul,
            self.fp32_reduce if self.fp32_reduce is not None else base.fp32_reduce,
        )

    @property
    def matmul_mode(self) -> str:
        """How float32 matmul operands are taken: ``fp32_matmul``, ``"highest"`` when unset."""
        return self.fp32_matmul or "highest"

    @property
    def exact_sums(self) -> bool:
        """Whether float32 sums are exact float32 adds (``fp32_reduce`` "exact", the default when unset)."""
        return self.fp32_reduce != "tf32"

    def __str__(self) -> str:
        parts = []
        if self.fidelity is not None:
            parts.append(f"fidelity={self.fidelity.name}")
        if self.fp32_acc is not None:
            parts.append(f"fp32_acc={self.fp32_acc}")
        if self.approx is not None:
            parts.append(f"approx={self.approx}")
        if self.fp32_matmul is not None:
            parts.append(f"fp32_matmul={self.fp32_matmul}")
        if self.fp32_reduce is not None:
            parts.append(f"fp32_reduce={self.fp32_reduce}")
        return ", ".join(parts)


UNSET: Numerics = Numerics()
_local = threading.local()


def current() -> Numerics:
    """The settings of the innermost open scope on this thread (all ``None`` outside any scope)."""
    return getattr(_local, "stack", [UNSET])[-1]


@contextmanager
def numerics(
    fidelity: Fidelity | str | int | None = None,
    fp32_acc: bool | None = None,
    approx: bool | None = None,
    fp32_matmul: str | None = None,
    fp32_reduce: str | None = None,
) -> Iterator[Numerics]:
    """Ops queued inside take these settings; unset fields keep the enclosing scope's (else the frontend's setting,
    else the op's default). ``fidelity`` / ``fp32_acc`` / ``approx``: the card's compute-kernel settings
    (``fidelity``: a :class:`Fidelity`, a name or TT-Metal's MathFidelity number, 0 LoFi, 2 HiFi2, 3 HiFi3, 4 HiFi4).
    ``fp32_matmul``: ``"highest"`` / ``"high"`` / ``"medium"`` for float32 matmul operands (over PyTorch's
    ``torch.set_float32_matmul_precision`` and tinygrad's ``ALLOW_TF32``); a split (``"highest"``) matmul always runs
    its bf16 parts at HiFi4 into an fp32 DST, so ``fidelity`` / ``fp32_acc`` shape only single-pass matmuls.
    ``fp32_reduce``: ``"exact"`` / ``"tf32"`` for float32 sums."""
    mine = Numerics(
        None if fidelity is None else Fidelity.of(fidelity),
        fp32_acc,
        approx,
        fp32_matmul_mode(fp32_matmul),
        fp32_reduce_mode(fp32_reduce),
    )
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = [UNSET]
    merged = mine.over(stack[-1])
    stack.append(merged)
    try:
        yield merged
    finally:
        stack.pop()


def resolve(family_default: Numerics, defaults: Numerics = UNSET) -> Numerics:
    """The settings an op of a family with ``family_default`` runs with here and now: the open scopes, then the
    frontend's ``defaults``, then the family's."""
    return current().over(defaults).over(family_default)


__all__ = [
    "FP32_MATMUL_MODES",
    "FP32_REDUCE_MODES",
    "Fidelity",
    "Numerics",
    "current",
    "fp32_matmul_mode",
    "fp32_reduce_mode",
    "numerics",
    "replace",
    "resolve",
]
