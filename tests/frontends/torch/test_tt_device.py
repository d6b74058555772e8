"""The tt device as a torch device: storages, views, serialization, streams, events, memory, errors, autocast.

Most checks are bit-exact: copies, views, save / load and host transfers move bytes and never round. The one numeric
check is autocast: linear and matmul under ``torch.autocast("tt", dtype=torch.bfloat16)`` take bf16-rounded inputs,
accumulate in at least bf16 with fp32 partial sums (k = 64 products, each exact in fp32) and round the output to bf16
once, so against CPU float64 on the same bf16-rounded inputs the error is at most one bf16 rounding of the output
(2^-8 relative) plus the fp32 accumulation error (k * 2^-24 of the sum of |products|): rtol = 2^-7, atol = 1e-2.
"""

from __future__ import annotations

import copy
import gc
import io
import threading

import pytest
import torch

import kohakutt
from kohakutt.errors import CommandError, DeviceError, DtypeError
from kohakutt.frontends.torch import runtime
from kohakutt.hal import Command

DEV = torch.device("tt", 0)
STORED = [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.uint8, torch.uint16, torch.uint32]


def values(dtype: torch.dtype, n: int = 67) -> torch.Tensor:
    """``n`` CPU values of ``dtype`` covering its edge cases (signs, zeros, extremes, specials for floats)."""
    g = torch.Generator().manual_seed(n)
    if dtype is torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_floating_point:
        x = (torch.randn(n, generator=g) * 1e3).to(dtype)
        x[:6] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), torch.finfo(dtype).tiny])
        return x
    info = torch.iinfo(dtype)
    x = torch.randint(max(info.min, -(2**62)), min(info.max, 2**62), (n,), generator=g, dtype=torch.int64)
    x = x.to(dtype)
    x[:2] = torch.tensor([info.min, info.max], dtype=dtype)
    return x


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype is torch.bool or not a.dtype.is_floating_point:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# ------------------------------------------------------------------------------------------------------- storages
def test_untyped_storage_on_tt_is_a_hal_buffer_counted_by_the_allocator():
    gc.collect()  # earlier tests' garbage must not be freed between the two readings
    torch.tt.synchronize()
    before = torch.tt.memory_allocated()
    s = torch.UntypedStorage(1000, device="tt")
    assert s.device == torch.device("tt", 0) and s.nbytes() == 1000 and s.data_ptr() != 0
    buf, off = runtime.buffer_of(s.data_ptr())
    assert off == 0 and buf.nbytes >= 1000 and buf.device.chip_id == 0
    assert torch.tt.memory_allocated() >= before + 1000
    s1 = torch.UntypedStorage(64, device="tt:1")
    assert s1.device == torch.device("tt", 1) and runtime.buffer_of(s1.data_ptr())[0].device.chip_id == 1
    del s, s1
    gc.collect()
    torch.tt.synchronize()
    assert torch.tt.memory_allocated() == before


def test_storage_resize_keeps_the_bytes_it_had():
    x = torch.arange(16, dtype=torch.int32).to(DEV)
    s = x.untyped_storage()
    s.resize_(128)
    assert s.nbytes() == 128
    assert torch.equal(
        torch.empty(0, dtype=torch.int32, device=DEV).set_(s, 0, (16,), (1,)).cpu(), torch.arange(16, dtype=torch.int32)
    )
    s.resize_(8)
    assert s.nbytes() == 8
    assert torch.equal(
        torch.empty(0, dtype=torch.int32, device=DEV).set_(s, 0, (2,), (1,)).cpu(),
        torch.tensor([0, 1], dtype=torch.int32),
    )


def test_tensor_resize_grows_the_storage_and_keeps_the_prefix():
    x = torch.arange(6.0).to(DEV)
    x.resize_(4, 4)
    assert x.shape == (4, 4) and x.untyped_storage().nbytes() >= 64
    assert torch.equal(x.reshape(-1)[:6].cpu(), torch.arange(6.0))


