"""The real backend's contract with TT-NN 0.81.1, checked without a card.

The names and keywords in ``ttnn_backend.TTNN_NAMES`` / ``TTNN_SIGNATURES`` are checked in the TT-NN venv's Python
(``scripts/ttnn_venv.sh`` makes it; ``KTT_TTNN_PYTHON`` points at another) by ``ttnn_probe.py``. The host half of
buffer transfers and program descriptors is run there too, against TT-NN's own objects, with a mock cluster
descriptor standing in for a P150. Without that Python the contract tests skip and say how to get it.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
from ttnn_env import MOCK_P150, NO_TTNN, ROOT, find_ttnn_python, ttnn_env

from kohakutt.errors import BackendUnavailable, FormatError, ProgramError
from kohakutt.hal.backends import ttnn_backend as tb
from kohakutt.hal.layout import Format, nbytes

PROBE = Path(__file__).with_name("ttnn_probe.py")
WRITER_FILE = (ROOT / "kohakutt" / "kernels" / "programs" / "shared" / "tile_writer.cpp").resolve()

# Calls that are harmless on a machine without a card: the binding takes the keywords, then finds no chip.
BIND_PROBES = {
    "open_device": {"device_id": 0, "l1_small_size": tb.L1_SMALL_SIZE, "trace_region_size": 1 << 20,
                    "num_command_queues": tb.NUM_COMMAND_QUEUES},
}  # fmt: skip


def _load_probe() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("ttnn_probe", PROBE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


probe = _load_probe()


@pytest.fixture(scope="module")
def ttnn_python() -> Path:
    path = find_ttnn_python()
    if path is None:
        pytest.skip(NO_TTNN)
    return path


def run_probe(python: Path, request: dict) -> dict:
    res = subprocess.run([str(python), str(PROBE)], input=json.dumps(request), capture_output=True, text=True,
                         env=ttnn_env(), timeout=300)  # fmt: skip
    assert res.returncode == 0, f"ttnn_probe.py failed:\n{res.stderr[-3000:]}"
    return json.loads(res.stdout)


def declared_contract() -> tuple[list[str], dict[str, list[str]]]:
    """The backend's TT-NN names and keywords plus every op family module's (``TTNN_NAMES`` / ``TTNN_SIGNATURES``
    in each module of ``kohakutt.kernels.families.MODULES``), keywords of one callable united."""
    import kohakutt.kernels.families as families
    from kohakutt.mesh import ttnn_mesh

    modules = [tb, ttnn_mesh, *families.MODULES]
    names: dict[str, None] = {}
    signatures: dict[str, list[str]] = {}
    for m in modules:
        names.update(dict.fromkeys(getattr(m, "TTNN_NAMES", ())))
        for k, v in getattr(m, "TTNN_SIGNATURES", {}).items():
            signatures[k] = list(dict.fromkeys([*signatures.get(k, []), *v]))
    return list(names), signatures


@pytest.fixture(scope="module")
def contract(ttnn_python: Path) -> dict:
    names, signatures = declared_contract()
    return run_probe(ttnn_python, {"names": names, "signatures": signatures, "bind_probes": BIND_PROBES})


def test_every_op_family_declares_its_ttnn_names():
    names, _ = declared_contract()
    from kohakutt.kernels import fused
    from kohakutt.mesh import ttnn_mesh

    assert set(fused.TTNN_NAMES) <= set(names) and "experimental.rotary_embedding_llama" in names
    assert set(ttnn_mesh.TTNN_NAMES) <= set(names) and "set_fabric_config" in names


# ------------------------------------------------------------------------------------------- the contract itself
def test_the_installed_ttnn_is_the_checked_version(contract):
    assert contract["version"] == tb.TTNN_VERSION, (
        f"the ttnn venv has ttnn {contract['version']}, the backend is checked against {tb.TTNN_VERSION}: "
        "rerun scripts/ttnn_venv.sh, or update TTNN_VERSION after checking the names"
    )


def test_every_ttnn_name_resolves(contract):
    assert not contract["missing"], "TT-NN names the backend relies on are missing:\n" + "\n".join(
        f"  ttnn.{k}: {v}" for k, v in contract["missing"].items()
    )


def test_every_keyword_is_accepted(contract):
    bad = {k: v for k, v in contract["signatures"].items() if not v["ok"]}
    assert not bad, "keywords the installed ttnn does not take:\n" + "\n".join(
        f"  ttnn.{k}: {v['rejected']} (read from {', '.join(v['sources']) or 'nothing'})" for k, v in bad.items()
    )


def test_keywords_only_documented_are_settled_by_a_bind_probe(contract):
    probes = contract["bind_probes"]
    for path, v in contract["signatures"].items():
        if not v["doc_only"]:
            continue
        assert path in probes, (
            f"ttnn.{path} declares no {v['doc_only']} in its signature (only its docstring names them): "
            "add a bind probe in BIND_PROBES or check by hand"
        )
        p = probes[path]
        if p["ran"]:
            assert p["bound"], f"ttnn.{path} refused {v['doc_only']}: {p['error']}"


def test_open_device_binds_our_keywords_and_fails_for_want_of_a_card(contract):
    p = contract["bind_probes"]["open_device"]
    if not p["ran"]:
        pytest.skip(p["why"])
    assert p["bound"], p["error"]
    assert "num_chips" in p["error"] or "chip" in p["error"].lower(), p["error"]


def test_the_contract_reports_what_is_wrong(ttnn_python):
    got = run_probe(ttnn_python, {
        "names": ["open_device", "no_such_function", "MathFidelity.HiFi5"],
        "signatures": {"open_device": ["device_id", "no_such_keyword"], "no_such_function": ["x"],
                       "Tensor.cpu": ["blocking", "queue_id"]},
        "bind_probes": {"open_device": {"device_id": 0, "no_such_keyword": 1}},
    })  # fmt: skip
    assert set(got["missing"]) == {"no_such_function", "MathFidelity.HiFi5"}
    assert got["signatures"]["open_device"]["rejected"] == ["no_such_keyword"]
    assert got["signatures"]["no_such_function"]["ok"] is False
    assert got["signatures"]["Tensor.cpu"]["rejected"] == ["queue_id"]  # it is cq_id in 0.81.1
    p = got["bind_probes"]["open_device"]
    assert not p["ran"] or p["bound"] is False


# ------------------------------------------------------------------- host transfers and descriptors, in TT-NN
HOST_SCRIPT = textwrap.dedent("""
    import base64, json, os, sys, types
    import numpy as np
    from kohakutt.hal.backends import ttnn_backend as tb
    from kohakutt.hal.backends.ttnn_program import program_descriptor
    from kohakutt.hal.layout import Format
    ttnn = tb.import_ttnn()
    cases = json.load(sys.stdin)
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    out = {"buffers": [], "program": None}
    for c in cases["buffers"]:
        fmt = Format(c["fmt"])
        vals = np.frombuffer(base64.b64decode(c["values"]), dtype=c["dtype"]).reshape(c["shape"]).copy()
        layout = ttnn.TILE_LAYOUT if c["layout"] == "tile" else ttnn.ROW_MAJOR_LAYOUT
        theirs = tb.host_bytes(ttnn, ttnn.Tensor(tensor=vals, data_type=getattr(ttnn, fmt.value), device=None,
                                                 layout=layout)).copy()
        buf = types.SimpleNamespace(**c["buffer"])
        geo = tb.geometry(buf)
        pattern = np.arange(geo.nbytes, dtype=np.uint32).astype(np.uint8)  # any bytes, not only valid values
        ours = tb.host_bytes(ttnn, tb.host_tensor_from_bytes(ttnn, geo, pattern)).copy()
        out["buffers"].append({"ttnn": base64.b64encode(theirs.tobytes()).decode(), "geometry_nbytes": geo.nbytes,
                               "round_trip": bool(np.array_equal(ours, pattern))})
    from pathlib import Path
    from kohakutt.hal.program import CircularBuffer, CoreRange, Kernel, Program, Semaphore
    src = "void kernel_main() {}"
    writer_file = Path(cases["writer_file"])
    prog = Program("probe", kernels=[
        Kernel("reader", src, [(0, 0), CoreRange((1, 0), (2, 1))], compile_time_args=[1, 2], defines={"N": 4}),
        Kernel("compute", src, (0, 0), compile_time_args=[3], math_fidelity="HiFi2", fp32_dest_acc_en=True,
               math_approx_mode=True, dst_full_sync_en=True),
        Kernel("writer", writer_file, (3, 3), common_runtime_args=[5]),
    ], cbs=[CircularBuffer(0, "bfloat16", 2048, 2, (0, 0)), CircularBuffer(16, "bfloat8_b", 1088, 4, [(0, 0), (3, 3)])],
       semaphores=[Semaphore(0, CoreRange((0, 0), (1, 0)), 1)],
       runtime_args=lambda bufs, rt: {"reader": [bufs[0].address, bufs[0].num_pages, rt["n"]],
                                      "writer": {(3, 3): [bufs[1].address]}})
    fake = [types.SimpleNamespace(num_pages=3, address=64), types.SimpleNamespace(num_pages=1, address=128)]
    pd = program_descriptor(ttnn, prog, fake, [0x1000, 0x2000], {"n": 9})

    def ranges(crs):
        return [[r.start.x, r.start.y, r.end.x, r.end.y] for r in crs.ranges()]

    def kernel(k):
        cores = [(x, y) for sx, sy, ex, ey in ranges(k.core_ranges) for y in range(sy, ey + 1)
                 for x in range(sx, ex + 1)]
        out = {"source_type": str(k.source_type), "source": k.kernel_source, "cores": ranges(k.core_ranges),
               "ct": list(k.compile_time_args), "defines": [list(d) for d in k.defines],
               "rt": {f"{x},{y}": list(k.runtime_args[x][y]) for x, y in cores},
               "common": list(k.common_runtime_args), "config": type(k.config).__name__}
        if out["config"] == "ComputeConfigDescriptor":
            c = k.config
            out |= {"fidelity": str(c.math_fidelity), "approx": c.math_approx_mode, "fp32": c.fp32_dest_acc_en,
                    "full_sync": c.dst_full_sync_en}
        return out

    out["program"] = {
        "kernels": [kernel(k) for k in pd.kernels],
        "cbs": [[c.total_size, ranges(c.core_ranges), [[f.buffer_index, f.page_size] for f in c.format_descriptors]]
                for c in pd.cbs],
        "semaphores": [[x.id, x.initial_value, ranges(x.core_ranges)] for x in pd.semaphores],
    }
    formats = {}  # every CB format the HAL has, as TT-NN's CBFormatDescriptor takes it
    for fmt in Format:
        try:
            one = Program("f", [Kernel("reader", src, (0, 0))], cbs=[CircularBuffer(1, fmt, fmt.tile_bytes, 1, (0, 0))])
            formats[fmt.value] = program_descriptor(ttnn, one, [], [], {}).cbs[0].format_descriptors[0].page_size
        except Exception as e:
            formats[fmt.value] = f"{type(e).__name__}: {e}"
    out["formats"] = formats
    sys.stdout.flush()
    os.dup2(answer_fd, 1)
    print(json.dumps(out))
