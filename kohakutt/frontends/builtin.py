"""The built-in frontends as plugins: ``torch`` and ``tinygrad`` in the entry-point group ``kohakutt.frontends``
(``pyproject.toml``), found as any third-party frontend is (:mod:`kohakutt.plugins`).

Loading this module imports neither torch nor tinygrad: each plugin acts only on its frontend once that is in use in
the process, so a tinygrad program never pays for torch, nor a torch program for tinygrad.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Any

from kohakutt.plugins import hookimpl


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


class TorchFrontend:
    """PyTorch's device ``tt`` (:mod:`kohakutt.frontends.torch`)."""

    @hookimpl
    def ktt_frontend_name(self) -> str:
        return "torch"

    @hookimpl
    def ktt_frontend_info(self) -> dict[str, Any]:
        frontend = sys.modules.get("kohakutt.frontends.torch")
        return {"name": "torch", "framework": "torch", "version": _version("torch"), "device": "tt",
                "loaded": bool(getattr(frontend, "_registered", False))}  # fmt: skip

    @hookimpl
    def ktt_device_closing(self, device: Any) -> None:
        runtime = sys.modules.get("kohakutt.frontends.torch.runtime")
        if runtime is not None:  # torch's streams and events of the chip die with it
            runtime.forget_device(device.chip_id)


class TinygradFrontend:
    """tinygrad's device ``"KTT"`` (:mod:`kohakutt.frontends.tinygrad`). Its device object holds its own reference
    to the chip and tinygrad finalizes it at exit, so no device hook is needed."""

    @hookimpl
    def ktt_frontend_name(self) -> str:
        return "tinygrad"

    @hookimpl
    def ktt_frontend_info(self) -> dict[str, Any]:
        return {"name": "tinygrad", "framework": "tinygrad", "version": _version("tinygrad"), "device": "KTT",
                "loaded": "tinygrad.runtime.ops_ktt" in sys.modules}  # fmt: skip


torch_frontend = TorchFrontend()
tinygrad_frontend = TinygradFrontend()
