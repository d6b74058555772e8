"""IR ops of the reduce family: reductions over any set of dims, arg-reductions, scans and vector norms.

Dims: ``dims`` is None (every dim), an int or a sequence of ints; negative dims count from the end; an empty sequence
also means every dim (as PyTorch's ``sum(dim=[])``); naming a dim twice is an error. A 0-d tensor takes dims None, 0
or -1 and reduces to itself. ``keepdim`` keeps each reduced dim with size 1.

Output dtypes (one rule for every frontend):
- sum / prod / cumsum / cumprod: floats keep their dtype (block floats give bfloat16); int32 stays int32, int64 stays
  int64 (sum and cumsum exact modulo 2**64 as 8-bit limbs; prod and cumprod checked against int32, see
  ``kohakutt.ir.dtypes.INT64_EXACT``), uint32 stays uint32, bool / uint8 / uint16 give
  int32. ``dtype=`` overrides: the input is converted to it first and the accumulation runs in it (PyTorch's
  ``sum(dtype=)``).
- mean / var / std / var_mean / std_mean / vector_norm: floats only. An integer or bool input is a DtypeError (TT-NN
  refuses integer means), except that ``mean(dtype=<a float>)`` converts first.
- logsumexp: floats keep their dtype; integers and bool give float32 (as PyTorch).
- max / min / amax / amin keep the input dtype; argmax / argmin and the indices of max_with_indices /
  min_with_indices are int32 (indices fit it); all / any are bool; count_nonzero is int32.

Empty reductions: sum 0, prod 1, mean / var / std NaN, logsumexp -inf, all True, any False, vector_norm 0 (p=inf
raises); max / min / amax / amin / argmax / argmin over a dim of size 0 raise ShapeError (no identity).

Numerics: TT-NN's reduce programs run at HiFi4 with fp32 DST accumulation and exact SFPU modes when no compute config
is given (tt-metal ``reduce_op.cpp``: ``init_device_compute_kernel_config(arch, nullopt, HiFi4, false, true)``);
that is this family's default. The reduce LLK multiplies the data (SrcA) by a scaler tile (SrcB) under the fidelity
and sums each tile into DST (FP32, or BF16 rounded after every tile when ``fp32_acc=False``). The sim models the
details per op (see ``kohakutt/kernels/reduce.py``). That FPU reduce reads float32 data as TF32, so float32 sum,
mean, prod and logsumexp run on the host provider with float32 adds (multiplies for prod) unless the numerics say
``fp32_reduce="tf32"`` (var / std and vector norms always do: TT-NN squares unscaled values): float32 reductions are
float32-accurate by default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kohakutt.errors import DtypeError
from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import Infer, ShapeError, Spec, TensorSpec, define, norm_dim

FAMILY = "reduce"
REDUCE_MATH = Numerics(Fidelity.HiFi4, True, False)  # TT-NN reduce default: HiFi4, fp32_dest_acc_en, exact SFPU
EXACT = Numerics()  # comparisons, counts and index arithmetic: no fidelity, no rounding

_INT_ACCUMULATOR = {DType.BOOL: DType.INT32, DType.UINT8: DType.INT32, DType.UINT16: DType.INT32,
                    DType.INT32: DType.INT32, DType.INT64: DType.INT64, DType.UINT32: DType.UINT32}  # fmt: skip


# ---------------------------------------------------------------------------------------------------- helpers
def tensor_operand(inputs: Sequence[Spec], op: str, index: int = 0) -> TensorSpec:
    s = inputs[index]
    if not isinstance(s, TensorSpec):
        raise ShapeError(f"{op}: operand {index} must be a tensor, not the Python number {s}")
    return s


def reduced_dims(shape: Sequence[int], dims: Any, op: str = "op") -> tuple[int, ...]:
    """``dims`` as sorted non-negative dims of a tensor of ``shape`` (every dim for None or an empty sequence)."""
    nd = len(shape)
    if dims is None:
        return tuple(range(nd))
    if isinstance(dims, bool) or not isinstance(dims, int | list | tuple):
        raise ShapeError(f"{op}: dims must be None, an int or a sequence of ints, not {dims!r}")
    seq = (dims,) if isinstance(dims, int) else tuple(dims)
    if not seq:
        return tuple(range(nd))
    for d in seq:
        if isinstance(d, bool) or not isinstance(d, int):
            raise ShapeError(f"{op}: dims must be ints, got {d!r} in {dims!r}")
    out = [norm_dim(d, nd, op) for d in seq]
    for i, d in enumerate(out):
        if d in out[:i]:
            raise ShapeError(f"{op}: dim {seq[i]} appears more than once in dims {dims!r}")
    return tuple(sorted(out)) if nd else ()


def one_dim(shape: Sequence[int], dim: Any, op: str = "op") -> int:
    """A single dim, normalized (0 for a 0-d tensor)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ShapeError(f"{op}: dim must be an int, not {dim!r}")
    return norm_dim(dim, len(shape), op) if shape else 0


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _check_nonempty(spec: TensorSpec, dims: Sequence[int], op: str) -> None:
    for d in dims:
        if spec.shape[d] == 0:
            raise ShapeError(
                f"{op}: cannot reduce {spec} over dim {d}, which has size 0: a maximum or minimum of no values is "
                "undefined (sum and prod have identities, max and min do not); reduce over non-empty dims instead"
            )


