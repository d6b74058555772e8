"""Tensors on the tt device: creation, copies, views, the asynchronous stream, events, memory, save / load, autocast.

Run: python examples/01_tensors.py   (the simulated card unless KTT_BACKEND picks a real one)
"""

import io

import torch

import kohakutt


def main() -> None:
    dev = kohakutt.device(0)  # chip 0 as a torch.device: "tt:0"
    print("device:", dev, "| chips:", torch.tt.device_count(), "|", torch.accelerator.current_accelerator())

    # 1. Tensors are made on the card or copied there; ops are queued and return at once.
    x = torch.randn(4, 8, device=dev)  # drawn on the card (torch.tt.manual_seed makes it reproducible)
    w = torch.randn(8, 3).to(dev)  # copied from the host
    y = torch.relu(x @ w + 1.0)
    print("row sums:", y.sum(dim=1).cpu())  # a host read waits for the result
    ref = torch.relu(x.cpu() @ w.cpu() + 1.0).sum(dim=1)
    print("CPU float32 row sums:", ref, "(float32 matmuls on tt follow torch.set_float32_matmul_precision)")

    # 2. Views share storage: writing through a view changes the base, as on any torch device.
    base = torch.zeros(3, 4, device=dev)
    base.t()[1, 2] = 5.0  # base[2, 1]
    base[0].fill_(1.0)
    print("base after writes through views:\n", base.cpu())

    # 3. Events time the simulated device; a stream is an in-order queue of its own.
    start, end = torch.tt.Event(enable_timing=True), torch.tt.Event(enable_timing=True)
    a, m = torch.randn(256, 256, device=dev), torch.randn(256, 256, device=dev) / 256**0.5
    start.record()
    for _ in range(4):
        a = torch.tanh(a @ m)
    end.record()
    end.synchronize()
    print(f"four 256 x 256 matmuls: {start.elapsed_time(end):.3f} ms of simulated card time")
    side = torch.tt.Stream()
    side.wait_stream(torch.tt.current_stream())  # side reads `a`: wait for the work that made it
    with torch.tt.stream(side):
        b = a.abs().mean()
    torch.tt.current_stream().wait_stream(side)
    print("mean |a| computed on a second stream:", b.item())

    # 4. Memory: one allocator shared by every frontend, with torch.cuda-style statistics.
    torch.tt.synchronize()
    print(f"allocated {torch.tt.memory_allocated()} B, peak {torch.tt.max_memory_allocated()} B")

    # 5. Save / load keeps views aliased and values bit for bit.
    buf = io.BytesIO()
    torch.save({"base": base, "row": base[0]}, buf)
    buf.seek(0)
    back = torch.load(buf, map_location="tt")
    print("loaded views share storage:", back["row"].data_ptr() == back["base"].data_ptr())

    # 6. The card holds float32, bfloat16 and integers; float64 raises a DtypeError that says what to do.
    try:
        torch.ones(2, dtype=torch.float64).to(dev)
    except kohakutt.DtypeError as e:
        print("float64 ->", type(e).__name__ + ":", e)

    # 7. Autocast: matmuls and linear layers in bfloat16, softmax and losses in float32.
    with torch.autocast("tt", dtype=torch.bfloat16):
        h = x @ w
        p = torch.softmax(h, dim=-1)
    print("autocast dtypes:", h.dtype, p.dtype)


if __name__ == "__main__":
    main()
