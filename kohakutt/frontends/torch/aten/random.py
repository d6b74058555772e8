"""Random numbers on ``tt``: drawn on the card from the chip's random stream (``kohakutt.ir.defs.random``).

The stream is Philox4x32-10 keyed by the chip's seed, and every random op takes the next block of it, so
``torch.manual_seed(s)`` (which reaches ``torch.tt.manual_seed_all``, as it does ``torch.cuda``) or
``torch.tt.manual_seed(s)`` replays the same numbers, and ``torch.tt.get_rng_state`` / ``set_rng_state`` save and
restore a point in it; ``torch.tt.default_generators[i]`` reads and writes chip ``i``'s stream, so passing it as
``generator=`` is the same as passing none. The numbers are not the CPU generator's: tests check distributions and
reproducibility.
A ``torch.Generator(device="tt")`` passed as ``generator=`` is a Philox stream of its own (its seed, and an offset
in blocks that each draw moves on), so its numbers repeat under ``generator.manual_seed(s)`` whatever else draws.

``rand`` / ``randn`` / ``randint`` / ``rand_like`` ... reach these kernels through PyTorch's own decompositions into
``empty`` and an in-place draw. Draws are computed in fp32 and rounded into the output's dtype as stored; integer
draws are made in int32 (the card's integers), so their range must fit int32.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch
from kohakutt.errors import DeviceError, DtypeError
from kohakutt.frontends.torch import tensors
from kohakutt.frontends.torch.aten.core import fill_scalar
from kohakutt.frontends.torch.aten.registry import Args, as_dtype, computed, ir, kernel, scratch
from kohakutt.ir.ops import ShapeError
from kohakutt.kernels import runner

_INT32 = (-(2**31), 2**31 - 1)
_MANTISSA = {torch.float32: 24, torch.bfloat16: 8}  # torch's random_() range for floats: [0, 2^digits]


_generator_lock = threading.Lock()


def _with_generator(impl: Callable[[Args, list[torch.Tensor]], None]) -> Callable[[Args, list[torch.Tensor]], None]:
    """Run a random op's kernel drawing from its ``generator=`` (a ``torch.Generator(device="tt")``), if given."""

    def run(a: Args, outs: list[torch.Tensor]) -> None:
        g = a.get("generator")
        if g is None or any(g is d for d in torch.tt.default_generators):  # a chip's default: its random stream
            return impl(a, outs)
        if g.device.type != "tt":
            raise DeviceError(
                f"expected a generator on tt, got one on {g.device}: make it with torch.Generator(device='tt')"
            )

        def take(blocks: int) -> tuple[int, int]:
            with _generator_lock:  # two threads drawing from one generator get disjoint blocks
                offset = g.get_offset()
                g.set_offset(offset + blocks)
                return g.initial_seed(), offset

        with runner.draws_from(take):
            return impl(a, outs)

    return run


def _float_out(t: torch.Tensor, op: str) -> None:
    if not t.dtype.is_floating_point:
        raise DtypeError(f"{op} draws floats; a {t.dtype} tensor cannot hold them (use random_ for integers)")


def _ir_dtype(t: torch.Tensor) -> str:
    return tensors.check_dtype(t.dtype).value


# ---------------------------------------------------------------------------------------------------- continuous
@computed("uniform_", ir=("uniform", "full"))
@_with_generator
def _uniform(a: Args, outs: list[torch.Tensor]) -> None:
    x, lo, hi = outs[0], float(a["from"]), float(a.to)
    _float_out(x, "uniform_")
    if not lo <= hi:
        raise ShapeError(f"uniform_ expects to return a [from, to) range, but found from={lo} > to={hi}")
    if lo == hi:  # the empty range [from, from): torch gives from
        fill_scalar(x, lo)
        return
    ir("uniform", [], {"shape": tuple(x.shape), "low": lo, "high": hi, "dtype": _ir_dtype(x)}, [x], a._index)


@computed("normal_", ir=("normal",))
@_with_generator
def _normal_(a: Args, outs: list[torch.Tensor]) -> None:
    x = outs[0]
    _float_out(x, "normal_")
    attrs = {"shape": tuple(x.shape), "mean": float(a.mean), "std": float(a.std), "dtype": _ir_dtype(x)}
    ir("normal", [], attrs, [x], a._index)


