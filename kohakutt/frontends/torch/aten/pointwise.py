"""Element-wise aten ops: unary, binary, ternary, comparisons, activations and their backward.

Each aten op maps to one IR op. Inputs are cast on the device to the dtype PyTorch computes in (its type promotion:
``torch.result_type``), and the result is stored in the output's dtype as the card's packer does. The functional,
``.out`` and in-place overloads share one implementation.

Some are short compositions of IR ops where PyTorch's meaning differs from the IR op's or no single IR op exists:
arithmetic on two bools is logic; ``sign`` / ``sgn`` and ``heaviside`` give 0 for NaN (the IR ops keep NaN);
``isposinf`` / ``isneginf``, PReLU, log-sigmoid's forward / backward pair, GLU, hard / soft shrink, logit, sinc,
entr, xlog1py, angle of real numbers, and the Bessel function I0 (power series / asymptotic expansion in fp32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from kohakutt.frontends.torch.aten.registry import Args, computed, ir, release

aten = torch.ops.aten


def _float(dt: torch.dtype) -> torch.dtype:
    return dt if dt.is_floating_point else torch.get_default_dtype()


def _overloads(packet: str, keep: Callable[[torch._C.FunctionSchema], bool] | None = None) -> list[str]:
    """``packet``'s overloads (and its in-place ``packet_`` ones) whose arguments are all tensors and numbers."""
    found = []
    for p in (packet, packet + "_"):
        if not hasattr(aten, p):
            continue
        pk = getattr(aten, p)
        for ov in pk.overloads():
            schema = getattr(pk, ov)._schema
            if any("Dimname" in str(a.type) for a in schema.arguments):
                continue
            if keep is not None and not keep(schema):
                continue
            found.append(p if ov == "default" else f"{p}.{ov}")
    return found


def _register(
    packet: str,
    impl: Callable[[Args, list[torch.Tensor]], None],
    ir_ops: tuple[str, ...],
    keep: Callable[[torch._C.FunctionSchema], bool] | None = None,
) -> None:
    computed(*_overloads(packet, keep), ir=ir_ops)(impl)


# ------------------------------------------------------------------------------------------------------ unary
UNARY_FLOAT = {  # aten -> IR; integer inputs compute in the default float dtype, as PyTorch does
    "exp": "exp",
    "exp2": "exp2",
    "expm1": "expm1",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "erf": "erf",
    "erfc": "erfc",
    "erfinv": "erfinv",
    "sigmoid": "sigmoid",
    "reciprocal": "reciprocal",
    "lgamma": "lgamma",
    "digamma": "digamma",
    "log_sigmoid": "logsigmoid",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
    "special_expit": "sigmoid",
}
UNARY_SAME = {  # the result keeps the input's dtype
    "abs": "abs",
    "neg": "neg",
    "negative": "neg",
    "relu": "relu",
    "floor": "floor",
    "ceil": "ceil",
    "trunc": "trunc",
    "frac": "frac",
    "square": "square",
    "bitwise_not": "bitwise_not",
    "silu": "silu",
    "mish": "mish",
    "hardsigmoid": "hardsigmoid",
    "hardswish": "hardswish",
    "relu6": "relu6",
    "selu": "selu",
    "fix": "trunc",
    "absolute": "abs",
}
UNARY_BOOL = {
    "isnan": "isnan",
    "isinf": "isinf",
    "isfinite": "isfinite",
    "signbit": "signbit",
    "logical_not": "logical_not",
}


def _unary(ir_op: str, compute: Callable[[Args], torch.dtype | None]) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(ir_op, [a.self], None, outs, a._index, compute(a))

    return impl


for _aten, _ir in UNARY_FLOAT.items():
    _register(_aten, _unary(_ir, lambda a: _float(a.self.dtype)), (_ir,))
for _aten, _ir in UNARY_SAME.items():
    _register(_aten, _unary(_ir, lambda a: a.self.dtype if a.self.dtype != torch.bool else None), (_ir,))
for _aten, _ir in UNARY_BOOL.items():
    _register(_aten, _unary(_ir, lambda a: None), (_ir,))


