"""OpInfo conformance: PyTorch's own op samples (``op_db``) run on tt and checked against the CPU in float64.

Every OpInfo whose samples reach a Core ATen overload (``torch.Tag.core``) is run, and those in ``EXTRA_NAMES`` (ops
models call that Core ATen leaves out: ``isin``, ``unique``, LSTM's cells, ...): float32 and bfloat16 inputs (int32
for ops with no floating dtype, such as the bitwise ops). The same sample runs on the CPU with its floating tensors
widened to float64, which is the reference; the ops each sample reaches are recorded there (a dispatch mode), so
results are counted per Core ATen overload.

Tolerances, from the card's formats (``docs/concepts/numerics.md``):

- float32: rtol = 2^-16 (about 1.5e-5, 256 float32 ulp). Element-wise float32 math is IEEE fp32 on the SFPU (a few
  ulp), and at the default precision (PyTorch's ``"highest"``, float32 sums exact: ``docs/concepts/numerics.md``)
  float32 matmuls are split into bf16 parts and float32 sums are SFPU float32 adds, so the FPU's TF32 truncation
  no longer reaches a float32 result; what is left is float32 rounding, amplified by cancellation and by the
  conditioning of compositions (linear algebra). (It was 2^-9 while float32 matmuls and sums read TF32 operands.)
- bfloat16: rtol = 2^-6 (about 1.6e-2): the output's RNE rounding is 2^-8 relative, bf16 intermediates (DST, SFPU
  in bf16) add a few more roundings of the same size, and a bf16 matmul at HiFi2 keeps 7 of in0's 8 bits (2^-7).
- atol = rtol * max(1, max|reference|): an inf-norm floor, because accumulating ops (sums, matmuls, norms) err
  relative to the size of their terms, not of a result that cancels.
- Where that is not enough for bfloat16, the truncation itself decides: when terms cancel (a variance-like sum, cov's
  weight normalizer) or a softmax amplifies its logits' error (attention over large scores), the error the card's
  operand truncation causes is not bounded by any tolerance relative to the result. A bfloat16 sample that fails the
  comparison above and reaches one of the FPU ops in ``SOURCE_OPERANDS`` is then compared element-wise with a second
  float64 reference, :func:`source_reference`, in which those ops' operands are truncated as the source registers
  do (``SOURCE_BITS``) and every op's result is rounded to bfloat16 as tt stores it; a value
  within tolerance of either reference passes. The op's own arithmetic is still checked
  (a wrong result matches neither); what is forgiven is exactly the documented truncation. Fused ops whose CPU
  reference is a fused kernel (``scaled_dot_product_attention``) get no such second reference.
- Integer and bool outputs, shapes and dtypes must match exactly; NaN must be NaN where the reference has one.
  Outputs that are indices into ties (sort, topk, argmax, max.dim...) pass when they select equal values.
  Singular and eigen vectors (``GAUGE``) are unique only up to sign: both results go through the sample's own
  ``output_process_fn_grad`` (|U|, |V|, U Vh, S), which keeps what is unique, before they are compared.
  Ops with nondeterministic or uninitialised outputs (random, empty; dropout asked for by ``training=True`` or
  ``dropout_p > 0``) are checked for shape and dtype only; random ones must also replay bit for bit from the same
  ``torch.manual_seed``.

ModuleInfo samples (``module_db``) of the modules in ``MODULE_NAMES`` (LSTM, GRU and their cells, RNN, the margin
losses) run the same way: the module built seeded, its forward on tt against a float64 copy on the CPU.

A sample's status is ``pass``, ``fail`` (a wrong value, shape or dtype), ``unsupported`` (a typed refusal:
KohakuTTUnsupportedOperator or DtypeError), ``error`` (any other exception: a bug) or ``skip`` (the CPU float64
reference itself fails). The unmarked fast subset runs a few samples of the ops in ``FAST``; ``make conformance``
runs every sample and writes ``docs/reference/aten_conformance.json``, which ``scripts/gen_aten_support.py`` reads.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (pip install -e '.[dev]')")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db

DEV = torch.device("tt", 0)
ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "reference" / "aten_conformance.json"
RTOL = {torch.float32: 2.0**-16, torch.bfloat16: 2.0**-6}
DTYPES = (torch.float32, torch.bfloat16)
INDEX_OUTPUTS = {"sort", "topk", "argmax", "argmin", "max", "min", "kthvalue", "mode", "median", "nanmedian",
                 "argsort", "msort", "cummax", "cummin", "aminmax"}  # fmt: skip
# name prefixes of random OpInfos (so also randn, dropout2d / 3d, fractional_max_pool2d / 3d; the randomized low-rank
# SVD / PCA, whose results depend on the random projection they draw)
RANDOM = ("rand", "normal", "bernoulli", "multinomial", "uniform", "cauchy", "exponential", "log_normal",
          "geometric", "nn.functional.dropout", "nn.functional.alpha_dropout",
          "nn.functional.feature_alpha_dropout.with_train",
          "nn.functional.fractional_max_pool", "svd_lowrank", "pca_lowrank")  # fmt: skip
SEED = 1234
# decompositions whose vectors are unique only up to sign (or rotation): their samples' output_process_fn_grad keeps
# what is unique (|U|, |V|, U Vh, S), and both results are compared through it
GAUGE = ("linalg.svd", "svd", "linalg.eigh")

# OpInfos swept although their samples reach no Core ATen overload: ops that models call and Core ATen leaves out
# (each is in the fast subset too)
EXTRA_NAMES = (
    "isin", "erfc", "erfinv", "lgamma", "digamma", "searchsorted", "bucketize", "unique", "unique_consecutive",
    "bincount", "histc", "nn.functional.channel_shuffle", "nn.functional.pixel_shuffle",
    "nn.functional.pixel_unshuffle", "nn.functional.rrelu", "nn.functional.multi_margin_loss",
    "nn.functional.multilabel_margin_loss", "linalg.svd", "svd", "linalg.svdvals", "linalg.eigh", "linalg.eigvalsh",
    "polygamma.polygamma_n_1", "polygamma.polygamma_n_2",
)  # fmt: skip

# the fast subset: OpInfos (by full name) reaching Core ATen ops, a few samples each, float32 and bfloat16
FAST = (
    "abs", "acos", "acosh", "add", "addmm", "amax", "amin", "any", "argmax", "argmin", "asin", "asinh", "atan",
    "atan2", "atanh", "bmm", "cat", "ceil", "clamp", "clone", "constant_pad_nd", "cos", "cosh", "cumsum", "diagonal",
    "div.no_rounding_mode", "div.floor_rounding", "div.trunc_rounding", "eq", "erf", "exp", "expand", "expm1",
    "flip", "floor", "fmod", "full_like", "gather", "ge", "gt", "index_select", "isinf", "isnan", "le", "log", "log10",
    "log1p", "log2", "logical_and", "logical_not", "logical_or", "logical_xor", "lt", "max.reduction_with_dim",
    "maximum", "mean", "min.reduction_with_dim", "minimum", "mm", "mul", "ne", "neg", "nn.functional.elu",
    "nn.functional.gelu", "nn.functional.hardtanh", "nn.functional.leaky_relu", "nn.functional.relu",
    "nn.functional.embedding", "nn.functional.layer_norm", "nn.functional.conv2d", "nn.functional.avg_pool2d",
    "nn.functional.max_pool2d", "nn.functional.pad.constant", "permute", "pow", "prod", "reciprocal", "remainder",
    "repeat", "round", "rsqrt", "scatter", "scatter_add", "select_scatter", "sigmoid", "sign", "sin", "sinh",
    "slice_scatter", "softmax", "log_softmax", "sort", "split_with_sizes", "sqrt", "squeeze", "sub", "sum", "tan",
    "tanh", "topk", "trunc", "unsqueeze", "var", "view", "where", "index_put", "nonzero", "masked_scatter",
    "cdist", "nn.functional.pdist", "nn.functional.grid_sample", "nn.functional.max_unpool1d", "cov", "isclose",
    *EXTRA_NAMES,
)  # fmt: skip
FAST_SAMPLES = 2


def full_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def core_overloads() -> dict[torch._ops.OpOverload, str]:
    """Every Core ATen overload, with its name ("add.Tensor", "relu")."""
    out = {}
    for n in torch._C._dispatch_get_all_op_names():
        if not n.startswith("aten::"):
            continue
        packet, _, ov = n[len("aten::") :].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, packet), ov or "default")
        except AttributeError:
            continue
        if torch.Tag.core in op.tags:
            out[op] = n[len("aten::") :]
    return out


CORE = core_overloads()
CORE_NAMES = set(CORE.values())


def overload_name(func: torch._ops.OpOverload) -> str:
    """``aten.add.Tensor`` -> ``"add.Tensor"``, ``aten.relu.default`` -> ``"relu"``."""
    packet = func._schema.name.split("::")[-1]
    return packet if func._overloadname == "default" else f"{packet}.{func._overloadname}"


class _Record(TorchDispatchMode):
    """Notes the aten overloads an op reaches (below autograd: CompositeImplicitAutograd ops have decomposed)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.namespace == "aten":
            self.seen.add(overload_name(func))
        return func(*args, **(kwargs or {}))


