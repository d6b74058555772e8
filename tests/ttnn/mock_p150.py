"""A mocked Blackhole P150 for TT-NN 0.81.1 on a machine without a card (shared by the TT-NN replay tests and the
own programs' compile check).

TT-Metal opens a "mock" cluster when ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` names a cluster descriptor: no chip is
touched, device memory is allocated by TT-Metal's own allocator, and every host-side check of an op or program runs
(TT-NN's validation, program factories, circular-buffer placement, the JIT build's generated files and command
lines). What it cannot do is compile kernels: the wheel ships no RISC-V compiler. :func:`prepare` builds, under a
work folder, everything that takes, generated here and never copied into the repository:

- ``root/``: a ``TT_METAL_RUNTIME_ROOT`` tree of symlinks to the installed ``ttnn`` package, whose
  ``runtime/sfpi/compiler/bin/riscv-tt-elf-g++`` is a stand-in (it answers ``--version``, can record each command
  line, can hand it to a compiler of the caller's, then stops the build there or, with ``complete=True``, "builds":
  an empty object per compile and, per link, a one-instruction kernel image at the address the firmware exports, so
  TT-Metal loads it and the op runs to its end on the mock, every later device op of a composite TT-NN op
  included), or a link to a real sfpi install;
- ``root/tt_metal/pre-compiled/<key>``: the mock's firmware build key pointed at one of the wheel's pre-compiled
  Blackhole firmware sets (the mock turns off 2-erisc mode, so its key is none of the wheel's; the firmware is never
  run on a mock, only parsed);
- ``p150.yaml``: a single P150 (no harvested Tensix column; TT-Metal reports a 13 x 10 compute grid, 8 DRAM banks);
- ``cache/``: TT-Metal's JIT cache for these runs, out of the shared ``~/.cache``.

Standard library only, Python 3.11+: it is imported by the main test environment (to prepare the tree and run
scripts in the TT-NN venv) and by those scripts (for :func:`open_device` and :func:`reached_build`).

Use::

    mock = prepare(work_dir)                       # cached: a second call with the same options reuses the tree
    mock = prepare(work_dir, complete=True)        # ops run to their end (kernel images are stand-ins)
    res = mock.run(["-c", "import mock_p150; d = mock_p150.open_device(); ..."])
    mock.commands()                                # with prepare(..., record_commands=True)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TTNN_VERSION = "0.81.1"
REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
STAND_IN_MARK = "ktt-mock: stand-in riscv-tt-elf-g++"
_VERSION = 2  # of the prepared tree's layout: a change rebuilds trees prepared by an older module

# A single P150 (Blackhole, no harvested Tensix column) for TT-Metal's mock cluster.
CLUSTER_DESC = """\
arch: {0: blackhole}
chips: {}
chip_unique_ids: {0: 4466765987841}
ethernet_connections: []
ethernet_connections_to_remote_devices: []
chips_with_mmio: [{0: 0}]
harvesting:
  0: {noc_translation: true, harvest_mask: 0, dram_harvesting_mask: 0, eth_harvesting_mask: 288,
      pcie_harvesting_mask: 2, l2cpu_harvesting_mask: 0}
chip_to_boardtype: {0: p150}
boards:
  - [{board_id: 4466765987841}, {board_type: p150}, {chips: [0]}]
asic_locations: {0: 0}
"""

# What a mocked P150 reports (checked by the tests against TT-Metal's answers).
COMPUTE_GRID = (13, 10)
DRAM_BANKS = 8


class MockUnavailable(RuntimeError):
    """The mocked device cannot be set up here (no TT-NN venv, another ttnn version, ...); the message says why."""


def find_ttnn_python() -> Path | None:
    """The Python with ttnn: ``KTT_TTNN_PYTHON``, else the checkout's ``.venv-ttnn``; None when it does not exist."""
    given = os.environ.get("KTT_TTNN_PYTHON")
    path = Path(given) if given else REPO / ".venv-ttnn" / "bin" / "python"
    return path if path.exists() else None


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without TT_METAL_* and PYTHON* settings, TT-Metal's logging off, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TT_METAL_", "PYTHON"))}
    return env | {"TT_LOGGER_LEVEL": "off", "LOGURU_LEVEL": "WARNING"} | extra


