"""The ``ktt`` command line: doctor, info and sfpi, run in-process through ``main`` and once as a subprocess."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest

from kohakutt import config, sfpi
from kohakutt.cli import main

REPO = Path(__file__).resolve().parent.parent
COMPILER = "sfpi/compiler/bin/riscv32-tt-elf-g++"
FILES = {COMPILER: b"#!/bin/sh\necho riscv32-tt-elf-g++ 12.4\n", "sfpi/include/sfpi.h": b"#pragma once\n"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No KTT_* knob from the caller's environment, the cache in tmp_path; ``env(KTT_X=...)`` sets more."""
    for name in [k for k in os.environ if k.startswith("KTT_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KTT_CACHE_DIR", str(tmp_path / "cache"))
    config.reload()

    def set_knobs(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, str(v))
        config.reload()

    yield set_knobs
    monkeypatch.undo()
    config.reload()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for folders)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def make_tar(path: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith("g++") else 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def archive(tmp_path) -> tuple[Path, str]:
    serve = tmp_path / "serve"
    serve.mkdir()
    path = serve / "sfpi-test.tar.gz"
    return path, make_tar(path, FILES)


@pytest.fixture
def server(tmp_path):
    """An http.server on 127.0.0.1 (ephemeral port) serving tmp_path/serve; yields (base URL, paths requested)."""
    requested: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    (tmp_path / "serve").mkdir(exist_ok=True)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=tmp_path / "serve"))
    httpd.timeout = 5
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", requested
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the test HTTP server did not stop"


# ------------------------------------------------------------------------------------------------- parser