# The card's FPU reads its operands through the source registers SrcA / SrcB (docs/concepts/numerics.md): a bfloat16
# matmul (HiFi2) keeps 7 of in0's 8 bits. (float32 operands get no second reference: at the default precision their
# matmuls are split and their sums exact.) Per op, the operands the FPU reads and where: {overload: (positions in
# SrcB, in SrcA)}.
SOURCE_OPERANDS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "mm": ((0,), (1,)), "bmm": ((0,), (1,)), "mv": ((0,), (1,)), "dot": ((0,), (1,)), "vdot": ((0,), (1,)),
    "addmm": ((1,), (2,)), "baddbmm": ((1,), (2,)), "addbmm": ((1,), (2,)), "addmv": ((1,), (2,)),
    "sum": ((), (0,)), "sum.dim_IntList": ((), (0,)), "nansum": ((), (0,)),
}  # fmt: skip
SOURCE_BITS = {torch.bfloat16: (7, 8)}  # significant bits kept in (SrcB, SrcA)


def _truncate(x: torch.Tensor, bits: int) -> torch.Tensor:
    """float64 ``x`` as float32 with only its ``bits`` leading significant bits (toward zero), back in float64."""
    f = x.to(torch.float32)
    mask = -(1 << (24 - bits))  # two's complement: ones above the dropped low mantissa bits
    return (f.view(torch.int32) & mask).view(torch.float32).to(torch.float64)