@dataclass(frozen=True)
class MockP150:
    """A prepared mocked P150: where its files are and how to run the TT-NN venv's Python against it."""

    python: Path  # the TT-NN venv's Python
    root: Path  # TT_METAL_RUNTIME_ROOT
    cluster_desc: Path  # TT_METAL_MOCK_CLUSTER_DESC_PATH
    cache: Path  # TT_METAL_CACHE
    command_log: Path | None  # where the stand-in records each compiler command line (None: not recorded)
    firmware_keys: tuple[str, ...]  # the mock's firmware build keys linked to pre-compiled firmware

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process in the TT-NN venv that opens the mocked P150 (``extra`` added; this
        folder and the checkout on ``PYTHONPATH``)."""
        return (
            clean_env(
                TT_METAL_RUNTIME_ROOT=str(self.root),
                TT_METAL_MOCK_CLUSTER_DESC_PATH=str(self.cluster_desc),
                TT_METAL_CACHE=str(self.cache),
                PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]),
            )
            | extra
        )

    def run(self, args: list[str], *, input: str | None = None, timeout: float = 600,
            **extra_env: str) -> subprocess.CompletedProcess:  # fmt: skip
        """Run the TT-NN venv's Python with ``args`` against the mock; output captured as text. It runs in the
        mock's work folder: TT-Metal writes a ``generated/`` folder into the current one."""
        return subprocess.run([str(self.python), *args], input=input, capture_output=True, text=True,
                              env=self.env(**extra_env), timeout=timeout, cwd=self.root.parent)  # fmt: skip

    def commands(self) -> list[dict]:
        """The compiler command lines the JIT issued since the last :meth:`clear_commands`, oldest first: each
        ``{"cwd": folder, "argv": [arguments...]}`` (argv without the compiler itself)."""
        if self.command_log is None:
            raise MockUnavailable("this mock does not record commands: prepare(..., record_commands=True)")
        out = []
        files = sorted(self.command_log.glob("cmd.*"), key=lambda p: (p.stat().st_mtime_ns, p.name))
        for f in files:
            fields = f.read_bytes().decode(errors="replace").split("\0")
            if fields and fields[-1] == "":
                fields.pop()
            if fields:
                out.append({"cwd": fields[0], "argv": fields[1:]})
        return out

    def clear_commands(self) -> None:
        if self.command_log is not None:
            for f in self.command_log.glob("cmd.*"):
                f.unlink()


# --------------------------------------------------------------------------------------------------- set-up
def _ttnn_dir(python: Path) -> Path:
    if not python.exists():
        raise MockUnavailable(f"{python} does not exist: run scripts/ttnn_venv.sh (needs Python 3.12)")
    code = (
        "import importlib.metadata as m, importlib.util as u, json, pathlib; s = u.find_spec('ttnn');"
        "print(json.dumps([m.version('ttnn'), str(pathlib.Path(s.origin).resolve().parent) if s else None]))"
    )
    res = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise MockUnavailable(f"{python} has no ttnn: {res.stderr.strip().splitlines()[-1:]}")
    version, where = json.loads(res.stdout)
    if version != TTNN_VERSION or where is None:
        raise MockUnavailable(f"{python} has ttnn {version}, the mock is made for {TTNN_VERSION}")
    return Path(where)


