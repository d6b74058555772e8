"""One builder for Kohaku-TT's native libraries, and C boundaries read from their headers.

Each library is a :class:`Recipe` (its sources, the headers it depends on, compiler flags and anything else its binary
depends on); :func:`build` compiles it once into ``<cache>/<folder>/<key>/<name>``, where ``key`` hashes all of that
and the compiler's identity, so a change to any of them builds a new library and an old one is never loaded by
mistake. A build writes a temporary file next to its target and renames it into place, so processes racing to build
the same library both end up loading a complete one. The runtime core (``hal/_native.py``, C behind cffi) and the
torch glue (``frontends/torch/native.py``, C++ behind ctypes) are both built here.

A header's block between ``/* KTT_CDEF_BEGIN */`` and ``/* KTT_CDEF_END */`` holds plain C declarations, the one
statement of a library's boundary: cffi reads the runtime core's (:func:`cdef_block`), and :func:`c_boundary` turns the
torch glue's into ctypes signatures and a ctypes structure for each struct of callbacks, so the C++ and the Python
side never keep copies of each other's declarations.

This module stays light (no torch, no NumPy, no process started to name the compiler): the torch glue's cache key is
computed at ``import torch``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kohakutt.errors import KohakuTTError

NATIVE_DIR = Path(__file__).resolve().parents[1] / "native"
CDEF_BEGIN, CDEF_END = "/* KTT_CDEF_BEGIN */", "/* KTT_CDEF_END */"


class NativeBuildError(KohakuTTError):
    """A native library cannot be built or loaded (no compiler, a failed compile, missing sources)."""


class BuildFailed(NativeBuildError):
    """A build command failed; ``stderr`` holds the compiler's messages."""

    def __init__(self, message: str, stderr: str):
        super().__init__(message)
        self.stderr = stderr


# language -> (knob, compilers tried in order, what to install)
COMPILERS = {"c": ("KTT_CC", ("cc", "gcc", "clang"), "gcc"), "c++": ("KTT_CXX", ("c++", "g++", "clang++"), "g++")}


def find_compiler(language: str, override: str | None = None) -> list[str]:
    """The compiler command for ``language`` (``"c"`` or ``"c++"``): ``override`` (the knob ``KTT_CC`` /
    ``KTT_CXX``, which may carry arguments, e.g. ``"ccache gcc"``) or the first usual compiler on ``PATH``."""
    knob, names, package = COMPILERS[language]
    if override:
        argv = shlex.split(override)
        if argv and shutil.which(argv[0]):
            return argv
        raise NativeBuildError(
            f"{knob}={override!r} names no compiler on PATH; set {knob} to a working {language.upper()} compiler "
            f"or unset it"
        )
    for name in names:
        if shutil.which(name):
            return [name]
    raise NativeBuildError(
        f"no {language.upper()} compiler found (tried {', '.join(names)}) to build Kohaku-TT's native code; install "
        f"{package} (e.g. `apt-get install {package}`) or set {knob} to a {language.upper()} compiler"
    )


def compiler_id(compiler: list[str]) -> str:
    """What identifies ``compiler`` in a cache key without starting it: the command, and the resolved executable's
    path, size and time stamp (an upgrade changes them). Looked up once per process."""
    return _compiler_id(tuple(compiler))


@functools.cache
def _compiler_id(compiler: tuple[str, ...]) -> str:
    exe = shutil.which(compiler[0]) or compiler[0]
    try:
        real = os.path.realpath(exe)
        st = os.stat(real)
    except OSError as e:
        raise NativeBuildError(f"cannot find the compiler {compiler[0]!r}: {e}; install gcc / g++ or set "
                               "KTT_CC / KTT_CXX") from e  # fmt: skip
    return "\0".join([*compiler, real, str(st.st_size), str(st.st_mtime_ns)])


