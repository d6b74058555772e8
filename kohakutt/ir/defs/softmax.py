"""IR ops of the softmax family: softmax, log_softmax and their backward ops, along any one dim.

Floats only (an integer or bool input is a DtypeError); the result has the input's dtype (block floats give
bfloat16; the backward ops promote grad and y). A 0-d tensor counts as one element along dim 0 / -1; a dim of size 0
gives an empty result. A row containing NaN is NaN, a row of -inf is NaN (as PyTorch: max - max is NaN).

Numerics: TT-NN's softmax programs run at HiFi4 with approximate SFPU mode on and fp32 DST only for fp32 inputs by
default (tt-metal ``softmax_device_operation.cpp``: ``init_device_compute_kernel_config(arch, cfg, HiFi4, true,
is_fp32, false)``; moreh_softmax likewise), which sums a bfloat16 row in a bfloat16 DST (a few percent off for rows
of tens of values). The family default asks TT-NN for fp32 DST and exact exp instead (the compute kernel config
Kohaku-TT passes on a card; the simulator's model follows it), as PyTorch accumulates reduced-precision softmax in
float32. A ``numerics(fp32_acc=False, approx=True)`` scope gives TT-NN's own defaults back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.ir.dtypes import promote
from kohakutt.ir.numerics import Fidelity, Numerics
from kohakutt.ir.ops import ShapeError, Spec, TensorSpec, define, float_tensor, norm_dim

FAMILY = "softmax"
SOFTMAX_MATH = Numerics(Fidelity.HiFi4, True, False)  # fp32 DST, exact exp (see above)


def softmax_dim(shape: Sequence[int], dim: Any, op: str = "softmax") -> int:
    """``dim`` normalized for a tensor of ``shape`` (0 for a 0-d tensor)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ShapeError(f"{op}: dim must be an int, not {dim!r}")
    return norm_dim(dim, len(shape), op) if shape else 0


def _forward(op: str):
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        s = float_tensor(inputs[0], op, "x")
        softmax_dim(s.shape, attrs["dim"], op)
        return [TensorSpec(s.shape, promote(s.dtype))]

    return infer


def _backward(op: str):
    def infer(inputs: Sequence[Spec], attrs: dict[str, Any]) -> list[TensorSpec]:
        g, y = float_tensor(inputs[0], op, "grad"), float_tensor(inputs[1], op, "y")
        if g.shape != y.shape:
            raise ShapeError(f"{op}: grad {g} and y {y} must have the same shape (y is the forward's output)")
        softmax_dim(y.shape, attrs["dim"], op)
        return [TensorSpec(y.shape, promote(g.dtype, y.dtype))]

    return infer


_TTNN_FWD = (
    "provider ttnn (TT-NN's kernels): over the last dim of a tensor of rank <= 4, ttnn.softmax's attention-optimized "
    "program -- the row padded with -inf to whole tiles, max on GMPOOL, x - max on the FPU, exp on the SFPU "
    "(exact by the family's default; approx=True: Schraudolph, up to ~3% per element), the exps stored in the "
    "intermediate format (fp32 by the family's default, which asks for an fp32 DST; bf16 without one), their sum "
    "by the reduce LLK, 1/sum on the SFPU, the final multiply on the FPU at the fidelity; numeric_stable=False "
    "skips the max. Other dims (and log_softmax always) run the moreh kernels: always stable, exact exp, x - max "
    "stored in the intermediate format, the tile padding masked. "
)
_KTT_FWD = (
    "provider host (the host's computation): max, exps, their sum and the normalization in fp32, exact exp unless "
    "a scope asks approx=True, rounded once to the output dtype."
)

define("softmax", FAMILY, ["x"], _forward("softmax"), attrs={"dim": -1, "numeric_stable": True},
       numerics=SOFTMAX_MATH,
       doc="exp(x - max) / sum(exp(x - max)) along `dim` (numeric_stable=False: exp(x) / sum(exp(x)), which "
           "overflows for large x; provider host always subtracts the max). " + _TTNN_FWD + _KTT_FWD)  # fmt: skip
define("log_softmax", FAMILY, ["x"], _forward("log_softmax"), attrs={"dim": -1}, numerics=SOFTMAX_MATH,
       doc="(x - max) - log(sum(exp(x - max))) along `dim`. provider ttnn models ttnn.moreh_logsoftmax: x - max "
           "and the exps stored in the intermediate format, the sum by the reduce LLK, log on the SFPU, the final "
           "subtraction on the FPU. " + _KTT_FWD)  # fmt: skip
define("softmax_backward", FAMILY, ["grad", "y"], _backward("softmax_backward"), attrs={"dim": -1},
       numerics=SOFTMAX_MATH,
       doc="The gradient of softmax given its output y: y * (grad - sum(grad * y)) along `dim` (PyTorch's "
           "_softmax_backward_data). provider ttnn models ttnn.moreh_softmax_backward (HiFi4 and an fp32 DST by "
           "the family default): grad * y on the FPU stored in the intermediate format, summed by the reduce LLK, "
           "grad - sum and the product with y on the FPU. provider host: the sum and the products in fp32.")
define("log_softmax_backward", FAMILY, ["grad", "y"], _backward("log_softmax_backward"), attrs={"dim": -1},
       numerics=SOFTMAX_MATH,
       doc="The gradient of log_softmax given its output y: grad - exp(y) * sum(grad) along `dim` (PyTorch's "
           "_log_softmax_backward_data). provider ttnn models ttnn.moreh_logsoftmax_backward: sum(grad) by the "
           "reduce LLK, exp(y) on the SFPU (exact) stored in the intermediate format, the product and difference "
           "on the FPU. provider host: all in fp32.")  # fmt: skip
