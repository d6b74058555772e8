"""PyTorch's float32 precision knobs, as the numerics every tt op is queued with.

``torch.set_float32_matmul_precision`` picks how float32 matmuls run on tt, with PyTorch's meaning: ``"highest"``
(PyTorch's default) float32-accurate results (operands split into bfloat16 parts, see
``kohakutt.ir.defs.matmul``), ``"high"`` the card's TF32 operands, ``"medium"`` about bfloat16 precision. The
backend-neutral setting of PyTorch's newer API, ``torch.backends.fp32_precision`` (``"ieee"``, ``"tf32"``,
``"bf16"``), takes precedence when set, as it does for every backend without a setting of its own; the CUDA- and
oneDNN-specific ones (``torch.backends.cuda.matmul``, ``torch.backends.mkldnn.*``, ``torch.backends.cudnn.conv``)
do not apply to tt. Convolutions and the float32 attention path follow the same setting (their GEMMs are matmuls on
the card). A ``kohakutt.numerics(fp32_matmul=...)`` scope overrides all of these for the ops queued inside it.
"""

from __future__ import annotations

import torch
from kohakutt.ir.numerics import Numerics
from kohakutt.ir.numerics import current as current_numerics

_BY_MODE = {mode: Numerics(fp32_matmul=mode) for mode in ("highest", "high", "medium")}
_GENERIC = {"ieee": "highest", "tf32": "high", "bf16": "medium"}
_generic = torch._C._get_fp32_precision_getter


def torch_fp32_matmul() -> str:
    """PyTorch's float32 matmul precision now: ``"highest"``, ``"high"`` or ``"medium"``."""
    generic = _generic("generic", "all")
    if generic != "none":
        return _GENERIC.get(generic, "highest")
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:  # legacy and new settings mixed for CUDA / oneDNN: none of them speaks for tt
        return "highest"


def defaults() -> Numerics:
    """The numerics PyTorch's settings ask of the next op (what ``kohakutt.kernels.run``'s ``defaults`` takes)."""
    return _BY_MODE.get(torch_fp32_matmul(), _BY_MODE["highest"])


def fp32_matmul_mode() -> str:
    """How a float32 matmul queued now runs: the innermost ``kohakutt.numerics`` scope's ``fp32_matmul``, else
    PyTorch's setting."""
    return current_numerics().fp32_matmul or torch_fp32_matmul()


__all__ = ["defaults", "fp32_matmul_mode", "torch_fp32_matmul"]
