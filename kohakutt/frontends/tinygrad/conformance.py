"""tinygrad's own tests as KTT's conformance bar: run them on KTT and on tinygrad's CPU device, and compare.

``make conformance-tinygrad TINYGRAD_SRC=<a tinygrad source checkout>`` runs ``python -m
kohakutt.frontends.tinygrad.conformance --src <checkout>``: the checkout's ``test/`` folder (tinygrad ships its tests
only in its git source) is copied to a scratch directory outside the repository, so the tests import the installed
tinygrad and never the checkout's, and ``pytest`` runs the chosen files there twice, ``DEV=CPU`` (the baseline,
needs clang) and ``DEV=KTT``, both at once. Each run loads this module as a pytest plugin (``-p
kohakutt.frontends.tinygrad.conformance``): it registers KTT and writes one JSON report of every test's outcome. The
summary counts, per file, the tests that pass on KTT among those that pass on CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

import kohakutt.tinygrad  # noqa: F401  registers "KTT" in every run (the CPU baseline too: the same process setup)

PLUGIN = "kohakutt.frontends.tinygrad.conformance"
DEFAULT_TESTS = ("test/backend/test_ops.py",)
_outcomes: dict[str, str] = {}
_errors: dict[str, str] = {}
_report_path: str | None = None
_timeout = 0.0


# ------------------------------------------------------------------------------------------------ pytest plugin
class TestTimeout(Exception):
    """A test ran longer than ``--ktt-timeout`` seconds (it counts as failed)."""


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--ktt-report", default=None, help="write each test's outcome to this JSON file")
    parser.addoption("--ktt-timeout", type=float, default=0.0, help="fail a test after this many seconds (0: never)")


def pytest_configure(config: Any) -> None:
    global _report_path, _timeout
    _report_path = config.getoption("--ktt-report", None)
    _timeout = float(config.getoption("--ktt-timeout", 0.0) or 0.0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    if not _timeout:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TestTimeout(f"{item.nodeid} took longer than {_timeout:g} s (--ktt-timeout)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, _timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pytest_runtest_logreport(report: Any) -> None:
    """A test's outcome: failed if its call (or any subtest), setup or teardown failed; skipped if skipped."""
    nodeid = report.nodeid
    prev = _outcomes.get(nodeid)
    if report.failed:
        _outcomes[nodeid] = "failed"
        if nodeid not in _errors:
            _errors[nodeid] = _first_line(report)
    elif report.skipped and prev is None:
        _outcomes[nodeid] = "skipped"
    elif report.passed and report.when == "call" and prev is None:
        _outcomes[nodeid] = "passed"


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    if _report_path:
        from tinygrad import Device

        data = {"device": Device.DEFAULT, "outcomes": _outcomes, "errors": _errors}
        Path(_report_path).write_text(json.dumps(data, indent=1))


def _first_line(report: Any) -> str:
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
    lines = [ln.strip()[1:].strip() for ln in text.splitlines() if ln.strip().startswith("E ")]
    lines = [ln for ln in lines if ln]
    return (" | ".join(lines[:3]) if lines else text.strip().splitlines()[-1] if text.strip() else "")[:300]


# ------------------------------------------------------------------------------------------------------ runner
def _checkout_tests(src: Path, files: list[str]) -> None:
    if not (src / "test").is_dir():
        raise SystemExit(f"conformance: {src} has no test/ folder: point TINYGRAD_SRC at a tinygrad git checkout")
    for f in files:
        if not (src / f).is_file():
            raise SystemExit(f"conformance: {src / f} does not exist in this checkout")


def _run(
    device: str, scratch: Path, files: list[str], report: Path, extra: list[str], log: Path, allow_tf32: int
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, DEV=device, ALLOW_TF32=str(allow_tf32))
    env.pop("PYTHONPATH", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PLUGIN, "--ktt-report", str(report)]
    with log.open("w") as out:
        return subprocess.Popen([*cmd, *extra, *files], cwd=scratch, env=env, stdout=out, stderr=subprocess.STDOUT)


