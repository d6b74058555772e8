"""The op library's own programs on a card's path, on the mocked P150, in the TT-NN venv's Python (no torch): prints
one JSON object.

Opens the chip through the HAL (``KTT_BACKEND=ttnn``) and runs each fused op the way ``kernels.run`` does on the
ttnn backend: its launcher (``kohakutt.kernels.programs.launch.OpLauncher`` over the own program builder, the object
the registry's ``ktt`` implementation holds for the ttnn backend: ``tests/kernels/test_program_path.py`` checks
that) queues the op's program through the op layer: staging into tile layout, then ``TTNNBackend.run_program``
(the ``ProgramDescriptor``, ``ttnn.generic_op``). The op library's registry itself needs torch (its CPU engines),
which this venv does not have. The mock builds with stand-in compilers and runs nothing, so what this shows is that
every op's program passes TT-Metal's host path from the op layer, not its values.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from kohakutt import hal
from kohakutt import kernels as kk

CASES = {
    "silu_mul": ([(64, 96), (64, 96)], {}),
    "swiglu": ([(40, 128)], {"dim": -1}),
    "bias_gelu": ([(50, 96), (96,)], {}),
    "rotary_embedding": ([(1, 2, 64, 32), (1, 1, 64, 32), (1, 1, 64, 32)], {"interleaved": False}),
    "rotary_embedding_backward": ([(1, 2, 64, 128), (1, 1, 64, 128), (1, 1, 64, 128)], {"interleaved": False}),
}


def main() -> dict:
    from kohakutt.ir import ops as irops
    from kohakutt.ir.numerics import resolve
    from kohakutt.kernels.programs import fused as pf
    from kohakutt.kernels.programs.launch import OpLauncher

    dev = hal.open_device(0)
    out: dict = {"torch_loaded": False, "backend": dev.backend.name, "ops": {}}
    for op, (shapes, attrs) in CASES.items():
        launcher = OpLauncher(op, pf.build, lambda *a: True)
        d = irops.get(op)
        bound = d.bind_attrs(attrs)
        ins = [kk.from_numpy(dev, np.ones(s, np.float32), "bfloat16") for s in shapes]
        outs = [kk.empty(dev, s) for s in d.infer([x.spec for x in ins], bound)]
        try:
            took = launcher(ins, outs, bound, resolve(d.numerics), dev.current_stream)
            dev.synchronize()
            out["ops"][op] = {"launched": launcher.program_op.stats["calls"] if took else 0,
                              "shapes": [list(o.shape) for o in outs], "error": ""}  # fmt: skip
        except Exception as e:  # reported, not raised: the test names the op and the error
            out["ops"][op] = {"launched": 0, "shapes": [], "error": f"{type(e).__name__}: {str(e)[:2000]}"}
    dev.close()
    out["torch_loaded"] = "torch" in sys.modules
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
