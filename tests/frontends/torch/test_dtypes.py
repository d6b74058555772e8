"""int64 and float16 on tt against the CPU (docs/concepts/numerics.md, "Integers" and "float16").

int64: data movement, creation, add / sub / mul, compares, min / max, where, bitwise ops, sum and cumsum are exact in
64 bits (the CPU's int64 results, wrapping included); every other int64 op is checked against int32 and raises
IntegerOverflowError where a value would be lost: at once for host-visible values (Python numbers, creation), at the
next synchronization (as a CommandError naming the op) for values found on the card. The device stays usable.

float16: stored as IEEE half, computed in float32, rounded to half once when stored: the reference is the same op on
the CPU in float32 on the same half values, rounded to half.
"""

from __future__ import annotations

import io

import pytest
import torch
from tt_checks import gen, within

from kohakutt import CommandError, DtypeError, IntegerOverflowError, KohakuTTUnsupportedOperator

DEV = torch.device("tt", 0)
BIG = torch.tensor([2**40 + 3, -(2**35) - 1, 7, 2**62, -(2**63), 2**63 - 1, 0, -1, 2**31, -(2**31) - 1])


def same(actual: torch.Tensor, ref: torch.Tensor, what: str = "") -> None:
    actual = actual.cpu()
    assert actual.dtype == ref.dtype and actual.shape == ref.shape, f"{what}: {actual.dtype}{tuple(actual.shape)}"
    assert torch.equal(actual, ref), f"{what}: {actual} != {ref}"


def raises_at_sync(fn, op: str) -> None:
    """``fn()`` queues an op whose int64 values leave int32: the next read raises CommandError naming ``op``, caused
    by IntegerOverflowError; the device and other tensors are fine afterwards."""
    keep = torch.arange(5, device=DEV) * 3
    with pytest.raises(CommandError, match=op) as e:
        fn().cpu()
    assert isinstance(e.value.cause, IntegerOverflowError), e.value.cause
    same(keep, torch.arange(5) * 3, "a tensor made before the error")
    same(torch.tensor([2**40]).to(DEV) + 1, torch.tensor([2**40 + 1]), "an op after the error")


# ------------------------------------------------------------------------------------------------- int64, exact
def test_creation_holds_every_int64():
    same(torch.full((2,), 2**33, device=DEV), torch.full((2,), 2**33), "full 2**33")
    same(torch.full((3,), -(2**63), device=DEV), torch.full((3,), -(2**63)), "full int64 min")
    same(torch.arange(2**40, 2**40 + 5, device=DEV), torch.arange(2**40, 2**40 + 5), "arange past int32")
    same(torch.arange(0, 3 * 2**33, 2**33, device=DEV), torch.arange(0, 3 * 2**33, 2**33), "arange big step")
    same(BIG.to(DEV), BIG, "upload")
    same(torch.zeros(4, dtype=torch.int64, device=DEV) + 2**50, torch.zeros(4, dtype=torch.int64) + 2**50, "zeros")


def test_the_issues_examples_compute_exactly():
    same(torch.arange(3, device=DEV) * (2**31 - 1), torch.arange(3) * (2**31 - 1), "arange(3) * (2**31 - 1)")
    same(torch.arange(3, device=DEV) * 2**31, torch.arange(3) * 2**31, "t * 2**31")
    same(2**31 * torch.arange(3, device=DEV), 2**31 * torch.arange(3), "2**31 * t")


@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum", "minimum", "bitwise_and", "bitwise_or",
                                "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge"])  # fmt: skip
def test_int64_elementwise_equals_cpu_wrapping_included(op):
    a = BIG.repeat_interleave(BIG.numel())
    b = BIG.repeat(BIG.numel())
    fn = getattr(torch, op)
    same(fn(a.to(DEV), b.to(DEV)), fn(a, b), op)
    if op not in ("maximum", "minimum"):  # (which take tensors only)
        same(fn(a.to(DEV), 2**33 + 5), fn(a, 2**33 + 5), f"{op} with a number")


def test_int64_unary_and_selects():
    t = BIG.to(DEV)
    for name, f in [("neg", torch.neg), ("abs", torch.abs), ("sign", torch.sign), ("x * x", lambda x: x * x),
                    ("bitwise_not", torch.bitwise_not), ("clamp", lambda x: x.clamp(-(2**40), 2**45))]:  # fmt: skip
        same(f(t), f(BIG), name)
    mask = BIG > 0
    same(torch.where(mask.to(DEV), t, t * 3), torch.where(mask, BIG, BIG * 3), "where")
    small = torch.tensor([5, -(2**31), 2**31 - 1, 3])
    same(small.to(DEV).max(), small.max(), "max (a checked reduction) inside int32")
    same(small.to(DEV).argmin(), small.argmin(), "argmin inside int32")
    same(t.sort().values, BIG.sort().values, "sort values")
    same(t.sort().indices, BIG.sort().indices, "sort indices")