def test_tensors_on_the_second_chip():
    x = torch.arange(5.0).to("tt:1")
    assert x.device == torch.device("tt", 1)
    y = torch.empty(3, device="tt:1")
    assert y.device == torch.device("tt", 1) and y.untyped_storage().device == torch.device("tt", 1)
    assert torch.equal(x.cpu(), torch.arange(5.0))
    assert torch.equal(x.to("tt:0").cpu(), torch.arange(5.0))


# ------------------------------------------------------------------------------------------------------- views
def test_views_share_storage_and_writes_through_them_land_in_the_base():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(DEV)
    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    row, tr, flat = base[0], base.t(), base.view(12)
    for v in (row, tr, flat):
        assert v._base is base and v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert tr.stride() == (1, 4) and row.storage_offset() == 0 and base[2].storage_offset() == 8
    row.fill_(-1.0)
    ref[0] = -1.0
    tr[1, 2] = 100.0  # base[2, 1]
    ref[2, 1] = 100.0
    flat[11] = 7.0
    ref.view(12)[11] = 7.0
    base[1].mul_(2)
    ref[1] *= 2
    assert torch.equal(base.cpu(), ref)
    assert torch.equal(tr.cpu(), ref.t()) and torch.equal(base[:, 1::2].cpu(), ref[:, 1::2])


def test_copy_into_a_strided_view_writes_only_its_elements():
    base = torch.zeros(4, 6).to(DEV)
    src = torch.arange(12.0).reshape(4, 3)
    base[:, ::2] = src.to(DEV)
    ref = torch.zeros(4, 6)
    ref[:, ::2] = src
    assert torch.equal(base.cpu(), ref)
    base[:, 1::2].copy_(src)  # from the CPU straight into a strided tt view
    ref[:, 1::2] = src
    assert torch.equal(base.cpu(), ref)


# --------------------------------------------------------------------------------------------------- deepcopy, save
def test_deepcopy_of_a_module_copies_storage_and_keeps_shared_parameters_shared():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    m[1].weight = m[0].weight  # tied
    m = m.to(DEV)
    c = copy.deepcopy(m)
    assert c[0].weight.device == DEV and c[1].weight is c[0].weight
    assert c[0].weight.untyped_storage().data_ptr() != m[0].weight.untyped_storage().data_ptr()
    assert torch.equal(c[0].weight.cpu(), m[0].weight.cpu()) and torch.equal(c[0].bias.cpu(), m[0].bias.cpu())
    with torch.no_grad():
        c[0].weight.zero_()
    assert m[0].weight.cpu().abs().sum() > 0


@pytest.mark.parametrize("dtype", STORED, ids=str)
def test_save_load_round_trips_every_stored_dtype_bit_for_bit(dtype):
    x = values(dtype).to(DEV)
    buf = io.BytesIO()
    torch.save(x, buf)
    buf.seek(0)
    back = torch.load(buf)  # saved on tt: loads onto tt
    assert back.device == DEV and same_bits(back.cpu(), x.cpu()) and same_bits(x.cpu(), values(dtype))
    buf.seek(0)
    assert same_bits(torch.load(buf, map_location="cpu"), values(dtype))
    cpu = io.BytesIO()
    torch.save(values(dtype), cpu)
    cpu.seek(0)
    onto = torch.load(cpu, map_location="tt")
    assert onto.device == DEV and same_bits(onto.cpu(), values(dtype))


def test_save_load_keeps_aliasing_between_views():
    base = torch.arange(20.0).to(DEV)
    state = {"base": base, "head": base[:5], "grid": base.view(4, 5), "t": base.view(4, 5).t()}
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    back = torch.load(buf, map_location="tt")
    ptrs = {k: v.untyped_storage().data_ptr() for k, v in back.items()}
    assert len(set(ptrs.values())) == 1 and all(v.device == DEV for v in back.values())
    back["head"].fill_(-3.0)
    back["t"][4, 0] = 99.0  # grid[0, 4] = base[4]
    ref = torch.arange(20.0)
    ref[:5] = -3.0
    ref[4] = 99.0
    assert torch.equal(back["base"].cpu(), ref) and torch.equal(back["grid"].cpu(), ref.view(4, 5))


