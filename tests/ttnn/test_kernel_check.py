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

from kohakutt import hal, sfpi
from kohakutt.kernels.programs import SOURCE_DIR

REPO = mock_p150.REPO
# Errors planted in copies of one variant's kernels: (program folder, file, text, planted text, what the error says).
PLANTED = (
    ("bias_gelu", "compute.cpp", "add_tiles(cb_x, cb_bias, 0, 0, 0);", "add_tile(cb_x, cb_bias, 0, 0, 0);", "add_tile"),
    ("shared", "tile_writer.cpp", "cb_pop_front(cb_out, 1);", "cb_pop_front(cb_out);", "cb_pop_front"),
)


def plant(variants: list[dict], into: Path) -> tuple[dict, list[dict]]:
    """A copy of the bias_gelu variant whose compute kernel misspells a call and whose writer calls one with an
    argument missing, from copies of their files under ``into``; and where each error is (file, line, word)."""
    v = json.loads(json.dumps(next(x for x in variants if x["name"] == "bias_gelu")))
    v["name"] = "planted_bias_gelu"
    where = []
    for folder, name, text, bad, word in PLANTED:
        src = (SOURCE_DIR / folder / name).read_text()
        assert src.count(text) == 1, f"{folder}/{name} no longer has {text!r}: choose another line to plant in"
        copy = into / folder / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(src.replace(text, bad))
        line = src[: src.index(text)].count("\n") + 1
        for k in v["kernels"]:
            if k["path"] and Path(k["path"]).resolve() == (SOURCE_DIR / folder / name).resolve():
                k["path"], k["source"] = str(copy), copy.read_text()
        where.append({"file": str(copy.resolve()), "line": line, "word": word})
    return v, where


DSL_PLANT = ("mul_unary_tile(0, s);", "mul_unary_tile(0);", 'c.op("mul_scalar", 0, value=s)')


def plant_dsl(variants: list[dict]) -> tuple[dict, dict]:
    """A copy of the DSL scaled_add variant whose generated compute kernel calls mul_unary_tile with an argument
    missing, and where the error must be reported: the DSL line of c.op("mul_scalar", ...) in the example."""
    v = json.loads(json.dumps(next(x for x in variants if x["name"] == "dsl_scaled_add")))
    v["name"] = "planted_dsl_scaled_add"
    text, bad, dsl = DSL_PLANT
    k = next(k for k in v["kernels"] if k["kind"] == "compute")
    assert k["source"].count(text) == 1, f"the generated compute kernel no longer has {text!r}"
    k["source"] = k["source"].replace(text, bad)
    example = REPO / "examples" / "kernels" / "dsl_metal" / "scaled_add_km.py"
    line = next(i for i, ln in enumerate(example.read_text().splitlines(), 1) if dsl in ln)
    return v, {"file": str(example.resolve()), "line": line, "word": "mul_unary_tile"}


def dsl_diagnostics(replays: list) -> list[str]:
    """The counted diagnostics of the DSL's kernels (TT-Metal's SOURCE_CODE kernels): errors and deprecation
    warnings in their own text (the DSL .py lines their #line directives name, and what the JIT wrote in the
    kernel's folder), and fatal errors anywhere."""
    out = []
    for r in replays:
        if not r.kernel.startswith("Kernel_Source_Code/"):
            continue
        folder = str(Path(r.cwd).parent.resolve())
        for d in r.diagnostics:
            f = str((Path(r.cwd) / d.file).resolve())
            mine = f.endswith(".py") or f.startswith(folder)
            if d.severity == "fatal error" or (mine and (d.severity == "error" or "deprecated" in d.message)):
                out.append(f"{r.kernel} [{r.processor}] {f}:{d.line}: {d.severity}: {d.message}")
    return out


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
    planted, where = plant(variants, REPO / "build" / "kernel-check" / "planted")
    planted_dsl, dsl_where = plant_dsl(variants)
    res = mock.run([str(Path(__file__).parent / "generic_op_driver.py"), "--baseline"],
                   input=json.dumps([*variants, planted, planted_dsl]))  # fmt: skip
    assert res.returncode == 0, f"the generic_op driver failed:\n{res.stderr[-3000:]}"
    launched = json.loads(res.stdout.strip().splitlines()[-1])["results"]
    tt_metal = Path(mock.root, "tt_metal").resolve()
    sfpi = sfpi_stand_in.write(REPO / "build" / "kernel-check" / "sfpi", tt_metal)
    replays = kc.replay(mock.commands(), sfpi, REPO / "build" / "kernel-check" / "cache", jobs=2)
    return {"launched": launched, "replays": replays, "seconds": time.monotonic() - t0, "variants": variants,
            "planted": where, "planted_dsl": dsl_where}  # fmt: skip


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
    examples = REPO / "examples" / "kernels"  # the custom-kernel examples' kernels are held to the same check
    own = {str(p.resolve()) for d in (SOURCE_DIR, examples) for p in d.rglob("*") if p.suffix in (".cpp", ".h")}
    errors = sorted(set(kc.report(checked["replays"], {r.kernel: own for r in checked["replays"]})))
    assert not errors, f"{len(errors)} errors in the programs' kernels:\n" + "\n".join(errors[:40])
    programs = {Path(str(k["path"])).parent.name for v in checked["variants"] for k in v["kernels"]}
    assert {"conv2d", "flash_attention", "layer_norm", "bias_gelu", "glu", "rotary_embedding"} <= programs
    assert {"gated_gelu", "kernels"} <= programs  # examples/kernels/python/gated_gelu, cpp_extension/kernels