def _round(a: Args, outs: list[torch.Tensor]) -> None:
    ir("round", [a.self], {"decimals": a.get("decimals") or 0}, outs, a._index, a.self.dtype)


_register("round", _round, ("round",))


def _polygamma(a: Args, outs: list[torch.Tensor]) -> None:
    """polygamma(n, x): digamma at n = 0 (PyTorch allows it), the IR's polygamma for n = 1..10 (digamma's gradient
    is polygamma(1, x))."""
    n = int(a.n)
    if n == 0:
        ir("digamma", [a.self], None, outs, a._index, _float(a.self.dtype))
    else:
        ir("polygamma", [a.self], {"n": n}, outs, a._index, _float(a.self.dtype))


_register("polygamma", _polygamma, ("digamma", "polygamma"))


# ------------------------------------------------------------------------------------------------------ binary
def _other(a: Args) -> Any:
    """The second operand, whatever the schema calls it (``other``; pow's ``exponent``; heaviside's ``values``)."""
    for name in ("other", "exponent", "values"):
        if name in a:
            return a[name]
    raise KeyError(f"no second operand among {sorted(a)}")


def _rt(a: Args, x: str = "self", y: str = "other") -> torch.dtype:
    return torch.result_type(a[x], a[y])


BINARY = {  # aten -> (IR op, compute dtype rule)
    "add": ("add", "promote"),
    "sub": ("sub", "promote"),
    "subtract": ("sub", "promote"),
    "mul": ("mul", "promote"),
    "multiply": ("mul", "promote"),
    "maximum": ("maximum", "promote"),
    "minimum": ("minimum", "promote"),
    "fmax": ("fmax", "promote"),
    "fmin": ("fmin", "promote"),
    "remainder": ("remainder", "promote"),
    "fmod": ("fmod", "promote"),
    "floor_divide": ("floor_divide", "promote"),
    "atan2": ("atan2", "float"),
    "arctan2": ("atan2", "float"),
    "hypot": ("hypot", "float"),
    "copysign": ("copysign", "float"),
    "logaddexp": ("logaddexp", "float"),
    "logaddexp2": ("logaddexp2", "float"),
    "xlogy": ("xlogy", "float"),
    "bitwise_and": ("bitwise_and", "promote"),
    "bitwise_or": ("bitwise_or", "promote"),
    "bitwise_xor": ("bitwise_xor", "promote"),
    "bitwise_left_shift": ("left_shift", "promote"),
    "bitwise_right_shift": ("right_shift", "promote"),
    "__lshift__": ("left_shift", "promote"),
    "__rshift__": ("right_shift", "promote"),
    "eq": ("eq", "promote"),
    "ne": ("ne", "promote"),
    "lt": ("lt", "promote"),
    "le": ("le", "promote"),
    "gt": ("gt", "promote"),
    "ge": ("ge", "promote"),
    "greater": ("gt", "promote"),
    "less": ("lt", "promote"),
    "greater_equal": ("ge", "promote"),
    "less_equal": ("le", "promote"),
    "not_equal": ("ne", "promote"),
    "logical_and": ("logical_and", None),
    "logical_or": ("logical_or", None),
    "logical_xor": ("logical_xor", None),
}


_COMPARISONS = frozenset(("eq", "ne", "lt", "le", "gt", "ge"))


def check_cast(compute: torch.dtype, out: torch.Tensor) -> None:
    """CPU's rule for in-place and ``out=`` results: the computed type must cast safely to the output's."""
    if not torch.can_cast(compute, out.dtype):
        raise RuntimeError(f"result type {_dtype_name(compute)} can't be cast to the desired output type "
                           f"{_dtype_name(out.dtype)}")  # fmt: skip


def _dtype_name(dt: torch.dtype) -> str:
    return {torch.float32: "Float", torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
            torch.bool: "Bool", torch.uint8: "Byte", torch.float64: "Double"}.get(dt, str(dt))  # fmt: skip


