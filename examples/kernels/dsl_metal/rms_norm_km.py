"""RMS norm over the last dim, written in the kernel DSL: ``y = x / sqrt(mean(x^2) + eps) * weight``.

Each core takes a range of tile rows (``p.split``); a row is ``wt`` tiles wide, a runtime value, so the loops over a
row are runtime-sized and any width runs the same compiled kernels. The reader streams a row's tiles twice: once for
the sum of squares, once to normalize (with the weight's tile beside each). The compute kernel keeps a running sum
of squares in a float32 CB (``acc += x * x`` tile by tile, on the SFPU), reduces it across the row (a row-sum
``reduce`` against a tile of ones it makes itself), scales by ``1 / width``, adds ``eps``, takes ``rsqrt`` and then
multiplies each tile by that column (a broadcast) and by the weight's row (another broadcast). Seven circular
buffers, one reduction, four runtime values; the width's padding columns are zeros in tile layout, so they add
nothing to the sum.
Run: python examples/kernels/dsl_metal/rms_norm_km.py
"""

import torch
import torch.nn.functional as F

import kohakutt
import kohakutt.dsl.metal as km
import kohakutt.kernels as kk
from kohakutt.dsl.metal import bits


@km.program("rms_norm_km")
def rms_norm_program(p, x: km.TensorRef, weight: km.TensorRef, y: km.Out):
    start, rows = p.split(p.runtime("rows"))  # each core's range of tile rows
    wt = p.runtime("wt")  # tiles per row
    inv_w, eps = p.runtime("inv_w"), p.runtime("eps")  # fp32 bits of 1 / width and of eps
    cb_x, cb_w, cb_y = p.cb(0, like=x), p.cb(1, like=weight), p.cb(16, like=y)
    cb_ones = p.cb(2, dtype="bfloat16", pages=1)  # the reduce's scaler
    cb_acc = p.cb(24, dtype="float32")  # the running sum of squares
    cb_rstd = p.cb(25, dtype="float32", pages=1)  # 1 / rms of each of the 32 rows, in column 0
    cb_norm = p.cb(26, dtype="float32")  # x * rstd

    @p.dm0
    def reader(k):
        for r in k.range(rows):
            row = (start + r) * wt
            for t in k.range(wt):  # pass 1: the row's tiles, for the sum of squares
                slot = cb_x.reserve(1)
                k.read(x.page(row + t), slot)
                k.reads_done()
                cb_x.push(1)
            for t in k.range(wt):  # pass 2: the row again, each tile with the weight's
                x_slot, w_slot = cb_x.reserve(1), cb_w.reserve(1)
                k.read(x.page(row + t), x_slot)
                k.read(weight.page(t), w_slot)
                k.reads_done()
                cb_x.push(1)
                cb_w.push(1)

    @p.compute(fp32_dest=True)
    def compute(c):
        c.startup(cb_x, cb_w, cb_y)
        with c.registers():  # a tile of ones: the row sum's scaler
            c.init("fill")
            c.op("fill", 0, value=1.0)
            cb_ones.reserve(1)
            c.pack(0, cb_ones)
            cb_ones.push(1)
        cb_ones.wait(1)
        for _ in c.range(rows):
            with c.registers():  # acc = 0
                c.init("fill")
                c.op("fill", 0, value=0.0)
                cb_acc.reserve(1)
                c.pack(0, cb_acc)
                cb_acc.push(1)
            for _ in c.range(wt):  # acc += x * x
                cb_x.wait(1)
                cb_acc.wait(1)
                with c.registers():
                    c.init("copy", cb_x)
                    c.copy(cb_x, 0, 0)
                    c.init("copy", cb_acc)
                    c.copy(cb_acc, 0, 1)
                    c.init("square")
                    c.op("square", 0)
                    c.init("add")
                    c.op("add", 0, 1, 0)
                    cb_acc.reserve(1)
                    c.pack(0, cb_acc)
                    cb_acc.push(1)
                cb_x.pop(1)
                cb_acc.pop(1)
            cb_acc.wait(1)
            with c.registers():  # rstd = 1 / sqrt(sum / width + eps)
                c.init("reduce_row_sum", cb_acc, cb_ones, cb_rstd)
                c.op("reduce_row_sum", cb_acc, cb_ones, 0, 0, 0)
                c.init("mul_scalar")
                c.op("mul_scalar", 0, value=inv_w)
                c.op("add_scalar", 0, value=eps)
                c.init("rsqrt")
                c.op("rsqrt", 0)
                cb_rstd.reserve(1)
                c.pack(0, cb_rstd)
                cb_rstd.push(1)
            cb_acc.pop(1)
            cb_rstd.wait(1)
            for _ in c.range(wt):  # y = x * rstd * weight
                cb_x.wait(1)
                with c.registers():
                    c.init("mul_bcast_cols", cb_x, cb_rstd)
                    c.op("mul_bcast_cols", cb_x, cb_rstd, 0, 0, 0)
                    cb_norm.reserve(1)
                    c.pack(0, cb_norm)
                    cb_norm.push(1)
                cb_x.pop(1)
                cb_norm.wait(1)
                cb_w.wait(1)
                with c.registers():
                    c.init("mul_bcast_rows", cb_norm, cb_w)
                    c.op("mul_bcast_rows", cb_norm, cb_w, 0, 0, 0)
                    cb_y.reserve(1)
                    c.pack(0, cb_y)
                    cb_y.push(1)
                cb_norm.pop(1)
                cb_w.pop(1)
            cb_rstd.pop(1)
        cb_ones.pop(1)

    @p.dm1
    def writer(k):
        for r in k.range(rows):
            for t in k.range(wt):
                cb_y.wait(1)
                k.write(cb_y, y.page((start + r) * wt + t))
                k.flushed()
                cb_y.pop(1)
        k.writes_done()


