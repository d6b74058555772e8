"""Which implementation runs an op: one decision, made by what the card has, taken by the simulator too.

The rule (kernels/registry.py): a ``ktt`` implementation is a program a card can launch; the provider an op runs with
is the same on the simulator and on the ttnn backend; anything else is TT-NN's kernel (on the sim, its model) or the
host CPU, counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.ir import DType, TensorSpec
from kohakutt.ir.numerics import UNSET
from kohakutt.kernels import registry, ttnn_io

# Ops the simulator implements and the ttnn backend does not yet: on a card they have no implementation to choose
# (docs/reference/limitations.md). The test below fails when one gains one, or a new gap appears.
CARD_GAPS = {
    "copy": "copies and casts between the HAL's stored dtypes have no TT-NN implementation yet",
    "typecast": "as copy",
    "multinomial": "TT-NN 0.81.1 has no sampling op and no own program is written",
}


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def _ops() -> list[str]:
    registry.lookup("add", "sim")  # loads every family
    return sorted({op for op, _, _ in registry.IMPLS})


@pytest.mark.parametrize("custom", ["1", "0"])
def test_the_simulator_chooses_what_the_card_would(custom, knobs):
    knobs(KTT_CUSTOM_KERNELS=custom)
    differ, gaps = [], set()
    for op in _ops():
        on_sim, on_card = registry.lookup(op, "sim"), registry.lookup(op, "ttnn")
        if on_card is None:
            gaps.add(op)
            continue
        if on_sim is None or on_sim.provider != on_card.provider:
            differ.append((op, on_sim, on_card))
    assert not differ, f"the simulator would run another provider than the card: {differ}"
    assert gaps == set(CARD_GAPS), f"ops the card cannot run changed: new {gaps - set(CARD_GAPS)}, " + (
        f"now implemented {set(CARD_GAPS) - gaps} (drop them from CARD_GAPS and limitations.md)"
    )


def test_the_simulator_and_the_card_refuse_the_same_calls():
    """Where both backends implement a provider, they declare the same supports, so a refused call passes on to the
    same provider on both (fallback's order is the card's)."""
    _ops()
    differ = [(op, p) for (op, b, p), impl in registry.IMPLS.items()
              if b == "sim" and (op, "ttnn", p) in registry.IMPLS
              and registry.IMPLS[(op, "ttnn", p)].supports is not impl.supports]  # fmt: skip
    assert not differ, f"supports differ between the simulator and the card: {differ}"


def test_a_ktt_implementation_is_a_program():
    """Provider "ktt" only for Kohaku-TT's own programs: each names its program builder; on a card each launches
    through the program path."""
    _ops()
    hostmath = [k for k, impl in registry.IMPLS.items() if impl.provider == "ktt" and impl.program is None]
    assert not hostmath, f"ktt implementations with no program: {hostmath}"
    on_card = [k for k, impl in registry.IMPLS.items() if k[1] == "ttnn" and impl.provider == "ktt"]
    assert on_card and all(registry.IMPLS[k].launch is not None for k in on_card)


def test_own_programs_win_unless_turned_off(knobs):
    knobs(KTT_CUSTOM_KERNELS="1")
    assert registry.lookup("silu_mul", "sim").provider == "ktt" == registry.lookup("silu_mul", "ttnn").provider
    knobs(KTT_CUSTOM_KERNELS="0")
    assert registry.lookup("silu_mul", "sim").provider == "ttnn" == registry.lookup("silu_mul", "ttnn").provider
    # a program the card cannot launch yet (layer_norm's has no launcher on the ttnn backend) is not chosen
    knobs(KTT_CUSTOM_KERNELS="1")
    assert registry.lookup("layer_norm", "sim").provider == "ttnn"


def test_the_knob_switches_only_ops_with_a_program_on_the_card(knobs):
    """KTT_CUSTOM_KERNELS moves an op between the own program and TT-NN's kernel only where the card has a ktt
    implementation (a program it launches); every other op keeps its provider, on the sim as on the card."""
    chosen = {}
    for custom in ("1", "0"):
        knobs(KTT_CUSTOM_KERNELS=custom)
        chosen[custom] = {op: (registry.choose(op, "sim"), registry.choose(op, "ttnn")) for op in _ops()}
    switched = set()
    for op in _ops():
        (sim_on, card_on), (sim_off, card_off) = chosen["1"][op], chosen["0"][op]
        if op in CARD_GAPS:
            continue
        assert sim_on == card_on and sim_off == card_off, op
        if (op, registry.CARD, "ktt") in registry.IMPLS:
            assert (card_on, card_off) == ("ktt", "ttnn"), op
            switched.add(op)
        else:
            assert card_on == card_off != "ktt", op
    assert {"bias_gelu", "silu_mul", "swiglu", "rotary_embedding", "rotary_embedding_backward",
            "scaled_dot_product_attention"} <= switched
    assert not {"layer_norm", "rms_norm", "conv", "sdpa_varlen", "softmax", "sum"} & switched


def test_host_runs_are_counted(dev):
    registry.host_runs(reset=True)
    x = kk.from_numpy(dev, np.array([0.0, 2.0, 0.0, -1.0], np.float32))
    idx, count = kk.run("nonzero", [x])
    assert kk.to_numpy(idx).reshape(-1).tolist()[: int(kk.to_numpy(count))] == [1, 3]
    assert registry.host_runs() == {"nonzero": 1}
    kk.run("add", [x, x])
    assert registry.host_runs(reset=True) == {"nonzero": 1}  # a device op is not counted
    assert registry.host_runs() == {}


def test_a_refused_call_goes_to_the_next_provider_on_every_backend():
    """TT-NN's pools take 1-d and 2-d windows: a 3-d max pool runs on the host, on the sim and on a card alike."""
    spec = TensorSpec((2, 4, 4, 4), DType.FLOAT32)
    attrs = {"kernel_size": (2, 2, 2), "stride": (2, 2, 2), "padding": (0, 0, 0), "dilation": (1, 1, 1),
             "ceil_mode": False, "return_indices": False}  # fmt: skip
    for backend in ("sim", "ttnn"):
        impl = registry.lookup("max_pool", backend)
        assert impl.provider == "ttnn" and impl.why_not([spec], attrs) == "TT-NN has no 3-d pools"
        assert registry.fallback(impl, [spec], attrs).provider == "host"