def test_state_dict_round_trip_into_a_module_on_tt():
    torch.manual_seed(1)
    m = torch.nn.Linear(16, 4).to(DEV)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = torch.nn.Linear(16, 4).to(DEV)
    m2.load_state_dict(torch.load(buf, map_location="tt"))
    assert torch.equal(m2.weight.cpu(), m.weight.cpu()) and torch.equal(m2.bias.cpu(), m.bias.cpu())


# ------------------------------------------------------------------------------------------------ pinned, async
def test_pinned_memory_and_non_blocking_copies():
    src = torch.randn(4096).pin_memory()
    assert src.is_pinned() and not torch.randn(4).is_pinned()
    x = src.to(DEV, non_blocking=True)
    back = torch.empty(4096).pin_memory()
    back.copy_(x, non_blocking=True)
    torch.tt.synchronize()
    assert torch.equal(back, src)


def test_ops_return_at_once_and_host_reads_wait(gate):
    x = torch.ones(64, 64).to(DEV)  # queued behind the gate as well
    y = (x * 3.0 + 1.0).sum()  # queued: the stream cannot have run it
    stream = runtime.device(0).default_stream
    assert not stream.query() and not torch.tt.current_stream().query()
    threading.Timer(0.2, gate.set).start()
    assert y.item() == 64 * 64 * 4.0  # waits for the gate, then for the ops
    assert stream.query()


def test_synchronize_waits_for_the_queue(gate):
    x = torch.full((32, 32), 2.0).to(DEV)
    y = x * x
    threading.Timer(0.1, gate.set).start()
    torch.tt.synchronize()
    assert runtime.device(0).default_stream.query()
    assert torch.equal(y.cpu(), torch.full((32, 32), 4.0))


def test_accelerator_synchronize_waits_for_the_queue(gate):
    y = torch.ones(8).to(DEV) + 1
    threading.Timer(0.1, gate.set).start()
    torch.accelerator.synchronize()
    assert runtime.device(0).default_stream.query() and torch.equal(y.cpu(), torch.full((8,), 2.0))


# ------------------------------------------------------------------------------------------------ streams, events
def test_stream_and_event_order_work_across_streams():
    s = torch.tt.Stream()
    assert s.device == DEV and s.stream_id != 0 and torch.tt.current_stream().stream_id == 0
    g = threading.Event()
    runtime.stream_by_id(0, s.stream_id).enqueue(Command("gate", g.wait))
    x = torch.arange(1024.0).to(DEV)  # written on the default stream
    s.wait_stream(torch.tt.current_stream())  # s reads x: it waits for that write (as CUDA code must)
    with torch.tt.stream(s):
        assert torch.tt.current_stream().stream_id == s.stream_id
        y = x * 2.0
        done = s.record_event()
    assert torch.tt.current_stream().stream_id == 0
    assert not done.query() and not s.query()
    torch.tt.current_stream().wait_event(done)  # later default-stream work waits for s
    z = y + 1.0
    g.set()
    done.synchronize()
    assert done.query()
    s.synchronize()
    assert s.query()
    assert torch.equal(z.cpu(), torch.arange(1024.0) * 2 + 1)


def test_event_elapsed_time_is_simulated_device_time():
    x = torch.randn(256, 256).to(DEV)
    start, mid, end = (torch.tt.Event(enable_timing=True) for _ in range(3))
    start.record()
    for _ in range(4):
        x = x * 1.5
    mid.record()
    for _ in range(4):
        x = x * 1.5
    end.record()
    end.synchronize()
    a, b, total = start.elapsed_time(mid), mid.elapsed_time(end), start.elapsed_time(end)
    assert a > 0 and b > 0 and total == pytest.approx(a + b, rel=1e-6, abs=2e-3)
    plain = torch.Event(device="tt", enable_timing=True)  # PyTorch's own event class works too
    plain.record()
    plain.synchronize()
    assert start.elapsed_time(plain) >= total - 1e-3
    with pytest.raises(RuntimeError, match="recorded"):
        start.elapsed_time(torch.tt.Event(enable_timing=True))
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.tt.Event().elapsed_time(end)
    with pytest.raises(TypeError):
        start.elapsed_time(3)