@km.op("kohakutt_example::rms_norm_km(Tensor x, Tensor weight, float eps=1e-6) -> Tensor", rms_norm_program)
def rms_norm(x, weight, eps=1e-6):
    width = x.shape[-1]
    if tuple(weight.shape) != (width,):
        raise ValueError(f"rms_norm_km: weight must have shape ({width},), got {tuple(weight.shape)}")
    wt = -(-width // 32)
    return km.Call(
        inputs={"x": x, "weight": weight},
        outputs={"y": (list(x.shape), x.dtype)},
        runtime={"rows": kk.tile_count(x) // wt, "wt": wt, "inv_w": bits(1.0 / width), "eps": bits(eps)},
    )


def reference(x, weight, eps):
    return F.rms_norm(x.double(), (x.shape[-1],), weight.double(), eps)


def close(got, want):
    """Within bf16's rounding of the result (and float32 statistics): 2^-7 of the largest value."""
    return (got.double() - want).abs().max().item() <= 2**-7 * want.abs().max().item()


def main() -> None:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    for shape in ((64, 96), (3, 40, 200), (2, 1000)):
        x, w = torch.randn(shape).bfloat16(), torch.randn(shape[-1]).bfloat16()
        got = rms_norm(x.to(dev), w.to(dev), 1e-5).cpu()
        want = reference(x, w, 1e-5)
        err = (got.double() - want).abs().max().item()
        print(f"eager {tuple(shape)}: max |tt - cpu float64| = {err:.4f} (largest value {want.abs().max():.2f})")
        assert close(got, want)

    x, w = torch.randn(64, 128).bfloat16(), torch.randn(128).bfloat16()
    want = reference(x, w, 1e-6)
    step = kohakutt.capture(lambda a, b: rms_norm(a, b) + 1, x.to(dev), w.to(dev))
    assert close(step(x.to(dev), w.to(dev)).cpu() - 1, want), "kohakutt.capture replay disagrees"
    print("kohakutt.capture replay: within bf16 rounding of the float64 reference")

    compiled = torch.compile(lambda a, b: rms_norm(a, b) * 2, backend="ktt_tt")
    for _ in range(3):
        assert close(compiled(x.to(dev), w.to(dev)).cpu() / 2, want), "torch.compile disagrees"
    print("torch.compile (ktt_tt), three calls: within bf16 rounding of the float64 reference")
    print(f"kernel variants compiled: {rms_norm_program.compiles}")


if __name__ == "__main__":
    main()
