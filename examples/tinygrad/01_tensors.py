"""Tensors on the card through tinygrad: plain tinygrad v0.14 code on the device "KTT"."""

import numpy as np
from tinygrad import Tensor, TinyJit, dtypes

import kohakutt.tinygrad

# 1. Tensors on the card: made there, or moved there with .to("KTT"); .numpy() and .item() read them back.
x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device="KTT")
w = Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)).to("KTT")
print("x @ w + 1 =\n", (x @ w + 1).relu().numpy())  # one kernel: a matmul with its bias and ReLU fused
print("sum:", x.sum().item(), " argmax per row:", x.argmax(axis=1).tolist())

# 2. float32, bfloat16 and int32 run on the card; a convolution is a matmul there too.
img = Tensor.randn(1, 3, 8, 8, device="KTT")  # drawn on the card
kernel = Tensor.randn(4, 3, 3, 3, device="KTT", dtype=dtypes.bfloat16)
print("conv2d:", img.cast(dtypes.bfloat16).conv2d(kernel, padding=1).shape)
print("int32:", (Tensor([7, -7, 9], dtype=dtypes.int32, device="KTT") // 2).tolist())

# 3. A narrower matmul for a scope: one pass on TF32 operands (as ALLOW_TF32=1; the default splits float32 operands
# for float32 accuracy), at a fidelity as TT-NN numbers it (0 LoFi, 2 HiFi2, 3 HiFi3, 4 HiFi4).
with kohakutt.tinygrad.numerics(fidelity=0, fp32_matmul="high"):
    print("LoFi x @ w:", (x @ w).numpy()[0])


# 4. TinyJit: the second and later calls replay the captured kernels as one device trace.
@TinyJit
def step(a: Tensor) -> Tensor:
    return (a @ w).softmax(axis=1).realize()


for _ in range(3):
    step(Tensor.randn(2, 3, device="KTT"))

# 5. What ran where: kernels on the card, on the host (none here), matmuls, JIT replays.
print({k: v for k, v in kohakutt.tinygrad.stats().items() if k != "ir_ops"})
