"""Train a small MLP on the card through tinygrad: the model code is plain tinygrad v0.14."""

from tinygrad import Context, Tensor, nn

import kohakutt.tinygrad


class Net:
    def __init__(self):
        self.hidden, self.out = nn.Linear(256, 512), nn.Linear(512, 4)

    def __call__(self, x):
        return self.out(self.hidden(x).silu())


# 1. Parameters and data on the card; the model code is plain tinygrad.
model = Net()
params = nn.state.get_parameters(model)
for p in params:
    p.to_("KTT")
opt = nn.optim.AdamW(params, lr=1e-3)
x = Tensor.randn(64, 256, device="KTT")
y = Tensor([0, 1, 2, 3] * 16, device="KTT")

# 2. Training steps run on the card; .item() waits for the result.
with Context(TRAINING=1):
    for _ in range(3):
        loss = model(x).sparse_categorical_crossentropy(y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("loss", loss.item())

# 3. Inference on the card's faster TF32 matmuls (ALLOW_TF32=1 does the same) at a high fidelity, for this scope.
with kohakutt.tinygrad.numerics(fidelity=3, fp32_matmul="high"):
    print("accuracy", (model(x).argmax(axis=1) == y).mean().item())

print(kohakutt.tinygrad.stats())