# PyTorch's arithmetic on two bools is logic (True * False is False, True + True is True); the IR's is refused
_ON_BOOLS = {"mul": "logical_and", "add": "logical_or", "maximum": "logical_or", "minimum": "logical_and"}


def _binary(
    ir_op: str, rule: str | None, attrs: Callable[[Args], dict[str, Any]] | None = None
) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        other = _other(a)
        compute = None
        if rule is not None:
            compute = torch.result_type(a.self, other)
            if rule == "float":
                compute = _float(compute)
            if ir_op not in _COMPARISONS:
                check_cast(compute, outs[0])
        if compute is torch.bool and ir_op in _ON_BOOLS:
            ir(_ON_BOOLS[ir_op], [a.self, other], None, outs, a._index, compute)
            return
        ir(ir_op, [a.self, other], attrs(a) if attrs else None, outs, a._index, compute)

    return impl


def _alpha(a: Args) -> dict[str, Any]:
    return {"alpha": a.get("alpha", 1) if a.get("alpha") is not None else 1}


for _aten, (_ir, _rule) in BINARY.items():
    _register(_aten, _binary(_ir, _rule, _alpha if _ir in ("add", "sub") else None), (_ir,))


def _div(a: Args, outs: list[torch.Tensor]) -> None:
    mode = a.get("rounding_mode")
    compute = torch.result_type(a.self, a.other)
    if mode is None:
        compute = _float(compute)
    check_cast(compute, outs[0])
    ir("div", [a.self, a.other], {"rounding_mode": mode}, outs, a._index, compute)


for _p in ("div", "divide", "true_divide"):
    _register(_p, _div, ("div",))


def _pow(a: Args, outs: list[torch.Tensor]) -> None:
    base, exp = a.self, a.exponent
    ir("pow", [base, exp], None, outs, a._index, torch.result_type(base, exp))


_register("pow", _pow, ("pow",))
_register("float_power", lambda a, outs: ir("pow", [a.self, a.exponent], None, outs, a._index, torch.float32), ("pow",))


def _rsub(a: Args, outs: list[torch.Tensor]) -> None:
    compute = torch.result_type(a.self, a.other)
    alpha = a.get("alpha")
    if alpha is not None and alpha != 1:  # other - alpha * self
        ir("sub", [a.other, a.self], {"alpha": alpha}, outs, a._index, compute)
    else:
        ir("sub", [a.other, a.self], None, outs, a._index, compute)


_register("rsub", _rsub, ("sub",))


# ------------------------------------------------------------------------------------------------------ ternary
def _where_impl(a: Args, outs: list[torch.Tensor]) -> None:
    from kohakutt.frontends.torch.aten.registry import operand

    compute = outs[0].dtype
    cond = operand(a.condition, a._index, torch.bool)
    ir("where", [cond, a.self, a.other], None, outs, a._index, compute)


_register("where", _where_impl, ("where",), keep=lambda s: len(s.arguments) >= 3)


def _clamp(a: Args, outs: list[torch.Tensor]) -> None:
    lo, hi = a.get("min"), a.get("max")
    compute = outs[0].dtype
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        ir(
            "clamp_tensor",
            [a.self, lo if lo is not None else float("-inf"), hi if hi is not None else float("inf")],
            None,
            outs,
            a._index,
            compute,
        )
    else:
        ir("clamp", [a.self], {"min": lo, "max": hi}, outs, a._index, compute)


for _p in ("clamp", "clip"):
    _register(_p, _clamp, ("clamp", "clamp_tensor"))
_register("clamp_min", lambda a, outs: _clamp(Args(a, max=None, min=a["min"]), outs), ("clamp", "clamp_tensor"))
_register("clamp_max", lambda a, outs: _clamp(Args(a, min=None, max=a["max"]), outs), ("clamp", "clamp_tensor"))


def _addc(op: str) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(op, [a.self, a.tensor1, a.tensor2], {"value": a.get("value", 1)}, outs, a._index, outs[0].dtype)

    return impl


_register("addcmul", _addc("addcmul"), ("addcmul",))
_register("addcdiv", _addc("addcdiv"), ("addcdiv",))


