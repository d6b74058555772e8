"""DSL programs that between them run every compute op of ``kohakutt.dsl.metal.ops`` on each tile of their inputs,
and NumPy references for each op. The DSL tests run them on the simulator against the references; the TT-Metal JIT
check (tests/ttnn) compiles their generated kernels, so every op's C++ is checked against 0.81.1's own headers.

Each program writes op ``j``'s result for input tile ``t`` to page ``j * tiles + t`` of its output (shape
``(len(ops), *x.shape)``): the ops are unrolled when the program is traced (a Python loop at definition time).
"""

from __future__ import annotations

import math

import numpy as np

import kohakutt.dsl.metal as km

SFPU = ["exp", "log", "recip", "sqrt", "rsqrt", "gelu", "gelu_tanh", "sigmoid", "tanh", "silu", "square", "abs",
        "negative", "relu", "sin", "cos", "erf"]  # fmt: skip
SCALAR = ["add_scalar", "sub_scalar", "mul_scalar", "div_scalar", "rsub_scalar", "fill"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]
FPU = ["add_tiles", "sub_tiles", "mul_tiles", "add_bcast_rows", "add_bcast_cols", "add_bcast_scalar",
       "sub_bcast_rows", "sub_bcast_cols", "sub_bcast_scalar", "mul_bcast_rows", "mul_bcast_cols",
       "mul_bcast_scalar", "matmul", "transpose"]  # fmt: skip
REDUCE = [f"reduce_{d}_{p}" for d in ("row", "col", "scalar") for p in ("sum", "avg", "max")]
UNARY = SFPU + SCALAR
SCALE = 1.75  # the scalar of the scalar ops (a runtime value)


def _writer(p, k, out, cb_out, n, start, count, tiles):
    for i in k.range(count):
        for j in range(n):  # unrolled: one page of out per op
            cb_out.wait(1)
            k.write(cb_out, out.page(j * tiles + start + i))
            k.flushed()
            cb_out.pop(1)
    k.writes_done()


@km.program("every_unary_op", max_cores=4)
def every_unary(p, x: km.TensorRef, out: km.Out):
    tiles = p.runtime("tiles")
    start, count = p.split(tiles)
    s = p.runtime("s")
    cb_x, cb_out = p.cb(0, like=x), p.cb(16, like=out)

    @p.dm0
    def reader(k):
        for i in k.range(count):
            k.read(x.page(start + i), cb_x.reserve(1))
            k.reads_done()
            cb_x.push(1)

    @p.compute(fp32_dest=True)
    def compute(c):
        c.startup(cb_x, cb_out)
        for _ in c.range(count):
            cb_x.wait(1)
            for name in UNARY:
                with c.registers():
                    c.init("copy", cb_x)
                    c.copy(cb_x, 0, 0)
                    c.init(name)
                    if name in SCALAR:
                        c.op(name, 0, value=s)
                    else:
                        c.op(name, 0)
                    cb_out.reserve(1)
                    c.pack(0, cb_out)
                    cb_out.push(1)
            cb_x.pop(1)

    @p.dm1
    def writer(k):
        _writer(p, k, out, cb_out, len(UNARY), start, count, tiles)


def _two_inputs(name, ops, body):
    """A program over x and y whose compute runs ``body(c, name, cb_x, cb_y, cb_out)`` per op and tile."""

    @km.program(name, max_cores=4)
    def prog(p, x: km.TensorRef, y: km.TensorRef, out: km.Out):
        tiles = p.runtime("tiles")
        start, count = p.split(tiles)
        cb_x, cb_y, cb_out = p.cb(0, like=x), p.cb(1, like=y), p.cb(16, like=out)
        cb_s = p.cb(2, dtype="bfloat16", pages=1)

        @p.dm0
        def reader(k):
            for i in k.range(count):
                xs, ys = cb_x.reserve(1), cb_y.reserve(1)
                k.read(x.page(start + i), xs)
                k.read(y.page(start + i), ys)
                k.reads_done()
                cb_x.push(1)
                cb_y.push(1)

        @p.compute(fp32_dest=True)
        def compute(c):
            c.startup(cb_x, cb_y, cb_out)
            with c.registers():  # a tile of ones: the reduce scaler
                c.init("fill")
                c.op("fill", 0, value=1.0)
                cb_s.reserve(1)
                c.pack(0, cb_s)
                cb_s.push(1)
            cb_s.wait(1)
            for _ in c.range(count):
                cb_x.wait(1)
                cb_y.wait(1)
                for op in ops:
                    with c.registers():
                        body(c, op, cb_x, cb_y, cb_s)
                        cb_out.reserve(1)
                        c.pack(0, cb_out)
                        cb_out.push(1)
                cb_x.pop(1)
                cb_y.pop(1)
            cb_s.pop(1)

        @p.dm1
        def writer(k):
            _writer(p, k, out, cb_out, len(ops), start, count, tiles)

    return prog


