"""Fake / meta outputs against real tt outputs: what ``torch.compile`` traces with must be what the card returns.

``torch.compile`` traces a graph over FakeTensors: each op's output sizes, strides, storage offset and dtype come from
its meta (fake) kernel, never from the tt kernel. Where the two differ, the graph is built for tensors the card never
makes: a ``view`` that the fake strides allow fails on the real output, or a needed ``.contiguous()`` is dropped.

:class:`CrossRefFake` is a dispatch mode that, for every aten call reaching a registered tt kernel, runs the call
under a :class:`~torch._subclasses.fake_tensor.FakeTensorMode` first (the inputs converted as Dynamo converts them,
aliasing kept), then for real, and compares every output: sizes, strides, storage offset, dtype, device, and how the
outputs alias the inputs and one another (in-place and ``out=`` forms return their argument; views share its
storage). :func:`check_sample` also runs a whole OpInfo sample under FakeTensorMode against its real run, which
covers the kernels tt registers above autograd (``rms_norm``, ``scaled_dot_product_attention``): those run their
own Python on the fake tensors, so they must handle them.

Each sample runs in four layouts of its tt inputs: as given (contiguous), ``permuted`` (every tensor of two or more
dims stored in reversed dim order, as a transposed tensor is), ``strided`` (every tensor a stride-2 slice of a larger
buffer) and ``channels_last`` (4- and 5-dim tensors as NHWC / NDHWC), since stride propagation only shows on inputs
that are not contiguous.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.utils._python_dispatch import TorchDispatchMode

from kohakutt.errors import DtypeError, KohakuTTUnsupportedOperator
from kohakutt.frontends.torch.aten import all_kernels

DEV = torch.device("tt", 0)
LAYOUTS = ("contiguous", "permuted", "strided", "channels_last")
# not checked: host reads, the copy to the host PyTorch does inside .cpu(), and the storage-level ops fake tensors do
# not model
SKIP = {"_local_scalar_dense", "_copy_from", "_copy_from_and_resize", "set_.source_Storage",
        "set_.source_Storage_storage_offset", "set_.source_Tensor", "set_", "record_stream",
        "lift_fresh", "lift_fresh_copy"}  # fmt: skip


def registered() -> set[str]:
    """The aten overloads that have a tt kernel (at PrivateUse1 or at AutogradPrivateUse1)."""
    return {k.name for k in all_kernels().values()}


def overload_name(func: torch._ops.OpOverload) -> str:
    packet = func._schema.name.split("::")[-1]
    return packet if func._overloadname == "default" else f"{packet}.{func._overloadname}"


@dataclass
class Mismatch:
    op: str  # the aten overload (or "sample:<OpInfo>" for a whole-sample check)
    kind: str  # sizes, strides, size-1 strides, storage offset, dtype, device, aliasing, outputs, fake raises
    detail: str
    where: str = ""  # OpInfo, dtype, layout

    def __str__(self) -> str:
        return f"{self.op}: {self.kind}: {self.detail} [{self.where}]"


@dataclass
class Report:
    checked: Counter = field(default_factory=Counter)  # overload -> calls compared
    no_fake: Counter = field(default_factory=Counter)  # overload -> calls with no meta kernel (the real one decides)
    data_dependent: Counter = field(default_factory=Counter)  # overload -> calls fake mode cannot shape
    samples: Counter = field(default_factory=Counter)  # OpInfo -> whole samples compared with their fake runs
    mismatches: list[Mismatch] = field(default_factory=list)

    def merge(self, other: Report) -> None:
        self.checked.update(other.checked)
        self.no_fake.update(other.no_fake)
        self.data_dependent.update(other.data_dependent)
        self.samples.update(other.samples)
        self.mismatches.extend(other.mismatches)


def _has_tt(x: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "tt" for t in pytree.tree_leaves(x))


def _storage(t: torch.Tensor) -> int | None:
    if not torch._C._has_storage(t):
        return None
    return t.untyped_storage()._cdata


def _significant(size: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int | None, ...]:
    """Strides that decide where elements are: those of dims longer than one (none when the tensor is empty)."""
    if 0 in size:
        return ()
    return tuple(st if n > 1 else None for n, st in zip(size, stride))


def compare_tensor(real: torch.Tensor, fake: torch.Tensor) -> list[tuple[str, str]]:
    """What differs between a real tt output and its fake: (kind, detail) pairs."""
    if tuple(real.shape) != tuple(fake.shape):
        return [("sizes", f"real {tuple(real.shape)} != fake {tuple(fake.shape)}")]
    out = []
    if real.dtype != fake.dtype:
        out.append(("dtype", f"real {real.dtype} != fake {fake.dtype}"))
    if real.device != fake.device:
        out.append(("device", f"real {real.device} != fake {fake.device}"))
    rs, fs = tuple(real.stride()), tuple(fake.stride())
    if rs != fs:
        sig = _significant(tuple(real.shape), rs) != _significant(tuple(real.shape), fs)
        out.append(("strides" if sig else "size-1 strides", f"size {tuple(real.shape)}: real {rs} != fake {fs}"))
    if real.numel() and real.storage_offset() != fake.storage_offset():
        out.append(("storage offset", f"real {real.storage_offset()} != fake {fake.storage_offset()}"))
    return out


def aliasing(outs: list[Any], ins: list[Any]) -> list[tuple[Any, ...]]:
    """Per output: which inputs it is (identity), which inputs and earlier outputs share its storage."""
    stor = [_storage(t) if isinstance(t, torch.Tensor) else None for t in ins]
    result, seen = [], []
    for o in outs:
        if not isinstance(o, torch.Tensor):
            result.append(())
            continue
        s = _storage(o)
        same = tuple(i for i, t in enumerate(ins) if t is o)
        shares = tuple(i for i, si in enumerate(stor) if s is not None and si == s and ins[i].numel() and o.numel())
        earlier = tuple(j for j, sj in enumerate(seen) if s is not None and sj == s and o.numel())
        result.append((same, shares, earlier))
        seen.append(s)
    return result


def compare_outputs(op: str, real: Any, fake: Any, real_in: Any, fake_in: Any, where: str) -> list[Mismatch]:
    """Every difference between a call's real outputs and its fake outputs (metadata and aliasing)."""
    r, f = pytree.tree_leaves(real), pytree.tree_leaves(fake)
    if len(r) != len(f):
        return [Mismatch(op, "outputs", f"real has {len(r)} outputs, fake {len(f)}", where)]
    found = []
    for i, (a, b) in enumerate(zip(r, f)):
        ta, tb = isinstance(a, torch.Tensor), isinstance(b, torch.Tensor)
        if ta != tb:
            found.append(
                Mismatch(op, "outputs", f"output {i}: real {type(a).__name__}, fake {type(b).__name__}", where)
            )
        elif ta:
            found += [Mismatch(op, k, f"output {i}: {d}", where) for k, d in compare_tensor(a, b)]
    if not found:
        ra, fa = aliasing(r, pytree.tree_leaves(real_in)), aliasing(f, pytree.tree_leaves(fake_in))
        if ra != fa:
            found.append(
                Mismatch(op, "aliasing", f"(is input, shares input, shares output) real {ra} != fake {fa}", where)
            )
    return found