def _stand_in(command_log: Path | None, compiler: Path | None, images: Path | None = None) -> str:
    """The stand-in compiler script: record, run ``compiler``, then stop (``images`` None) or make the outputs."""
    lines = [
        "#!/bin/sh",
        "# Written by tests/ttnn/mock_p150.py: TT-Metal's JIT calls this in place of sfpi's compiler.",
        'if [ "$1" = "--version" ]; then echo "riscv-tt-elf-g++ (ktt mock stand-in) 15.1.0"; exit 0; fi',
    ]
    if command_log is not None:
        lines.append(f'f=$(mktemp "{command_log}/cmd.XXXXXXXX") && printf "%s\\0" "$PWD" "$@" > "$f"')
    if compiler is not None:
        lines.append(f'"{compiler}" "$@" || exit $?')
    if images is None:
        if compiler is not None:
            lines.append("exit 0")
        else:
            lines += [f'echo "{STAND_IN_MARK}: no RISC-V compiler on this machine; the build stops here" >&2', "exit 1"]
        return "\n".join(lines) + "\n"
    # complete: an empty object (and its dependency file) per compile, a stand-in kernel image per link
    lines += [
        'out=""; fw=""; srcs=""; prev=""',
        'for a in "$@"; do',
        '  [ "$prev" = "-o" ] && out="$a"',
        '  case "$a" in',
        '    -Wl,--just-symbols=*) fw="${a#-Wl,--just-symbols=}";;',
        '    *.cc|*.cpp|*.c|*.S) srcs="$srcs $a";;',
        "  esac",
        '  prev="$a"',
        "done",
        '[ -n "$out" ] || exit 0',
        'case "$out" in',
        "  *.elf)",
        '    proc="${fw%/*}"; proc="${proc##*/}"; key="${fw%/*/*}"; key="${key##*/}"',
        f'    img="{images}/$key/$proc.elf"',
        f'    [ -f "$img" ] || {{ echo "{STAND_IN_MARK}: no stand-in kernel image for firmware $fw" >&2; exit 1; }}',
        '    cp "$img" "$out";;',
        "  *)",
        '    : > "$out"',
        '    case " $* " in *" -MMD "*) printf "%s:%s\\n" "$out" "$srcs" > "${out%.*}.d";; esac;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"


def _elf_symbol(path: Path, name: str) -> int | None:
    """The value of symbol ``name`` in 32-bit little-endian ELF ``path`` (None when absent)."""
    b = path.read_bytes()
    shoff = struct.unpack_from("<I", b, 0x20)[0]
    shentsize, shnum = struct.unpack_from("<HH", b, 0x2E)
    sections = [struct.unpack_from("<10I", b, shoff + i * shentsize) for i in range(shnum)]
    for sec in sections:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sec[6]][4]
        for off in range(sec[4], sec[4] + sec[5], 16):
            sym_name, value = struct.unpack_from("<II", b, off)
            end = b.index(b"\0", strtab + sym_name)
            if b[strtab + sym_name : end].decode() == name:
                return value
    return None


def _kernel_image(addr: int) -> bytes:
    """A RISC-V ELF32 executable whose text is one ``ret`` at ``addr``, with the (empty) symbol table and text
    relocation section TT-Metal's loader requires of a kernel."""
    text, symtab, strtab = struct.pack("<I", 0x00008067), bytes(16), b"\0"
    names = [b"", b".text", b".symtab", b".strtab", b".rela.text", b".shstrtab"]
    shstr = b"\0".join(names) + b"\0"
    name_at = [shstr.index(n + b"\0") if n else 0 for n in names]
    body, offs = b"", []
    for blob in (text, symtab, strtab, b"", shstr):
        offs.append(52 + 32 + len(body))
        body += blob + bytes(-len(blob) % 4)
    sh_off = 52 + 32 + len(body)
    head = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)  # ELF32, little-endian, version 1
    head += struct.pack("<HHIIIIIHHHHHH", 2, 243, 1, addr, 52, sh_off, 0, 52, 32, 1, 40, 6, 5)  # EXEC, RISC-V
    phdr = struct.pack("<8I", 1, offs[0], addr, addr, len(text), len(text), 5, 4)  # PT_LOAD, R+X
    shdrs = bytes(40) + b"".join(
        struct.pack("<10I", *f)
        for f in (
            (name_at[1], 1, 6, addr, offs[0], len(text), 0, 0, 4, 0),  # .text: PROGBITS, ALLOC+EXEC
            (name_at[2], 2, 0, 0, offs[1], len(symtab), 3, 1, 4, 16),  # .symtab -> .strtab
            (name_at[3], 3, 0, 0, offs[2], len(strtab), 0, 0, 1, 0),
            (name_at[4], 4, 0x40, 0, offs[3], 0, 2, 1, 4, 12),  # .rela.text: RELA of section 1, symbols 2
            (name_at[5], 3, 0, 0, offs[4], len(shstr), 0, 0, 1, 0),
        )
    )
    return head + phdr + body + shdrs


