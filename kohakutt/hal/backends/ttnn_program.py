"""How a HAL :class:`~kohakutt.hal.program.Program` becomes a ``ttnn.ProgramDescriptor`` for ``ttnn.generic_op``.

The program's fields mirror TT-NN's descriptors, so most of this is one to one: a kernel becomes a
``KernelDescriptor`` naming its C++ file (``FILE_PATH``; a kernel given as text goes inline), a circular buffer a
``CBDescriptor`` with one format, a semaphore a
``SemaphoreDescriptor``. What differs is where buffers live: on the card TT-NN placed them, not the HAL's allocator,
so runtime arguments computed by a function of the buffers see each buffer's card address (see :class:`CardBuffer`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kohakutt.errors import ProgramError
from kohakutt.hal.layout import Format

if TYPE_CHECKING:
    from kohakutt.hal.buffer import Buffer
    from kohakutt.hal.program import CoreRangeSet, Kernel, Program


class CardBuffer:
    """A HAL buffer as a program's runtime-argument function sees it on the card: everything as the buffer has it,
    except ``address``, which is where TT-NN allocated the buffer's tensor."""

    __slots__ = ("_buf", "address")

    def __init__(self, buf: Buffer, address: int):
        self._buf = buf
        self.address = address

    def __getattr__(self, name: str) -> Any:
        return getattr(self._buf, name)

    def __repr__(self) -> str:
        return f"CardBuffer({self._buf!r}, address={self.address:#x})"


def core_range_set(ttnn: Any, cores: CoreRangeSet) -> Any:
    """The ``ttnn.CoreRangeSet`` of a HAL core range set."""
    out = []
    for r in cores.ranges:
        end = r.end if r.end is not None else r.start
        out.append(ttnn.CoreRange(ttnn.CoreCoord(*r.start), ttnn.CoreCoord(*end)))
    return ttnn.CoreRangeSet(out)


def kernel_descriptor(ttnn: Any, program: Program, k: Kernel, args: Mapping[tuple[int, int], Sequence[int]]) -> Any:
    """The ``ttnn.KernelDescriptor`` of kernel ``k`` with its per-core runtime arguments ``args``."""
    if not isinstance(k.source, str) or not k.source.strip():
        raise ProgramError(
            f"program {program.name!r}: kernel {k.name!r} has no Metalium C++ source, so it can run only on the "
            "simulator; give it source= to run it on a card"
        )
    if k.kind == "compute":
        config = ttnn.ComputeConfigDescriptor(
            math_fidelity=getattr(ttnn.MathFidelity, k.fidelity.name),
            math_approx_mode=bool(k.math_approx_mode),
            fp32_dest_acc_en=bool(k.fp32_dest_acc_en),
            dst_full_sync_en=bool(k.dst_full_sync_en),
        )
    elif k.kind == "reader":
        config = ttnn.ReaderConfigDescriptor()
    elif k.kind == "writer":
        config = ttnn.WriterConfigDescriptor()
    else:
        raise ProgramError(f"program {program.name!r}: kernel kind {k.kind!r} has no TT-NN descriptor")
    if k.path is not None:  # the file itself: TT-Metal's JIT puts its folder on the include path (common.h)
        source, kind = str(k.path), ttnn.KernelDescriptor.SourceType.FILE_PATH
    else:
        source, kind = k.source, ttnn.KernelDescriptor.SourceType.SOURCE_CODE
    return ttnn.KernelDescriptor(
        kernel_source=source,
        source_type=kind,
        core_ranges=core_range_set(ttnn, k.cores),
        compile_time_args=[int(a) for a in k.compile_time_args],
        defines=[(str(n), str(v)) for n, v in dict(k.defines).items()],
        runtime_args=[(ttnn.CoreCoord(*core), [int(a) for a in a_list]) for core, a_list in args.items()],
        common_runtime_args=[int(a) for a in k.common_runtime_args],
        config=config,
    )


def program_descriptor(
    ttnn: Any, program: Program, buffers: Sequence[Buffer], addresses: Sequence[int], runtime: Mapping[str, Any]
) -> Any:
    """The ``ttnn.ProgramDescriptor`` of one run of ``program`` over ``buffers``, whose tensors sit at ``addresses``
    on the card."""
    card_buffers = [CardBuffer(b, a) for b, a in zip(buffers, addresses, strict=True)]
    resolved = program.resolve_runtime_args(card_buffers, runtime)  # type: ignore[arg-type]
    cbs = []
    for cb in program.cbs:
        fmt = Format.of(cb.data_format)
        cbs.append(
            ttnn.CBDescriptor(
                total_size=cb.total_size,
                core_ranges=core_range_set(ttnn, cb.cores),
                format_descriptors=[
                    ttnn.CBFormatDescriptor(
                        buffer_index=cb.index, data_format=getattr(ttnn, fmt.value), page_size=cb.page_size
                    )
                ],
            )
        )
    semaphores = [
        ttnn.SemaphoreDescriptor(id=s.id, core_ranges=core_range_set(ttnn, s.cores), initial_value=s.initial_value)
        for s in program.semaphores
    ]
    return ttnn.ProgramDescriptor(
        kernels=[kernel_descriptor(ttnn, program, k, resolved[k.name]) for k in program.kernels],
        semaphores=semaphores,
        cbs=cbs,
    )