@dataclass(frozen=True)
class Recipe:
    """How to build one shared library: ``compiler + flags + sources + libs -o <name>``."""

    name: str  # the file name, e.g. "libktt_runtime.so"
    what: str  # what it is, for messages ("the native runtime core")
    language: str  # "c" or "c++"
    sources: tuple[Path, ...]
    headers: tuple[Path, ...] = ()  # files the binary depends on besides the sources
    flags: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()  # after the sources: -L, -l, -Wl,...
    salt: str = ""  # anything else the binary depends on (e.g. the torch version it is built against)
    prefix: str = ""  # the key's readable start ("torch-2.13.0")

    def key(self, compiler: list[str]) -> str:
        """The cache folder's name: a hash of everything the binary depends on."""
        h = hashlib.sha256()
        for path in (*self.sources, *self.headers):
            h.update(path.name.encode() + b"\0" + _read(path, self.what) + b"\0")
        h.update("\0".join([compiler_id(compiler), *self.flags, *self.libs, self.salt]).encode())
        return f"{self.prefix}-{h.hexdigest()[:20]}" if self.prefix else h.hexdigest()[:20]

    def command(self, compiler: list[str], output: str) -> list[str]:
        return [*compiler, *self.flags, "-o", output, *map(str, self.sources), *self.libs]


def target(recipe: Recipe, root: Path, compiler: list[str]) -> Path:
    """Where ``recipe`` built with ``compiler`` lives under ``root`` (built or not)."""
    return root / recipe.key(compiler) / recipe.name


def build(recipe: Recipe, root: Path, compiler: list[str], timeout: float = 600) -> Path:
    """``recipe`` built under ``root`` (compiled now unless a complete build is there); its path."""
    missing = [p for p in recipe.sources if not p.exists()]
    if missing or not recipe.sources:
        raise NativeBuildError(
            f"{recipe.what}: source {missing[0] if missing else '(none)'} is missing; Kohaku-TT ships its native code "
            "as sources next to the package: use a repository checkout or an editable install (pip install -e .)"
        )
    return build_cached(target(recipe, root, compiler), lambda out: [recipe.command(compiler, out)], recipe.what,
                        timeout)  # fmt: skip


def build_cached(path: Path, commands: Callable[[str], list[list[str]]], what: str, timeout: float = 600) -> Path:
    """Build ``path`` unless it exists: ``commands(tmp)`` are run in order and leave the result in ``tmp``, a
    temporary path next to ``path`` (they may make scratch files starting with ``tmp``, removed after), which is
    then renamed into place. A failure raises :class:`BuildFailed` and leaves no file behind."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        for cmd in commands(tmp):
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise NativeBuildError(f"building {what}: cannot run {cmd[0]!r}: {e}; install gcc / g++ or set "
                                       "KTT_CC / KTT_CXX") from e  # fmt: skip
            if done.returncode != 0:
                raise BuildFailed(f"building {what} failed ({shlex.join(cmd)}):\n{done.stderr.strip()[-4000:]}\n"
                                  "fix the compiler set-up, or point KTT_CC / KTT_CXX at another compiler",
                                  done.stderr)  # fmt: skip
        os.chmod(tmp, 0o755)  # mkstemp made it private; the cache may be shared
        os.replace(tmp, path)  # atomic: a racing build replaces a complete file with an identical one
    finally:
        for scratch in path.parent.glob(Path(tmp).name + "*"):
            scratch.unlink(missing_ok=True)
    return path


def cdef_block(header: Path) -> str:
    """The declarations between ``header``'s KTT_CDEF_BEGIN and KTT_CDEF_END markers."""
    text = _read(header, str(header)).decode()
    begin, end = text.find(CDEF_BEGIN), text.find(CDEF_END)
    if begin < 0 or end < begin:
        raise NativeBuildError(f"{header} lacks the {CDEF_BEGIN} / {CDEF_END} markers around its declarations")
    return text[begin + len(CDEF_BEGIN) : end]


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise NativeBuildError(f"{what}: cannot read {path}: {e}; the native sources ship with a repository "
                               "checkout or an editable install") from e  # fmt: skip


# ------------------------------------------------------------------------------------------ C boundaries in ctypes
_CTYPES: dict[str, Any] = {
    "void": None,
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "int64_t": ctypes.c_int64,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "double": ctypes.c_double,
    "void*": ctypes.c_void_p,
    "char*": ctypes.c_char_p,
}
_PARAM = re.compile(r"^(?P<type>[A-Za-z_][\w\s]*?[\s*]+)(?P<name>[A-Za-z_]\w*)$")
_FUNCTION = re.compile(r"^(?P<ret>[\w\s*]+?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)$")
_POINTER = re.compile(r"^(?P<ret>[\w\s*]+?)\s*\(\s*\*\s*(?P<name>[A-Za-z_]\w*)\s*\)\s*\((?P<params>[^()]*)\)$")
_STRUCT = re.compile(r"typedef\s+struct\s+(?P<tag>\w+)\s*\{(?P<body>[^{}]*)\}\s*(?P<name>\w+)\s*;", re.S)


