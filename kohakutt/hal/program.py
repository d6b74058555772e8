"""Programs as data: Metalium's program model (kernels over circular buffers, semaphores, runtime arguments).

A :class:`Program` is what both backends accept. Its fields mirror TT-NN's ``ProgramDescriptor`` (``KernelDescriptor``,
``CBDescriptor``, ``SemaphoreDescriptor``, the compute config) so the ttnn backend maps it one to one; each kernel also
carries ``sim``, a Python function implementing the same kernel against the simulator's kernel API
(``kohakutt.hal.backends.sim_program``). :meth:`Program.validate` checks the hardware's rules before anything runs;
:meth:`Program.estimate_ns` is the simulator's device-time model for one run.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from numbers import Integral
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from kohakutt.errors import ConfigError, ProgramError
from kohakutt.hal.allocator import align_up
from kohakutt.hal.card import CardSpec
from kohakutt.hal.layout import Format

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer

CoreCoord = tuple[int, int]  # logical (x, y) on the worker grid

MAX_RUNTIME_ARGS = 341  # tt-metal kernel.hpp: 4096-byte dispatch packet / (3 kernels * 4 bytes), unique + common
NUM_SEMAPHORES = 16  # tt-metal semaphore.hpp: semaphore ids per core
KINDS = ("reader", "writer", "compute")
# TT-Metal's reader and writer configs (ReaderConfigDescriptor / WriterConfigDescriptor) put a reader on RISCV_1
# (NCRISC, NOC 1) and a writer on RISCV_0 (BRISC, NOC 0): the JIT builds them as ncrisc and brisc.
_KIND_ALIASES = {"riscv_1": "reader", "ncrisc": "reader", "dm1": "reader", "riscv_0": "writer", "brisc": "writer",
                 "dm0": "writer"}  # fmt: skip

# Device-time model constants, the same as the op library's cost model (docs/concepts/cost-model.md).
PROGRAM_LAUNCH_NS = 2_000.0  # dispatching one program from the command queue (order of magnitude)
FPU_TILE_CYCLES = 16  # one element-wise FPU op on a 32 x 32 tile (one LoFi pass)
SFPU_TILE_CYCLES = 32  # one simple SFPU op on a tile (32 lanes, 8 rows x 4 faces)


class MathFidelity(IntEnum):
    """Math fidelity: how many multiplier passes (phases) a matmul or FPU multiply takes (notes/blackhole.md, "Math
    fidelity"). The values are TT-Metal's ``MathFidelity`` (LoFi 0, HiFi2 2, HiFi3 3, HiFi4 4). The one fidelity enum:
    ``kohakutt.Fidelity``, ``kohakutt.numerics(fidelity=)``, programs and the tinygrad frontend all take it."""

    LoFi = 0
    HiFi2 = 2
    HiFi3 = 3
    HiFi4 = 4

    @property
    def phases(self) -> int:
        return max(1, int(self))

    @classmethod
    def of(cls, value: Any, error: type[Exception] = ConfigError) -> MathFidelity:
        """A fidelity from a member of this or any enum with the same names (TT-NN's ``MathFidelity``), a name
        (``"HiFi2"``, case-insensitive) or TT-Metal's number (0, 2, 3, 4); anything else raises ``error``."""
        if isinstance(value, cls):
            return value
        name = value if isinstance(value, str) else getattr(value, "name", None)
        if isinstance(name, str):
            for f in cls:
                if f.name.lower() == name.strip().lower():
                    return f
        elif isinstance(value, Integral) and not isinstance(value, bool) and int(value) in cls._value2member_map_:
            return cls(int(value))
        raise error(
            f"unknown math fidelity {value!r}: use LoFi, HiFi2, HiFi3 or HiFi4 (a name or kohakutt.Fidelity), or "
            "TT-Metal's MathFidelity numbers 0 (LoFi), 2 (HiFi2), 3 (HiFi3), 4 (HiFi4)"
        )


# --------------------------------------------------------------------------------------------------------- cores
@dataclass(frozen=True)
class CoreRange:
    """A rectangle of cores, ``start`` to ``end`` inclusive (``end`` defaults to ``start``: one core)."""

    start: CoreCoord
    end: CoreCoord | None = None

    def __post_init__(self) -> None:
        start = _coord(self.start)
        end = start if self.end is None else _coord(self.end)
        if end[0] < start[0] or end[1] < start[1]:
            raise ProgramError(f"core range {start}-{end} is empty: end must not be left of or above start")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @property
    def num_cores(self) -> int:
        assert self.end is not None
        return (self.end[0] - self.start[0] + 1) * (self.end[1] - self.start[1] + 1)

    def cores(self) -> list[CoreCoord]:
        """The cores of the range, row by row (y outer, x inner)."""
        assert self.end is not None
        return [(x, y) for y in range(self.start[1], self.end[1] + 1) for x in range(self.start[0], self.end[0] + 1)]

    def contains(self, core: CoreCoord) -> bool:
        assert self.end is not None
        return self.start[0] <= core[0] <= self.end[0] and self.start[1] <= core[1] <= self.end[1]

    def __str__(self) -> str:
        return f"({self.start[0]},{self.start[1]})" + (
            "" if self.end == self.start else f"-({self.end[0]},{self.end[1]})"
        )  # type: ignore[index]


CoreSpec = Union["CoreRangeSet", CoreRange, CoreCoord, Iterable[CoreRange | CoreCoord]]


@dataclass(frozen=True)
class CoreRangeSet:
    """Several core ranges; build one from a range, a core or a list of those with :meth:`of`."""

    ranges: tuple[CoreRange, ...]

    @classmethod
    def of(cls, spec: CoreSpec) -> CoreRangeSet:
        if isinstance(spec, CoreRangeSet):
            return spec
        if isinstance(spec, CoreRange):
            return cls((spec,))
        if isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(v, int) for v in spec):
            return cls((CoreRange(spec),))
        out = []
        for item in spec:  # type: ignore[union-attr]
            out.append(item if isinstance(item, CoreRange) else CoreRange(item))
        return cls(tuple(out))

    def cores(self) -> list[CoreCoord]:
        seen: dict[CoreCoord, None] = {}
        for r in self.ranges:
            seen.update(dict.fromkeys(r.cores()))
        return list(seen)

    @property
    def num_cores(self) -> int:
        return len(self.cores())

    def contains(self, core: CoreCoord) -> bool:
        return any(r.contains(core) for r in self.ranges)

    def __str__(self) -> str:
        return "{" + ", ".join(str(r) for r in self.ranges) + "}"


def split_work(units: int, cores: CoreSpec) -> list[tuple[CoreCoord, int, int]]:
    """Split ``units`` (tiles, rows) over ``cores`` as evenly as possible: ``(core, start, count)`` per core."""
    cs = CoreRangeSet.of(cores).cores()
    base, extra = divmod(units, len(cs))
    out, start = [], 0
    for i, c in enumerate(cs):
        n = base + (1 if i < extra else 0)
        out.append((c, start, n))
        start += n
    return out


def worker_cores(units: int, card: CardSpec | None = None, max_cores: int | None = None) -> CoreRangeSet:
    """The first ``min(units, max_cores, grid)`` worker cores of ``card`` (the P150A's by default), row by row (one
    core at least): the cores a program splits ``units`` of work over."""
    from kohakutt.hal.card import P150A

    gx, gy = (card or P150A).grid
    n = max(1, min(units, max_cores or gx * gy, gx * gy))
    full, rest = divmod(n, gx)
    ranges = [CoreRange((0, 0), (gx - 1, full - 1))] if full else []
    if rest:
        ranges.append(CoreRange((0, full), (rest - 1, full)))
    return CoreRangeSet.of(ranges)


def _coord(c: Any) -> CoreCoord:
    try:
        x, y = c
        if int(x) != x or int(y) != y:
            raise ValueError
        return int(x), int(y)
    except (TypeError, ValueError):
        raise ProgramError(f"a core is an (x, y) pair of ints, got {c!r}") from None


# ----------------------------------------------------------------------------------------- program components
@dataclass
class CircularBuffer:
    """A ring of ``num_pages`` pages of ``page_size`` bytes in each core's L1, id ``index`` (0..31)."""

    index: int
    data_format: Format | str
    page_size: int
    num_pages: int
    core_ranges: CoreSpec

    def __post_init__(self) -> None:
        self.data_format = Format.of(self.data_format)
        self.core_ranges = CoreRangeSet.of(self.core_ranges)

    @property
    def format(self) -> Format:
        return Format.of(self.data_format)

    @property
    def cores(self) -> CoreRangeSet:
        return CoreRangeSet.of(self.core_ranges)

    @property
    def total_size(self) -> int:
        return self.page_size * self.num_pages


SimKernel = Callable[[Any], None]


@dataclass
class Kernel:
    """One kernel of a program: its Metalium C++ source, its Python twin for the simulator, and its configuration.

    ``kind`` is ``"reader"`` (NCRISC, RISCV_1), ``"writer"`` (BRISC, RISCV_0) or ``"compute"`` (the three TRISCs),
    as TT-Metal's reader and writer configs place them. ``source`` is the kernel's C++ file (a path: the kernel keeps
    it as ``path`` and reads its text into ``source``) or its C++ text; every kernel's entry point is
    ``void kernel_main()``. A file may include headers
    beside it (``#include "common.h"``). ``sim(k)`` runs the same kernel against the simulator's kernel API ``k``.
    ``name`` (default: the kind) keys the runtime arguments. The four fields after it configure compute.
    """

    kind: str
    source: str | os.PathLike[str]
    core_ranges: CoreSpec
    sim: SimKernel | None = None
    compile_time_args: Sequence[int] = ()
    defines: Mapping[str, str] = field(default_factory=dict)
    common_runtime_args: Sequence[int] = ()
    name: str = ""
    math_fidelity: MathFidelity | str | int = MathFidelity.HiFi4
    fp32_dest_acc_en: bool = False
    math_approx_mode: bool = False
    dst_full_sync_en: bool = False
    path: Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.source, os.PathLike):
            self.path = Path(self.source).resolve()
            self.source = read_source(self.path)
        elif self.path is not None and self.source != read_source(self.path):
            self.path = None  # text given in place of the file's (dataclasses.replace): the file no longer applies
        kind = _KIND_ALIASES.get(str(self.kind).lower(), str(self.kind).lower())
        if kind not in KINDS:
            raise ProgramError(f"kernel kind {self.kind!r} is not one of reader (ncrisc), writer (brisc), compute")
        self.kind = kind
        self.name = self.name or kind
        self.core_ranges = CoreRangeSet.of(self.core_ranges)
        self.math_fidelity = MathFidelity.of(self.math_fidelity, ProgramError)
        self.compile_time_args = tuple(int(a) for a in self.compile_time_args)
        self.common_runtime_args = tuple(int(a) for a in self.common_runtime_args)
        self.defines = dict(self.defines)

    @property
    def cores(self) -> CoreRangeSet:
        return CoreRangeSet.of(self.core_ranges)

    @property
    def fidelity(self) -> MathFidelity:
        return MathFidelity.of(self.math_fidelity, ProgramError)

    @property
    def processor(self) -> str:
        return {"reader": "NCRISC", "writer": "BRISC", "compute": "TRISC0-2"}[self.kind]

    def dst_tiles(self, card: CardSpec) -> int:
        """Tiles the DST register file holds for this kernel: half of it in half-sync mode, all of it in full sync."""
        n = card.dst_tiles_fp32 if self.fp32_dest_acc_en else card.dst_tiles_bf16
        return 2 * n if self.dst_full_sync_en else n