class _SourceRegisters(TorchDispatchMode):
    """Truncates the float64 operands of the FPU ops in SOURCE_OPERANDS as the card's source registers do; for a
    bfloat16 sample also rounds every op's float results to bfloat16, as tt stores each intermediate tensor."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.bits = SOURCE_BITS[dtype]
        self.store = dtype if dtype != torch.float32 else None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        roles = SOURCE_OPERANDS.get(overload_name(func)) if func.namespace == "aten" else None
        if roles is not None:
            args = list(args)
            for bits, positions in zip(self.bits, roles):
                for k in positions:
                    if k < len(args) and isinstance(args[k], torch.Tensor) and args[k].dtype == torch.float64:
                        args[k] = _truncate(args[k], bits)
        out = func(*args, **(kwargs or {}))
        if self.store is None or func.namespace != "aten" or func.is_view:
            return out
        if func._schema.is_mutable:  # in-place and out= results: rounded where they are, keeping their aliasing
            written = [a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
            bound = dict(zip([a.name for a in func._schema.arguments], args)) | (kwargs or {})
            for t in (bound.get(n) for n in written):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                    with torch.no_grad():
                        t.copy_(t.to(self.store))
            return out
        return _map(out, lambda t: t.to(self.store).to(torch.float64) if t.dtype == torch.float64 else t)


def source_reference(op: Any, wide: tuple, dtype: torch.dtype) -> Any:
    """The float64 CPU reference with the card's source-register truncation of its FPU operands (None if it fails):
    what the card's documented matmul / reduction numerics make of this sample. A sample whose result depends on
    those bits (sums that cancel, softmax of large logits) is judged against it as well as against the exact one."""
    try:
        with _SourceRegisters(dtype), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return op.op(wide[0], *wide[1], **_devices(wide[2], torch.device("cpu")))
    except Exception:
        return None


@dataclass
class Result:
    opinfo: str
    dtype: str
    index: int
    status: str
    detail: str = ""
    ops: list[str] = field(default_factory=list)  # the aten overloads the sample reaches
    max_rel: float = 0.0
    seconds: float = 0.0


# -------------------------------------------------------------------------------------------------------- moving
def _map(x: Any, fn: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list | tuple) and not hasattr(x, "_fields"):
        return type(x)(_map(y, fn) for y in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _to_tt(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(DEV)


def _widen(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(torch.float64) if x.is_floating_point() else x.detach()


def _devices(kwargs: dict, device: torch.device) -> dict:
    """A factory sample's ``device=`` pointed at ``device``."""
    if "device" in kwargs:
        kwargs = {**kwargs, "device": device}
    return kwargs