@dataclass(frozen=True)
class Signature:
    """A C function's ctypes signature (``restype`` None for void)."""

    name: str
    restype: Any
    argtypes: tuple[Any, ...]
    params: tuple[str, ...]

    def functype(self) -> Any:
        """The ctypes function-pointer type (a callback of this signature)."""
        return ctypes.CFUNCTYPE(self.restype, *self.argtypes)


@dataclass(frozen=True)
class Boundary:
    """A header's C boundary: its functions, and its structs of function pointers (fields in declaration order)."""

    functions: dict[str, Signature]
    structs: dict[str, tuple[Signature, ...]]
    structures: dict[str, type[ctypes.Structure]]

    def bind(self, lib: Any) -> Any:
        """Set the signature of every function of the boundary on ``lib`` (a ctypes library); returns ``lib``."""
        for sig in self.functions.values():
            fn = getattr(lib, sig.name)
            fn.restype, fn.argtypes = sig.restype, list(sig.argtypes)
        return lib

    def structure(self, struct: str) -> type[ctypes.Structure]:
        """The ctypes structure of ``struct``: one field per function pointer, of its typed callback type."""
        return self.structures[struct]


def c_boundary(header: Path) -> Boundary:
    """The marked block of ``header`` read as ctypes: plain C function declarations, and ``typedef struct`` s whose
    fields are function pointers, over the scalar types in ``_CTYPES``, those structs, and pointers to them."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", cdef_block(header), flags=re.S)
    known = dict(_CTYPES)
    structs: dict[str, tuple[Signature, ...]] = {}
    structures: dict[str, type[ctypes.Structure]] = {}
    for m in _STRUCT.finditer(text):
        name = m.group("name")
        fields = tuple(_declaration(d, _POINTER, header, known) for d in _statements(m.group("body")))
        structs[name] = fields
        structures[name] = type(name, (ctypes.Structure,), {"_fields_": [(f.name, f.functype()) for f in fields]})
        known[name] = structures[name]
    functions = {}
    for decl in _statements(_STRUCT.sub(" ", text)):
        sig = _declaration(decl, _FUNCTION, header, known)
        functions[sig.name] = sig
    return Boundary(functions, structs, structures)


def _statements(text: str) -> list[str]:
    return [" ".join(s.split()) for s in text.split(";") if s.strip()]


def _declaration(decl: str, pattern: re.Pattern[str], header: Path, known: dict[str, Any]) -> Signature:
    m = pattern.match(decl)
    if m is None:
        raise NativeBuildError(f"{header}: cannot read the declaration {decl!r} (the marked block holds plain C "
                               "functions and typedef structs of function pointers)")  # fmt: skip
    params = [p.strip() for p in m.group("params").split(",") if p.strip() and p.strip() != "void"]
    types, names = [], []
    for p in params:
        pm = _PARAM.match(p)
        if pm is None:
            raise NativeBuildError(f"{header}: the parameter {p!r} of {m.group('name')} needs a type and a name")
        types.append(_ctype(pm.group("type"), header, known))
        names.append(pm.group("name"))
    return Signature(m.group("name"), _ctype(m.group("ret"), header, known), tuple(types), tuple(names))


def _ctype(spelling: str, header: Path, known: dict[str, Any]) -> Any:
    words = [w for w in spelling.replace("*", " * ").split() if w != "const"]
    stars = words.count("*")
    base = " ".join(w for w in words if w != "*")
    if stars == 1 and f"{base}*" in known:
        return known[f"{base}*"]
    if base not in known or (stars and known[base] is None):
        raise NativeBuildError(f"{header}: no ctypes type for {spelling.strip()!r}")
    t = known[base]
    for _ in range(stars):
        t = ctypes.POINTER(t)
    return t
