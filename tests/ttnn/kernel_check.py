"""The kernel compile check: every compiler command TT-Metal's JIT issues for a program, replayed with the host's clang
targeting riscv32 in syntax-only mode (the way tt-metal's own clang-tidy flow checks kernels without sfpi).

``mock_p150.py`` records the JIT's command lines on a mocked P150 (its real flags, defines, include paths and
generated files: ``chlkc_*.cpp``, ``defines_generated.h``, ``kernel_includes.hpp``); :func:`replay` turns each
compile command into a clang one and parses the diagnostics. The sfpi headers are replaced by stand-ins written at
test time (``sfpi_stand_in.py``); C and C++ library headers come from Debian's bare-metal newlib and libstdc++
packages (``scripts/setup_env.sh`` installs them). An error counts against a kernel when it is in the kernel's own
files, or when the chain of notes that leads to it (an instantiation "requested here") passes through them: GCC and
clang disagree on a few constructs inside TT-Metal's own headers (``#pragma GCC unroll 0``, ``static_assert(false)``
in a template), and those are listed apart. Deprecation warnings in the kernel's own files count too: the kernels are
meant for the current API. Results are cached by the command line and the content of every file it read.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

CLANG = os.environ.get("KTT_CHECK_CLANG", "clang++")
NEWLIB = Path("/usr/include/newlib")
_CACHE_VERSION = 1


class CheckUnavailable(RuntimeError):
    """The host cannot run the check (no clang with a RISC-V target, no bare-metal headers); the message says why."""


@dataclass
class Diagnostic:
    file: str
    line: int
    col: int
    severity: str  # error, fatal error, warning
    message: str
    chain: list[tuple[str, int]] = field(default_factory=list)  # (file, line) of each note that follows it

    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass
class Replay:
    """One replayed compile: the kernel (TT-Metal's folder name), the processor, the diagnostics and the files read."""

    kernel: str
    processor: str
    cwd: str
    argv: list[str]
    returncode: int
    diagnostics: list[Diagnostic]
    cached: bool = False

    def own(self, own_files: set[str]) -> list[Diagnostic]:
        """The diagnostics that count against a kernel whose own files are ``own_files`` (resolved paths)."""
        out = []
        for d in self.diagnostics:
            places = [d.file] + [f for f, _ in d.chain]
            mine = any(_resolved(p) in own_files for p in places)
            if not mine and d.severity != "fatal error":  # a fatal error anywhere ends the check of the kernel
                continue
            if d.severity != "warning" or "deprecated" in d.message:
                out.append(d)
        return out

    def outside(self, own_files: set[str]) -> list[Diagnostic]:
        """Errors not caused by the kernel's own files (toolchain dialect differences inside TT-Metal's headers)."""
        counted = {id(d) for d in self.own(own_files)}
        return [d for d in self.diagnostics if d.severity != "warning" and id(d) not in counted]


@functools.cache
def _resolved(p: str) -> str:
    try:
        return str(Path(p).resolve())
    except OSError:
        return p


# ------------------------------------------------------------------------------------------------ the toolchain
def host_toolchain() -> list[str]:
    """The clang flags of a riscv32 bare-metal syntax check on this host; raises CheckUnavailable without one."""
    if shutil.which(CLANG) is None:
        raise CheckUnavailable(f"no {CLANG}: install clang (scripts/setup_env.sh does)")
    res = subprocess.run([CLANG, "-print-resource-dir"], capture_output=True, text=True)
    resource = res.stdout.strip()
    cxx = sorted(NEWLIB.glob("c++/*"))
    if not (NEWLIB / "stdint.h").exists() or not cxx:
        raise CheckUnavailable(
            "no bare-metal C / C++ headers under /usr/include/newlib: install libnewlib-dev and "
            "libstdc++-arm-none-eabi-newlib (scripts/setup_env.sh does)"
        )
    target = [d for d in cxx[-1].iterdir() if (d / "bits" / "c++config.h").exists()]
    flags = ["-nostdinc", "-isystem", f"{resource}/include", "-isystem", str(cxx[-1])]
    if target:
        flags += ["-isystem", str(target[0])]
    return [*flags, "-isystem", str(NEWLIB)]


_KEPT = ("-fno-exceptions", "-fno-rtti")


def clang_command(argv: list[str], sfpi_dir: Path, system: list[str]) -> list[str]:
    """The clang syntax check of one JIT compile command (``argv`` without the compiler): its includes, defines,
    language standard and sources kept; code generation, optimisation, dependency and GCC-only flags dropped."""
    out = [CLANG, "--target=riscv32-unknown-elf", "-march=rv32im", "-mabi=ilp32", "-fsyntax-only",
           "-ferror-limit=0", "-fno-color-diagnostics", "-fno-caret-diagnostics", "-Wno-everything",
           "-Wdeprecated-declarations"]  # fmt: skip
    i = 0
    while i < len(argv):
        x = argv[i]
        if x in ("-o", "-MF", "-MT", "-MQ"):
            i += 2
            continue
        if x in ("-include", "-x"):
            v = argv[i + 1]
            if x == "-include" and v.endswith("pch.h"):
                v = _pch_text(v)
            out += [x, v]
            i += 2
            continue
        if x.startswith("-I") and x.rstrip("/").endswith("runtime/sfpi/include"):
            out.append(f"-I{sfpi_dir}")
        elif x.startswith(("-I", "-D", "-U", "-std=")) or x in _KEPT or not x.startswith("-"):
            out.append(x)
        i += 1
    return out + system


def _pch_text(path: str) -> str:
    """The precompiled header's text under a name clang will not take for a .gch beside it."""
    copy = Path(path + ".text.h")
    if not copy.exists():
        shutil.copyfile(path, copy)
    return str(copy)


_DIAG = re.compile(
    r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)


def parse(stderr: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    pending: list[tuple[str, int]] = []  # "in instantiation of" lines before an error (not the include chain)
    for line in stderr.splitlines():
        m = _DIAG.match(line)
        if m is None:
            continue
        sev = m.group("sev")
        if sev == "note":
            if out:
                out[-1].chain.append((m.group("file"), int(m.group("line"))))
            continue
        if m.group("msg").startswith("in instantiation of"):
            pending.append((m.group("file"), int(m.group("line"))))
            continue
        d = Diagnostic(m.group("file"), int(m.group("line")), int(m.group("col")), sev, m.group("msg"))
        d.chain.extend(pending)
        pending = []
        out.append(d)
    return out


# ---------------------------------------------------------------------------------------------------- replay
def _kernel_of(cwd: str) -> tuple[str, str]:
    parts = Path(cwd).parts
    if "kernels" in parts:
        i = len(parts) - 1 - parts[::-1].index("kernels")
        return "/".join(parts[i + 1 : i + 3]), parts[-1]
    return parts[-2] if len(parts) > 1 else cwd, parts[-1]


def _read_deps(dep_file: Path) -> list[str]:
    if not dep_file.exists():
        return []
    text = dep_file.read_text().replace("\\\n", " ")
    _, _, rest = text.partition(":")
    return [p for p in rest.split() if p]


def _digest(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(set(paths)):
        h.update(p.encode())
        try:
            h.update(Path(p).read_bytes())
        except OSError:
            h.update(b"<missing>")
    return h.hexdigest()


def _stable(argv: list[str], cwd: str) -> str:
    """The command with the JIT's per-run temporary names removed (the cache key's command part)."""
    text = json.dumps([cwd, argv])
    return re.sub(r"\.\d{6,}_\d+\.", ".#.", text)


def replay_one(cmd: dict, sfpi_dir: Path, system: list[str], cache: Path | None) -> Replay:
    argv, cwd = cmd["argv"], cmd["cwd"]
    kernel, proc = _kernel_of(cwd)
    clang = clang_command(argv, sfpi_dir, system)
    key = hashlib.sha256(f"{_CACHE_VERSION}\0{_stable(clang, cwd)}".encode()).hexdigest()
    entry = cache / f"{key}.json" if cache is not None else None
    if entry is not None and entry.exists():
        saved = json.loads(entry.read_text())
        if _digest(saved["deps"]) == saved["digest"]:
            diags = [Diagnostic(**{**d, "chain": [tuple(c) for c in d["chain"]]}) for d in saved["diagnostics"]]
            return Replay(kernel, proc, cwd, clang, saved["returncode"], diags, cached=True)
    dep_file = Path(cwd) / "ktt-check.d"
    dep_file.unlink(missing_ok=True)
    res = subprocess.run([*clang, "-MD", "-MF", str(dep_file)], cwd=cwd, capture_output=True, text=True)
    diags = parse(res.stderr)
    deps = _read_deps(dep_file)  # clang writes none after a fatal error: such a result is not cached
    if entry is not None and deps and res.returncode in (0, 1):
        deps = [p if os.path.isabs(p) else os.path.join(cwd, p) for p in deps]
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(json.dumps({"deps": deps, "digest": _digest(deps), "returncode": res.returncode,
                                     "diagnostics": [d.__dict__ for d in diags]}))  # fmt: skip
    return Replay(kernel, proc, cwd, clang, res.returncode, diags)


def is_compile(cmd: dict) -> bool:
    """A kernel compile command of the JIT (not the firmware, the precompiled header or a link)."""
    argv = cmd["argv"]
    return "-c" in argv and "-DKERNEL_BUILD" in argv


def replay(commands: list[dict], sfpi_dir: Path, cache: Path | None = None, jobs: int = 2) -> list[Replay]:
    """Replay every kernel compile among ``commands`` (each once), ``jobs`` at a time."""
    system = host_toolchain()
    sfpi_dir = Path(sfpi_dir).resolve()
    seen: dict[str, dict] = {}
    for c in commands:
        if is_compile(c):
            seen.setdefault(c["cwd"], c)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda c: replay_one(c, sfpi_dir, system, cache), seen.values()))


def report(replays: list[Replay], own_files: dict[str, set[str]]) -> list[str]:
    """One line per counted diagnostic: ``kernel processor file:line:col: severity: message``; ``own_files`` maps a
    kernel (TT-Metal's folder name) to its own files."""
    lines = []
    for r in replays:
        for d in r.own(own_files.get(r.kernel, set())):
            lines.append(f"{r.kernel} [{r.processor}] {d.where()}: {d.severity}: {d.message}")
    return lines