def _lerp(a: Args, outs: list[torch.Tensor]) -> None:
    ir("lerp", [a.self, a.end, a.weight], None, outs, a._index, outs[0].dtype)


_register("lerp", _lerp, ("lerp",))


# ------------------------------------------------------------------------------------------------------ activations
def _attr_unary(ir_op: str, attrs: Callable[[Args], dict[str, Any]]) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        ir(ir_op, [a.self], attrs(a), outs, a._index, _float(a.self.dtype))

    return impl


def _scalar(x: Any) -> Any:
    return x.item() if isinstance(x, torch.Tensor) else x


def _threshold_attrs(a: Args) -> dict[str, Any]:
    """torch casts ``threshold`` and ``value`` to an integer tensor's type first (toward zero)."""
    th, value = _scalar(a.threshold), _scalar(a.value)
    if not (a.self.dtype.is_floating_point or a.self.dtype.is_complex):
        th, value = math.trunc(th), math.trunc(value)
    return {"threshold": th, "value": value}


_register("gelu", _attr_unary("gelu", lambda a: {"approximate": a.get("approximate") or "none"}), ("gelu",))
_register(
    "leaky_relu",
    _attr_unary("leaky_relu", lambda a: {"negative_slope": _scalar(a.get("negative_slope", 0.01))}),
    ("leaky_relu",),
)
_register(
    "hardtanh",
    _attr_unary(
        "hardtanh", lambda a: {"min_val": _scalar(a.get("min_val", -1.0)), "max_val": _scalar(a.get("max_val", 1.0))}
    ),
    ("hardtanh",),
)
_register(
    "softplus",
    _attr_unary(
        "softplus", lambda a: {"beta": _scalar(a.get("beta", 1.0)), "threshold": _scalar(a.get("threshold", 20.0))}
    ),
    ("softplus",),
)
_register("celu", _attr_unary("celu", lambda a: {"alpha": _scalar(a.get("alpha", 1.0))}), ("celu",))
_register(
    "threshold",
    _attr_unary("threshold", lambda a: _threshold_attrs(a)),
    ("threshold",),
)
_register(
    "nan_to_num",
    _attr_unary(
        "nan_to_num",
        lambda a: {
            "nan": a.get("nan") if a.get("nan") is not None else 0.0,
            "posinf": a.get("posinf"),
            "neginf": a.get("neginf"),
        },
    ),
    ("nan_to_num",),
)


def _elu(a: Args, outs: list[torch.Tensor]) -> None:
    alpha, scale, iscale = (
        _scalar(a.get("alpha", 1.0)),
        _scalar(a.get("scale", 1.0)),
        _scalar(a.get("input_scale", 1.0)),
    )
    if scale == 1 and iscale == 1:
        ir("elu", [a.self], {"alpha": alpha}, outs, a._index, _float(a.self.dtype))
        return
    x = ir("mul", [a.self, float(iscale)], None, None, a._index, _float(a.self.dtype))[0]
    y = ir("elu", [x], {"alpha": alpha}, None, a._index)[0]
    ir("mul", [y, float(scale)], None, outs, a._index)


_register("elu", _elu, ("elu", "mul"))


BACKWARD = {  # aten -> (IR op, second operand's argument name, attribute names)
    "sigmoid_backward": ("sigmoid_backward", "output", ()),
    "tanh_backward": ("tanh_backward", "output", ()),
    "silu_backward": ("silu_backward", "self", ()),
    "mish_backward": ("mish_backward", "self", ()),
    "hardsigmoid_backward": ("hardsigmoid_backward", "self", ()),
    "hardswish_backward": ("hardswish_backward", "self", ()),
    "gelu_backward": ("gelu_backward", "self", ("approximate",)),
    "leaky_relu_backward": ("leaky_relu_backward", "self", ("negative_slope",)),
    "hardtanh_backward": ("hardtanh_backward", "self", ("min_val", "max_val")),
    "softplus_backward": ("softplus_backward", "self", ("beta", "threshold")),
    "threshold_backward": ("threshold_backward", "self", ("threshold",)),
    "elu_backward": ("elu_backward", "self_or_result", ("alpha", "scale", "input_scale", "is_result")),
}


