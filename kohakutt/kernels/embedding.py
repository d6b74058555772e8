"""The embedding family: simulator kernels, device-time estimates and TT-NN calls.

``embedding`` moves rows exactly. ``embedding_backward`` is a scatter-add of gradient rows, and where the sums are
kept decides the result:

- TT-NN's ``embedding_bw`` (provider ``ttnn``) runs the SFPU's ``reshuffle_rows`` into a 16-bit DST (its compute
  config leaves ``fp32_dest_acc_en`` off and the op takes no compute config): each row is added in fp32 (``SFPADD``)
  and stored back with ``SFPSTORE``, which truncates to bfloat16 and flushes denormals (tt-isa-documentation,
  Blackhole ``SFPSTORE.md``, ``ToBF16``). Rows are added in index order; the sum is re-read between index tiles
  exactly (bfloat16 output). So a token seen n times adds n truncated steps: 256 ones sum to 256, then 256 + 1
  truncates back to 256.
- The host math (provider ``host``) keeps the sums in fp32 and rounds once when it stores the output;
  ``numerics(fp32_acc=False)`` models a 16-bit DST, and then it truncates like TT-NN's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kohakutt.errors import KohakuTTUnsupportedOperator
from kohakutt.hal.card import CardSpec
from kohakutt.hal.formats import round_bfloat16
from kohakutt.ir.defs.embedding import padding_row
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import UNSET, Numerics
from kohakutt.ir.ops import TensorSpec
from kohakutt.kernels import cost
from kohakutt.kernels.movement import check_range, sequential, tt_dtype, tt_finish, tt_index, tt_layout
from kohakutt.kernels.registry import SimCall, declare, host, sim, ttnn

# fmt: off
TTNN_NAMES: tuple[str, ...] = (
    "embedding", "embedding_bw", "reshape", "pad", "slice", "typecast", "to_layout", "zeros", "ne", "multiply",
    "TILE_LAYOUT", "ROW_MAJOR_LAYOUT", "bfloat16", "uint32", "Tensor.device", "Tensor.shape", "Tensor.dtype",
)
# fmt: on

RESHUFFLE_TILE_CYCLES = 32 * 16  # reshuffle_rows: per source row two loads, a transpose, an add, a store (~16 instr)
_MIN_NORMAL = np.float32(2.0**-126)


def truncate_bf16(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` stored into a 16-bit DST by SFPSTORE: denormals flushed to signed zero, mantissa truncated."""
    x = np.where(np.abs(x) < _MIN_NORMAL, np.copysign(np.float32(0.0), x), x).astype(np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)