def _write_images(root: Path, keys: list[str], images: Path) -> None:
    """A stand-in kernel image per firmware processor of each build key, at the address its firmware exports."""
    for key in keys:
        for proc in sorted((root / "tt_metal" / "pre-compiled" / key).iterdir()):
            weak = proc / f"{proc.name}_weakened.elf"
            addr = _elf_symbol(weak, "__fw_export_text_end") if weak.exists() else None
            if addr is not None:
                (images / key).mkdir(parents=True, exist_ok=True)
                (images / key / f"{proc.name}.elf").write_bytes(_kernel_image(addr))


def _link_tree(src: Path, dst: Path, skip: set[str]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        if entry.name not in skip:
            (dst / entry.name).symlink_to(entry)


_PROBE = """
import ttnn
for cqs in (1, 2):
    try:
        ttnn.close_device(ttnn.open_device(device_id=0, num_command_queues=cqs))
    except Exception:
        pass
"""


def _firmware_keys(cache: Path) -> set[str]:
    """The firmware build keys TT-Metal made folders for under ``cache`` (``<key>/firmware``)."""
    keys = set()
    for fw in cache.glob("*/firmware"):
        m = re.search(r"(\d{6,})$", fw.parent.name)
        if m:
            keys.add(m.group(1))
    return keys


def _firmware_set(cache: Path, key: str) -> set[str]:
    return {p.name for p in cache.glob(f"*{key}/firmware/*") if p.is_dir()}


def prepare(work: Path, python: Path | None = None, *, compiler: Path | str | None = None, complete: bool = False,
            sfpi: Path | str | None = None, record_commands: bool = False) -> MockP150:  # fmt: skip
    """Build (or reuse) a mocked P150 under ``work`` for the TT-NN venv's ``python`` (default:
    :func:`find_ttnn_python`).

    ``compiler``: an executable the stand-in hands every compile and link command to (after recording it), e.g. a
    syntax-only check; its failure fails the command. ``complete``: after that, make stand-in outputs so the build
    succeeds and ops run to their end on the mock; otherwise the stand-in fails each command (unless ``compiler``
    passed it), which stops TT-Metal's build there.
    ``sfpi``: a real sfpi install (the folder holding ``compiler/bin/riscv-tt-elf-g++``) used instead of the
    stand-in: kernels and firmware are then built for real. ``record_commands``: keep each command line (see
    :meth:`MockP150.commands`; not with ``sfpi``). Raises :class:`MockUnavailable` when it cannot be set up."""
    python = Path(python) if python else find_ttnn_python()
    if python is None:
        raise MockUnavailable("no Python with ttnn 0.81.1: run scripts/ttnn_venv.sh (needs Python 3.12)")
    if sfpi is not None and (compiler is not None or record_commands or complete):
        raise MockUnavailable(
            "a real sfpi compiles by itself: give sfpi= without compiler=, complete= or record_commands="
        )
    work = Path(work).resolve()
    ttnn_dir = _ttnn_dir(python)
    want = {
        "version": _VERSION, "python": str(python), "ttnn": str(ttnn_dir), "compiler": str(compiler or ""),
        "sfpi": str(sfpi or ""), "record": record_commands, "complete": complete, "desc": CLUSTER_DESC,
        "stand_in": _stand_in(None, None) + _stand_in(None, None, Path("images")),
    }  # fmt: skip
    stamp = work / "mock-p150.json"
    root, desc, cache = work / "root", work / "p150.yaml", work / "cache"
    log = work / "commands" if record_commands else None
    if stamp.exists() and root.exists():
        have = json.loads(stamp.read_text())
        if {k: v for k, v in have.items() if k != "keys"} == want:
            mock = MockP150(python, root, desc, cache, log, tuple(have["keys"]))
            mock.clear_commands()
            return mock
    images = work / "images"
    for p in (root, cache, log, images):
        if p is not None and p.exists():
            shutil.rmtree(p)
    work.mkdir(parents=True, exist_ok=True)
    desc.write_text(CLUSTER_DESC)
    cache.mkdir()
    if log is not None:
        log.mkdir()
    _link_tree(ttnn_dir, root, {"runtime", "tt_metal"})
    _link_tree(ttnn_dir / "runtime", root / "runtime", {"sfpi"})
    _link_tree(ttnn_dir / "tt_metal", root / "tt_metal", {"pre-compiled"})
    precompiled = ttnn_dir / "tt_metal" / "pre-compiled"
    _link_tree(precompiled, root / "tt_metal" / "pre-compiled", set())
    keys: list[str] = []
    if sfpi is not None:
        (root / "runtime" / "sfpi").symlink_to(Path(sfpi).resolve())
    else:
        cc = root / "runtime" / "sfpi" / "compiler" / "bin" / "riscv-tt-elf-g++"
        cc.parent.mkdir(parents=True)
        cc.write_text(_stand_in(None, None))  # the probe below stops at the firmware build
        cc.chmod(0o755)
        keys = _link_firmware(python, root, desc, cache, precompiled)
        if complete:
            _write_images(root, keys, images)
        cc.write_text(_stand_in(log, Path(compiler).resolve() if compiler else None, images if complete else None))
    mock = MockP150(python, root, desc, cache, log, tuple(keys))
    mock.clear_commands()
    stamp.write_text(json.dumps(want | {"keys": keys}, indent=1))
    return mock


def _link_firmware(python: Path, root: Path, desc: Path, cache: Path, precompiled: Path) -> list[str]:
    """Open the mock once per command-queue count with the stand-in compiler, which stops at the firmware build;
    point each build key TT-Metal used at the first (by name) pre-compiled firmware set holding every firmware
    target it tried to build."""
    probe_cache = cache / "probe"
    env = MockP150(python, root, desc, probe_cache, None, ()).env()
    res = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300,
                         cwd=root.parent)  # fmt: skip
    keys = sorted(_firmware_keys(probe_cache))
    if res.returncode != 0 or not keys:
        raise MockUnavailable(f"the mocked P150 did not reach its firmware build: {res.stderr.strip()[-2000:]}")
    for key in keys:
        if (precompiled / key).is_dir():
            continue  # the wheel has this one
        targets = _firmware_set(probe_cache, key)
        match = next((d for d in sorted(precompiled.iterdir()) if targets <= {p.name for p in d.iterdir()}), None)
        if match is None:
            raise MockUnavailable(f"no pre-compiled firmware in {precompiled} holds {sorted(targets)}")
        (root / "tt_metal" / "pre-compiled" / key).symlink_to(match)
    shutil.rmtree(probe_cache)
    return keys


