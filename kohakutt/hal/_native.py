"""The native runtime core: C sources in ``native/runtime`` built once into a cached shared library, loaded with cffi.

Built by the package's one native builder (:mod:`kohakutt.native`) at ``<cache>/native/<key>/libktt_runtime.so``,
where ``key`` hashes the sources and headers, the compiler's identity and the flags, so a change to any of them builds
a new library and an old one is never loaded by mistake; racing builds both end up loading a complete one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

from kohakutt import config
from kohakutt import native as builder
from kohakutt.native import NATIVE_DIR, NativeBuildError

RUNTIME_DIR = NATIVE_DIR / "runtime"
HEADER = RUNTIME_DIR / "ktt_runtime.h"
LIBRARY_NAME = "libktt_runtime.so"
# -O3 and per-function CPU clones in the source; never -march=native: the cache may be shared between machines.
# -ffp-contract=off: every float operation of the card model rounds as written (no fused multiply-adds).
CFLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-pthread", "-ffp-contract=off", "-Wall", "-Wextra",
          "-Wno-unused-parameter")  # fmt: skip


@dataclass(frozen=True)
class NativeLib:
    """The loaded runtime core: ``lib`` has the functions of ``ktt_runtime.h``, ``ffi`` makes pointers for them."""

    ffi: cffi.FFI
    lib: Any
    path: Path


@functools.cache
def lib() -> NativeLib:
    """The runtime core, built into the cache on first use (once per machine, compiler and source version)."""
    compiler = find_compiler(config.get("KTT_CC"))
    path = build(config.cache_dir() / "native", compiler)
    ffi = cffi.FFI()
    ffi.cdef(cdef())
    try:
        handle = ffi.dlopen(str(path))
    except OSError as e:
        raise NativeBuildError(f"cannot load the native runtime core {path}: {e}; delete that folder to rebuild") from e
    return NativeLib(ffi, handle, path)


def cdef() -> str:
    """The declarations cffi needs: the marked block of ``ktt_runtime.h``."""
    return builder.cdef_block(HEADER)


def find_compiler(cc: str | None = None) -> list[str]:
    """The C compiler command: ``cc`` (from knob ``KTT_CC``; may carry arguments) or the first of cc, gcc, clang."""
    return builder.find_compiler("c", cc)


def sources() -> list[Path]:
    found = sorted(RUNTIME_DIR.glob("*.c"))
    if not found:
        raise NativeBuildError(
            f"no C sources in {RUNTIME_DIR}: Kohaku-TT's native runtime core ships as sources next to the package; "
            "use a repository checkout or an editable install (pip install -e .)"
        )
    return found


def recipe() -> builder.Recipe:
    """How the runtime core is built (the flags as :data:`CFLAGS` says now)."""
    return builder.Recipe(LIBRARY_NAME, "the native runtime core", "c", tuple(sources()),
                          tuple(sorted(RUNTIME_DIR.glob("*.h"))), (*CFLAGS, f"-I{RUNTIME_DIR}"), ("-lm",))  # fmt: skip


def build_key(compiler: list[str]) -> str:
    """A hash of everything the built library depends on: sources, headers, compiler identity and flags."""
    return recipe().key(compiler)


def build(root: Path, compiler: list[str]) -> Path:
    """Builds the library under ``root`` unless a complete one is there already; returns its path."""
    return builder.build(recipe(), root, compiler, timeout=300)