def _add_truncating(acc: np.ndarray, rows: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return truncate_bf16(acc + rows)  # SFPADD in fp32, then SFPSTORE into the bf16 DST


# ------------------------------------------------------------------------------------------------ estimates
def embedding_cost(ins: list, outs: list[TensorSpec], attrs: dict, num: Any, card: CardSpec) -> float:
    """Each index reads one row of the table (rounded up to the 64 B DRAM read alignment) and the output is written
    once."""
    w, idx = ins
    row = w.shape[1] * w.dtype.format.tile_bytes / 1024 if w.numel else 0
    reads = idx.numel * max(row, card.dram_read_align) + cost.tile_bytes(idx)
    return cost.LAUNCH_NS + cost.dram_ns(reads + sum(cost.tile_bytes(o) for o in outs), card)


def embedding_backward_cost(ins: list, outs: list[TensorSpec], attrs: dict, num: Any, card: CardSpec) -> float:
    """TT-NN's schedule, as an upper bound: the hidden dim's tiles spread over the cores; for each tile row of 32
    indices, every output tile row those indices touch (at most 32) is read, reshuffled into and written back."""
    grad, idx = ins
    out = outs[0]
    if not idx.numel or not out.numel:
        return cost.memory_bound(ins, outs, card)
    dim_tiles = -(-out.shape[1] // 32)
    index_tiles = -(-idx.numel // 32)
    chunks = index_tiles * min(32, -(-out.shape[0] // 32))
    tile = out.dtype.format.tile_bytes
    traffic = cost.tile_bytes(grad) + cost.tile_bytes(idx) + 2 * chunks * dim_tiles * tile + cost.tile_bytes(out)
    work = cost.compute_ns(chunks * dim_tiles, RESHUFFLE_TILE_CYCLES, card, cores=dim_tiles)
    return cost.LAUNCH_NS + max(cost.dram_ns(traffic, card), work)


# ------------------------------------------------------------------------------------------------ simulator
@sim("embedding", estimate=embedding_cost)
def embedding(call: SimCall) -> np.ndarray:
    w, idx = call.inputs
    check_range(idx, w.shape[0], "embedding")
    return w[idx.astype(np.intp)]


def _grad_rows(call: SimCall) -> tuple[np.ndarray, np.ndarray, int]:
    """(indices, grad rows) that count, with the padding row's dropped; and the table size."""
    grad, idx = call.inputs
    n = int(call.attrs["num_weights"])
    idx = idx.reshape(-1).astype(np.int64)
    check_range(idx, n, "embedding_backward")
    rows = grad.reshape(idx.size, grad.shape[-1]).astype(np.float32)
    pad = padding_row(call.attrs["padding_idx"], n, "embedding_backward")
    if pad is not None:
        keep = idx != pad
        idx, rows = idx[keep], rows[keep]
    return idx, rows, n


def _truncating_sum(idx: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    acc = np.zeros((n, rows.shape[-1]), np.float32)
    sequential(acc, idx, rows, _add_truncating)
    return acc


def _ttnn_backward_supports(specs: list, attrs: dict, num: Numerics = UNSET) -> str | None:
    if attrs["scale_grad_by_freq"]:
        return "TT-NN's embedding_bw has no scale_grad_by_freq"
    if isinstance(specs[0], TensorSpec) and specs[0].dtype in (DType.FLOAT32, DType.FLOAT16):
        return "TT-NN's embedding_bw sums float32 gradients in bfloat16"
    return None


@sim("embedding_backward", estimate=embedding_backward_cost, supports=_ttnn_backward_supports)
def embedding_backward_ttnn(call: SimCall) -> np.ndarray:
    if call.attrs["scale_grad_by_freq"]:
        raise KohakuTTUnsupportedOperator(
            "embedding_backward: TT-NN's embedding_bw has no scale_grad_by_freq; the host runs it (the default; "
            "provider='host')"
        )
    idx, rows, n = _grad_rows(call)
    return _truncating_sum(idx, round_bfloat16(rows), n)  # TT-NN takes bfloat16 grads: float32 is rounded first


@host("embedding_backward", estimate=embedding_backward_cost)
def embedding_backward_ktt(call: SimCall) -> np.ndarray:
    idx, rows, n = _grad_rows(call)
    if call.numerics.fp32_acc is False:
        acc = _truncating_sum(idx, rows, n)
    else:
        acc = np.zeros((n, rows.shape[-1]), np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            np.add.at(acc, idx, rows)  # one fp32 add per index, in index order
    if call.attrs["scale_grad_by_freq"]:
        count = np.bincount(call.inputs[1].reshape(-1).astype(np.int64), minlength=n)
        seen = count > 0
        acc[seen] *= (np.float32(1.0) / count[seen].astype(np.float32))[:, None]
    return acc


# ----------------------------------------------------------------------------------------- the real card
@ttnn("embedding")
def tt_embedding(tt, inputs, attrs, numerics, out_specs):
    w, idx = inputs
    if w.dtype in (tt.bfloat8_b, tt.bfloat4_b):
        w = tt.typecast(w, tt.bfloat16)  # exact: a block float's values all fit bfloat16
    elif w.dtype != tt.bfloat16:
        raise KohakuTTUnsupportedOperator(f"embedding: TT-NN's embedding takes a bfloat16 table, not {w.dtype}; "
                                          "cast the weight to bfloat16")  # fmt: skip
    n = int(np.prod(list(idx.shape)))
    flat = tt.reshape(tt.to_layout(tt_index(tt, idx), tt.ROW_MAJOR_LAYOUT), [1, n])
    out = tt.embedding(flat, w, layout=tt.TILE_LAYOUT, dtype=tt_dtype(tt, out_specs[0].dtype))
    return tt_finish(tt, tt.reshape(out, list(out_specs[0].shape)), out_specs[0])


@ttnn("embedding_backward", supports=_ttnn_backward_supports)
def tt_embedding_backward(tt, inputs, attrs, numerics, out_specs):
    """TT-NN's embedding_bw wants row-major uint32 indices [1, n] and bfloat16 grads [1, 1, n, dim] with n and dim
    multiples of 32, and a weight tensor only for the table size: pad all three, then cut the result."""
    if attrs["scale_grad_by_freq"]:
        raise KohakuTTUnsupportedOperator("embedding_backward: TT-NN's embedding_bw has no scale_grad_by_freq")
    grad, idx = inputs
    spec = out_specs[0]
    n, dim, rows = int(np.prod(list(idx.shape))), spec.shape[1], spec.shape[0]
    n32, dim32, rows32 = (-(-v // 32) * 32 for v in (max(n, 1), dim, max(rows, 1)))
    g = tt.reshape(tt.to_layout(grad, tt.TILE_LAYOUT), [1, 1, n, dim])
    if g.dtype != tt.bfloat16:
        g = tt.typecast(g, tt.bfloat16)
    pad = padding_row(attrs["padding_idx"], rows, "embedding_backward")
    if pad is not None:  # a padding token's rows add nothing: zero them first
        keep = tt.typecast(tt.ne(tt.to_layout(idx, tt.TILE_LAYOUT), pad), tt.bfloat16)
        g = tt.multiply(g, tt.reshape(keep, [1, 1, n, 1]))
    g = tt.pad(tt.to_layout(g, tt.ROW_MAJOR_LAYOUT), [(0, 0), (0, 0), (0, n32 - n), (0, dim32 - dim)], 0.0)
    flat = tt.reshape(tt.to_layout(tt_index(tt, idx), tt.ROW_MAJOR_LAYOUT), [1, n])
    flat = tt.pad(flat, [(0, 0), (0, n32 - n)], 0)  # padded tokens add zero rows to row 0
    table = tt.zeros(shape=[rows32, dim32], dtype=tt.bfloat16, layout=tt.TILE_LAYOUT, device=grad.device())
    out = tt.embedding_bw(flat, table, tt.to_layout(g, tt.TILE_LAYOUT), dtype=tt.bfloat16)
    out = tt.slice(tt.reshape(out, [rows32, dim32]), [0, 0], [rows, dim], [1, 1])
    return tt_finish(tt, tt.to_layout(out, tt_layout(tt, spec)), spec)


def _ttnn_table_supports(specs: list, attrs: dict, num: Numerics = UNSET) -> str | None:
    w = specs[0]
    if isinstance(w, TensorSpec) and w.dtype not in (DType.BFLOAT16, DType.BFLOAT8_B, DType.BFLOAT4_B):
        return f"TT-NN's embedding takes a bfloat16 (or block-float) table, not {w.dtype.value}"
    return None


# what TT-NN's embedding refuses (a float32 or integer table): the host gathers the rows, exactly
declare(("embedding",), _ttnn_table_supports)
host("embedding", estimate=embedding_cost)(embedding)
