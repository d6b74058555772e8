"""The kernels' C++ is formatted by clang-format with the repository's .clang-format (``make format`` applies it).

Covers the own programs' kernels (``kohakutt/kernels/programs``) and the test programs' kernels
(``tests/hal/kernels``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STYLE = REPO / ".clang-format"
KERNEL_DIRS = (
    REPO / "kohakutt" / "kernels" / "programs",
    REPO / "tests" / "hal" / "kernels",
    REPO / "examples" / "kernels",  # the custom-kernel examples
    REPO / "kohakutt" / "include",  # the C++ extension headers
)


def kernel_files() -> list[Path]:
    return sorted(p for d in KERNEL_DIRS for p in d.rglob("*") if p.suffix in (".cpp", ".h"))


@pytest.fixture(scope="module")
def clang_format() -> str:
    exe = shutil.which("clang-format")
    if exe is None:
        pytest.skip("no clang-format on PATH: scripts/setup_env.sh installs it (apt-get install clang-format)")
    return exe


def unformatted(exe: str, files: list[Path]) -> list[str]:
    """The files clang-format would change, each with its first complaint."""
    res = subprocess.run([exe, f"--style=file:{STYLE}", "--dry-run", "--Werror", *map(str, files)],
                         capture_output=True, text=True)  # fmt: skip
    out: dict[str, str] = {}
    for line in res.stderr.splitlines():
        for f in files:
            if line.startswith(f"{f}:"):
                out.setdefault(str(f), line)
    if res.returncode and not out:
        raise AssertionError(f"clang-format failed: {res.stderr[-2000:]}")
    return list(out.values())


def test_kernels_are_clang_formatted(clang_format):
    files = kernel_files()
    assert len(files) >= 20 and any(f.name == "compute.cpp" for f in files)
    bad = unformatted(clang_format, files)
    assert not bad, "kernel sources not clang-formatted (run `make format`):\n" + "\n".join(bad)


def test_the_format_check_finds_a_misformatted_kernel(clang_format, tmp_path):
    src = (KERNEL_DIRS[0] / "shared" / "tile_writer.cpp").read_text()
    bad = tmp_path / "tile_writer.cpp"
    bad.write_text(src.replace("    for (uint32_t t = start;", "  for(uint32_t t=start;"))
    found = unformatted(clang_format, [bad])
    assert found and found[0].startswith(f"{bad}:")
