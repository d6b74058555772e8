"""Frontend plugins: the hook contract, the built-in frontends found through the entry points, and a third-party
frontend installed as a package doing real work (an op of its own on the card, the device's lifecycle)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kohakutt import hal, plugins
from kohakutt.kernels.registry import OpRegistry
from kohakutt.plugins import hookimpl

REPO = Path(__file__).resolve().parents[1]


class RecordingFrontend:
    """A minimal frontend: it only records what it is told."""

    def __init__(self):
        self.events = []

    @hookimpl
    def ktt_frontend_name(self):
        return "recording"

    @hookimpl
    def ktt_device_opened(self, device):
        self.events.append(("opened", device.chip_id))

    @hookimpl
    def ktt_device_synchronized(self, device):
        self.events.append(("synchronized", device.chip_id))

    @hookimpl
    def ktt_device_closing(self, device):
        self.events.append(("closing", device.chip_id))

    @hookimpl
    def ktt_register_ops(self, registry):
        self.events.append(("register_ops", type(registry).__name__))


def test_a_frontend_plugin_sees_the_device_lifecycle():
    fe = RecordingFrontend()
    plugins.register(fe, "recording")
    try:
        assert "recording" in plugins.frontends()
        # the op library loaded long ago (or loads now): a late frontend is still asked for its ops, once
        from kohakutt.kernels import registry

        registry._load()
        assert fe.events == [("register_ops", "OpRegistry")]
        fe.events.clear()
        dev = hal.open_device(1)
        hal.open_device(1)  # a second user: no second "opened"
        dev.synchronize()
        dev.close()
        assert ("closing", 1) not in fe.events
        dev.close()
        assert fe.events == [("opened", 1), ("synchronized", 1), ("synchronized", 1), ("closing", 1)]
    finally:
        plugins.unregister("recording")
    assert "recording" not in plugins.frontends()


def test_a_failing_closing_hook_still_closes_the_chip():
    class Broken:
        @hookimpl
        def ktt_device_closing(self, device):
            raise RuntimeError("broken frontend")

    plugins.register(Broken(), "broken")
    try:
        dev = hal.open_device(1)
        with pytest.raises(RuntimeError, match="broken frontend"):
            dev.close()
        assert dev.closed and dev not in hal.open_devices()
    finally:
        plugins.unregister("broken")
    again = hal.open_device(1)
    assert not again.closed
    again.close()


def test_hook_specs_are_documented():
    for name in ("ktt_frontend_name", "ktt_frontend_info", "ktt_device_opened", "ktt_device_closing",
                 "ktt_device_synchronized", "ktt_register_ops"):  # fmt: skip
        assert len(getattr(plugins.FrontendSpec, name).__doc__) > 40


def test_the_built_in_frontends_are_found_through_the_entry_points_and_keep_synchronize_free():
    info = {i["name"]: i for i in plugins.frontend_info()}
    assert {"torch", "tinygrad"} <= set(plugins.frontends())
    assert info["torch"]["distribution"].startswith("kohakutt ") and info["torch"]["device"] == "tt"
    assert info["tinygrad"]["distribution"].startswith("kohakutt ") and info["tinygrad"]["device"] == "KTT"
    # neither built-in frontend listens to synchronize, so the HAL skips that hook on its hot path
    assert plugins.plugin_manager().hook.ktt_device_synchronized.get_hookimpls() == []


def test_loading_the_plugins_imports_no_framework():
    code = ("import sys; from kohakutt import plugins, hal; names = plugins.frontends(); hal.open_device(0).close(); "
            "print(sorted(names), 'torch' in sys.modules, 'tinygrad' in sys.modules)")  # fmt: skip
    out, _ = _python(code)
    assert out.strip().splitlines()[-1] == "['tinygrad', 'torch'] False False"


# ------------------------------------------------------------------------------------- a third-party frontend
_FRONTEND = '''
"""numfront: a tiny NumPy frontend for the card, installed as a package with a kohakutt.frontends entry point."""
import numpy as np

from kohakutt import hal
from kohakutt.ir.ops import elementwise
from kohakutt.plugins import hookimpl

events = []


class Plugin:
    @hookimpl
    def ktt_frontend_name(self):
        return "numfront"

    @hookimpl
    def ktt_frontend_info(self):
        return {"name": "numfront", "framework": "numpy", "version": np.__version__, "device": "card",
                "loaded": True}

    @hookimpl
    def ktt_register_ops(self, registry):
        registry.define("numfront_scale_add", "numfront", ("x", "y"), elementwise(), attrs={"alpha": 1.0},
                        doc="alpha * x + y")

        @registry.implement("numfront_scale_add")
        def scale_add(call):
            x, y = (np.asarray(v, np.float32) for v in call.inputs)
            return np.float32(call.attrs["alpha"]) * x + y

        events.append("ops")

    @hookimpl
    def ktt_device_opened(self, device):
        events.append(f"opened {device.chip_id}")

    @hookimpl
    def ktt_device_closing(self, device):
        events.append(f"closing {device.chip_id}")


plugin = Plugin()


def scale_add(alpha, x, y, chip=0):
    """alpha * x + y for float32 arrays, on the card."""
    from kohakutt import kernels

    dev = hal.open_device(chip)
    try:
        tx, ty = kernels.from_numpy(dev, x, "float32"), kernels.from_numpy(dev, y, "float32")
        (out,) = kernels.run("numfront_scale_add", [tx, ty], {"alpha": alpha})
        return kernels.to_numpy(out)
    finally:
        dev.close()
'''


def _install(tmp_path: Path, name: str, module: str, source: str, entry: str) -> Path:
    """A fake installed distribution: the module and its dist-info with one kohakutt.frontends entry point."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    info = tmp_path / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[kohakutt.frontends]\n{entry}\n")
    return tmp_path


