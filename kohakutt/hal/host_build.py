"""The host build of TT-Metal 0.81.1's kernel API: kernels' C++ compiled for the CPU and run by the simulator.

``native/kernel_api/include`` holds headers with the kernel API's names and signatures (``api/dataflow/...``,
``api/compute/...``, ``api/tensor/...``); ``native/kernel_api/sim`` implements them over the simulated cores' L1,
circular buffers, NOC, semaphores and tile registers, with the card's arithmetic from ``native/runtime``. That
simulator core is one shared library (:func:`sim_library`); each kernel is compiled against the headers into its own
small library (:func:`build_kernel`) with its defines, compile-time args and compute config baked in, as TT-Metal's
JIT does, and cached by everything it depends on. A call the host build does not implement fails here, at build
time, with a :class:`KernelBuildError` naming it and the kernel's file and line.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi

from kohakutt import config
from kohakutt import native as builder
from kohakutt.errors import ProgramError
from kohakutt.hal import _native
from kohakutt.hal.program import MathFidelity

API_DIR = _native.NATIVE_DIR / "kernel_api"
INCLUDE_DIR = API_DIR / "include"
SIM_DIR = API_DIR / "sim"
SIM_HEADER = SIM_DIR / "ktt_sim.h"
TT_METAL_VERSION = "0.81.1"  # the kernel API the headers follow
# -ffp-contract=off: the card model's float operations round as written; -fno-strict-aliasing: kernels pun L1.
CXXFLAGS = ("-std=c++20", "-O2", "-fPIC", "-ffp-contract=off", "-fno-strict-aliasing", "-pthread")
KERNEL_FLAGS = ("-Wno-deprecated-declarations", "-Wno-unused-parameter")
# As TT-Metal's reader / writer configs build them: a reader on NCRISC (RISCV_1, NOC 1), a writer on BRISC (NOC 0).
KIND_DEFINES = {
    "reader": ("KERNEL_BUILD", "COMPILE_FOR_NCRISC", "NOC_INDEX=1"),
    "writer": ("KERNEL_BUILD", "COMPILE_FOR_BRISC", "NOC_INDEX=0"),
    "compute": ("KERNEL_BUILD", "COMPILE_FOR_TRISC", "NOC_INDEX=0"),
}


class KernelBuildError(ProgramError):
    """A kernel's C++ does not build against the host kernel API (a call it does not implement, a C++ error)."""


@dataclass(frozen=True)
class SimLibrary:
    """The simulator core: ``lib`` has the functions of ``ktt_sim.h``; ``soname`` is what kernels link against."""

    ffi: cffi.FFI
    lib: Any
    path: Path


@dataclass(frozen=True)
class KernelBinary:
    """One built kernel: its library and the address of its ``ktt_kernel_entry``."""

    path: Path
    entry: int
    handle: Any


# ---------------------------------------------------------------------------------------------- the sim core
def _sim_sources() -> tuple[list[Path], list[Path]]:
    return sorted(_native.RUNTIME_DIR.glob("*.c")), sorted(SIM_DIR.glob("*.cpp"))


def _headers() -> list[Path]:
    return sorted(p for p in INCLUDE_DIR.rglob("*.h")) + sorted(SIM_DIR.glob("*.h")) + sorted(
        _native.RUNTIME_DIR.glob("*.h"))  # fmt: skip


