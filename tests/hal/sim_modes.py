"""How the simulator runs programs, switched for a block: ``with sim_kernels("python"): ...`` (knob
``KTT_SIM_KERNELS``; ``cpp`` builds each kernel's C++, ``python`` runs its Python twin)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from kohakutt import config


@contextlib.contextmanager
def sim_kernels(mode: str) -> Iterator[None]:
    old = os.environ.get("KTT_SIM_KERNELS")
    os.environ["KTT_SIM_KERNELS"] = mode
    config.reload()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("KTT_SIM_KERNELS", None)
        else:
            os.environ["KTT_SIM_KERNELS"] = old
        config.reload()
