"""Autocast for ``tt``: ``torch.autocast("tt", dtype=torch.bfloat16)``.

PyTorch ships autocast rules for its own devices only; a PrivateUse1 device gets a fallthrough, which would run every
op in its input dtype. This module registers the rules for ``AutocastPrivateUse1``, in three policies:

- ``LOWER``: matmuls, linear layers, convolutions and attention run in the autocast dtype (bf16 by default,
  or float16 with `dtype=torch.float16`), the ops where the card's 16-bit throughput pays;
- ``FP32``: softmax, norms and losses run in float32, where bf16 rounding would hurt the result;
- ``PROMOTE``: ops that mix several floating inputs (``cat``, ``stack``, ``addcmul``...) run in the widest of them.

Only floating tt tensors are cast (float64 never reaches tt); casts are ordinary tt ops, so autograd sees them. As on
PyTorch's own devices, the lower-precision cast of a weight (a leaf that needs a gradient) is made once per outermost
autocast region and reused by every op in it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

LOWER = (
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "linear", "mv", "addmv", "dot", "vdot", "addr", "prelu",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution",
    "_convolution", "conv_tbc", "chain_matmul", "linalg_multi_dot", "scaled_dot_product_attention",
)  # fmt: skip
FP32 = (
    "softmax", "log_softmax", "layer_norm", "native_layer_norm", "group_norm", "rms_norm", "nll_loss", "nll_loss_nd",
    "cross_entropy_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
    "binary_cross_entropy_with_logits", "cosine_similarity", "logsumexp", "cumsum", "cumprod", "dist", "cdist",
    "renorm", "linalg_vector_norm",
)  # fmt: skip
PROMOTE = ("cat", "stack", "addcmul", "addcdiv", "atan2", "index_put", "scatter_add", "cross", "tensordot", "bilinear")

_KEY = torch._C.DispatchKey.AutocastPrivateUse1


def _castable(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "tt" and x.is_floating_point()


# Casts of weights, kept for the rest of the outermost autocast region (torch.clear_autocast_cache empties it), as
# PyTorch's autocast does on its own devices: leaf tensors that need a gradient and are not views, cast down. Per
# thread, as PyTorch's; unlike PyTorch's, a cast is made again once the weight has changed in place (an optimizer
# step inside the region); off while a trace records (a replay must cast the weights it was given, every time).
_local = threading.local()


def _cache() -> dict[int, tuple[weakref.ref, torch.Tensor, int]] | None:
    if getattr(_local, "off", 0):
        return None
    c = getattr(_local, "cache", None)
    if c is None:
        c = _local.cache = {}
    return c


@contextmanager
def no_cast_cache() -> Iterator[None]:
    """Neither read nor fill the cast cache in the block (on this thread)."""
    _local.off = getattr(_local, "off", 0) + 1
    try:
        yield
    finally:
        _local.off -= 1


def _cast(x: Any, dtype: torch.dtype, lower: bool = False) -> Any:
    if _castable(x):
        if x.dtype == dtype:
            return x
        cache = _cache() if lower and x.requires_grad and x.is_leaf and not x._is_view() else None
        if cache is not None and torch.is_autocast_cache_enabled():
            hit = cache.get(id(x))
            if hit is not None and hit[0]() is x and hit[1].dtype == dtype and hit[2] == x._version:
                return hit[1]
            cast = x.to(dtype)
            if torch.is_grad_enabled():  # cached only while autograd records (the cast's node is shared)
                cache[id(x)] = (weakref.ref(x), cast, x._version)  # an optimizer step in the region recasts
            return cast
        return x.to(dtype)
    if isinstance(x, list | tuple):
        return type(x)(_cast(y, dtype, lower) for y in x)
    return x


def clear_cache() -> None:
    """Drop this thread's cached weight casts (at the end of the outermost autocast region)."""
    _local.cache = {}


def _install_cache_clearing() -> None:
    """``torch.autocast`` empties its cast cache through ``torch.clear_autocast_cache`` when the outermost region
    ends; the tt cache is emptied there too."""
    original = torch.clear_autocast_cache
    if getattr(original, "_ktt", False):
        return

    def clear_autocast_cache() -> None:
        original()
        clear_cache()

    clear_autocast_cache._ktt = True  # type: ignore[attr-defined]
    torch.clear_autocast_cache = clear_autocast_cache


def _widest(args: tuple, kwargs: dict) -> torch.dtype | None:
    found: list[torch.dtype] = []

    def visit(x: Any) -> None:
        if _castable(x):
            found.append(x.dtype)
        elif isinstance(x, list | tuple):
            for y in x:
                visit(y)

    for x in [*args, *kwargs.values()]:
        visit(x)
    if not found:
        return None
    widest = found[0]
    for d in found[1:]:
        widest = torch.promote_types(widest, d)
    return widest


def _rule(op: torch._ops.OpOverload, policy: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        if policy == "lower":
            dtype = torch.get_autocast_dtype("tt")
        elif policy == "fp32":
            dtype = torch.float32
        else:
            dtype = _widest(args, kwargs)
        if dtype is not None:
            lower = policy == "lower"
            args, kwargs = _cast(args, dtype, lower), {k: _cast(v, dtype, lower) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            return op(*args, **kwargs)

    run.__name__ = f"tt_autocast_{policy}_{op.__name__.replace('.', '_')}"
    return run


def register(lib: torch.library.Library) -> list[str]:
    """Register the autocast rules of every overload in the three policies on ``lib`` (an ``aten`` IMPL library);
    make bf16 the default autocast dtype for tt. Returns the overloads registered."""
    torch.set_autocast_dtype("tt", torch.bfloat16)
    _install_cache_clearing()
    done: list[str] = []
    for policy, packets in (("lower", LOWER), ("fp32", FP32), ("promote", PROMOTE)):
        for packet in packets:
            ops = getattr(torch.ops.aten, packet, None)
            if ops is None:
                continue
            for ov in ops.overloads():
                op = getattr(ops, ov)
                if any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments):
                    continue  # out= and in-place forms keep their outputs' dtypes
                name = packet if ov == "default" else f"{packet}.{ov}"
                lib.impl(name, _rule(op, policy), "AutocastPrivateUse1")
                done.append(name)
    return done
