"""The op library's TT-NN calls, recorded under the suite's fake TT-NN and made for real on a mocked P150.

1. Record (this Python, with torch): ``record_ttnn.py`` records while the op library's own tests (``tests/kernels``),
   the extra cases of ``test_ttnn_cases.py`` and the OpInfo samples of ``test_opinfo.py`` run on the simulator (in
   this session when it runs them all before the replay tests, as ``make test`` does, else in one of its own); every
   distinct op call is also given to its TT-NN implementation through ``ttnn_io.card_call`` with
   ``fake_ttnn.FakeTTNN`` standing in for ``ttnn``, and the TT-NN calls it makes are written down.
2. Replay (the TT-NN venv's Python 3.12, ttnn 0.81.1): ``replay_ttnn.py`` makes each call for real on a mocked P150
   whose stand-in compiler lets programs "build", so every device op of every call is validated by TT-NN and set
   up by TT-Metal, and its outputs feed the next call.

Both steps are cached under ``build/ttnn-replay`` by the digest of what they depend on (the package and test
sources), and TT-Metal's JIT cache of the mock persists under ``build/ttnn-mock``: an unchanged checkout replays
nothing. Without the TT-NN venv the replay tests skip and say how to get it; the recording tests still run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import record_ttnn
from mock_p150 import HERE, REPO, MockUnavailable, prepare
from ttnn_sites import all_sites

CACHE = record_ttnn.CACHE
RECORD_FROM = tuple(p.rstrip("/") for p in record_ttnn.RECORD_FROM)


def _fresh(pattern: str, keep: Path) -> None:
    for old in CACHE.glob(pattern):
        if old != keep:
            old.unlink()


@pytest.fixture(scope="module")
def recording(request: pytest.FixtureRequest) -> dict:
    """The recorded cases (``record_ttnn.py``): from this session when it ran every test they are recorded from
    (``make test``), else from a cached or a new recording run (once per change of the package or those tests)."""
    path = record_ttnn.recording_path()
    seconds = 0.0
    if request.config.ttnn_session_recording:  # type: ignore[attr-defined]
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"cases": record_ttnn.RECORDER.cases}))
        _fresh("recording-*.json", path)
    elif not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", f"--ttnn-record={tmp}",
                              "-p", "no:cacheprovider", *RECORD_FROM], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=1800)  # fmt: skip
        seconds = time.perf_counter() - t0
        assert tmp.exists(), f"the recording run wrote nothing (exit {res.returncode}):\n{res.stdout[-3000:]}"
        tmp.replace(path)
        _fresh("recording-*.json", path)
    data = json.loads(path.read_text())
    data["path"], data["seconds"] = path, seconds
    return data


@pytest.fixture(scope="module")
def replay(recording: dict) -> dict:
    """One result per replayed case (``replay_ttnn.py``), made once per change of the recording or the replay."""
    try:
        mock = prepare(REPO / "build" / "ttnn-mock" / "complete", complete=True)
    except MockUnavailable as e:
        pytest.skip(str(e))
    rec: Path = recording["path"]
    key = record_ttnn.digest(rec.read_bytes(), HERE / "replay_ttnn.py", HERE / "mock_p150.py")
    out = CACHE / f"replay-{key}.jsonl"
    seconds = 0.0
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        t0 = time.perf_counter()
        first = 0
        while True:  # a crash of TT-Metal ends the process: note the case it died in and go on after it
            res = mock.run([str(HERE / "replay_ttnn.py"), str(rec), str(tmp), str(first)], timeout=1800)
            if res.returncode == 0:
                break
            done = [json.loads(line) for line in tmp.read_text().splitlines()] if tmp.exists() else []
            crashed = next(i for i in range(done[-1]["i"] + 1 if done else first, len(recording["cases"]))
                           if recording["cases"][i]["status"] == "ok")  # fmt: skip
            case = recording["cases"][crashed]
            with tmp.open("a") as f:
                f.write(json.dumps({"i": crashed, "op": case["op"], "impl": case["impl"], "status": "crash",
                                    "failure": {"site": "?", "fn": "?", "message": f"exit {res.returncode}: "
                                                f"{res.stderr.strip()[-600:]}"}}) + "\n")  # fmt: skip
            first = crashed + 1
        seconds = time.perf_counter() - t0
        tmp.replace(out)
        _fresh("replay-*.jsonl", out)
    return {"results": [json.loads(line) for line in out.read_text().splitlines()], "seconds": seconds}


def _where(case_or_result: dict, site: str) -> str:
    return f"{case_or_result['impl']} (IR op {case_or_result['op']}) at {site}"


# Functions in kohakutt/kernels with TT-NN calls that no TT-NN implementation reaches yet, and why. Each is also in
# docs/reference/limitations.md; a test below fails when one of them starts being reached (then drop it here).
UNREACHED = {
    ("kohakutt/kernels/wide.py", "half_to_float"): "float16 ops run in float32 in the IR: the conversions are "
    "copies, and copy / typecast have no TT-NN implementation yet",
    ("kohakutt/kernels/wide.py", "float_to_half"): "as half_to_float",
    ("kohakutt/kernels/wide.py", "narrow"): "checked int64 ops need their overflow flags read back by a ttnn runner",
    ("kohakutt/kernels/wide.py", "overflowed"): "as narrow",
    ("kohakutt/kernels/wide.py", "_i32"): "defensive: TT-NN 0.81.1's compares return their int32 operands' dtype",
    ("kohakutt/kernels/ttnn_io.py", "_host_value"): "the host provider's card side: the recorder runs provider "
    "ttnn only, and its fake TT-NN has no to_torch / from_torch (tests/kernels/test_providers.py checks it against "
    "a stand-in)",
    ("kohakutt/kernels/ttnn_io.py", "_to_card"): "as _host_value",
    ("kohakutt/kernels/ttnn_io.py", "on_card"): "as _host_value",
}  # fmt: skip


def _recorded_sites(recording: dict) -> set[tuple[str, int, int]]:
    got = set()
    for case in recording["cases"]:
        for call in case["calls"]:
            file, _, end_line, end_col = call["site"].split(":")
            got.add((file, int(end_line), int(end_col)))
    return got


# ----------------------------------------------------------------------------------------------- recording
def test_every_ttnn_call_site_is_recorded(recording):
    got = _recorded_sites(recording)
    sites = all_sites()
    missing = [s for s in sites if s.key not in got and (s.file, s.function) not in UNREACHED]
    assert len(sites) > 300, f"found only {len(sites)} TT-NN call sites in kohakutt/kernels: is the scan broken?"
    assert not missing, f"{len(missing)} of {len(sites)} TT-NN call sites were never recorded (add a case to " + (
        "tests/ttnn/test_ttnn_cases.py that reaches them):\n  " + "\n  ".join(map(str, missing))
    )


def test_the_unreached_list_is_current(recording):
    got = _recorded_sites(recording)
    by_function: dict[tuple[str, str], list] = {}
    for s in all_sites():
        by_function.setdefault((s.file, s.function), []).append(s)
    unknown = sorted(set(UNREACHED) - set(by_function))
    reached = sorted(k for k in UNREACHED if k in by_function and any(s.key in got for s in by_function[k]))
    assert not unknown, f"UNREACHED names functions with no TT-NN call: {unknown}"
    assert not reached, f"UNREACHED functions that are now reached (drop them from the list): {reached}"


def test_the_fake_takes_every_recorded_call(recording):
    errors = [c for c in recording["cases"] if c["status"] == "error"]
    assert not errors, "the op library's TT-NN code failed under the fake TT-NN:\n" + "\n".join(
        f"  {c['op']} {c.get('in_specs')}: {c['error']} (at {c.get('where')})" for c in errors[:30]
    )


def test_refusals_are_typed_and_name_the_op(recording):
    refused = [c for c in recording["cases"] if c["status"] == "unsupported"]
    unnamed = [c["error"] for c in refused if not c["error"].startswith(f"{c['op']}: ")]
    assert not unnamed, f"refusals that do not start with the op's name: {unnamed[:5]}"
    ok = sum(c["status"] == "ok" for c in recording["cases"])
    assert ok > 4 * len(refused), f"{len(refused)} refusals against {ok} calls TT-NN takes"


# -------------------------------------------------------------------------------------------------- replay
def test_every_recorded_call_passes_ttnn_validation(recording, replay):
    results = replay["results"]
    replayed = {r["i"] for r in results}
    expected = {i for i, c in enumerate(recording["cases"]) if c["status"] == "ok"}
    assert replayed == expected, f"{len(expected - replayed)} recorded cases were not replayed"
    bad = [r for r in results if r["status"] != "pass"]
    assert not bad, f"{len(bad)} of {len(results)} recorded op calls fail on the mocked P150:\n" + "\n".join(
        f"  {_where(r, r['failure']['site'])}: ttnn.{r['failure']['fn']}: {r['failure']['message']}" for r in bad[:40]
    )


def test_ttnn_returns_what_the_fake_predicted(replay):
    bad = [(r, m) for r in replay["results"] for m in r.get("mismatches", [])]
    assert not bad, "TT-NN's outputs differ from the specs the fake recorded (fix fake_ttnn.py's rule, or the op "  \
        "library where it relied on it):\n" + "\n".join(f"  {_where(r, m['site'])}: ttnn.{m['fn']}: {m['what']}"
                                                        for r, m in bad[:40])  # fmt: skip


def test_results_come_back_in_the_ir_output_specs(replay):
    bad = [(r, m) for r in replay["results"] for m in r.get("returns") or []]
    assert not bad, "TT-NN implementations return other specs than the IR's:\n" + "\n".join(
        f"  {r['impl']} (IR op {r['op']}): {m}" for r, m in bad[:40]
    )


def test_every_op_with_a_ttnn_implementation_is_replayed(replay):
    from kohakutt.kernels import registry

    registry.lookup("add", "ttnn")  # loads every family
    ops = {op for op, backend, provider in registry.IMPLS if backend == "ttnn" and provider == "ttnn"}
    passed = Counter(r["op"] for r in replay["results"] if r["status"] == "pass")
    assert ops <= set(passed), f"ops with a TT-NN implementation never replayed: {sorted(ops - set(passed))}"


def test_summary(recording, replay, capsys):
    """The figures docs/reference/measured.md quotes (printed with ``-s``)."""
    cases = recording["cases"]
    calls = sum(len(c["calls"]) for c in cases if c["status"] == "ok")
    summary = {
        "op_calls_recorded": len(cases), "refused": sum(c["status"] == "unsupported" for c in cases),
        "op_calls_replayed": len(replay["results"]), "ttnn_calls_replayed": calls, "call_sites": len(all_sites()),
        "record_seconds": round(recording["seconds"], 1), "replay_seconds": round(replay["seconds"], 1),
    }  # fmt: skip
    with capsys.disabled():
        print("\nTT-NN replay:", json.dumps(summary))
    assert summary["ttnn_calls_replayed"] > 1000
