"""Both frontends in one process: one open device, shared allocator statistics, zero-copy crossings, shutdown.

Crossings move no data, so values compare exactly. The interleaved training runs compare each model's losses with the
same model on its framework's CPU device: the card's float32 matmuls take TF32 operands (2^-10 relative), so a few
steps of small models agree to a few 2^-10 (rtol 4e-3).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("tinygrad")
torch = pytest.importorskip("torch")

from tinygrad import Context, Device, Tensor, dtypes, nn  # noqa: E402

import kohakutt  # noqa: E402
import kohakutt.tinygrad as ktg  # noqa: E402
from kohakutt import hal  # noqa: E402
from kohakutt.errors import BufferUseError, DtypeError  # noqa: E402
from kohakutt.frontends.tinygrad import interop  # noqa: E402
from kohakutt.frontends.torch import runtime  # noqa: E402

TF32 = 2.0**-10


@pytest.fixture(autouse=True)
def no_workers():
    with Context(PARALLEL=0):
        yield


@pytest.fixture(scope="module")
def tt():
    return kohakutt.device(0)


def host_transfers(prof: hal.Profile) -> list[str]:
    return [r.name for r in prof.records if r.name in ("read", "write")]


def test_one_open_device_and_its_statistics(tt):
    assert Device["KTT"].hal is runtime.device(0)
    gc.collect()  # frees still owed by earlier tests land now, not between the two readings below
    Device["KTT"].synchronize()
    torch.tt.synchronize()
    before = torch.tt.memory_allocated(0)
    t = Tensor.ones(256, 256, device="KTT").contiguous().realize()
    assert torch.tt.memory_allocated(0) >= before + 256 * 256 * 4  # torch sees tinygrad's buffer
    x = torch.ones(128, 128).to(tt)
    both = torch.tt.memory_allocated(0)
    assert Device["KTT"].hal.memory_stats()["allocated_bytes"] == both  # and tinygrad sees torch's
    del t
    gc.collect()
    Device["KTT"].synchronize()
    assert torch.tt.memory_allocated(0) == both - 256 * 256 * 4  # tinygrad's free went back to the one allocator
    del x


def test_torch_to_tinygrad_shares_the_storage(tt):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = torch.from_numpy(a).to(tt)
    torch.tt.synchronize()  # the upload is done before the crossing is watched
    with hal.profile() as prof:
        g = ktg.from_torch(x)
        blob = Tensor.from_blob(x.data_ptr(), (4, 6), dtype=dtypes.float32, device="KTT")  # tinygrad's own API
    assert host_transfers(prof) == []
    assert g.uop.buffer._buf.buf is runtime.buffer_of(x.untyped_storage().data_ptr())[0]
    np.testing.assert_array_equal((g * 2).numpy(), a * 2)
    np.testing.assert_array_equal(blob.numpy(), a)
    g.assign(g + 1).realize()  # a write through tinygrad lands in torch's storage
    np.testing.assert_array_equal(x.cpu().numpy(), a + 1)
    x.mul_(2)  # and torch's writes are seen by tinygrad
    np.testing.assert_array_equal(g.numpy(), (a + 1) * 2)
    sl = ktg.from_torch(x[1:3])  # a contiguous slice: an interior pointer of the same buffer
    np.testing.assert_array_equal(sl.numpy(), (a[1:3] + 1) * 2)
    del x
    gc.collect()
    np.testing.assert_array_equal(g.numpy(), (a + 1) * 2)  # the tinygrad tensor keeps the torch storage alive


def test_tinygrad_to_torch_shares_the_buffer(tt):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = (Tensor(a, device="KTT") * 3).realize()
    kb = g.uop.base.buffer._buf
    Device["KTT"].synchronize()
    with hal.profile() as prof:
        x = ktg.to_torch(g)
    assert host_transfers(prof) == []
    assert x.device == torch.device("tt", 0) and x.dtype == torch.float32 and tuple(x.shape) == (3, 4)
    assert x.data_ptr() == kb.buf.data_ptr + kb.offset
    np.testing.assert_array_equal(x.cpu().numpy(), a * 3)
    x.add_(1)
    np.testing.assert_array_equal(g.numpy(), a * 3 + 1)
    np.testing.assert_array_equal(ktg.to_torch(g.T).cpu().numpy(), (a * 3 + 1).T)  # a view: made contiguous first
    i = ktg.to_torch(Tensor([1, 2, 3], dtype=dtypes.int32, device="KTT"))
    assert i.dtype == torch.int32 and i.cpu().tolist() == [1, 2, 3]
    m = ktg.to_torch(Tensor([True, False], device="KTT"))
    assert m.dtype == torch.bool and m.cpu().tolist() == [True, False]
    h = ktg.from_torch(torch.tensor([1.5, -2.0], dtype=torch.bfloat16).to(tt))
    assert h.dtype == dtypes.bfloat16 and ktg.to_torch(h).cpu().tolist() == [1.5, -2.0]
    held = interop.exported()
    del g
    gc.collect()
    np.testing.assert_array_equal(x.cpu().numpy(), a * 3 + 1)  # the torch storage keeps the tinygrad buffer alive
    del x, i, m
    gc.collect()
    assert interop.exported() == held - 3


def test_crossing_errors_are_typed(tt):
    with pytest.raises(BufferUseError, match="on tt"):
        ktg.from_torch(torch.ones(3))
    with pytest.raises(BufferUseError, match="contiguous"):
        ktg.from_torch(torch.ones(3, 4).to(tt).T)
    with pytest.raises(BufferUseError, match="on KTT"):
        ktg.to_torch(Tensor([1.0], device="PYTHON"))
    with pytest.raises(DtypeError, match="cannot cross"):
        ktg.to_torch(Tensor([1.0], dtype=dtypes.float16, device="KTT"))


class TinyNet:
    def __init__(self) -> None:
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def test_torch_and_tinygrad_models_train_interleaved(tt):
    g = np.random.default_rng(0)
    xs, ys = g.standard_normal((8, 8)).astype(np.float32), np.array([0, 1, 2, 3] * 2)

    def torch_model(device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
        x, y = torch.from_numpy(xs).to(device), torch.from_numpy(ys).to(device)
        return m, torch.optim.SGD(m.parameters(), lr=0.1), x, y

    def torch_step(m, opt, x, y) -> float:
        loss = torch.nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def tiny_model(device):
        Tensor.manual_seed(0)
        m = TinyNet()
        params = nn.state.get_parameters(m)
        for p in params:
            p.to_(device)
        x, y = Tensor(xs, device=device), Tensor(ys.astype(np.int32), device=device)
        return m, nn.optim.SGD(params, lr=0.1), x, y

    def tiny_step(m, opt, x, y) -> float:
        with Context(TRAINING=1):
            loss = m(x).sparse_categorical_crossentropy(y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.item()

    on_card = {"torch": [], "tinygrad": []}
    tm, tiny = torch_model(tt), tiny_model("KTT")
    host = ktg.stats()["host_total"]
    for _ in range(3):  # one step each, alternating, on the one open device
        on_card["torch"].append(torch_step(*tm))
        on_card["tinygrad"].append(tiny_step(*tiny))
    assert ktg.stats()["host_total"] == host
    ref_t, ref_g = torch_model("cpu"), tiny_model("PYTHON")
    np.testing.assert_allclose(on_card["torch"], [torch_step(*ref_t) for _ in range(3)], rtol=4e-3)
    np.testing.assert_allclose(on_card["tinygrad"], [tiny_step(*ref_g) for _ in range(3)], rtol=4e-3)
    # a torch activation feeds the tinygrad model and its output goes back, without copies
    with torch.no_grad():
        feats = tm[0][0](tm[2]).contiguous()
    out = ktg.to_torch(tiny[0].l2(ktg.from_torch(feats).relu()))
    ref = np.maximum(feats.cpu().numpy(), 0) @ tiny[0].l2.weight.numpy().T + tiny[0].l2.bias.numpy()
    np.testing.assert_allclose(out.cpu().numpy(), ref, rtol=0, atol=16 * TF32 * float(np.abs(ref).max()))


_SCRIPT = """
import gc, torch, numpy as np
{first}
{second}
from tinygrad import Device, Tensor
from kohakutt.frontends.tinygrad import interop
dev = kohakutt.device(0)
x = torch.arange(6, dtype=torch.float32).to(dev)
g = interop.from_torch(x) * 2
back = interop.to_torch(g + 1)
{close}
print(back.cpu().tolist())
"""


@pytest.mark.parametrize(
    "first, second, close",
    [
        ("import kohakutt", "import kohakutt.tinygrad", "Device['KTT'].finalize(); print((x * 3).cpu().tolist())"),
        ("import kohakutt.tinygrad", "import kohakutt", ""),
    ],
    ids=["tinygrad-closes-first", "exit-closes-both"],
)
def test_shutdown_in_either_order_is_clean(first, second, close):
    code = _SCRIPT.format(first=first, second=second, close=close)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = [sys.executable, "-c", textwrap.dedent(code)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[1.0, 3.0, 5.0, 7.0, 9.0, 11.0]"
    if close:
        assert r.stdout.strip().splitlines()[0] == "[0.0, 3.0, 6.0, 9.0, 12.0, 15.0]"