ACCESSOR_IS_DRAM = 1 << 1  # tt-metal hostdevcommon/tensor_accessor/arg_config.hpp: ArgConfig::IsDram
ACCESSOR_RUNTIME_PAGE_SIZE = 1 << 7  # ArgConfig::RuntimePageSize: the page size is given at run time
DRAM_ALIGN = 64  # Blackhole noc_parameters.h: NOC_DRAM_READ_ALIGNMENT_BYTES (the larger of read 64 / write 16)
L1_ALIGN = 16


def tensor_accessor_args(page_size: int | None, kind: str = "dram") -> list[int]:
    """The compile-time arguments of ``TensorAccessorArgs`` for an interleaved buffer of ``page_size``-byte pages in
    ``kind`` memory ("dram" or "l1"), as TT-NN's ``TensorAccessorArgs(tensor).get_compile_time_args()`` gives them:
    the config word and the page size rounded up to the memory's alignment (64 B in DRAM, 16 B in L1). With
    ``page_size=None`` the page size is a run-time value (``ArgConfig::RuntimePageSize``, the config word alone): the
    kernel passes :func:`aligned_page_size` to ``TensorAccessor(args, address, page_size)``, so a row-major tensor of
    a new width compiles nothing."""
    dram = str(getattr(kind, "value", kind)).lower() == "dram"
    config = ACCESSOR_IS_DRAM if dram else 0
    if page_size is None:
        return [config | ACCESSOR_RUNTIME_PAGE_SIZE]
    return [config, aligned_page_size(page_size, kind)]


