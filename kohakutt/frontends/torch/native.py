"""The torch glue in ``native/torch/ktt_torch.cpp``, built for the installed torch and loaded with ctypes.

PyTorch makes storages by device through a c10 allocator, and only C++ can install one. The glue is one small file
built against the installed torch's headers (no pybind, no ``torch/extension.h``: about 5 s with g++), cached at
``<cache>/torch/<key>/libktt_torch.so`` where ``key`` hashes the source, the torch version and the compiler, so an
upgrade of torch builds a new library. Everything the glue does is decided by one Python callback (``runtime.py``).

This module stays light (torch, the knobs, the errors): registering ``tt`` at ``import torch`` loads a glue that is
already built (:func:`load_cached`), and the build itself waits for the first real use (:func:`load`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from kohakutt import config
from kohakutt.errors import KohakuTTError

SOURCE = Path(__file__).resolve().parents[3] / "native" / "torch" / "ktt_torch.cpp"
LIBRARY_NAME = "libktt_torch.so"
CXXFLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared", "-Wno-deprecated-declarations")

# The callback's requests (the glue's enum Op).
ALLOC, FREE, COPY, SYNC_DEVICE, STREAM_SYNC, STREAM_QUERY, EVENT_RECORD, EVENT_BLOCK, EVENT_QUERY, EVENT_SYNC = range(
    1, 11
)
EVENT_DESTROY, EVENT_ELAPSED_US, DEVICE_COUNT, STATS, RESET_PEAK, EMPTY_CACHE, MEMORY_INFO, NEW_STREAM = range(11, 19)
RESET_ACCUMULATED, RNG_GET, RNG_SET = range(19, 22)

CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int64, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)


class TorchGlueError(KohakuTTError):
    """The torch glue cannot be built or loaded (no C++ compiler, a failed compile, a missing source)."""


def find_compiler(cxx: str | None = None) -> list[str]:
    """The C++ compiler command: ``cxx`` (knob ``KTT_CXX``) or the first of c++, g++, clang++ on PATH."""
    if cxx:
        argv = shlex.split(cxx)
        if argv and shutil.which(argv[0]):
            return argv
        raise TorchGlueError(f"KTT_CXX={cxx!r} names no compiler on PATH; set it to a C++20 compiler or unset it")
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return [name]
    raise TorchGlueError(
        "no C++ compiler found (tried c++, g++, clang++): the tt device needs a small C++ file built against the "
        "installed torch (a c10 allocator, once per torch version). Install one (`apt-get install g++`) or set KTT_CXX"
    )


def _torch_dirs() -> tuple[Path, Path]:
    root = Path(torch.__file__).resolve().parent
    return root / "include", root / "lib"


def build_key(compiler: list[str]) -> str:
    """The cache folder's name: a hash of the source, the torch build and the compiler (its resolved file's size
    and time stamp stand for its version: no process is started, so the key is cheap at ``import torch``)."""
    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    h.update(torch.__version__.encode() + b"\0" + str(_torch_dirs()[0]).encode())
    exe = shutil.which(compiler[0]) or compiler[0]
    h.update("\0".join([exe, *compiler[1:], *CXXFLAGS]).encode())
    try:
        st = os.stat(os.path.realpath(exe))
        h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    except OSError as e:
        raise TorchGlueError(f"cannot find the C++ compiler {compiler[0]!r}: {e}; install g++ or set KTT_CXX") from e
    return f"torch-{torch.__version__.split('+')[0]}-{h.hexdigest()[:16]}"


def build(root: Path, compiler: list[str]) -> Path:
    """Build the glue under ``root`` unless a complete one is there; return its path."""
    if not SOURCE.exists():
        raise TorchGlueError(
            f"{SOURCE} is missing: the tt device ships its C++ glue as source next to the package; "
            "use a repository checkout or an editable install (pip install -e .)"
        )
    target = root / build_key(compiler) / LIBRARY_NAME
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    include, lib = _torch_dirs()
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        cmd = [
            *compiler,
            *CXXFLAGS,
            f"-I{include}",
            f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
            "-D_GLIBCXX_USE_CXX11_ABI=" + str(int(torch.compiled_with_cxx11_abi())),
            "-o",
            tmp,
            str(SOURCE),
            f"-L{lib}",
            "-lc10",
            "-ltorch_cpu",
            f"-Wl,-rpath,{lib}",
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TorchGlueError(f"cannot run the C++ compiler {compiler[0]!r}: {e}; install g++ or set KTT_CXX") from e
        if done.returncode != 0:
            raise TorchGlueError(
                f"building the tt device's torch glue failed ({shlex.join(cmd)}):\n"
                f"{done.stderr.strip()[-4000:]}\nfix the compiler set-up or set KTT_CXX"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: racing builds both load a complete library
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


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
    lib.ktt_torch_install.argtypes = [CALLBACK]
    lib.ktt_torch_install.restype = None
    lib.ktt_torch_set_error.argtypes = [ctypes.c_char_p]
    lib.ktt_torch_set_error.restype = None
    lib.ktt_torch_uninstall.argtypes = []
    lib.ktt_torch_current_device.restype = ctypes.c_int
    lib.ktt_torch_current_stream.argtypes = [ctypes.c_int]
    lib.ktt_torch_current_stream.restype = ctypes.c_int64
    lib.ktt_torch_adopt_storage.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.ktt_torch_adopt_storage.restype = ctypes.c_int
    lib.ktt_torch_pending_frees.argtypes = []
    lib.ktt_torch_pending_frees.restype = ctypes.c_int64
    lib.ktt_torch_take_frees.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
    lib.ktt_torch_take_frees.restype = ctypes.c_int64
    lib.ktt_torch_set_buffer.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_int64),
    ]
    lib.ktt_torch_set_buffer.restype = ctypes.c_int
    lib.ktt_torch_next_generator_is_default.argtypes = []
    lib.ktt_torch_next_generator_is_default.restype = None
    _lib = lib
    return lib
