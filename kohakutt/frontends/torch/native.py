"""The torch glue in ``native/torch/ktt_torch.cpp``, built for the installed torch and loaded with ctypes.

PyTorch makes storages by device through a c10 allocator, and only C++ can install one. The glue is one small file
built against the installed torch's headers (no pybind, no ``torch/extension.h``: about 5 s with g++) by the package's
one native builder (:mod:`kohakutt.native`), cached at ``<cache>/torch/<key>/libktt_torch.so`` where ``key`` hashes
the sources, the torch build and the compiler, so an upgrade of torch builds a new library.

The boundary is ``native/torch/ktt_torch.h``: the functions the glue exports, and ``ktt_torch_hal``, the typed entry
points (allocator, streams, events, generators) through which it asks the HAL for everything device-side. Both the
ctypes signatures and the ctypes structure of the entry points are read from that header (:func:`boundary`), so the
two sides never keep copies of each other. :func:`hal_table` makes the structure from Python functions.

This module stays light (torch, the knobs, the errors): registering ``tt`` at ``import torch`` loads a glue that is
already built (:func:`load_cached`), and the build itself waits for the first real use (:func:`load`).
"""

from __future__ import annotations

import ctypes
import functools
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from kohakutt import config
from kohakutt import native as builder
from kohakutt.native import NativeBuildError

SOURCE_DIR = builder.NATIVE_DIR / "torch"
SOURCE = SOURCE_DIR / "ktt_torch.cpp"
HEADER = SOURCE_DIR / "ktt_torch.h"
LIBRARY_NAME = "libktt_torch.so"
CXXFLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared", "-Wno-deprecated-declarations")


class TorchGlueError(NativeBuildError):
    """The torch glue cannot be built or loaded (no C++ compiler, a failed compile, a missing source)."""


def find_compiler(cxx: str | None = None) -> list[str]:
    """The C++ compiler command: ``cxx`` (knob ``KTT_CXX``) or the first of c++, g++, clang++ on PATH."""
    try:
        return builder.find_compiler("c++", cxx)
    except NativeBuildError as e:
        raise TorchGlueError(f"{e} (the tt device needs a small C++ file built against the installed torch, once "
                             "per torch version)") from None  # fmt: skip


@functools.cache
def boundary() -> builder.Boundary:
    """The glue's C boundary, read from ``ktt_torch.h``."""
    return builder.c_boundary(HEADER)


def hal_entry_points() -> tuple[str, ...]:
    """The names of ``ktt_torch_hal``'s entry points, in the structure's order."""
    return tuple(s.name for s in boundary().structs["ktt_torch_hal"])


def _torch_dirs() -> tuple[Path, Path]:
    root = Path(torch.__file__).resolve().parent
    return root / "include", root / "lib"


def recipe() -> builder.Recipe:
    """How the glue is built for the installed torch."""
    include, lib = _torch_dirs()
    abi = int(torch.compiled_with_cxx11_abi())
    return builder.Recipe(
        LIBRARY_NAME, "the tt device's torch glue", "c++", (SOURCE,), (HEADER,),
        (*CXXFLAGS, f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
         f"-D_GLIBCXX_USE_CXX11_ABI={abi}"),
        (f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"),
        salt=f"{torch.__version__}\0{include}", prefix=f"torch-{torch.__version__.split('+')[0]}",
    )  # fmt: skip


def build_key(compiler: list[str]) -> str:
    """The cache folder's name: a hash of the sources, the torch build and the compiler (cheap: no process is
    started, so it is computed at ``import torch``)."""
    return recipe().key(compiler)


def build(root: Path, compiler: list[str]) -> Path:
    """Build the glue under ``root`` unless a complete one is there; return its path."""
    try:
        return builder.build(recipe(), root, compiler)
    except TorchGlueError:
        raise
    except NativeBuildError as e:
        raise TorchGlueError(str(e)) from e


def hal_table(lib: Any, handlers: Mapping[str, Callable[..., Any]]) -> Any:
    """A ``ktt_torch_hal`` whose entry points call ``handlers`` (one per name of :func:`hal_entry_points`). An
    exception never crosses into C++: it is handed to the glue as a message (``ktt_torch_set_error``), which raises
    it there. Keep the result alive as long as the glue may call it."""
    missing = set(hal_entry_points()) - set(handlers)
    if missing:
        raise TorchGlueError(f"no handler for the glue's entry points {sorted(missing)}")
    table = boundary().structure("ktt_torch_hal")()
    keep = []
    for sig in boundary().structs["ktt_torch_hal"]:
        fn = sig.functype()(_guarded(lib, handlers[sig.name], sig.restype))
        setattr(table, sig.name, fn)
        keep.append(fn)
    table._keep = keep  # the ctypes callbacks live as long as the table
    return table


def _guarded(lib: Any, fn: Callable[..., Any], restype: Any) -> Callable[..., Any]:
    failed = None if restype is None else restype(0).value

    def entry(*args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException as e:  # never let an exception cross into C++: hand it over as a message
            msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if not isinstance(e, Exception):
                msg += "\n" + traceback.format_exc()
            lib.ktt_torch_set_error(msg.encode("utf-8", "replace"))
            return failed

    return entry


_lib: ctypes.CDLL | None = None


def loaded() -> ctypes.CDLL | None:
    """The glue if it is loaded in this process, else None."""
    return _lib


def load_cached() -> ctypes.CDLL | None:
    """The glue if a build for this torch and source is in the cache (loaded now), else None: never compiles."""
    if _lib is not None:
        return _lib
    target = config.cache_dir() / "torch" / build_key(find_compiler(config.get("KTT_CXX"))) / LIBRARY_NAME
    return _open(target) if target.exists() else None


def load() -> ctypes.CDLL:
    """The glue library (built on first use), with its functions' signatures set."""
    if _lib is not None:
        return _lib
    return _open(build(config.cache_dir() / "torch", find_compiler(config.get("KTT_CXX"))))


def _open(path: Path) -> ctypes.CDLL:
    global _lib
    try:
        lib = ctypes.PyDLL(str(path), mode=ctypes.RTLD_GLOBAL)  # keeps the GIL: calls are short
    except OSError as e:
        raise TorchGlueError(f"cannot load the torch glue {path}: {e}; delete that folder to rebuild it") from e
    boundary().bind(lib)
    _lib = lib
    return lib
