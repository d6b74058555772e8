"""Running an IR op on the mesh: placements in, the rule's decision, conversions, one op per chip, placements out.

``kohakutt.kernels.run`` hands an op here when its operands are :class:`MeshTensor` s. The operands' placements
come from their storages (a view that does not keep its storage's sharding is gathered first, logged); the rule
(``kohakutt.mesh.rules``) says what each operand must be and what the outputs are; conversions are queued as
collectives; then each chip runs the op on its parts, on its own stream. An output written into a storage that
already has a placement keeps it (the result is converted into it); an unplaced one takes the decision's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kohakutt.errors import KohakuTTError
from kohakutt.ir.dtypes import DType
from kohakutt.ir.numerics import UNSET, Numerics
from kohakutt.ir.ops import ScalarSpec, TensorSpec
from kohakutt.kernels import runner
from kohakutt.kernels.tensor import DeviceTensor
from kohakutt.mesh import collectives as coll
from kohakutt.mesh import layout, rules
from kohakutt.mesh import log as plog
from kohakutt.mesh.device import MeshDevice, MeshStream
from kohakutt.mesh.placement import Partial, Placement, Replicate, Sharded, split
from kohakutt.mesh.storage import Local, MeshStorage, MeshTensor, empty

SHARD_BYTES = 1 << 20  # the creation rule: storages of 1 MiB or more are sharded when created


class MeshError(KohakuTTError):
    """Something a mesh op cannot do (a chip tensor mixed with mesh tensors, say)."""


# ------------------------------------------------------------------------------------------------ creation


def creation_placement(st: MeshStorage) -> Placement:
    """The placement a storage takes when created whole: its hint (a mark, an ``empty_like`` input's), else 1 MiB or
    more sharded on its first dim of size >= 2 (evenly), else replicated."""
    if st.hint is not None:
        h = st.hint
        if isinstance(h, Sharded) and (not st.can_shard(h.dim) or sum(h.sizes) != st.physical[h.dim]):
            return Replicate()
        return h
    if st.nbytes >= SHARD_BYTES:
        p = next((i for i, n in enumerate(st.physical) if n >= 2), None)
        if p is not None and st.can_shard(p):
            return Sharded(p, split(st.physical[p], st.mesh.size))
    return Replicate()


def view_placement(t: MeshTensor, physical: Placement) -> Placement:
    """The placement view ``t`` would have if its storage were placed ``physical`` (Replicate when not aligned)."""
    if physical.__class__ is not Sharded:
        return physical
    st = t.storage
    if t.spec.dtype.itemsize != st.itemsize:
        return Replicate()
    got = layout.localize(t.spec.shape, t.strides, t.offset, st.physical, physical.dim, physical.sizes)
    if got is None:
        return Replicate()
    j, per = got
    return Sharded(j, tuple(v[0][j] for v in per))


def physical_for(t: MeshTensor, target: Sharded) -> Sharded | None:
    """A placement of ``t``'s storage under which view ``t`` is ``target``, or None."""
    st = t.storage
    if t.spec.dtype.itemsize != st.itemsize:
        return None
    parts = layout.split_view(t.spec.shape, t.strides, t.offset, st.physical)
    if parts is None:
        return None
    mine = [(n, s) for j, n, s in parts if j == target.dim]
    if not mine:
        return None
    B = layout.contiguous(st.physical)
    _, s0 = mine[0]
    q = next((i for i in range(len(B)) if B[i] <= s0 < B[i] * st.physical[i]), None)
    if q is None or s0 % B[q] or not st.can_shard(q):
        return None
    inner = 1
    for n, _ in mine[1:]:
        inner *= n
    if any(sz % inner for sz in target.sizes):
        return None
    m = s0 // B[q]
    coord = (t.offset // B[q]) % st.physical[q]
    k0 = coord + target.sizes[0] // inner * m
    if not 0 <= k0 <= st.physical[q] or len(target.sizes) != 2:
        return None
    cand = Sharded(q, (k0, st.physical[q] - k0))
    return cand if view_placement(t, cand) == target else None


_for_view: dict[tuple, Placement] = {}


def place_for_view(t: MeshTensor, target: Placement, stream: MeshStream) -> None:
    """Place ``t``'s unplaced storage so that view ``t`` is ``target`` (replicated when no placement does that)."""
    phys: Placement = target
    if isinstance(target, Sharded):
        st = t.storage
        key = (t.spec, t.strides, t.offset, st.physical, st.itemsize, target)
        got = _for_view.get(key)
        if got is None:
            if len(_for_view) >= 4096:
                _for_view.clear()
            got = _for_view[key] = physical_for(t, target) or Replicate()
        phys = got
    t.storage.place(phys, stream)


# ---------------------------------------------------------------------------------------------- conversions


def _raw_spec(st: MeshStorage) -> tuple[TensorSpec, Placement]:
    """The storage's whole bytes as a tensor of unsigned words of its element size (of its dtype when Partial:
    a sum needs the values), and its placement of them."""
    shape = list(st.physical) or [1]
    p = st.placement
    if isinstance(p, Partial):
        if st.dtype is None or st.dtype.itemsize != st.itemsize:
            raise MeshError(f"mesh storage {st.id} holds partial sums of unknown type; cannot add them")
        return TensorSpec(tuple(shape), st.dtype), p
    if st.itemsize == 8:  # two 32-bit words an element: the last dim doubles
        shape[-1] *= 2
        if isinstance(p, Sharded) and p.dim == len(shape) - 1:
            p = Sharded(p.dim, tuple(2 * s for s in p.sizes))
    dt = {1: DType.UINT8, 2: DType.UINT16, 4: DType.UINT32, 8: DType.UINT32}.get(st.itemsize, DType.UINT8)
    if st.itemsize not in (1, 2, 4, 8):
        shape = [st.nbytes]
        p = Replicate() if not isinstance(p, Sharded) else p
    assert p is not None
    return TensorSpec(tuple(shape), dt), p


def _storage_local(st: MeshStorage) -> Local:
    spec, p = _raw_spec(st)
    views = []
    for c, b in enumerate(st.buffers or ()):
        shape = list(spec.shape)
        if isinstance(p, Sharded):
            shape[p.dim] = p.sizes[c]
        views.append(DeviceTensor(b, spec.with_(shape=tuple(shape))))
    return Local(spec, p, tuple(views))


def gather_storage(st: MeshStorage, stream: MeshStream, why: str, log: list | None) -> tuple[Any, ...]:
    """The storage's whole bytes replicated, in new buffers (one per chip)."""
    src = _storage_local(st)
    temps: list[DeviceTensor] = []
    full = convert(src, Replicate(), st.mesh, stream, temps, f"storage {st.id}", log, why)
    return tuple(v.buffer for v in full.views)


def make_replicated(st: MeshStorage, stream: MeshStream, why: str, log: list | None) -> None:
    """Turn the storage itself into a replicated one (values unchanged): for a write it cannot take sharded."""
    if isinstance(st.placement, Replicate):
        return
    st._check_capture(why)
    bufs = gather_storage(st, stream, why, log)
    st.replace(Replicate(), bufs, stream, why)


def convert(
    x: Local,
    target: Placement,
    mesh: MeshDevice,
    stream: MeshStream,
    temps: list,
    name: str,
    log: list | None,
    why: str = "",
) -> Local:
    """``x`` redistributed to ``target``, by the collectives it takes (logged into ``log`` when given)."""
    src = x.placement
    if src == target:
        return x
    nb = x.spec.numel * x.spec.dtype.itemsize
    kind = ""
    if isinstance(src, Replicate) and isinstance(target, Sharded):
        out, kind = coll.narrow(x, target), "narrow (local)"
    elif isinstance(src, Sharded) and isinstance(target, Replicate):
        out, kind = coll.all_gather(x, mesh, stream, temps), "all_gather"
    elif isinstance(src, Partial) and isinstance(target, Replicate):
        out, kind = coll.all_reduce(x, mesh, stream, temps), "all_reduce"
    elif isinstance(src, Partial) and isinstance(target, Sharded):
        out, kind = coll.reduce_scatter(x, target, mesh, stream, temps), "reduce_scatter"
    elif isinstance(src, Sharded) and isinstance(target, Sharded):
        full = coll.all_gather(x, mesh, stream, temps)
        out, kind = coll.narrow(full, target), "all_gather + narrow"
    elif isinstance(target, Partial):
        full = convert(x, Replicate(), mesh, stream, temps, name, log, why) if not isinstance(src, Replicate) else x
        out, kind = _to_partial(full, mesh, stream, temps), "zero on the other chips (local)"
    else:
        raise MeshError(f"cannot convert {src} to {target}")
    if log is not None:
        moved = coll.link_bytes(src, target, nb)
        log.append(plog.Conversion(name, str(src), str(target), kind, int(moved), why))
    return out


def _to_partial(x: Local, mesh: MeshDevice, stream: MeshStream, temps: list) -> Local:
    views = [x.views[0]]
    for c in range(1, mesh.size):
        v = x.views[c]
        z = runner.run(
            "full",
            [],
            {"shape": v.spec.shape, "value": 0, "dtype": v.spec.dtype.value},
            device=mesh.chips[c],
            stream=stream.streams[c],
        )[0]
        temps.append(z)
        views.append(z)
    return Local(x.spec, Partial(), tuple(views))


# ---------------------------------------------------------------------------------------------- the executor


def _mesh_of(inputs: Sequence[Any], out: Sequence[Any] | None, device: Any) -> MeshDevice:
    if isinstance(device, MeshDevice):
        return device
    for x in (*inputs, *(out or ())):
        if isinstance(x, MeshTensor):
            return x.storage.mesh
    raise MeshError("a mesh op needs a mesh tensor operand or device=<the mesh>")


def _name(i: int, n_in: int) -> str:
    return f"input {i}" if i < n_in else f"output {i - n_in}"


def run(
    op: str,
    inputs: Sequence[Any],
    attrs: dict[str, Any] | None = None,
    *,
    out: Sequence[MeshTensor] | None = None,
    device: Any = None,
    stream: Any = None,
    defaults: Numerics = UNSET,
) -> list[MeshTensor]:
    """Queue IR op ``op`` on mesh tensors (and Python numbers); return its outputs (``out`` when given).
    ``defaults``: the calling frontend's numerics settings, passed to each chip's op (as ``kernels.run`` takes them)."""
    mesh = _mesh_of(inputs, out, device)
    mesh.check_open(op)
    ms = stream if isinstance(stream, MeshStream) else mesh.current_stream
    log: list | None = [] if plog.recording() else None
    temps: list[DeviceTensor] = []
    n_in = len(inputs)
    wants: list[Placement | None] = []
    prefers: list[Placement | None] = []
    for k, o in enumerate(out or ()):
        w, pref = _constraint(o, ms, log, _name(n_in + k, n_in))
        wants.append(w)
        prefers.append(pref)
    # outputs first: a storage a write makes replicated is read as such by the inputs that view it
    locs: list[Any] = []
    specs: list[Any] = []
    places: list[Placement | None] = []
    for i, x in enumerate(inputs):
        if isinstance(x, MeshTensor):
            loc = _read(x, ms, temps, log, _name(i, n_in))
            locs.append(loc)
            specs.append(x.spec)
            places.append(loc.placement)
        elif isinstance(x, DeviceTensor):
            raise MeshError(
                f"{op}: a tensor on chip {x.buffer.device.chip_id} is mixed with mesh tensors; move it "
                "to the mesh first (.to(mesh))"
            )
        else:
            locs.append(x)
            specs.append(ScalarSpec(x))
            places.append(None)
    dec, out_specs, bound = rules.decide(op, specs, places, attrs, wants, prefers, mesh.size, mesh.link, mesh.stats)
    if out is None:  # new outputs: nothing constrains them
        wants = [None] * len(out_specs)
        prefers = [None] * len(out_specs)
    elif len(out_specs) != len(out):
        raise MeshError(f"{op} has {len(out_specs)} output(s), got {len(out)} out tensors")  # type: ignore[arg-type]
    for i, need in enumerate(dec.inputs):
        if need is not None and locs[i].placement != need:
            x = inputs[i]
            if (
                isinstance(locs[i].placement, Partial)
                and isinstance(need, Replicate)
                and _settle(x, ms, log, _name(i, n_in))
            ):
                locs[i] = x.local()  # the storage itself is summed now: later reads of it cost nothing
                if locs[i].placement == need:
                    continue
            locs[i] = convert(locs[i], need, mesh, ms, temps, _name(i, n_in), log)
    programs = dec.programs
    computed = list(dec.outputs)
    if dec.regather:
        from kohakutt.ir import ops as irops

        stage = rules.Step(op, bound | {"keepdim": True}, tuple(range(len(locs))))
        kept = irops.infer(op, specs, bound | {"keepdim": True})  # each chip's result: size 1 on the reduced dims
        d = dec.inputs[0].dim  # type: ignore[union-attr]
        kept = [o.with_(shape=(*o.shape[:d], mesh.size, *o.shape[d + 1 :])) for o in kept]  # one per chip on d
        firsts = [_stage_out(mesh, ms, o, p, temps) for o, p in zip(kept, computed)]
        _run_programs(mesh, ms, ((stage,),) * mesh.size, locs, firsts, seed=None, defaults=defaults)
        locs = [
            convert(f, Replicate(), mesh, ms, temps, f"{op} partial result", log, "two-stage reduction") for f in firsts
        ]
        programs = ((rules.Step(op, bound, tuple(range(len(locs)))),),) * mesh.size
        computed = [Replicate() for _ in out_specs]
    results, targets, writes = _bind(mesh, ms, out, out_specs, computed, wants, prefers, dec.creates, temps)
    seed = None
    if dec.random:
        seed = runner.mesh_seed(mesh.chips[0], sum(s.numel for s in out_specs))
    whole = ((rules.Step(op, bound, tuple(range(len(locs)))),),) * mesh.size
    _run_programs(mesh, ms, programs or whole, locs, writes, seed=seed, defaults=defaults)
    for k, (got, tgt) in enumerate(zip(writes, targets)):
        if tgt is not None and got.placement != tgt.placement:
            conv = convert(
                got, tgt.placement, mesh, ms, temps, _name(n_in + k, n_in), log, "into the output's placement"
            )
            _copy_into(mesh, ms, conv, tgt, defaults)
    for t in temps:
        t.buffer.device.free(t.buffer, ms.streams[mesh.chips.index(t.buffer.device)])
    mesh.stats.ops += 1
    if dec.fallback:
        with mesh.stats.lock:
            mesh.stats.fallbacks[op] += 1
    if log is not None:
        plog.add(
            plog.PlacementRecord(
                op,
                tuple(str(p) if p is not None else "number" for p in places),
                tuple(str(t.placement if t is not None else w.placement) for t, w in zip(targets, writes)),
                tuple(log),
                dec.reason,
            )
        )
    return results


def _settle(x: MeshTensor, ms: MeshStream, log: list | None, name: str) -> bool:
    """Sum a Partial storage in place (all-reduce), so that it is read as replicated from now on. Not done for a
    view of part of it, nor inside a capture for a storage made before it (a replay would find it Partial)."""
    st = x.storage
    cap = st.mesh._capture
    if not x.covers_storage or (cap is not None and st.trace is not cap):
        return False
    make_replicated(st, ms, f"{name}: a Partial tensor is summed once, where it is first read", log)
    return True


def _read(x: MeshTensor, ms: MeshStream, temps: list, log: list | None, name: str) -> Local:
    st = x.storage
    if st._state != "live":
        st.check_live(name)
    if st.placement is None:  # read before written: memory with no values yet, placed as a creation would be
        st.place(creation_placement(st), ms)
    loc = x.local()
    if loc is not None:
        return loc
    bufs = gather_storage(st, ms, "the view does not keep its storage's sharding", log)
    temps.extend(DeviceTensor(b, TensorSpec((b.nbytes,), DType.UINT8)) for b in bufs)
    return Local(x.spec, Replicate(), tuple(DeviceTensor(b, x.spec, x.strides, x.offset) for b in bufs))


def _constraint(
    o: MeshTensor, ms: MeshStream, log: list | None, name: str
) -> tuple[Placement | None, Placement | None]:
    """What an output must end as (None: free) and, for an unplaced storage, the placement a creation gives it."""
    st = o.storage
    if st._state != "live":
        st.check_live(name)
    if st.placement is None:
        if o.covers_storage:
            return None, view_placement(o, creation_placement(st))
        st.place(creation_placement(st), ms)
    loc = o.local()
    if loc is None:
        make_replicated(st, ms, "a write through a view that does not keep the storage's sharding", log)
        loc = o.local()
    elif isinstance(loc.placement, Partial) and not o.covers_storage:
        make_replicated(st, ms, "a partial write into a Partial tensor", log)
        loc = o.local()
    assert loc is not None
    return loc.placement, None


def _bind(
    mesh: MeshDevice,
    ms: MeshStream,
    out: Sequence[MeshTensor] | None,
    out_specs: list[TensorSpec],
    computed: list[Placement],
    wants: list,
    prefers: list,
    creates: bool,
    temps: list,
) -> tuple[list[MeshTensor], list[Local | None], list[Local]]:
    """The op's results, and for each output: where the chips write (a Local in the computed placement) and, when
    that differs from the output's own placement, the output's Local to convert into afterwards."""
    results: list[MeshTensor] = []
    targets: list[Local | None] = []
    writes: list[Local] = []
    for k, (spec, comp) in enumerate(zip(out_specs, computed)):
        if out is None:
            place = prefers[k] if creates and prefers[k] is not None else comp
            if creates and isinstance(comp, Replicate) and spec.numel * spec.dtype.itemsize >= SHARD_BYTES:
                p = next((i for i, n in enumerate(spec.shape) if n >= 2), None)
                place = Sharded(p, split(spec.shape[p], mesh.size)) if p is not None else comp
            t = empty(mesh, spec, place, ms)
            t.storage.dtype = spec.dtype
            results.append(t)
            loc = t.local()
        else:
            t = out[k]
            results.append(t)
            if t.storage.placement is None:
                place_for_view(t, prefers[k] if creates and prefers[k] is not None else comp, ms)
            if isinstance(comp, Partial):
                t.storage.dtype = spec.dtype
            loc = t.local()
        assert loc is not None
        if loc.placement == comp:
            writes.append(loc)
            targets.append(None)
        else:
            tmp = _stage_out(mesh, ms, spec, comp, temps)
            writes.append(tmp)
            targets.append(loc)
    return results, targets, writes


def _stage_out(mesh: MeshDevice, ms: MeshStream, spec: TensorSpec, p: Placement, temps: list) -> Local:
    """A temporary Local of ``spec`` in ``p`` (freed after the op)."""
    views = []
    for c, dev in enumerate(mesh.chips):
        shape = list(spec.shape)
        if isinstance(p, Sharded):
            shape[p.dim] = p.sizes[c]
        v = coll.new_local(dev, spec.with_(shape=tuple(shape)), ms.streams[c])
        temps.append(v)
        views.append(v)
    return Local(spec, p, tuple(views))


def _run_programs(
    mesh: MeshDevice,
    ms: MeshStream,
    programs: Sequence[Sequence[rules.Step]],
    locs: list,
    writes: list[Local],
    seed: tuple[int, int] | None,
    defaults: Numerics = UNSET,
) -> None:
    for c, dev in enumerate(mesh.chips):
        outs = [w.views[c] for w in writes]
        if outs and all(0 in o.spec.shape for o in outs):
            continue  # this chip holds none of the outputs
        s = ms.streams[c]
        made: list[Any] = []
        prog = programs[c]
        for n, step in enumerate(prog):
            args = []
            for a in step.args:
                if isinstance(a, int):
                    x = locs[a]
                    args.append(x.views[c] if isinstance(x, Local) else x)
                elif a[0] == "t":
                    args.append(made[a[1]])
                else:
                    args.append(a[1])
            last = n == len(prog) - 1
            res = runner.run(
                step.op,
                args,
                step.attrs,
                out=outs if last else None,
                device=dev,
                stream=s,
                seed=seed,
                defaults=defaults,
            )
            if not last:
                made.append(res[0] if len(res) == 1 else res)
        for m in made:
            if isinstance(m, DeviceTensor):
                dev.free(m.buffer, s)


def _copy_into(mesh: MeshDevice, ms: MeshStream, src: Local, dst: Local, defaults: Numerics = UNSET) -> None:
    for c, dev in enumerate(mesh.chips):
        if dst.views[c].spec.numel:
            runner.run("copy", [src.views[c]], out=[dst.views[c]], device=dev, stream=ms.streams[c], defaults=defaults)
