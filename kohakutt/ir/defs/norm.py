"""IR ops of the norm family: layer norm, RMS norm, group norm, batch norm, their backward ops, and the fused
residual-add + norm ops.

Optional affine parameters follow ``x`` (and the residual) as trailing operands; the attribute ``params`` names them
in order, one letter each: ``w`` weight, ``b`` bias, and for batch_norm ``m`` running_mean, ``v`` running_var.
``params=None`` reads the count: 0 operands none, 1 ``"w"``, 2 ``"wb"``, 4 ``"wbmv"`` (batch_norm).

Statistics (mean, rstd = 1/sqrt(var + eps), invstd) come back as float32: the card accumulates them in fp32 and the
backward ops need them precise. Outputs switched off (``stats=False``, an ``output_mask`` entry False, batch_norm's
running statistics without running tensors) come back empty, shape (0,).

Numerics: TT-NN 0.81.1's defaults differ per op (tt-metal ``ttnn/operations/normalization``): layer_norm
HiFi4, fp32 DST, exact SFPU (``layernorm.cpp``: ``init_device_compute_kernel_config(arch, cfg, HiFi4, false, true)``;
older releases used approx on, 16-bit DST); rms_norm HiFi4, approx on, 16-bit DST; group_norm (modelled as
``ttnn.moreh_group_norm``, which takes (N, C, *) and returns the statistics) and the moreh backward ops HiFi4, approx
on, 16-bit DST, intermediates in the input's format; batch_norm HiFi4, exact SFPU, fp32 DST iff the input is
float32 (``batch_norm_utils.cpp``). The family default therefore leaves ``fp32_acc`` and ``approx`` unset: unset
means the provider's default for that op; provider ktt (the layer / RMS norm program) and provider host always
accumulate in fp32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.ir.dtypes import DType, promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, define, float_tensor

FAMILY = "norm"
NORM_MATH = Numerics(Fidelity.HiFi4, None, None)  # fp32_acc / approx: the provider's default (module docstring)
F32 = DType.FLOAT32
EMPTY = (0,)


def param_names(params: Any, count: int, op: str, allowed: str = "wb") -> str:
    """The letters naming ``count`` trailing parameter operands (see the module docstring)."""
    if params is None:
        default = {0: "", 1: "w", 2: "wb", 4: "wbmv"}.get(count)
        if default is None or any(c not in allowed for c in default):
            raise ShapeError(f"{op}: {count} parameter operand(s) after the inputs; pass params= to name them "
                             f"(letters from {allowed!r})")  # fmt: skip
        return default
    if not isinstance(params, str) or len(set(params)) != len(params) or any(c not in allowed for c in params):
        raise ShapeError(f"{op}: params must be a string of distinct letters from {allowed!r}, got {params!r}")
    if len(params) != count:
        raise ShapeError(f"{op}: params={params!r} names {len(params)} operand(s), but {count} were given")
    return params


def normalized(shape: Sequence[int], normalized_shape: Any, op: str) -> int:
    """The first normalized dim of ``shape`` for ``normalized_shape`` (None: the last dim; () for a 0-d tensor)."""
    if normalized_shape is None:
        return max(len(shape) - 1, 0)
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        normalized_shape = (normalized_shape,)
    ns = tuple(normalized_shape)
    if len(ns) > len(shape) or tuple(shape[len(shape) - len(ns) :]) != ns:
        raise ShapeError(f"{op}: normalized_shape {ns} must be the trailing dims of the input's shape "
                         f"{tuple(shape)}")  # fmt: skip
    return len(shape) - len(ns)


def _check_params(op: str, specs: Sequence[Spec], names: str, shapes: dict[str, tuple[int, ...]]) -> list[DType]:
    labels = {"w": "weight", "b": "bias", "m": "running_mean", "v": "running_var"}
    out = []
    for s, c in zip(specs, names):
        t = float_tensor(s, op, labels[c])
        if t.shape != shapes[c]:
            raise ShapeError(f"{op}: {labels[c]} must have shape {shapes[c]}, got {t.shape}")
        out.append(t.dtype)
    return out


def _rowwise(op: str, fused: bool, outputs: str):
    """Inference for layer_norm / rms_norm (fused: add_*): y [, sum] + the statistics named in ``outputs``."""

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        n_in = 2 if fused else 1
        if len(inputs) < n_in:
            raise ShapeError(f"{op} takes x{', residual' if fused else ''} and optional parameters")
        x = float_tensor(inputs[0], op, "x")
        dts = [x.dtype]
        if fused:
            r = float_tensor(inputs[1], op, "residual")
            if r.shape != x.shape:
                raise ShapeError(f"{op}: residual {r} must have x's shape {x.shape}")
            dts.append(r.dtype)
        axis = normalized(x.shape, attrs["normalized_shape"], op)
        names = param_names(attrs["params"], len(inputs) - n_in, op)
        dts += _check_params(op, inputs[n_in:], names, {"w": x.shape[axis:], "b": x.shape[axis:]})
        dt = promote(*dts)
        stat = TensorSpec(x.shape[:axis] + (1,) * (x.ndim - axis), F32) if attrs["stats"] else TensorSpec(EMPTY, F32)
        outs = [TensorSpec(x.shape, dt)] + ([TensorSpec(x.shape, dt)] if fused else [])
        return outs + [stat] * len(outputs)

    return infer


def _rowwise_backward(op: str, stats: str):
    """Inference for layer_norm_backward / rms_norm_backward: (grad_x, grad_w, grad_b)."""

    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        n_in = 2 + len(stats)
        if len(inputs) < n_in:
            raise ShapeError(f"{op} takes grad, x, {', '.join(stats)} and optional parameters")
        g, x = float_tensor(inputs[0], op, "grad"), float_tensor(inputs[1], op, "x")
        if g.shape != x.shape:
            raise ShapeError(f"{op}: grad {g} and x {x} must have the same shape")
        axis = normalized(x.shape, attrs["normalized_shape"], op)
        want = x.shape[:axis] + (1,) * (x.ndim - axis)
        for s, name in zip(inputs[2:n_in], stats):
            t = float_tensor(s, op, name)
            if t.numel != TensorSpec(want, F32).numel:
                raise ShapeError(f"{op}: {name} must have shape {want} (the forward's statistic), got {t.shape}")
        names = param_names(attrs["params"], len(inputs) - n_in, op)
        dts = [g.dtype, x.dtype, *_check_params(op, inputs[n_in:], names, {"w": x.shape[axis:], "b": x.shape[axis:]})]
        return _masked(attrs, promote(*dts), (x.shape, x.shape[axis:], x.shape[axis:]), op)

    return infer


def _masked(attrs: dict[str, Any], dt: DType, shapes: Sequence[tuple[int, ...]], op: str) -> list[TensorSpec]:
    mask = tuple(attrs["output_mask"])
    if len(mask) != 3:
        raise ShapeError(f"{op}: output_mask is three bools (input, weight, bias), got {mask!r}")
    return [TensorSpec(tuple(s) if m else EMPTY, dt) for s, m in zip(shapes, mask)]


def group_shape(x: TensorSpec, groups: Any, op: str) -> tuple[int, int]:
    """(N, C) of a group_norm input (N, C, *), checking that ``groups`` divides C."""
    if x.ndim < 2:
        raise ShapeError(f"{op}: x must be (N, C, *), got {x.shape}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or x.shape[1] % groups:
        raise ShapeError(f"{op}: num_groups must be a positive int dividing the {x.shape[1]} channels, got {groups!r}")
    return x.shape[0], x.shape[1]


def _group(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    x = float_tensor(inputs[0], "group_norm", "x")
    n, c = group_shape(x, attrs["num_groups"], "group_norm")
    names = param_names(attrs["params"], len(inputs) - 1, "group_norm")
    dt = promote(x.dtype, *_check_params("group_norm", inputs[1:], names, {"w": (c,), "b": (c,)}))
    stat = TensorSpec((n, attrs["num_groups"]), F32)
    return [TensorSpec(x.shape, dt), stat, stat]


def _group_backward(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    op = "group_norm_backward"
    if len(inputs) < 4:
        raise ShapeError(f"{op} takes grad, x, mean, rstd and an optional weight")
    g, x = float_tensor(inputs[0], op, "grad"), float_tensor(inputs[1], op, "x")
    if g.shape != x.shape:
        raise ShapeError(f"{op}: grad {g} and x {x} must have the same shape")
    n, c = group_shape(x, attrs["num_groups"], op)
    for s, name in zip(inputs[2:4], ("mean", "rstd")):
        if float_tensor(s, op, name).shape != (n, attrs["num_groups"]):
            raise ShapeError(f"{op}: {name} must have shape {(n, attrs['num_groups'])}, got {s.shape}")
    names = param_names(attrs["params"], len(inputs) - 4, op, "w")
    dt = promote(g.dtype, x.dtype, *_check_params(op, inputs[4:], names, {"w": (c,)}))
    return _masked(attrs, dt, (x.shape, (c,), (c,)), op)


def _batch(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    op = "batch_norm"
    x = float_tensor(inputs[0], op, "x")
    _, c = group_shape(x, 1, op)
    names = param_names(attrs["params"], len(inputs) - 1, op, "wbmv")
    if ("m" in names) != ("v" in names):
        raise ShapeError(f"{op}: give both running_mean and running_var, or neither")
    if not attrs["training"] and "m" not in names:
        raise ShapeError(f"{op}: evaluation (training=False) needs running_mean and running_var")
    dts = _check_params(op, inputs[1:], names, dict.fromkeys("wbmv", (c,)))
    dt = promote(x.dtype, *[d for d, k in zip(dts, names) if k in "wb"])
    stat = TensorSpec((c,), F32) if attrs["training"] else TensorSpec(EMPTY, F32)
    run_dt = dts[names.index("m")] if "m" in names else F32
    running = TensorSpec((c,), run_dt) if attrs["training"] and "m" in names else TensorSpec(EMPTY, run_dt)
    return [TensorSpec(x.shape, dt), stat, stat, running, running]


def _batch_backward(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
    op = "batch_norm_backward"
    if len(inputs) < 4:
        raise ShapeError(f"{op} takes grad, x, mean, invstd (running_var when training=False) and an optional weight")
    g, x = float_tensor(inputs[0], op, "grad"), float_tensor(inputs[1], op, "x")
    if g.shape != x.shape:
        raise ShapeError(f"{op}: grad {g} and x {x} must have the same shape")
    _, c = group_shape(x, 1, op)
    for s, name in zip(inputs[2:4], ("mean", "invstd")):
        if float_tensor(s, op, name).shape != (c,):
            raise ShapeError(f"{op}: {name} must have shape ({c},), one per channel, got {s.shape}")
    names = param_names(attrs["params"], len(inputs) - 4, op, "w")
    dt = promote(g.dtype, x.dtype, *_check_params(op, inputs[4:], names, {"w": (c,)}))
    return _masked(attrs, dt, (x.shape, (c,), (c,)), op)


_PARAMS = "Optional weight / bias operands (shape normalized_shape) follow; params names them (module docstring). "
_TTNN_LN = (
    "provider ttnn models ttnn.layer_norm (HiFi4, fp32 DST, exact rsqrt by default): E[x] by the reduce LLK with a "
    "1.0 scaler tile (the last tile's padded columns 0) then * fp32 1/W on the SFPU, x - E[x] on the FPU, its "
    "square, the variance likewise, + eps (truncated to bf16) and rsqrt on the SFPU, then the products with rstd, "
    "gamma and the sum with beta on the FPU; every intermediate stored in the intermediate format (fp32 with an "
    "fp32 DST, else bf16); several normalized dims are flattened into W. "
)
_KTT_LN = (
    "provider ktt (Kohaku-TT's program, kohakutt.kernels.programs.norm): sums by matmul against a ones tile (the "
    "last tile's padded rows zeroed, so padding never counts) accumulated in an fp32 DST, 1/W, + eps and rsqrt "
    "exact in fp32 on the SFPU, intermediates kept in fp32 circular buffers (19-bit TF32 when they re-enter the "
    "FPU), one rounding to the output dtype. "
)

define("layer_norm", FAMILY, ["x", "*params"], _rowwise("layer_norm", False, "mr"),
       attrs={"normalized_shape": None, "eps": 1e-5, "params": None, "stats": True}, numerics=NORM_MATH, outputs=3,
       doc="(y, mean, rstd) of PyTorch's native_layer_norm over the trailing `normalized_shape` dims (default: the "
           "last): y = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(biased var + eps); mean and rstd float32 of "
           "shape x.shape[:axis] + (1,)*k (empty with stats=False). " + _PARAMS + _TTNN_LN + _KTT_LN)  # fmt: skip
define("add_layer_norm", FAMILY, ["x", "residual", "*params"], _rowwise("add_layer_norm", True, "mr"),
       attrs={"normalized_shape": None, "eps": 1e-5, "params": None, "stats": True}, numerics=NORM_MATH, outputs=4,
       doc="(y, s, mean, rstd): s = x + residual stored in the output dtype (the next residual), then layer_norm "
           "of s. provider ttnn: ttnn.layer_norm with residual_input_tensor (the add on the FPU in the "
           "intermediate format; on a card s comes from a separate ttnn.add). provider ktt: the add in the "
           "program, s packed once and normalized as stored.")  # fmt: skip
define("rms_norm", FAMILY, ["x", "*params"], _rowwise("rms_norm", False, "r"),
       attrs={"normalized_shape": None, "eps": None, "params": None, "stats": True}, numerics=NORM_MATH, outputs=2,
       doc="(y, rstd) of RMS norm over the trailing `normalized_shape` dims: y = x * rstd * weight (+ bias, as "
           "TT-NN allows), rstd = 1/sqrt(mean(x^2) + eps); eps=None is the input dtype's machine epsilon "
           "(PyTorch's default). provider ttnn models ttnn.rms_norm (HiFi4, 16-bit DST, bf16 intermediates): x^2 "
           "on the FPU, mean by the reduce LLK as layer_norm's, rsqrt on the SFPU, products on the FPU. "
           + _KTT_LN)  # fmt: skip
define("add_rms_norm", FAMILY, ["x", "residual", "*params"], _rowwise("add_rms_norm", True, "r"),
       attrs={"normalized_shape": None, "eps": None, "params": None, "stats": True}, numerics=NORM_MATH, outputs=3,
       doc="(y, s, rstd): s = x + residual stored in the output dtype, then rms_norm of s (providers as "
           "add_layer_norm / rms_norm).")  # fmt: skip
define("layer_norm_backward", FAMILY, ["grad", "x", "mean", "rstd", "*params"],
       _rowwise_backward("layer_norm_backward", ("mean", "rstd")),
       attrs={"normalized_shape": None, "params": None, "output_mask": (True, True, True)}, numerics=NORM_MATH,
       outputs=3,
       doc="(grad_x, grad_weight, grad_bias) of layer_norm (PyTorch's native_layer_norm_backward) from the "
           "forward's mean and rstd: xhat = (x - mean) * rstd, g = grad * weight, grad_x = rstd * (g - mean(g) - "
           "xhat * mean(g * xhat)), grad_weight = sum(grad * xhat), grad_bias = sum(grad) over the leading dims. "
           "provider ttnn models ttnn.moreh_layer_norm_backward (HiFi4, 16-bit DST by default): products on "
           "the FPU, row and column sums by the reduce LLK, intermediates in the intermediate format. provider "
           "host: the same formula with fp32 sums.")  # fmt: skip
define("rms_norm_backward", FAMILY, ["grad", "x", "rstd", "*params"], _rowwise_backward("rms_norm_backward", ("rstd",)),
       attrs={"normalized_shape": None, "params": None, "output_mask": (True, True, True)}, numerics=NORM_MATH,
       outputs=3,
       doc="(grad_x, grad_weight, grad_bias) of rms_norm from the forward's rstd: xhat = x * rstd, g = grad * "
           "weight, grad_x = rstd * (g - xhat * mean(g * xhat)), grad_weight = sum(grad * xhat), grad_bias = "
           "sum(grad). provider ttnn (no TT-NN kernel: composed of ttnn.multiply / ttnn.mean / ttnn.sum on a card) "
           "stores every step in the intermediate format; provider host sums in fp32.")  # fmt: skip
define("group_norm", FAMILY, ["x", "*params"], _group,
       attrs={"num_groups": 1, "eps": 1e-5, "params": None}, numerics=NORM_MATH, outputs=3,
       doc="(y, mean, rstd) of PyTorch's native_group_norm: x (N, C, *) normalized over each group of C / "
           "num_groups channels and all spatial positions, then weight / bias (C,) per channel; mean and rstd "
           "float32 (N, num_groups). provider ttnn models ttnn.moreh_group_norm (HiFi4, approx on, 16-bit "
           "DST, intermediates in the input's format): the group's tiles added one by one, then E[x] by the reduce "
           "LLK with a (for bf16, truncated) scaler 1/sqrt(n) applied twice, x - E[x] and its square, the variance "
           "likewise, rsqrt, the affine on the FPU. "
           "provider host: fp32 statistics (two-pass), one rounding.")  # fmt: skip
define("group_norm_backward", FAMILY, ["grad", "x", "mean", "rstd", "*params"], _group_backward,
       attrs={"num_groups": 1, "params": None, "output_mask": (True, True, True)}, numerics=NORM_MATH, outputs=3,
       doc="(grad_x, grad_weight, grad_bias) of group_norm (PyTorch's native_group_norm_backward) from the "
           "forward's mean and rstd (N, G); the only parameter operand is the weight. provider ttnn models "
           "ttnn.moreh_group_norm_backward (intermediates in the intermediate format); provider host: fp32 "
           "sums.")  # fmt: skip
define("batch_norm", FAMILY, ["x", "*params"], _batch,
       attrs={"training": True, "momentum": 0.1, "eps": 1e-5, "params": None}, numerics=NORM_MATH, outputs=5,
       doc="(y, save_mean, save_invstd, new_running_mean, new_running_var) of PyTorch's "
           "_native_batch_norm_legit_functional over x (N, C, *): training normalizes with the batch statistics "
           "over N and * (biased var), returns them (float32) and the updated running statistics "
           "(1 - momentum) * running + momentum * batch, with the unbiased batch var for running_var as PyTorch "
           "does (empty without running tensors); evaluation normalizes with running_mean / running_var and "
           "returns empty statistics. provider ttnn models ttnn.batch_norm (HiFi4, exact SFPU, fp32 DST iff float32 "
           "input): batch mean by ttnn.mean over H, W then N, var = mean(x^2) - mean^2, each step stored in the "
           "input dtype, and TT-NN's running update with the biased batch var (its running_statistics kernel has "
           "no n/(n-1) correction). provider host: two-pass fp32 statistics, PyTorch's running update.")  # fmt: skip
define("batch_norm_backward", FAMILY, ["grad", "x", "mean", "invstd", "*params"], _batch_backward,
       attrs={"training": True, "eps": 1e-5, "params": None, "output_mask": (True, True, True)},
       numerics=NORM_MATH, outputs=3,
       doc="(grad_x, grad_weight, grad_bias) of batch_norm (PyTorch's native_batch_norm_backward). training: mean "
           "and invstd are the forward's save_mean / save_invstd and grad_x = invstd * w * (grad - mean(grad) - "
           "xhat * mean(grad * xhat)); evaluation (training=False): pass running_mean and running_var as mean and "
           "invstd (invstd = 1/sqrt(running_var + eps) is formed here) and grad_x = grad * w * invstd. provider "
           "ttnn (composed of TT-NN element-wise ops and ttnn.sum on a card) stores every step in the "
           "intermediate format; provider host sums in fp32.")  # fmt: skip
