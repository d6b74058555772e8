"""Two chips as one device: the README's mesh example, then the same model on one chip and a training step.

The forward on the 1 x 2 mesh is checked against the same weights on one chip and against CPU float64; the
training step's loss against one chip. The mesh's bfloat16 result differs from one chip's only where a row-wise
product is summed over the chips (each chip rounds its part, then the sum is rounded): see docs/concepts/mesh.md.
Run: python examples/05_mesh.py
"""

import copy

import torch
from torch import nn

import kohakutt


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = kohakutt.replicate(nn.LayerNorm(d))  # a copy on each chip
        self.up = kohakutt.colwise(nn.Linear(d, 4 * d))  # output features split
        self.down = kohakutt.rowwise(nn.Linear(4 * d, d))  # input features split

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def main() -> None:
    torch.manual_seed(0)
    reference = nn.Sequential(Block(1024), Block(1024))
    x_cpu = torch.randn(512, 1024, dtype=torch.bfloat16)

    # The README's example.
    mesh = kohakutt.mesh([0, 1])
    model = copy.deepcopy(reference).bfloat16().to(mesh)
    with kohakutt.record_placements():
        out = model(x_cpu.to(mesh))
    print(kohakutt.placement(model[0].down.weight))  # "Sharded(dim=1)"
    print(kohakutt.placement_log()[-1])  # op, inputs, output, conversions, reason
    print(torch.tt.mesh_stats())  # collectives so far

    # The same weights on one chip, and in float64 on the CPU.
    one = copy.deepcopy(reference).bfloat16().to("tt:0")(x_cpu.to("tt:0")).detach().cpu().double()
    f64 = copy.deepcopy(reference).double()(x_cpu.double()).detach()
    two = out.detach().cpu().double()
    scale = f64.abs().median()
    err_two, err_one = (two - f64).abs().median() / scale, (one - f64).abs().median() / scale
    print(f"median error against float64: mesh {err_two:.2e}, one chip {err_one:.2e}")
    assert str(kohakutt.placement(model[0].down.weight)) == "Sharded(dim=1)"
    assert err_two < 2 * err_one + 1e-3, "the mesh's result is far from one chip's"

    # A training step on the mesh: the backward's collectives are in the log too.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    y = torch.randn(512, 1024, dtype=torch.bfloat16).to(mesh)
    with kohakutt.record_placements():
        loss = ((model(x_cpu.to(mesh)) - y).float() ** 2).mean()
        loss.backward()
        opt.step()
    backward = [r for r in kohakutt.placement_log() if r.op.endswith("_backward") and r.conversions]
    print(
        f"training step: loss {loss.item():.4f}, {len(kohakutt.placement_log())} mesh ops, "
        f"{len(backward)} backward ops with collectives"
    )
    print("mesh ok")


if __name__ == "__main__":
    main()
