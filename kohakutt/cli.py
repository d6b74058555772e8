"""The ``ktt`` command line: ``doctor`` (a read-only report of the host and every card), ``info`` and ``sfpi``.

The HAL's device module and the TT-NN backend are imported inside the commands, so ``ktt`` runs before they exist
or when a dependency of theirs is missing, and says so.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kohakutt import config, sfpi
from kohakutt.errors import ConfigError, KohakuTTError

NOT_YET = "not available yet"


def _version() -> str:
    try:
        from kohakutt import __version__

        return str(__version__)
    except ImportError:
        pass
    try:
        return importlib.metadata.version("kohakutt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _missing_module(e: ImportError, module: str) -> bool:
    """True when ``e`` says ``module`` itself (or its package) does not exist, not that something it imports is."""
    return isinstance(e, ModuleNotFoundError) and e.name is not None and module.startswith(e.name)


def _lazy(module: str, attr: str) -> tuple[Any, str | None]:
    """``module.attr``, or None and why: "not available yet" when the module is not written, else the error."""
    try:
        return getattr(importlib.import_module(module), attr), None
    except ImportError as e:
        if _missing_module(e, module):
            return None, f"{module} {NOT_YET}"
        return None, f"importing {module} failed: {type(e).__name__}: {e}"
    except AttributeError:
        return None, f"{module}.{attr} {NOT_YET}"


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else _fmt_bytes(n)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}".replace(".0 ", " ")
        n /= 1024
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------------- facts


def host_facts() -> dict[str, Any]:
    """OS, CPU count and physical memory of this host."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        memory = None
    return {
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
    }


def package_facts(name: str) -> dict[str, Any]:
    """Whether a Python package is installed and its version, without importing it."""
    try:
        return {"installed": True, "version": importlib.metadata.version(name)}
    except importlib.metadata.PackageNotFoundError:
        pass
    if importlib.util.find_spec(name) is None:
        return {"installed": False, "version": None}
    module = importlib.import_module(name)  # found on sys.path without metadata, e.g. a source checkout
    return {"installed": True, "version": str(getattr(module, "__version__", "unknown"))}


def ttnn_facts() -> dict[str, Any]:
    """Whether ``import ttnn`` works here, and why not."""
    if importlib.util.find_spec("ttnn") is None:
        return {"importable": False, "version": None, "reason": "not installed (TT-NN comes with tt-metal)"}
    try:
        module = importlib.import_module("ttnn")
    except Exception as e:  # any failure inside ttnn's import is the answer to report
        return {"importable": False, "version": None, "reason": f"import failed: {type(e).__name__}: {e}"}
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version("ttnn")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
    return {"importable": True, "version": str(version), "reason": "imports"}