def _outputs(x: Any) -> list[Any]:
    if isinstance(x, torch.Tensor) or not isinstance(x, list | tuple):
        return [x]
    return [y for item in x for y in _outputs(item)]


# ------------------------------------------------------------------------------------------------------ comparing
def random_op(op: Any, sample: Any) -> bool:
    """A sample that draws random numbers: a random op, or dropout asked for (``training=True``, ``dropout_p > 0``)."""
    dropout = sample.kwargs.get("dropout_p", 0.0)
    return bool(
        full_name(op).startswith(RANDOM)
        or sample.kwargs.get("training") is True
        or (isinstance(dropout, float) and dropout > 0)
    )


def nondeterministic(op: Any, sample: Any) -> bool:
    """Random or uninitialised outputs: only their shapes and dtypes can be compared with the CPU."""
    return bool(op.has_nondeterministic_output or random_op(op, sample))


def compare(
    actual: Any,
    expected: Any,
    dtype: torch.dtype,
    name: str,
    sample_input: Any,
    dtypes: list[torch.dtype | None] | None = None,
    values: bool = True,
    source: Any = None,
    shapes: list[tuple[int, ...] | None] | None = None,
) -> tuple[str | None, float]:
    """None when ``actual`` (from tt, on the CPU) matches ``expected`` (CPU float64) within ``dtype``'s tolerance;
    otherwise what differs. Also the largest relative error seen. ``dtypes`` are the outputs' dtypes as PyTorch's
    device-generic (meta) computation gives them, where known; ``values=False`` compares shapes and dtypes only.
    ``source`` is the reference with the card's source-register truncation (:func:`source_reference`): a float value
    within tolerance of either reference passes. ``shapes`` are the outputs' shapes on the meta run: an output the
    CPU leaves empty (batch norm's statistics in evaluation) may have the shape every other device gives it, and is
    then checked for shape and dtype only."""
    acts, exps = _outputs(actual), _outputs(expected)
    alts = _outputs(source) if source is not None else [None] * len(exps)
    if len(acts) != len(exps):
        return f"{len(acts)} outputs, expected {len(exps)}", 0.0
    worst = 0.0
    floats_ok = True
    problems: list[str] = []
    for i, (a, e, alt) in enumerate(zip(acts, exps, alts)):
        if not isinstance(e, torch.Tensor):
            if isinstance(a, torch.Tensor):
                a = a.item()
            if isinstance(e, float) and isinstance(a, float):
                if not (
                    math.isclose(a, e, rel_tol=RTOL.get(dtype, 0.0), abs_tol=RTOL.get(dtype, 0.0))
                    or (math.isnan(a) and math.isnan(e))
                ):
                    problems.append(f"output {i}: {a} != {e}")
            elif a != e:
                problems.append(f"output {i}: {a!r} != {e!r}")
            continue
        if not isinstance(a, torch.Tensor):
            problems.append(f"output {i}: got {type(a).__name__}, expected a tensor")
            continue
        kept = values
        if a.shape != e.shape:
            if e.numel() or not shapes or i >= len(shapes) or tuple(a.shape) != shapes[i]:
                problems.append(f"output {i}: shape {tuple(a.shape)} != {tuple(e.shape)}")
                continue
            kept = False  # the CPU keeps none of it: nothing to compare the values with
        want = dtypes[i] if dtypes and i < len(dtypes) and dtypes[i] is not None else None
        if want is None:  # float64 is the widened reference, unless the op itself made a CPU float64 tensor
            want = dtype if e.dtype == torch.float64 and a.dtype != torch.float64 else e.dtype
        if a.dtype != want:
            problems.append(f"output {i}: dtype {a.dtype} != {want}")
            continue
        if not kept:
            continue
        if e.is_floating_point():
            rtol = RTOL.get(dtype, 2.0**-9)
            ad, ed = a.double(), e.double()
            finite = torch.isfinite(ed)
            scale = max(1.0, ed[finite].abs().max().item()) if finite.any() else 1.0
            close = torch.isclose(ad, ed, rtol=rtol, atol=rtol * scale, equal_nan=True)
            if isinstance(alt, torch.Tensor) and alt.shape == e.shape and not close.all():
                close |= torch.isclose(ad, alt.double(), rtol=rtol, atol=rtol * scale, equal_nan=True)
            err = ((ad - ed).abs() / ed.abs().clamp_min(1e-30))[finite & torch.isfinite(ad)]
            if err.numel():
                worst = max(worst, float(err.max()))
            if not close.all():
                bad = (~close).nonzero()[0].tolist()
                floats_ok = False
                problems.append(
                    f"output {i}: {int((~close).sum())}/{close.numel()} values off, e.g. at {bad}: "
                    f"{ad[tuple(bad)].item():.6g} vs {ed[tuple(bad)].item():.6g}"
                )
        elif not torch.equal(a, e):
            if name.split(".")[0] in INDEX_OUTPUTS or name in INDEX_OUTPUTS:
                continue  # indices of ties: judged through the values they select (below)
            bad = (a != e).nonzero()[0].tolist() if a.dim() else []
            problems.append(f"output {i}: integer values differ, e.g. at {bad}")
    if not problems and (name.split(".")[0] in ("argmax", "argmin")) and floats_ok:
        problems += _check_arg_ties(acts[0], exps[0], sample_input)
    return ("; ".join(problems) or None), worst