def compare(cpu: dict[str, Any], ktt: dict[str, Any]) -> dict[str, Any]:
    """Per file and in total: tests passing on CPU, and how many of those pass on KTT; KTT's failures with a reason."""
    files: dict[str, dict[str, int]] = {}
    failures: dict[str, str] = {}
    for test, outcome in cpu["outcomes"].items():
        f = test.split("::")[0]
        row = files.setdefault(f, {"cpu_passed": 0, "ktt_passed": 0, "ktt_failed": 0, "ktt_skipped": 0, "tests": 0})
        row["tests"] += 1
        if outcome != "passed":
            continue
        row["cpu_passed"] += 1
        k = ktt["outcomes"].get(test, "not run")
        if k == "passed":
            row["ktt_passed"] += 1
        elif k == "skipped":
            row["ktt_skipped"] += 1
        else:
            row["ktt_failed"] += 1
            failures[test] = ktt["errors"].get(test, k)
    total = {k: sum(r[k] for r in files.values()) for k in ("tests", "cpu_passed", "ktt_passed", "ktt_failed")}
    total["ratio"] = total["ktt_passed"] / total["cpu_passed"] if total["cpu_passed"] else 0.0
    return {"files": files, "total": total, "ktt_failures": failures}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="tinygrad's own tests on KTT against tinygrad's CPU device")
    ap.add_argument("--src", required=True, help="a tinygrad git checkout (its test/ folder is used, never committed)")
    ap.add_argument("--tests", nargs="*", default=list(DEFAULT_TESTS), help="test files, relative to the checkout")
    ap.add_argument("-k", dest="select", default=None, help="pytest -k expression (a subset)")
    ap.add_argument("--out", default="build/conformance-tinygrad", help="folder for the reports and logs")
    ap.add_argument("--baseline", default="CPU", help="tinygrad's own device to compare with (CPU needs clang)")
    ap.add_argument(
        "--allow-tf32",
        type=int,
        choices=(0, 1),
        default=0,
        help="tinygrad's ALLOW_TF32 for both runs: 0 (tinygrad's default; KTT splits float32 matmuls into bf16 parts, "
        "float32 accuracy) or 1 (KTT runs them on TF32 operands)",
    )
    ap.add_argument("--no-baseline", action="store_true", help="reuse the baseline report already in --out")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds after which a test fails (0: never)")
    args = ap.parse_args(argv)
    src = Path(args.src).expanduser().resolve()
    _checkout_tests(src, args.tests)
    if args.baseline == "CPU" and shutil.which("clang") is None:
        raise SystemExit("conformance: tinygrad's CPU device needs clang (apt-get install clang); or --baseline PYTHON")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    extra = (["-k", args.select] if args.select else []) + ["--ktt-timeout", str(args.timeout)]
    with tempfile.TemporaryDirectory(prefix="ktt-tinygrad-tests-") as tmp:
        scratch = Path(tmp)
        shutil.copytree(src / "test", scratch / "test", ignore=shutil.ignore_patterns("__pycache__"))
        t0 = time.perf_counter()
        devs = ("KTT",) if args.no_baseline else (args.baseline, "KTT")
        runs = {
            dev: _run(dev, scratch, args.tests, out / f"{dev}.json", extra, out / f"{dev}.log", args.allow_tf32)
            for dev in devs
        }
        for dev, proc in runs.items():
            proc.wait()
            print(f"conformance: DEV={dev} finished ({proc.returncode}); log {out / f'{dev}.log'}", flush=True)
        wall = time.perf_counter() - t0
    reports = [json.loads((out / f"{dev}.json").read_text()) for dev in (args.baseline, "KTT")]
    result = compare(*reports)
    result.update(
        baseline=args.baseline,
        select=args.select,
        allow_tf32=args.allow_tf32,
        wall_s=round(wall, 1),
        tinygrad=_versions(src),
    )
    (out / "summary.json").write_text(json.dumps(result, indent=1))
    for f, row in result["files"].items():
        print(
            f"{f}: {row['tests']} tests, {row['cpu_passed']} pass on {args.baseline}, {row['ktt_passed']} of those "
            f"pass on KTT ({row['ktt_failed']} fail, {row['ktt_skipped']} skipped)"
        )
    t = result["total"]
    v = result["tinygrad"]
    print(f"tinygrad {v['installed']} installed; tests from {v['tests_from']} (declares {v['checkout_version']})")
    print(
        f"total: {t['ktt_passed']} / {t['cpu_passed']} = {100 * t['ratio']:.1f}% "
        f"(ALLOW_TF32={args.allow_tf32}, {wall / 60:.1f} min)"
    )
    for test, why in sorted(result["ktt_failures"].items()):
        print(f"  KTT fails {test}: {why}")
    return 0


def _versions(src: Path) -> dict[str, str]:
    import tinygrad

    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    from importlib.metadata import version

    pyproject = src / "pyproject.toml"
    lines = pyproject.read_text().splitlines() if pyproject.exists() else []
    declared = [ln for ln in lines if ln.startswith("version")]
    return {
        "installed": version("tinygrad"),
        "installed_path": str(Path(tinygrad.__file__).parent),
        "tests_from": head.stdout.strip() or str(src),
        "checkout_version": declared[0].split("=", 1)[1].strip().strip('"') if declared else "",
    }


if __name__ == "__main__":
    raise SystemExit(main())