def accumulator_dtype(dt: DType, override: Any, op: str) -> DType:
    """The dtype sum-like ops return (and accumulate in) for input dtype ``dt``."""
    if override is not None:
        return promote(DType.of(override))
    return promote(dt) if dt.is_float else _INT_ACCUMULATOR[dt]


def float_only(dt: DType, op: str, override: Any = None) -> DType:
    """The float dtype a float-only op returns; integer / bool inputs are a DtypeError (unless ``override`` is a
    float dtype, which the input is converted to)."""
    if override is not None:
        to = DType.of(override)
        if not to.is_float:
            raise DtypeError(f"{op}: dtype={to.value} is not a float dtype; {op} returns floats only")
        return promote(to)
    if not dt.is_float:
        hint = ", or pass dtype='float32'" if op == "mean" else ""
        raise DtypeError(
            f"{op} needs a float tensor, got {dt.value} (TT-NN has no integer {op}); convert it with "
            f"typecast to float32 or bfloat16 first{hint}"
        )
    return promote(dt)


# ---------------------------------------------------------------------------------------------- inference
# The output dtype rules of reductions over ``dims``: (input dtype, attrs, op name) -> output dtype.
_OUT_DTYPE: dict[str, Callable[[DType, dict[str, Any], str], DType]] = {
    "same": lambda dt, attrs, op: promote(dt),
    "acc": lambda dt, attrs, op: accumulator_dtype(dt, attrs["dtype"], op),
    "float": lambda dt, attrs, op: float_only(dt, op, attrs.get("dtype")),
    "float_or_f32": lambda dt, attrs, op: promote(dt) if dt.is_float else DType.FLOAT32,
    "bool": lambda dt, attrs, op: DType.BOOL,
    "int32": lambda dt, attrs, op: DType.INT32,
}


def _reduction(out: str, *, nonempty: bool = False, outputs: int = 1) -> Infer:
    """Infer for an op over ``dims`` with ``keepdim``; ``out`` names the dtype rule (a key of ``_OUT_DTYPE``)."""
    rule = _OUT_DTYPE[out]

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        op = attrs.get("_op", "reduction")
        s = tensor_operand(inputs, op)
        dims = reduced_dims(s.shape, attrs["dims"], op)
        if nonempty:
            _check_nonempty(s, dims, op)
        shape = reduced_shape(s.shape, dims, attrs["keepdim"])
        return [TensorSpec(shape, rule(s.dtype, attrs, op))] * outputs

    return infer


def _with_op(name: str, infer: Infer) -> Infer:
    """``infer`` with the op's name available for its messages."""
    return lambda inputs, attrs: infer(inputs, {**attrs, "_op": name})


