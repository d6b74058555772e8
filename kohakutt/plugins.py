"""Frontend plugins: the hook specifications every frontend may implement, and the plugin manager.

A frontend is a package with an entry point in the group ``kohakutt.frontends`` naming an object (a module or an
instance) whose methods are marked with :data:`hookimpl`; the built-in ``torch`` and ``tinygrad`` frontends are
registered that way too (``pyproject.toml``). The installed frontends are loaded the first time the plugin manager
is asked for (when a chip opens, when the op library loads, or by :func:`frontends`), so adding a frontend is a
package, never an edit of the HAL. A plugin's module is imported then: keep it light (import your framework inside
the hooks that need it).

Who calls what: the HAL calls the device hooks (``hal/device.py``), the op library calls ``ktt_register_ops`` once
when it loads (``kernels/registry.py``), and the CLI asks ``ktt_frontend_info`` (``ktt info``).
"""

from __future__ import annotations

import threading
import warnings
from importlib import metadata
from typing import Any

import pluggy

PROJECT = "kohakutt"
ENTRY_POINT_GROUP = "kohakutt.frontends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class PluginLoadWarning(UserWarning):
    """A frontend plugin's entry point failed to load; the other frontends and the device work without it."""


class FrontendSpec:
    """The contract between Kohaku-TT and a frontend. Every hook is optional."""

    @hookspec
    def ktt_frontend_name(self) -> str:  # type: ignore[empty-body]
        """The frontend's short name (``"torch"``, ``"tinygrad"``): how :func:`frontends` lists it."""

    @hookspec
    def ktt_frontend_info(self) -> dict[str, Any]:  # type: ignore[empty-body]
        """What ``ktt info`` shows of this frontend: a dict with at least ``name``, ``framework`` (the library it
        serves), ``version`` (that library's installed version, or None when it is not installed), ``device`` (the
        name users write) and ``loaded`` (whether the frontend is in use in this process). Cheap: never import the
        framework here."""

    @hookspec
    def ktt_device_opened(self, device: Any) -> None:
        """Chip ``device.chip_id`` was opened by its first user; ``device`` is the HAL :class:`~kohakutt.hal.Device`
        shared by every frontend. Called once per open, after the chip is ready, outside the HAL's locks."""

    @hookspec
    def ktt_device_closing(self, device: Any) -> None:
        """The last user is closing ``device``: its queued work has run and its buffers are about to be freed. Drop
        whatever this frontend keeps that belongs to the chip (streams, events, cached buffers), so that nothing
        stale is used after it reopens. Called with the HAL's device lock held: do not open or close devices here."""

    @hookspec
    def ktt_device_synchronized(self, device: Any) -> None:
        """``device.synchronize()`` returned: every command queued before it has run. This runs on every
        synchronize, so implement it only when needed and keep it cheap (the HAL skips the call when no frontend
        implements it)."""

    @hookspec(historic=True)
    def ktt_register_ops(self, registry: Any) -> None:
        """Add this frontend's own IR ops and their implementations: ``registry`` is a
        :class:`kohakutt.kernels.registry.OpRegistry` (``define`` an IR op, ``implement`` it for a backend). Called
        once per process, when the op library loads (the first op queued), after the built-in op families; a
        frontend registered later is called at its registration. Defining a name twice, or implementing an op a
        second time for the same backend and provider, raises."""


_lock = threading.RLock()
_pm: pluggy.PluginManager | None = None  # set before the entry points load (a loading plugin may ask for it)
_ready: pluggy.PluginManager | None = None  # set once they have: the lock-free path
_distributions: dict[str, str] = {}  # plugin name -> "distribution version" it came from
_ops_registered = False


def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager, with the installed frontends' entry points loaded once."""
    pm = _ready
    if pm is not None:
        return pm
    return _create()


def _create() -> pluggy.PluginManager:
    global _pm, _ready
    with _lock:  # another thread waits here while the entry points load
        if _pm is not None:  # loaded, or being loaded by this thread
            return _pm
        pm = pluggy.PluginManager(PROJECT)
        pm.add_hookspecs(FrontendSpec)
        _pm = pm  # a plugin that asks for the manager while it loads gets this one
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as e:  # one broken frontend must not take the device away from the others
                dist = f" (distribution {ep.dist.name})" if ep.dist is not None else ""
                warnings.warn(
                    f"Kohaku-TT frontend plugin {ep.name!r} = {ep.value!r}{dist} failed to load and is skipped: "
                    f"{type(e).__name__}: {e}. Fix or uninstall that package.",
                    PluginLoadWarning,
                    stacklevel=3,
                )
                continue
            if ep.dist is not None:
                _distributions[ep.name] = f"{ep.dist.name} {ep.dist.version}"
        _ready = pm
        return pm


def register(plugin: object, name: str | None = None) -> str:
    """Register a frontend object by hand (tests, frontends not installed as packages); returns its name. A plugin
    registered after the op library loaded gets its ``ktt_register_ops`` call at once."""
    pm = plugin_manager()
    if name is not None and pm.has_plugin(name):
        return name
    return pm.register(plugin, name) or ""


def unregister(name: str) -> None:
    """Remove the frontend registered as ``name`` (its ops stay registered)."""
    pm = plugin_manager()
    if pm.has_plugin(name):
        pm.unregister(name=name)


def frontends() -> list[str]:
    """The names of the registered frontends."""
    return [impl.function() for impl in plugin_manager().hook.ktt_frontend_name.get_hookimpls()]


def frontend_info() -> list[dict[str, Any]]:
    """What each registered frontend reports about itself (``ktt_frontend_info``), with the distribution it was
    installed from (``None`` for one registered by hand)."""
    out = []
    for impl in plugin_manager().hook.ktt_frontend_info.get_hookimpls():
        try:
            info = dict(impl.function())
        except Exception as e:  # one broken frontend does not hide the others
            info = {"name": impl.plugin_name, "error": f"{type(e).__name__}: {e}"}
        info.setdefault("name", impl.plugin_name)
        info["distribution"] = _distributions.get(impl.plugin_name)
        out.append(info)
    return out


def register_ops(registry: Any) -> None:
    """Call every frontend's ``ktt_register_ops`` with ``registry``, once per process (the op library does this when
    it loads); frontends registered later are called when they register."""
    global _ops_registered
    with _lock:
        if _ops_registered:
            return
        _ops_registered = True
        plugin_manager().hook.ktt_register_ops.call_historic(kwargs={"registry": registry})


def device_opened(device: Any) -> None:
    plugin_manager().hook.ktt_device_opened(device=device)


def device_closing(device: Any) -> None:
    plugin_manager().hook.ktt_device_closing(device=device)


def device_synchronized(device: Any) -> None:
    """Tell the frontends ``device`` synchronized; nearly free when none listens (it runs on every synchronize)."""
    caller = plugin_manager().hook.ktt_device_synchronized
    if caller.get_hookimpls():
        caller(device=device)