def test_help_lists_every_command(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for cmd in ("doctor", "info", "sfpi"):
        assert cmd in out


def test_no_command_is_a_usage_error(capsys):
    code, _, err = run(capsys)
    assert code == 2
    assert "usage: ktt" in err


# ------------------------------------------------------------------------------------------------- doctor


def test_doctor_reports_host_software_and_sim_cards(env, capsys):
    env(KTT_SIM_DEVICES=3)
    code, out, _ = run(capsys, "doctor")
    assert code == 0, out
    for label in ("host", "python", "kohakutt", "torch", "tinygrad", "ttnn", "C compiler", "sfpi", "backend"):
        assert f"  {label}" in out
    assert f"{os.cpu_count()} CPUs" in out
    assert "3 simulated" in out
    assert "chip 2" in out and "chip 3" not in out
    assert "grid 13 x 10 = 130 cores" in out
    assert "KTT_SIM_DEVICES=3" in out
    assert out.rstrip().endswith("ok")


def test_doctor_json_is_one_object(env, capsys):
    code, out, _ = run(capsys, "doctor", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["torch"]["installed"] is True
    assert report["backend"]["name"] == "sim"
    assert [c["chip"] for c in report["cards"]] == [0, 1]
    assert report["cards"][0]["figures"]["grid"] == [13, 10]
    assert report["cards"][0]["figures"]["l1_bytes"] == 1_572_864
    assert report["knobs"] == {"KTT_CACHE_DIR": os.environ["KTT_CACHE_DIR"]}
    assert report["sfpi"]["installed"] is False


def test_doctor_changes_nothing(env, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert not cache.exists()
    code, _, _ = run(capsys, "doctor")
    assert code == 0
    assert not cache.exists(), "doctor created the cache folder"


@pytest.mark.parametrize(
    ("knob", "value", "needle"),
    [
        ("KTT_BACKEND", "gpu", "KTT_BACKEND='gpu' is not valid"),
        ("KTT_SIM_DEVICES", "zero", "KTT_SIM_DEVICES='zero' is not valid"),
        ("KTT_CC", "/nonexistent/ktt-cc", "KTT_CC='/nonexistent/ktt-cc' is not an executable"),
    ],
)
def test_doctor_exits_1_with_what_to_do(env, capsys, knob, value, needle):
    env(**{knob: value})
    code, out, _ = run(capsys, "doctor")
    assert code == 1
    assert needle in out
    problems = [line for line in out.splitlines() if line.startswith("  PROBLEM")]
    assert sum(needle in line for line in problems) == 1, "each problem is reported once"
    assert "PROBLEM" in out and "->" in out


def test_doctor_ttnn_without_a_card_says_what_to_do(env, capsys):
    if os.path.isdir("/dev/tenstorrent"):
        pytest.skip("a real card is present")
    env(KTT_BACKEND="ttnn")
    code, out, _ = run(capsys, "doctor")
    assert code == 1
    assert "unset KTT_BACKEND" in out
    assert "ktt sfpi" in out


def test_doctor_flags_unknown_knob(env, capsys):
    env(KTT_BAKCEND="sim")
    code, out, _ = run(capsys, "doctor")
    assert code == 0
    assert "KTT_BAKCEND is set but is not a Kohaku-TT knob" in out


def test_doctor_reports_sfpi_install(env, archive, capsys):
    path, sha = archive
    assert run(capsys, "sfpi", str(path), "--sha256", sha)[0] == 0
    report = json.loads(run(capsys, "doctor", "--json")[1])
    assert report["sfpi"]["installed"] is True
    assert report["sfpi"]["installs"][0]["sha256"] == sha
    assert report["sfpi"]["installs"][0]["compiler"].endswith(COMPILER)


# ------------------------------------------------------------------------------------------------- info


def test_info_one_line_per_device(env, capsys):
    code, out, _ = run(capsys, "info")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "kohakutt 0.1.0"
    assert lines[1].startswith("backend  sim:")
    assert lines[2] == "devices  2"
    assert [line.split()[0] for line in lines[3:]] == ["tt:0", "tt:1"]
    assert "Blackhole P150A" in lines[3]


def test_info_json(env, capsys):
    env(KTT_SIM_DEVICES=1)
    code, out, _ = run(capsys, "info", "--json")
    report = json.loads(out)
    assert code == 0
    assert report["backend"] == "sim" and report["device_count"] == 1
    assert [d["device"] for d in report["devices"]] == ["tt:0"]
    assert report["devices"][0]["describe"]["backend"] == "sim"


def test_info_bad_knob_is_a_typed_error(env, capsys):
    env(KTT_SIM_DEVICES="-1")
    code, _, err = run(capsys, "info")
    assert code == 2
    assert err.startswith("ktt info: error: KTT_SIM_DEVICES='-1' is not valid")
    assert "Traceback" not in err


def test_python_m_kohakutt_info():
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTT_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["KTT_SIM_DEVICES"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "kohakutt", "info", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["backend"] == "sim" and report["device_count"] == 1


# ------------------------------------------------------------------------------------------------- sfpi


def test_sfpi_over_http_with_checksum(env, archive, server, tmp_path, capsys):
    path, sha = archive
    base, requested = server
    url = f"{base}/{path.name}"
    code, out, err = run(capsys, "sfpi", url, "--sha256", sha.upper())
    assert code == 0, err
    assert requested == [f"/{path.name}"]
    target = tmp_path / "cache" / "sfpi" / "sfpi-test"
    for name, data in FILES.items():
        assert (target / name).read_bytes() == data
    assert os.stat(target / COMPILER).st_mode & stat.S_IXUSR
    assert os.stat(target).st_mode & 0o777 == 0o755
    manifest = json.loads((target / sfpi.MANIFEST).read_text())
    assert manifest["source"] == url
    assert manifest["sha256"] == sha
    assert manifest["files"] == sorted(FILES)
    assert manifest["time"]
    assert str(target) in out
    assert "100.0%" in err and f"{path.stat().st_size} B" in err  # the progress line
    assert sorted(p.name for p in target.parent.iterdir()) == ["sfpi-test"], "temporary files were left behind"


def test_sfpi_wrong_checksum_leaves_cache_unchanged(env, archive, server, tmp_path, capsys):
    path, sha = archive
    base, _ = server
    cache = tmp_path / "cache"
    code, _, err = run(capsys, "sfpi", f"{base}/{path.name}", "--sha256", "0" * 64)
    assert code == 2
    assert "SHA-256 mismatch" in err and sha in err
    assert "Traceback" not in err
    assert not cache.exists(), "a failed fetch left folders in the cache"

    assert run(capsys, "sfpi", f"{base}/{path.name}", "--sha256", sha)[0] == 0
    before = snapshot(cache)
    code, _, err = run(capsys, "sfpi", f"{base}/{path.name}", "--sha256", "f" * 64)
    assert code == 2 and "SHA-256 mismatch" in err
    assert snapshot(cache) == before


def test_sfpi_from_local_file_and_knobs(env, archive, tmp_path, capsys):
    path, sha = archive
    code, _, err = run(capsys, "sfpi", str(path), "--sha256", sha)
    assert code == 0, err
    manifest = json.loads((tmp_path / "cache" / "sfpi" / "sfpi-test" / sfpi.MANIFEST).read_text())
    assert manifest["source"] == str(path) and manifest["sha256"] == sha

    env(KTT_SFPI_URL=path.as_uri(), KTT_SFPI_SHA256=sha)
    code, _, err = run(capsys, "sfpi", "--force")
    assert code == 0, err
    manifest = json.loads((tmp_path / "cache" / "sfpi" / "sfpi-test" / sfpi.MANIFEST).read_text())
    assert manifest["source"] == path.as_uri()


def test_sfpi_without_checksum_warns(env, archive, capsys):
    path, sha = archive
    code, _, err = run(capsys, "sfpi", str(path))
    assert code == 0
    assert "not verified" in err and sha in err


def test_sfpi_rerun_downloads_nothing(env, archive, server, capsys):
    path, sha = archive
    base, requested = server
    url = f"{base}/{path.name}"
    assert run(capsys, "sfpi", url, "--sha256", sha)[0] == 0
    code, out, _ = run(capsys, "sfpi", url, "--sha256", sha)
    assert code == 0
    assert "already installed" in out
    assert len(requested) == 1
    assert run(capsys, "sfpi", url, "--sha256", sha, "--force")[0] == 0
    assert len(requested) == 2


def test_sfpi_without_source_says_what_to_do(env, capsys):
    code, _, err = run(capsys, "sfpi")
    assert code == 2
    assert "KTT_SFPI_URL" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("files", "links"),
    [
        ({"sfpi/ok.h": b"x", "../evil.txt": b"pwned"}, None),
        ({"sfpi/ok.h": b"x", "sfpi/../../evil.txt": b"pwned"}, None),
        ({"/tmp/ktt-evil.txt": b"pwned"}, None),
        ({"sfpi/ok.h": b"x"}, {"sfpi/up": "../../.."}),
        ({"sfpi/ok.h": b"x"}, {"sfpi/abs": "/etc"}),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "symlink-up", "symlink-absolute"],
)
def test_sfpi_rejects_escaping_archives(env, tmp_path, capsys, files, links):
    evil = tmp_path / "serve" / "evil-sfpi.tar.gz"
    evil.parent.mkdir()
    make_tar(evil, files, links)
    code, _, err = run(capsys, "sfpi", str(evil))
    assert code == 2
    assert "outside the target folder" in err
    assert not list(tmp_path.rglob("evil.txt"))
    assert not (tmp_path / "cache").exists()


def test_sfpi_rejects_link_then_write_through_it(env, tmp_path, capsys):
    evil = tmp_path / "evil-sfpi.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        for name, target in [("a", "."), ("a/a/b", "../../..")]:  # lexically inside, really outside
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    code, _, err = run(capsys, "sfpi", str(evil))
    assert code == 2
    assert "outside the target folder" in err


def test_sfpi_zip_keeps_exec_bits(env, tmp_path, capsys):
    path = tmp_path / "sfpi-zip.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in FILES.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name == COMPILER else 0o644) << 16
            z.writestr(info, data)
    code, out, err = run(capsys, "sfpi", str(path))
    assert code == 0, err
    target = tmp_path / "cache" / "sfpi" / "sfpi-zip"
    assert os.stat(target / COMPILER).st_mode & stat.S_IXUSR
    assert f"compiler: {target / COMPILER}" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["/nonexistent/sfpi.tar.gz"], "is not a file"),
        (["ftp://example.invalid/sfpi.tar.gz"], "unsupported URL scheme"),
        (["/tmp/sfpi.rar"], "does not name an archive"),
        (["/tmp/sfpi.tar.gz", "--sha256", "abc"], "is not a SHA-256"),
    ],
)
def test_sfpi_bad_arguments(env, capsys, argv, needle):
    code, _, err = run(capsys, "sfpi", *argv)
    assert code == 2
    assert needle in err


def test_sfpi_http_404(env, server, capsys):
    base, _ = server
    code, _, err = run(capsys, "sfpi", f"{base}/missing.tar.gz")
    assert code == 2
    assert "HTTP 404" in err


def test_progress_line_plain_text():
    out = io.StringIO()
    bar = sfpi.Progress(out, "sfpi", total=4096)
    bar.update(4096)
    bar.finish()
    assert "\r" not in out.getvalue()
    assert "100.0%" in out.getvalue() and "4.0 KiB / 4.0 KiB" in out.getvalue()
    out = io.StringIO()
    bar = sfpi.Progress(out, "sfpi", total=None)
    bar.update(10)
    bar.finish()
    assert "%" not in out.getvalue() and "10 B" in out.getvalue() and "/s" in out.getvalue()
