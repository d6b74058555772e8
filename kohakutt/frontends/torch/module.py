"""``torch.tt``: the ``torch.cuda`` functions people use, for the tt device.

Registered at ``import torch`` (the ``torch.backends`` entry point), so it stays light: nothing here opens a chip or
loads the op library until it is used. As on CUDA, the first real use (a tensor made on tt, ``torch.tt.init()``,
``synchronize``, a random state read) initialises the device (:func:`_lazy_init`); ``manual_seed`` before that is
remembered and applied then.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

_initialized = False
_initializing = False
_init_lock = threading.RLock()
_queued_seeds: list[tuple[int, bool]] = []  # (seed, all chips) set before the device was initialised
default_generators: tuple[torch.Generator, ...] = ()  # one per chip once initialised: the chips' random streams


def _lazy_init() -> None:
    """Initialise the tt device (torch calls this before the first tensor is made on tt): build and load the C++
    glue if needed, register the aten kernels, hand out the chips' default generators. Opens no chip."""
    global _initialized, _initializing, default_generators
    if _initialized:
        return
    with _init_lock:
        if _initialized or _initializing:  # _initializing: a call from inside the initialisation itself
            return
        _initializing = True
        try:
            from kohakutt.frontends.torch import backend, native

            backend.install()
            lib = native.load()
            gens = []
            for i in range(device_count()):
                lib.ktt_torch_next_generator_is_default()
                gens.append(torch.Generator(device=torch.device("tt", i)))
            default_generators = tuple(gens)
            _initialized = True
        finally:
            _initializing = False
        while _queued_seeds:
            seed, every = _queued_seeds.pop(0)
            (manual_seed_all if every else manual_seed)(seed)


def init() -> None:
    """Initialise the tt device now (it otherwise happens on first use)."""
    _lazy_init()


def is_initialized() -> bool:
    """True once the device is initialised (a tensor was made on tt, or :func:`init` was called)."""
    return _initialized


def is_available() -> bool:
    """True: the simulated card is always there (a real card when ``KTT_BACKEND`` picks one)."""
    return device_count() > 0


def device_count() -> int:
    from kohakutt import hal

    return hal.device_count()


def current_device() -> int:
    from kohakutt.frontends.torch import native

    lib = native.loaded()
    return int(lib.ktt_torch_current_device()) if lib is not None else 0


def set_device(device: torch.device | str | int) -> None:
    index = device if isinstance(device, int) else (torch.device(device).index or 0)
    _lazy_init()
    torch._C._accelerator_setDeviceIndex(index)