def aligned_page_size(page_size: int, kind: str = "dram") -> int:
    """How far apart an interleaved buffer's pages sit in a bank: the page rounded up to the memory's alignment."""
    dram = str(getattr(kind, "value", kind)).lower() == "dram"
    return align_up(int(page_size), DRAM_ALIGN if dram else L1_ALIGN)


def require_dram(program: str, named: Mapping[str, Any]) -> None:
    """Raise ProgramError unless every buffer of ``named`` (name -> buffer) is in DRAM: a program whose tensor
    accessors were built for DRAM would read an L1 buffer's pages from the wrong place on a card."""
    for name, b in named.items():
        kind = str(getattr(b, "kind", "dram")).lower()
        if kind != "dram":
            raise ProgramError(f"program {program!r}: tensor {name!r} is in {kind}, but the program addresses its "
                               "tensors as interleaved DRAM buffers; move it to DRAM first")  # fmt: skip


_SOURCES: dict[Path, tuple[int, str]] = {}


def read_source(path: str | os.PathLike[str]) -> str:
    """The text of kernel source file ``path`` (read again when the file changes)."""
    p = Path(path)
    try:
        stamp = p.stat().st_mtime_ns
    except OSError as e:
        raise ProgramError(f"kernel source {p} cannot be read ({e.strerror}); give an existing .cpp file") from None
    hit = _SOURCES.get(p)
    if hit is None or hit[0] != stamp:
        hit = _SOURCES[p] = (stamp, p.read_text())
    return hit[1]