def _check_arg_ties(got: torch.Tensor, want: torch.Tensor, sample: Any) -> list[str]:
    """argmax / argmin indices differing from the reference still pass when they select an equal value."""
    if torch.equal(got, want):
        return []
    x, dim = sample.input.detach().double(), sample.kwargs.get("dim", sample.args[0] if sample.args else None)
    if dim is None:
        flat = x.reshape(-1)
        return [] if flat[got.item()] == flat[want.item()] else [f"index {got.item()} != {want.item()}"]
    keep = sample.kwargs.get("keepdim", False)
    g, w = (got, want) if keep else (got.unsqueeze(dim), want.unsqueeze(dim))
    return [] if torch.equal(x.gather(dim, g), x.gather(dim, w)) else ["argmax/argmin selects a different value"]


# -------------------------------------------------------------------------------------------------------- running
def run_sample(op: Any, sample: Any, dtype: torch.dtype, index: int) -> Result:
    """One sample on tt against its float64 CPU reference."""
    name = full_name(op)
    t0 = time.perf_counter()
    rec = _Record()
    wide = (_map(sample.input, _widen), _map(sample.args, _widen), _map(sample.kwargs, _widen))
    try:
        with rec, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = op.op(wide[0], *wide[1], **_devices(wide[2], torch.device("cpu")))
    except Exception as e:
        return Result(name, str(dtype), index, "skip", f"CPU float64 reference failed: {type(e).__name__}: {e}"[:300])
    reached = sorted(rec.seen)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                host = _run_on_tt(op, sample, move_args=True)
            except RuntimeError as e:
                if "to be on cpu" not in str(e):
                    raise
                _settle()  # an argument that must stay on the CPU (tensor_split's indices): leave the arguments
                host = _run_on_tt(op, sample, move_args=False)
    except (KohakuTTUnsupportedOperator, DtypeError) as e:
        _settle()
        return Result(name, str(dtype), index, "unsupported", f"{type(e).__name__}: {e}"[:300], reached)
    except Exception as e:
        _settle()
        where = traceback.extract_tb(e.__traceback__)[-1]
        detail = f"{type(e).__name__}: {e} ({Path(where.filename).name}:{where.lineno})"
        return Result(name, str(dtype), index, "error", detail[:400], reached)
    (dtypes, shapes), values = _meta_outputs(op, sample), not nondeterministic(op, sample)
    if name in GAUGE:  # singular / eigen vectors are unique up to sign: compare what the sample says is unique
        host, ref, dtypes, shapes = sample.output_process_fn_grad(host), sample.output_process_fn_grad(ref), None, None
    problem, worst = compare(host, ref, dtype, name, sample, dtypes, values, shapes=shapes)
    if problem is not None and values and dtype in SOURCE_BITS and set(reached) & set(SOURCE_OPERANDS):
        source = source_reference(op, wide, dtype)
        if source is not None:
            problem, worst = compare(host, ref, dtype, name, sample, dtypes, values, source, shapes)
    if problem is None and random_op(op, sample):
        problem = _replay(op, sample, host)
    status = "fail" if problem else "pass"
    return Result(name, str(dtype), index, status, problem or "", reached, worst, time.perf_counter() - t0)