def test_default_stream_and_stream_context():
    d = torch.tt.default_stream()
    assert d.stream_id == 0 and d.device == DEV
    s = torch.tt.Stream()
    with torch.tt.stream(s):
        assert torch.tt.current_stream() == s
    with torch.tt.stream(None):
        assert torch.tt.current_stream().stream_id == 0


# --------------------------------------------------------------------------------------------------- queued errors
def test_an_error_in_a_queued_op_surfaces_at_the_next_sync_naming_the_op(gate):
    x = torch.randn(4, 8).to(DEV)
    idx = torch.tensor([0, 9]).to(DEV)  # 9 is outside the 4 rows: found only when the kernel runs
    y = torch.index_select(x, 0, idx)  # queued behind the gate: no error yet
    assert y.shape == (2, 8)
    gate.set()
    with pytest.raises(CommandError) as err:
        torch.tt.synchronize()
    assert err.value.command in str(err.value) and "9" in str(err.value)
    ok = torch.ones(3).to(DEV) * 2  # the device stays usable, and the error was reported once
    assert torch.equal(ok.cpu(), torch.full((3,), 2.0))
    torch.tt.synchronize()


def test_a_queued_error_surfaces_at_a_host_read_too():
    x = torch.randn(4, 8).to(DEV)
    bad = torch.index_select(x, 0, torch.tensor([5]).to(DEV))
    with pytest.raises(CommandError):
        bad.cpu()
    assert torch.equal(x.cpu(), x.cpu())


# --------------------------------------------------------------------------------------------------- torch.tt API
def test_torch_tt_device_functions():
    from kohakutt import hal

    assert torch.tt.is_available() and torch.tt.device_count() == hal.device_count() >= 2
    assert torch.tt.current_device() == 0 and torch.tt.is_initialized() and torch.tt.is_bf16_supported()
    torch.tt.set_device(1)
    try:
        assert torch.tt.current_device() == 1 and torch.empty(2, device="tt").device == torch.device("tt", 1)
    finally:
        torch.tt.set_device(0)
    with torch.tt.device(1):
        assert torch.tt.current_device() == 1
    assert torch.tt.current_device() == 0


def test_torch_tt_device_properties_name_and_memory_summary():
    from kohakutt.hal.card import P150A

    p = torch.tt.get_device_properties(0)
    assert (p.name, p.total_memory, p.multi_processor_count) == (P150A.name, P150A.dram_bytes, P150A.cores)
    assert torch.tt.get_device_name() == P150A.name and torch.tt.get_device_capability() == (0, 0)
    x = torch.empty(3 << 20, dtype=torch.uint8, device=DEV)
    summary = torch.tt.memory_summary()
    mib = f"{torch.tt.memory_allocated() / 2**20:.2f} MiB"
    assert P150A.name in summary and mib in summary.splitlines()[4], summary
    del x


def test_torch_tt_memory_statistics_follow_allocations():
    gc.collect()
    torch.tt.synchronize()  # runs the frees of everything collected
    torch.tt.reset_peak_memory_stats()
    a0, peak0 = torch.tt.memory_allocated(), torch.tt.max_memory_allocated()
    assert peak0 == a0
    x = torch.empty(1 << 20, dtype=torch.uint8, device=DEV)
    assert torch.tt.memory_allocated() == a0 + (1 << 20) and torch.tt.max_memory_allocated() >= a0 + (1 << 20)
    assert torch.tt.memory_reserved() >= torch.tt.memory_allocated()
    st = torch.tt.memory_stats()
    assert st["allocated_bytes.all.current"] == torch.tt.memory_allocated()
    assert st["allocated_bytes.all.peak"] == torch.tt.max_memory_allocated()
    free, total = torch.tt.mem_get_info()
    assert 0 < free < total
    del x
    torch.tt.synchronize()  # frees are ordered on the stream
    torch.tt.empty_cache()
    assert torch.tt.memory_allocated() == a0 and torch.tt.max_memory_allocated() >= a0 + (1 << 20)
    torch.tt.reset_peak_memory_stats()
    assert torch.tt.max_memory_allocated() == a0