def test_the_check_finds_planted_errors_and_names_kernel_file_and_line(checked):
    """Errors planted in copies of a variant's kernels (a misspelled call, a call with an argument missing), launched
    through generic_op like the rest: the check reports each at its file and line, for the kernel and processor it
    was built for (all three TRISCs for the compute kernel), so it is not blind."""
    for p in checked["planted"]:
        lines = kc.report(checked["replays"], {r.kernel: {p["file"]} for r in checked["replays"]})
        hits = [ln for ln in lines if f"{p['file']}:{p['line']}:" in ln and ": error: " in ln and p["word"] in ln]
        assert hits, f"the check missed the error planted at {p['file']}:{p['line']}; it reported:\n" + "\n".join(lines)
        procs = {ln.split(" [", 1)[1].split("]", 1)[0] for ln in hits}
        kernel = Path(p["file"]).stem
        assert procs == ({"trisc0", "trisc1", "trisc2"} if kernel == "compute" else {"brisc"}), hits
        assert all(ln.startswith(f"{kernel}/") for ln in hits), hits


def test_the_dsl_programs_compile_with_zero_errors(checked):
    """The kernel DSL's generated kernels (the examples, and between the every-op programs every c.op), launched as
    SOURCE_CODE kernels through generic_op: zero errors in their own text; the planted error (a call with an
    argument missing) is reported at the DSL's Python line, for every TRISC, so the check is not blind."""
    names = {v["name"] for v in checked["variants"] if v["name"].startswith("dsl_")}
    assert {"dsl_scaled_add", "dsl_rms_norm", "dsl_every_unary_op", "dsl_every_binary_op", "dsl_every_fpu_op",
            "dsl_every_reduce_op"} <= names  # fmt: skip
    p = checked["planted_dsl"]
    lines = dsl_diagnostics(checked["replays"])
    planted = [ln for ln in lines if f"{p['file']}:{p['line']}: error" in ln and p["word"] in ln]
    assert {ln.split(" [", 1)[1].split("]", 1)[0] for ln in planted} == {"trisc0", "trisc1", "trisc2"}, lines
    kernels = {r.kernel for r in checked["replays"] if r.kernel.startswith("Kernel_Source_Code/")}
    assert len(kernels) >= 3 * len(names)  # a reader, a writer and a compute kernel per variant (and the planted)
    errors = sorted({ln for ln in lines if ln not in planted and not ln.startswith(planted[0].split(" [")[0])})
    assert not errors, f"{len(errors)} errors in the DSL's kernels:\n" + "\n".join(errors[:40])


# ------------------------------------------------------------------------------------------ the real toolchain
def sfpi_root(install: sfpi.Install | None) -> Path | None:
    """The folder TT-Metal takes as ``runtime/sfpi`` (holding ``compiler/bin/riscv-tt-elf-g++``) in an sfpi install
    ``ktt sfpi`` put in the cache, or None when it has no such compiler."""
    compiler = install.compiler if install is not None else None
    if compiler is None:
        return None
    for root in compiler.parents:
        if (root / "compiler" / "bin" / "riscv-tt-elf-g++").is_file():
            return root
    return None


def test_sfpi_root_finds_tt_metals_compiler_in_an_install(tmp_path):
    inst = sfpi.Install("x", tmp_path, "file", "0" * 64, "now", ["sfpi/compiler/bin/riscv-tt-elf-g++"])
    assert sfpi_root(inst) is None  # listed but not there
    cc = tmp_path / "sfpi" / "compiler" / "bin" / "riscv-tt-elf-g++"
    cc.parent.mkdir(parents=True)
    cc.write_text("")
    assert sfpi_root(inst) == tmp_path / "sfpi"
    assert sfpi_root(None) is None


def test_every_variant_compiles_and_links_with_the_real_toolchain():
    """With sfpi installed (``ktt sfpi``), TT-Metal's JIT compiles and links every variant's kernels (and the
    firmware) with the real RISC-V toolchain on the mocked P150, and generic_op runs each to its end."""
    root = sfpi_root(sfpi.current())
    if root is None:
        pytest.skip("no RISC-V kernel compiler in the cache: `ktt sfpi URL_OR_FILE` installs sfpi (7.89.0 for TT-Metal "
                    "0.81.1: tt_metal/sfpi-version in the ttnn wheel); with it this test compiles and links every "
                    "program variant for real")  # fmt: skip
    try:
        mock = mock_p150.prepare(REPO / "build" / "ttnn-mock" / "real", sfpi=root)
    except mock_p150.MockUnavailable as e:
        pytest.skip(str(e))
    dev = hal.open_device(0)
    try:
        variants = [pv.describe(n, p, b) for n, p, b in pv.variants(dev)]
    finally:
        dev.close()
    res = mock.run([str(Path(__file__).parent / "generic_op_driver.py"), "--baseline"], input=json.dumps(variants),
                   timeout=3600)  # fmt: skip
    assert res.returncode == 0, f"the generic_op driver failed:\n{res.stderr[-3000:]}"
    launched = json.loads(res.stdout.strip().splitlines()[-1])["results"]
    bad = [f"{r['name']}: {r['error']}" for r in launched if not r["ran"]]
    assert not bad, "variants the real toolchain did not build (or that did not run on the mock):\n" + "\n".join(bad)
    assert len(launched) == len(variants) + 1
