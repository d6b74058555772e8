"""The product description's kernel DSL program, verbatim: ``out = a * s + b`` as a torch op on tt tensors.

``scaled_add_program`` is the whole program in Python: a reader (``@p.dm0``) brings one tile of ``a`` and of ``b``
per step into circular buffers, the compute kernel scales and adds them in the DST registers, a writer (``@p.dm1``)
sends each result tile back. The DSL checks it against the card's rules when it is defined and generates one
Metalium C++ kernel per function (printed below); the simulator runs that C++, a card runs it through generic_op.
The tile count and the scale's fp32 bits are runtime arguments: new shapes and scales compile nothing.
Run: python examples/kernels/dsl_metal/scaled_add_km.py
"""

import torch

import kohakutt
import kohakutt.dsl.metal as km
import kohakutt.kernels as kk
from kohakutt.dsl.metal import bits


@km.program("scaled_add")
def scaled_add_program(p, a: km.TensorRef, b: km.TensorRef, out: km.Out):
    start, count = p.split(p.runtime("tiles"))  # each core's range of tiles
    s = p.runtime("s")  # fp32 bits of the scale
    cb_a, cb_b, cb_out = p.cb(0, like=a), p.cb(1, like=b), p.cb(16, like=out)

    @p.dm0
    def reader(k):
        for i in k.range(count):
            a_slot, b_slot = cb_a.reserve(1), cb_b.reserve(1)
            k.read(a.page(start + i), a_slot)
            k.read(b.page(start + i), b_slot)
            k.reads_done()
            cb_a.push(1)
            cb_b.push(1)

    @p.compute(fp32_dest=True)
    def compute(c):
        c.startup(cb_a, cb_b, cb_out)
        for _ in c.range(count):
            cb_a.wait(1)
            cb_b.wait(1)
            with c.registers():
                c.init("copy", cb_a)
                c.copy(cb_a, 0, 0)  # a in register slot 0
                c.init("copy", cb_b)
                c.copy(cb_b, 0, 1)  # b in register slot 1
                c.init("mul_scalar")
                c.op("mul_scalar", 0, value=s)  # slot 0 = slot 0 * s
                c.init("add")
                c.op("add", 0, 1, 0)  # slot 0 = slot 0 + slot 1
                cb_out.reserve(1)
                c.pack(0, cb_out)
                cb_out.push(1)
            cb_a.pop(1)
            cb_b.pop(1)

    @p.dm1
    def writer(k):
        for i in k.range(count):
            cb_out.wait(1)
            k.write(cb_out, out.page(start + i))
            k.flushed()
            cb_out.pop(1)
        k.writes_done()


@km.op(
    "kohakutt_example::scaled_add_km(Tensor a, Tensor b, float s) -> Tensor",
    scaled_add_program,
)
def scaled_add(a, b, s):
    return km.Call(
        inputs={"a": a, "b": b},
        outputs={"out": (list(a.shape), a.dtype)},
        runtime={"tiles": kk.tile_count(a), "s": bits(s)},
    )


def reference(a, b, s):
    """The same arithmetic on the CPU: a * s and the sum rounded to float32 (as the fp32 DST does), then to bf16."""
    return (a.float() * torch.tensor(s, dtype=torch.float32) + b.float()).to(a.dtype)


def main() -> None:
    print(scaled_add_program.source("compute", lines=False))
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    for shape, s in (((64, 96), 0.37), ((3, 40, 200), -2.5), ((1, 7), 3.0)):
        a, b = torch.randn(shape).bfloat16(), torch.randn(shape).bfloat16()
        got = scaled_add(a.to(dev), b.to(dev), s).cpu()
        same = torch.equal(got, reference(a, b, s))
        print(f"eager {tuple(shape)} s={s}: bit-equal to the CPU reference: {same}")
        assert same

    a, b = torch.randn(64, 128).bfloat16(), torch.randn(64, 128).bfloat16()
    want = reference(a, b, 1.5)
    step = kohakutt.capture(lambda x, y: scaled_add(x, y, 1.5) * 2, a.to(dev), b.to(dev))
    got = step(a.to(dev), b.to(dev)).cpu()
    assert torch.equal(got, want * 2), "kohakutt.capture replay disagrees"
    print("kohakutt.capture replay: bit-equal")

    compiled = torch.compile(lambda x, y: torch.relu(scaled_add(x, y, 1.5)), backend="ktt_tt")
    for _ in range(3):
        assert torch.equal(compiled(a.to(dev), b.to(dev)).cpu(), want.relu()), "torch.compile disagrees"
    print("torch.compile (ktt_tt), three calls: bit-equal")
    print(
        f"kernel variants compiled: {scaled_add_program.compiles} (one per set of tensor formats; shapes and "
        "scales are runtime arguments)"
    )


if __name__ == "__main__":
    main()