def compiler_facts() -> dict[str, Any]:
    """The C compiler the native core would be built with (KTT_CC, else cc, gcc, clang) and its version."""
    chosen: str | None = config.get("KTT_CC")
    candidates = [chosen] if chosen else ["cc", "gcc", "clang"]
    for cand in candidates:
        argv = shlex.split(cand)
        path = shutil.which(argv[0]) if argv else None
        if path is None:
            continue
        try:
            out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=10)
            version = (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "unknown"
        except (OSError, subprocess.SubprocessError) as e:
            version = f"--version failed: {e}"
        return {"found": True, "command": cand, "path": path, "version": version, "from_knob": bool(chosen)}
    return {"found": False, "command": chosen, "path": None, "version": None, "from_knob": bool(chosen)}


def sfpi_facts() -> dict[str, Any]:
    """The kernel compiler installs in the cache (reads only)."""
    installs = sfpi.installed()
    return {"installed": bool(installs), "root": str(sfpi.root()), "installs": [i.to_json() for i in installs]}


def card_figures() -> dict[str, Any]:
    """The P150A's figures as the HAL knows them (``kohakutt.hal.card``)."""
    from kohakutt.hal.card import P150A

    figures = asdict(P150A)
    figures.update(cores=P150A.cores, dram_bytes=P150A.dram_bytes)
    return figures


def backend_facts() -> dict[str, Any]:
    """The backend KTT_BACKEND would pick and why; from the HAL when it is there, else decided here the same way."""
    choice, why_not = _lazy("kohakutt.hal.device", "backend_choice")
    if choice is not None:
        try:
            name, reason = choice()
            return {"name": name, "reason": reason, "from_hal": True, "note": None}
        except ImportError as e:  # a backend module the choice needs is not there (yet)
            why_not = f"the HAL could not choose: {type(e).__name__}: {e}"
    knob = config.get("KTT_BACKEND")
    if knob == "auto":
        probe = ttnn_backend_facts()
        name = "ttnn" if probe["available"] else "sim"
        reason = f"KTT_BACKEND=auto: {probe['reason']}"
    else:
        name = knob
        reason = f"KTT_BACKEND={knob}" + (" (the default)" if "KTT_BACKEND" not in os.environ else "")
    return {"name": name, "reason": reason, "from_hal": False, "note": why_not}


def ttnn_backend_facts() -> dict[str, Any]:
    """``TTNNBackend.available()``: whether a real card can be opened here, and why."""
    cls, why_not = _lazy("kohakutt.hal.backends.ttnn_backend", "TTNNBackend")
    if cls is None:
        return {"available": False, "reason": why_not, "known": False}
    try:
        ok, reason = cls.available()
    except Exception as e:  # a probe that crashes is itself the reason the backend is unavailable
        ok, reason = False, f"TTNNBackend.available() raised {type(e).__name__}: {e}"
    return {"available": bool(ok), "reason": reason, "known": True}


def card_nodes() -> list[str]:
    """The Tenstorrent card device nodes of the kernel driver (``/dev/tenstorrent/N``)."""
    base = Path("/dev/tenstorrent")
    if not base.is_dir():
        return []
    return sorted((str(p) for p in base.iterdir() if p.name.isdigit()), key=lambda s: int(Path(s).name))


def device_count(backend: str) -> int:
    """How many devices ``backend`` has: the HAL's count when it offers one, else the sim knob or the driver nodes."""
    count, _ = _lazy("kohakutt.hal.device", "device_count")
    if count is not None:
        try:
            return int(count())
        except Exception:  # the HAL's count failing falls back to counting here; the devices report the error
            pass
    return int(config.get("KTT_SIM_DEVICES")) if backend == "sim" else len(card_nodes())


def describe_device(chip: int) -> dict[str, Any]:
    """Open chip ``chip`` through the HAL, describe it and close it again; raises what the HAL raises."""
    open_device, why_not = _lazy("kohakutt.hal.device", "open_device")
    if open_device is None:
        raise KohakuTTError(why_not)
    try:
        dev = open_device(chip)
    except ModuleNotFoundError as e:  # the HAL reached for a backend module that is not written yet
        if not (e.name or "").startswith("kohakutt."):
            raise
        raise KohakuTTError(f"{e.name} {NOT_YET}") from e
    try:
        return dict(dev.describe())
    finally:
        close = getattr(dev, "close", None)
        if callable(close):
            close()


# ---------------------------------------------------------------------------------------------------------- doctor


class _Findings:
    def __init__(self) -> None:
        self.problems: list[dict[str, str]] = []
        self.warnings: list[dict[str, str]] = []

    def problem(self, what: str, fix: str) -> None:
        self.problems.append({"what": what, "fix": fix})

    def warn(self, what: str, fix: str) -> None:
        self.warnings.append({"what": what, "fix": fix})


def _section(findings: _Findings, name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except ConfigError as e:
        if not any(str(e) in p["what"] for p in findings.problems):  # each bad knob is reported once
            findings.problem(f"{name}: {e}", "correct or unset the knob named above")
        return {"error": str(e)}
    except Exception as e:  # the report goes on; the failure is one of its findings
        findings.problem(f"{name}: {type(e).__name__}: {e}", "see the error above; report it if it persists")
        return {"error": f"{type(e).__name__}: {e}"}


def doctor_report() -> dict[str, Any]:
    """Everything ``ktt doctor`` reports, as one JSON-ready dict; ``ok`` is False when something required is missing.

    Reads only: opens no real card, writes nothing (the cache folder is not created).
    """
    f = _Findings()
    report: dict[str, Any] = {"ok": True}
    report["host"] = host_facts()
    report["python"] = {"version": platform.python_version(), "executable": sys.executable}
    report["kohakutt"] = {"version": _version(), "path": str(Path(__file__).resolve().parent)}

    report["knobs"] = knobs = {k: v for k, v in sorted(os.environ.items()) if k.startswith("KTT_")}
    for name in knobs:  # raw values come from the environment; config parses them
        if name not in config.KNOBS:
            f.warn(f"{name} is set but is not a Kohaku-TT knob", "check the spelling (docs/reference/knobs.md)")
            continue
        try:
            config.get(name)
        except ConfigError as e:
            f.problem(str(e), f"correct or unset {name}")

    report["torch"] = _section(f, "torch", lambda: package_facts("torch"))
    if report["torch"].get("installed") is False:
        f.problem("torch is not installed", "pip install --index-url https://download.pytorch.org/whl/cpu torch")
    report["tinygrad"] = _section(f, "tinygrad", lambda: package_facts("tinygrad"))
    report["ttnn"] = _section(f, "ttnn", ttnn_facts)

    cc = report["c_compiler"] = _section(f, "C compiler", compiler_facts)
    if cc.get("found") is False and cc.get("from_knob"):
        f.problem(f"KTT_CC={cc['command']!r} is not an executable on PATH", "point KTT_CC at a C compiler or unset it")
    elif cc.get("found") is False:
        f.warn("no C compiler found (cc, gcc, clang)", "install gcc or clang, or set KTT_CC, to build the native core")

    report["sfpi"] = _section(f, "sfpi", sfpi_facts)
    report["ttnn_backend"] = _section(f, "TT-NN backend", ttnn_backend_facts)
    backend = report["backend"] = _section(f, "backend", backend_facts)
    if backend.get("note"):
        f.warn(f"backend: {backend['note']}", "update Kohaku-TT; the choice shown was made by ktt from KTT_BACKEND")

    name = backend.get("name")
    if name == "ttnn":
        if not report["ttnn_backend"].get("available"):
            f.problem(
                f"KTT_BACKEND picks ttnn but no card can be opened: {report['ttnn_backend'].get('reason')}",
                "install TT-NN and the card's driver, or unset KTT_BACKEND to use the simulated card",
            )
        if not report["sfpi"].get("installed"):
            f.problem("the kernel compiler (sfpi) is not in the cache", "run `ktt sfpi URL_OR_FILE` once")
    elif name == "sim" and not report["sfpi"].get("installed"):
        f.warn("the kernel compiler (sfpi) is not in the cache", "only a real card needs it: `ktt sfpi URL_OR_FILE`")

    report["cards"] = _section(f, "cards", lambda: {"list": _doctor_cards(f, name)}).get("list", [])
    report["problems"], report["warnings"] = f.problems, f.warnings
    report["ok"] = not f.problems
    return report


def _doctor_cards(f: _Findings, backend: str | None) -> list[dict[str, Any]]:
    figures = card_figures()
    if backend == "sim":
        cards = []
        for chip in range(int(config.get("KTT_SIM_DEVICES"))):
            card: dict[str, Any] = {"chip": chip, "kind": "simulated", "figures": figures}
            try:  # the sim chip lives in this process only, so describing it changes nothing
                card["describe"] = describe_device(chip)
            except Exception as e:  # each chip reports its own failure
                msg = f"{type(e).__name__}: {e}" if not isinstance(e, KohakuTTError) else str(e)
                card["describe_error"] = msg
                if NOT_YET in msg:
                    f.warn(f"sim chip {chip} was not opened: {msg}", "update Kohaku-TT")
                else:
                    f.problem(f"sim chip {chip} cannot be opened: {msg}", "report it with this output")
            cards.append(card)
        return cards
    if backend == "ttnn":  # the chips TT-NN counts (it opens none), with the driver's node where there is one
        nodes = card_nodes()
        return [{"chip": i, "kind": "card", "node": nodes[i] if i < len(nodes) else None, "figures": figures}
                for i in range(max(device_count("ttnn"), len(nodes)))]  # fmt: skip
    return []


def _figures_line(fig: dict[str, Any]) -> str:
    gx, gy = fig["grid"]
    return (
        f"{fig['name']}: grid {gx} x {gy} = {fig['cores']} cores, "
        f"L1 {_kib(fig['l1_bytes'])}/core ({_kib(fig['l1_usable'])} usable), "
        f"DRAM {fig['dram_banks']} banks, {_fmt_bytes(fig['dram_bytes'])}"
    )


def _pkg(p: dict[str, Any]) -> str:
    if "error" in p:
        return f"error: {p['error']}"
    return p["version"] if p.get("installed") else "not installed"


def render_doctor(r: dict[str, Any]) -> str:
    """The doctor report as aligned plain text."""
    lines: list[str] = ["Kohaku-TT doctor (read-only)"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<13}{text}")

    h = r["host"]
    mem = _fmt_bytes(h["memory_bytes"]) if h.get("memory_bytes") else "unknown"
    row("host", f"{h['os']} {h['machine']}, {h['cpus']} CPUs, {mem} memory")
    row("python", f"{r['python']['version']} ({r['python']['executable']})")
    row("kohakutt", f"{r['kohakutt']['version']} ({r['kohakutt']['path']})")
    row("torch", _pkg(r["torch"]))
    row("tinygrad", _pkg(r["tinygrad"]))
    t = r["ttnn"]
    row("ttnn", t.get("error") or (f"{t['version']}, importable" if t["importable"] else f"no: {t['reason']}"))
    cc = r["c_compiler"]
    if "error" in cc:
        row("C compiler", f"error: {cc['error']}")
    elif cc["found"]:
        knob = ", from KTT_CC" if cc["from_knob"] else ""
        row("C compiler", f"{cc['command']} ({cc['path']}{knob}): {cc['version']}")
    else:
        row("C compiler", f"not found ({cc['command'] or 'cc, gcc, clang'})")
    s = r["sfpi"]
    if "error" in s:
        row("sfpi", f"error: {s['error']}")
    elif s["installed"]:
        i = s["installs"][0]
        row("sfpi", f"{i['path']} ({i['files']} files, sha256 {i['sha256'][:12]}..., {i['time']})")
        if i["compiler"]:
            row("", f"compiler {i['compiler']}")
    else:
        row("sfpi", f"not in the cache ({s['root']})")
    b = r["backend"]
    row("backend", f"error: {b['error']}" if "error" in b else f"{b['name']}: {b['reason']}")
    if r["ttnn_backend"].get("reason"):
        tb = r["ttnn_backend"]
        row("real card", ("available: " if tb.get("available") else "not available: ") + str(tb["reason"]))
    cards = r["cards"]
    kind = "simulated" if cards and cards[0]["kind"] == "simulated" else "real"
    row("cards", f"{len(cards)} {kind}" if cards else "none")
    for c in cards:
        where = f" at {c['node']}" if c.get("node") else ""
        row(f"  chip {c['chip']}", _figures_line(c["figures"]) + where)
        if c.get("describe_error"):
            row("", f"not opened: {c['describe_error']}")
    row("knobs set", ", ".join(f"{k}={v}" for k, v in r["knobs"].items()) or "none")
    for w in r["warnings"]:
        lines.append(f"  warning: {w['what']}\n           -> {w['fix']}")
    for p in r["problems"]:
        lines.append(f"  PROBLEM: {p['what']}\n           -> {p['fix']}")
    lines.append("  status       " + ("ok" if r["ok"] else f"{len(r['problems'])} problem(s): see above"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------- info


def info_report() -> dict[str, Any]:
    """What ``ktt info`` reports: version, the backend in use, and each device as the HAL describes it."""
    backend = backend_facts()
    count = device_count(backend["name"])
    devices = []
    for chip in range(count):
        d: dict[str, Any] = {"id": chip, "device": f"tt:{chip}"}
        try:
            d["describe"] = describe_device(chip)
        except Exception as e:  # one device failing does not hide the others
            d["error"] = str(e) if isinstance(e, KohakuTTError) else f"{type(e).__name__}: {e}"
        devices.append(d)
    return {
        "version": _version(),
        "backend": backend["name"],
        "reason": backend["reason"],
        "device_count": count,
        "devices": devices,
        "figures": card_figures(),
        "note": backend["note"],
        "ok": count > 0 and all("error" not in d or NOT_YET in d["error"] for d in devices),
    }


_SHOWN = {"backend", "chip", "card", "name", "grid", "cores", "l1_per_core", "l1_bytes", "dram_bytes", "dram_banks"}
_QUIET = {"simulated", "refcount", "backend_reason", "l1_usable", "arch"}


def _device_line(d: dict[str, Any], figures: dict[str, Any]) -> str:
    """One line for a device from what the HAL describes, the card's figures filling any gap."""
    if "error" in d:
        return f"{d['device']}  {_figures_line(figures)} (not opened: {d['error']})"
    desc = d["describe"]
    grid = desc.get("grid", figures["grid"])
    grid = "x".join(str(g) for g in grid) if isinstance(grid, (tuple, list)) else str(grid)
    l1 = desc.get("l1_per_core", desc.get("l1_bytes", figures["l1_bytes"]))
    parts = [
        d["device"],
        str(desc.get("backend", "?")),
        str(desc.get("card", desc.get("name", figures["name"]))),
        f"grid {grid} ({desc.get('cores', figures['cores'])} cores)",
        f"L1 {_kib(l1)}/core",
        f"DRAM {_fmt_bytes(desc.get('dram_bytes', figures['dram_bytes']))} "
        f"({desc.get('dram_banks', figures['dram_banks'])} banks)",
    ]
    parts += [f"{k}={v}" for k, v in desc.items() if k not in _SHOWN | _QUIET]
    return "  ".join(parts)


def render_info(r: dict[str, Any]) -> str:
    """The info report as a few lines."""
    lines = [f"kohakutt {r['version']}", f"backend  {r['backend']}: {r['reason']}", f"devices  {r['device_count']}"]
    if not r["devices"]:
        lines.append("  none found: check the card's driver (/dev/tenstorrent), or unset KTT_BACKEND for the sim")
    return "\n".join(lines + [f"  {_device_line(d, r['figures'])}" for d in r["devices"]])


# ---------------------------------------------------------------------------------------------------------- main


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = doctor_report()
    print(json.dumps(report, indent=1, default=str) if args.json else render_doctor(report))
    return 0 if report["ok"] else 1


def _cmd_info(args: argparse.Namespace) -> int:
    report = info_report()
    print(json.dumps(report, indent=1, default=str) if args.json else render_info(report))
    return 0 if report["ok"] else 1


def _cmd_sfpi(args: argparse.Namespace) -> int:
    result = sfpi.fetch(args.source, sha256=args.sha256, force=args.force, progress=sys.stderr)
    inst = result.install
    if not result.fetched:
        print(f"sfpi already installed at {inst.path} (sha256 {inst.sha256}); nothing downloaded (--force refetches)")
        return 0
    if not result.verified:
        print(
            f"warning: no checksum given (--sha256 or KTT_SFPI_SHA256), the archive was not verified; "
            f"its sha256 is {inst.sha256}",
            file=sys.stderr,
        )
    print(f"sfpi installed at {inst.path} ({len(inst.files)} files, sha256 {inst.sha256})")
    if inst.compiler:
        print(f"compiler: {inst.compiler}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``ktt`` argument parser."""
    p = argparse.ArgumentParser(
        prog="ktt",
        description="Kohaku-TT: a Tenstorrent Blackhole card (or its simulator) as a device for PyTorch and tinygrad.",
        epilog="Knobs (KTT_*) are listed in docs/reference/knobs.md; commands in docs/reference/cli.md.",
    )
    p.add_argument("--version", action="version", version=f"kohakutt {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser(
        "doctor",
        help="read-only report of the host, the software and every card",
        description="Report the host, Python, torch, tinygrad, TT-NN, the C compiler, the kernel compiler, the "
        "backend KTT_BACKEND picks, each card and the knobs set. Changes nothing. Exit 0 when usable, 1 when "
        "something required is missing (the report says what to do).",
    )
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(run=_cmd_doctor)

    i = sub.add_parser(
        "info",
        help="version, backend in use and one line per device",
        description="Short report: version, the backend in use, the device count and one line per device.",
    )
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(run=_cmd_info)

    s = sub.add_parser(
        "sfpi",
        help="fetch the RISC-V kernel compiler (sfpi) into the cache",
        description="Download (or copy) the sfpi archive, check its SHA-256, unpack it into "
        "<cache>/sfpi/<name>/ and write a manifest. An install of the same archive is kept.",
    )
    s.add_argument("source", nargs="?", help="http(s) or file URL, or a local archive path (default: KTT_SFPI_URL)")
    s.add_argument("--sha256", metavar="HEX", help="expected SHA-256 of the archive (default: KTT_SFPI_SHA256)")
    s.add_argument("--force", action="store_true", help="fetch and unpack again even when already installed")
    s.set_defaults(run=_cmd_sfpi)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ktt`` with ``argv`` (default: the process arguments); the exit code: 0 ok, 1 not usable, 2 error."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors
        return e.code if isinstance(e.code, int) else 2
    try:
        return int(args.run(args))
    except KohakuTTError as e:
        print(f"ktt {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ktt {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
