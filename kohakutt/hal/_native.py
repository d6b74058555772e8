"""The native runtime core: C sources in ``native/runtime`` built once into a cached shared library, loaded with cffi.

The library lives at ``<cache>/native/<key>/libktt_runtime.so`` where ``key`` hashes the sources, the compiler (its
path and ``--version``) and the flags, so a change to any of them builds a new library and an old one is never
loaded by mistake. Builds go to a temporary file that is renamed into place, so processes racing to build the same
library both end up loading a complete one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

from kohakutt import config
from kohakutt.errors import KohakuTTError

NATIVE_DIR = Path(__file__).resolve().parents[2] / "native"
RUNTIME_DIR = NATIVE_DIR / "runtime"
HEADER = RUNTIME_DIR / "ktt_runtime.h"
LIBRARY_NAME = "libktt_runtime.so"
# -O3 and per-function CPU clones in the source; never -march=native: the cache may be shared between machines.
# -ffp-contract=off: every float operation of the card model rounds as written (no fused multiply-adds).
CFLAGS = (
    "-O3",
    "-std=c11",
    "-fPIC",
    "-shared",
    "-pthread",
    "-ffp-contract=off",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
)


class NativeBuildError(KohakuTTError):
    """The native runtime core cannot be built or loaded (no C compiler, a failed compile, missing sources)."""


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
    return cdef_block(HEADER)


def cdef_block(header: Path) -> str:
    """The block of ``header`` between its KTT_CDEF_BEGIN and KTT_CDEF_END markers (plain C declarations)."""
    text = _read(header)
    begin, end = text.find("/* KTT_CDEF_BEGIN */"), text.find("/* KTT_CDEF_END */")
    if begin < 0 or end < begin:
        raise NativeBuildError(f"{header} lacks the KTT_CDEF_BEGIN / KTT_CDEF_END markers around its declarations")
    return text[begin + len("/* KTT_CDEF_BEGIN */") : end]


def find_compiler(cc: str | None = None) -> list[str]:
    """The C compiler command: ``cc`` (from knob ``KTT_CC``; may carry arguments) or the first of cc, gcc, clang."""
    if cc:
        argv = shlex.split(cc)
        if argv and shutil.which(argv[0]):
            return argv
        raise NativeBuildError(
            f"KTT_CC={cc!r} names no compiler on PATH; set KTT_CC to a working C compiler (gcc or clang) or unset it"
        )
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    raise NativeBuildError(
        "no C compiler found (tried cc, gcc, clang) to build Kohaku-TT's native runtime core; "
        "install gcc (e.g. `apt-get install gcc`) or set KTT_CC to a C compiler"
    )


def find_cxx(cxx: str | None = None) -> list[str]:
    """The C++ compiler command: ``cxx`` (knob ``KTT_CXX``; may carry arguments) or the first of c++, g++, clang++."""
    if cxx:
        argv = shlex.split(cxx)
        if argv and shutil.which(argv[0]):
            return argv
        raise NativeBuildError(f"KTT_CXX={cxx!r} names no compiler on PATH; set it to a C++20 compiler or unset it")
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return [name]
    raise NativeBuildError(
        "no C++ compiler found (tried c++, g++, clang++) to build the simulator's host kernel API; install g++ "
        "(e.g. `apt-get install g++`) or set KTT_CXX to a C++20 compiler"
    )


def compiler_version(compiler: tuple[str, ...]) -> str:
    """What ``compiler --version`` prints (cached): part of every build key."""
    return _compiler_version(compiler)


class BuildFailed(NativeBuildError):
    """A build command failed; ``stderr`` holds the compiler's messages."""

    def __init__(self, message: str, stderr: str):
        super().__init__(message)
        self.stderr = stderr


def build_cached(target: Path, commands: Callable[[str], list[list[str]]], what: str, timeout: float = 600) -> Path:
    """Builds ``target`` unless a complete one exists: ``commands(tmp)`` are run in order and must leave the result in
    ``tmp`` (a temporary path next to ``target``; they may make ``tmp``-prefixed scratch files, removed after), which
    is then renamed into place, so racing builds both end with a complete file."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        for cmd in commands(tmp):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise NativeBuildError(f"building {what}: cannot run {cmd[0]!r}: {e}; install gcc / g++ or set "
                                       "KTT_CC / KTT_CXX") from e  # fmt: skip
            if done.returncode != 0:
                raise BuildFailed(f"building {what} failed ({shlex.join(cmd)}):\n{done.stderr.strip()[-4000:]}",
                                  done.stderr)  # fmt: skip
        os.chmod(tmp, 0o755)  # mkstemp made it private; the cache may be shared
        os.replace(tmp, target)
    finally:
        for scratch in target.parent.glob(Path(tmp).name + "*"):
            scratch.unlink(missing_ok=True)
    return target


def sources() -> list[Path]:
    found = sorted(RUNTIME_DIR.glob("*.c"))
    if not found:
        raise NativeBuildError(
            f"no C sources in {RUNTIME_DIR}: Kohaku-TT's native runtime core ships as sources next to the package; "
            "use a repository checkout or an editable install (pip install -e .)"
        )
    return found


def build_key(compiler: list[str]) -> str:
    """A hash of everything the built library depends on: sources, headers, compiler identity and flags."""
    h = hashlib.sha256()
    for path in [*sources(), *sorted(RUNTIME_DIR.glob("*.h"))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update("\0".join([shutil.which(compiler[0]) or compiler[0], *compiler[1:], *CFLAGS]).encode())
    h.update(_compiler_version(tuple(compiler)).encode())
    return h.hexdigest()[:20]


def build(root: Path, compiler: list[str]) -> Path:
    """Builds the library under ``root`` unless a complete one is there already; returns its path."""
    target = root / build_key(compiler) / LIBRARY_NAME
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        cmd = [*compiler, *CFLAGS, f"-I{RUNTIME_DIR}", "-o", tmp, *map(str, sources()), "-lm"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except OSError as e:
            raise NativeBuildError(f"cannot run the C compiler {compiler[0]!r}: {e}; install gcc or set KTT_CC") from e
        if done.returncode != 0:
            raise NativeBuildError(
                f"building the native runtime core failed ({shlex.join(cmd)}):\n{done.stderr.strip()}\n"
                "fix the compiler set-up, or point KTT_CC at another C compiler (gcc or clang)"
            )
        os.chmod(tmp, 0o755)  # mkstemp made it private; the cache may be shared
        os.replace(tmp, target)  # atomic: a racing build replaces a complete file with an identical one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@functools.cache
def _compiler_version(compiler: tuple[str, ...]) -> str:
    try:
        done = subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NativeBuildError(f"cannot run the C compiler {compiler[0]!r}: {e}; install gcc or set KTT_CC") from e
    return done.stdout


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise NativeBuildError(
            f"cannot read {path}: {e}; the native sources ship with a repository checkout or editable install"
        ) from e
