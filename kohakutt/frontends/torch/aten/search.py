"""Searching in sorted sequences on ``tt``: ``searchsorted``, ``bucketize``, ``isin``.

``searchsorted`` / ``bucketize`` are the IR ``searchsorted``: a binary search per value on the card's data-movement
cores, step for step torch's (lower bound, or upper bound for ``right`` / ``side="right"``, through ``sorter`` when
given), the comparisons exact in the dtype PyTorch promotes sequence and values to; int32 results are widened to the
int64 output unless ``out_int32``.

``isin(elements, test_elements)`` is an exact equality test, composed of tt ops in one of two ways, both on the card:
a broadcast ``eq`` of every element against every test element reduced with ``any`` (when that product is small,
as in ``generate()``'s end-of-sequence check), else ``sort`` of the test elements and a ``searchsorted`` binary search
for each element followed by one ``eq`` with the value found (O((N + M) log M)). Both compare in the dtype PyTorch
promotes the two operands to; NaN is in nothing, as ``==`` has it. Nothing is read back to the host.
"""

from __future__ import annotations

from typing import Any

import torch
from kohakutt.frontends.torch.aten.registry import Args, composite, ir, scratch

aten = torch.ops.aten
BROADCAST_LIMIT = 1 << 22  # elements x test elements compared pairwise at most; beyond, sort + binary search


def _as_tensor(x: Any, like: torch.Tensor) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, device=like.device)


def insertion_points(seq: torch.Tensor, values: torch.Tensor, index: int, right: bool = False,
                     sorter: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The int32 IR ``searchsorted`` of ``values`` in ``seq`` (same dtype; see the IR op for the shapes)."""
    out = scratch(values.shape, torch.int32, index)
    ir("searchsorted", [seq, values] + ([sorter] if sorter is not None else []), {"right": right}, [out], index)
    return out


def isin(elements: torch.Tensor, test: torch.Tensor, index: int) -> torch.Tensor:
    """Bool tensor of ``elements``' shape: whether each element equals some element of ``test`` (same dtype)."""
    flat = test.reshape(-1)
    if elements.numel() * flat.numel() <= BROADCAST_LIMIT:
        return (elements.unsqueeze(-1) == flat).any(-1)
    ordered = flat.sort().values
    # NaN sorts last; searched as +Inf the sequence stays ordered, and the value then compared is the original NaN
    key = torch.where(ordered.isnan(), float("inf"), ordered) if ordered.is_floating_point() else ordered
    pos = insertion_points(key, elements.reshape(-1), index).clamp_max(flat.numel() - 1)
    return (ordered[pos] == elements.reshape(-1)).reshape(elements.shape)


@composite(
    "isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "isin.Tensor_Scalar", "isin.Tensor_Scalar_out",
    "isin.Scalar_Tensor", "isin.Scalar_Tensor_out",
    ir_ops=("eq", "any", "sort", "searchsorted", "index", "typecast", "logical_not"),
)  # fmt: skip
def _isin(a: Args, outs: list[torch.Tensor]) -> None:
    out = outs[0]
    elements = a["elements"] if "elements" in a else a["element"]
    test = a["test_elements"] if "test_elements" in a else a["test_element"]
    anchor = elements if isinstance(elements, torch.Tensor) else test
    elements, test = _as_tensor(elements, anchor), _as_tensor(test, anchor)
    common = torch.result_type(elements, test)
    if out.numel() == 0:
        return
    if test.numel() == 0:
        out.fill_(bool(a.invert))
        return
    found = isin(elements.to(common), test.to(common), a._index)
    out.copy_(found.logical_not() if a.invert else found)


# ------------------------------------------------------------------------------------------ searchsorted, bucketize
def _search(seq: torch.Tensor, values: Any, right: bool, sorter: torch.Tensor | None, out: torch.Tensor,
            index: int) -> None:  # fmt: skip
    values = _as_tensor(values, seq)
    common = torch.result_type(seq, values)
    if out.numel() == 0:
        return
    ir("searchsorted", [seq.to(common), values.to(common)] + ([sorter] if sorter is not None else []),
       {"right": right}, [out], index)  # fmt: skip


@composite(
    "searchsorted.Tensor", "searchsorted.Tensor_out", "searchsorted.Scalar", "searchsorted.Scalar_out",
    ir_ops=("searchsorted", "typecast"),
)  # fmt: skip
def _searchsorted(a: Args, outs: list[torch.Tensor]) -> None:
    right = bool(a.right) or a.side == "right"  # PyTorch's checks refuse side="left" with right=True
    _search(a.sorted_sequence, a.self, right, a.sorter, outs[0], a._index)


@composite(
    "bucketize.Tensor", "bucketize.Tensor_out", "bucketize.Scalar", "bucketize.Scalar_out",
    ir_ops=("searchsorted", "typecast"),
)  # fmt: skip
def _bucketize(a: Args, outs: list[torch.Tensor]) -> None:
    if a.boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({a.boundaries.dim()})")
    _search(a.boundaries, a.self, bool(a.right), None, outs[0], a._index)