@computed(
    "normal.Tensor_float", "normal.Tensor_float_out", "normal.float_Tensor", "normal.float_Tensor_out",
    "normal.Tensor_Tensor", "normal.Tensor_Tensor_out", ir=("normal", "mul", "add"),
)  # fmt: skip
@_with_generator
def _normal_tensor(a: Args, outs: list[torch.Tensor]) -> None:
    """mean + std * z with z ~ N(0, 1) drawn in fp32; mean and std broadcast. (A negative element of a std tensor
    is not checked for: that would need a read of the data.)"""
    out, index = outs[0], a._index
    _float_out(out, "normal")
    mean, std = a.mean, a.std
    z = scratch(out.shape, torch.float32, index)
    if not isinstance(std, torch.Tensor):
        ir("normal", [], {"shape": tuple(out.shape), "mean": 0.0, "std": float(std), "dtype": "float32"}, [z], index)
    else:
        ir("normal", [], {"shape": tuple(out.shape), "mean": 0.0, "std": 1.0, "dtype": "float32"}, [z], index)
        ir("mul", [z, as_dtype(std, torch.float32)], None, [z], index)
    ir("add", [z, as_dtype(mean, torch.float32)], None, [out], index)


@computed("exponential_", ir=("uniform", "neg", "log1p", "mul"))
@_with_generator
def _exponential(a: Args, outs: list[torch.Tensor]) -> None:
    """-log(1 - u) / lambd with u uniform on [0, 1) in fp32: finite, >= 0."""
    x, index = outs[0], a._index
    _float_out(x, "exponential_")
    lambd = float(a.lambd)
    if not lambd > 0:
        raise ShapeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    u = scratch(x.shape, torch.float32, index)
    ir("uniform", [], {"shape": tuple(x.shape), "low": 0.0, "high": 1.0, "dtype": "float32"}, [u], index)
    ir("neg", [u], None, [u], index)
    ir("log1p", [u], None, [u], index)
    ir("mul", [u, -1.0 / lambd], None, [x], index)


@computed("log_normal_", ir=("normal", "exp"))
@_with_generator
def _log_normal(a: Args, outs: list[torch.Tensor]) -> None:
    """exp(z) with z ~ N(mean, std) in fp32."""
    x, index = outs[0], a._index
    _float_out(x, "log_normal_")
    if not float(a.std) > 0:
        raise ShapeError(f"log_normal_ expects std > 0.0, but found std={a.std}")
    z = scratch(x.shape, torch.float32, index)
    ir("normal", [], {"shape": tuple(x.shape), "mean": float(a.mean), "std": float(a.std)}, [z], index)
    ir("exp", [z], None, [x], index)


@computed("cauchy_", ir=("uniform", "tan", "mul", "add"))
@_with_generator
def _cauchy(a: Args, outs: list[torch.Tensor]) -> None:
    """median + sigma * tan(pi * (u - 1/2)) with u uniform on [0, 1) in fp32."""
    x, index = outs[0], a._index
    _float_out(x, "cauchy_")
    if not float(a.sigma) > 0:
        raise ShapeError(f"cauchy_ expects sigma > 0.0, but found sigma={a.sigma}")
    u = scratch(x.shape, torch.float32, index)
    half_pi = float(torch.pi / 2)
    ir("uniform", [], {"shape": tuple(x.shape), "low": -half_pi, "high": half_pi, "dtype": "float32"}, [u], index)
    ir("tan", [u], None, [u], index)
    ir("mul", [u, float(a.sigma)], None, [u], index)
    ir("add", [u, float(a.median)], None, [x], index)


