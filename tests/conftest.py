from __future__ import annotations

import pytest

from kohakutt import config

pytest_plugins = ["record_ttnn"]  # tests/ttnn: records the op library's TT-NN calls for the TT-NN replay tests


@pytest.fixture
def knobs(monkeypatch):
    """Set KTT_* knobs for one test: ``knobs(KTT_L1_BUDGET="64K")``; restored after."""

    def set_knobs(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, str(v))
        config.reload()

    yield set_knobs
    monkeypatch.undo()
    config.reload()


KEEP_A_CHIP_OPEN = {"frontends", "dsl"}  # test folders whose tests use a frontend (the DSL's run as torch ops)


def pytest_collection_modifyitems(config, items):
    """Run the frontends' tests last: a frontend keeps its chip open for the rest of the process (as a CUDA
    context does), while the HAL's tests open, count and close chips themselves."""
    items.sort(key=lambda item: bool(KEEP_A_CHIP_OPEN & set(item.nodeid.split("::")[0].split("/"))))