# ----------------------------------------------------------------------------------- in the TT-NN venv's Python
def open_device(**kwargs):
    """``ttnn.open_device`` on the mocked P150 (in a process started by :meth:`MockP150.run` or with
    :meth:`MockP150.env`): device 0, TT-NN's defaults unless ``kwargs`` say otherwise."""
    for var in ("TT_METAL_RUNTIME_ROOT", "TT_METAL_MOCK_CLUSTER_DESC_PATH"):
        if var not in os.environ:
            raise MockUnavailable(f"{var} is not set: start this process with MockP150.run or MockP150.env()")
    import ttnn

    return ttnn.open_device(**({"device_id": 0} | kwargs))


def reached_build(error: BaseException | str) -> bool:
    """Whether an op or program failed only at TT-Metal's kernel build (the stand-in compiler stopped it), i.e. after
    every host-side check TT-NN and TT-Metal make had passed."""
    text = str(error)
    return "jit_build/build.cpp" in text and "build failed" in text


def first_lines(error: BaseException | str, n: int = 4) -> str:
    """An exception's message without TT-Metal's backtrace and ``info:`` lines."""
    keep = []
    for line in str(error).splitlines():
        s = line.strip()
        if s.startswith("---") or s == "backtrace:":
            break
        if s and s != "info:":
            keep.append(s)
    return "; ".join(keep[:n])


if __name__ == "__main__":  # python mock_p150.py WORK: prepare and print the environment to use
    m = prepare(Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "build" / "ttnn-mock"))
    for k, v in m.env().items():
        if k.startswith(("TT_METAL_", "PYTHONPATH")):
            print(f"export {k}={v}")
