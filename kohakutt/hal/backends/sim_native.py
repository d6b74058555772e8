"""Running a :class:`~kohakutt.hal.program.Program` from its kernels' C++ in the simulator.

Each kernel's source is built against the host build of TT-Metal 0.81.1's kernel API (``kohakutt.hal.host_build``,
cached), then one call into the simulator core (``native/kernel_api/sim``) runs the program: every kernel of a core
as a thread, circular buffers that block, semaphores, the NOC between L1 and the buffers' banks, the tile registers
with the card's arithmetic, and the card's rules checked at every call. The cores run one after another, or all
together when the program has semaphores (they may then wait on each other). A broken rule, a deadlock or a stall
raises the ProgramError the core reports, naming the kernel, the call, the core and the kernel's file and line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kohakutt.errors import ProgramError
from kohakutt.hal import host_build
from kohakutt.hal.backends import sim_program
from kohakutt.hal.card import P150A, CardSpec
from kohakutt.hal.layout import Format, MemoryKind
from kohakutt.hal.program import MAX_RUNTIME_ARGS, Program

if TYPE_CHECKING:
    from kohakutt.hal.backends.sim import SimBackend
    from kohakutt.hal.buffer import Buffer

SEMAPHORE_BASE = 0x4000  # the semaphores' L1 region (as sim_program and the host build's runtime)
KIND_CODES = {"reader": 0, "writer": 1, "compute": 2}
# TT-Metal's DataFormat codes (tt_metal/hw/inc/internal/tt-1xx/blackhole/tensix_types.h).
DATA_FORMATS = {
    Format.FLOAT32: 0, Format.BFLOAT16: 5, Format.BFLOAT8_B: 6, Format.BFLOAT4_B: 7, Format.INT32: 8,
    Format.UINT32: 24, Format.UINT16: 9, Format.UINT8: 30,
}  # fmt: skip
ERROR_BYTES = 8192


def run(backend: SimBackend, program: Program, buffers: Sequence[Buffer], runtime_args: Mapping[str, Any]) -> None:
    """Run ``program`` over ``buffers`` from its kernels' C++; raise ProgramError when a kernel breaks a rule."""
    card = next((b.device.card for b in buffers), P150A)
    run_views(program, card, buffers, [backend.host_view(b) for b in buffers], runtime_args)


def run_views(program: Program, card: CardSpec, buffers: Sequence[Buffer], views: Sequence[Any],
              runtime_args: Mapping[str, Any]) -> None:  # fmt: skip
    sim = host_build.sim_library()
    ffi = sim.ffi
    keep: list[Any] = []  # every cffi object the call reads must outlive it

    def new(ctype: str, init: Any) -> Any:
        obj = ffi.new(ctype, init)
        keep.append(obj)
        return obj

    def cstr(s: str) -> Any:
        return new("char[]", s.encode())

    binaries = host_build.build_kernels({k.name: host_build.spec_of(k, program.name) for k in program.kernels})
    args = program.resolve_runtime_args(buffers, runtime_args)

    bufs = new("ktt_sim_buffer[]", max(1, len(buffers)))
    for i, (b, view) in enumerate(zip(buffers, views, strict=True)):
        alloc = b._alloc
        d = bufs[i]
        d.address, d.bank_bytes, d.nbytes = alloc.address, alloc.bank_bytes, b.nbytes
        d.page_size, d.page_stride, d.banks = b.page_size, alloc.page_stride, alloc.banks
        d.dram = int(b.kind is MemoryKind.DRAM)
        data = ffi.from_buffer("char[]", view, require_writable=True)
        keep.append(data)
        d.data = data

    names = {k.name: cstr(k.name) for k in program.kernels}
    sources = {k.name: cstr(str(getattr(k, "source_path", "") or k.name)) for k in program.kernels}
    cores = program.cores()
    cdescs = new("ktt_sim_core[]", max(1, len(cores)))
    for ci, xy in enumerate(cores):
        cbs = program.cbs_on(xy)
        addrs = program.cb_addresses(card, xy)
        cb_arr = new("ktt_sim_cb[]", max(1, len(cbs)))
        for j, cb in enumerate(cbs):
            code = DATA_FORMATS.get(cb.format)
            if code is None:
                raise ProgramError(f"program {program.name!r}: CB {cb.index} holds {cb.format.value}, which the "
                                   "simulator's host kernel API has no DataFormat for")  # fmt: skip
            cb_arr[j].index, cb_arr[j].format = cb.index, code
            cb_arr[j].page_size, cb_arr[j].num_pages, cb_arr[j].address = cb.page_size, cb.num_pages, addrs[cb.index]
        sems = program.semaphores_on(xy)
        sem_arr = new("ktt_sim_semaphore[]", max(1, len(sems)))
        for j, s in enumerate(sems):
            sem_arr[j].id, sem_arr[j].address = s.id, SEMAPHORE_BASE + s.id * card.l1_align
            sem_arr[j].initial_value = s.initial_value
        kernels = program.kernels_on(xy)
        k_arr = new("ktt_sim_kernel[]", max(1, len(kernels)))
        for j, k in enumerate(kernels):
            a = list(args[k.name][xy])
            kd = k_arr[j]
            kd.name, kd.source, kd.kind = names[k.name], sources[k.name], KIND_CODES[k.kind]
            kd.entry = ffi.cast("void *", binaries[k.name].entry)
            kd.args, kd.num_args = new("uint32_t[]", a or [0]), len(a)
            kd.common_args = new("uint32_t[]", list(k.common_runtime_args) or [0])
            kd.num_common_args = len(k.common_runtime_args)
            kd.fidelity_phases, kd.fp32_dest_acc = k.fidelity.phases, int(k.fp32_dest_acc_en)
            kd.approx, kd.dst_tiles = int(k.math_approx_mode), k.dst_tiles(card)
        c = cdescs[ci]
        c.x, c.y = xy
        c.cbs, c.num_cbs = cb_arr, len(cbs)
        c.semaphores, c.num_semaphores = sem_arr, len(sems)
        c.kernels, c.num_kernels = k_arr, len(kernels)

    desc = new("ktt_sim_run_desc *", {
        "program": cstr(program.name), "grid_x": card.grid[0], "grid_y": card.grid[1], "l1_bytes": card.l1_bytes,
        "dram_banks": card.dram_banks, "l1_banks": card.cores, "dram_read_align": card.dram_read_align,
        "dram_write_align": card.dram_write_align, "l1_align": card.l1_align, "max_runtime_args": MAX_RUNTIME_ARGS,
        "stall_seconds": float(sim_program.STALL_SECONDS), "concurrent": int(bool(program.semaphores)),
    })  # fmt: skip
    err = ffi.new("char[]", ERROR_BYTES)
    rc = sim.lib.ktt_sim_run(desc, bufs, len(buffers), cdescs, len(cores), err, ERROR_BYTES)
    if rc != 0:
        raise ProgramError(ffi.string(err).decode(errors="replace"))


__all__ = ["DATA_FORMATS", "run", "run_views"]
