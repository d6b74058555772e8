"""The RISC-V kernel compiler (sfpi) in the cache: fetch, verify, unpack, and find what is installed.

An install is ``<cache>/sfpi/<name>/`` holding the unpacked archive and ``ktt-manifest.json`` (source, sha256, time,
files). Installs appear atomically: the archive is downloaded to a temporary file, checked, unpacked into a
temporary folder and only then renamed into place, so a failed fetch leaves the cache as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from kohakutt import config
from kohakutt.errors import KohakuTTError

MANIFEST = "ktt-manifest.json"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".zip")
CHUNK = 1 << 16
TIMEOUT_S = 60.0


class SfpiError(KohakuTTError):
    """The kernel compiler could not be fetched, verified or unpacked; the message says what to do."""


@dataclass
class Install:
    """One unpacked kernel compiler in the cache."""

    name: str
    path: Path
    source: str
    sha256: str
    time: str
    files: list[str] = field(default_factory=list)

    @property
    def compiler(self) -> Path | None:
        """The RISC-V C++ compiler inside the install, when the archive has one."""
        for f in self.files:
            if re.search(r"(^|/)bin/riscv[^/]*-g\+\+$", f):
                return self.path / f
        return None

    def to_json(self) -> dict[str, Any]:
        compiler = self.compiler
        return {
            "name": self.name,
            "path": str(self.path),
            "source": self.source,
            "sha256": self.sha256,
            "time": self.time,
            "files": len(self.files),
            "compiler": str(compiler) if compiler else None,
        }


@dataclass
class FetchResult:
    install: Install
    fetched: bool  # False: the same archive was already installed, nothing was downloaded
    verified: bool  # True: the archive matched an expected checksum


def root() -> Path:
    """Where installs live: ``<KTT_CACHE_DIR>/sfpi`` (not created here)."""
    return Path(config.get("KTT_CACHE_DIR")) / "sfpi"


def _read_install(path: Path) -> Install | None:
    try:
        m = json.loads((path / MANIFEST).read_text())
        return Install(path.name, path, str(m["source"]), str(m["sha256"]), str(m["time"]), list(m["files"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def installed() -> list[Install]:
    """Every complete install in the cache, newest first. Reads only; creates nothing."""
    base = root()
    if not base.is_dir():
        return []
    found = [i for p in base.iterdir() if p.is_dir() and not p.name.startswith(".") and (i := _read_install(p))]
    return sorted(found, key=lambda i: i.time, reverse=True)


def current() -> Install | None:
    """The newest install, or None when ``ktt sfpi`` has not run."""
    found = installed()
    return found[0] if found else None


def _is_url(source: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", source) is not None


def _archive_name(source: str) -> tuple[str, str]:
    """(install name, archive suffix) from the last path segment of a URL or file path."""
    if _is_url(source):
        base = urllib.parse.unquote(source.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    else:
        base = Path(source).name
    lower = base.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if lower.endswith(suffix):
            name = re.sub(r"[^A-Za-z0-9._+-]", "_", base[: -len(suffix)]).strip(".") or "sfpi"
            return name, suffix
    raise SfpiError(
        f"{source!r} does not name an archive this command can unpack ({', '.join(ARCHIVE_SUFFIXES)}); "
        "pass the URL or path of the sfpi release archive"
    )


def _check_sha256(value: str | None) -> str | None:
    if value is None or value.strip() == "":
        return None
    v = value.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", v):
        raise SfpiError(f"{value!r} is not a SHA-256 (64 hex digits); fix --sha256 or KTT_SFPI_SHA256")
    return v


@contextlib.contextmanager
def _open_source(source: str) -> Iterator[tuple[IO[bytes], int | None]]:
    """The source as a byte stream and its size when known."""
    if not _is_url(source):
        path = Path(source).expanduser()
        if not path.is_file():
            raise SfpiError(f"{source!r} is not a file; pass an existing archive path or an http(s)/file URL")
        with path.open("rb") as f:
            yield f, path.stat().st_size
        return
    scheme = source.split(":", 1)[0].lower()
    if scheme not in ("http", "https", "file"):
        raise SfpiError(f"{source!r}: unsupported URL scheme {scheme!r}; use http, https or file")
    try:
        resp = urllib.request.urlopen(source, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        raise SfpiError(f"{source}: HTTP {e.code} {e.reason}; check the URL") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise SfpiError(f"cannot fetch {source}: {reason}; check the URL and the network") from None
    with resp:
        length = resp.headers.get("Content-Length")
        yield resp, int(length) if length and length.isdigit() else None


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class Progress:
    """A plain-text progress line: bytes, percent when the size is known, rate.

    On a terminal the line is redrawn in place; otherwise a new line is written at most once a second.
    """

    def __init__(self, stream: TextIO | None, label: str, total: int | None):
        self.stream, self.label, self.total = stream, label, total
        self.done = 0
        self.start = self.last = time.monotonic()
        self.tty = bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())

    def line(self) -> str:
        rate = self.done / max(time.monotonic() - self.start, 1e-6)
        parts = [self.label]
        if self.total:
            pct = min(100.0, 100.0 * self.done / self.total)
            bar = "#" * int(pct / 5)
            parts += [f"[{bar:<20}]", f"{pct:5.1f}%", f"{_fmt_bytes(self.done)} / {_fmt_bytes(self.total)}"]
        else:
            parts.append(_fmt_bytes(self.done))
        parts.append(f"{_fmt_bytes(rate)}/s")
        return "  ".join(parts)

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.stream is not None and now - self.last >= (0.1 if self.tty else 1.0):
            self.last = now
            self._write(final=False)

    def finish(self) -> None:
        if self.stream is not None:
            self._write(final=True)

    def _write(self, final: bool) -> None:
        assert self.stream is not None
        if self.tty:
            self.stream.write("\r" + self.line() + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


def _download(source: str, dest: Path, progress: TextIO | None) -> str:
    """Copy ``source`` to ``dest``, showing progress; the SHA-256 of what was copied."""
    h = hashlib.sha256()
    with _open_source(source) as (src, total), dest.open("wb") as out:
        bar = Progress(progress, "sfpi", total)
        try:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
                bar.update(len(chunk))
        except OSError as e:
            raise SfpiError(f"reading {source} failed after {bar.done} bytes: {e}; try again") from None
        bar.finish()
        if total is not None and bar.done != total:
            raise SfpiError(f"{source}: got {bar.done} of {total} bytes; the transfer was cut short, try again")
    return h.hexdigest()


def _inside(base: str, path: str) -> bool:
    return os.path.commonpath([base, path]) == base


def _member_path(name: str) -> str:
    """A member's relative path, refused when it is absolute or climbs out with ``..``."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts:
        raise SfpiError(f"archive member {name!r} would land outside the target folder; refusing the archive")
    rel = "/".join(p for p in parts if p not in ("", "."))
    if rel == MANIFEST:
        raise SfpiError(f"archive member {name!r} clashes with the install manifest; refusing the archive")
    return rel