def _arg(inputs: Sequence[Spec], attrs: dict[str, Any], op: str) -> list[TensorSpec]:
    s = tensor_operand(inputs, op)
    if attrs["dim"] is None:
        _check_nonempty(s, range(s.ndim), op)
        shape = (1,) * s.ndim if attrs["keepdim"] else ()
    else:
        d = one_dim(s.shape, attrs["dim"], op)
        dims = (d,) if s.ndim else ()
        _check_nonempty(s, dims, op)
        shape = reduced_shape(s.shape, dims, attrs["keepdim"])
    return [TensorSpec(shape, DType.INT32)]


def _with_indices(inputs: Sequence[Spec], attrs: dict[str, Any], op: str) -> list[TensorSpec]:
    s = tensor_operand(inputs, op)
    d = one_dim(s.shape, attrs["dim"], op)
    dims = (d,) if s.ndim else ()
    _check_nonempty(s, dims, op)
    shape = reduced_shape(s.shape, dims, attrs["keepdim"])
    return [TensorSpec(shape, promote(s.dtype)), TensorSpec(shape, DType.INT32)]


def _scan(inputs: Sequence[Spec], attrs: dict[str, Any], op: str) -> list[TensorSpec]:
    s = tensor_operand(inputs, op)
    one_dim(s.shape, attrs["dim"], op)
    return [TensorSpec(s.shape, accumulator_dtype(s.dtype, attrs["dtype"], op))]