def _backward(ir_op: str, second: str, names: tuple[str, ...]) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        attrs = {n: _scalar(a[n]) for n in names if n in a}
        ir(ir_op, [a.grad_output, a[second]], attrs or None, outs, a._index, outs[0].dtype)

    return impl


for _aten, (_ir, _second, _names) in BACKWARD.items():
    _register(_aten, _backward(_ir, _second, _names), (_ir,))


# ------------------------------------------------------------------------------------------------ compositions
def _infinity(sign: float) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        if not a.self.is_floating_point():  # integers are never infinite
            ir("ne", [a.self, a.self], None, outs, a._index)
            return
        ir("eq", [a.self, sign * math.inf], None, outs, a._index)

    return impl


_register("isposinf", _infinity(1.0), ("eq", "ne"))
_register("isneginf", _infinity(-1.0), ("eq", "ne"))


@computed("_prelu_kernel", ir=("gt", "mul", "where"))
def _prelu(a: Args, outs: list[torch.Tensor]) -> None:
    """x where x > 0, else weight * x (weight broadcast over x, as ``F.prelu`` shaped it)."""
    scaled = ir("mul", [a.self, a.weight], None, None, a._index, outs[0].dtype)[0]
    positive = ir("gt", [a.self, 0], None, None, a._index)[0]
    ir("where", [positive, a.self, scaled], None, outs, a._index, outs[0].dtype)
    release(a._index, scaled, positive)


@computed("_prelu_kernel_backward", ir=("gt", "mul", "where"))
def _prelu_backward(a: Args, outs: list[torch.Tensor]) -> None:
    """(grad where x > 0 else weight * grad, 0 where x > 0 else x * grad): the weight's gradient per element of x
    (autograd sums it down to the weight's shape)."""
    dt = outs[0].dtype
    positive = ir("gt", [a.self, 0], None, None, a._index)[0]
    wg = ir("mul", [a.grad_output, a.weight], None, None, a._index, dt)[0]
    ir("where", [positive, a.grad_output, wg], None, outs[:1], a._index, dt)
    xg = ir("mul", [a.grad_output, a.self], None, None, a._index, dt)[0]
    ir("where", [positive, 0.0, xg], None, outs[1:], a._index, dt)
    release(a._index, positive, wg, xg)


@computed("log_sigmoid_forward", "log_sigmoid_forward.output", ir=("logsigmoid", "abs", "neg", "exp"))
def _log_sigmoid_forward(a: Args, outs: list[torch.Tensor]) -> None:
    """(log sigmoid(x), exp(-|x|)): the second output is the CPU kernel's saved buffer, which its backward reads;
    tt's backward recomputes from x, but the buffer holds the same values."""
    dt = _float(a.self.dtype)
    ir("logsigmoid", [a.self], None, outs[:1], a._index, dt)
    if outs[1].numel():
        magnitude = ir("abs", [a.self], None, None, a._index, dt)[0]
        negated = ir("neg", [magnitude], None, None, a._index)[0]
        ir("exp", [negated], None, outs[1:], a._index)
        release(a._index, magnitude, negated)


@computed("log_sigmoid_backward", "log_sigmoid_backward.grad_input", ir=("neg", "sigmoid", "mul"))
def _log_sigmoid_backward(a: Args, outs: list[torch.Tensor]) -> None:
    """grad * sigmoid(-x): the derivative of log sigmoid."""
    dt = outs[0].dtype
    flipped = ir("neg", [a.self], None, None, a._index, dt)[0]
    slope = ir("sigmoid", [flipped], None, None, a._index)[0]
    ir("mul", [a.grad_output, slope], None, outs, a._index, dt)
    release(a._index, flipped, slope)


_I0_TERMS, _I0_SWITCH, _I0_TAIL = 26, 15.0, 9  # series terms below |x| = 15, asymptotic terms above