def fake_mode() -> FakeTensorMode:
    """A fake mode as Dynamo's, but with no fallback to running the real kernel (that would compare it with itself)."""
    return FakeTensorMode(allow_fallback_kernels=False)


def to_fake(mode: FakeTensorMode, x: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: mode.from_tensor(t, static_shapes=True), x)


class CrossRefFake(TorchDispatchMode):
    """Checks every aten call with a tt tensor argument (or those named in ``only``) against the same call on fake
    tensors. It sees the outermost calls below autograd, the ones a traced graph holds: a tt kernel, or an op whose
    decomposition reaches tt kernels."""

    def __init__(self, where: str = "", only: set[str] | None = None) -> None:
        super().__init__()
        self.where = where
        self.only = only
        self.report = Report()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = overload_name(func) if func.namespace == "aten" else ""
        if not name or name in SKIP or (self.only is not None and name not in self.only) or not _has_tt((args, kwargs)):
            return func(*args, **kwargs)
        fake_out, fake_in, state = None, None, "ok"
        try:
            mode = fake_mode()
            with mode, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fake_in = to_fake(mode, (args, kwargs))
                fake_out = func(*fake_in[0], **fake_in[1])
        except (DynamicOutputShapeException, DataDependentOutputException):
            state = "data-dependent"
        except UnsupportedOperatorException:
            state = "no-fake"
        except Exception as e:
            state = f"{type(e).__name__}: {e}"[:300]
        real = func(*args, **kwargs)
        rep = self.report
        if state == "data-dependent":
            rep.data_dependent[name] += 1
        elif state == "no-fake":
            rep.no_fake[name] += 1
        elif state != "ok":
            rep.mismatches.append(Mismatch(name, "fake raises", state, self.where))
        else:
            rep.checked[name] += 1
            rep.mismatches += compare_outputs(name, real, fake_out, (args, kwargs), fake_in, self.where)
        return real


# ------------------------------------------------------------------------------------------------------- layouts
def _permuted(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its dims stored in reversed order (same values, same sizes)."""
    if t.dim() < 2:
        return t
    rev = list(range(t.dim() - 1, -1, -1))
    return t.permute(rev).contiguous().permute(rev)


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a stride-2 slice of a buffer twice as long in its last dim (same values, same sizes)."""
    if t.dim() == 0 or t.numel() == 0:
        return t
    big = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)
    v = big[..., ::2]
    v.copy_(t)
    return v


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    """``t`` in channels-last order if it has four or five dims (NHWC, NDHWC), else as it is."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
    return t if fmt is None else t.contiguous(memory_format=fmt)


def in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A detached tt copy of CPU tensor ``t`` laid out as ``layout`` (one of :data:`LAYOUTS`)."""
    x = t.detach().to(DEV)
    if layout == "permuted":
        return _permuted(x)
    if layout == "strided":
        return _strided(x)
    if layout == "channels_last":
        return _channels_last(x)
    return x