def test_int64_sums_and_scans_are_exact():
    x = torch.randint(-(2**40), 2**40, (64, 33), generator=gen(1))
    t = x.to(DEV)
    for kw in ({}, {"dim": 0}, {"dim": 1, "keepdim": True}):
        same(t.sum(**kw), x.sum(**kw), f"sum {kw}")
    same(t.cumsum(1), x.cumsum(1), "cumsum")
    same(BIG.to(DEV).sum(), BIG.sum(), "a sum that wraps modulo 2**64, as on the CPU")
    i32 = torch.full((100_000,), 2**20, dtype=torch.int32)
    same(i32.to(DEV).sum(), i32.sum(), "an int32 sum past int32 (torch returns int64)")
    same(torch.full((100_000,), 2**20, device=DEV).sum(), torch.full((100_000,), 2**20).sum(), "int64 sum")


def test_int64_data_movement_is_byte_exact():
    t = BIG.to(DEV)
    same(torch.cat([t, t.flip(0)]), torch.cat([BIG, BIG.flip(0)]), "cat / flip")
    same(t.view(2, 5).t().contiguous(), BIG.view(2, 5).t().contiguous(), "transpose")
    idx = torch.tensor([9, 0, 3, 3])
    same(t[idx.to(DEV)], BIG[idx], "index")
    same(t.gather(0, idx.to(DEV)), BIG.gather(0, idx), "gather")
    same(t.topk(3).values, BIG.topk(3).values, "topk")
    z = torch.zeros(10, dtype=torch.int64, device=DEV)
    z[idx.to(DEV)] = torch.tensor([2**50, 1, 2, 3]).to(DEV)
    ref = torch.zeros(10, dtype=torch.int64)
    ref[idx] = torch.tensor([2**50, 1, 2, 3])
    same(z, ref, "index_put")


def test_large_indices_are_refused_not_wrapped():
    x = torch.arange(10, device=DEV)
    with pytest.raises(CommandError, match="index"):
        x[torch.tensor([2**32 + 1]).to(DEV)].cpu()  # 2**32 + 1 would wrap to 1 in 32 bits
    same(x, torch.arange(10), "the tensor indexed")


# ----------------------------------------------------------------------------------------------- int64, checked
def test_checked_ops_raise_where_a_value_would_be_lost():
    t = BIG.to(DEV)
    raises_at_sync(lambda: t // 3, "floor_divide|div")
    raises_at_sync(lambda: t.float(), "copy")
    raises_at_sync(lambda: t.max(), "max")
    raises_at_sync(lambda: torch.tensor([2**20, 2**20, 3]).to(DEV).prod(), "prod")
    raises_at_sync(lambda: torch.tensor([3, 40]).to(DEV) ** 7, "pow")
    small = torch.tensor([-7, 5, 2**31 - 1, -(2**31)])
    same(small.to(DEV) // 3, small // 3, "checked ops compute exactly inside int32")
    same(small.to(DEV).float(), small.float(), "int64 -> float32 inside int32")
    same(torch.tensor([3, 40]).to(DEV) ** 5, torch.tensor([3, 40]) ** 5, "pow inside int32")


def test_host_visible_values_raise_at_once():
    i32 = torch.arange(3, dtype=torch.int32, device=DEV)
    with pytest.raises(IntegerOverflowError, match="does not fit int32"):
        i32 * 2**31  # a TypeError here would become torch's bare "unsupported operand" TypeError
    with pytest.raises(IntegerOverflowError, match="does not fit int32"):
        torch.full((2,), 2**33, dtype=torch.int32, device=DEV)
    with pytest.raises(IntegerOverflowError, match="int32"):
        torch.arange(2**31 - 2, 2**31 + 2, dtype=torch.int32, device=DEV)
    with pytest.raises(IntegerOverflowError, match="8388607"):
        torch.ones(1, dtype=torch.int64, device=DEV).expand(2**23).sum()
    same(i32 * 2, torch.arange(3, dtype=torch.int32) * 2, "the device after the errors")


def test_integer_matmul_is_refused_with_a_typed_error_not_a_bare_type_error():
    a = torch.tensor([[2**30 + 1, 3], [5, 7]])
    for f in (lambda x: x @ x, lambda x: x.int() @ x.int(), lambda x: torch.bmm(x[None], x[None])):
        with pytest.raises(KohakuTTUnsupportedOperator, match="matrix engine multiplies floats only"):
            f(a.to(DEV))


# ------------------------------------------------------------------------------------------------------ float16
def half_values() -> torch.Tensor:
    every = torch.arange(2**16, dtype=torch.int32).to(torch.uint16).view(torch.float16)
    return every[~every.isnan()]


def ref16(fn, *xs: torch.Tensor) -> torch.Tensor:
    """The CPU reference: the op in float32 on the half values, rounded to half."""
    return fn(*(x.float() for x in xs)).half()


def test_float16_is_stored_bit_for_bit():
    every = torch.arange(2**16, dtype=torch.int32).to(torch.uint16).view(torch.float16)
    back = every.to(DEV).cpu()
    assert back.dtype == torch.float16
    assert torch.equal(back.view(torch.uint16), every.view(torch.uint16))
    buf = io.BytesIO()
    torch.save({"h": every.to(DEV)}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location=DEV)["h"]
    assert loaded.device.type == "tt" and torch.equal(loaded.cpu().view(torch.uint16), every.view(torch.uint16))
    buf.seek(0)
    assert torch.equal(torch.load(buf, map_location="cpu")["h"].view(torch.uint16), every.view(torch.uint16))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "neg", "abs", "relu", "maximum", "where"])