@functools.cache
def _source_key() -> str:
    h = hashlib.sha256()
    c_sources, cpp_sources = _sim_sources()
    for path in [*c_sources, *cpp_sources, *_headers()]:
        h.update(str(path.relative_to(_native.NATIVE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _compilers() -> tuple[list[str], list[str]]:
    return _native.find_compiler(config.get("KTT_CC")), builder.find_compiler("c++", config.get("KTT_CXX"))


def sim_key() -> str:
    """What the simulator core library depends on: its sources and headers, the compilers and the flags."""
    cc, cxx = _compilers()
    h = hashlib.sha256(_source_key().encode())
    for comp in (cc, cxx):
        h.update("\0".join([*comp, builder.compiler_id(comp)]).encode())
    h.update("\0".join([*_native.CFLAGS, *CXXFLAGS]).encode())
    return h.hexdigest()[:20]


@functools.cache
def sim_library() -> SimLibrary:
    """The simulator core, built into the cache on first use (once per machine, compiler and source version)."""
    cc, cxx = _compilers()
    key = sim_key()
    name = f"libktt_sim-{key}.so"
    root = config.cache_dir() / "kernel_api" / key
    c_sources, cpp_sources = _sim_sources()
    cflags = [f for f in _native.CFLAGS if f != "-shared"]

    def commands(tmp: str) -> list[list[str]]:
        objects = []
        cmds = []
        for src in c_sources:
            obj = f"{tmp}.{src.stem}.c.o"
            cmds.append([*cc, *cflags, f"-I{_native.RUNTIME_DIR}", "-c", str(src), "-o", obj])
            objects.append(obj)
        for src in cpp_sources:
            obj = f"{tmp}.{src.stem}.cpp.o"
            cmds.append([*cxx, *CXXFLAGS, "-Wall", "-Wextra", "-Wno-unused-parameter", f"-I{INCLUDE_DIR}",
                         f"-I{SIM_DIR}", f"-I{_native.RUNTIME_DIR}", "-O3", "-c", str(src), "-o", obj])  # fmt: skip
            objects.append(obj)
        cmds.append([*cxx, "-shared", "-pthread", f"-Wl,-soname,{name}", "-o", tmp, *objects, "-lm"])
        return cmds

    path = builder.build_cached(root / name, commands, "the simulator's host kernel API core")
    ffi = cffi.FFI()
    ffi.cdef(builder.cdef_block(SIM_HEADER))
    try:
        handle = ffi.dlopen(str(path))
    except OSError as e:
        raise _native.NativeBuildError(
            f"cannot load the simulator core {path}: {e}; delete that folder to rebuild it"
        ) from e
    return SimLibrary(ffi, handle, path)


# ------------------------------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class KernelSpec:
    """What a kernel build depends on (TT-Metal's JIT keys its builds on the same): source, kind, defines,
    compile-time args (positional and named) and, for compute, the fidelity, fp32 DST and approx mode."""

    source: str
    kind: str
    name: str = "kernel"
    path: str | None = None  # the .cpp the source came from: its folder is searched for "..." includes
    local_headers: tuple[tuple[str, str], ...] = ()  # (name, text) of the headers in that folder
    defines: tuple[tuple[str, str], ...] = ()
    compile_time_args: tuple[int, ...] = ()
    named_compile_time_args: tuple[tuple[str, int], ...] = ()
    math_fidelity: str = "HiFi4"
    fp32_dest_acc_en: bool = False
    math_approx_mode: bool = False

    def key(self) -> str:
        h = hashlib.sha256(sim_key().encode())
        h.update(repr((KIND_DEFINES[self.kind], KERNEL_FLAGS)).encode())  # what the build adds for the kind
        h.update(repr((self.source, self.kind, self.path, self.local_headers, self.defines, self.compile_time_args,
                       self.named_compile_time_args, self.math_fidelity, self.fp32_dest_acc_en,
                       self.math_approx_mode)).encode())  # fmt: skip
        return h.hexdigest()[:24]


def spec_of(kernel: Any, program: str = "") -> KernelSpec:
    """The build spec of a ``kohakutt.hal.program.Kernel``."""
    path = getattr(kernel, "path", None)
    named = getattr(kernel, "named_compile_time_args", None) or {}
    headers = ()
    if path is not None:
        folder = Path(path).parent
        headers = tuple((h.name, h.read_text()) for h in sorted([*folder.glob("*.h"), *folder.glob("*.hpp")]))
    return KernelSpec(
        source=kernel.source,
        kind=kernel.kind,
        name=f"{program}/{kernel.name}" if program else kernel.name,
        path=str(path) if path else None,
        local_headers=headers,
        defines=tuple(sorted((str(k), str(v)) for k, v in kernel.defines.items())),
        compile_time_args=tuple(int(a) for a in kernel.compile_time_args),
        named_compile_time_args=tuple(sorted((str(k), int(v)) for k, v in named.items())),
        math_fidelity=kernel.fidelity.name,
        fp32_dest_acc_en=bool(kernel.fp32_dest_acc_en),
        math_approx_mode=bool(kernel.math_approx_mode),
    )


def _wrapper(spec: KernelSpec) -> str:
    """The translation unit the build compiles: the kernel's source under a #line naming its file, then the entry
    point the simulator calls."""
    where = (spec.path or f"{spec.name}.cpp").replace("\\", "/").replace('"', "'")
    return (f'#line 1 "{where}"\n{spec.source}\n'
            '#line 1 "<kohakutt host build>"\nextern "C" void ktt_kernel_entry() { kernel_main(); }\n')  # fmt: skip


def _command_defines(spec: KernelSpec) -> list[str]:
    out = [f"-iquote{Path(spec.path).parent}"] if spec.path else []
    out += [f"-D{d}" for d in KIND_DEFINES[spec.kind]]
    out += [f"-D{k}={v}" if v != "" else f"-D{k}" for k, v in spec.defines]
    if spec.compile_time_args:
        out.append("-DKERNEL_COMPILE_TIME_ARGS=" + ",".join(str(a) for a in spec.compile_time_args))
    if spec.named_compile_time_args:
        named = ",".join(f'{{"{k}",{v}}}' for k, v in spec.named_compile_time_args)
        out.append(f"-DKERNEL_COMPILE_TIME_ARG_MAP={named}")
    if spec.kind == "compute":
        out += [
            f"-DKTT_MATH_FIDELITY={int(MathFidelity[spec.math_fidelity])}",  # as the JIT defines it
            f"-DKTT_DST_ACCUM_MODE={int(spec.fp32_dest_acc_en)}",
            f"-DKTT_APPROX={int(spec.math_approx_mode)}",
        ]
    return out


_loaded: dict[str, KernelBinary] = {}
_lock = threading.Lock()
stats: collections.Counter[str] = collections.Counter()  # builds: kernel variants built or loaded by this process


def build_kernel(spec: KernelSpec) -> KernelBinary:
    """The kernel built against the host kernel API (from the cache when it was built before) and loaded."""
    key = spec.key()
    with _lock:
        hit = _loaded.get(key)
    if hit is not None:
        return hit
    sim = sim_library()
    _, cxx = _compilers()
    root = config.cache_dir() / "kernel_api" / "kernels" / key[:2] / key
    target = root / "kernel.so"

    def commands(tmp: str) -> list[list[str]]:
        src = Path(f"{tmp}.cpp")
        src.write_text(_wrapper(spec))
        return [[*cxx, *CXXFLAGS, "-shared", *KERNEL_FLAGS, f"-I{INCLUDE_DIR}", *_command_defines(spec), "-o", tmp,
                 str(src), f"-L{sim.path.parent}", f"-l:{sim.path.name}", f"-Wl,-rpath,{sim.path.parent}"]]  # fmt: skip

    try:
        path = builder.build_cached(target, commands, f"kernel {spec.name!r}")
    except _native.NativeBuildError as e:
        raise KernelBuildError(explain(spec, getattr(e, "stderr", "") or str(e))) from None
    ffi = cffi.FFI()
    ffi.cdef("void ktt_kernel_entry(void);")
    handle = ffi.dlopen(str(path))
    binary = KernelBinary(path, int(ffi.cast("uintptr_t", handle.ktt_kernel_entry)), handle)
    with _lock:
        if key not in _loaded:
            stats["builds"] += 1
        _loaded[key] = binary
    return binary


def build_kernels(specs: dict[str, KernelSpec]) -> dict[str, KernelBinary]:
    """Several kernels built at once (the compiler runs in parallel for those not cached); the first failure is
    raised once all have finished."""
    if len(specs) < 2:
        return {name: build_kernel(spec) for name, spec in specs.items()}
    sim_library()  # once, before the kernels that link against it
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(specs), os.cpu_count() or 1)) as pool:
        futures = {name: pool.submit(build_kernel, spec) for name, spec in specs.items()}
    return {name: f.result() for name, f in futures.items()}


_NOT_DECLARED = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):\d+: error: '(?P<name>[^']+)' (?:was not declared in "
                           r"this scope|is not a member of '[^']*'|has not been declared)", re.M)  # fmt: skip
