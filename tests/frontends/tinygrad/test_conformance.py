"""The conformance runner: tinygrad tests from a checkout run on KTT and on a tinygrad device, then compared.

The end-to-end test builds a stand-in checkout whose tests know which device they run on, so the expected counts are
exact; the real figures (tinygrad's test_ops.py) are recorded in docs/tinygrad.md.
"""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("tinygrad")

from kohakutt.frontends.tinygrad import conformance


def test_compare_counts_ktt_passes_among_baseline_passes():
    cpu = {"outcomes": {"f.py::a": "passed", "f.py::b": "passed", "f.py::c": "skipped", "g.py::d": "passed"}}
    ktt = {
        "outcomes": {"f.py::a": "passed", "f.py::b": "failed", "f.py::c": "passed", "g.py::d": "skipped"},
        "errors": {"f.py::b": "AssertionError: off by 1e-3"},
    }
    r = conformance.compare(cpu, ktt)
    assert r["files"]["f.py"] == {"cpu_passed": 2, "ktt_passed": 1, "ktt_failed": 1, "ktt_skipped": 0, "tests": 3}
    assert r["total"]["cpu_passed"] == 3 and r["total"]["ktt_passed"] == 1
    assert r["total"]["ratio"] == pytest.approx(1 / 3)
    assert r["ktt_failures"] == {"f.py::b": "AssertionError: off by 1e-3"}


@pytest.mark.slow
def test_runner_end_to_end(tmp_path, capsys):
    src = tmp_path / "tinygrad"
    (src / "test" / "backend").mkdir(parents=True)
    (src / "test" / "__init__.py").write_text("")
    (src / "test" / "backend" / "__init__.py").write_text("")
    (src / "test" / "backend" / "test_tiny.py").write_text(
        textwrap.dedent(
            """
            import time, unittest
            import numpy as np
            from tinygrad import Device, Tensor

            class TestTiny(unittest.TestCase):
              def test_add(self):
                np.testing.assert_allclose((Tensor([1.0, 2.0]) + 1).numpy(), [2.0, 3.0])
              def test_only_off_ktt(self):
                assert Device.DEFAULT != "KTT", "fails on KTT on purpose"
              def test_subtests(self):
                for i in range(2):
                  with self.subTest(i=i):
                    assert i == 0 or Device.DEFAULT != "KTT"
              @unittest.skip("skipped everywhere")
              def test_skipped(self): pass
              def test_too_slow(self):
                time.sleep(120)
            """
        )
    )
    out = tmp_path / "out"
    args = ["--src", str(src), "--tests", "test/backend/test_tiny.py", "--baseline", "PYTHON", "--out", str(out)]
    args += ["--timeout", "20"]  # long enough for a first KTT kernel on a busy machine, far below the sleep
    assert conformance.main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total"] == {"tests": 5, "cpu_passed": 3, "ktt_passed": 1, "ktt_failed": 2, "ratio": 1 / 3}
    assert set(summary["ktt_failures"]) == {
        "test/backend/test_tiny.py::TestTiny::test_only_off_ktt",
        "test/backend/test_tiny.py::TestTiny::test_subtests",
    }
    why = summary["ktt_failures"]["test/backend/test_tiny.py::TestTiny::test_only_off_ktt"]
    assert "fails on KTT on purpose" in why
    assert "total: 1 / 3" in capsys.readouterr().out
