"""Propagation: for an IR op and its operands' placements, what each operand must be, what each output is, and what
each chip runs. One rule per IR op family (a few ops have their own); ops without a rule are gathered.

A rule lists candidates: (placement each operand needs, placement of each output, the chips' programs). The
cheapest wins, measured in the card's time: the link time of the conversions the candidate needs (an all-gather
moves the other chip's shard, a reduction half or all of the tensor; a narrowing of a replicated tensor is free),
plus the compute it duplicates (a replicated output is computed whole on both chips: half the op's estimate is
wasted). So element-wise ops follow their most-sharded input, and tiny tensors stay replicated rather than pay a
collective's latency. Decisions are cached per (op, operand specs and placements, attributes, output constraints).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kohakutt.ir import ops as irops
from kohakutt.ir.numerics import resolve
from kohakutt.ir.ops import ScalarSpec, Spec, TensorSpec
from kohakutt.kernels import cost as kcost
from kohakutt.kernels import registry
from kohakutt.mesh.collectives import link_bytes
from kohakutt.mesh.placement import Partial, Placement, Replicate, Sharded, split

# ----------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Step:
    """One op a chip runs: ``args`` are operand indices (int), earlier steps' results (``("t", k)``) or numbers
    (``("v", x)``); the last step writes the outputs."""

    op: str
    attrs: dict[str, Any] | None
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Decision:
    inputs: tuple[Placement | None, ...]  # what each operand must be (None: a number)
    outputs: tuple[Placement, ...]
    programs: tuple[tuple[Step, ...], ...] | None  # per chip; None: the op itself, as called, on every chip
    reason: str
    fallback: bool = False  # no rule: inputs gathered
    creates: bool = False  # a creation: an unplaced output storage takes its creation placement, not ``outputs``
    random: bool = False  # draws random numbers: both chips draw the same (the whole tensor)
    regather: bool = False  # a two-stage reduction: the outputs are per-chip results to gather and reduce again
    cost_ns: float = 0.0


@dataclass
class Ctx:
    op: str
    opdef: irops.OpDef
    specs: list[Spec]
    places: list[Placement | None]
    attrs: dict[str, Any]
    outs: list[TensorSpec]
    wants: list[Placement | None]  # outputs written into placed storages: the placement they must end in
    prefers: list[Placement | None]  # unplaced output storages: their creation placement
    chips: int
    link_bps: float
    latency_ns: float
    compute_ns: float = field(default=0.0)

    def tensor(self, i: int) -> bool:
        return isinstance(self.specs[i], TensorSpec)

    def nbytes(self, spec: Spec) -> int:
        return spec.numel * spec.dtype.itemsize if isinstance(spec, TensorSpec) else 0

    def convert_ns(self, src: Placement | None, dst: Placement | None, spec: Spec) -> float:
        if src is None or dst is None or src == dst:
            return 0.0
        b = link_bytes(src, dst, self.nbytes(spec))
        if b == 0:
            return 0.0
        hops = 2 if isinstance(src, Partial) and isinstance(dst, Replicate) else 1
        return hops * self.latency_ns + b / self.link_bps * 1e9


Candidate = tuple[tuple[Placement | None, ...], tuple[Placement, ...], Any, str]  # needs, outs, programs, why


def _choose(ctx: Ctx, candidates: Sequence[Candidate], **flags: Any) -> Decision | None:
    best: tuple[float, int, Candidate] | None = None
    for order, cand in enumerate(candidates):
        needs, outs, _programs, _why = cand
        t = sum(ctx.convert_ns(ctx.places[i], n, ctx.specs[i]) for i, n in enumerate(needs))
        t += sum(ctx.convert_ns(o, w, s) for o, w, s in zip(outs, ctx.wants, ctx.outs))
        if outs and all(isinstance(o, Replicate) for o, s in zip(outs, ctx.outs) if s.numel > 1):
            t += ctx.compute_ns * (1 - 1 / ctx.chips)  # the whole op on every chip
        if best is None or t < best[0] - 1e-9:
            best = (t, order, cand)
    if best is None:
        return None
    needs, outs, programs, why = best[2]
    return Decision(tuple(needs), tuple(outs), programs, why, cost_ns=best[0], **flags)


def _even(n: int, chips: int) -> tuple[int, ...]:
    return split(n, chips)


def _sizes_for(ctx: Ctx, n: int, *sources: Placement | None) -> tuple[int, ...]:
    """Split sizes for a dim of size ``n``: those of the first placement given that splits a dim of that size."""
    for p in sources:
        if isinstance(p, Sharded) and sum(p.sizes) == n:
            return p.sizes
    return _even(n, ctx.chips)


def _out_wants_sharded(ctx: Ctx) -> list[Placement]:
    return [w for w in (*ctx.wants, *ctx.prefers) if isinstance(w, Sharded)]


# ---------------------------------------------------------------------------------------------- pointwise


def pointwise(ctx: Ctx, excluded: Sequence[int] = (), partial_ok: bool = False) -> Decision | None:
    """Broadcasting element-wise ops: the output follows the most-sharded input; ``excluded`` output dims (an op
    that works along them) are never sharded."""
    out = ctx.outs[0]
    R = len(out.shape)
    excl = {d % R for d in excluded} if R else set()
    tensors = [i for i in range(len(ctx.specs)) if ctx.tensor(i)]

    def need_for(i: int, c: Placement) -> Placement:
        if isinstance(c, Sharded):
            s = ctx.specs[i]
            d = c.dim - (R - s.ndim)
            if d < 0 or s.shape[d] == 1:
                return Replicate()
            return Sharded(d, c.sizes)
        return Replicate()

    cands: list[Placement] = [Replicate()]
    for i in tensors:
        p, s = ctx.places[i], ctx.specs[i]
        if isinstance(p, Sharded) and s.shape[p.dim] > 1:
            od = p.dim + (R - s.ndim)
            if od not in excl and out.shape[od] == s.shape[p.dim]:
                cands.append(Sharded(od, p.sizes))
    for w in _out_wants_sharded(ctx):
        if w.dim < R and w.dim not in excl and sum(w.sizes) == out.shape[w.dim]:
            cands.append(w)
    seen: list[Candidate] = []
    for c in dict.fromkeys(cands):
        needs = tuple(need_for(i, c) if ctx.tensor(i) else None for i in range(len(ctx.specs)))
        seen.append((needs, tuple(c for _ in ctx.outs), None, f"element-wise: output {c}"))
    if partial_ok:
        seen.append(_partial_linear(ctx))
    seen = [s for s in seen if s is not None]
    return _choose(ctx, seen)


def _partial_linear(ctx: Ctx) -> Candidate | None:
    """Ops linear in a ``Partial`` operand keep it ``Partial``: ``a + b`` / ``a - b`` of two partial sums, ``-a``,
    ``a * r`` and ``a / r`` with ``r`` replicated (or a number)."""
    tensors = [i for i in range(len(ctx.specs)) if ctx.tensor(i)]
    parts = [i for i in tensors if isinstance(ctx.places[i], Partial)]
    if not parts or any(ctx.specs[i].shape != ctx.outs[0].shape for i in parts):
        return None
    op = ctx.op
    scalars = [i for i in range(len(ctx.specs)) if not ctx.tensor(i)]
    if op in ("add", "sub"):
        if scalars or len(parts) != len(tensors):
            return None
    elif op in ("mul", "div"):
        if len(parts) != 1 or (op == "div" and parts[0] != 0):
            return None
    elif op not in ("neg", "copy"):
        return None
    needs = tuple((Partial() if i in parts else Replicate()) if ctx.tensor(i) else None for i in range(len(ctx.specs)))
    return needs, (Partial(),), None, "linear in a Partial operand: stays Partial"


# ---------------------------------------------------------------------------------------------- matmul


def matmul(ctx: Ctx) -> Decision | None:
    """``a @ b`` with batch dims: rows, columns or batches sharded give sharded outputs; a contracting dim sharded
    on both sides gives Partial (a bias is then added on chip 0 only)."""
    op, a = ctx.op, ctx.attrs
    S = ctx.specs
    bias = None
    if op in ("matmul", "bmm"):
        ia, ib = 0, 1
    elif op == "linear":
        ia, ib = 0, 1
        bias = 2 if len(S) > 2 else None
    elif op in ("addmm", "baddbmm"):
        ia, ib, bias = 1, 2, 0
    elif op == "outer":
        ia, ib = 0, 1
    else:
        return None
    sa, sb, out = S[ia], S[ib], ctx.outs[0]
    R = out.ndim
    # roles: operand dim -> ("b"/"m"/"n", out dim) or ("k", None)
    if op == "outer":
        ra = {0: ("m", 0)}
        rb = {0: ("n", 1)}
    elif op == "linear":
        ra = {d: ("m", d) for d in range(sa.ndim - 1)} | {sa.ndim - 1: ("k", None)}
        kd, nd = (1, 0) if a["transpose_w"] else (0, 1)
        rb = {kd: ("k", None), nd: ("n", R - 1)}
    else:
        if sa.ndim < 2 or sb.ndim < 2:
            return None
        ra = {d: ("b", d + (R - sa.ndim)) for d in range(sa.ndim - 2)}
        ra |= {sa.ndim - 2: ("m", R - 2), sa.ndim - 1: ("k", None)}
        rb = {d: ("b", d + (R - sb.ndim)) for d in range(sb.ndim - 2)}
        rb |= {sb.ndim - 2: ("k", None), sb.ndim - 1: ("n", R - 1)}

    def dim_for(roles: dict, s: TensorSpec, od: int) -> int | None:
        for d, (_r, o) in roles.items():
            if o == od and s.shape[d] > 1:
                return d
        return None

    def bias_need(c: Placement) -> Placement | None:
        if bias is None:
            return None
        s = S[bias]
        if not isinstance(s, TensorSpec):
            return None
        if isinstance(c, Sharded):
            d = c.dim - (R - s.ndim)
            return Replicate() if d < 0 or s.shape[d] == 1 else Sharded(d, c.sizes)
        return Replicate()

    def needs_of(pa: Placement, pb: Placement, c: Placement) -> tuple:
        n: list[Placement | None] = [Replicate() if ctx.tensor(i) else None for i in range(len(S))]
        n[ia], n[ib] = pa, pb
        if bias is not None:
            n[bias] = bias_need(c)
        return tuple(n)

    cands: list[Candidate] = [
        (needs_of(Replicate(), Replicate(), Replicate()), (Replicate(),), None, "matmul: all replicated")
    ]
    want_s = _out_wants_sharded(ctx)
    for od in range(R):
        da, db = dim_for(ra, sa, od), dim_for(rb, sb, od)
        if da is None and db is None:
            continue
        sizes = _sizes_for(
            ctx,
            out.shape[od],
            *(
                ctx.places[ia] if isinstance(ctx.places[ia], Sharded) and ctx.places[ia].dim == da else None,
                ctx.places[ib] if isinstance(ctx.places[ib], Sharded) and ctx.places[ib].dim == db else None,
            ),
            *[w for w in want_s if w.dim == od],
        )
        pa = Sharded(da, sizes) if da is not None else Replicate()
        pb = Sharded(db, sizes) if db is not None else Replicate()
        c = Sharded(od, sizes)
        role = (ra.get(da) or rb.get(db))[0]
        cands.append(
            (
                needs_of(pa, pb, c),
                (c,),
                None,
                f"matmul: sharded {'rows' if role == 'm' else 'columns' if role == 'n' else 'batch'} "
                f"give a sharded output",
            )
        )
    ka = next(d for d, (r, _) in ra.items() if r == "k") if op != "outer" else None
    kb = next(d for d, (r, _) in rb.items() if r == "k") if op != "outer" else None
    if ka is not None and sa.shape[ka] > 1:
        sizes = _sizes_for(
            ctx,
            sa.shape[ka],
            *(p for p, d in ((ctx.places[ia], ka), (ctx.places[ib], kb)) if isinstance(p, Sharded) and p.dim == d),
        )
        progs = _partial_programs(ctx, ia, ib, bias)
        cands.append(
            (
                needs_of(Sharded(ka, sizes), Sharded(kb, sizes), Partial()),
                (Partial(),),
                progs,
                "matmul: the contracting dim is sharded on both sides: Partial",
            )
        )
    return _choose(ctx, cands)


def _partial_programs(ctx: Ctx, ia: int, ib: int, bias: int | None) -> Any:
    """Per-chip programs for a Partial product: the bias (addmm's ``beta * input``) is added on chip 0 only."""
    if bias is None or not ctx.tensor(bias):
        return None
    n = len(ctx.specs)
    allargs = tuple(range(n))
    first = (Step(ctx.op, ctx.attrs, allargs),)
    if ctx.op == "linear":
        rest = (Step("linear", ctx.attrs, (ia, ib)),)
    else:  # addmm / baddbmm: beta = 0 ignores the input
        rest = (Step(ctx.op, ctx.attrs | {"beta": 0.0}, allargs),)
    return (first,) + (rest,) * (ctx.chips - 1)


# ---------------------------------------------------------------------------------------------- reductions

_PARTIAL_REDUCE = {"sum", "count_nonzero"}
_TWO_STAGE = {"prod", "max", "min", "amax", "amin", "all", "any", "logsumexp"}
_SCAN = {"cumsum", "cumprod"}
_BY_DIM = {"argmax", "argmin", "max_with_indices", "min_with_indices"}


def reduce(ctx: Ctx) -> Decision | None:
    op, a = ctx.op, ctx.attrs
    s = ctx.specs[0]
    if not isinstance(s, TensorSpec):
        return None
    nd = s.ndim
    if op in _SCAN or op in _BY_DIM:
        dim = a.get("dim")
        if dim is None:
            return _choose(ctx, [((Replicate(),), tuple(Replicate() for _ in ctx.outs), None, f"{op} over all dims")])
        dims = (irops.norm_dim(dim, nd, op),)
        keep = op in _SCAN or bool(a.get("keepdim"))
    else:
        dims = irops.norm_dims(a.get("dims"), nd, op)
        keep = bool(a.get("keepdim"))

    def out_dim(d: int) -> int:
        return d if keep else d - sum(1 for r in dims if r < d)

    cands: list[Candidate] = [((Replicate(),), tuple(Replicate() for _ in ctx.outs), None, f"{op}: replicated")]
    p = ctx.places[0]
    kept = [d for d in range(nd) if d not in dims and s.shape[d] > 1]
    shard_dims = {d for d in kept}
    if isinstance(p, Sharded):
        shard_dims.add(p.dim)
    for w in _out_wants_sharded(ctx):
        for d in kept:
            if out_dim(d) == w.dim:
                shard_dims.add(d)
    for d in sorted(shard_dims):
        sizes = _sizes_for(ctx, s.shape[d], p if isinstance(p, Sharded) and p.dim == d else None)
        need = Sharded(d, sizes)
        if d not in dims:
            outs = tuple(
                Sharded(out_dim(d), sizes) if o.ndim == (nd if keep else nd - len(dims)) and o.numel else Replicate()
                for o in ctx.outs
            )
            cands.append(((need,), outs, None, f"{op} over other dims: the sharding moves with the kept dims"))
        elif op in _PARTIAL_REDUCE:
            cands.append(((need,), (Partial(),), None, f"{op} over the sharded dim: Partial"))
        elif op == "mean":
            count = 1
            for r in dims:
                count *= s.shape[r]
            sum_attrs = {"dims": a.get("dims"), "keepdim": a.get("keepdim"), "dtype": a.get("dtype")}
            prog = (Step("sum", sum_attrs, (0,)), Step("mul", None, (("t", 0), ("v", 1.0 / count))))
            cands.append(
                (
                    (need,),
                    (Partial(),),
                    (prog,) * ctx.chips,
                    "mean over the sharded dim: local sums scaled by the global count, Partial",
                )
            )
        elif op in _TWO_STAGE:
            cands.append(
                (
                    (need,),
                    tuple(Replicate() for _ in ctx.outs),
                    None,
                    f"{op} over the sharded dim: reduced on each chip, the two results gathered and reduced",
                )
            )
    if isinstance(p, Partial) and op == "sum":
        cands.append(((Partial(),), (Partial(),), None, "sum of a Partial: Partial"))
    dec = _choose(ctx, cands)
    if dec is not None and isinstance(dec.inputs[0], Sharded) and dec.inputs[0].dim in dims and op in _TWO_STAGE:
        dec = Decision(
            dec.inputs,
            tuple(Sharded(dec.inputs[0].dim, (1,) * ctx.chips) for _ in ctx.outs),
            None,
            dec.reason,
            regather=True,
            cost_ns=dec.cost_ns,
        )
    return dec


# ---------------------------------------------------------------------------------------------- by family


def along(ctx: Ctx, dims: Sequence[int]) -> Decision | None:
    return pointwise(ctx, excluded=dims)


def softmax(ctx: Ctx) -> Decision | None:
    return pointwise(ctx, excluded=(ctx.attrs.get("dim", -1),))


def _batch_like(
    ctx: Ctx,
    x: int,
    shardable: Sequence[int],
    batch: set[int],
    partial_outs: set[int],
    why: str,
    broadcast: set[int] = frozenset(),
) -> Decision | None:  # type: ignore[assignment]
    """Ops independent along ``shardable`` dims of operand ``x`` (norms, conv / pool batches, attention heads): the
    ``batch`` operands are sharded with it (``broadcast`` ones too where their dim is not 1), the others (parameters)
    replicated; outputs are sharded with it, except ``partial_outs`` (a backward's parameter gradients: sums over
    the batch, so Partial)."""
    sx = ctx.specs[x]
    reps = tuple(Replicate() if ctx.tensor(i) else None for i in range(len(ctx.specs)))
    cands: list[Candidate] = [(reps, tuple(Replicate() for _ in ctx.outs), None, f"{why}: replicated")]
    for d in sorted(d for d in shardable if sx.shape[d] > 1):
        sizes = _sizes_for(
            ctx,
            sx.shape[d],
            *(ctx.places[i] for i in sorted(batch) if isinstance(ctx.places[i], Sharded) and ctx.places[i].dim == d),
        )
        needs: list[Placement | None] = list(reps)
        ok = True
        for i in batch | broadcast:
            s = ctx.specs[i] if i < len(ctx.specs) else None
            if not isinstance(s, TensorSpec):
                continue
            if s.ndim != sx.ndim or (s.shape[d] != sx.shape[d] and not (i in broadcast and s.shape[d] == 1)):
                ok = False
                break
            needs[i] = Sharded(d, sizes) if s.shape[d] == sx.shape[d] else Replicate()
        outs = []
        for k, o in enumerate(ctx.outs):
            if o.numel == 0:
                outs.append(Replicate())
            elif k in partial_outs:
                outs.append(Partial())
            elif o.ndim > d and o.shape[d] == sx.shape[d]:
                outs.append(Sharded(d, sizes))
            else:
                ok = False
        if ok:
            cands.append((tuple(needs), tuple(outs), None, f"{why}: dim {d} stays sharded"))
    return _choose(ctx, cands)


_NORM_OPERANDS = {  # op -> (the input x, the operands sharded with it, how many outputs are not parameter-shaped)
    "layer_norm": (0, {0}, 3), "rms_norm": (0, {0}, 2), "add_layer_norm": (0, {0, 1}, 4),
    "add_rms_norm": (0, {0, 1}, 3), "layer_norm_backward": (1, {0, 1, 2, 3}, 1),
    "rms_norm_backward": (1, {0, 1, 2}, 1), "group_norm": (0, {0}, 3), "group_norm_backward": (1, {0, 1, 2, 3}, 1),
}  # fmt: skip


def norm(ctx: Ctx) -> Decision | None:
    op = ctx.op
    if op not in _NORM_OPERANDS:
        return None  # batch norm: statistics over the batch
    x, batch, sharded_outs = _NORM_OPERANDS[op]
    sx = ctx.specs[x]
    if op.startswith("group_norm"):
        shardable: Sequence[int] = (0,)
    else:
        from kohakutt.ir.defs.norm import normalized

        shardable = range(normalized(sx.shape, ctx.attrs.get("normalized_shape"), op))
    partial = set(range(sharded_outs, len(ctx.outs))) if op.endswith("_backward") else set()
    return _batch_like(ctx, x, shardable, batch, partial, f"{op}: the normalized dims stay whole")


def attention(ctx: Ctx) -> Decision | None:
    if ctx.attrs.get("dropout_p"):
        return None
    if ctx.op == "scaled_dot_product_attention":
        q, batch, n = 0, {0, 1, 2}, 3
    elif ctx.op == "sdpa_backward":
        q, batch, n = 1, {0, 1, 2, 3, 4, 5}, 6
    else:
        return None
    sq, sk = ctx.specs[q], ctx.specs[q + 1]
    shardable = [d for d in range(sq.ndim - 2) if sk.ndim == sq.ndim and sk.shape[d] == sq.shape[d]]
    masks = set(range(n, len(ctx.specs)))
    return _batch_like(ctx, q, shardable, batch, set(), "attention: batch and head dims", masks)


def conv(ctx: Ctx) -> Decision | None:
    if ctx.op == "conv":
        return _batch_like(ctx, 0, (0,), {0}, set(), "conv: the batch dim")
    return _batch_like(ctx, 1, (0,), {0, 1}, {1, 2}, "conv backward: the batch dim")


def pool(ctx: Ctx) -> Decision | None:
    x = 1 if ctx.op.endswith("_backward") else 0
    sx = ctx.specs[x]
    every = {i for i in range(len(ctx.specs)) if ctx.tensor(i)}
    return _batch_like(ctx, x, (0, 1) if sx.ndim >= 3 else (0,), every, set(), f"{ctx.op}: batch and channels")


def embedding(ctx: Ctx) -> Decision | None:
    if ctx.op == "embedding":
        w, idx = ctx.specs[0], ctx.specs[1]
        out = ctx.outs[0]
        cands: list[Candidate] = [((Replicate(), Replicate()), (Replicate(),), None, "embedding: replicated")]
        for d in range(idx.ndim):
            if idx.shape[d] > 1:
                sizes = _sizes_for(ctx, idx.shape[d], ctx.places[1])
                cands.append(
                    (
                        (Replicate(), Sharded(d, sizes)),
                        (Sharded(d, sizes),),
                        None,
                        "embedding: the indices' sharding goes to the output",
                    )
                )
        if w.shape[1] > 1:
            sizes = _sizes_for(
                ctx,
                w.shape[1],
                ctx.places[0] if isinstance(ctx.places[0], Sharded) and ctx.places[0].dim == 1 else None,
            )
            cands.append(
                (
                    (Sharded(1, sizes), Replicate()),
                    (Sharded(out.ndim - 1, sizes),),
                    None,
                    "embedding: the table's columns are sharded: so is the output's last dim",
                )
            )
        return _choose(ctx, cands)
    if ctx.op == "embedding_backward":
        g, idx = ctx.specs[0], ctx.specs[1]
        cands = [((Replicate(), Replicate()), (Replicate(),), None, "embedding backward: replicated")]
        for d in range(idx.ndim):
            if idx.shape[d] > 1:
                sizes = _sizes_for(ctx, idx.shape[d], ctx.places[1], ctx.places[0])
                cands.append(
                    (
                        (Sharded(d, sizes), Sharded(d, sizes)),
                        (Partial(),),
                        None,
                        "embedding backward over sharded indices: the table gradient is Partial",
                    )
                )
        if g.shape[-1] > 1:
            sizes = _sizes_for(ctx, g.shape[-1], ctx.places[0])
            cands.append(
                (
                    (Sharded(g.ndim - 1, sizes), Replicate()),
                    (Sharded(1, sizes),),
                    None,
                    "embedding backward with the feature dim sharded",
                )
            )
        return _choose(ctx, cands)
    return None


def creation(ctx: Ctx) -> Decision | None:
    """``full`` / ``zeros`` / ``ones`` are written where the output is placed (each chip its own part); ``arange``,
    ``linspace`` and ``eye`` are computed whole on both chips and narrowed."""
    target = ctx.wants[0] or ctx.prefers[0] or Replicate()
    if ctx.op in ("full", "zeros", "ones") and not isinstance(target, Partial):
        progs = []
        for c in range(ctx.chips):
            shape = list(ctx.attrs["shape"])
            if isinstance(target, Sharded):
                shape[target.dim] = target.sizes[c]
            progs.append((Step(ctx.op, ctx.attrs | {"shape": tuple(shape)}, ()),))
        return Decision((), (target,), tuple(progs), f"{ctx.op}: written in place as {target}")
    if ctx.op in ("full", "zeros", "ones"):  # into a Partial storage: the value on chip 0, zeros elsewhere
        zero = ctx.attrs | ({"value": 0} if ctx.op == "full" else {})
        first = (Step(ctx.op, ctx.attrs, ()),)
        rest = (
            (Step("full" if ctx.op == "full" else "zeros", zero, ()),)
            if ctx.op != "ones"
            else (
                Step(
                    "full",
                    {
                        "shape": ctx.attrs["shape"],
                        "value": 0,
                        "dtype": ctx.attrs["dtype"],
                        "layout": ctx.attrs["layout"],
                    },
                    (),
                ),
            )
        )
        return Decision((), (Partial(),), (first,) + (rest,) * (ctx.chips - 1), f"{ctx.op} into a Partial tensor")
    return Decision(
        tuple(Replicate() if ctx.tensor(i) else None for i in range(len(ctx.specs))),
        tuple(Replicate() for _ in ctx.outs),
        None,
        f"{ctx.op}: computed whole, then narrowed",
        creates=True,
    )


def random(ctx: Ctx) -> Decision | None:
    return Decision(
        tuple(Replicate() if ctx.tensor(i) else None for i in range(len(ctx.specs))),
        tuple(Replicate() for _ in ctx.outs),
        None,
        f"{ctx.op}: both chips draw the whole tensor from the mesh's random stream, then keep their part",
        creates=True,
        random=True,
    )


def movement(ctx: Ctx) -> Decision | None:
    op, a = ctx.op, ctx.attrs
    s = ctx.specs[0] if ctx.specs else None
    if op in ("masked_fill",):
        return pointwise(ctx)
    if op in ("tril", "triu"):
        return along(ctx, (-1, -2))
    if op in ("flip", "roll"):
        return along(ctx, irops.norm_dims(a.get("dims"), s.ndim, op) if a.get("dims") is not None else range(s.ndim))
    if op in ("expand", "broadcast_to"):
        return pointwise(ctx)
    if op in ("slice",):
        return _same_attrs_excluding(ctx, (irops.norm_dim(a["dim"], s.ndim, op),), lambda d: d)
    if op == "select":
        sel = irops.norm_dim(a["dim"], s.ndim, op)
        return _same_attrs_excluding(ctx, (sel,), lambda d: d - (d > sel))
    if op == "permute":
        perm = [irops.norm_dim(d, s.ndim, op) for d in a["dims"]]
        return _same_attrs_excluding(ctx, (), lambda d: perm.index(d))
    if op == "transpose":
        d0, d1 = irops.norm_dim(a["dim0"], s.ndim, op), irops.norm_dim(a["dim1"], s.ndim, op)
        return _same_attrs_excluding(ctx, (), lambda d: d1 if d == d0 else d0 if d == d1 else d)
    if op in ("concat", "stack"):
        out = ctx.outs[0]
        cd = irops.norm_dim(a["dim"], out.ndim if op == "stack" else s.ndim, op)
        return _concat(ctx, cd, op == "stack")
    if op in ("index_select",):
        return _same_attrs_excluding(ctx, (irops.norm_dim(a["dim"], s.ndim, op),), lambda d: d, only=(0,))
    if op in ("gather",):
        return _gather(ctx, irops.norm_dim(a["dim"], s.ndim, op))
    return None


def _same_attrs_excluding(
    ctx: Ctx, excluded: Sequence[int], out_dim: Callable[[int], int], only: Sequence[int] = (0,)
) -> Decision | None:
    """Ops whose attributes do not depend on where a dim is cut (slicing, selecting or permuting other dims): the
    sharding of operand 0 moves to ``out_dim``; ``excluded`` dims are never sharded."""
    s = ctx.specs[0]
    p = ctx.places[0]
    reps = tuple(Replicate() if ctx.tensor(i) else None for i in range(len(ctx.specs)))
    cands: list[Candidate] = [(reps, tuple(Replicate() for _ in ctx.outs), None, f"{ctx.op}: replicated")]
    dims = {d for d in range(s.ndim) if d not in excluded and s.shape[d] > 1}
    for d in sorted(dims):
        od = out_dim(d)
        if ctx.outs[0].shape[od] != s.shape[d]:
            continue
        sizes = _sizes_for(
            ctx,
            s.shape[d],
            p if isinstance(p, Sharded) and p.dim == d else None,
            *[w for w in _out_wants_sharded(ctx) if w.dim == od],
        )
        needs = tuple(
            (Sharded(d, sizes) if i in only else Replicate()) if ctx.tensor(i) else None for i in range(len(ctx.specs))
        )
        cands.append((needs, (Sharded(od, sizes),), None, f"{ctx.op}: dim {d} stays sharded as dim {od}"))
    return _choose(ctx, cands)


def _concat(ctx: Ctx, cd: int, stack: bool) -> Decision | None:
    s0 = ctx.specs[0]
    reps = tuple(Replicate() for _ in ctx.specs)
    cands: list[Candidate] = [(reps, (Replicate(),), None, f"{ctx.op}: replicated")]
    for d in range(s0.ndim):
        if (not stack and d == cd) or any(sp.shape[d] != s0.shape[d] for sp in ctx.specs) or s0.shape[d] < 2:
            continue
        od = d + (1 if stack and d >= cd else 0)
        sizes = _sizes_for(ctx, s0.shape[d], *ctx.places)
        cands.append(
            (
                tuple(Sharded(d, sizes) for _ in ctx.specs),
                (Sharded(od, sizes),),
                None,
                f"{ctx.op} along another dim: dim {d} stays sharded",
            )
        )
    return _choose(ctx, cands)


def _gather(ctx: Ctx, dim: int) -> Decision | None:
    x, idx = ctx.specs[0], ctx.specs[1]
    cands: list[Candidate] = [((Replicate(), Replicate()), (Replicate(),), None, "gather: replicated")]
    for d in range(idx.ndim):
        if d == dim or idx.shape[d] < 2 or x.shape[d] != idx.shape[d]:
            continue
        sizes = _sizes_for(ctx, idx.shape[d], *ctx.places)
        cands.append(
            (
                (Sharded(d, sizes), Sharded(d, sizes)),
                (Sharded(d, sizes),),
                None,
                f"gather along another dim: dim {d} stays sharded",
            )
        )
    return _choose(ctx, cands)


def gather_all(ctx: Ctx, why: str) -> Decision:
    """No rule (or none that applies): every input replicated, the op run whole on each chip."""
    return Decision(
        tuple(Replicate() if ctx.tensor(i) else None for i in range(len(ctx.specs))),
        tuple(Replicate() for _ in ctx.outs),
        None,
        why,
        fallback=True,
    )


_FUSED_ALONG = {"swiglu": "dim", "swiglu_backward": "dim"}


def fused(ctx: Ctx) -> Decision | None:
    if ctx.op in _FUSED_ALONG:
        return along(ctx, (ctx.attrs.get(_FUSED_ALONG[ctx.op], -1),))
    if ctx.op.startswith("rotary_embedding"):
        return along(ctx, (-1,))
    if ctx.op == "bias_gelu_backward":
        return pointwise(ctx)
    return pointwise(ctx)


def elementwise(ctx: Ctx) -> Decision | None:
    return pointwise(ctx, partial_ok=ctx.op in ("add", "sub", "mul", "div", "neg"))


def core(ctx: Ctx) -> Decision | None:
    return pointwise(ctx, partial_ok=ctx.op == "copy")


FAMILY_RULES: dict[str, Callable[[Ctx], Decision | None]] = {
    "elementwise": elementwise, "core": core, "fused": fused, "matmul": matmul, "reduce": reduce,
    "softmax": softmax, "norm": norm, "attention": attention, "conv": conv, "pool": pool, "embedding": embedding,
    "creation": creation, "random": random, "movement": movement,
}  # fmt: skip


# ---------------------------------------------------------------------------------------------- the cache

_cache: dict[Any, Decision] = {}
CACHE_SIZE = 8192


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple((k, _freeze(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return (type(v), *(_freeze(x) for x in v))
    if isinstance(v, float) and v != v:
        return "nan"
    return (type(v), v)


def decide(
    op: str,
    specs: Sequence[Spec],
    places: Sequence[Placement | None],
    attrs: dict[str, Any] | None,
    wants: Sequence[Placement | None],
    prefers: Sequence[Placement | None],
    chips: int,
    link: Any,
    stats: Any = None,
) -> tuple[Decision, list[TensorSpec], dict[str, Any]]:
    """The decision for ``op`` on operands of ``specs`` placed ``places`` (cached), the global output specs and
    the bound attributes."""
    key = (op, tuple(specs), tuple(places), _freeze(attrs) if attrs else None, tuple(wants), tuple(prefers))
    try:
        hit = _cache.get(key)
    except TypeError:
        key, hit = None, None
    if hit is not None:
        if stats is not None:
            stats.decisions["hit"] += 1
        return hit
    d = irops.get(op)
    bound = d.bind_attrs(attrs)
    outs = d.infer(list(specs), bound)
    n = len(outs)
    wants, prefers = (list(wants) + [None] * n)[:n], (list(prefers) + [None] * n)[:n]
    ctx = Ctx(
        op,
        d,
        list(specs),
        list(places),
        bound,
        list(outs),
        list(wants),
        list(prefers),
        chips,
        link.bytes_per_s,
        link.latency_s * 1e9,
    )
    ctx.compute_ns = _compute_ns(op, d, list(specs), outs, bound)
    rule = FAMILY_RULES.get(d.family)
    impl = registry.lookup(op, "sim")
    dec = None
    if impl is not None and impl.random and d.family != "random":
        dec = (
            gather_all(ctx, f"{op} draws random numbers: computed whole on both chips")
            if not all(p is None or isinstance(p, Replicate) for p in places)
            else random(ctx)
        )
        dec = Decision(dec.inputs, dec.outputs, None, dec.reason, dec.fallback, True, True)
    elif rule is not None:
        dec = rule(ctx)
    if dec is None:
        dec = gather_all(
            ctx,
            f"no rule for {d.family} op {op} with these placements: inputs gathered"
            if rule is not None
            else f"no rule for {d.family} op {op}: inputs gathered",
        )
    if stats is not None:
        stats.decisions["miss"] += 1
    if key is not None:
        if len(_cache) >= CACHE_SIZE:
            _cache.clear()
        _cache[key] = (dec, list(outs), bound)  # type: ignore[assignment]
    return dec, list(outs), bound


def _compute_ns(op: str, d: irops.OpDef, specs: list[Spec], outs: list[TensorSpec], attrs: dict[str, Any]) -> float:
    from kohakutt.hal.card import P150A

    impl = registry.lookup(op, "sim")
    try:
        est = impl.estimate if impl is not None and impl.estimate else kcost.default
        return float(est(specs, outs, attrs, resolve(d.numerics), P150A))
    except Exception:  # an estimate is only a tie-breaker here
        return 0.0


def clear_cache() -> None:
    _cache.clear()


__all__ = ["Decision", "ScalarSpec", "Step", "clear_cache", "decide"]
