"""The own programs' kernels compiled by TT-Metal 0.81.1's own JIT on a mocked P150 (see kernel_check.py).

Every program variant the op library builds is launched through ``ttnn.generic_op`` with the ttnn backend's
``ProgramDescriptor`` (so TT-Metal's host-side checks run: CB placement, core ranges, runtime-argument limits); each
compiler command the JIT issues is replayed with the host's clang (riscv32, syntax only). TT-NN's own unary kernels
go through the same check as the baseline that shows it can pass. Errors name the kernel, the file and the line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import kernel_check as kc
import mock_p150
import program_variants as pv
import pytest
import sfpi_stand_in

from kohakutt import hal
from kohakutt.kernels.programs import SOURCE_DIR

REPO = mock_p150.REPO


@pytest.fixture(scope="module")
def checked() -> dict:
    try:
        mock = mock_p150.prepare(REPO / "build" / "ttnn-mock" / "record", record_commands=True)
        system = kc.host_toolchain()
    except (mock_p150.MockUnavailable, kc.CheckUnavailable) as e:
        pytest.skip(str(e))
    assert system
    t0 = time.monotonic()
    dev = hal.open_device(0)
    try:
        variants = [pv.describe(n, p, b) for n, p, b in pv.variants(dev)]
    finally:
        dev.close()
    res = mock.run([str(Path(__file__).parent / "generic_op_driver.py"), "--baseline"], input=json.dumps(variants))
    assert res.returncode == 0, f"the generic_op driver failed:\n{res.stderr[-3000:]}"
    launched = json.loads(res.stdout.strip().splitlines()[-1])["results"]
    tt_metal = Path(mock.root, "tt_metal").resolve()
    sfpi = sfpi_stand_in.write(REPO / "build" / "kernel-check" / "sfpi", tt_metal)
    replays = kc.replay(mock.commands(), sfpi, REPO / "build" / "kernel-check" / "cache", jobs=2)
    return {"launched": launched, "replays": replays, "seconds": time.monotonic() - t0, "variants": variants}


def test_every_variant_passes_ttnn_host_checks_up_to_the_kernel_build(checked):
    names = [v["name"] for v in checked["variants"]]
    assert len(names) >= 16
    bad = [f"{r['name']}: {r['error']}" for r in checked["launched"] if not r["reached_build"]]
    assert not bad, "variants that TT-NN / TT-Metal refused before the kernel build:\n" + "\n".join(bad)


def test_ttnn_own_kernels_pass_the_check(checked):
    base = next(r for r in checked["launched"] if r["name"] == "ttnn_baseline")
    own = {str(Path(f).resolve()) for f in base["files"]}
    mine = [r for r in checked["replays"] if r.kernel.split("/")[0] in {Path(f).stem for f in base["files"]}]
    assert len(mine) == 5, "the baseline compiles a reader, a writer and three TRISCs"
    assert not kc.report(mine, {r.kernel: own for r in mine})


def test_the_own_programs_compile_with_zero_errors(checked):
    own = {str(p.resolve()) for p in SOURCE_DIR.rglob("*") if p.suffix in (".cpp", ".h")}
    errors = sorted(set(kc.report(checked["replays"], {r.kernel: own for r in checked["replays"]})))
    assert not errors, f"{len(errors)} errors in the programs' kernels:\n" + "\n".join(errors[:40])
    programs = {Path(str(k["path"])).parent.name for v in checked["variants"] for k in v["kernels"]}
    assert {"conv2d", "flash_attention", "layer_norm", "bias_gelu", "glu", "rotary_embedding"} <= programs


def test_the_check_finds_an_error_and_names_kernel_file_and_line(tmp_path):
    """A kernel with a misspelled call: the check names it (the check is not blind)."""
    try:
        system = kc.host_toolchain()
    except kc.CheckUnavailable as e:
        pytest.skip(str(e))
    src = (SOURCE_DIR / "shared" / "tile_writer.cpp").read_text().replace("cb_pop_front(", "cb_pop_frnt(")
    bad = tmp_path / "tile_writer.cpp"
    bad.write_text(src)
    res = kc.parse(
        __import__("subprocess")
        .run(
            [kc.CLANG, "--target=riscv32-unknown-elf", "-fsyntax-only", "-x", "c++", "-std=c++17", str(bad), *system],
            capture_output=True,
            text=True,
        )
        .stderr
    )
    assert res and any(d.file == str(bad) for d in res)
    assert all(d.line > 0 for d in res)