@computed("geometric_", ir=("uniform", "log", "mul", "ceil"))
@_with_generator
def _geometric(a: Args, outs: list[torch.Tensor]) -> None:
    """ceil(ln(u) / ln(1 - p)) with u uniform on [2^-24, 1) in fp32: the number of Bernoulli(p) trials up to the
    first success (>= 1)."""
    x, index, p = outs[0], a._index, float(a.p)
    if not 0 < p < 1:
        raise ShapeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = scratch(x.shape, torch.float32, index)
    ir("uniform", [], {"shape": tuple(x.shape), "low": 2.0**-24, "high": 1.0, "dtype": "float32"}, [u], index)
    ir("log", [u], None, [u], index)
    ir("mul", [u, 1.0 / math.log1p(-p)], None, [u], index)
    ir("ceil", [u], None, [x], index)


# ---------------------------------------------------------------------------------------------------- discrete
def _bernoulli_into(x: torch.Tensor, probs: Any, out: torch.Tensor, index: int) -> None:
    """out = 1 with probability ``probs`` (a number, or a float tensor broadcast to out), else 0."""
    if isinstance(probs, torch.Tensor) and probs.device.type == "cpu" and probs.dim() == 0:
        probs = probs.item()
    if isinstance(probs, torch.Tensor):
        if not probs.dtype.is_floating_point:
            probs = probs.to(torch.float32)
        ir("bernoulli", [probs.expand(out.shape)], {"p": None, "dtype": _ir_dtype(out)}, [out], index)
    else:
        ir("bernoulli", [x], {"p": float(probs), "dtype": _ir_dtype(out)}, [out], index)


@computed("bernoulli_.float", "bernoulli.p", ir=("bernoulli",))
@_with_generator
def _bernoulli_p(a: Args, outs: list[torch.Tensor]) -> None:
    _bernoulli_into(a.self, a.p, outs[0], a._index)


@computed("bernoulli_.Tensor", ir=("bernoulli",))
@_with_generator
def _bernoulli_tensor(a: Args, outs: list[torch.Tensor]) -> None:
    _bernoulli_into(a.self, a.p, outs[0], a._index)


@computed("bernoulli.out", ir=("bernoulli",))
@_with_generator
def _bernoulli_out(a: Args, outs: list[torch.Tensor]) -> None:
    _bernoulli_into(a.self, a.self, outs[0], a._index)


def _top(dtype: torch.dtype) -> int:
    """torch's exclusive upper bound of ``random_()`` for ``dtype``."""
    if dtype in _MANTISSA:
        return 2 ** _MANTISSA[dtype] + 1
    if dtype == torch.bool:
        return 2
    return torch.iinfo(dtype).max + 1


@computed("random_", "random_.from", "random_.to", ir=("randint", "copy"))
@_with_generator
def _random(a: Args, outs: list[torch.Tensor]) -> None:
    """Integers uniform on [from, to) (torch's defaults: to = 2^mantissa + 1 for floats, the dtype's max + 1 for
    integers), drawn as int32 on the card and stored in the output's dtype."""
    x = outs[0]
    lo = int(a.get("from") or 0)
    hi = a.get("to")
    hi = _top(x.dtype) if hi is None else int(hi)
    if not lo < hi:
        raise ShapeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi}")
    if lo < _INT32[0] or hi - 1 > _INT32[1]:
        raise DtypeError(
            f"random_: the range [{lo}, {hi}) does not fit int32, the card's integers; pass from / to within "
            f"[{_INT32[0]}, {_INT32[1] + 1}) (for an int64 tensor's default range, random_(0, 2**31) is the largest)"
        )
    draws = x if x.dtype == torch.int32 else scratch(x.shape, torch.int32, a._index)
    ir("randint", [], {"shape": tuple(x.shape), "low": lo, "high": hi, "dtype": "int32"}, [draws], a._index)
    if draws is not x:
        x.copy_(draws)


@computed("randperm.generator_out", ir=("randperm",))
@_with_generator
def _randperm(a: Args, outs: list[torch.Tensor]) -> None:
    out, n = outs[0], int(a.n)
    if out.dtype in _MANTISSA and n > 2 ** _MANTISSA[out.dtype]:
        raise ShapeError(f"randperm: n={n} exceeds the {out.dtype} range of exactly held integers")
    ir("randperm", [], {"n": n, "dtype": "int32"}, outs, a._index)


