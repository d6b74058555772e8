"""Frontend plugins: the hook specifications every frontend may implement, and the plugin manager.

A frontend is a package with an entry point in the group ``kohakutt.frontends`` pointing at an object (module or
class instance) whose methods are marked with :data:`hookimpl`. It is registered the first time the plugin manager
is asked for, so adding a frontend never edits the HAL.
"""

from __future__ import annotations

import threading
from typing import Any

import pluggy

PROJECT = "kohakutt"
ENTRY_POINT_GROUP = "kohakutt.frontends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class FrontendSpec:
    """The contract between the HAL and a frontend."""

    @hookspec(firstresult=True)
    def ktt_frontend_name(self) -> str:  # type: ignore[empty-body]
        """The frontend's short name (``"torch"``, ``"tinygrad"``)."""

    @hookspec
    def ktt_device_opened(self, device: Any) -> None:
        """A chip was opened (first user); ``device`` is the HAL device, shared by every frontend."""

    @hookspec
    def ktt_device_closing(self, device: Any) -> None:
        """The last user is closing ``device``; drop caches that hold its buffers. Work has been synchronized."""

    @hookspec
    def ktt_device_synchronized(self, device: Any) -> None:
        """``device.synchronize()`` returned: every queued command has run."""

    @hookspec
    def ktt_register_ops(self, registry: Any) -> None:
        """Add this frontend's op mappings or extra ops to ``registry`` (the IR op registry)."""


_lock = threading.Lock()
_pm: pluggy.PluginManager | None = None


def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager, with the installed frontends' entry points loaded once."""
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(PROJECT)
            pm.add_hookspecs(FrontendSpec)
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            _pm = pm
        return _pm


def register(plugin: object, name: str | None = None) -> str:
    """Register a frontend object by hand (tests, frontends not installed as packages); returns its name."""
    pm = plugin_manager()
    if name is not None and pm.has_plugin(name):
        return name
    return pm.register(plugin, name) or ""


def unregister(name: str) -> None:
    pm = plugin_manager()
    if pm.has_plugin(name):
        pm.unregister(name=name)


def frontends() -> list[str]:
    """The names of the registered frontends."""
    return [impl.function() for impl in plugin_manager().hook.ktt_frontend_name.get_hookimpls()]