@computed("i0", "i0.out", "i0_", ir=("abs", "mul", "add", "exp", "sqrt", "where"))
def _i0(a: Args, outs: list[torch.Tensor]) -> None:
    """The modified Bessel function I0, in fp32 on the card: for |x| < 15 its power series sum (x^2/4)^k / (k!)^2
    (26 positive terms: no cancellation; the first left out is below 2^-40 of the sum), above it the asymptotic
    e^|x| / sqrt(2 pi |x|) * sum c_k / |x|^k, c_k = ((2k - 1)!!)^2 / (k! 8^k) (9 terms: within 1e-9 at 15)."""
    x = a.self.to(torch.float32)
    m = x.abs()
    t = m * m * 0.25
    term, series = torch.ones_like(m), torch.ones_like(m)
    for k in range(1, _I0_TERMS):
        term = term * t * (1.0 / (k * k))
        series = series + term
    inv, power, tail, c = 1.0 / m, torch.ones_like(m), torch.ones_like(m), 1.0
    for k in range(1, _I0_TAIL):
        c *= (2 * k - 1) ** 2 / (8 * k)
        power = power * inv
        tail = tail + c * power
    asymptotic = torch.exp(m) * (torch.rsqrt(m) * (1 / math.sqrt(2 * math.pi))) * tail  # m * 2 pi overflows at 3e38
    outs[0].copy_(torch.where(m < _I0_SWITCH, series, asymptotic))


# ----------------------------------------------------------------------------- activations composed of tt ops
def _composite_unary(fn: Callable[[Args], torch.Tensor]) -> Callable[[Args, list[torch.Tensor]], None]:
    def impl(a: Args, outs: list[torch.Tensor]) -> None:
        if outs[0].numel():
            outs[0].copy_(fn(a))

    return impl


def _glu_halves(a: Args) -> tuple[torch.Tensor, torch.Tensor]:
    first, second = a.self.chunk(2, dim=int(a.dim))
    return first, second


computed("glu", "glu.out", ir=("sigmoid", "mul"))(
    _composite_unary(lambda a: _glu_halves(a)[0] * torch.sigmoid(_glu_halves(a)[1]))
)


@computed("glu_backward", "glu_backward.grad_input", ir=("sigmoid", "mul", "sub", "concat"))
def _glu_backward(a: Args, outs: list[torch.Tensor]) -> None:
    """d/da = g * sigmoid(b), d/db = g * a * sigmoid(b) * (1 - sigmoid(b)), side by side along ``dim``."""
    first, second = _glu_halves(a)
    gate = torch.sigmoid(second)
    g = a.grad_output
    outs[0].copy_(torch.cat([g * gate, g * first * gate * (1 - gate)], dim=int(a.dim)))


def _shrink(soft: bool) -> Callable[[Args], torch.Tensor]:
    def fn(a: Args) -> torch.Tensor:
        x, lam = a.self, _scalar(a.get("lambd", 0.5))
        inside = (x >= -lam) & (x <= lam)  # PyTorch's test: NaN is outside, so it is kept
        if not soft:
            return torch.where(inside, 0.0, x)
        return torch.where(inside, 0.0, torch.where(x > lam, x - lam, x + lam))

    return fn


def _shrink_backward(a: Args) -> torch.Tensor:
    x, lam = a.self, _scalar(a.lambd)
    grad = a["grad_out"] if "grad_out" in a else a["grad_output"]  # hardshrink_backward names it grad_out
    return torch.where((x >= -lam) & (x <= lam), 0.0, grad)


computed("hardshrink", "hardshrink.out", ir=("gt", "lt", "where"))(_composite_unary(_shrink(False)))
computed("softshrink", "softshrink.out", ir=("gt", "lt", "sub", "add", "where"))(_composite_unary(_shrink(True)))
for _name in ("hardshrink_backward", "softshrink_backward"):
    computed(_name, f"{_name}.grad_input", ir=("gt", "lt", "where"))(_composite_unary(_shrink_backward))


def _logit(a: Args) -> torch.Tensor:
    x, eps = a.self.to(_float(a.self.dtype)), a.get("eps")
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return torch.log(x / (1 - x))