def _binary(c, op, cb_x, cb_y, cb_s):
    c.init("copy", cb_x)
    c.copy(cb_x, 0, 0)
    c.init("copy", cb_y)
    c.copy(cb_y, 0, 1)
    c.init(op)
    c.op(op, 0, 1, 0)


def _fpu(c, op, cb_x, cb_y, cb_s):
    if op == "transpose":
        c.init(op, cb_x)
        c.op(op, cb_x, 0, 0)
    else:
        c.init(op, cb_x, cb_y)
        c.op(op, cb_x, cb_y, 0, 0, 0)


def _reduce(c, op, cb_x, cb_y, cb_s):
    c.init(op, cb_x, cb_s, cb_y)  # the output CB only configures the packer's mask: any CB of the program
    c.op(op, cb_x, cb_s, 0, 0, 0)


every_binary = _two_inputs("every_binary_op", BINARY, _binary)
every_fpu = _two_inputs("every_fpu_op", FPU, _fpu)
every_reduce = _two_inputs("every_reduce_op", REDUCE, _reduce)
PROGRAMS = {"unary": (every_unary, UNARY), "binary": (every_binary, BINARY), "fpu": (every_fpu, FPU),
            "reduce": (every_reduce, REDUCE)}  # fmt: skip


# ------------------------------------------------------------------------------------------------- references
def tiles_of(a: np.ndarray) -> np.ndarray:
    """(..., H, W) with H, W multiples of 32 -> (tiles, 32, 32) in row-major tile order."""
    h, w = a.shape[-2:]
    return a.reshape(-1, h // 32, 32, w // 32, 32).transpose(0, 1, 3, 2, 4).reshape(-1, 32, 32)


def _erf(v: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(v)


def reference(op: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Op ``op`` on float64 tiles (tiles, 32, 32) of x (and y), as the DSL op defines it."""
    s = SCALE
    unary = {
        "exp": np.exp, "log": np.log, "recip": lambda v: 1 / v, "sqrt": np.sqrt, "rsqrt": lambda v: 1 / np.sqrt(v),
        "gelu": lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))),
        "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "silu": lambda v: v / (1 + np.exp(-v)),
        "square": np.square, "abs": np.abs, "negative": np.negative, "relu": lambda v: np.maximum(v, 0),
        "sin": np.sin, "cos": np.cos, "erf": _erf,
        "add_scalar": lambda v: v + s, "sub_scalar": lambda v: v - s, "mul_scalar": lambda v: v * s,
        "div_scalar": lambda v: v / s, "rsub_scalar": lambda v: s - v, "fill": lambda v: np.full_like(v, s),
    }  # fmt: skip
    if op in unary:
        return unary[op](x)
    binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
              "min": np.minimum}  # fmt: skip
    if op in binary:
        return binary[op](x, y)
    if op in ("add_tiles", "sub_tiles", "mul_tiles"):
        return binary[op.split("_")[0]](x, y)
    if "_bcast_" in op:
        f, dim = op.split("_bcast_")
        b = {"rows": y[:, :1, :], "cols": y[:, :, :1], "scalar": y[:, :1, :1]}[dim]
        return binary[f](x, b)
    if op == "matmul":
        return x @ y
    if op == "transpose":
        return x.transpose(0, 2, 1)
    _, dim, pool = op.split("_")
    red = np.max if pool == "max" else np.sum
    out = np.zeros_like(x)
    if dim == "row":
        out[:, :, 0] = red(x, axis=2)
    elif dim == "col":
        out[:, 0, :] = red(x, axis=1)
    else:
        out[:, 0, 0] = red(x, axis=(1, 2))
    return out