def test_rng_state_round_trips_and_manual_seed_sets_it():
    torch.tt.manual_seed(1234)
    state = torch.tt.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,) and torch.tt.initial_seed() == 1234
    a = torch.randn(64, device=DEV)
    b = torch.randn(64, device=DEV)
    torch.tt.set_rng_state(state)
    assert torch.equal(torch.randn(64, device=DEV).cpu(), a.cpu()) and not torch.equal(a.cpu(), b.cpu())
    torch.tt.manual_seed(1234)
    assert torch.equal(torch.randn(64, device=DEV).cpu(), a.cpu())
    torch.manual_seed(1234)  # torch's global seed reaches the tt device too
    assert torch.equal(torch.tt.get_rng_state(), state)
    with pytest.raises(ValueError, match="16 bytes"):
        torch.tt.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_torch_accelerator_sees_tt():
    assert torch.accelerator.is_available() and torch.accelerator.current_accelerator() == torch.device("tt")
    assert torch.accelerator.device_count() == torch.tt.device_count()
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() == torch.tt.memory_allocated()
    assert torch.accelerator.max_memory_allocated() == torch.tt.max_memory_allocated()
    s = torch.accelerator.current_stream()
    assert s.device == DEV and s.stream_id == 0
    torch.accelerator.set_device_index(1)
    try:
        assert torch.accelerator.current_device_index() == 1 and torch.tt.current_device() == 1
    finally:
        torch.accelerator.set_device_index(0)


# --------------------------------------------------------------------------------------------------------- autocast
def test_autocast_runs_linear_and_matmul_in_bf16():
    torch.manual_seed(2)
    a, w, b = torch.randn(16, 64), torch.randn(32, 64), torch.randn(32)
    ref = (a.bfloat16().double() @ w.bfloat16().double().t()) + b.bfloat16().double()
    at, wt, bt = a.to(DEV), w.to(DEV), b.to(DEV)
    assert torch.get_autocast_dtype("tt") == torch.bfloat16
    with torch.autocast("tt", dtype=torch.bfloat16), kohakutt.numerics(fidelity="HiFi4", fp32_acc=True):
        lin = torch.nn.functional.linear(at, wt, bt)
        mm = at @ wt.t()
        added = at + 1.0  # not on the lower-precision list: keeps float32
        sm = torch.softmax(lin, -1)  # on the float32 list
    assert lin.dtype == mm.dtype == torch.bfloat16 and added.dtype == torch.float32 and sm.dtype == torch.float32
    # exact bf16 products summed in fp32, the sum and the bias add each rounded to bf16 once
    torch.testing.assert_close(lin.cpu().double(), ref, rtol=2**-7, atol=1e-2)
    torch.testing.assert_close(mm.cpu().double(), ref - b.bfloat16().double(), rtol=2**-8, atol=1e-3)
    assert torch.nn.functional.linear(at, wt, bt).dtype == torch.float32  # outside the region: float32 again


def test_autocast_rounds_the_inputs_to_bf16_before_the_matmul():
    # 1 + 2^-10 is 1 in bf16: in float32 the difference survives (2^-10), after the cast it is exactly 0
    a = torch.tensor([[1 + 2**-10, -1.0]]).to(DEV)
    w = torch.ones(2, 1).to(DEV)
    with kohakutt.numerics(fidelity="HiFi4", fp32_acc=True):
        assert (a @ w).item() == 2**-10
        with torch.autocast("tt"):
            assert (a @ w).item() == 0.0


def test_autocast_training_step_keeps_float32_parameters_and_gradients():
    torch.manual_seed(3)
    m = torch.nn.Linear(32, 8).to(DEV)
    x = torch.randn(4, 32).to(DEV)
    with torch.autocast("tt"):
        out = m(x)
        assert out.dtype == torch.bfloat16
        loss = out.float().square().mean()
    loss.backward()
    assert m.weight.grad is not None and m.weight.grad.dtype == torch.float32 and m.weight.grad.device == DEV
    assert torch.isfinite(m.weight.grad.cpu()).all()


