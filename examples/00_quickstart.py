"""The quick-start on the simulated card: relu(x @ w + 1), summed per row, against NumPy in float64.

Run with `make demo`. Every op runs on the device (the simulated P150A unless KTT_BACKEND says otherwise), with
the card's bf16 storage and matmul fidelity; the profile shows the simulator's estimate of the card's time.
"""

import numpy as np

from kohakutt import hal, numerics
from kohakutt import kernels as kk


def main() -> None:
    dev = hal.open_device(0)
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((4, 8)).astype(np.float32)
    w_host = rng.standard_normal((8, 3)).astype(np.float32)

    x = kk.from_numpy(dev, x_host, "bfloat16")  # stored as the card stores bf16: rounded to nearest even
    w = kk.from_numpy(dev, w_host, "bfloat16")
    with hal.profile() as prof, numerics(fidelity="HiFi4"):
        (xw,) = kk.run("matmul", [x, w])  # queued: returns at once
        (h,) = kk.run("add", [xw, 1.0])
        (y,) = kk.run("relu", [h])
        (s,) = kk.run("sum", [y], {"dims": 1})
    got = kk.to_numpy(s)  # a host read waits for the result

    xr, wr = kk.to_numpy(x).astype(np.float64), kk.to_numpy(w).astype(np.float64)
    want = np.maximum(xr @ wr + 1.0, 0.0).sum(axis=1)
    print(f"device: {dev.describe()['card']} ({dev.backend.name}), chip {dev.chip_id}")
    print("row sums on the card:", np.array2string(got, precision=4))
    print("float64 reference:   ", np.array2string(want, precision=4))
    print(f"max relative error:   {np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3)):.2e} (bf16 storage)")
    print()
    print(prof.table())
    dev.close()


if __name__ == "__main__":
    main()