def applies(layout: str, sample: Any) -> bool:
    """Whether ``layout`` changes any tensor of ``sample`` (channels-last only changes 4- and 5-dim ones)."""
    if layout != "channels_last":
        return True
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return any(isinstance(t, torch.Tensor) and t.dim() in (4, 5) for t in leaves)


def _devices(kwargs: dict) -> dict:
    return {**kwargs, "device": DEV} if "device" in kwargs else kwargs


def _tensors_on_tt(x: Any, layout: str) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: in_layout(t, layout), x)


FORMS = ("functional", "inplace", "out", "out-resize", "grad", "grad-input")


def _fake_run(fn: Any, inputs: tuple) -> tuple[Any, Any, str | None]:
    """``fn(*inputs)`` on fake copies of ``inputs``: (outputs, fake inputs, None), or what went wrong (outputs None
    and no error when fake tensors cannot shape the call: a data-dependent output, an op with no meta kernel)."""
    mode = fake_mode()
    try:
        with mode:
            fake_in = to_fake(mode, inputs)
            out = fn(*fake_in)
        torch.tt.synchronize()  # a kernel that queued work on the fake tensors fails here
    except (DynamicOutputShapeException, DataDependentOutputException, UnsupportedOperatorException):
        return None, None, None
    except Exception as e:
        with contextlib.suppress(Exception):
            torch.tt.synchronize()
        return None, None, f"{type(e).__name__}: {e}"[:300]
    return out, fake_in, None


def float_leaves(x: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _grad_step(fn: Any) -> Any:
    """``fn`` followed by the gradients of its floating outputs with respect to its floating inputs."""

    def run(inp: Any, args: Any, kwargs: Any) -> Any:
        ins = [t for t in float_leaves((inp, args, kwargs)) if t.requires_grad]
        outs = [o for o in float_leaves(fn(inp, *args, **kwargs)) if o.requires_grad]
        if not ins or not outs:
            return ()
        grads = torch.autograd.grad(outs, ins, [torch.ones_like(o) for o in outs], allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return run


def _out_tensors(result: Any, layout: str, resize: bool) -> Any:
    """``out=`` tensors for a result like ``result``: empty ones to be resized, or of its shapes in ``layout``."""

    def make(t: torch.Tensor) -> torch.Tensor:
        if resize:
            return torch.empty(0, dtype=t.dtype, device=DEV)
        return in_layout(torch.zeros(t.shape, dtype=t.dtype), layout)

    outs = [make(t) for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    return outs[0] if isinstance(result, torch.Tensor) else tuple(outs)


def check_sample(
    op: Any,
    sample: Any,
    layout: str,
    where: str,
    only: set[str] | None = None,
    form: str = "functional",
    like: Any = None,
) -> tuple[Report | None, Any]:
    """One OpInfo sample in ``layout`` and ``form`` (:data:`FORMS`) on tt: every tt kernel call checked against its
    fake, and the whole sample against a fake run of it (``out=`` forms: ``like`` is the functional form's result).
    Returns the report and the real outputs; the report is None
    when the sample does not run on tt in this form (a typed refusal, or any error: those are the OpInfo sweep's to
    judge; an in-place form the sample does not allow)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            inp = _tensors_on_tt(sample.input, layout)
            args = _tensors_on_tt(sample.args, layout)
            kwargs = _devices(_tensors_on_tt(sample.kwargs, layout))
        except (KohakuTTUnsupportedOperator, DtypeError):
            return None, None
        fn = op.op
        if form == "inplace":
            fn = op.inplace_variant
        elif form in ("out", "out-resize"):
            kwargs = {**kwargs, "out": _out_tensors(like, layout, form == "out-resize")}
        elif form == "grad":  # every floating input needs a gradient
            for t in float_leaves((inp, args, kwargs)):
                t.requires_grad_(True)
        elif form == "grad-input":  # only the first (frozen weights: backward kernels asked for some outputs only)
            for t in float_leaves(inp)[:1]:
                t.requires_grad_(True)
        call = _grad_step(fn) if form.startswith("grad") else (lambda i, a, k: fn(i, *a, **k))
        # the whole sample under fake tensors first (the real run may change its inputs)
        fake, fake_in, fake_error = _fake_run(call, (inp, args, kwargs))
        xref = CrossRefFake(where, only)
        torch.manual_seed(0)
        try:
            with xref:
                real = call(inp, args, kwargs)
            torch.tt.synchronize()
        except Exception:
            with contextlib.suppress(Exception):
                torch.tt.synchronize()
            return None, None
    rep = xref.report
    name = f"sample:{where.split(' ')[0]}"
    if fake_error is not None:
        rep.mismatches.append(Mismatch(name, "fake raises", fake_error, where))
    elif fake is not None:
        rep.samples[name] += 1
        rep.mismatches += compare_outputs(name, real, fake, (inp, args, kwargs), fake_in, where)
    return rep, real
