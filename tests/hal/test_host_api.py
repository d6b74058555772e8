"""Programs run from their C++ by the simulator: the host build of TT-Metal 0.81.1's kernel API.

The kernels (``kernels/`` and ``kernels/host/``) are written for 0.81.1 as for the card. They run against NumPy
references in float64 rounded the way the card rounds, against the card's arithmetic model (``cardmath``), and
against their Python twins (``test_programs.py``), bit for bit. Each rule of the card a kernel breaks stops the run
with a ProgramError naming the kernel, the call, the core and the kernel's file and line; a call the host build
lacks fails at build time, naming it.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import numpy as np
import pytest
from test_programs import (
    CB_A,
    CB_OUT,
    DM_STUB_CPP,
    EXP_CPP,
    FOUR_CORES,
    TWO_CORES,
    add_program,
    bf16,
    cta,
    matmul_program,
    run_add,
    run_failing,
    still_usable,
    unary_program,
)

from kohakutt import hal
from kohakutt.errors import ProgramError
from kohakutt.hal import formats, host_build
from kohakutt.hal.backends import sim_program
from kohakutt.hal.program import CircularBuffer, CoreRange, Kernel, Program, Semaphore, tensor_accessor_args
from kohakutt.kernels import cardmath

HOST = Path(__file__).parent / "kernels" / "host"
RULES_READER, RULES_COMPUTE = HOST / "rules_reader.cpp", HOST / "rules_compute.cpp"


@pytest.fixture(autouse=True)
def cpp_kernels(knobs):
    knobs(KTT_SIM_KERNELS="cpp")


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.synchronize()
    d.close()


def both_ways(knobs, dev, program, buffers, out):
    """The program's output from its C++ and from its Python twins (each over the same inputs)."""
    got = {}
    for mode in ("cpp", "python"):
        knobs(KTT_SIM_KERNELS=mode)
        dev.run_program(program, buffers)
        got[mode] = dev.download(out)
    knobs(KTT_SIM_KERNELS="cpp")
    return got["cpp"], got["python"]


def same_bits(a, b):
    np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


# ------------------------------------------------------------------------------------------------ good runs
def test_add_over_four_cores_from_cpp(dev, knobs):
    got, want = run_add(dev)
    np.testing.assert_array_equal(got, want)
    rng = np.random.default_rng(1)
    a, b = bf16(rng.standard_normal((64, 96))), bf16(rng.standard_normal((64, 96)))
    ba, bb = dev.upload(a, "bfloat16"), dev.upload(b, "bfloat16")
    out = dev.allocate(shape=(64, 96), fmt="bfloat16", layout="tile")
    cpp, twin = both_ways(knobs, dev, add_program(), [ba, bb, out], out)
    same_bits(cpp, twin)


@pytest.mark.parametrize("op", ["sub", "mul"])
@pytest.mark.parametrize("fidelity", ["LoFi", "HiFi2", "HiFi4"])
@pytest.mark.parametrize("fp32_acc", [True, False])
def test_fpu_eltwise_matches_cardmath_and_twin(dev, knobs, op, fidelity, fp32_acc):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)
    ba, bb = dev.upload(a, "float32"), dev.upload(b, "float32")
    out = dev.allocate(shape=(32, 64), fmt="float32", layout="tile")
    prog = add_program(cores=TWO_CORES, fmt="float32", math_fidelity=fidelity, fp32_dest_acc_en=fp32_acc)
    from test_programs import _binary_compute

    compute = dataclasses.replace(prog.kernels[1], sim=_binary_compute(op), defines={f"BINARY_{op.upper()}": "1"})
    prog = dataclasses.replace(prog, kernels=[prog.kernels[0], compute, prog.kernels[2]])
    cpp, twin = both_ways(knobs, dev, prog, [ba, bb, out], out)
    same_bits(cpp, twin)
    if op == "mul":
        want = cardmath.multiply(a, b, fidelity=fidelity, fp32_acc=fp32_acc)
    else:
        want = cardmath.sub(a, b, fp32_acc=fp32_acc)
    same_bits(cpp, want if fp32_acc else bf16(want))