# ------------------------------------------------------------------------------------- a host op on a card
class _Tensor:
    def __init__(self, t: torch.Tensor, dtype: str, layout: str, device: Any):
        self.t, self.dtype, self.layout, self._device = t, dtype, layout, device
        self.shape = tuple(t.shape)

    def device(self) -> Any:
        return self._device


class _TT:
    """The few ttnn calls a host op makes on a card, over torch tensors (values kept as the card stores them)."""

    float32, bfloat16, bfloat8_b, bfloat4_b = "float32", "bfloat16", "bfloat8_b", "bfloat4_b"
    int32, uint32, uint16, uint8 = "int32", "uint32", "uint16", "uint8"
    TILE_LAYOUT, ROW_MAJOR_LAYOUT = "tile", "row_major"
    CAST = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int32": torch.int32, "uint32": torch.int64,
            "uint16": torch.int32, "uint8": torch.uint8}  # fmt: skip

    def from_torch(self, t: torch.Tensor, dtype: str, layout: str, device: Any) -> _Tensor:
        return _Tensor(t.to(self.CAST[dtype]), dtype, layout, device)

    def to_torch(self, x: _Tensor) -> torch.Tensor:
        return x.t

    def GetDefaultDevice(self) -> str:
        return "the open device"


def test_a_host_op_on_a_card_reads_and_writes_the_stored_values():
    tt, card = _TT(), object()
    impl = registry.lookup("index", "ttnn")
    assert impl.provider == "host"
    x = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5
    i = np.array([2, 0], np.int64)
    x_in = tt.from_torch(torch.from_numpy(x), "bfloat16", "row_major", card)
    i_in = tt.from_torch(torch.from_numpy(np.stack([i.astype(np.int32), (i >> 32).astype(np.int32)], -1)),
                         "int32", "row_major", card)  # fmt: skip
    specs = [TensorSpec((3, 4), DType.BFLOAT16), TensorSpec((2,), DType.INT64)]
    registry.host_runs(reset=True)
    out = ttnn_io.card_call(impl, tt, [x_in, i_in], specs, {"dims": [0]}, UNSET, [TensorSpec((2, 4), DType.BFLOAT16)])
    assert registry.host_runs() == {"index": 1}
    assert out.dtype == "bfloat16" and out.layout == "row_major" and out.device() is card
    np.testing.assert_array_equal(out.t.float().numpy(), x[i])
    # several results; an int64 result goes back as (low, high) word pairs; a number operand passes through
    impl = registry.lookup("nonzero", "ttnn")
    y = tt.from_torch(torch.tensor([0.0, 3.0, 0.0, 1.0]), "float32", "row_major", card)
    coords, count = ttnn_io.card_call(impl, tt, [y], [TensorSpec((4,), DType.FLOAT32)], {}, UNSET,
                                      [TensorSpec((4, 1), DType.INT32), TensorSpec((), DType.INT32)])  # fmt: skip
    assert coords.t.tolist() == [[1], [3], [0], [0]] and int(count.t) == 2
    # an int64 result is written back as its (low, high) int32 words, as the card stores int64
    impl = registry.lookup("index", "ttnn")
    big = np.array([2**40 + 5, -3, 7], np.int64)
    words = np.stack([big.astype(np.int32), (big >> 32).astype(np.int32)], -1)
    z = tt.from_torch(torch.from_numpy(words), "int32", "row_major", card)
    j = tt.from_torch(torch.from_numpy(np.array([[0, 0], [1, 0]], np.int32)), "int32", "row_major", card)
    out = ttnn_io.card_call(impl, tt, [z, j], [TensorSpec((3,), DType.INT64), TensorSpec((2,), DType.INT64)],
                            {"dims": [0]}, UNSET, [TensorSpec((2,), DType.INT64)])  # fmt: skip
    w = out.t.numpy().astype(np.int64)
    assert ((w[..., 0] & 0xFFFFFFFF) | (w[..., 1] << 32)).tolist() == [2**40 + 5, -3]


