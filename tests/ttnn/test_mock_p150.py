"""The mocked P150 itself: it opens in the TT-NN venv, reports a P150's grid, stops ops at the kernel build (and
only there), and records the JIT's command lines when asked."""

from __future__ import annotations

import json

import mock_p150 as mp
import pytest
from mock_p150 import REPO, MockUnavailable, prepare

SCRIPT = """
import json, mock_p150, ttnn
dev = mock_p150.open_device()
g, dram = dev.compute_with_storage_grid_size(), dev.dram_grid_size()
spec = lambda shape: ttnn.TensorSpec(shape=ttnn.Shape(shape), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                                     buffer_type=ttnn.BufferType.DRAM)
a = ttnn.allocate_tensor_on_device(tensor_spec=spec([64, 64]), mesh_device=dev)
b = ttnn.allocate_tensor_on_device(tensor_spec=spec([32, 64]), mesh_device=dev)
out = {"grid": [g.x, g.y], "dram": [dram.x, dram.y], "arch": str(dev.arch())}
for name, call in (("add", lambda: ttnn.add(a, a)), ("bad_matmul", lambda: ttnn.matmul(a, b))):
    try:
        call()
        out[name] = {"returned": True}
    except Exception as e:
        out[name] = {"reached_build": mock_p150.reached_build(e), "message": mock_p150.first_lines(e, 8)}
ttnn.close_device(dev)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    try:
        return prepare(REPO / "build" / "ttnn-mock" / "recording", record_commands=True)
    except MockUnavailable as e:
        pytest.skip(str(e))


def test_the_mock_opens_as_a_p150_and_stops_ops_at_the_kernel_build(recording):
    res = recording.run(["-c", SCRIPT])
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    assert tuple(out["grid"]) == mp.COMPUTE_GRID and out["dram"] == [mp.DRAM_BANKS, 1] and "BLACKHOLE" in out["arch"]
    assert out["add"].get("reached_build"), out["add"]
    assert mp.STAND_IN_MARK in out["add"]["message"] and "Failed to generate binaries" in out["add"]["message"]
    bad = out["bad_matmul"]
    assert bad.get("reached_build") is False and "a_shape[-1] == b_shape[-2]" in bad["message"], bad
    cmds = recording.commands()
    assert cmds, "the stand-in recorded no command line"
    assert all("-mcpu=tt-bh" in " ".join(c["argv"]) or "-mcpu=tt-bh-tensix" in " ".join(c["argv"]) for c in cmds)
    assert any(a.endswith((".cc", ".cpp")) and "eltwise_binary" in c["cwd"] for c in cmds for a in c["argv"])
    recording.clear_commands()
    assert recording.commands() == []


def test_a_second_prepare_reuses_the_tree(mock_p150):
    again = prepare(mock_p150.root.parent)
    assert again == mock_p150 and again.firmware_keys
    for key in again.firmware_keys:
        assert (again.root / "tt_metal" / "pre-compiled" / key / "brisc" / "brisc.elf").exists()


def test_the_build_classifier_reads_tt_metals_messages():
    built = ("TT_THROW @ /project/tt_metal/impl/program/program.cpp:419: tt::exception\ninfo:\nFailed to generate "
             "binaries for eltwise_sfpu TT_THROW @ /project/tt_metal/jit_build/build.cpp:149: tt::exception\ninfo:\n"
             "trisc0 build failed. Log: x\nbacktrace:\n --- frame")  # fmt: skip
    assert mp.reached_build(built) and "frame" not in mp.first_lines(built, 9)
    assert not mp.reached_build("TT_FATAL @ /project/ttnn/cpp/ttnn/operations/matmul/device/x.cpp:79: a == b")


def test_without_a_ttnn_python_the_mock_says_how_to_get_one(tmp_path):
    with pytest.raises(MockUnavailable, match=r"ttnn_venv\.sh"):
        prepare(tmp_path, python=tmp_path / "no-python")


COMPLETE_SCRIPT = """
import json, mock_p150, ttnn, numpy as np
dev = mock_p150.open_device()
spec = ttnn.TensorSpec(shape=ttnn.Shape([3, 40, 50]), dtype=ttnn.bfloat16, layout=ttnn.TILE_LAYOUT,
                       buffer_type=ttnn.BufferType.DRAM)
a = ttnn.allocate_tensor_on_device(tensor_spec=spec, mesh_device=dev)
s = ttnn.sum(a, dim=1, keepdim=True)  # fill_pad, then the reduction: two device ops
host = ttnn.exp(a).cpu(blocking=True)
raw = np.from_dlpack(host.host_buffer().get_shard(ttnn.MeshCoordinate([0, 0]))).view(np.uint8)
try:
    ttnn.matmul(a, a)
    bad = ""
except Exception as e:
    bad = mock_p150.first_lines(e)
ttnn.close_device(dev)
print(json.dumps({"sum": [list(s.shape), list(s.padded_shape), str(s.dtype)], "bytes": int(raw.size),
                  "nonzero": int(np.count_nonzero(raw)), "bad": bad}))
"""


def test_a_complete_mock_runs_ops_to_their_end(tmp_path):
    try:
        mock = prepare(REPO / "build" / "ttnn-mock" / "complete", complete=True)
    except MockUnavailable as e:
        pytest.skip(str(e))
    res = mock.run(["-c", COMPLETE_SCRIPT])
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["sum"] == [[3, 1, 50], [3, 32, 64], "DataType.BFLOAT16"]  # the second device op ran too
    assert out["bytes"] == 3 * 2 * 2 * 2048 and out["nonzero"] == 0  # the mock's device memory reads as zeros
    assert "a_shape[-1] == b_shape[-2]" in out["bad"]  # validation still refuses what the card would
    images = list((mock.root.parent / "images").glob("*/brisc.elf"))
    assert images and all(p.read_bytes()[:4] == b"\x7fELF" for p in images)
