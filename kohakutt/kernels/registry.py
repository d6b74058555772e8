"""One implementation per op per backend, found by lookup, never by if-chains over op names.

An implementation has a provider: ``"ttnn"`` (TT-NN's kernel: on the sim, a model of what TT-NN's kernel computes;
on a card, the TT-NN call) or ``"ktt"`` (Kohaku-TT's own Metalium program). ``KTT_CUSTOM_KERNELS`` says which
provider wins where both exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kohakutt import config
from kohakutt.errors import KohakuTTError
from kohakutt.hal.card import CardSpec
from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.ops import Infer, OpDef, Spec, TensorSpec

PROVIDERS = ("ttnn", "ktt")


@dataclass
class SimCall:
    """What a simulated kernel is given: input values, attributes, numerics and the output specs."""

    op: str
    inputs: list[Any]  # NumPy arrays (float formats as float32 holding stored values) or Python numbers
    in_specs: list[Spec]
    attrs: dict[str, Any]
    numerics: Numerics
    out_specs: list[TensorSpec]
    seed: tuple[int, int] = (0, 0)  # (device seed, offset) for random ops

    def rng(self) -> np.random.Generator:
        """A counter-based generator fixed by the device seed and this op's offset."""
        return np.random.Generator(np.random.Philox(key=self.seed[0], counter=self.seed[1]))


Estimate = Callable[[list[Spec], list[TensorSpec], dict[str, Any], Numerics, CardSpec], float]
# supports(input specs, bound attributes) -> why the implementation cannot run the call, or None when it can
Supports = Callable[[list[Spec], dict[str, Any]], str | None]


@dataclass
class Impl:
    op: str
    backend: str
    provider: str
    fn: Callable[..., Any]
    estimate: Estimate | None = None
    program: Callable[..., Any] | None = None  # the own kernel's hal program builder, where there is one
    random: bool = False  # draws from the device's random stream
    # The program path: launch(inputs, outs, attrs, numerics, stream) queues the op's program through the HAL and
    # returns True, or returns False when the program does not take these operands (kernels.programs.launch).
    launch: Callable[..., bool] | None = None
    supports: Supports | None = None  # what it runs; where it cannot, the runner takes another provider's

    def why_not(self, specs: list[Spec], attrs: dict[str, Any]) -> str | None:
        """Why this implementation cannot run a call with these operands and attributes (None: it can)."""
        return None if self.supports is None else self.supports(specs, attrs)

    def __repr__(self) -> str:
        return f"Impl({self.op}, {self.backend}, {self.provider})"


IMPLS: dict[tuple[str, str, str], Impl] = {}


def register(op: str, backend: str, provider: str = "ttnn", *, estimate: Estimate | None = None,
             program: Callable[..., Any] | None = None, random: bool = False,
             launch: Callable[..., bool] | None = None, supports: Supports | None = None
             ) -> Callable[[Callable], Callable]:  # fmt: skip
    """Decorator: ``fn`` implements IR op ``op`` on ``backend`` for ``provider``; ``supports`` says which calls it can
    run (see :func:`fallback`)."""
    if provider not in PROVIDERS:
        raise KohakuTTError(f"unknown provider {provider!r}; use one of {PROVIDERS}")

    def deco(fn: Callable) -> Callable:
        key = (op, backend, provider)
        if key in IMPLS:
            raise KohakuTTError(f"{op} has two {provider} implementations on {backend}")
        IMPLS[key] = Impl(op, backend, provider, fn, estimate, program, random, launch, supports)
        return fn

    return deco


def sim(op: str, provider: str = "ttnn", **kw: Any) -> Callable[[Callable], Callable]:
    """Decorator for a simulator implementation ``fn(call: SimCall) -> array | list of arrays``."""
    return register(op, "sim", provider, **kw)


def ttnn(op: str, provider: str = "ttnn", **kw: Any) -> Callable[[Callable], Callable]:
    """Decorator for a real-card implementation ``fn(ttnn, inputs, attrs, numerics, out_specs)``."""
    return register(op, "ttnn", provider, **kw)


def lookup(op: str, backend: str, provider: str | None = None) -> Impl | None:
    """The implementation to run ``op`` with on ``backend``: the own kernel when ``KTT_CUSTOM_KERNELS=1`` and one
    exists, else TT-NN's; or exactly ``provider``'s when given."""
    _load()
    if provider is not None:
        return IMPLS.get((op, backend, provider))
    order = ("ktt", "ttnn") if config.get("KTT_CUSTOM_KERNELS") else ("ttnn", "ktt")
    for p in order:
        impl = IMPLS.get((op, backend, p))
        if impl is not None:
            return impl
    return None


def fallback(impl: Impl, specs: list[Spec], attrs: dict[str, Any]) -> Impl:
    """``impl``, or where it declares it cannot run this call, the first other provider's implementation of the op on
    the backend that can (``impl`` itself when none can: running it raises its own typed error)."""
    if impl.why_not(specs, attrs) is None:
        return impl
    for p in PROVIDERS:
        other = IMPLS.get((impl.op, impl.backend, p))
        if other is not None and other is not impl and other.why_not(specs, attrs) is None:
            return other
    return impl


def providers(op: str, backend: str) -> list[str]:
    _load()
    return [p for p in PROVIDERS if (op, backend, p) in IMPLS]


class OpRegistry:
    """What a frontend plugin's ``ktt_register_ops`` hook receives: the op registry, to add IR ops of its own and
    their implementations to (``kohakutt.plugins``)."""

    def define(self, name: str, family: str, inputs: Sequence[str], infer: Infer, **kw: Any) -> OpDef:
        """Define IR op ``name`` (see :func:`kohakutt.ir.ops.define`: ``attrs``, ``numerics``, ``decomposition``,
        ``doc``, ``outputs``)."""
        return irops.define(name, family, inputs, infer, **kw)

    def implement(
        self, op: str, backend: str = "sim", provider: str = "ttnn", **kw: Any
    ) -> Callable[[Callable], Callable]:
        """Decorator: the implementation of ``op`` on ``backend`` for ``provider`` (see :func:`register`; a ``sim``
        implementation takes a :class:`SimCall` and returns the output values)."""
        return register(op, backend, provider, **kw)

    def defined(self, name: str) -> bool:
        """Whether IR op ``name`` exists."""
        return name in irops.all_ops()


_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import kohakutt.kernels.families  # noqa: F401  (each family registers its implementations at import)
        from kohakutt import plugins

        plugins.register_ops(OpRegistry())  # then the frontends' own ops
