"""The op library's ``ktt`` provider on a card's path (issue 12 item 6), on the mocked P150: each fused op's launcher
on the HAL's ttnn backend queues its program through the op layer and ``TTNNBackend.run_program`` (``generic_op``),
past every host-side check of TT-Metal (see program_path_on_mock.py)."""

from __future__ import annotations

import json

import pytest
from mock_p150 import HERE, MockUnavailable, prepare
from program_path_on_mock import CASES


@pytest.fixture(scope="module")
def report() -> dict:
    try:
        mock = prepare(HERE.parents[1] / "build" / "ttnn-mock" / "complete", complete=True)
    except MockUnavailable as e:
        pytest.skip(str(e))
    res = mock.run([str(HERE / "program_path_on_mock.py")], KTT_BACKEND="ttnn", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_runs_without_torch(report):
    assert report["torch_loaded"] is False


@pytest.mark.parametrize("op", sorted(CASES))
def test_each_fused_op_launches_its_program_through_generic_op(report, op):
    assert report["backend"] == "ttnn"
    r = report["ops"][op]
    assert not r["error"], f"{op}: {r['error']}"
    assert r["launched"] == 1, f"{op} did not go through its program launcher"