@dataclass
class Semaphore:
    """A 32-bit word in the L1 of every core of ``core_ranges``, starting at ``initial_value``; id 0..15."""

    id: int
    core_ranges: CoreSpec
    initial_value: int = 0

    def __post_init__(self) -> None:
        self.core_ranges = CoreRangeSet.of(self.core_ranges)

    @property
    def cores(self) -> CoreRangeSet:
        return CoreRangeSet.of(self.core_ranges)


@dataclass(frozen=True)
class Work:
    """What a program does, for its time estimate: DRAM bytes moved and tile ops by kind (all cores together)."""

    dram_bytes: int | None = None
    matmul_tiles: int = 0  # 32 x 32 x 32 multiply-accumulates
    fpu_tiles: int = 0  # element-wise FPU ops (copy, add, mul, reduce, tilize) on one tile
    sfpu_tiles: int = 0  # SFPU ops on one tile


RuntimeArgs = Mapping[str, Mapping[CoreCoord, Sequence[int]] | Sequence[int]]
RuntimeArgsFn = Callable[[Sequence["Buffer"], Mapping[str, Any]], RuntimeArgs]

_KERNEL_MAIN = re.compile(r"\bvoid\s+kernel_main\s*\(\s*(void)?\s*\)")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# The kernel API before TT-Metal 0.81: each form, and what 0.81.1 (the ttnn backend's) takes instead.
OLD_API: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern), old, new)
    for pattern, old, new in (
        (r"\bnamespace\s+NAMESPACE\b|\bvoid\s+MAIN\b", "'namespace NAMESPACE { void MAIN { ... } }'",
         "'void kernel_main() { ... }' at file scope (compute kernels too)"),
        (r'#\s*include\s*[<"]compute_kernel_api(?:\.h|/)', "#include \"compute_kernel_api/...\"",
         "#include \"api/compute/...\" (e.g. api/compute/matmul.h)"),
        (r'#\s*include\s*[<"]dataflow_api\.h[>"]', "#include \"dataflow_api.h\"",
         "#include \"api/dataflow/dataflow_api.h\""),
        (r"\bmm_init\s*\(", "mm_init", "compute_kernel_hw_startup once, then matmul_init(in0, in1)"),
        (r"\bmm_init_short\s*\(", "mm_init_short", "matmul_init(in0, in1[, transpose])"),
        (r"\bbinary_op_init_common\s*\(", "binary_op_init_common", "compute_kernel_hw_startup(icb0, icb1, ocb)"),
        (r"\badd_tiles_init\s*\(", "add_tiles_init", "add_init"),
        (r"\bsub_tiles_init\s*\(", "sub_tiles_init", "sub_init"),
        (r"\bmul_tiles_init\s*\(", "mul_tiles_init", "mul_init"),
    )
)  # fmt: skip


def old_api_forms(source: str) -> list[str]:
    """The pre-0.81 kernel API forms in C++ ``source`` (comments aside), each as "<old>: write <new>"."""
    code = _COMMENTS.sub("", source)
    return [f"{old}: write {new}" for pattern, old, new in OLD_API if pattern.search(code)]


