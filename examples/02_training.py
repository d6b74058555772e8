"""Training on the tt device: model, loss and optimizer are unchanged PyTorch; every op runs on the card.

The same model trains side by side on the CPU in float32 from the same initial weights, so the losses can be
compared: they agree to float32 rounding (under PyTorch's default float32 matmul precision, "highest", tt splits
float32 matmul operands into bfloat16 parts; torch.set_float32_matmul_precision("high") takes the card's faster TF32
operands, about 1e-3 relative).
Run: python examples/02_training.py
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

import kohakutt


def main() -> None:
    dev = kohakutt.device(0)  # chip 0 as a torch.device ("tt:0")
    torch.manual_seed(0)

    # 1. Model, optimizer and data on the card: ordinary PyTorch.
    cpu_model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.SiLU(), nn.Linear(512, 10))
    model = copy.deepcopy(cpu_model).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-3)
    x_cpu, y_cpu = torch.randn(128, 256), torch.randint(0, 10, (128,))
    x, y = x_cpu.to(dev), y_cpu.to(dev)

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    # 2. Eager: each op is queued on the card; .item() waits for the result.
    for i in range(5):
        loss = step(model, opt, x, y).item()
        ref = step(cpu_model, cpu_opt, x_cpu, y_cpu).item()
        print(f"step {i}: loss on tt {loss:.5f}, on the CPU {ref:.5f}")

    # 3. Inference: precision is a scope (here the card's native TF32 matmuls at its most precise fidelity).
    with torch.no_grad(), kohakutt.numerics(fp32_matmul="high", fidelity="HiFi4"):
        print("accuracy", (model(x).argmax(-1) == y).float().mean().item())
    print(f"peak memory on the card: {torch.tt.max_memory_allocated() / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
