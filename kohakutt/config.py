"""Every ``KTT_*`` environment knob, read in this one place.

Each knob has a name, a parser, a default and a doc line; ``docs/reference/knobs.md`` lists them all and a test
keeps the two in step. Code reads knobs through :func:`get`, never through ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kohakutt.errors import ConfigError


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        v = value.strip().lower()
        if v not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return v

    parse.__name__ = "|".join(allowed)
    return parse


def _flag(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected 0 or 1")


def _bytes(value: str) -> int:
    v = value.strip().lower()
    scale = {"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    for suffix in sorted(scale, key=len, reverse=True):
        if v.endswith(suffix):
            n = int(float(v[: -len(suffix)]) * scale[suffix])
            break
    else:
        n = int(v)
    if n < 0:
        raise ValueError("expected a byte count of 0 or more")
    return n


def _positive_int(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError("expected an integer of 1 or more")
    return n


def _path(value: str) -> Path:
    return Path(value).expanduser()


@dataclass(frozen=True)
class Knob:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kohakutt"


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in [
        Knob("KTT_BACKEND", _choice("sim", "ttnn", "auto"), "sim",
             "Which backend the HAL opens: `sim` (the simulated card, the default), `ttnn` (a real card through "
             "TT-NN; fails with the reason when none answers) or `auto` (a card when one answers, else the sim)."),
        Knob("KTT_SIM_DEVICES", _positive_int, 2,
             "How many chips the simulated host has (device ids 0..n-1); two lets the 1 x 2 mesh open."),
        Knob("KTT_L1_BUDGET", _bytes, None,
             "Bytes of L1 per core that buffers may use (accepts K/M suffixes). Unset: the usable L1 of a core "
             "(1464 KiB); 0 disables L1 buffers."),
        Knob("KTT_LAUNCH_BLOCKING", _flag, False,
             "1 runs every queued command before enqueue returns, so an error surfaces at the call that caused it."),
        Knob("KTT_CUSTOM_KERNELS", _flag, True,
             "0 selects TT-NN's kernels over Kohaku-TT's own programs wherever a card can launch both (the "
             "simulator follows the same choice)."),
        Knob("KTT_CPU_FALLBACK", _flag, False,
             "1 lets an op with no device implementation run on the host CPU, counted and warned once per op."),
        Knob("KTT_CACHE_DIR", _path, None,
             "Where built native libraries and the fetched kernel compiler live (default ~/.cache/kohakutt)."),
        Knob("KTT_SFPI_URL", str, None,
             "Where `ktt sfpi` fetches the kernel compiler archive from when no URL or file is given."),
        Knob("KTT_SFPI_SHA256", str, None,
             "Expected SHA-256 of the kernel compiler archive for `ktt sfpi` when none is given."),
        Knob("KTT_CC", str, None, "The C compiler used to build the native runtime core (default: cc, gcc, clang)."),
        Knob("KTT_CXX", str, None, "The C++ compiler used to build the torch glue for the `tt` device and the "
             "simulator's host build of the kernel API (default: c++, g++, clang++)."),
        Knob("KTT_SIM_KERNELS", _choice("cpp", "python"), "cpp",
             "How the simulator runs a program's kernels: `cpp` builds their C++ against the host build of the "
             "kernel API, `python` runs their Python twins."),
        Knob("KTT_SIM_OPS", _choice("model", "program"), "model",
             "How the simulator computes an op whose `ktt` implementation is a program: `model` with the program's "
             "vectorized model (the same bits, tested), `program` by running the program itself through the HAL, "
             "as a card does."),
        Knob("KTT_TINYGRAD_DTYPES", _choice("host", "error"), "host",
             "tinygrad kernels on dtypes the card lacks: `host` runs them on the host (counted, warned once), "
             "`error` raises DtypeError."),
        Knob("KTT_TINYGRAD_RAND", _choice("device", "host"), "device",
             "tinygrad random numbers: `device` draws them on the card, `host` uses tinygrad's own CPU stream."),
        Knob("KTT_TINYGRAD_HOST", _choice("cpu", "python"), "cpu",
             "how tinygrad kernels without a card form run on the host: `cpu` runs the C tinygrad's own CPU device "
             "compiles for them (needs clang; without it, `python`), `python` interprets their UOps with tinygrad's "
             "PYTHON device."),
    ]
}  # fmt: skip

_cache: dict[str, Any] = {}


def get(name: str) -> Any:
    """The parsed value of knob ``name`` (read from the environment once, then cached until :func:`reload`)."""
    if name not in KNOBS:
        raise KeyError(f"unknown knob {name!r}; known knobs: {', '.join(KNOBS)}")
    if name not in _cache:
        knob = KNOBS[name]
        raw = os.environ.get(name)
        if raw is None:
            value = knob.default
        else:
            try:
                value = knob.parse(raw)
            except ValueError as e:
                raise ConfigError(f"{name}={raw!r} is not valid: {e}. {knob.doc}") from None
        if name == "KTT_CACHE_DIR" and value is None:
            value = _default_cache()
        _cache[name] = value
    return _cache[name]


def reload() -> None:
    """Forget cached values so the next :func:`get` reads the environment again (tests, long-lived hosts)."""
    _cache.clear()


def cache_dir() -> Path:
    """The cache folder, created if missing."""
    path: Path = get("KTT_CACHE_DIR")
    path.mkdir(parents=True, exist_ok=True)
    return path