def _replay(op: Any, sample: Any, first: Any) -> str | None:
    """None when the random sample, run again from the same seed, gives the same outputs bit for bit (the values
    of random draws are not the CPU's; their reproducibility is what can be checked)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            again = _run_on_tt(op, sample, move_args=True)
    except Exception as e:
        _settle()
        return f"the replay from the same seed failed: {type(e).__name__}: {e}"
    for i, (a, b) in enumerate(zip(_outputs(first), _outputs(again))):
        if isinstance(a, torch.Tensor) and not torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5)):
            return f"output {i}: a replay from the same seed drew different values"
    return None


def _run_on_tt(op: Any, sample: Any, move_args: bool) -> Any:
    torch.manual_seed(SEED)  # random samples replay from it (_replay)
    move = _to_tt if move_args else (lambda t: t)
    out = op.op(_map(sample.input, _to_tt), *_map(sample.args, move), **_devices(_map(sample.kwargs, move), DEV))
    return _map(out, lambda t: t.cpu() if t.device.type == "tt" else t)


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("meta")


def _meta_outputs(op: Any, sample: Any) -> tuple[list[torch.dtype | None] | None, list[tuple[int, ...] | None] | None]:
    """The outputs' dtypes and shapes on a device-generic (meta) run: the CPU keeps some statistics (layer norm's
    mean and rstd) in the input dtype where every other device, tt included, keeps them in float32, and none at all
    (batch norm's in evaluation) where the others return the running ones. Ops with no meta kernel (those that read
    values on the host, such as ``cov``'s weight checks) take the dtypes of a CPU run at the sample's own dtypes
    (and no shapes: the CPU's are the reference's)."""
    for device in ("meta", "cpu"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                move = _to_meta if device == "meta" else (lambda t: t.detach())
                out = op.op(
                    _map(sample.input, move),
                    *_map(sample.args, move),
                    **_devices(_map(sample.kwargs, move), torch.device(device)),
                )
        except Exception:
            continue
        outs = _outputs(out)
        shapes = [tuple(o.shape) if isinstance(o, torch.Tensor) else None for o in outs] if device == "meta" else None
        return [o.dtype if isinstance(o, torch.Tensor) else None for o in outs], shapes
    return None, None


def _settle() -> None:
    """Drop a queued error an earlier failure left behind, so the next sample starts clean."""
    with contextlib.suppress(Exception):
        torch.tt.synchronize()


def dtypes_for(op: Any) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    picked = [d for d in DTYPES if d in supported]
    if not picked and torch.int32 in supported:
        picked = [torch.int32]
    return picked


def samples(op: Any, dtype: torch.dtype, limit: int | None = None) -> list[Any]:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = []
        for s in op.sample_inputs("cpu", dtype, requires_grad=False):
            out.append(s)
            if limit is not None and len(out) >= limit:
                break
    return out


def sweep(ops: list[Any], limit: int | None = None, bf16_limit: int | None = None) -> list[Result]:
    results = []
    for op in ops:
        for dtype in dtypes_for(op):
            n = bf16_limit if dtype is torch.bfloat16 and bf16_limit is not None else limit
            try:
                todo = samples(op, dtype, n)
            except Exception as e:
                results.append(Result(full_name(op), str(dtype), -1, "skip", f"no samples: {type(e).__name__}: {e}"))
                continue
            for i, s in enumerate(todo):
                results.append(run_sample(op, s, dtype, i))
    return results


# --------------------------------------------------------------------------------------------------------- modules
# ModuleInfos (``module_db``) swept the same way: modules with no OpInfo whose kernels are tt's own (the RNN cells,
# which the CPU never reaches, and the margin losses as modules). Each sample's module is built seeded on the CPU,
# copied to tt in the sample's dtype and to float64 (from the same, dtype-rounded, parameters) as the reference; the
# forward outputs are compared as OpInfo samples are. The overloads a module sample counts for are those its tt run
# reaches.
MODULE_NAMES = ("nn.LSTM", "nn.GRU", "nn.LSTMCell", "nn.GRUCell", "nn.RNN", "nn.RNNCell", "nn.MultiMarginLoss",
                "nn.MultiLabelMarginLoss")  # fmt: skip
MODULES_BY_NAME = {m.name: m for m in module_db}


def module_samples(minfo: Any, dtype: torch.dtype, limit: int | None = None) -> list[Any]:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = list(minfo.module_inputs_func(minfo, device="cpu", dtype=dtype, requires_grad=False, training=True))
    return out[:limit] if limit is not None else out


def run_module_sample(minfo: Any, sample: Any, dtype: torch.dtype, index: int) -> Result:
    """One ModuleInfo sample: the module's forward on tt against its float64 copy on the CPU."""
    t0 = time.perf_counter()
    ctor, fwd = sample.constructor_input, sample.forward_input
    cpu_ops = _Record()
    try:
        with cpu_ops, warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.manual_seed(SEED)
            module = minfo.module_cls(*ctor.args, **ctor.kwargs).to(dtype)
            wide = copy.deepcopy(module).to(torch.float64)
            ref = wide(*_map(fwd.args, _widen), **_map(fwd.kwargs, _widen))
    except Exception as e:
        return Result(minfo.name, str(dtype), index, "skip", f"CPU float64 reference failed: {type(e).__name__}: {e}")
    rec = _Record()
    try:
        with rec, warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            out = copy.deepcopy(module).to(DEV)(*_map(fwd.args, _to_tt), **_map(fwd.kwargs, _to_tt))
            host = _map(out, lambda t: t.cpu() if t.device.type == "tt" else t)
    except (KohakuTTUnsupportedOperator, DtypeError) as e:
        _settle()
        return Result(minfo.name, str(dtype), index, "unsupported", f"{type(e).__name__}: {e}"[:300], sorted(rec.seen))
    except Exception as e:
        _settle()
        where = traceback.extract_tb(e.__traceback__)[-1]
        detail = f"{type(e).__name__}: {e} ({Path(where.filename).name}:{where.lineno})"
        return Result(minfo.name, str(dtype), index, "error", detail[:400], sorted(rec.seen))
    problem, worst = compare(host, ref, dtype, minfo.name, sample)
    if problem is not None and dtype in SOURCE_BITS and cpu_ops.seen & set(SOURCE_OPERANDS):
        try:  # the projections' source-register truncation, as for OpInfo samples (source_reference)
            with _SourceRegisters(dtype), warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                source = wide(*_map(fwd.args, _widen), **_map(fwd.kwargs, _widen))
            problem, worst = compare(host, ref, dtype, minfo.name, sample, None, True, source)
        except Exception:
            pass
    status = "fail" if problem else "pass"
    return Result(minfo.name, str(dtype), index, status, problem or "", sorted(rec.seen), worst,
                  time.perf_counter() - t0)  # fmt: skip


def sweep_modules(names: Sequence[str], limit: int | None = None, bf16_limit: int | None = None) -> list[Result]:
    results = []
    for name in names:
        minfo = MODULES_BY_NAME[name]
        for dtype in [d for d in DTYPES if d in minfo.dtypes]:
            n = bf16_limit if dtype is torch.bfloat16 and bf16_limit is not None else limit
            for i, s in enumerate(module_samples(minfo, dtype, n)):
                results.append(run_module_sample(minfo, s, dtype, i))
    return results


def _blamed(r: Result) -> list[str]:
    """The overloads a result counts for: all it reached, except that a refusal counts only for the op it names
    (a missing kernel) or for none (a dtype the card does not hold, chosen by the sample)."""
    if r.status != "unsupported":
        return r.ops
    named = re.search(r"aten::(\S+) has no tt kernel", r.detail)
    return [named.group(1)] if named else []


_POLICY_OPS = ("_fft_r2c", "_fft_c2c", "_fft_c2r")  # their results are complex tensors


def dtype_policy(r: Result) -> bool:
    """A refusal by the documented dtype policy: a tensor the card does not hold (float64, float16, complex, int8,
    int16), here because the sample or the op itself makes one, or an FFT, whose results are complex."""
    if r.status != "unsupported":
        return False
    return "DtypeError: a tt tensor cannot be" in r.detail or any(f"aten::{o} " in r.detail for o in _POLICY_OPS)


def summarize(results: list[Result], seconds: float) -> dict[str, Any]:
    """The sweep as the small JSON the support table reads: sample counts by status per aten overload reached
    (a sample counts for every overload it reaches) and per OpInfo and dtype."""
    per_aten: dict[str, Counter] = defaultdict(Counter)
    per_op: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    first_problem: dict[str, str] = {}
    for r in results:
        per_op[r.opinfo][r.dtype][r.status] += 1
        for o in _blamed(r):
            per_aten[o][r.status] += 1
        if r.status in ("fail", "error", "unsupported") and r.opinfo not in first_problem:
            first_problem[r.opinfo] = f"{r.dtype} sample {r.index}: {r.status}: {r.detail}"[:300]
    total = Counter(r.status for r in results)
    return {
        "torch": torch.__version__.split("+")[0],
        "seconds": round(seconds, 1),
        "samples": sum(total.values()),
        "totals": dict(sorted(total.items())),
        "dtype_policy_refusals": sum(dtype_policy(r) for r in results),
        "aten": {k: dict(sorted(v.items())) for k, v in sorted(per_aten.items())},
        "opinfos": {k: {d: dict(sorted(c.items())) for d, c in sorted(v.items())} for k, v in sorted(per_op.items())},
        "first_problem": dict(sorted(first_problem.items())),
    }


def reaching_core(ops: list[Any]) -> list[Any]:
    """The OpInfos whose first sample reaches a Core ATen overload on the CPU."""
    keep = []
    for op in ops:
        picked = dtypes_for(op)
        if not picked:
            continue
        try:
            first = samples(op, picked[0], 1)
        except Exception:
            continue
        if not first:
            continue
        rec = _Record()
        try:
            with rec, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = first[0]
                op.op(s.input, *s.args, **s.kwargs)
        except Exception:
            continue
        if rec.seen & CORE_NAMES:
            keep.append(op)
    return keep


# ---------------------------------------------------------------------------------------------------------- tests
BY_NAME = {full_name(o): o for o in op_db}


def test_fast_subset_names_exist():
    missing = [n for n in (*FAST, *EXTRA_NAMES) if n not in BY_NAME]
    missing += [n for n in MODULE_NAMES if n not in MODULES_BY_NAME]
    assert not missing, f"FAST names OpInfos op_db does not have: {missing}"


@pytest.mark.parametrize("name", FAST)
def test_fast_subset(name):
    op = BY_NAME[name]
    results = sweep([op], limit=FAST_SAMPLES, bf16_limit=1)
    wrong = [r for r in results if r.status not in ("pass", "skip")]  # these are Core ATen ops: all must run
    assert results and not wrong, "\n".join(f"{r.dtype} sample {r.index}: {r.status}: {r.detail}" for r in wrong)


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_fast_module_subset(name):
    results = sweep_modules([name], limit=FAST_SAMPLES, bf16_limit=1)
    wrong = [r for r in results if r.status not in ("pass", "skip")]
    assert results and not wrong, "\n".join(f"{r.dtype} sample {r.index}: {r.status}: {r.detail}" for r in wrong)


@pytest.mark.conformance
def test_full_sweep_writes_the_conformance_record(request):
    if "conformance" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the full sweep takes minutes: run it with make conformance (pytest -m conformance)")
    t0 = time.perf_counter()
    ops = reaching_core(list(op_db))
    ops += [BY_NAME[n] for n in EXTRA_NAMES if BY_NAME[n] not in ops]
    results = sweep(ops) + sweep_modules(MODULE_NAMES)
    record = summarize(results, time.perf_counter() - t0)
    RESULTS.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    t = record["totals"]
    ran = sum(t.get(s, 0) for s in ("pass", "fail", "error", "unsupported"))
    assert record["samples"] > 10000 and len(record["opinfos"]) > 250, "the sweep ran too few samples"
    worst = sorted(record["first_problem"].items())[:40]
    assert t.get("pass", 0) >= 0.9 * ran, f"pass rate {t.get('pass', 0) / ran:.1%} < 90%:\n" + "\n".join(
        f"{k}: {v}" for k, v in worst
    )
