"""Every example runs, and every benchmark runs a short round and ends with one JSON object of its figures.

Smoke runs only: the figures are not checked against targets here (speed is measured by ``make bench``, never asserted
in a test); what is checked is that the scripts the docs point at still work and keep their output contract.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").rglob("*.py"))
BENCHMARKS = {  # the shortest round each benchmark offers
    "benchmarks/capture.py": ["--steps", "2"],
    "benchmarks/custom_op.py": ["--calls", "20", "--rounds", "1"],
    "benchmarks/dispatch.py": ["--ops", "20", "--rounds", "2"],
    "benchmarks/dsl_kernels.py": ["--calls", "5", "--rounds", "1"],
    "benchmarks/host_transfer.py": ["--size-mb", "1", "--repeat", "1"],
    "benchmarks/import_time.py": ["--runs", "1"],
    "benchmarks/mesh.py": ["--quick", "--steps", "1"],
    "benchmarks/mlp_training.py": ["--steps", "1", "--warmup", "1"],
    "benchmarks/precision.py": ["--steps", "1", "--warmup", "0", "--quick"],
    "benchmarks/sim_kernels.py": ["--quick", "--repeat", "1"],
    "benchmarks/tinygrad_training.py": ["--steps", "1", "--warmup", "1"],
}


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTT_") or k == "KTT_TTNN_PYTHON"}
    return subprocess.run(
        [sys.executable, script, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("script", EXAMPLES)
def test_example_runs(script):
    done = _run(script)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.strip(), f"{script} printed nothing"


def test_every_benchmark_is_listed():
    assert sorted(BENCHMARKS) == sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "benchmarks").glob("*.py"))
    make = (ROOT / "Makefile").read_text()
    assert all(b in make for b in BENCHMARKS), "make bench runs every benchmark"


@pytest.mark.parametrize("script", sorted(BENCHMARKS))
def test_benchmark_prints_a_table_and_its_json_last(script):
    done = _run(script, *BENCHMARKS[script], "--json")
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) >= 3, f"{script} printed no table:\n{done.stdout}"
    figures = _strict(lines[-1])
    assert isinstance(figures, dict) and figures

    def numbers(v: object) -> list[float]:
        if isinstance(v, dict):
            return [x for w in v.values() for x in numbers(w)]
        if isinstance(v, list):
            return [x for w in v for x in numbers(w)]
        return [float(v)] if isinstance(v, (int, float)) and not isinstance(v, bool) else []

    values = numbers(figures)
    assert values and all(math.isfinite(x) for x in values)
