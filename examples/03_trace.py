"""A training step captured once and replayed as one device trace (``kohakutt.capture``).

The step is ordinary PyTorch. ``kohakutt.capture`` runs it a few times eagerly (the optimizer makes its state on its
first step), records one more call on the card's stream, and returns a replay: calling it queues the whole step as
one command, so the host does no per-op work. Replayed steps match eager ones bit for bit; the script checks that
against a twin model trained eagerly.
Run: python examples/03_trace.py
"""

import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

import kohakutt


def main() -> None:
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.SiLU(), nn.Linear(512, 10)).to(dev)
    twin = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    twin_opt = torch.optim.AdamW(twin.parameters(), lr=1e-3, capturable=True)  # what capture switches opt to
    x = torch.randn(128, 256, device=dev)
    y = torch.randint(0, 10, (128,)).to(dev)

    def trainer(model, opt):
        def step(x, y):
            opt.zero_grad(set_to_none=False)  # a trace needs fixed gradient buffers
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    step, twin_step = trainer(model, opt), trainer(twin, twin_opt)
    replay = kohakutt.capture(step, x, y, warmup=3)  # three eager steps, then one recorded (not run)
    for _ in range(3):
        twin_step(x, y)
    print(replay)

    for i in range(5):
        t0 = time.perf_counter()
        loss = replay(x, y)  # one queued command
        queued_ms = (time.perf_counter() - t0) * 1e3
        want = twin_step(x, y).item()
        print(f"replay {i}: loss {loss.item():.5f} (eager twin {want:.5f}), queued in {queued_ms:.2f} ms")
        assert loss.item() == want
    print(f"host time per replay {replay.host_s / replay.replays * 1e3:.2f} ms, "
          f"the card's estimated time {replay.estimate_ms:.3f} ms")
    replay.release()  # frees the trace's intermediates


if __name__ == "__main__":
    main()