def test_autocast_casts_a_weight_once_per_region_and_gradients_see_every_use():
    """A weight used three times in one region is cast once (PyTorch's autocast cache); its gradient still sums the
    three uses; the cache empties when the region ends."""
    from kohakutt import hal
    from kohakutt.frontends.torch import amp

    torch.manual_seed(4)
    w = torch.randn(32, 32).to(DEV).requires_grad_()
    x = torch.randn(4, 32).to(DEV)

    def run(cache: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
        w.grad = None
        with hal.profile() as prof, torch.autocast("tt", cache_enabled=cache):
            y = torch.mm(torch.mm(torch.mm(x, w), w), w)
            assert len(amp._cache()) == (1 if cache else 0)
        y.float().sum().backward()
        torch.tt.synchronize()
        return y.detach().cpu(), w.grad.cpu(), sum(r.name == "copy" for r in prof.records)

    y1, g1, casts1 = run(True)
    assert not amp._cache()  # emptied with the region
    y0, g0, casts0 = run(False)
    assert casts1 == casts0 - 2  # x once, w once, instead of w three times
    assert torch.equal(y1, y0)
    # with one cast, the three uses' bf16 gradients meet in bf16 before the cast's backward (PyTorch's autocast
    # cache does the same); without it, in float32: they differ by bf16 roundings of the sum (2^-8 relative each)
    torch.testing.assert_close(g1, g0, rtol=2 * 2**-8, atol=2 * 2**-8 * float(g0.abs().max()))


# ----------------------------------------------------------------------------------------------------- errors
def test_mixing_devices_raises_as_cuda_does():
    x = torch.ones(3, 4).to(DEV)
    with pytest.raises(
        RuntimeError,
        match=r"Expected all tensors to be on the same device, but found at least two "
        r"devices, (cpu and tt:0|tt:0 and cpu)!",
    ):
        x + torch.ones(3, 4)
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(3, 4).to("tt:1")
    assert torch.equal((x + torch.tensor(2.0)).cpu(), torch.full((3, 4), 3.0))  # a 0-dim CPU tensor is a scalar


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.complex128, torch.int8], ids=str)
def test_dtypes_the_card_does_not_hold_raise_dtype_error(dtype):
    with pytest.raises(DtypeError, match="cannot be") as err:
        torch.ones(3, dtype=dtype).to(DEV)
    assert isinstance(err.value, TypeError) and "Convert to" in str(err.value)
    with pytest.raises(DtypeError):
        torch.zeros(2, dtype=dtype, device=DEV)
    with pytest.raises(DtypeError):
        torch.ones(2).to(DEV).to(dtype)


def test_out_of_memory_is_typed_reports_statistics_and_leaves_the_device_usable():
    keep = torch.arange(100.0).to(DEV)
    ooms = torch.tt.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as err:
        torch.empty(1 << 40, dtype=torch.uint8, device=DEV)
    msg = str(err.value)
    assert "out of DRAM memory" in msg and "bytes allocated" in msg and "free" in msg
    assert torch.tt.memory_stats()["num_ooms"] == ooms + 1
    assert torch.equal(keep.cpu(), torch.arange(100.0))
    assert torch.equal((keep + 1).cpu(), torch.arange(100.0) + 1)


def test_use_after_the_device_is_closed_raises_and_the_device_reopens():
    x = torch.arange(4.0).to("tt:1")
    runtime.device(1).close()
    with pytest.raises(DeviceError, match="was closed"):
        x.cpu()
    with pytest.raises(DeviceError, match="was closed"):
        x + 1
    y = torch.ones(2).to("tt:1")  # a new tensor reopens the chip, at addresses the old tensor never had
    assert torch.equal(y.cpu(), torch.ones(2))
    del x
    gc.collect()
    assert torch.equal(y.cpu(), torch.ones(2))