@pytest.mark.parametrize("fidelity", ["LoFi", "HiFi2", "HiFi3", "HiFi4"])
@pytest.mark.parametrize("fp32_acc", [True, False])
def test_matmul_matches_cardmath_and_twin(dev, knobs, fidelity, fp32_acc):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 64)).astype(np.float32)
    ba, bb = dev.upload(a, "float32"), dev.upload(b, "float32")
    out = dev.allocate(shape=(64, 64), fmt="float32", layout="tile")
    prog = matmul_program(2, 3, 2, fmt="float32", math_fidelity=fidelity, fp32_dest_acc_en=fp32_acc)
    cpp, twin = both_ways(knobs, dev, prog, [ba, bb, out], out)
    same_bits(cpp, twin)
    want = cardmath.matmul(a, b, fidelity=fidelity, fp32_acc=fp32_acc, out_format="float32")
    if fp32_acc:  # cardmath sums FP32 products with torch's BLAS, in its own order: a few ulps apart
        np.testing.assert_allclose(cpp, want, rtol=0, atol=np.abs(want).max() * 2**-21)
    else:  # a BF16 DST rounds after every MVMUL, in the LLK's order: bit for bit
        same_bits(cpp, want)


@pytest.mark.parametrize("out_fmt", ["bfloat16", "bfloat8_b", "float32"])
@pytest.mark.parametrize("approx", [False, True])
def test_sfpu_exp_formats_and_approx_mode(dev, knobs, out_fmt, approx):
    x = bf16(np.random.default_rng(4).uniform(-4, 4, (64, 64)))
    bx = dev.upload(x, "bfloat16")
    out = dev.allocate(shape=(64, 64), fmt=out_fmt, layout="tile")
    from test_programs import compute_exp

    prog = unary_program("exp", EXP_CPP, compute_exp, out_fmt=out_fmt, math_approx_mode=approx)
    knobs(KTT_SIM_KERNELS="cpp")
    dev.run_program(prog, [bx, out])
    got = dev.download(out)
    dst = bf16(cardmath.sfpu("exp", x, approx=approx))  # DST is bf16 without fp32_dest_acc_en
    np.testing.assert_array_equal(got, formats.quantize(dst, out_fmt))
    if not approx:
        np.testing.assert_array_equal(dst, bf16(np.exp(x.astype(np.float64))))
        cpp, twin = both_ways(knobs, dev, prog, [bx, out], out)
        same_bits(cpp, twin)
    else:  # exp_tile<APPROX> takes the card's approximate exp: within its 3.11% of exp
        assert not np.array_equal(dst, bf16(np.exp(x.astype(np.float64))))
        np.testing.assert_allclose(dst, np.exp(x.astype(np.float64)), rtol=0.035)


@pytest.mark.parametrize("fp32_acc", [True, False])
def test_reduce_rows_with_scaler(dev, fp32_acc):
    core = CoreRange((0, 0))
    x = bf16(np.random.default_rng(6).standard_normal((32, 96)) * 8)
    bx = dev.upload(x, "bfloat16")
    out = dev.allocate(shape=(32, 32), fmt="float32", layout="tile")
    half = int(np.float32(0.5).view(np.uint32) >> 16)
    prog = Program("row_sum", [
        Kernel("reader", HOST / "scaler_reader.cpp", core, compile_time_args=cta()),
        Kernel("compute", HOST / "reduce_rows.cpp", core, fp32_dest_acc_en=fp32_acc),
        Kernel("writer", HOST / "page_writer.cpp", core, compile_time_args=cta("float32"), defines={"OUT_CB": "16"}),
    ], [CircularBuffer(CB_A, "bfloat16", 2048, 2, core), CircularBuffer(2, "bfloat16", 2048, 1, core),
        CircularBuffer(CB_OUT, "float32", 4096, 1, core)],
        runtime_args={"reader": [bx.address, half, 3], "compute": [3], "writer": [out.address, 0]})  # fmt: skip
    dev.run_program(prog, [bx, out])
    got = dev.download(out)
    np.testing.assert_array_equal(got[:, 0], cardmath.reduce_sum(x, 1, fp32_acc, scaler=0.5))
    np.testing.assert_allclose(got[:, 0], x.astype(np.float64).sum(axis=1) * 0.5, rtol=0, atol=2**-5 if fp32_acc else 1)
    np.testing.assert_array_equal(got[:, 1:], 0)  # after reduce_init the packer zeroes all but the result