""")


def _case(shape, fmt, layout, rng, page_size=None):
    f = Format(fmt)
    if f.is_float:
        vals = (rng.standard_normal(shape) * 3).astype(np.float32)
    else:
        vals = rng.integers(0, 1000 if f is not Format.UINT8 else 256, size=shape).astype(np.dtype(fmt))
    n = nbytes(shape, fmt, layout)
    page = page_size or (f.tile_bytes if layout == "tile" else max(1, shape[-1] * f.itemsize))
    buffer = {"fmt": fmt, "layout": layout, "kind": "dram", "nbytes": n, "page_size": page, "shape": list(shape)}
    return vals, {"fmt": fmt, "layout": layout, "shape": list(shape), "dtype": vals.dtype.str,
                  "values": base64.b64encode(vals.tobytes()).decode(), "buffer": buffer}  # fmt: skip


@pytest.fixture(scope="module")
def host_run(ttnn_python: Path, tmp_path_factory) -> tuple[list, dict]:
    mock = tmp_path_factory.mktemp("ttnn") / "p150.yaml"
    mock.write_text(MOCK_P150)
    rng = np.random.default_rng(7)
    specs = [
        ((64, 64), "bfloat16", "tile"), ((40,), "float32", "tile"), ((3, 33, 70), "bfloat8_b", "tile"),
        ((2, 64, 64), "bfloat4_b", "tile"), ((64, 32), "uint32", "tile"), ((33, 31), "int32", "tile"),
        ((5, 7), "int32", "row_major"), ((6, 10), "bfloat16", "row_major"), ((4, 9), "uint8", "row_major"),
    ]  # fmt: skip
    cases = [_case(*s, rng) for s in specs]
    env = ttnn_env(TT_METAL_MOCK_CLUSTER_DESC_PATH=str(mock), PYTHONPATH=str(ROOT))
    check = subprocess.run([str(ttnn_python), "-c", "import kohakutt.hal.backends.ttnn_backend"], env=env,
                           capture_output=True, text=True)  # fmt: skip
    if check.returncode != 0:
        pytest.skip(f"kohakutt does not import under the ttnn venv's Python: {check.stderr.strip().splitlines()[-1]}")
    request = {"buffers": [c for _, c in cases], "writer_file": str(WRITER_FILE)}
    res = subprocess.run([str(ttnn_python), "-c", HOST_SCRIPT], input=json.dumps(request),
                         capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert res.returncode == 0, f"host script failed:\n{res.stderr[-3000:]}"
    return cases, json.loads(res.stdout)


def test_buffer_bytes_go_to_and_from_ttnn_host_tensors_unchanged(host_run):
    cases, out = host_run
    for (_, c), got in zip(cases, out["buffers"]):
        what = f"{c['fmt']} {c['layout']} {tuple(c['shape'])}"
        assert got["geometry_nbytes"] == c["buffer"]["nbytes"], f"{what}: TT-NN tensor size differs from the HAL's"
        assert got["round_trip"], f"{what}: bytes written into a TT-NN host tensor did not come back unchanged"


def test_ttnn_lays_out_tensors_as_the_hal_does(host_run):
    from kohakutt.hal import formats

    cases, out = host_run
    for (vals, c), got in zip(cases, out["buffers"]):
        theirs = np.frombuffer(base64.b64decode(got["ttnn"]), dtype=np.uint8)
        if c["layout"] == "tile":
            ours = formats.pack(vals, c["fmt"])
        elif c["fmt"] == "bfloat16":
            ours = formats.to_bfloat16(vals).view(np.uint8).reshape(-1)
        else:
            ours = vals.view(np.uint8).reshape(-1)
        assert theirs.size == ours.size, f"{c['fmt']} {c['layout']} {c['shape']}: {theirs.size} vs {ours.size} bytes"
        diff = np.flatnonzero(theirs != ours)
        assert diff.size == 0, f"{c['fmt']} {c['layout']} {c['shape']}: first differing byte at {diff[:1]}"


def test_programs_become_ttnn_program_descriptors(host_run):
    """Every ProgramDescriptor field the ttnn backend sets, read back from TT-NN's own objects: a kernel given as a
    file goes as FILE_PATH with its path, one given as text as SOURCE_CODE."""
    p = host_run[1]["program"]
    reader, compute, writer = p["kernels"]
    assert [k["config"] for k in p["kernels"]] == ["ReaderConfigDescriptor", "ComputeConfigDescriptor",
                                                   "WriterConfigDescriptor"]  # fmt: skip
    assert reader["source_type"].endswith("SOURCE_CODE") and reader["source"] == "void kernel_main() {}"
    assert writer["source_type"].endswith("FILE_PATH") and writer["source"] == str(WRITER_FILE)
    assert reader["cores"] == [[0, 0, 0, 0], [1, 0, 2, 1]] and writer["cores"] == [[3, 3, 3, 3]]
    assert (reader["ct"], reader["defines"], compute["ct"]) == ([1, 2], [["N", "4"]], [3])
    assert set(reader["rt"]) == {"0,0", "1,0", "2,0", "1,1", "2,1"}  # every core of the kernel, here the same args
    assert all(v == [0x1000, 3, 9] for v in reader["rt"].values()), "runtime args must see each buffer's card address"
    assert writer["rt"] == {"3,3": [0x2000]} and writer["common"] == [5] and compute["rt"] == {"0,0": []}
    assert compute["fidelity"].endswith("HiFi2") and (compute["approx"], compute["fp32"], compute["full_sync"]) == (
        True, True, True)  # fmt: skip
    assert p["cbs"] == [[2 * 2048, [[0, 0, 0, 0]], [[0, 2048]]], [4 * 1088, [[0, 0, 0, 0], [3, 3, 3, 3]], [[16, 1088]]]]
    assert p["semaphores"] == [[0, 1, [[0, 0, 1, 0]]]]


def test_every_cb_format_of_the_hal_is_a_ttnn_data_format(host_run):
    formats = host_run[1]["formats"]
    assert set(formats) == {f.value for f in Format}
    bad = {f: v for f, v in formats.items() if v != Format(f).tile_bytes}
    assert not bad, f"CB formats TT-NN's CBFormatDescriptor does not take: {bad}"


# ------------------------------------------------------------------------------- without ttnn, in this Python
def test_signature_lines_parse_like_nanobind_writes_them():
    sig = probe.parse_signature(
        "def KernelDescriptor(self, kernel_source: str, source_type: T = SourceType.FILE_PATH, core_ranges: C, "
        "compile_time_args: V = V([]), named: Sequence[tuple[str, int]] = [], *, blaze: dict[str, int] = {}) -> None"
    )
    assert sig == {"names": ["kernel_source", "source_type", "core_ranges", "compile_time_args", "named", "blaze"],
                   "var_kw": False}  # fmt: skip
    assert probe.parse_signature("open_device(\\*, device_id: int, l1_small_size: int)")["names"] == [
        "device_id", "l1_small_size"]  # fmt: skip
    assert probe.parse_signature("CoreCoord(self, arg0: int, arg1: int, /) -> None")["names"] == []
    assert probe.parse_signature("f(*args, **kwargs)") == {"names": [], "var_kw": True}
    with pytest.raises(ValueError):
        probe.parse_signature("not a signature")


def test_keywords_are_checked_per_overload_and_against_the_docstring():
    def f(a, *, b=1):
        """Args:
        a (int): first
        c (int, optional): only documented
        """

    assert probe.check_signature(f, ["a", "b"])["ok"]
    r = probe.check_signature(f, ["a", "c", "zz"])
    assert (r["ok"], r["rejected"], r["doc_only"]) == (False, ["zz"], ["c"])

    class Bound:  # what a nanobind overload set looks like
        __nb_signature__ = (
            ("def g(x: int, y: int) -> None", None, None),
            ("def g(x: int, z: int) -> None", None, None),
        )

        def __call__(self, *a, **k): ...

    assert probe.check_signature(Bound(), ["x", "z"])["ok"]
    assert probe.check_signature(Bound(), ["y", "z"])["rejected"] == ["z"]  # never together in one overload


def test_without_ttnn_the_backend_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "ttnn", None)  # an import of ttnn now fails as if it were not installed
    ok, why = tb.TTNNBackend.available()
    assert not ok and "ttnn is not installed for this Python" in why and "3.12" in why
    with pytest.raises(BackendUnavailable, match="not installed"):
        tb.TTNNBackend(0).open()
    with pytest.raises(BackendUnavailable, match="not installed"):
        tb.TTNNBackend.device_count()


def test_a_card_that_does_not_answer_is_reported_with_ttnns_words(monkeypatch):
    def no_chips() -> int:
        raise RuntimeError("TT_FATAL @ tt_cluster.cpp:129: num_chips > 0\ninfo:\nNo chips detected\nbacktrace:\n --- x")

    fake = types.SimpleNamespace(GetNumAvailableDevices=no_chips, get_arch_name=lambda: "blackhole")
    monkeypatch.setitem(sys.modules, "ttnn", fake)
    ok, why = tb.TTNNBackend.available()
    assert not ok and "no card answered" in why and "num_chips > 0; No chips detected" in why
    assert "backtrace" not in why and "---" not in why


def _buf(**kw):
    base = {"fmt": "uint8", "layout": "row_major", "kind": "dram", "nbytes": 0, "page_size": 2048, "shape": None}
    return types.SimpleNamespace(**(base | kw))


def test_buffers_map_to_tensors_page_for_page():
    assert tb.geometry(_buf(nbytes=5000)).shape == (3, 2048)  # raw bytes: a row per page, tail padded
    assert tb.geometry(_buf(fmt="float32", nbytes=24, page_size=12, shape=(2, 3))).shape == (2, 3)
    assert tb.geometry(_buf(fmt="float32", nbytes=24, page_size=8, shape=(2, 3))).shape == (3, 2)
    assert tb.geometry(_buf(fmt="int32", nbytes=4, page_size=2048, shape=())).shape == (1, 512)
    tile = tb.geometry(_buf(fmt="bfloat8_b", layout="tile", nbytes=2 * 1088, page_size=1088, shape=(40,)))
    assert (tile.shape, tile.nbytes) == ((40,), 2 * 1088)
    assert tb.geometry(_buf(fmt="bfloat16", layout="tile", nbytes=3 * 2048, page_size=2048)).shape == (32, 96)
    assert tb.geometry(_buf(fmt="bfloat16", layout="tile", nbytes=2048, page_size=2048, shape=())).shape == (1, 1)
    with pytest.raises(FormatError, match="one bfloat16 tile"):
        tb.geometry(_buf(fmt="bfloat16", layout="tile", nbytes=4096, page_size=4096, shape=(32, 64)))


def test_a_kernel_without_metalium_source_cannot_go_to_a_card():
    from kohakutt.hal.backends.ttnn_program import CardBuffer, kernel_descriptor
    from kohakutt.hal.program import Kernel, Program

    k = Kernel("reader", "", (0, 0), sim=lambda api: None)
    with pytest.raises(ProgramError, match="no Metalium C\\+\\+ source"):
        kernel_descriptor(types.SimpleNamespace(), Program("p", [k]), k, {})
    b = CardBuffer(types.SimpleNamespace(address=64, nbytes=4096), 0x9000)
    assert (b.address, b.nbytes) == (0x9000, 4096)
