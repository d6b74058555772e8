"""Replays the op library's recorded TT-NN calls for real, against ttnn 0.81.1 on the mocked P150.

Runs in the TT-NN venv's Python (3.12, no torch, no Kohaku-TT import), started by ``MockP150.run`` on a mock prepared
with ``complete=True``: ops then run to their end, so every device op of every call (a composite TT-NN op's later
ones included) goes through TT-NN's validation and TT-Metal's program set-up, its kernels to the (stand-in)
compiler, and its program to the mocked card's dispatch. ``python replay_ttnn.py RECORDING OUT [FIRST]``: for each
case of RECORDING (``record_ttnn.py``) from index FIRST on, allocate its input tensors with the recorded specs, make
its calls in order (each call's tensor arguments are the real outputs of the earlier calls), compare every output's
spec with the one the fake predicted and the case's results with the IR's output specs, and append one JSON line to
OUT. A crash of the process leaves OUT ending at the last finished case; the caller restarts after the crashed one.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import mock_p150
import numpy as np
import ttnn


def resolve(path: str) -> Any:
    obj: Any = ttnn
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def real_spec(t: Any) -> dict[str, Any]:
    on_device = str(t.storage_type()).endswith("DEVICE")
    memory = str(t.memory_config().buffer_type).rsplit(".", 1)[-1] if on_device else "HOST"
    return {"shape": list(t.shape), "padded_shape": list(t.padded_shape), "dtype": str(t.dtype),
            "layout": str(t.layout), "memory": memory}  # fmt: skip


def spec_differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    return [f"{k}: recorded {want[k]}, TT-NN {got[k]}" for k in ("shape", "dtype", "layout", "memory")
            if k in want and want[k] != got[k]]  # fmt: skip


class Case:
    def __init__(self, case: dict[str, Any], device: Any):
        self.case, self.device = case, device
        self.tensors: dict[str, Any] = {}
        self.objects: dict[str, Any] = {}
        self.mismatches: list[dict[str, Any]] = []

    def decode(self, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        if "t" in v:
            return self.tensors[str(v["t"])]
        if "e" in v:
            return resolve(v["e"])
        if "device" in v:
            return self.device
        if "o" in v:
            return self.objects[str(v["o"])]
        if "list" in v:
            return [self.decode(x) for x in v["list"]]
        if "tuple" in v:
            return tuple(self.decode(x) for x in v["tuple"])
        if "dict" in v:
            return {k: self.decode(x) for k, x in v["dict"].items()}
        if "nd" in v:
            return np.zeros(v["nd"]["shape"], dtype=np.dtype(v["nd"]["dtype"]))
        raise ValueError(f"cannot decode {v!r}")

    def bind(self, enc: Any, got: Any, call: dict[str, Any]) -> None:
        """Take the real outputs ``got`` of ``call`` under the ids the recording gave them."""
        if isinstance(enc, dict) and "t" in enc:
            if got is None or not hasattr(got, "shape"):
                self.mismatches.append({"site": call["site"], "fn": call["fn"],
                                        "what": f"recorded a tensor, TT-NN returned {type(got).__name__}"})  # fmt: skip
                return
            self.tensors[str(enc["t"])] = got
            diff = spec_differences(self.case["tensors"][str(enc["t"])], real_spec(got))
            if diff:
                self.mismatches.append({"site": call["site"], "fn": call["fn"], "what": "; ".join(diff)})
        elif isinstance(enc, dict) and "o" in enc:
            self.objects[str(enc["o"])] = got
        elif isinstance(enc, dict) and ("list" in enc or "tuple" in enc):
            items = enc.get("list", enc.get("tuple"))
            got_items = list(got) if isinstance(got, list | tuple) else None
            if got_items is None or len(got_items) != len(items):
                what = f"recorded {len(items)} outputs, TT-NN returned {got!r:.80}"
                self.mismatches.append({"site": call["site"], "fn": call["fn"], "what": what})
                return
            for e, g in zip(items, got_items):
                self.bind(e, g, call)
        elif enc is None and got is not None and call["fn"] not in ("to_torch",):
            self.mismatches.append({"site": call["site"], "fn": call["fn"],
                                    "what": f"recorded None, TT-NN returned {type(got).__name__}"})  # fmt: skip

    def leaves(self) -> None:
        for tid, spec in self.case["tensors"].items():
            if not spec.get("leaf"):
                continue
            tspec = ttnn.TensorSpec(shape=ttnn.Shape(spec["shape"]), dtype=resolve(spec["dtype"]),
                                    layout=resolve(spec["layout"]), buffer_type=ttnn.BufferType.DRAM)  # fmt: skip
            self.tensors[tid] = ttnn.allocate_tensor_on_device(tensor_spec=tspec, mesh_device=self.device)

    def call(self, call: dict[str, Any]) -> Any:
        args = [self.decode(a) for a in call["args"]]
        kwargs = {k: self.decode(v) for k, v in call["kwargs"].items()}
        if call["fn"] == "to_torch":  # torch is not here: what to_torch does on the card side is the read-back
            t = args[0]
            host = t.cpu(blocking=True) if str(t.storage_type()).endswith("DEVICE") else t
            return np.from_dlpack(host.host_buffer().get_shard(ttnn.MeshCoordinate([0, 0])))
        if call["fn"] == "GetDefaultDevice":
            return self.device
        return resolve(call["fn"])(*args, **kwargs)

    def returns(self) -> list[str]:
        """How the case's results differ from the IR's output specs (``None`` results are outputs not asked for)."""
        got = self.decode(self.case["returns"])
        got = list(got) if isinstance(got, list | tuple) else [got]
        specs = self.case["out_specs"]
        if len(got) != len(specs):
            return [f"{len(got)} results for {len(specs)} IR outputs"]
        out = []
        for i, (t, s) in enumerate(zip(got, specs)):
            if t is None:
                continue
            r = real_spec(t)
            want = {"shape": s["shape"], "dtype": f"DataType.{s['dtype']}",
                    "layout": "Layout.TILE" if s["layout"] == "tile" else "Layout.ROW_MAJOR"}  # fmt: skip
            out += [f"output {i}: {d}" for d in spec_differences(want, r)]
        return out


def replay(case: dict[str, Any], device: Any) -> dict[str, Any]:
    c = Case(case, device)
    result: dict[str, Any] = {"op": case["op"], "impl": case["impl"], "calls": len(case["calls"]), "status": "pass"}
    try:
        c.leaves()
    except Exception as e:
        return result | {"status": "fail", "failure": {"site": "inputs", "fn": "allocate_tensor_on_device",
                                                       "message": mock_p150.first_lines(e)}}  # fmt: skip
    for i, call in enumerate(case["calls"]):
        try:
            got = c.call(call)
        except Exception as e:
            result |= {"status": "fail", "failure": {"site": call["site"], "fn": call["fn"], "index": i,
                                                     "message": mock_p150.first_lines(e, 6),
                                                     "at_build": mock_p150.reached_build(e)}}  # fmt: skip
            break
        c.bind(call["out"], got, call)
    else:
        try:
            result["returns"] = c.returns()
        except Exception as e:
            result["returns"] = [f"{type(e).__name__}: {e}"]
    result["mismatches"] = c.mismatches
    return result


def main() -> int:
    recording, out_path = sys.argv[1], sys.argv[2]
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(recording) as f:
        cases = json.load(f)["cases"]
    device = mock_p150.open_device(l1_small_size=32768, trace_region_size=1 << 20)
    with open(out_path, "a") as out:
        for i in range(first, len(cases)):
            case = cases[i]
            if case["status"] != "ok":
                continue
            t0 = time.perf_counter()
            res = replay(case, device)
            out.write(json.dumps(res | {"i": i, "seconds": round(time.perf_counter() - t0, 4)}) + "\n")
            out.flush()
    ttnn.close_device(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
