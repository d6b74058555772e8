"""One implementation per op per backend, found by lookup, never by if-chains over op names.

An implementation has a provider: ``"ttnn"`` (TT-NN's kernel: on the sim, a model of what TT-NN's kernel computes;
on a card, the TT-NN call), ``"ktt"`` (Kohaku-TT's own Metalium program, which a card launches through
``ttnn.generic_op`` and the sim runs or models bit for bit) or ``"host"`` (the host CPU computes the op between a
read and a write of its buffers: counted, see :func:`host_runs`).

Which provider runs an op is decided once, by what the card has (:func:`choose`): the own program where the card
can launch one and ``KTT_CUSTOM_KERNELS`` is on, else TT-NN's kernel, else the host. The simulator takes the same
provider, so it computes what a card would; an implementation whose ``supports`` refuses a call passes it to the
next provider that takes it, in the same order on every backend (:func:`fallback`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kohakutt import config
from kohakutt.errors import KohakuTTError
from kohakutt.hal.card import CardSpec
from kohakutt.ir import ops as irops
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import UNSET, Numerics
from kohakutt.ir.ops import Infer, OpDef, Spec, TensorSpec

PROVIDERS = ("ttnn", "ktt", "host")
CARD = "ttnn"  # the backend whose implementations decide the provider of an op on every backend


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
# supports(input specs, bound attributes, resolved numerics) -> why the implementation cannot run the call, or None
Supports = Callable[[list[Spec], dict[str, Any], Numerics], str | None]


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

    def why_not(self, specs: list[Spec], attrs: dict[str, Any], num: Numerics = UNSET) -> str | None:
        """Why this implementation cannot run a call with these operands, attributes and numerics (None: it can)."""
        return None if self.supports is None else self.supports(specs, attrs, num)

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


def order() -> tuple[str, ...]:
    """Providers in the order they are preferred: the own program first unless ``KTT_CUSTOM_KERNELS=0``; the host
    last."""
    return ("ktt", "ttnn", "host") if config.get("KTT_CUSTOM_KERNELS") else ("ttnn", "ktt", "host")


def choose(op: str, backend: str = CARD) -> str | None:
    """The provider that runs ``op``: the first, in :func:`order`, that the card implements (one decision for every
    backend); for an op the card has no implementation of at all, the first that ``backend`` has (None: no
    implementation)."""
    _load()
    for where in (CARD, backend):
        for p in order():
            if (op, where, p) in IMPLS:
                return p
    return None


_host_lock = threading.Lock()
_host_runs: Counter[str] = Counter()


def host(op: str, **kw: Any) -> Callable[[Callable], Callable]:
    """Decorator: ``fn(call: SimCall)`` computes ``op`` on the host CPU, for every backend (provider ``"host"``). The
    sim calls it on its buffers' values; a card reads the operands to the host, calls it and writes the results back
    (:func:`kohakutt.kernels.ttnn_io.host_on_card`). Each run is counted (:func:`host_runs`)."""

    def deco(fn: Callable) -> Callable:
        def counted(call: SimCall) -> Any:
            with _host_lock:
                _host_runs[op] += 1
            return fn(call)

        from kohakutt.kernels.ttnn_io import host_on_card

        register(op, "sim", "host", **kw)(counted)
        register(op, CARD, "host", **kw)(host_on_card(counted, op))
        return fn

    return deco


def host_runs(reset: bool = False) -> dict[str, int]:
    """How many times each op has run on the host CPU (provider ``"host"``) in this process; ``reset`` zeroes the
    counts after reading them."""
    with _host_lock:
        counts = dict(_host_runs)
        if reset:
            _host_runs.clear()
    return counts


def lookup(op: str, backend: str, provider: str | None = None) -> Impl | None:
    """The implementation to run ``op`` with on ``backend``: the :func:`choose`-n provider's (where ``backend`` lacks
    it, its own first in :func:`order`: the parity test keeps the built-in ops off that path), or exactly
    ``provider``'s when given."""
    _load()
    if provider is not None:
        return IMPLS.get((op, backend, provider))
    p = choose(op, backend)
    impl = None if p is None else IMPLS.get((op, backend, p))
    if impl is None:  # a backend without the card's choice (a plugin's sim-only op): its own first, in order
        impl = next((IMPLS[k] for k in ((op, backend, q) for q in order()) if k in IMPLS), None)
    return impl


def fallback(impl: Impl, specs: list[Spec], attrs: dict[str, Any], num: Numerics = UNSET) -> Impl:
    """``impl``, or where it declares it cannot run this call, the next provider's implementation of the op on the
    backend that can, in :func:`order`, among the providers the card has (``impl`` itself when none can: running it
    raises its own typed error)."""
    if impl.why_not(specs, attrs, num) is None:
        return impl
    on_card = providers(impl.op, CARD)
    for p in order():
        other = IMPLS.get((impl.op, impl.backend, p))
        if other is None or other is impl or (on_card and p not in on_card):
            continue
        if other.why_not(specs, attrs, num) is None:
            return other
    return impl


def declare(ops: Sequence[str], supports: Supports, provider: str = "ttnn") -> None:
    """Give ``provider``'s implementations of ``ops`` on every backend the same ``supports`` (so the simulator and a
    card pass the same calls on)."""
    for op in ops:
        found = [impl for (o, _, p), impl in IMPLS.items() if o == op and p == provider]
        if not found:
            raise KohakuTTError(f"{op} has no {provider} implementation to declare what it supports")
        for impl in found:
            impl.supports = supports


def unscaled_squares(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    """``supports`` of a TT-NN statistics kernel (variance, norms): it squares the values unscaled, so a group whose
    values pass about 2^60 comes out inf, 0 or NaN where the result is finite; every call runs on the next provider,
    which scales such a group by a power of two first. (A TT-NN chain that scales on the card would lift this.)"""
    return ("TT-NN's kernel squares the values unscaled (a group past 2^60 would come out inf, 0 or NaN); "
            "the host scales them first")  # fmt: skip


def float32_exact(specs: list[Spec], attrs: dict[str, Any], num: Numerics) -> str | None:
    """``supports`` of a TT-NN kernel that sums on the FPU: float32 data under ``fp32_reduce="exact"`` (the default)
    asks for float32 adds, and the FPU reads float32 as TF32, so such a call runs on the next provider."""
    wide = (DType.FLOAT32, DType.FLOAT16)  # float16 ops compute in float32 (kernels.runner)
    to = attrs.get("dtype")
    if num.exact_sums and (any(isinstance(s, TensorSpec) and s.dtype in wide for s in specs)
                           or (to is not None and DType.of(to) in wide)):  # fmt: skip
        return "TT-NN's kernel sums float32 data as TF32 on the FPU; fp32_reduce='exact' asks for float32 adds"
    return None


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
