"""Where the tests find a Python with TT-NN 0.81.1, and the environment they run it in (shared by test_formats.py and
test_ttnn_contract.py). ``scripts/ttnn_venv.sh`` makes the checkout's ``.venv-ttnn``; ``KTT_TTNN_PYTHON`` points at
another Python."""

from __future__ import annotations

import os
from pathlib import Path

from mock_p150 import CLUSTER_DESC

ROOT = Path(__file__).resolve().parents[2]
NO_TTNN = "no Python with ttnn 0.81.1: run scripts/ttnn_venv.sh (needs Python 3.12) or set KTT_TTNN_PYTHON"

# The mocked P150's cluster descriptor (tests/ttnn/mock_p150.py): TT-NN's host conversions ask the runtime for tile
# sizes and L1 alignment, which otherwise needs a card.
MOCK_P150 = CLUSTER_DESC


def find_ttnn_python() -> Path | None:
    """The Python that has ttnn: ``KTT_TTNN_PYTHON``, else the checkout's ``.venv-ttnn``; None if it does not exist."""
    given = os.environ.get("KTT_TTNN_PYTHON")
    path = Path(given) if given else ROOT / ".venv-ttnn" / "bin" / "python"
    return path if path.exists() else None


def ttnn_env(**extra: str) -> dict[str, str]:
    """This process's environment for that Python: without TT_METAL_* and PYTHON* settings, TT-Metal's logging
    quiet, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TT_METAL_", "PYTHON"))}
    return env | {"TT_LOGGER_LEVEL": "off", "LOGURU_LEVEL": "WARNING"} | extra