_FILTER_ERROR: Any = getattr(tarfile, "FilterError", ())
_TAR_FILTER: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _unpack_tar(archive: Path, target: Path) -> None:
    base = os.path.realpath(target)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for m in members:  # check every name before writing anything
            _member_path(m.name)
            if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                raise SfpiError(f"archive member {m.name!r} is a device or fifo; refusing the archive")
        for m in members:  # resolved as extraction goes, so earlier links count
            path = os.path.join(base, m.name)
            parent = os.path.realpath(os.path.dirname(path))
            is_link = m.issym() or m.islnk()
            dest = os.path.join(parent, os.path.basename(path)) if is_link else os.path.realpath(path)
            if not _inside(base, dest):
                raise SfpiError(f"archive member {m.name!r} resolves outside the target folder; refusing the archive")
            if is_link:
                link = os.path.realpath(os.path.join(parent if m.issym() else base, m.linkname))
                if os.path.isabs(m.linkname) or not _inside(base, link):
                    raise SfpiError(
                        f"archive link {m.name!r} -> {m.linkname!r} points outside the target folder; "
                        "refusing the archive"
                    )
            tar.extract(m, base, set_attrs=True, **_TAR_FILTER)


def _unpack_zip(archive: Path, target: Path) -> None:
    base = os.path.realpath(target)
    with zipfile.ZipFile(archive) as z:
        infos = z.infolist()
        for info in infos:
            _member_path(info.filename)
        for info in infos:
            rel = _member_path(info.filename)
            if not rel:
                continue
            dest = os.path.realpath(os.path.join(base, rel))
            if not _inside(base, dest):
                raise SfpiError(f"archive member {info.filename!r} resolves outside the target folder")
            if info.is_dir():
                os.makedirs(dest, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest, mode | stat.S_IRUSR | stat.S_IWUSR)