@dataclass
class Program:
    """Kernels, circular buffers and semaphores over a set of cores, run over buffers (inputs first, outputs last).

    ``runtime_args`` maps a kernel's name to its per-core argument lists (``{core: [..]}``, or one list for every
    core), or is a function ``(buffers, runtime) -> that mapping`` called at each run, so buffer addresses and sizes
    can depend on the call. ``tensors`` names the buffers the program takes (checked at each run). ``work`` (or a
    function of ``(buffers, runtime)`` returning it) feeds :meth:`estimate_ns`.
    """

    name: str
    kernels: Sequence[Kernel]
    cbs: Sequence[CircularBuffer] = ()
    semaphores: Sequence[Semaphore] = ()
    runtime_args: RuntimeArgs | RuntimeArgsFn | None = None
    tensors: Sequence[str] | None = None
    work: Work | Callable[[Sequence[Buffer], Mapping[str, Any]], Work] | None = None

    def __post_init__(self) -> None:
        self.kernels = tuple(self.kernels)
        self.cbs = tuple(self.cbs)
        self.semaphores = tuple(self.semaphores)
        self.tensors = None if self.tensors is None else tuple(self.tensors)

    # ------------------------------------------------------------------------------------------------ queries
    @property
    def num_buffers(self) -> int | None:
        return None if self.tensors is None else len(self.tensors)

    def cores(self) -> list[CoreCoord]:
        """Every core a kernel runs on, in first-seen order."""
        seen: dict[CoreCoord, None] = {}
        for k in self.kernels:
            seen.update(dict.fromkeys(k.cores.cores()))
        return list(seen)

    def kernels_on(self, core: CoreCoord) -> list[Kernel]:
        return [k for k in self.kernels if k.cores.contains(core)]

    def cbs_on(self, core: CoreCoord) -> list[CircularBuffer]:
        return [cb for cb in self.cbs if cb.cores.contains(core)]

    def semaphores_on(self, core: CoreCoord) -> list[Semaphore]:
        return [s for s in self.semaphores if s.cores.contains(core)]

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise ProgramError(f"program {self.name!r} has no kernel named {name!r}; "
                           f"its kernels are {[k.name for k in self.kernels]}")  # fmt: skip

    def buffer_index(self, ref: int | str) -> int:
        """The position in the buffer list of tensor ``ref`` (a name from ``tensors`` or an index)."""
        if isinstance(ref, str):
            if self.tensors is None or ref not in self.tensors:
                raise ProgramError(f"program {self.name!r} has no tensor named {ref!r}; "
                                   f"its tensors are {list(self.tensors or [])}")  # fmt: skip
            return list(self.tensors).index(ref)
        return int(ref)

    def cb_addresses(self, card: CardSpec, core: CoreCoord) -> dict[int, int]:
        """Where each CB of ``core`` starts in L1: carved upward from the first byte past the firmware's region, each
        at the DRAM alignment (as TT-Metal places them, so a DRAM read can land at a CB's start)."""
        addr = card.l1_bytes - card.l1_usable
        out = {}
        for cb in sorted(self.cbs_on(core), key=lambda c: c.index):
            out[cb.index] = addr
            addr += align_up(cb.total_size, _cb_align(card))
        return out

    def resolve_runtime_args(self, buffers: Sequence[Buffer], runtime: Mapping[str, Any]
                             ) -> dict[str, dict[CoreCoord, tuple[int, ...]]]:  # fmt: skip
        """Per kernel name, per core, the runtime arguments of this run (cores without any get an empty list)."""
        spec = self.runtime_args
        if callable(spec):
            spec = spec(buffers, runtime)
        spec = spec or {}
        if not isinstance(spec, Mapping):
            raise ProgramError(f"program {self.name!r}: runtime args must map kernel names to per-core lists, "
                               f"got {type(spec).__name__}")  # fmt: skip
        names = {k.name for k in self.kernels}
        for name in spec:
            if name not in names:
                raise ProgramError(f"program {self.name!r}: runtime args for kernel {name!r}, which the program "
                                   f"does not have (kernels: {sorted(names)})")  # fmt: skip
        out: dict[str, dict[CoreCoord, tuple[int, ...]]] = {}
        for k in self.kernels:
            given = spec.get(k.name, {})
            per_core: dict[CoreCoord, tuple[int, ...]] = dict.fromkeys(k.cores.cores(), ())
            if isinstance(given, Mapping):
                for core, args in given.items():
                    c = _coord(core)
                    if c not in per_core:
                        raise ProgramError(f"program {self.name!r}: runtime args for {k.name} on core {c}, which "
                                           f"the kernel does not run on (its cores: {k.cores})")  # fmt: skip
                    per_core[c] = tuple(args)
            else:
                args = tuple(given)
                per_core = dict.fromkeys(per_core, args)
            out[k.name] = per_core
        return out

    # ----------------------------------------------------------------------------------------------- validate
    def validate(self, card: CardSpec, buffers: Sequence[Buffer], runtime_args: Mapping[str, Any], *,
                 check_args: bool = True) -> None:  # fmt: skip
        """Check the hardware's rules for running over ``buffers``; raise ProgramError listing every broken one.

        What depends only on the program (kernels, sources, CB layout, semaphores) is checked once per program and
        card and remembered; what depends on the run (L1 left beside L1 buffers, the buffers, the runtime
        arguments) at every call. ``check_args=False`` leaves out the runtime arguments (a caller that checked them
        for the same buffer sizes and runtime values already)."""
        static, footprints = self._static_check(card)
        problems = list(static)
        self._check_l1_room(card, buffers, footprints, problems)
        if self.tensors is not None and len(buffers) != len(self.tensors):
            problems.append(f"takes {len(self.tensors)} buffers ({', '.join(self.tensors)}), "
                            f"got {len(buffers)}")  # fmt: skip
        if not problems and check_args:
            self._check_runtime_args(buffers, runtime_args, problems)
        if problems:
            head = f"program {self.name!r} breaks {'a rule' if len(problems) == 1 else f'{len(problems)} rules'}"
            raise ProgramError(head + ": " + "; ".join(problems))

    def check_room(self, card: CardSpec, buffers: Sequence[Buffer]) -> None:
        """Raise ProgramError unless the program's circular buffers fit the L1 that L1 buffers leave: what
        :meth:`validate` checks that can change between two runs of a program validated before."""
        footprints = self._static_check(card)[1]
        if not footprints or max(f[1] for f in footprints) <= card.l1_usable - _l1_buffer_bytes_per_core(card, buffers):
            return
        problems: list[str] = []
        self._check_l1_room(card, buffers, footprints, problems)
        if problems:
            raise ProgramError(f"program {self.name!r} breaks a rule: " + "; ".join(problems))

    def _static_check(self, card: CardSpec) -> tuple[list[str], list[tuple[CoreCoord, int, str]]]:
        """The problems of the program itself on ``card``, and each distinct CB set's L1 footprint (core, bytes,
        parts), cached while the program's kernels, CBs and semaphores are the same objects."""
        key = (id(card), tuple(map(id, self.kernels)), tuple(map(id, self.cbs)), tuple(map(id, self.semaphores)))
        hit = self.__dict__.get("_static")
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        problems: list[str] = []
        self._check_kernels(card, problems)
        footprints = self._check_cbs(card, problems)
        self._check_semaphores(card, problems)
        self.__dict__["_static"] = (key, problems, footprints)
        return problems, footprints

    def _check_grid(self, what: str, cores: CoreRangeSet, card: CardSpec, problems: list[str]) -> None:
        gx, gy = card.grid
        for r in cores.ranges:
            assert r.end is not None
            if min(*r.start, *r.end) < 0 or r.end[0] >= gx or r.end[1] >= gy:
                problems.append(f"{what} covers cores {r}, outside the {gx} x {gy} worker grid "
                                f"(x 0..{gx - 1}, y 0..{gy - 1})")  # fmt: skip
        rs = cores.ranges
        for i in range(len(rs)):
            for j in range(i + 1, len(rs)):
                if set(rs[i].cores()) & set(rs[j].cores()):
                    problems.append(f"{what} has overlapping core ranges {rs[i]} and {rs[j]}")

    def _check_kernels(self, card: CardSpec, problems: list[str]) -> None:
        if not self.kernels:
            problems.append("has no kernels")
        names = [k.name for k in self.kernels]
        for n in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"has {names.count(n)} kernels named {n!r}; give each a distinct name= (runtime "
                            "args are keyed by kernel name)")  # fmt: skip
        for k in self.kernels:
            self._check_grid(f"kernel {k.name!r}", k.cores, card, problems)
            old = old_api_forms(k.source)
            if old:
                where = f" ({k.path})" if k.path is not None else ""
                problems.append(f"{k.kind} kernel {k.name!r}{where} is written for the kernel API before TT-Metal "
                                "0.81, which the card's TT-Metal (0.81.1) no longer has: "
                                + "; ".join(old))  # fmt: skip
            elif not _KERNEL_MAIN.search(_COMMENTS.sub("", k.source)):
                problems.append(f"{k.kind} kernel {k.name!r} has no entry point: its source needs "
                                "'void kernel_main() { ... }'")  # fmt: skip
            for i, a in enumerate(k.compile_time_args):
                if not 0 <= a < 1 << 32:
                    problems.append(f"compile-time arg {i} of {k.name!r} is {a}, not a uint32")
        seen: dict[tuple[CoreCoord, str], str] = {}
        for k in self.kernels:
            for c in k.cores.cores():
                other = seen.setdefault((c, k.kind), k.name)
                if other != k.name:
                    problems.append(f"core {c} has two {k.kind} kernels ({other!r} and {k.name!r}); a core runs "
                                    "at most one reader, one writer and one compute kernel")  # fmt: skip
                    break

    def _check_cbs(self, card: CardSpec, problems: list[str]) -> list[tuple[CoreCoord, int, str]]:
        for cb in self.cbs:
            what = f"CB {cb.index}"
            if not 0 <= cb.index < card.num_cbs:
                problems.append(f"{what}: CB indices are 0..{card.num_cbs - 1}")
            if cb.page_size <= 0 or cb.num_pages <= 0:
                problems.append(f"{what} has {cb.num_pages} pages of {cb.page_size} B; both must be positive")
            elif cb.format.is_block and cb.page_size % cb.format.tile_bytes:
                problems.append(f"{what} holds {cb.format.value} in {cb.page_size} B pages; a {cb.format.value} page "
                                f"is whole tiles of {cb.format.tile_bytes} B")  # fmt: skip
            elif not cb.format.is_block and cb.page_size % cb.format.itemsize:
                problems.append(f"{what} holds {cb.format.value} in {cb.page_size} B pages, not a whole number of "
                                f"{cb.format.itemsize}-byte values")  # fmt: skip
            self._check_grid(what, cb.cores, card, problems)
        footprints: list[tuple[CoreCoord, int, str]] = []
        checked: set[tuple[int, ...]] = set()
        for core in dict.fromkeys(c for cb in self.cbs for c in cb.cores.cores()):
            on = self.cbs_on(core)
            idx = [cb.index for cb in on]
            for i in sorted({i for i in idx if idx.count(i) > 1}):
                problems.append(f"CB {i} is defined {idx.count(i)} times on core {core}; a CB index is unique "
                                "per core")  # fmt: skip
            key = tuple(sorted(id(cb) for cb in on))
            if key in checked:
                continue
            checked.add(key)
            total = sum(align_up(cb.total_size, _cb_align(card)) for cb in on)
            parts = ", ".join(f"CB {cb.index}: {cb.num_pages} x {cb.page_size} B" for cb in on)
            footprints.append((core, total, parts))
        return footprints

    def _check_l1_room(self, card: CardSpec, buffers: Sequence[Buffer],
                       footprints: list[tuple[CoreCoord, int, str]], problems: list[str]) -> None:  # fmt: skip
        """The CBs of each core within the L1 that L1 buffers leave."""
        if not footprints:
            return
        l1_buffers = _l1_buffer_bytes_per_core(card, buffers)
        room = card.l1_usable - l1_buffers
        for core, total, parts in footprints:
            if total > room:
                beside = f", less {l1_buffers:,} B of L1 buffers" if l1_buffers else ""
                problems.append(f"circular buffers on core {core} need {total:,} B of L1 ({parts}), more than the "
                                f"{room:,} B usable ({card.l1_usable:,} B per core{beside}); use fewer or "
                                "smaller pages")  # fmt: skip

    def _check_semaphores(self, card: CardSpec, problems: list[str]) -> None:
        for s in self.semaphores:
            if not 0 <= s.id < NUM_SEMAPHORES:
                problems.append(f"semaphore id {s.id}: ids are 0..{NUM_SEMAPHORES - 1}")
            if not 0 <= s.initial_value < 1 << 32:
                problems.append(f"semaphore {s.id} starts at {s.initial_value}, not a uint32")
            self._check_grid(f"semaphore {s.id}", s.cores, card, problems)
        for core in dict.fromkeys(c for s in self.semaphores for c in s.cores.cores()):
            ids = [s.id for s in self.semaphores_on(core)]
            for i in sorted({i for i in ids if ids.count(i) > 1}):
                problems.append(f"semaphore {i} is defined {ids.count(i)} times on core {core}")

    def _check_runtime_args(self, buffers: Sequence[Buffer], runtime: Mapping[str, Any], problems: list[str]) -> None:
        try:
            resolved = self.resolve_runtime_args(buffers, runtime)
        except ProgramError as e:
            problems.append(str(e).removeprefix(f"program {self.name!r}: "))
            return
        for k in self.kernels:
            for i, a in enumerate(k.common_runtime_args):
                if not 0 <= a < 1 << 32:
                    problems.append(f"common runtime arg {i} of {k.name!r} is {a}, not a uint32")
            for core, args in resolved[k.name].items():
                n = len(args) + len(k.common_runtime_args)
                if n > MAX_RUNTIME_ARGS:
                    common = f" (with {len(k.common_runtime_args)} common)" if k.common_runtime_args else ""
                    problems.append(f"{k.name} on core {core} has {n} runtime args{common}, more than Metalium's "
                                    f"{MAX_RUNTIME_ARGS} per kernel per core; pass bulk data in a buffer")  # fmt: skip
                    break
                bad = [(i, a) for i, a in enumerate(args) if not (isinstance(a, int) and 0 <= a < 1 << 32)]
                if bad:
                    i, a = bad[0]
                    problems.append(f"runtime arg {i} of {k.name} on core {core} is {a!r}, not a uint32 "
                                    "(pass a negative value as v & 0xFFFFFFFF, a float as its bits)")  # fmt: skip
                    break

    # -------------------------------------------------------------------------------------------- time model
    def estimate_ns(self, card: CardSpec, buffers: Sequence[Buffer], runtime_args: Mapping[str, Any]) -> float:
        """Device time of one run: a launch cost, then the larger of its data movement and its compute (the card
        overlaps them), each split evenly over its cores.

        Launch: ``PROGRAM_LAUNCH_NS``. Data movement: ``work.dram_bytes`` (default: every buffer's bytes once) at the
        card's DRAM bandwidth, but no faster than the cores' NoC links carry it (64 B per cycle per core at the card
        clock). Compute: matmul tile ops at the compute kernel's fidelity (16 / 32 / 48 / 64 cycles for
        LoFi..HiFi4), element-wise FPU tile ops at ``FPU_TILE_CYCLES`` and SFPU tile ops at ``SFPU_TILE_CYCLES``,
        over the cores that run a compute kernel. Without declared tile ops, one FPU op per 2 KiB moved. No NoC
        contention, bank conflicts or stalls.
        """
        work = self.work(buffers, runtime_args) if callable(self.work) else (self.work or Work())
        dram = work.dram_bytes if work.dram_bytes is not None else sum(b.nbytes for b in buffers)
        cores = max(1, len(self.cores()))
        noc_per_core = card.noc_bytes_per_cycle * card.clock_hz
        move_s = max(dram / card.dram_bytes_per_s, dram / cores / noc_per_core)
        compute_kernels = [k for k in self.kernels if k.kind == "compute"]
        fidelity = compute_kernels[0].fidelity if compute_kernels else MathFidelity.HiFi4
        compute_cores = max(1, len({c for k in compute_kernels for c in k.cores.cores()}))
        fpu, sfpu = work.fpu_tiles, work.sfpu_tiles
        if not (work.matmul_tiles or fpu or sfpu) and compute_kernels:
            fpu = math.ceil(dram / 2048)
        cycles = (work.matmul_tiles * card.matmul_tile_cycles[fidelity.phases - 1] + fpu * FPU_TILE_CYCLES
                  + sfpu * SFPU_TILE_CYCLES)  # fmt: skip
        compute_s = cycles / compute_cores / card.clock_hz
        return PROGRAM_LAUNCH_NS + max(move_s, compute_s) * 1e9


def _cb_align(card: CardSpec) -> int:
    return max(card.l1_align, card.dram_read_align)


def _l1_buffer_bytes_per_core(card: CardSpec, buffers: Sequence[Buffer]) -> int:
    """L1 bytes each core gives to L1 buffers (they share L1 with circular buffers), from the buffers' allocator."""
    for b in buffers:
        alloc = getattr(getattr(b, "device", None), "allocator", None)
        if alloc is not None:
            return int(alloc.reserved_bytes("l1")) // card.cores
    return 0


__all__ = [
    "FPU_TILE_CYCLES", "KINDS", "MAX_RUNTIME_ARGS", "NUM_SEMAPHORES", "PROGRAM_LAUNCH_NS", "SFPU_TILE_CYCLES",
    "CircularBuffer", "CoreCoord", "CoreRange", "CoreRangeSet", "Kernel", "MathFidelity", "Program", "RuntimeArgs",
    "Semaphore", "Work", "aligned_page_size", "old_api_forms", "read_source", "require_dram", "split_work",
    "tensor_accessor_args", "worker_cores",
]  # fmt: skip
