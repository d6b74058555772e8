"""Fixtures of the tests that run TT-NN 0.81.1 on a mocked P150 (in the TT-NN venv's Python, as subprocesses)."""

from __future__ import annotations

import pytest
from mock_p150 import REPO, MockP150, MockUnavailable, prepare


@pytest.fixture(scope="session")
def mock_p150() -> MockP150:
    """The mocked P150 (prepared once under build/ttnn-mock and reused by later runs); skips without a TT-NN venv."""
    try:
        return prepare(REPO / "build" / "ttnn-mock" / "plain")
    except MockUnavailable as e:
        pytest.skip(str(e))