def _norm(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    s = tensor_operand(inputs, "vector_norm")
    p = attrs["p"]
    if isinstance(p, bool) or not isinstance(p, int | float):
        raise ShapeError(f"vector_norm: p must be a number (2, 1, inf, -inf, 0 or any real), not {p!r}")
    dims = reduced_dims(s.shape, attrs["dims"], "vector_norm")
    if abs(p) == float("inf") and any(s.shape[d] == 0 for d in dims):
        raise ShapeError(f"vector_norm: the {p} norm of {s} over an empty dim is undefined (no identity for max/min)")
    return [TensorSpec(reduced_shape(s.shape, dims, attrs["keepdim"]), float_only(s.dtype, "vector_norm"))]


def _var(outputs: int, op: str) -> Infer:
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        c = attrs["correction"]
        if isinstance(c, bool) or not isinstance(c, int | float) or c < 0:
            raise ShapeError(f"{op}: correction must be a non-negative number (1 = Bessel's), not {c!r}")
        return _reduction("float", outputs=outputs)(inputs, {**attrs, "_op": op})

    return infer


# ------------------------------------------------------------------------------------------------------ ops
_DIMS = {"dims": None, "keepdim": False}
_SUM_NOTE = (
    "Numerics (TT-NN's reduce, HiFi4 + fp32 DST by default): the data times a 1.0 scaler tile on the FPU (exact for "
    "bf16 data at HiFi4; fp32 data is truncated to TF32 in SrcA; LoFi keeps 5 bits of each element), per-tile sums "
    "accumulated in DST (bf16-rounded after every tile when fp32_acc=False); reductions over dims other than the "
    "last two first add whole tiles along them (fast_reduce_nc), then reduce H / W; between TT-NN's steps the "
    "partial result is stored in the input dtype. Integer sums are exact int32 arithmetic (SFPU), wrapping; int64 "
    "sums add 8-bit limbs in int32, exact modulo 2**64 for up to 8,388,607 terms (more raise IntegerOverflowError)."
)

# Reductions over `dims` with `keepdim`: name -> (dtype rule, extra attrs, numerics, doc).
_REDUCTIONS: dict[str, tuple[str, dict[str, Any], Numerics, str]] = {
    "sum": ("acc", {"dtype": None}, REDUCE_MATH,
            "The sum of x over `dims` (None: all), `keepdim` keeping them with size 1; `dtype` converts first and "
            "accumulates in that dtype. Empty: 0. Dtypes: floats stay; int32 / int64 / uint32 stay; bool, uint8, "
            "uint16 give int32. " + _SUM_NOTE),
    "mean": ("float", {"dtype": None}, REDUCE_MATH,
             "The mean of x over `dims`; float inputs only (or `dtype` a float dtype to convert to). Empty: NaN. "
             "provider ttnn models TT-NN: the 1/N scaler sits in a bf16 scaler tile for non-fp32 inputs, TRUNCATED "
             "from fp32 (1/3 becomes 0.33203125, -0.39%), and over H and W together the tile gets sqrt(1/N), applied "
             "twice; over several dims TT-NN reduces one dim at a time, storing bf16 between steps. provider host "
             "(Kohaku-TT's kernel): one fp32-accumulated sum over all dims, then an fp32 multiply by 1/N on the SFPU "
             "(fp32 inputs summed on the SFPU in fp32, no TF32 truncation). " + _SUM_NOTE),
    "prod": ("acc", {"dtype": None}, REDUCE_MATH,
             "The product of x over `dims` (empty: 1). Dtypes as sum. Numerics (TT-NN's prod_nc): the running "
             "product lives in DST and goes back through SrcA for each FPU multiply (mul_reuse_dest) under the "
             "fidelity: an fp32 DST value is truncated to TF32 (9 mantissa bits reach the multiplier) every step, so "
             "K factors lose up to about K * 2^-9 relative; a bf16 DST rounds every product. Modelled as a product "
             "tree with the same number of multiplies. Integers: exact int32 products, wrapping."),
    **{
        name: ("same", {}, REDUCE_MATH,
               f"The {what} of x over `dims` (values only; NaN anywhere in a group gives NaN, as PyTorch). A dim of "
               "size 0 is an error. Numerics: the card pads the tile with the kernel's fill value (-inf for max, "
               "+inf for min) and reduces on GMPOOL (min as -max(-x)): exact for bf16 and integers; fp32 values are "
               "compared as the TF32 values SrcA holds (truncated), bf16-truncated when fp32_acc=False.")
        for name, what in (("max", "maximum"), ("min", "minimum"), ("amax", "maximum"), ("amin", "minimum"))
    },
    "logsumexp": ("float_or_f32", {}, REDUCE_MATH,
                  "log(sum(exp(x))) over `dims`, computed as m + log(sum(exp(x - m))) with m the maximum (m taken as "
                  "0 where it is +-inf, as PyTorch); empty: -inf; integer inputs give float32. provider ttnn: TT-NN "
                  "has no logsumexp, so this models the chain of TT-NN ops a frontend would issue (max, subtract, "
                  "exp, sum, log, add), each result stored in the output dtype (bf16 rounding between ops). provider "
                  "host: m, the exps and their sum in fp32 (exact exp), rounded once."),
    "all": ("bool", {}, EXACT,
            "True where every element of x over `dims` is non-zero (NaN counts as non-zero); empty: True. Exact."),
    "any": ("bool", {}, EXACT,
            "True where some element of x over `dims` is non-zero (NaN counts); empty: False. Exact."),
    "count_nonzero": ("int32", {}, EXACT,
                      "The int32 number of non-zero elements of x over `dims` (NaN counts). Exact."),
}  # fmt: skip
_NONEMPTY = {"max", "min", "amax", "amin"}  # no identity: a dim of size 0 is an error

for _name, (_rule, _extra, _num, _doc) in _REDUCTIONS.items():
    define(_name, FAMILY, ["x"], _with_op(_name, _reduction(_rule, nonempty=_name in _NONEMPTY)),
           attrs={**_DIMS, **_extra}, numerics=_num, doc=_doc)  # fmt: skip


def _named(fn: Callable[[Sequence[Spec], dict[str, Any], str], list[TensorSpec]], name: str) -> Infer:
    """``fn`` with the op's name as its third argument (for its messages)."""
    return lambda inputs, attrs: fn(inputs, attrs, name)


# Ops along one `dim` (arg-reductions, values with indices, scans): name -> (infer, attrs, numerics, outputs, doc).
_ALONG_DIM: dict[str, tuple[Infer, dict[str, Any], Numerics, int, str]] = {
    "max_with_indices": (_named(_with_indices, "max_with_indices"), {"dim": -1, "keepdim": False}, EXACT, 2,
                         "(values, indices) of the maximum along one `dim` (PyTorch's max(x, dim)): indices int32, "
                         "the first occurrence on ties, a NaN wins (its first index). Exact: values are the stored "
                         "input values."),
    "min_with_indices": (_named(_with_indices, "min_with_indices"), {"dim": -1, "keepdim": False}, EXACT, 2,
                         "(values, indices) of the minimum along one `dim` (PyTorch's min(x, dim)): indices int32, "
                         "the first occurrence on ties, a NaN wins. Exact."),
    "argmax": (_named(_arg, "argmax"), {"dim": None, "keepdim": False}, EXACT, 1,
               "The int32 index of the maximum along `dim` (None: of the flattened tensor; with keepdim every dim "
               "becomes 1). First occurrence on ties; NaN counts as the maximum (PyTorch). Exact comparisons."),
    "argmin": (_named(_arg, "argmin"), {"dim": None, "keepdim": False}, EXACT, 1,
               "The int32 index of the minimum along `dim` (None: flattened). First occurrence on ties; NaN wins "
               "(PyTorch). Exact comparisons."),
    "cumsum": (_named(_scan, "cumsum"), {"dim": -1, "dtype": None}, REDUCE_MATH, 1,
               "Inclusive prefix sums of x along `dim`; dtypes as sum. Numerics (TT-NN's accumulation program): per "
               "step the input and the running total are copied into DST and added on the SFPU in IEEE fp32; the "
               "total keeps DST's width (bf16-rounded every step when fp32_acc=False); fp32 sums are "
               "Kahan-compensated (TT-NN's default), within about one fp32 ulp of the exact prefix sum. Integers "
               "exact, wrapping."),
    "cumprod": (_named(_scan, "cumprod"), {"dim": -1, "dtype": None}, REDUCE_MATH, 1,
                "Inclusive prefix products of x along `dim`; dtypes as sum. Numerics: per step an SFPU multiply in "
                "IEEE fp32 (no fidelity), the running product at DST's width (bf16-rounded every step when "
                "fp32_acc=False). Integers exact, wrapping."),
}  # fmt: skip

for _name, (_infer, _attrs, _num, _outputs, _doc) in _ALONG_DIM.items():
    define(_name, FAMILY, ["x"], _infer, attrs=dict(_attrs), numerics=_num, outputs=_outputs, doc=_doc)

_VAR_NOTE = (
    "Numerics: TT-NN's Welford program on the SFPU, modelled as two fp32 passes (mean, then the sum of squared "
    "deviations) with bf16-rounded accumulators when fp32_acc=False; std is the SFPU's sqrt of var."
)
_VAR_ATTRS = {**_DIMS, "correction": 1}
# The Welford family: name -> (outputs, doc).
_VARIANCES: dict[str, tuple[int, str]] = {
    "var": (1, "The variance of x over `dims`: sum((x - mean)^2) / max(N - correction, 0) (correction 1 = Bessel's, "
               "0 = population); N - correction <= 0 gives inf or NaN as PyTorch. Floats only. " + _VAR_NOTE),
    "std": (1, "sqrt(var(x, dims, correction)). Floats only. " + _VAR_NOTE),
    "var_mean": (2, "(var, mean) of x over `dims` from one pass over the data. Floats only. " + _VAR_NOTE),
    "std_mean": (2, "(std, mean) of x over `dims`. Floats only. " + _VAR_NOTE),
}  # fmt: skip

for _name, (_outputs, _doc) in _VARIANCES.items():
    define(_name, FAMILY, ["x"], _var(_outputs, _name), attrs=dict(_VAR_ATTRS), numerics=REDUCE_MATH,
           outputs=_outputs, doc=_doc)  # fmt: skip

define(
    "vector_norm",
    FAMILY,
    ["x"],
    _norm,
    attrs={"p": 2.0, **_DIMS},
    numerics=REDUCE_MATH,
    doc="The p-norm of x over `dims` as torch.linalg.vector_norm: p=2 sqrt(sum x^2), p=1 sum |x|, p=inf max |x|, "
    "p=-inf min |x|, p=0 the count of non-zeros, else (sum |x|^p)^(1/p). Floats only; empty: 0 (inf norms "
    "raise). Numerics (TT-NN's moreh_norm): |x|^p on the FPU (x*x under the fidelity) or the SFPU, stored "
    "in the intermediate format (fp32 with fp32_acc, else bf16), summed by the reduce LLK, the root on the "
    "SFPU.",
)
