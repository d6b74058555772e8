"""The HAL's ttnn backend on the mocked P150, in the TT-NN venv's Python (no torch): prints one JSON object.

``python hal_on_mock.py``: open the chip through the HAL (``KTT_BACKEND=ttnn``), allocate and free buffers in DRAM
and L1, move bytes to and from the card, copy on the card, capture an (empty) trace, record and wait for events on
both command queues; report what TT-NN says at each step. ``python hal_on_mock.py second_queue``: an op on the second
command queue. ``python hal_on_mock.py crash WHAT``: one TT-NN call
the 0.81.1 mock cannot take (it has no host-side command queue), for the test that notices when it starts to work.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from kohakutt import hal
from kohakutt.hal.backends import ttnn_backend as tb


def tensor_facts(buf: Any) -> dict[str, Any]:
    t = buf.handle.tensor
    return {"address": int(t.buffer_address()), "memory": str(t.memory_config().buffer_type).rsplit(".", 1)[-1],
            "shape": list(t.shape), "padded": list(t.padded_shape), "dtype": str(t.dtype), "layout": str(t.layout),
            "allocated": bool(t.is_allocated()), "geometry": list(buf.handle.geometry.shape)}  # fmt: skip


def main() -> dict[str, Any]:
    out: dict[str, Any] = {}
    dev = hal.open_device(0)
    ttnn = sys.modules["ttnn"]
    d = dev.backend.device
    out["describe"] = dev.describe()
    out["card"] = {"grid": list(dev.card.grid), "dram_banks": dev.card.dram_banks, "cores": dev.card.cores}
    out["default_device"] = ttnn.GetDefaultDevice() is d

    dram = dev.allocate(shape=(64, 96), fmt="bfloat16", layout="tile")
    l1 = dev.allocate(shape=(64, 96), fmt="bfloat16", layout="tile", kind="l1")
    raw = dev.allocate(5000)  # raw bytes: a row of 2048 per page, the last page partly padding
    rows = dev.allocate(shape=(6, 10), fmt="float32", layout="row_major", kind="l1")
    out["buffers"] = {name: tensor_facts(b) for name, b in (("dram", dram), ("l1", l1), ("raw", raw), ("rows", rows))}

    x = np.arange(64 * 96, dtype=np.float32).reshape(64, 96)
    up = dev.upload(x, "bfloat16")
    back = dev.download(up)
    out["download"] = {"shape": list(back.shape), "dtype": str(back.dtype), "nonzero": int(np.count_nonzero(back))}
    dev.write(raw, np.full(5000, 7, np.uint8), blocking=True)
    part = dev.read(raw, offset=100, nbytes=50)
    out["read"] = {"nbytes": int(part.size), "nonzero": int(np.count_nonzero(part))}
    dev.copy(up, dram)  # whole, same geometry: ttnn.copy on the card
    dev.copy(up, raw, nbytes=1024, dst_offset=2048)  # a part: through the host
    dev.synchronize()
    out["copied"] = True

    tensor = l1.handle.tensor
    dev.free(l1)
    dev.synchronize()
    out["freed_l1_still_allocated"] = bool(tensor.is_allocated())

    tid = ttnn.begin_trace_capture(mesh_device=d, cq_id=0)
    ttnn.end_trace_capture(mesh_device=d, trace_id=tid, cq_id=0)
    ttnn.release_trace(mesh_device=d, trace_id=tid)
    out["trace"] = type(tid).__name__

    # queues hand the chip's programs to each other by waiting for events (wait_for_event), which the mock cannot
    # do: events are recorded and waited for here, a program on the second queue runs in a process of its own
    events = [ttnn.record_event(mesh_device=d, cq_id=cq) for cq in (0, 1)]
    for e in events:
        ttnn.event_synchronize(mesh_event=e)
    ttnn.synchronize_device(device=d, cq_id=1)
    out["events"] = [type(e).__name__ for e in events]

    dev.close()
    out["torch_loaded"] = "torch" in sys.modules
    return out


def second_queue() -> dict[str, Any]:
    """An op on command queue 1 in a fresh process (queue 0 has run no program, so queue 1 may)."""
    dev = hal.open_device(0)
    ttnn = sys.modules["ttnn"]
    buf = dev.upload(np.ones((64, 96), np.float32), "bfloat16")
    t = buf.handle.tensor
    with ttnn.command_queue(1):
        y = ttnn.add(t, t)
    ttnn.synchronize_device(device=dev.backend.device, cq_id=1)
    out = {"shape": list(y.shape), "dtype": str(y.dtype)}
    dev.close()
    return out


def crash(what: str) -> None:
    dev = hal.open_device(0)
    ttnn = sys.modules["ttnn"]
    d = dev.backend.device
    buf = dev.allocate(shape=(64, 96), fmt="bfloat16", layout="tile")
    t = buf.handle.tensor
    print(f"{what}: start", flush=True)
    if what == "wait_for_event":
        ttnn.wait_for_event(cq_id=1, mesh_event=ttnn.record_event(mesh_device=d, cq_id=0))
    elif what == "execute_trace":
        tid = ttnn.begin_trace_capture(mesh_device=d, cq_id=0)
        ttnn.end_trace_capture(mesh_device=d, trace_id=tid, cq_id=0)
        ttnn.execute_trace(mesh_device=d, trace_id=tid, cq_id=0, blocking=True)
    elif what == "capture_an_op":
        ttnn.add(t, t)
        tid = ttnn.begin_trace_capture(mesh_device=d, cq_id=0)
        ttnn.add(t, t)
        ttnn.end_trace_capture(mesh_device=d, trace_id=tid, cq_id=0)
    print(f"{what}: done", flush=True)
    dev.close()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "crash":
        crash(sys.argv[2])
    else:
        try:
            result = second_queue() if sys.argv[1:] == ["second_queue"] else main()
        except Exception as e:
            result = {"error": tb._first_lines(e, 6)}
        print(json.dumps(result, default=str))
