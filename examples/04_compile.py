"""``torch.compile`` with the tt backends: ``ktt_tt`` for a forward, ``ktt_tt_aot`` for training.

A compiled graph runs op by op on its first call, is recorded as a device trace on its second, and replays as one
queued command after that. The results are compared with the same model run eagerly.
Run: python examples/04_compile.py
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn

import kohakutt
from kohakutt.frontends.torch import compile as ktt_compile


def main() -> None:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.SiLU(), nn.Linear(512, 10)).to(dev)
    x = torch.randn(128, 256, device=dev)
    y = torch.randint(0, 10, (128,)).to(dev)

    # Inference: the forward as one trace.
    compiled = torch.compile(model, backend="ktt_tt")
    with torch.no_grad():
        want = model(x).cpu()
        for i in range(3):
            same = torch.equal(compiled(x).cpu(), want)
            print(f"ktt_tt call {i}: equal to eager: {same}")
    print("after inference:", dict(ktt_compile.stats))

    # Training: AOTAutograd's forward and backward graphs, each as one trace.
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.05)
    train = torch.compile(model, backend="ktt_tt_aot")
    for i in range(4):
        losses = []
        for m, o in ((train, opt), (twin, twin_opt)):
            o.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            losses.append(loss.item())
        print(f"ktt_tt_aot step {i}: loss {losses[0]:.5f} (eager {losses[1]:.5f})")
    print("after training:", dict(ktt_compile.stats))


if __name__ == "__main__":
    main()