def test_semaphores_order_two_cores(dev):
    x = bf16(np.random.default_rng(9).standard_normal((32, 32)))
    bx = dev.upload(x, "bfloat16")
    out = dev.allocate(shape=(64, 32), fmt="bfloat16", layout="tile")
    both = CoreRange((0, 0), (1, 0))
    prog = Program("relay", [Kernel("reader", HOST / "relay.cpp", both, compile_time_args=cta(n=2))],
                   [CircularBuffer(CB_A, "bfloat16", 2048, 1, both)], [Semaphore(0, both)],
                   runtime_args={"reader": [bx.address, out.address]})  # fmt: skip
    dev.run_program(prog, [bx, out])
    np.testing.assert_array_equal(dev.download(out), np.concatenate([x, x]))


def test_multicast_and_semaphore_handshake(dev):
    x = bf16(np.random.default_rng(11).standard_normal((32, 32)))
    bx = dev.upload(x, "bfloat16")
    out = dev.allocate(shape=(64, 32), fmt="bfloat16", layout="tile")
    three, receivers = CoreRange((0, 0), (2, 0)), CoreRange((1, 0), (2, 0))
    writer = HOST / "page_writer.cpp"
    prog = Program("mcast", [
        Kernel("reader", HOST / "mcast.cpp", (0, 0), name="sender", defines={"SENDER": "1"}, compile_time_args=cta()),
        Kernel("reader", HOST / "mcast.cpp", receivers, name="receiver"),
        Kernel("writer", writer, receivers, compile_time_args=cta()),
    ], [CircularBuffer(CB_A, "bfloat16", 2048, 1, three)], [Semaphore(0, three), Semaphore(1, three)],
        runtime_args={"sender": [bx.address],
                      "writer": {(1, 0): [out.address, 0], (2, 0): [out.address, 1]}})  # fmt: skip
    dev.run_program(prog, [bx, out])
    np.testing.assert_array_equal(dev.download(out), np.concatenate([x, x]))


def test_block_float_pages_in_and_out(dev, knobs):
    x = np.random.default_rng(12).standard_normal((64, 64)).astype(np.float32)
    bx = dev.upload(x, "bfloat8_b")
    out = dev.allocate(shape=(64, 64), fmt="bfloat4_b", layout="tile")
    from test_programs import compute_exp

    prog = unary_program("exp8", EXP_CPP, compute_exp, out_fmt="bfloat4_b")
    reader = dataclasses.replace(prog.kernels[0], compile_time_args=tensor_accessor_args(1088))
    prog = dataclasses.replace(prog, kernels=[reader, *prog.kernels[1:]],
                               cbs=[CircularBuffer(CB_A, "bfloat8_b", 1088, 2, TWO_CORES),
                                    CircularBuffer(CB_OUT, "bfloat4_b", 576, 2, TWO_CORES)])  # fmt: skip
    cpp, twin = both_ways(knobs, dev, prog, [bx, out], out)
    same_bits(cpp, twin)
    q = formats.quantize(x, "bfloat8_b")
    np.testing.assert_array_equal(cpp, formats.quantize(bf16(np.exp(q.astype(np.float64))), "bfloat4_b"))