@computed("multinomial", "multinomial.out", ir=("multinomial",))
@_with_generator
def _multinomial(a: Args, outs: list[torch.Tensor]) -> None:
    """Category indices drawn by weight (rows of a 1-D / 2-D float tensor). The data checks PyTorch makes on the
    CPU (non-negative, finite weights with a positive sum) would need a read of the weights and are not made."""
    if int(a.num_samples) <= 0:
        raise ShapeError(f"multinomial: cannot sample n_sample <= 0 samples (got {a.num_samples})")
    attrs = {"num_samples": int(a.num_samples), "replacement": bool(a.replacement)}
    ir("multinomial", [a.self], attrs, outs, a._index)


# ---------------------------------------------------------------------------------------------------- dropout
@computed("native_dropout", "native_dropout.out", ir=("dropout",))
def _native_dropout(a: Args, outs: list[torch.Tensor]) -> None:
    """(input * mask / (1 - p), mask) with mask ~ Bernoulli(1 - p) (train); (input, all True) otherwise."""
    if not 0.0 <= float(a.p) <= 1.0:
        raise ShapeError(f"dropout probability has to be between 0 and 1, but got {a.p}")
    ir("dropout", [a.input], {"p": float(a.p), "train": a.train is not False}, outs, a._index)


@computed("native_dropout_backward", "native_dropout_backward.out", ir=("mul",))
def _native_dropout_backward(a: Args, outs: list[torch.Tensor]) -> None:
    """grad_output * mask * scale in fp32 (PyTorch's opmath for bfloat16 too), rounded once into the output's dtype;
    a NaN gradient stays NaN where dropped, as in PyTorch."""
    out, index = outs[0], a._index
    kept = scratch(out.shape, torch.float32, index)
    ir("mul", [as_dtype(a.grad_output, torch.float32), as_dtype(a.mask, torch.float32)], None, [kept], index)
    ir("mul", [kept, float(a.scale)], None, [out], index)


# ---------------------------------------------------------------------------------------------------------- rrelu
def _rrelu(x: torch.Tensor, noise: torch.Tensor, lower: Any, upper: Any, training: bool, generator: Any,
           out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Training: each x <= 0 is multiplied by a slope drawn from U(lower, upper) on the card, which ``noise`` keeps
    (1 for x > 0), as the CPU does; eval: leaky ReLU with slope (lower + upper) / 2, ``noise`` untouched."""
    if not training:
        return out.copy_(torch.nn.functional.leaky_relu(x, (float(lower) + float(upper)) / 2))
    if noise.shape != x.shape:
        noise.resize_(x.shape)
    slope = torch.empty_like(x, memory_format=torch.contiguous_format).uniform_(
        float(lower), float(upper), generator=generator
    )
    negative = x <= 0
    result = torch.where(negative, x * slope, x)
    noise.copy_(torch.where(negative, slope, 1))
    return out.copy_(result)


_RRELU_IR = ("uniform", "le", "mul", "where", "leaky_relu", "copy")


@kernel("rrelu_with_noise", ir=_RRELU_IR, kind="composite")
def rrelu_with_noise(self: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125, upper: Any = 1.0 / 3,
                     training: bool = False, generator: Any = None) -> torch.Tensor:  # fmt: skip
    return _rrelu(self, noise, lower, upper, training, generator, torch.empty_like(self))


@kernel("rrelu_with_noise.out", ir=_RRELU_IR, kind="composite")
def rrelu_with_noise_out(self: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125, upper: Any = 1.0 / 3,
                         training: bool = False, generator: Any = None, *,
                         out: torch.Tensor) -> torch.Tensor:  # fmt: skip
    if out.shape != self.shape:
        out.resize_(self.shape)
    return _rrelu(self, noise, lower, upper, training, generator, out)


@kernel("rrelu_with_noise_", ir=_RRELU_IR, kind="composite")
def rrelu_with_noise_(self: torch.Tensor, noise: torch.Tensor, lower: Any = 0.125, upper: Any = 1.0 / 3,
                      training: bool = False, generator: Any = None) -> torch.Tensor:  # fmt: skip
    return _rrelu(self, noise, lower, upper, training, generator, self)
