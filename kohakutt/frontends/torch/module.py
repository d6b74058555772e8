"""``torch.tt``: the ``torch.cuda`` functions people use, for the tt device."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from kohakutt import kernels as kk
from kohakutt.frontends.torch import runtime

_initial_seed = 0


def is_available() -> bool:
    """True: the simulated card is always there (a real card when ``KTT_BACKEND`` picks one)."""
    from kohakutt import hal

    return hal.device_count() > 0


def device_count() -> int:
    from kohakutt import hal

    return hal.device_count()


def current_device() -> int:
    return int(runtime._lib.ktt_torch_current_device()) if runtime._lib is not None else 0


def set_device(device: torch.device | str | int) -> None:
    index = device if isinstance(device, int) else (torch.device(device).index or 0)
    torch._C._accelerator_setDeviceIndex(index)


def _index(device: torch.device | str | int | None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return current_device() if d.index is None else d.index


def synchronize(device: torch.device | str | int | None = None) -> None:
    """Wait for everything queued on the chip; raise the first queued error, naming the op."""
    runtime.device(_index(device)).synchronize()


def _is_in_bad_fork() -> bool:
    return False


# ------------------------------------------------------------------------------------------------------ streams
class Stream(torch.Stream):
    """An in-order queue of work on one chip (``torch.cuda.Stream`` for tt)."""

    def __new__(cls, device: torch.device | str | int | None = None, priority: int = 0, **kwargs: Any) -> Stream:
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
        self.prev = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.prev)


# ------------------------------------------------------------------------------------------------------ memory
def memory_stats(device: torch.device | str | int | None = None) -> dict[str, int]:
    """The chip's allocator statistics (shared with every frontend), under torch.cuda's key names too."""
    st = runtime.device(_index(device)).memory_stats()
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
    return runtime.device(_index(device)).memory_stats()["allocated_bytes"]


def max_memory_allocated(device: torch.device | str | int | None = None) -> int:
    return runtime.device(_index(device)).memory_stats()["peak_allocated_bytes"]


def memory_reserved(device: torch.device | str | int | None = None) -> int:
    return runtime.device(_index(device)).memory_stats()["reserved_bytes"]


def max_memory_reserved(device: torch.device | str | int | None = None) -> int:
    return runtime.device(_index(device)).memory_stats()["peak_reserved_bytes"]


def reset_peak_memory_stats(device: torch.device | str | int | None = None) -> None:
    runtime.device(_index(device)).allocator.reset_peak()


def empty_cache() -> None:
    """Give the memory of freed storages, kept for reuse by the caching allocator, back to each chip's allocator
    (after the work still queued on it): ``memory_reserved`` drops to what live tensors hold."""
    runtime.empty_cache()


def mem_get_info(device: torch.device | str | int | None = None) -> tuple[int, int]:
    st = runtime.device(_index(device)).memory_stats()
    return st["dram.free_bytes"], st["dram.capacity_bytes"]


# ------------------------------------------------------------------------------------------------------ random
def manual_seed(seed: int) -> None:
    """Seed the current chip's random stream (drawn on the card: Philox on 32-bit words)."""
    global _initial_seed
    _initial_seed = int(seed)
    kk.manual_seed(runtime.device(current_device()), int(seed))


def manual_seed_all(seed: int) -> None:
    global _initial_seed
    _initial_seed = int(seed)
    for i in range(device_count()):
        kk.manual_seed(runtime.device(i), int(seed))


def seed() -> None:
    manual_seed(torch.seed())


def seed_all() -> None:
    manual_seed_all(torch.seed())


def initial_seed() -> int:
    return _initial_seed


def get_rng_state(device: torch.device | str | int | None = None) -> torch.Tensor:
    """The chip's random state as a uint8 CPU tensor (seed and counter, 16 bytes)."""
    seed_, offset = kk.rng_state(runtime.device(_index(device)))
    return torch.tensor(list(seed_.to_bytes(8, "little") + offset.to_bytes(8, "little")), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: torch.device | str | int | None = None) -> None:
    raw = bytes(new_state.to(torch.uint8).tolist())
    if len(raw) != 16:
        raise ValueError(f"a tt random state is 16 bytes (from torch.tt.get_rng_state()), got {len(raw)}")
    kk.set_rng_state(
        runtime.device(_index(device)), (int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little"))
    )


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    for i, s in enumerate(states):
        set_rng_state(s, i)


def is_initialized() -> bool:
    return runtime._lib is not None


def init() -> None:
    """Nothing to do: importing kohakutt.device() initialised the device."""


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
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
