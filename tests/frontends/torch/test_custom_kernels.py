"""Hand-written programs as torch ops (``kohakutt.kernels.op``): the example's gated GELU and small programs written
here, each against torch on the CPU in float64; registration checked by ``torch.library.opcheck``; stream order,
capture, compile, autograd; typed errors that leave the device usable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kohakutt
import kohakutt.kernels as kk
from kohakutt.errors import CommandError, DtypeError, ProgramError
from kohakutt.hal import host_build

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples" / "kernels" / "python"))

from gated_gelu_op import CORES, HERE, gated_gelu, gated_gelu_program  # noqa: E402

dev = torch.device("tt:0")


def ref(a, b, scale):
    return (F.gelu(a.double()) * b.double() * scale).to(a.dtype)


def close(got, want, tol=2**-6):
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(32, 32), (64, 96), (5, 7), (2, 3, 40, 50)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gated_gelu_matches_cpu(shape, dtype):
    torch.manual_seed(0)
    a, b = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
    got = gated_gelu(a.to(dev), b.to(dev), 0.75)
    assert got.device.type == "tt" and got.shape == a.shape and got.dtype == dtype
    # float32 operands are unpacked to TF32 by copy_tile: the card's rounding, not a CPU float32's
    close(got, ref(a, b, 0.75), 2**-6 if dtype == torch.bfloat16 else 2e-3)


def test_strided_views_are_staged():
    torch.manual_seed(1)
    a, b = torch.randn(96, 64).bfloat16(), torch.randn(64, 128).bfloat16()
    ta, tb = a.to(dev), b.to(dev)
    got = gated_gelu(ta.t(), tb[:, 16:112], 2.0)  # a transpose and a strided slice
    close(got, ref(a.t(), b[:, 16:112], 2.0))


def test_new_shapes_and_scales_build_and_compile_nothing():
    op = kk.program_op("kohakutt_example::gated_gelu")
    a = torch.randn(64, 64).bfloat16()
    gated_gelu(a.to(dev), a.to(dev), 1.0).cpu()  # the bf16 program is built (and its kernels compiled) once
    built, builds = op.stats["programs_built"], host_build.stats["builds"]
    for i, shape in enumerate([(32, 32), (17, 300), (4, 64, 64), (1, 1), (128, 40)]):
        x = torch.randn(shape).bfloat16()
        close(gated_gelu(x.to(dev), x.to(dev), 0.1 * (i + 1)), ref(x, x, 0.1 * (i + 1)))
    assert op.stats["programs_built"] == built
    assert host_build.stats["builds"] == builds


def test_stream_order_with_builtin_ops(gate):
    a, b = torch.randn(64, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    ta, tb = a.to(dev), b.to(dev)
    # the gate is closed: everything is queued before any of it runs, and must run in order
    x = ta * 2
    y = gated_gelu(x, tb, 1.0)
    z = y - x
    gate.set()
    want = ref((a * 2).bfloat16(), b, 1.0)
    close(z, (want.double() - (a * 2).double()).bfloat16(), 2**-5)


def test_opcheck():
    a, b = torch.randn(32, 64).bfloat16().to(dev), torch.randn(32, 64).bfloat16().to(dev)
    torch.library.opcheck(torch.ops.kohakutt_example.gated_gelu.default, (a, b, 0.5),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))  # fmt: skip


def test_capture_and_compile():
    a, b = torch.randn(64, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    step = kohakutt.capture(lambda x, y: gated_gelu(x, y, 0.5) * 2, a.to(dev), b.to(dev))
    a2, b2 = torch.randn(64, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    close(step(a2.to(dev), b2.to(dev)), (ref(a2, b2, 0.5).double() * 2).bfloat16())
    fn = torch.compile(lambda x, y: gated_gelu(x, y, 0.5) + x, backend="ktt_tt", fullgraph=True)
    for _ in range(3):
        close(fn(a.to(dev), b.to(dev)), (ref(a, b, 0.5).double() + a.double()).bfloat16(), 2**-5)


# ------------------------------------------------------------------------- an op with an autograd formula
def _unary_program(name: str, compute: str):
    """A one-input element-wise program whose compute kernel is ``compute`` (C++ text) over CB 0 -> CB 16."""

    def build(sig: kk.Signature) -> kk.Program:
        x, out = sig.inputs[0], sig.outputs[0]

        def args(t, rt):
            split = kk.split_work(rt["tiles"], CORES)
            return {"reader": {c: [t[x.name].address, t[x.name].address, s, n] for c, s, n in split},
                    "compute": {c: [n, rt.get("scale", 0)] for c, s, n in split},
                    "writer": {c: [t[out.name].address, s, n] for c, s, n in split}}  # fmt: skip

        return kk.Program(name, [
            kk.Kernel("reader", HERE / "reader.cpp", CORES, compile_time_args=[*x.accessor_args(), *x.accessor_args()]),
            kk.Kernel("compute", compute, CORES, fp32_dest_acc_en=True),
            kk.Kernel("writer", HERE / "writer.cpp", CORES, compile_time_args=out.accessor_args())],
            [kk.CircularBuffer(i, x.format, x.cb_page_size(), 2, CORES) for i in (0, 1)]
            + [kk.CircularBuffer(16, out.format, out.cb_page_size(), 2, CORES)],
            runtime_args=kk.by_name(sig, args), tensors=sig.names)  # fmt: skip

    return build


SCALE_CPP = """
#include <cstdint>
#include "api/compute/compute_kernel_api.h"
#include "api/compute/eltwise_unary/binop_with_scalar.h"
#include "api/compute/tile_move_copy.h"
// out = x * scale (the reader sends x twice: CB 1 is drained unread)
void kernel_main() {
    const uint32_t count = get_arg_val<uint32_t>(0);
    const uint32_t scale = get_arg_val<uint32_t>(1);
    compute_kernel_hw_startup(tt::CBIndex::c_0, tt::CBIndex::c_16);
    for (uint32_t i = 0; i < count; ++i) {
        cb_wait_front(tt::CBIndex::c_0, 1);
        cb_wait_front(tt::CBIndex::c_1, 1);
        tile_regs_acquire();
        copy_init(tt::CBIndex::c_0);
        copy_tile(tt::CBIndex::c_0, 0, 0);
        binop_with_scalar_tile_init();
        mul_unary_tile(0, scale);
        tile_regs_commit();
        cb_pop_front(tt::CBIndex::c_0, 1);
        cb_pop_front(tt::CBIndex::c_1, 1);
        cb_reserve_back(tt::CBIndex::c_16, 1);
        tile_regs_wait();
        pack_tile(0, tt::CBIndex::c_16);
        tile_regs_release();
        cb_push_back(tt::CBIndex::c_16, 1);
    }
}
"""


def _scale_backward(ctx, grad):
    return torch.ops.ktt_test.scale(grad, ctx.scale), None


def _scale_setup(ctx, inputs, output):
    ctx.scale = inputs[1]


@kk.op("ktt_test::scale(Tensor x, float scale) -> Tensor", _unary_program("scale", SCALE_CPP),
       backward=_scale_backward, setup_context=_scale_setup)  # fmt: skip
def scale_op(x, scale):
    return kk.Call(inputs={"x": x}, outputs={"y": (x.shape, x.dtype)},
                   runtime={"tiles": kk.tile_count(x), "scale": kk.bits(scale)})  # fmt: skip


def test_autograd_formula():
    x = torch.randn(40, 70, dtype=torch.float32)
    xt = x.to(dev).requires_grad_()
    y = scale_op(xt, 3.0)
    (y * y).sum().backward()
    xc = x.clone().requires_grad_()
    ((xc * 3.0) * (xc * 3.0)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=2e-3, atol=2e-3)


def test_ktt_tt_aot_trains_through_the_op():
    x = torch.randn(32, 32)
    w = torch.randn(32, 32, requires_grad=True)
    wt = w.detach().to(dev).requires_grad_()
    fn = torch.compile(lambda w_, x_: (scale_op(w_ @ x_, 0.5) ** 2).mean(), backend="ktt_tt_aot")
    for _ in range(3):
        wt.grad = None
        fn(wt, x.to(dev)).backward()
    ((w @ x * 0.5) ** 2).mean().backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=2e-2, atol=2e-3)


# -------------------------------------------------------------------------------------------------- errors
def test_float_runtime_value_is_refused_at_the_call():
    @kk.op("ktt_test::bad_runtime(Tensor x) -> Tensor", _unary_program("bad_runtime", SCALE_CPP))
    def bad(x):
        return kk.Call(inputs={"x": x}, outputs={"y": (x.shape, x.dtype)}, runtime={"tiles": 1, "scale": 0.5})

    with pytest.raises(ProgramError, match=r"runtime value 'scale' is 0.5.*kk.bits"):
        bad(torch.ones(32, 32).to(dev))


def test_cpu_input_and_int64_are_refused():
    with pytest.raises(RuntimeError, match=r"tt|cpu|device"):
        gated_gelu(torch.ones(4, 4).to(dev), torch.ones(4, 4), 1.0)
    with pytest.raises(DtypeError, match="int64"):
        gated_gelu(torch.ones(4, 4, dtype=torch.int64).to(dev), torch.ones(4, 4, dtype=torch.int64).to(dev))


def test_broken_rule_is_one_program_error_before_anything_runs():
    def build(sig):
        prog = _unary_program("too_big", SCALE_CPP)(sig)
        prog.cbs = (*prog.cbs[:2], kk.CircularBuffer(16, "float32", 4096, 400, CORES))  # 1.6 MB: more than L1
        return prog

    @kk.op("ktt_test::too_big(Tensor x) -> Tensor", build)
    def too_big(x):
        return kk.Call(inputs={"x": x}, outputs={"y": (x.shape, x.dtype)}, runtime={"tiles": kk.tile_count(x)})

    x = torch.ones(32, 32).to(dev)
    with pytest.raises(ProgramError, match=r"circular buffers on core .* need"):
        too_big(x)
    close(scale_op(x, 2.0), torch.full((32, 32), 2.0))  # the device is usable


DEADLOCK_CPP = SCALE_CPP.replace("cb_wait_front(tt::CBIndex::c_1, 1);", "cb_wait_front(tt::CBIndex::c_2, 1);")


def test_a_kernel_that_deadlocks_names_itself_and_leaves_the_device_usable():
    @kk.op("ktt_test::stuck(Tensor x) -> Tensor", _unary_program("stuck", DEADLOCK_CPP))
    def stuck(x):
        return kk.Call(inputs={"x": x}, outputs={"y": (x.shape, x.dtype)},
                       runtime={"tiles": kk.tile_count(x), "scale": kk.bits(1.0)})  # fmt: skip

    x = torch.ones(32, 32).to(dev)
    stuck(x)
    with pytest.raises(CommandError, match=r"compute.*cb_wait_front") as info:
        torch.tt.synchronize()
    assert isinstance(info.value.cause, ProgramError)
    close(scale_op(x, 2.0), torch.full((32, 32), 2.0))


def test_builder_and_call_must_agree_on_tensors():
    @kk.op("ktt_test::renamed(Tensor x) -> Tensor", gated_gelu_program)
    def renamed(x):
        return kk.Call(inputs={"x": x, "b": x}, outputs={"out": (x.shape, x.dtype)}, runtime={"tiles": 1})

    with pytest.raises(ProgramError, match="has no tensor 'a'"):
        renamed(torch.ones(32, 32).to(dev))


def test_a_second_definition_is_refused():
    with pytest.raises(ProgramError, match="defined already"):
        kk.op("kohakutt_example::gated_gelu(Tensor a) -> Tensor", gated_gelu_program)(lambda a: None)


# ------------------------------------------------------------------------- the op layer without torch
def test_program_op_over_tile_tensors_runs_them_in_place():
    from kohakutt.frontends.torch import runtime
    from kohakutt.kernels.custom import ProgramOp

    hal_dev = runtime.device(0)
    rng = torch.Generator().manual_seed(3)
    a, b = torch.randn(64, 64, generator=rng), torch.randn(64, 64, generator=rng)
    ta = kk.from_numpy(hal_dev, a.numpy(), "bfloat16", "tile")
    tb = kk.from_numpy(hal_dev, b.numpy(), "bfloat8_b", "tile")
    out = kk.empty(hal_dev, kk.DeviceTensor(ta.buffer, ta.spec).spec)
    op = ProgramOp("ktt_test::direct", gated_gelu_program)
    op.launch({"a": ta, "b": tb}, {"out": out}, {"tiles": 4, "scale": kk.bits(1.0)})
    got = torch.from_numpy(kk.to_numpy(out))
    want_b = torch.from_numpy(kk.to_numpy(tb))  # b as bfloat8_b holds it
    close(got, ref(torch.from_numpy(kk.to_numpy(ta)), want_b, 1.0).float(), 2**-6)
    assert op.stats["calls"] == 1 and not op._scratch  # nothing staged: both read in place