# ----------------------------------------------------------------------------------------------- the build
def test_an_unimplemented_call_fails_at_build_time_naming_it(dev):
    prog = Program("missing", [Kernel("compute", HOST / "unimplemented_call.cpp", (0, 0))])
    err = run_failing(dev, prog, [])
    assert isinstance(err, host_build.KernelBuildError)
    assert re.search(
        r"it calls exp2_tile_init \(unimplemented_call\.cpp:8\), exp2_tile \(unimplemented_call\.cpp:10\)"
        r", which Kohaku-TT's host build of the TT-Metal 0.81.1 kernel API does not implement",
        str(err),
    )
    prog = Program("missing", [Kernel("compute", HOST / "unimplemented_header.cpp", (0, 0))])
    err = str(run_failing(dev, prog, []))
    assert "it includes api/compute/topk.h (unimplemented_header.cpp:3), which Kohaku-TT's host build" in err
    still_usable(dev)


def test_old_api_spellings_fail_to_build(dev):
    """The pre-0.81 forms (the old include paths, NAMESPACE / MAIN, mm_init) do not build, as on the card; program
    validation refuses them first, naming what to write instead."""
    src = '#include "compute_kernel_api/matmul.h"\nnamespace NAMESPACE {\nvoid MAIN { mm_init(0, 1, 16); }\n}\n'
    kernel = Kernel("compute", src, (0, 0))
    with pytest.raises(ProgramError, match=r"before TT-Metal 0.81.*write 'void kernel_main\(\) \{ \.\.\. \}'"):
        dev.run_program(Program("old", [kernel]), [])
    with pytest.raises(host_build.KernelBuildError, match=r"it includes compute_kernel_api/matmul.h \(compute.cpp:1\)"):
        host_build.build_kernel(host_build.spec_of(kernel, "old"))


def test_builds_are_cached_and_keyed_on_what_they_depend_on(dev):
    k = Kernel("reader", HOST / "rules_reader.cpp", (0, 0), compile_time_args=cta(), defines={"BAD_ARG": "1"})
    spec = host_build.spec_of(k, "cache")
    first = host_build.build_kernel(spec)
    assert host_build.build_kernel(spec) is first
    t0 = time.perf_counter()
    assert host_build.build_kernel(dataclasses.replace(spec)).path == first.path  # same key: the cached library
    assert time.perf_counter() - t0 < 1.0
    for change in ({"defines": (("UNBALANCED", "1"),)}, {"compile_time_args": (0, 2048)},
                   {"source": spec.source + "\n"}):  # fmt: skip
        assert dataclasses.replace(spec, **change).key() != spec.key()
    compute = host_build.spec_of(Kernel("compute", HOST / "rules_compute.cpp", (0, 0)), "cache")
    assert dataclasses.replace(compute, math_fidelity="LoFi").key() != compute.key()
    assert dataclasses.replace(compute, fp32_dest_acc_en=True).key() != compute.key()
    assert dataclasses.replace(compute, math_approx_mode=True).key() != compute.key()


# --------------------------------------------------------------------------------------- the card's rules
def _rule_program(rule, compute_rule=None, cb_pages=2, **compute_cfg):
    core = CoreRange((0, 0))
    kernels = [Kernel("reader", RULES_READER, core, compile_time_args=cta(), defines={rule: "1"} if rule else {})]
    if compute_rule is not None:
        name, value = compute_rule if isinstance(compute_rule, tuple) else (compute_rule, "1")
        kernels.append(Kernel("compute", RULES_COMPUTE, core, defines={name: value}, **compute_cfg))
    cbs_ = [CircularBuffer(CB_A, "bfloat16", 2048, cb_pages, core), CircularBuffer(CB_OUT, "bfloat16", 2048, 2, core)]
    return Program("broken", kernels, cbs_, [Semaphore(3, core)],
                   runtime_args=lambda bufs, rt: {"reader": [bufs[0].address] if bufs else [0]})  # fmt: skip