def test_a_host_op_on_a_card_takes_float16_as_the_simulator_does_and_empty_operands():
    """float16 computes in float32 between exact conversions (as kernels.runner does on the simulator); an operand the
    card keeps no tensor for (empty) reads as zeros of its dtype, and the results go to the open device."""
    tt, card = _TT(), object()
    impl = registry.lookup("sum", "ttnn", "host")
    halves = np.array([2048.0, 1.0009765625], np.float16)
    x = tt.from_torch(torch.from_numpy(halves.view(np.uint16).astype(np.int32)), "uint16", "row_major", card)
    out = ttnn_io.card_call(impl, tt, [x], [TensorSpec((2,), DType.FLOAT16)], {"dims": None, "keepdim": False,
                            "dtype": None}, UNSET, [TensorSpec((), DType.FLOAT16)])  # fmt: skip
    got = np.array(out.t.numpy().astype(np.uint16)).view(np.float16)
    assert got == np.float16(2050.0) == np.float16(float(halves.astype(np.float64).sum()))
    out = ttnn_io.card_call(impl, tt, [None], [TensorSpec((3, 0), DType.FLOAT32)], {"dims": [1], "keepdim": False,
                            "dtype": None}, UNSET, [TensorSpec((3,), DType.FLOAT32)])  # fmt: skip
    assert out.t.tolist() == [0.0, 0.0, 0.0] and out.device() == "the open device"