_NO_HEADER = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):\d+: fatal error: (?P<name>[^:\n]+): No such file", re.M)
_ERROR = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):\d+: (?:fatal )?error: (?P<msg>.*)$", re.M)


def explain(spec: KernelSpec, stderr: str) -> str:
    """A build failure in the kernel author's terms: what the host build lacks (a call, a header) and where."""
    stderr = stderr.replace("\u2018", "'").replace("\u2019", "'")
    head = f"kernel {spec.name!r} ({spec.kind}) does not build for the simulator"
    api = f"Kohaku-TT's host build of the TT-Metal {TT_METAL_VERSION} kernel API"
    missing = [m for m in _NOT_DECLARED.finditer(stderr) if not m.group("file").endswith(".h")]
    if missing:
        names = list(dict.fromkeys(f"{m.group('name')} ({Path(m.group('file')).name}:{m.group('line')})"
                                   for m in missing))  # fmt: skip
        return (f"{head}: it calls {', '.join(names)}, which {api} does not implement (or which TT-Metal "
                f"{TT_METAL_VERSION} does not have); use the calls the host build has (docs/concepts/programs.md) "
                "or check the spelling")  # fmt: skip
    headers = list(_NO_HEADER.finditer(stderr))
    if headers:
        m = headers[0]
        return (
            f"{head}: it includes {m.group('name')} ({Path(m.group('file')).name}:{m.group('line')}), which "
            f"{api} does not implement; 0.81.1's includes are api/dataflow/dataflow_api.h and api/compute/..."
        )
    errors = [f"{Path(m.group('file')).name}:{m.group('line')}: {m.group('msg')}" for m in _ERROR.finditer(stderr)]
    detail = "; ".join(list(dict.fromkeys(errors))[:4]) if errors else stderr.strip()[-2000:]
    return f"{head}: {detail}"


def compile_flags(spec: KernelSpec) -> list[str]:
    """The compiler arguments a kernel build uses (for tools and tests)."""
    return [*CXXFLAGS, *KERNEL_FLAGS, f"-I{INCLUDE_DIR}", *_command_defines(spec)]


__all__ = ["KernelBinary", "KernelBuildError", "KernelSpec", "SimLibrary", "build_kernel", "build_kernels", "explain",
           "sim_library", "spec_of"]  # fmt: skip