@pytest.mark.parametrize(("rule", "message"), [
    ("DRAM_READ_MISALIGNED", r"rules_reader\.cpp:15\): noc_async_read: DRAM read: the L1 address 0x\w+ and the "
                             r"DRAM read address 0x\w+ differ modulo 64 B; Blackhole's NOC needs them equally aligned "
                             r"\(NOC_DRAM_READ_ALIGNMENT_BYTES = 64"),
    ("DRAM_WRITE_MISALIGNED", r"rules_reader\.cpp:20\): noc_async_write: DRAM write: .* differ modulo 16 B"),
    ("PUSH_UNRESERVED", r"cb_push_back: pushes 2 pages of CB 0 but only 1 are reserved"),
    ("POP_UNWAITED", r"cb_pop_front: pops 2 pages of CB 0 but only 1 were waited for"),
    ("READ_PAST_END", r"noc_async_read_page: DRAM bank 0 address 0x\w+ is (page 8 of the buffer at 0x\w+, which has "
                      r"1 page|in no buffer the program runs over)"),
    ("NO_BARRIER", r"cb_push_back: CB 0 while a noc_async_read into it is in flight"),
    ("WRITE_UNRESERVED", r"noc_async_read_page: writes page slot 0 of CB 0 on core \(0,0\), which is not reserved"),
    ("WRITE_PAST_CB", r"noc_async_read: writes page slot 0 of CB 16 on core \(0,0\), which is not reserved"),
    ("TOO_BIG_REQUEST", r"cb_reserve_back: CB 0 has 2 pages; a request must be 1..2 pages"),
    ("UNFLUSHED_POP", r"cb_pop_front: CB 0 while a noc_async_write out of it is in flight"),
    ("BAD_ARG", r"get_arg_val: argument 5, but the kernel has 1 runtime arg on this core"),
    ("CROSS_RING_END", r"cb_push_back: cb_push_back 2 pages at page slot 1 of CB 0's 2 crosses the end of the ring"),
    ("NOT_A_CB", r"writes L1 offset 0x\w+ on core \(0,0\), which is in no circular buffer or semaphore"),
])  # fmt: skip
def test_dataflow_rules(dev, rule, message):
    x = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    err = str(run_failing(dev, _rule_program(rule), [x]))
    assert err.startswith("program 'broken': reader on core (0,0) (rules_reader.cpp:"), err
    assert re.search(message, err), err
    dev.free(x)
    still_usable(dev)


def test_unbalanced_cb_at_program_end(dev):
    x = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    err = str(run_failing(dev, _rule_program("UNBALANCED"), [x]))
    assert (
        "program 'broken': CB 0 on core (0,0) ends the program unbalanced: 1 page pushed and never popped "
        "(1 pushed, 0 popped)"
    ) in err
    err = str(run_failing(dev, _rule_program("RESERVED_ONLY"), [x]))
    assert "program 'broken': CB 0 on core (0,0) ends the program unbalanced: 1 page reserved and never pushed" in err
    still_usable(dev)


@pytest.mark.parametrize(("rule", "message"), [
    ("NO_STARTUP", r"copy_tile: before the hardware start-up: call compute_kernel_hw_startup"),
    ("COPY_WITHOUT_INIT", r"copy_tile: needs copy_init\(cb\) first \(the FPU is set up for nothing\)"),
    ("ADD_AFTER_COPY_INIT", r"add_tiles: needs add_init\(0, 0\) first \(the FPU is set up for copy\)"),
    ("EXP_WITHOUT_INIT", r"exp_tile: needs exp_tile_init\(\) first"),
    ("MATMUL_WITHOUT_INIT", r"matmul_tiles: needs matmul_init\(in0, in1\) first \(the FPU is set up for add\)"),
    ("MATH_OUTSIDE_ACQUIRE", r"copy_tile: outside tile_regs_acquire\(\) / tile_regs_commit\(\) \(DST is released\)"),
    ("PACK_BEFORE_COMMIT", r"pack_tile: outside tile_regs_wait\(\) / tile_regs_release\(\)"),
    ("PACK_UNRESERVED", r"pack_tile: writes tile 0 of CB 16, but the kernel reserved 0 pages"),
    ("COPY_UNWAITED", r"copy_tile: reads tile 0 of CB 0, but the kernel waited for 0 pages"),
    ("ENDS_HOLDING_DST", r"compute on core \(0,0\): kernel_main returned: the kernel ended with DST acquired by math"),
])  # fmt: skip
def test_compute_rules(dev, rule, message):
    x = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    err = str(run_failing(dev, _rule_program("FEED_ONE", rule), [x]))
    assert err.startswith("program 'broken': compute on core (0,0)"), err
    assert re.search(message, err), err
    still_usable(dev)