def _logit_backward(a: Args) -> torch.Tensor:
    x, eps, g = a.self, a.get("eps"), a.grad_output
    grad = g / (x * (1 - x))
    if eps is None:
        return grad
    return torch.where((x < eps) | (x > 1 - eps), 0.0, grad)


computed("logit", "logit.out", "logit_", ir=("clamp", "sub", "div", "log"))(_composite_unary(_logit))
computed("logit_backward", "logit_backward.grad_input", ir=("mul", "sub", "div", "where"))(
    _composite_unary(_logit_backward)
)


def _sign(a: Args, outs: list[torch.Tensor]) -> None:
    """-1, 0 or 1; 0 for NaN, as PyTorch computes it ((0 < x) - (x < 0)); the IR's sign keeps NaN."""
    if a.self.dtype == torch.bool:
        outs[0].copy_(a.self)
        return
    signs = ir("sign", [a.self], None, None, a._index, a.self.dtype)[0]
    if a.self.is_floating_point():
        nan = ir("isnan", [a.self], None, None, a._index)[0]
        ir("where", [nan, 0.0, signs], None, outs, a._index, outs[0].dtype)
        release(a._index, signs, nan)
        return
    ir("copy", [signs], None, outs, a._index)
    release(a._index, signs)


_register("sign", _sign, ("sign", "isnan", "where"))
_register("sgn", _sign, ("sign", "isnan", "where"))


def _sinc(a: Args) -> torch.Tensor:
    """sin(pi x) / (pi x), in float32 for 16-bit inputs (pi x rounded to bfloat16 is off by up to 2^-9 of x, so
    sinc near an integer would be 1e-3 instead of 0), rounded once when stored, as PyTorch's CPU computes it."""
    dt = torch.float32 if a.self.dtype in (torch.bfloat16, torch.float16) else _float(a.self.dtype)
    x = a.self.to(dt) * math.pi
    return torch.where(x == 0, 1.0, torch.sin(x) / x)


def _entr(a: Args) -> torch.Tensor:
    x = a.self.to(_float(a.self.dtype))
    return torch.where(x > 0, -x * torch.log(x), torch.where(x == 0, 0.0, torch.where(x < 0, -math.inf, x)))


def _angle(a: Args) -> torch.Tensor:
    x = a.self.to(_float(a.self.dtype))
    return torch.where(x < 0, math.pi, torch.where(torch.isnan(x), x, 0.0))


def _xlog1py(a: Args) -> torch.Tensor:
    """x * log1p(y), 0 where x == 0 unless y is NaN (either operand may be a number)."""
    dt = _float(torch.result_type(a.self, a.other))
    dev = next(t.device for t in (a.self, a.other) if isinstance(t, torch.Tensor))
    x, y = torch.as_tensor(a.self, dtype=dt, device=dev), torch.as_tensor(a.other, dtype=dt, device=dev)
    return torch.where((x == 0) & ~torch.isnan(y), 0.0, x * torch.log1p(y))


computed("sinc", "sinc.out", "sinc_", ir=("mul", "sin", "div", "where"))(_composite_unary(_sinc))
computed("special_entr", "special_entr.out", ir=("log", "mul", "where"))(_composite_unary(_entr))
computed("angle", "angle.out", ir=("lt", "isnan", "where"))(_composite_unary(_angle))
computed(*_overloads("special_xlog1py"), ir=("log1p", "mul", "where"))(_composite_unary(_xlog1py))


@computed("heaviside", "heaviside.out", "heaviside_", ir=("eq", "gt", "where"))
def _heaviside(a: Args, outs: list[torch.Tensor]) -> None:
    """0 where x < 0, ``values`` where x == 0, 1 where x > 0 -- and 0 for NaN, as PyTorch (NaN > 0 is false); the
    IR's heaviside keeps NaN."""
    dt = torch.result_type(a.self, a["values"])
    check_cast(dt, outs[0])
    x = a.self
    outs[0].copy_(torch.where(x == 0, a["values"], (x > 0).to(dt)))
