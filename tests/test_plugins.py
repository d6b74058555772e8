from __future__ import annotations

from kohakutt import hal, plugins
from kohakutt.plugins import hookimpl


class RecordingFrontend:
    """A minimal frontend: it only records what the HAL tells it."""

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


def test_a_frontend_plugin_sees_the_device_lifecycle():
    fe = RecordingFrontend()
    plugins.register(fe, "recording")
    try:
        assert "recording" in plugins.frontends()
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


def test_hook_specs_are_documented():
    for name in ("ktt_frontend_name", "ktt_device_opened", "ktt_device_closing", "ktt_device_synchronized",
                 "ktt_register_ops"):
        assert getattr(plugins.FrontendSpec, name).__doc__


def test_frontends_are_found_through_the_entry_point_group(tmp_path):
    import subprocess
    import sys
    import textwrap

    (tmp_path / "fakefront.py").write_text(textwrap.dedent("""
        from kohakutt.plugins import hookimpl

        class Plugin:
            @hookimpl
            def ktt_frontend_name(self):
                return "fake"

        plugin = Plugin()
    """))
    info = tmp_path / "fakefront-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakefront\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[kohakutt.frontends]\nfake = fakefront:plugin\n")
    code = "import sys; sys.path.insert(0, sys.argv[1]); from kohakutt import plugins; print(plugins.frontends())"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert "'fake'" in out.stdout