@pytest.mark.parametrize(("dst_tile", "cfg", "message"), [
    (8, {}, "DST tile 8, but DST holds 8 tiles (0..7) with bf16 accumulation in half-sync mode"),
    (4, {"fp32_dest_acc_en": True}, "DST tile 4, but DST holds 4 tiles (0..3) with fp32 accumulation in half-sync"),
    (16, {"dst_full_sync_en": True}, "DST tile 16, but DST holds 16 tiles (0..15) with bf16 accumulation in full-sync"),
    (8, {"dst_full_sync_en": True, "fp32_dest_acc_en": True}, "DST tile 8, but DST holds 8 tiles (0..7) with fp32"),
    (15, {"dst_full_sync_en": True}, None),  # tiles 14 and 15 exist in full sync
])  # fmt: skip
def test_tile_register_capacity(dev, dst_tile, cfg, message):
    x = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    prog = _rule_program("FEED_ONE", ("DST_TILE", str(dst_tile)), **cfg)
    if message is None:
        dev.run_program(prog, [x])
        dev.synchronize()
    else:
        err = str(run_failing(dev, prog, [x]))
        assert "compute on core (0,0) (rules_compute.cpp:" in err and f"copy_tile: uses {message}" in err, err
    still_usable(dev)


def test_deadlock_is_reported_at_once(dev):
    x = dev.upload(np.ones((32, 32), np.float32), "bfloat16")
    t0 = time.perf_counter()
    err = str(run_failing(dev, _rule_program(None, "WAIT_NEVER_FED"), [x]))
    assert time.perf_counter() - t0 < 5.0
    assert (
        "program 'broken' deadlocked: compute on core (0,0) (rules_compute.cpp:72): cb_wait_front waits for 2 pages "
        "in CB 0 that no kernel pushes (0 of 2 filled)"
    ) in err
    err = str(run_failing(dev, _rule_program("WAIT_NEVER_FED", "WAIT_NEVER_FED"), [x]))
    assert "reader on core (0,0) (rules_reader.cpp:62): cb_wait_front waits for 1 page in CB 0" in err
    assert "compute on core (0,0) (rules_compute.cpp:72): cb_wait_front waits for 2 pages" in err
    err = str(run_failing(dev, _rule_program("SEMAPHORE_NEVER_SET"), [x]))
    assert (
        "deadlocked: reader on core (0,0) (rules_reader.cpp:64): noc_semaphore_wait waits for the semaphore at L1 "
        "offset 0x4030 to be 1, which no kernel sets (it is 0)" in err
    )
    still_usable(dev)


# ------------------------------------------------------------------------------- validation against the card
def test_compute_grid_and_cb_limits_come_from_the_card(dev):
    assert dev.card.grid == (13, 10) and dev.card.cores == 130  # TT-NN 0.81.1's P150 compute grid
    a = dev.upload(np.zeros((32, 128), np.float32), "bfloat16")
    p = add_program()
    off = dataclasses.replace(p, kernels=[dataclasses.replace(p.kernels[0], core_ranges=CoreRange((12, 9)))],
                              runtime_args=None)  # fmt: skip
    dev.run_program(
        dataclasses.replace(off, kernels=[dataclasses.replace(off.kernels[0], source=DM_STUB_CPP)]), [a, a, a]
    )  # (12, 9) is on the grid
    dev.synchronize()
    beyond = dataclasses.replace(off.kernels[0], core_ranges=CoreRange((13, 0)))
    with pytest.raises(ProgramError, match=r"covers cores \(13,0\), outside the 13 x 10 worker grid"):
        dev.run_program(dataclasses.replace(off, kernels=[beyond]), [a, a, a])
    with pytest.raises(ProgramError, match=r"CB 64: CB indices are 0..63"):
        dev.run_program(dataclasses.replace(p, cbs=[*p.cbs, CircularBuffer(64, "bfloat16", 2048, 1, FOUR_CORES)]),
                        [a, a, a])  # fmt: skip
    dev.free(a)