def _python(code: str, path: Path | None = None) -> tuple[str, str]:
    """Run ``code`` in a fresh Python that also finds the packages under ``path``; its stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTT_")}
    paths = [str(path) if path else "", str(REPO), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_a_third_party_frontend_package_registers_an_op_and_sees_the_device(tmp_path: Path):
    path = _install(tmp_path, "numfront", "numfront", _FRONTEND, "numfront = numfront:plugin")
    x = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    y = np.arange(16, dtype=np.float32).reshape(4, 4) * 3
    code = textwrap.dedent(f"""
        import json, numpy as np, numfront
        from kohakutt import plugins
        x = np.array({x.tolist()}, np.float32); y = np.array({y.tolist()}, np.float32)
        got = numfront.scale_add(2.5, x, y)
        print(json.dumps({{"frontends": sorted(plugins.frontends()), "got": got.tolist(), "dtype": str(got.dtype),
                          "events": numfront.events}}))
    """)
    report = json.loads(_python(code, path)[0].strip().splitlines()[-1])
    assert report["frontends"] == ["numfront", "tinygrad", "torch"]
    want = 2.5 * x.astype(np.float64) + y  # exact in float32 for these values
    assert report["dtype"] == "float32"
    np.testing.assert_array_equal(np.array(report["got"]), want)
    assert report["events"] == ["opened 0", "ops", "closing 0"]  # the op library loads at the first op


def test_a_broken_frontend_package_warns_and_the_device_still_works(tmp_path: Path):
    path = _install(tmp_path, "brokenfront", "brokenfront", "raise ImportError('missing dependency xyz')\n",
                    "broken = brokenfront:plugin")  # fmt: skip
    code = ("import warnings; warnings.simplefilter('always'); from kohakutt import hal, plugins; "
            "d = hal.open_device(0); d.close(); print(sorted(plugins.frontends()))")  # fmt: skip
    out, err = _python(code, path)
    assert "PluginLoadWarning" in err and "'broken'" in err and "missing dependency xyz" in err
    assert "brokenfront" in err and "Fix or uninstall" in err
    assert out.strip().splitlines()[-1] == "['tinygrad', 'torch']"


def test_the_op_registry_handed_to_frontends_refuses_a_second_definition():
    reg = OpRegistry()
    assert reg.defined("add") and not reg.defined("no_such_op_ktt")
    from kohakutt.errors import KohakuTTError
    from kohakutt.ir.ops import same

    with pytest.raises(KohakuTTError, match="defined twice"):
        reg.define("add", "elementwise", ("a", "b"), same())