def unpack(archive: Path, target: Path, suffix: str) -> list[str]:
    """Unpack ``archive`` into ``target`` (created), refusing members that would escape it; the files, sorted."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        if suffix == ".zip":
            _unpack_zip(archive, target)
        else:
            _unpack_tar(archive, target)
    except _FILTER_ERROR as e:
        raise SfpiError(f"{archive.name}: {e}; refusing the archive") from None
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as e:
        raise SfpiError(f"{archive.name} is not a readable {suffix} archive ({e}); check the source") from None
    files = []
    for dirpath, dirnames, filenames in os.walk(target):
        rel = Path(dirpath).relative_to(target)
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        files += [(rel / f).as_posix() for f in filenames + links]
    return sorted(files)


def fetch(
    source: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    progress: TextIO | None = None,
) -> FetchResult:
    """Fetch, verify and unpack the kernel compiler archive into ``<cache>/sfpi/<name>/``.

    ``source`` is an http(s) or file URL or a local path (default: KTT_SFPI_URL); ``sha256`` the expected checksum
    (default: KTT_SFPI_SHA256). An install of the same archive is kept and nothing is downloaded unless ``force``.
    ``progress`` is the stream for the progress line (None: quiet).
    On any error the cache is left as it was and :class:`SfpiError` says what to do.
    """
    source = source or config.get("KTT_SFPI_URL")
    if not source:
        raise SfpiError(
            "no source for the kernel compiler: pass a URL or a file (`ktt sfpi URL_OR_FILE`) or set KTT_SFPI_URL"
        )
    expected = _check_sha256(sha256 if sha256 is not None else config.get("KTT_SFPI_SHA256"))
    name, suffix = _archive_name(source)
    base = root()
    target = base / name

    known = expected
    if known is None and not _is_url(source) and Path(source).expanduser().is_file():
        known = _sha256_file(Path(source).expanduser())
    old = _read_install(target) if target.is_dir() else None
    if old is not None and not force:
        if known is not None and old.sha256 == known:
            return FetchResult(old, fetched=False, verified=expected is not None)
        if known is None and old.source == source:
            return FetchResult(old, fetched=False, verified=False)

    created = [p for p in (base, *base.parents) if not p.exists()]  # removed again if the fetch fails
    base.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".download-", suffix=suffix, dir=base)
    os.close(fd)
    archive = Path(tmp_name)
    staging = Path(tempfile.mkdtemp(prefix=f".unpack-{name}-", dir=base))
    staging.chmod(0o755)  # mkdtemp makes it private; the install is as readable as its parent
    try:
        actual = _download(source, archive, progress)
        if expected is not None and actual != expected:
            raise SfpiError(
                f"SHA-256 mismatch for {source}: expected {expected}, got {actual}; nothing was installed. "
                "Check the source, or the checksum given by --sha256 / KTT_SFPI_SHA256"
            )
        files = unpack(archive, staging, suffix)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        manifest = {"source": source, "sha256": actual, "time": stamp, "files": files}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        _replace(staging, target)
    finally:
        archive.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:
            with contextlib.suppress(OSError):  # only empty folders go, so only when the fetch failed
                folder.rmdir()
    install = Install(name, target, source, actual, stamp, files)
    return FetchResult(install, fetched=True, verified=expected is not None)


def _replace(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an old ``target`` is removed only once the new one is in place."""
    if not target.exists():
        staging.rename(target)
        return
    trash = Path(tempfile.mkdtemp(prefix=f".old-{target.name}-", dir=target.parent))
    try:
        target.rename(trash / target.name)
        try:
            staging.rename(target)
        except OSError:
            (trash / target.name).rename(target)
            raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)