# -------------------------------------------------------------------------------------- a kernel's C++ counts
def test_mutating_one_line_of_a_kernel_changes_the_result(dev, tmp_path):
    """bias_gelu's compute kernel without its gelu line computes x + bias: the simulator runs the .cpp it is given."""
    from kohakutt import kernels as kk
    from kohakutt.hal.layout import Layout
    from kohakutt.ir.numerics import Numerics
    from kohakutt.ir.ops import TensorSpec
    from kohakutt.kernels.programs import fused as pf
    from kohakutt.kernels.tensor import empty

    rng = np.random.default_rng(20)
    xv, bv = bf16(rng.standard_normal((64, 64)) * 2), bf16(rng.standard_normal((64,)))
    x, b = kk.from_numpy(dev, xv, "bfloat16", "tile"), kk.from_numpy(dev, bv, "bfloat16", "tile")
    out = empty(dev, TensorSpec((64, 64), x.dtype, Layout.TILE))
    prog = pf.build("bias_gelu", [x, b], [out], {"approximate": "none"}, Numerics(fp32_acc=True))
    compute = prog.kernels[1]
    source = compute.path.read_text()
    line = "        gelu_tile<false>(0);\n"
    assert source.count(line) == 1
    mutated = tmp_path / "compute.cpp"
    mutated.write_text(source.replace(line, "        // gelu_tile<false>(0);  (mutated)\n"))

    dev.run_program(prog, [x.buffer, b.buffer, out.buffer])
    original = kk.to_numpy(out)
    mutant = dataclasses.replace(prog, kernels=[prog.kernels[0], dataclasses.replace(compute, source=mutated),
                                                prog.kernels[2]])  # fmt: skip
    dev.run_program(mutant, [x.buffer, b.buffer, out.buffer])
    got = kk.to_numpy(out)
    assert not np.array_equal(got, original)
    np.testing.assert_array_equal(got, bf16(xv.astype(np.float64) + bv.astype(np.float64)))  # fp32 DST, one rounding
    np.testing.assert_allclose(original, bf16(0.5 * (xv + bv) * (1 + np.vectorize(__import__("math").erf)(
        (xv + bv) / np.sqrt(2)))), rtol=2**-7, atol=1e-6)  # fmt: skip


def test_python_kernel_api_stays_available(dev, knobs):
    knobs(KTT_SIM_KERNELS="python")
    got, want = run_add(dev)
    np.testing.assert_array_equal(got, want)
    assert sim_program.STALL_SECONDS > 0


@pytest.mark.parametrize("spin_ms", [2500, 7500])
def test_a_kernel_spinning_without_api_calls_is_a_stall(dev, monkeypatch, spin_ms):
    """No kernel blocks, so no deadlock is seen; after STALL_SECONDS without a CB or semaphore change the run fails.
    A kernel still running 5 s after that is abandoned (its thread left to finish) and named in the error."""
    monkeypatch.setattr(sim_program, "STALL_SECONDS", 1.0)
    prog = Program("spin", [Kernel("reader", HOST / "spin.cpp", (0, 0), defines={"SPIN_MS": str(spin_ms)})], [],
                   [Semaphore(0, (0, 0))])  # fmt: skip
    t0 = time.perf_counter()
    err = str(run_failing(dev, prog, []))
    assert "program 'spin' stalled: reader on core (0,0) did not return and no kernel changed a CB or semaphore" in err
    abandoned = "reader on core (0,0) does not return (a loop that calls no kernel API cannot be stopped)" in err
    assert abandoned == (spin_ms > 6000), err
    assert time.perf_counter() - t0 < 12.0
    time.sleep(
        max(0.0, spin_ms / 1000 - (time.perf_counter() - t0))
    )  # let an abandoned thread end before the next test
    still_usable(dev)