def test_float16_elementwise_rounds_once(name):
    h = half_values()
    b = h.flip(0)
    fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "neg": lambda x, y: -x,
          "abs": lambda x, y: x.abs(), "relu": lambda x, y: x.relu(), "maximum": torch.maximum,
          "where": lambda x, y: torch.where(x > y, x, y * 2)}[name]  # fmt: skip
    got = fn(h.to(DEV), b.to(DEV))
    assert got.dtype == torch.float16
    want = ref16(fn, h, b)
    assert torch.equal(got.cpu().isnan(), want.isnan()), name
    ok = ~want.isnan()
    assert torch.equal(got.cpu()[ok], want[ok]), name


def test_float16_math_numbers_and_overflow():
    x = torch.linspace(-12, 12, 999).half()
    within(torch.exp(x.to(DEV)), ref16(torch.exp, x), ref16(torch.exp, x).float().abs() * 2**-10, "exp", nan_equal=True)
    same(x.to(DEV) * 0.1, (x.float() * 0.1).half(), "a Python float")
    big = torch.tensor([60000.0, 65504.0, 1e-8, -7e-5]).half()
    same(big.to(DEV) * 2, (big.float() * 2).half(), "overflow to inf, subnormals")
    same(torch.tensor([1e5, -1e9, 3e-8]).to(DEV).half(), torch.tensor([1e5, -1e9, 3e-8]).half(), "float32 -> half")


def test_float16_typecasts_and_mixed_dtypes():
    h = half_values()
    t = h.to(DEV)
    same(t.float(), h.float(), "half -> float32 is exact")
    same(t.to(torch.bfloat16), h.to(torch.bfloat16), "half -> bfloat16")
    same(t.bfloat16().half(), h.bfloat16().half(), "bfloat16 -> half")
    i = torch.arange(-3000, 3000, 7)
    same(i.to(DEV).half(), i.half(), "int64 -> half")
    same((t + t.bfloat16()).dtype and (t + t.bfloat16()).cpu(), h.float() + h.bfloat16().float(), "half + bf16")
    same((t * torch.ones(1, device=DEV)).cpu(), h.float(), "half * float32 is float32")


def test_float16_matmul_and_reductions():
    a = torch.randn(24, 40, generator=gen(2)).half()
    b = torch.randn(40, 16, generator=gen(3)).half()
    got = a.to(DEV) @ b.to(DEV)
    assert got.dtype == torch.float16
    ref = a.float() @ b.float()  # the card's float32 matmul model reads float16 through SrcA's 10 bits: 2^-9 of |a||b|
    within(got, ref, (a.float().abs() @ b.float().abs()) * 2**-9 + ref.abs() * 2**-11, "half matmul")
    x = torch.randn(8, 300, generator=gen(4)).half()
    within(x.to(DEV).sum(1), x.float().sum(1), x.float().abs().sum(1) * 2**-9 + x.float().sum(1).abs() * 2**-11,
           "half sum")  # fmt: skip
    within(x.to(DEV).softmax(1), ref16(lambda v: v.softmax(1), x), 2**-10, "half softmax")
    same(x.to(DEV).amax(1), x.amax(1), "half amax")


def test_float16_modules_half_and_autocast():
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16, generator=gen(5))
    model = torch.nn.Linear(16, 8).to(DEV)
    model.load_state_dict(lin.state_dict())
    model.half()
    assert model.weight.dtype == torch.float16
    y = model(x.half().to(DEV))
    ref = torch.nn.functional.linear(x.half().float(), lin.weight.half().float(), lin.bias.half().float())
    within(y, ref, ref.abs() * 2**-9 + 2**-8, "a half module")
    with torch.autocast("tt", dtype=torch.float16):
        z = torch.nn.functional.linear(x.to(DEV), lin.weight.to(DEV))
    assert z.dtype == torch.float16
    within(z, x.half().float() @ lin.weight.half().float().t(), 2**-7, "autocast to float16")


def test_float64_stays_refused_with_its_message():
    with pytest.raises(DtypeError, match=r"cannot be torch.float64.*Convert to float32"):
        torch.ones(2, dtype=torch.float64).to(DEV)
