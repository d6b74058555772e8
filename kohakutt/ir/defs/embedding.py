"""IR ops of the embedding family: the row gather and its backward (a scatter-add of gradient rows)."""

from __future__ import annotations

from kohakutt.ir.defs.movement import index_arg, tensor_arg
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import ShapeError, TensorSpec, define


def padding_row(padding_idx: int | None, num_weights: int, op: str) -> int | None:
    """``padding_idx`` normalized to a row of a table of ``num_weights`` rows (negative counts from the end)."""
    if padding_idx is None:
        return None
    p = int(padding_idx)
    if not -num_weights <= p < num_weights:
        raise ShapeError(f"{op}: padding_idx {p} is outside the {num_weights} rows of the table")
    return p % num_weights


def _embedding(inputs, attrs):
    w = tensor_arg(inputs, 0, "embedding", "weight")
    idx = index_arg(inputs, 1, "embedding", "indices")
    if w.ndim != 2:
        raise ShapeError(f"embedding: weight must be [num_embeddings, dim], got shape {w.shape}")
    padding_row(attrs["padding_idx"], w.shape[0], "embedding")
    dt = DType.BFLOAT16 if w.dtype.is_block else w.dtype
    return [TensorSpec((*idx.shape, w.shape[1]), dt, w.layout)]


def _embedding_backward(inputs, attrs):
    grad = tensor_arg(inputs, 0, "embedding_backward", "grad")
    idx = index_arg(inputs, 1, "embedding_backward", "indices")
    n = int(attrs["num_weights"])
    if n < 0:
        raise ShapeError(f"embedding_backward: num_weights must be >= 0, got {n}")
    if not grad.ndim or grad.shape[:-1] != idx.shape:
        raise ShapeError(
            f"embedding_backward: grad of shape {grad.shape} must be indices' shape {idx.shape} plus the embedding dim"
        )
    padding_row(attrs["padding_idx"], n, "embedding_backward")
    if grad.dtype not in (DType.FLOAT32, DType.BFLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B):
        raise ShapeError(f"embedding_backward: grad must be a float tensor, got {grad.dtype.value}")
    dt = DType.BFLOAT16 if grad.dtype.is_block else grad.dtype
    return [TensorSpec((n, grad.shape[-1]), dt, grad.layout)]


# fmt: off
define("embedding", "embedding", ["weight", "indices"], _embedding, attrs={"padding_idx": None},
       doc="Rows of weight [num_embeddings, dim] at the int indices: out.shape = indices.shape + (dim,). As in "
           "torch, padding_idx changes only the backward (the forward returns weight[padding_idx]). Rows are moved "
           "exactly; block-float weights come out as bfloat16 (exact). An index outside [0, num_embeddings) raises "
           "IndexOutOfRangeError at the next sync.")
define("embedding_backward", "embedding", ["grad", "indices"], _embedding_backward,
       attrs={"num_weights": 0, "padding_idx": None, "scale_grad_by_freq": False},
       doc="The weight gradient of embedding: out[r] = sum of grad rows whose index is r (every duplicate counted, "
           "none for padding_idx; divided by r's count when scale_grad_by_freq). Numerics: TT-NN's kernel takes "
           "bfloat16 grads (float32 is rounded first) and adds each row in index order on the SFPU into a 16-bit "
           "DST, truncating every sum to bfloat16 (so long runs of one index stall); it has no "
           "scale_grad_by_freq. The ktt kernel adds in fp32 in index order and rounds once to the output dtype; "
           "numerics(fp32_acc=False) makes it truncate like TT-NN's.")
# fmt: on