def _index(device: torch.device | str | int | None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return current_device() if d.index is None else d.index


def _chip(device: torch.device | str | int | None) -> Any:
    """The HAL device behind ``device`` (the tt device initialised, the chip opened)."""
    _lazy_init()
    from kohakutt.frontends.torch import runtime

    return runtime.device(_index(device))


def synchronize(device: torch.device | str | int | None = None) -> None:
    """Wait for everything queued on the chip; raise the first queued error, naming the op."""
    _chip(device).synchronize()


def _is_in_bad_fork() -> bool:
    return False


# ------------------------------------------------------------------------------------------------------ streams
class Stream(torch.Stream):
    """An in-order queue of work on one chip (``torch.cuda.Stream`` for tt)."""

    def __new__(cls, device: torch.device | str | int | None = None, priority: int = 0, **kwargs: Any) -> Stream:
        _lazy_init()
        if kwargs.get("stream_id") is not None:
            return super().__new__(cls, **kwargs)
        index = _index(device)
        with torch.tt.device(index):
            return super().__new__(cls, device=torch.device("tt", index), priority=priority)

    def wait_event(self, event: Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event


class Event(torch.Event):
    """A point in a stream (``torch.cuda.Event`` for tt); ``elapsed_time`` is simulated device time in ms."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Event:
        _lazy_init()
        ev = super().__new__(
            cls,
            device=torch.device("tt", current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )
        ev.enable_timing = enable_timing
        return ev

    def record(self, stream: torch.Stream | None = None) -> None:
        super().record(stream or current_stream())

    def wait(self, stream: torch.Stream | None = None) -> None:
        super().wait(stream or current_stream())

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Simulated device time in milliseconds from this event to ``end_event`` (waits for both).

        torch.Event's own method accepts only exact torch.Event objects, so this reads the two handles itself."""
        if not isinstance(end_event, torch.Event):
            raise TypeError(f"elapsed_time expects a torch.tt.Event or torch.Event, got {type(end_event).__name__}")
        if not (getattr(self, "enable_timing", True) and getattr(end_event, "enable_timing", True)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.event_id == 0 or end_event.event_id == 0:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        from kohakutt.frontends.torch import runtime

        return runtime.elapsed_ms(self.event_id, end_event.event_id)


def current_stream(device: torch.device | str | int | None = None) -> Stream:
    s = torch.accelerator.current_stream(torch.device("tt", _index(device)))
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def default_stream(device: torch.device | str | int | None = None) -> Stream:
    index = _index(device)
    s = torch.accelerator.current_stream(torch.device("tt", index))
    return Stream(stream_id=0, device_index=index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Queue the block's work on ``s``."""
    if s is None:
        yield
        return
    prev = torch.accelerator.current_stream(s.device)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)


class device:
    """Make ``tt:<index>`` the current device inside the block."""

    def __init__(self, device: torch.device | str | int | None) -> None:
        self.index = _index(device)
        self.prev = 0

    def __enter__(self) -> None:
        _lazy_init()  # as torch.cuda.device: torch.load's storages are made inside one
        self.prev = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.prev)


# ------------------------------------------------------------------------------------------------------ memory
def memory_stats(device: torch.device | str | int | None = None) -> dict[str, int]:
    """The chip's allocator statistics (shared with every frontend), under torch.cuda's key names too."""
    st = _chip(device).memory_stats()
    out = dict(st)
    out.update(
        {
            "allocated_bytes.all.current": st["allocated_bytes"],
            "allocated_bytes.all.peak": st["peak_allocated_bytes"],
            "reserved_bytes.all.current": st["reserved_bytes"],
            "reserved_bytes.all.peak": st["peak_reserved_bytes"],
            "allocation.all.allocated": st["num_allocs"],
            "allocation.all.freed": st["num_frees"],
            "num_ooms": st["num_ooms"],
        }
    )
    return out


def memory_allocated(device: torch.device | str | int | None = None) -> int:
    return _chip(device).memory_stats()["allocated_bytes"]


def max_memory_allocated(device: torch.device | str | int | None = None) -> int:
    return _chip(device).memory_stats()["peak_allocated_bytes"]


def memory_reserved(device: torch.device | str | int | None = None) -> int:
    return _chip(device).memory_stats()["reserved_bytes"]


def max_memory_reserved(device: torch.device | str | int | None = None) -> int:
    return _chip(device).memory_stats()["peak_reserved_bytes"]


def reset_peak_memory_stats(device: torch.device | str | int | None = None) -> None:
    _chip(device).allocator.reset_peak()


def empty_cache() -> None:
    """Give the memory of freed storages, kept for reuse by the caching allocator, back to each chip's allocator
    (after the work still queued on it): ``memory_reserved`` drops to what live tensors hold."""
    if not _initialized:
        return
    from kohakutt.frontends.torch import runtime

    runtime.empty_cache()


def mem_get_info(device: torch.device | str | int | None = None) -> tuple[int, int]:
    st = _chip(device).memory_stats()
    return st["dram.free_bytes"], st["dram.capacity_bytes"]


def memory_summary(device: torch.device | str | int | None = None, abbreviated: bool = False) -> str:
    """The chip's allocator statistics as a table (``torch.cuda.memory_summary``'s role; ``abbreviated`` is
    accepted for its signature: the table is short already)."""
    st = memory_stats(device)

    def mib(key: str) -> str:
        return f"{st[key] / 2**20:10.2f} MiB"

    rows = [
        ("Allocated memory", mib("allocated_bytes"), mib("peak_allocated_bytes")),
        ("Reserved memory", mib("reserved_bytes"), mib("peak_reserved_bytes")),
        ("DRAM free / capacity", mib("dram.free_bytes"), mib("dram.capacity_bytes")),
        ("Allocations", f"{st['num_allocs']:14d}", ""),
        ("Frees", f"{st['num_frees']:14d}", ""),
        ("Out-of-memory errors", f"{st['num_ooms']:14d}", ""),
    ]
    line = "=" * 66
    out = [line, f" tt:{_index(device)} memory summary ({get_device_name(device)})", line]
    out += [f" {'':<26}{'current':>19}{'peak':>19}"] + [f" {a:<26}{b:>19}{c:>19}" for a, b, c in rows]
    return "\n".join([*out, line])


# ------------------------------------------------------------------------------------------------------ properties
@dataclass(frozen=True)
class _DeviceProperties:
    """What ``torch.tt.get_device_properties`` reports (``torch.cuda``'s names where they apply)."""

    name: str
    total_memory: int  # DRAM bytes
    multi_processor_count: int  # Tensix worker cores
    l1_per_core: int  # bytes of L1 a core's buffers may use
    clock_rate: int  # kHz
    major: int = 0  # no CUDA compute capability: zeros, so capability checks fail rather than pass
    minor: int = 0


def get_device_properties(device: torch.device | str | int | None = None) -> _DeviceProperties:
    card = _chip(device).card
    return _DeviceProperties(card.name, card.dram_bytes, card.cores, card.l1_usable, int(card.clock_hz / 1e3))


def get_device_name(device: torch.device | str | int | None = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: torch.device | str | int | None = None) -> tuple[int, int]:
    p = get_device_properties(device)
    return p.major, p.minor


# ------------------------------------------------------------------------------------------------------ random
# Each chip has one random stream (Philox, keyed by a seed, counted in blocks), which every random op without a
# generator= draws from when it is queued: default_generators[i] reads and writes that stream, and so do these.
def _runner() -> Any:
    _lazy_init()
    from kohakutt.kernels import runner

    return runner


def manual_seed(seed: int) -> None:
    """Seed the current chip's random stream (drawn on the card: Philox on 32-bit words). Before the device is
    initialised the seed is remembered and applied then, as on CUDA."""
    seed = int(seed)
    if not _initialized:
        _queued_seeds.append((seed, False))
        return
    _runner().manual_seed(current_device(), seed)


def manual_seed_all(seed: int) -> None:
    """Seed every chip's random stream (``torch.manual_seed`` calls this)."""
    seed = int(seed)
    if not _initialized:
        _queued_seeds.append((seed, True))
        return
    for i in range(device_count()):
        _runner().manual_seed(i, seed)


def _random_seed() -> int:
    return int.from_bytes(os.urandom(8), "little")


def seed() -> None:
    """Seed the current chip's stream with a random number (leaves the CPU generator alone)."""
    manual_seed(_random_seed())


def seed_all() -> None:
    manual_seed_all(_random_seed())


def initial_seed() -> int:
    """The seed of the current chip's random stream."""
    return _runner().rng_state(current_device())[0]


def get_rng_state(device: torch.device | str | int = "tt") -> torch.Tensor:
    """The chip's random state as a uint8 CPU tensor (seed and offset, 16 bytes little-endian): the point in the
    stream that the next random op queued will draw from."""
    seed_, offset = _runner().rng_state(_index(device))
    return torch.tensor(list(seed_.to_bytes(8, "little") + offset.to_bytes(8, "little")), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: torch.device | str | int = "tt") -> None:
    """Restore a state from :func:`get_rng_state`: random ops queued after this draw the numbers they drew then."""
    raw = bytes(new_state.to(torch.uint8).tolist())
    if len(raw) != 16:
        raise ValueError(f"a tt random state is 16 bytes (from torch.tt.get_rng_state()), got {len(raw)}")
    _runner().set_rng_state(_index(device), (int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of ``device``'s chip (torch's AOT autograd asks devices for it)."""
    _lazy_init()
    return default_generators[_index(device)]


# ------------------------------------------------------------------------------------------------------ amp
def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: bfloat16 is one of the card's own formats."""
    return True


# ------------------------------------------------------------------------------------------------------ the mesh
def mesh_stats() -> dict[str, Any]:
    """What the open mesh (``kohakutt.mesh``) has done: collectives per kind (count, and bytes each chip received
    over the link), ops, ops gathered for want of a rule, decision-cache hits and misses."""
    from kohakutt.frontends.torch import mesh

    return mesh.mesh_stats()


def reset_mesh_stats() -> None:
    from kohakutt.frontends.torch import mesh

    mesh.reset_mesh_stats()
