"""The kernel DSL (``kohakutt.dsl.metal``): programs traced into Metalium C++, checked against the card's rules when
defined (each broken rule named at its DSL line), run from their generated C++ on the simulator, and as torch ops.

References are independent: torch / NumPy on the CPU in float32 or float64, never the simulator's own models.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import kohakutt.dsl.metal as km
from kohakutt import hal
from kohakutt import kernels as kk
from kohakutt.dsl.metal import bits
from kohakutt.errors import CommandError, KernelDSLError, ProgramError
from kohakutt.hal import host_build
from kohakutt.hal.layout import Layout
from kohakutt.hal.program import old_api_forms
from kohakutt.ir.dtypes import DType
from kohakutt.ir.ops import TensorSpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import every_op  # noqa: E402


def _load(path: Path):
    """The example module by its name, loaded once per process (its ops are defined once; tests/ttnn loads it too)."""
    mod = sys.modules.get(path.stem)
    if mod is None:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[path.stem] = mod
    return mod


EXAMPLES = ROOT / "examples" / "kernels" / "dsl_metal"


@pytest.fixture(scope="module")
def examples():
    return {n: _load(EXAMPLES / f"{n}.py") for n in ("scaled_add_km", "rms_norm_km")}


@pytest.fixture
def dev():
    d = hal.open_device(0)
    yield d
    d.close()


def tile(dev, a, dtype="bfloat16"):
    return kk.from_numpy(dev, np.asarray(a, np.float32), dtype, "tile")


def empty_like(dev, t, shape=None, dtype=None):
    return kk.empty(dev, TensorSpec(tuple(shape or t.shape), DType.of(dtype or t.dtype), Layout.TILE))


def bf16(a):
    import torch

    return torch.tensor(np.asarray(a, np.float32)).bfloat16().float().numpy()


# ------------------------------------------------------------------------------------- running the programs
def test_scaled_add_is_bit_exact_and_new_shapes_and_scales_compile_nothing(dev, examples):
    prog = examples["scaled_add_km"].scaled_add_program
    rng = np.random.default_rng(0)
    loaded, before = None, prog.compiles  # tests/ttnn may have built other variants of the same program already
    for i, (shape, s) in enumerate([((64, 96), 0.37), ((3, 40, 70), -2.5), ((1, 7), 3.0), ((5, 32, 32), 1e-3)]):
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        ta, tb = tile(dev, a), tile(dev, b)
        out = empty_like(dev, ta)
        prog.launch({"a": ta, "b": tb, "out": out}, {"tiles": kk.tile_count(shape), "s": bits(s)})
        # the card's arithmetic: a * s and the sum each rounded to float32 (fp32 DST), packed to bfloat16
        want = bf16(kk.to_numpy(ta) * np.float32(s) + kk.to_numpy(tb))
        np.testing.assert_array_equal(kk.to_numpy(out), want)
        if i == 0:
            loaded, first = host_build.stats["builds"], prog.compiles
    assert prog.compiles == first <= before + 1  # this signature's one variant (none if built before), then none
    assert host_build.stats["builds"] == loaded, "a new shape or scale built a kernel"


def test_a_new_format_is_one_more_variant(dev, examples):
    prog = examples["scaled_add_km"].scaled_add_program
    before = prog.compiles
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    ta, tb = tile(dev, a, "float32"), tile(dev, b, "bfloat16")
    out = empty_like(dev, ta, dtype="float32")
    prog.launch({"a": ta, "b": tb, "out": out}, {"tiles": 4, "s": bits(0.5)})
    want = a.astype(np.float32) * np.float32(0.5) + bf16(b)
    # float32 reaches the FPU as TF32 (10 mantissa bits): the copy truncates a
    np.testing.assert_allclose(kk.to_numpy(out), want, rtol=2**-9, atol=2**-9)
    assert prog.compiles == before + 1


def test_rms_norm_matches_float64_over_widths_and_batches(dev, examples):
    prog = examples["rms_norm_km"].rms_norm_program
    rng = np.random.default_rng(2)
    for shape in [(64, 96), (2, 40, 70), (32, 1000), (1, 33)]:
        x, w = rng.standard_normal(shape) * 3, rng.standard_normal(shape[-1])
        tx, tw = tile(dev, x), tile(dev, w)
        ty = empty_like(dev, tx)
        width = shape[-1]
        wt = math.ceil(width / 32)
        rt = {"rows": kk.tile_count(shape) // wt, "wt": wt, "inv_w": bits(1 / width), "eps": bits(1e-5)}
        prog.launch({"x": tx, "weight": tw, "y": ty}, rt)
        xr, wr = kk.to_numpy(tx).astype(np.float64), kk.to_numpy(tw).astype(np.float64)
        want = xr / np.sqrt((xr**2).mean(-1, keepdims=True) + 1e-5) * wr
        got = kk.to_numpy(ty)
        # bf16 output (2^-9) over TF32 operands of the two broadcasts (2^-11 each)
        np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-7 * np.abs(want).max())
    assert prog.compiles == 1


@pytest.mark.parametrize("family", sorted(every_op.PROGRAMS))
def test_every_compute_op_against_numpy(dev, family):
    prog, ops = every_op.PROGRAMS[family]
    rng = np.random.default_rng(3)
    shape = (64, 64)
    x, y = rng.uniform(0.5, 2.0, shape), rng.uniform(0.5, 2.0, shape)  # positive: log, sqrt, recip
    tx, ty = tile(dev, x), tile(dev, y)
    out = empty_like(dev, tx, (len(ops), *shape))
    tensors = {"x": tx, "out": out} if family == "unary" else {"x": tx, "y": ty, "out": out}
    prog.launch(tensors, {"tiles": 4} | ({"s": bits(every_op.SCALE)} if family == "unary" else {}))
    got = kk.to_numpy(out).astype(np.float64)
    xr, yr = (every_op.tiles_of(kk.to_numpy(t).astype(np.float64)) for t in (tx, ty))
    bad = []
    for j, op in enumerate(ops):
        want = every_op.reference(op, xr, yr)
        err = np.abs(every_op.tiles_of(got[j]) - want).max() / np.abs(want).max()
        if not err <= 2**-7:  # bf16 output over bf16 / TF32 operands
            bad.append(f"{op}: {err:.3g}")
    assert not bad, f"ops off their reference: {bad}"


@km.program("flagged_scale", max_cores=2)
def flagged_scale(p, a: km.TensorRef, out: km.Out):
    """Scale the tiles from ``first`` on, every ``step``-th one, by s when ``flag`` is set: k.when, k.range(start,
    stop, step) and a two-page reservation filled page by page."""
    first, tiles, flag, s = p.runtime("first"), p.runtime("tiles"), p.runtime("flag"), p.runtime("s")
    cb_a, cb_out = p.cb(0, like=a, pages=2), p.cb(16, like=out, pages=2)

    @p.dm0
    def reader(k):
        for t in k.range(first, tiles, 2):  # two tiles a step: pages 0 and 1 of one reservation
            slot = cb_a.reserve(2)
            k.read(a.page(t), slot)
            k.read(a.page(t + 1), slot[1])
            k.reads_done()
            cb_a.push(2)

    @p.compute
    def compute(c):
        c.startup(cb_a, cb_out)
        for _ in c.range(first, tiles, 2):
            cb_a.wait(2)
            cb_out.reserve(2)
            for j in range(2):
                with c.registers():
                    c.init("copy", cb_a)
                    c.copy(cb_a, j, 0)
                    with c.when(flag == 1):
                        c.init("mul_scalar")
                        c.op("mul_scalar", 0, value=s)
                    c.pack(0, cb_out, j)
            cb_out.push(2)
            cb_a.pop(2)

    @p.dm1
    def writer(k):
        for t in k.range(first, tiles, 2):
            cb_out.wait(2)
            k.write(cb_out, out.page(t))
            k.write(cb_out.front(1), out.page(t + 1))
            k.flushed()
            cb_out.pop(2)
        k.writes_done()


@pytest.mark.parametrize("flag", [0, 1])
def test_when_strided_ranges_and_paged_packs(dev, flag):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6 * 32, 32))
    ta = tile(dev, a)
    out = empty_like(dev, ta)
    flagged_scale.launch({"a": ta, "out": out}, {"first": 2, "tiles": 6, "flag": flag, "s": bits(-3.0)})
    got, ar = kk.to_numpy(out), kk.to_numpy(ta)
    np.testing.assert_array_equal(got[:64], 0)  # tiles before `first` are not written (a fresh buffer is zeros)
    np.testing.assert_array_equal(got[64:], bf16(ar[64:] * (-3.0 if flag else 1.0)))


# -------------------------------------------------------------------------------------- the generated C++
def test_sources_are_one_readable_kernel_per_function(examples, tmp_path):
    prog = examples["scaled_add_km"].scaled_add_program
    assert list(prog.sources) == ["reader", "compute", "writer"]
    for name, src in prog.sources.items():
        assert src.count("void kernel_main()") == 1
        assert not old_api_forms(src), f"{name} uses the kernel API before 0.81"
        assert "#line " in src and "scaled_add_km.py" in src
        plain = prog.source(name, lines=False)
        assert "\n#line" not in plain and "    #line" not in plain and plain.count("\n") < src.count("\n")
    compute = prog.source("compute")
    for call in ("compute_kernel_hw_startup(cb_a, cb_b, cb_out)", "copy_tile(cb_a, 0, 0)", "mul_unary_tile(0, s)",
                 "add_binary_tile(0, 1, 0)", "tile_regs_commit()", "pack_tile(0, cb_out)"):  # fmt: skip
        assert call in compute
    assert "noc_async_read_page(start + i, a, get_write_ptr(cb_a))" in prog.source("reader")
    paths = prog.write(tmp_path)
    assert [p.name for p in paths] == ["reader.cpp", "compute.cpp", "writer.cpp"]
    assert paths[1].read_text() == compute


def test_generated_lines_point_at_the_dsl(examples):
    prog = examples["scaled_add_km"].scaled_add_program
    src = prog.source("reader")
    py = (EXAMPLES / "scaled_add_km.py").read_text().splitlines()
    # the statement after each #line is the C++ of that Python line
    for m in re.finditer(r"#line (\d+)(?: \"[^\"]+\")?\n\s*(\S+?)\(", src):
        line, call = int(m.group(1)), m.group(2)
        word = {"cb_reserve_back": "reserve", "noc_async_read_page": "k.read", "noc_async_read_barrier": "reads_done",
                "cb_push_back": "push", "for": "k.range"}.get(call)  # fmt: skip
        if word:
            assert word in py[line - 1], f"#line {line} ({py[line - 1].strip()!r}) precedes {call}"


# ------------------------------------------------------------------------------------- rules, at the DSL line
def _marked_line(fn) -> int:
    """The line of ``fn``'s source that carries the marker comment ``# <-``."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, ln in enumerate(lines) if "# <-" in ln]
    assert len(hits) == 1
    return hits[0]


def _define(body):
    """Trace a program whose kernels ``body(p, a, out)`` defines."""

    @km.program("rules", max_cores=1)
    def prog(p, a: km.TensorRef, out: km.Out):
        body(p, a, out)

    return prog


def _copy_program(p, a, out, *, reader=None, compute=None, writer=None, pages=2):
    """The standard copy program's parts (reader / compute / writer), any of which a test replaces."""
    count = p.runtime("count")
    cb_in, cb_out = p.cb(0, like=a, pages=pages), p.cb(16, like=out, pages=pages)

    def default_reader(k):
        for i in k.range(count):
            k.read(a.page(i), cb_in.reserve(1))
            k.reads_done()
            cb_in.push(1)

    def default_compute(c):
        c.startup(cb_in, cb_out)
        for _ in c.range(count):
            cb_in.wait(1)
            with c.registers():
                c.init("copy", cb_in)
                c.copy(cb_in, 0, 0)
                cb_out.reserve(1)
                c.pack(0, cb_out)
                cb_out.push(1)
            cb_in.pop(1)

    def default_writer(k):
        for i in k.range(count):
            cb_out.wait(1)
            k.write(cb_out, out.page(i))
            k.flushed()
            cb_out.pop(1)
        k.writes_done()

    p.dm0(_bind(reader or default_reader, count, cb_in, cb_out, a, out))
    p.compute(fp32_dest=True)(_bind(compute or default_compute, count, cb_in, cb_out, a, out))
    p.dm1(_bind(writer or default_writer, count, cb_in, cb_out, a, out))


def _bind(fn, count, cb_in, cb_out, a, out):
    params = list(inspect.signature(fn).parameters)
    if len(params) == 1:
        fn.__name__ = fn.__name__.removeprefix("default_")
        return fn
    env = {"count": count, "cb_in": cb_in, "cb_out": cb_out, "a": a, "out": out}

    def kernel(k):
        return fn(k, **{n: env[n] for n in params[1:]})

    kernel.__name__ = fn.__name__.removeprefix("bad_").removeprefix("default_")
    return kernel


def bad_reader_pushes_twice(k, count, cb_in, a):
    for i in k.range(count):
        k.read(a.page(i), cb_in.reserve(1))
        k.reads_done()
        cb_in.push(1)
        cb_in.push(1)  # <-


def bad_reader_no_barrier(k, count, cb_in, a):
    for i in k.range(count):
        k.read(a.page(i), cb_in.reserve(1))
        cb_in.push(1)  # <-


def bad_reader_reserve_too_many(k, count, cb_in, a):
    for i in k.range(count):
        slot = cb_in.reserve(3)  # <-
        k.read(a.page(i), slot)
        k.reads_done()
        cb_in.push(3)


def bad_reader_two_per_pass(k, count, cb_in, a):
    for i in k.range(count):
        slot = cb_in.reserve(2)
        k.read(a.page(i), slot)
        k.read(a.page(i), slot[1])
        k.reads_done()
        cb_in.push(2)  # <-


def bad_reader_unbalanced_loop(k, count, cb_in, a):
    for i in k.range(count):  # <-
        k.read(a.page(i), cb_in.reserve(1))
        k.reads_done()


def bad_reader_python_if(k, count, cb_in, a):
    for i in k.range(count):
        if i > 2:  # <-
            k.read(a.page(i), cb_in.reserve(1))


def bad_reader_break(k, count, cb_in, a):
    for i in k.range(count):  # <-
        k.read(a.page(i), cb_in.reserve(1))
        k.reads_done()
        cb_in.push(1)
        break


def bad_reader_when_unbalanced(k, count, cb_in, a):
    for i in k.range(count):
        with k.when(i < 3):  # <-
            k.read(a.page(i), cb_in.reserve(1))
            k.reads_done()
        cb_in.push(1)


def bad_reader_writes_input(k, count, cb_in, a):
    for i in k.range(count):
        cb_in.wait(1)
        k.write(cb_in, a.page(i))  # <-
        k.flushed()
        cb_in.pop(1)
    k.writes_done()


def bad_writer_pop_unflushed(k, count, cb_out, out):
    for i in k.range(count):
        cb_out.wait(1)
        k.write(cb_out, out.page(i))
        cb_out.pop(1)  # <-
    k.writes_done()


def bad_writer_no_write_barrier(k, count, cb_out, out):
    for i in k.range(count):
        cb_out.wait(1)
        k.write(cb_out, out.page(i))  # <-
        k.flushed()
        cb_out.pop(1)


def bad_compute_no_init(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.copy(cb_in, 0, 0)  # <-
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_other_init(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)
            k.copy(cb_in, 0, 0)
            k.init("exp")
            k.op("sqrt", 0)  # <-
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_init_in_first_pass_only(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    k.init("copy", cb_in)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.copy(cb_in, 0, 0)  # <-
            k.init("exp")  # the SFPU init does not disturb copy; the FPU init below does
            k.op("exp", 0)
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)
        k.init("add_tiles", cb_in, cb_in)


def bad_compute_init_in_when(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for i in k.range(count):
        cb_in.wait(1)
        with k.registers():
            with k.when(i == 0):
                k.init("copy", cb_in)
            k.copy(cb_in, 0, 0)  # <-
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_slot_past_fp32_dst(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)
            k.copy(cb_in, 0, 4)  # <-
            cb_out.reserve(1)
            k.pack(4, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_no_startup(k, count, cb_in, cb_out):
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)  # <-
            k.copy(cb_in, 0, 0)
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_math_after_pack(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)
            k.copy(cb_in, 0, 0)
            cb_out.reserve(1)
            k.pack(0, cb_out)
            k.copy(cb_in, 0, 1)  # <-
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_outside_registers(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        k.init("copy", cb_in)
        k.copy(cb_in, 0, 0)  # <-
        with k.registers():
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_pack_unreserved(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)
            k.copy(cb_in, 0, 0)
            k.pack(0, cb_out)  # <-
        cb_out.reserve(1)
        cb_out.push(1)
        cb_in.pop(1)


def bad_compute_reads_unwaited_tile(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)
            k.copy(cb_in, 1, 0)  # <-
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)


def bad_compute_pops_twice(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("copy", cb_in)
            k.copy(cb_in, 0, 0)
            cb_out.reserve(1)
            k.pack(0, cb_out)
            cb_out.push(1)
        cb_in.pop(1)
        cb_in.pop(1)  # <-


def bad_compute_reduce_mask(k, count, cb_in, cb_out):
    k.startup(cb_in, cb_out)
    k.init("reduce_row_sum", cb_in, cb_in, cb_out)
    for _ in k.range(count):
        cb_in.wait(1)
        with k.registers():
            k.init("fill")
            k.op("fill", 0, value=2.0)
            cb_out.reserve(1)
            k.pack(0, cb_out)  # <-
            cb_out.push(1)
        cb_in.pop(1)


RULES = [
    ("reader", bad_reader_pushes_twice, "push(1) with no pages reserved"),
    ("reader", bad_reader_no_barrier, "k.reads_done() before the push"),
    ("reader", bad_reader_reserve_too_many, "asks for 3 pages of a CB that holds 2"),
    ("reader", bad_reader_two_per_pass, "push 2 * count pages in all, compute (line"),
    ("reader", bad_reader_unbalanced_loop, "each pass of the loop ends with 1 page of cb_in reserved"),
    ("reader", bad_reader_python_if, "a Python 'if'"),
    ("reader", bad_reader_break, "'break' out of a k.range loop"),
    ("reader", bad_reader_when_unbalanced, "the k.when body ends with 1 page of cb_in reserved"),
    ("reader", bad_reader_writes_input, "only the km.Out tensors are written"),
    ("writer", bad_writer_pop_unflushed, "call k.flushed()"),
    ("writer", bad_writer_no_write_barrier, "no k.writes_done() after this write"),
    ("compute", bad_compute_no_init, "needs c.init('copy', ...) first: the FPU is not set up"),
    ("compute", bad_compute_other_init, "needs c.init('sqrt') first: the SFPU is set up for exp"),
    ("compute", bad_compute_init_in_first_pass_only, "the FPU is set up for add_tiles (c.init at line"),
    ("compute", bad_compute_init_in_when, "may run without its init: which init is in effect here depends on a"),
    ("compute", bad_compute_slot_past_fp32_dst, "DST holds 4 tiles"),
    ("compute", bad_compute_no_startup, "before the hardware start-up"),
    ("compute", bad_compute_math_after_pack, "after c.pack"),
    ("compute", bad_compute_outside_registers, "outside 'with c.registers():'"),
    ("compute", bad_compute_pack_unreserved, "c.pack into cb_out with no pages reserved"),
    ("compute", bad_compute_reads_unwaited_tile, "page 1 of cb_in, but only 1 page are waited for"),
    ("compute", bad_compute_pops_twice, "pop(1) with no pages waited for"),
    ("compute", bad_compute_reduce_mask, "still masks the packer"),
]


@pytest.mark.parametrize("role,fn,words", RULES, ids=[r[1].__name__ for r in RULES])
def test_a_broken_rule_is_named_at_its_dsl_line(role, fn, words):
    with pytest.raises(KernelDSLError) as e:
        _define(lambda p, a, out: _copy_program(p, a, out, **{role: fn}))
    err = e.value
    line = _marked_line(fn)
    text = str(err)
    assert f"test_metal.py:{line}: " in text, f"expected line {line}:\n{text}"
    assert words in text, text
    assert isinstance(err, ProgramError)
    if err.line == line:
        assert err.file == __file__


def test_program_level_rules_name_their_lines():
    def no_output_write(p, a, out):
        cb = p.cb(0, like=a)  # noqa: F841

        @p.dm0
        def reader(k):
            pass

    with pytest.raises(KernelDSLError, match="output out is never written"):
        _define(no_output_write)

    def duplicate(p, a, out):
        p.cb(0, like=a)
        p.cb(0, like=out)  # <-

    with pytest.raises(KernelDSLError) as e:
        _define(duplicate)
    assert f":{_marked_line(duplicate)}: p.cb(0) is defined twice" in str(e.value)

    def too_big(p, a, out):
        p.cb(0, like=a, pages=5000)

    with pytest.raises(KernelDSLError, match=r"need at least .* B of L1 per core"):
        _define(too_big)

    def unknown_op(p, a, out):
        @p.compute
        def compute(c):
            c.op("exp2", 0)  # <-

    with pytest.raises(KernelDSLError, match=r"no compute op 'exp2'; the ops are .*rsqrt"):
        _define(unknown_op)

    def never_popped(p, a, out):
        _copy_program(p, a, out, writer=lambda k: None)

    with pytest.raises(KernelDSLError, match="cb_out is pushed here but no kernel pops it"):
        _define(never_popped)


def test_a_rule_broken_while_running_names_the_dsl_line(dev):
    def reads_past_the_end(k, count, cb_in, a):
        for i in k.range(count):
            k.read(a.page(i + count), cb_in.reserve(1))  # <-
            k.reads_done()
            cb_in.push(1)

    prog = _define(lambda p, a, out: _copy_program(p, a, out, reader=reads_past_the_end))
    ta = tile(dev, np.ones((64, 32)))
    out = empty_like(dev, ta)
    prog.launch({"a": ta, "out": out}, {"count": 2})
    with pytest.raises(CommandError) as e:
        dev.synchronize()
    assert f"test_metal.py:{_marked_line(reads_past_the_end)})" in str(e.value), str(e.value)
    # the device stays usable
    np.testing.assert_array_equal(kk.to_numpy(ta), 1.0)


def test_runtime_values_are_checked_at_the_call(dev, examples):
    prog = examples["scaled_add_km"].scaled_add_program
    ta = tile(dev, np.ones((32, 32)))
    out = empty_like(dev, ta)
    missing = r"scaled_add_km.py:\d+: program 'scaled_add' runs without runtime value 's'"
    with pytest.raises(KernelDSLError, match=missing):
        prog.launch({"a": ta, "b": ta, "out": out}, {"tiles": 1})
    with pytest.raises(KernelDSLError, match="pass a float's fp32 bits"):
        prog.launch({"a": ta, "b": ta, "out": out}, {"tiles": 1, "s": 0.5})
    with pytest.raises(KernelDSLError, match="leaves out"):
        prog.launch({"a": ta, "out": out}, {"tiles": 1, "s": 0})


# --------------------------------------------------------------------------------------------- torch ops
@pytest.fixture(scope="module")
def torch_examples(examples):
    return examples


def test_dsl_ops_run_as_torch_ops_in_order_with_other_ops(torch_examples):
    import torch

    import kohakutt

    ex = torch_examples["scaled_add_km"]
    dev = kohakutt.device(0)
    torch.manual_seed(0)
    before = ex.scaled_add_program.compiles
    loaded = None
    for i, n in enumerate(range(1, 21)):  # 20 shapes: one variant, no new kernel builds after the first call
        a, b = torch.randn(n, 3 * n + 5).bfloat16(), torch.randn(n, 3 * n + 5).bfloat16()
        got = (ex.scaled_add(a.to(dev) * 2, b.to(dev), 0.25) - 1).cpu()
        want = ex.reference(a * 2, b, 0.25) - 1
        assert torch.equal(got, want), n
        if i == 0:
            loaded = host_build.stats["builds"]
    assert ex.scaled_add_program.compiles - before <= 1
    assert host_build.stats["builds"] == loaded


def test_opcheck_the_dsl_op(torch_examples):
    import torch

    import kohakutt

    assert torch_examples["scaled_add_km"].scaled_add  # defines the op
    dev = kohakutt.device(0)
    a, b = torch.randn(32, 64).bfloat16().to(dev), torch.randn(32, 64).bfloat16().to(dev)
    torch.library.opcheck(torch.ops.kohakutt_example.scaled_add_km.default, (a, b, 0.5),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))  # fmt: skip


def test_km_op_checks_the_call_against_the_program(torch_examples):
    import torch

    import kohakutt

    ex = torch_examples["scaled_add_km"]

    @km.op("test_dsl::bad_call(Tensor a, Tensor b) -> Tensor", ex.scaled_add_program)
    def bad_call(a, b):
        return km.Call(inputs={"a": a, "bb": b}, outputs={"out": (list(a.shape), a.dtype)},
                       runtime={"tiles": kk.tile_count(a), "s": bits(1.0)})  # fmt: skip

    dev = kohakutt.device(0)
    a = torch.ones(32, 32).bfloat16().to(dev)
    with pytest.raises(KernelDSLError, match=r"gives \['bb'\], unknown"):
        bad_call(a, a)
    with pytest.raises(KernelDSLError, match=r"takes a @km\.program"):
        km.op("test_dsl::x(Tensor a) -> Tensor", object())


# ------------------------------------------------------------------------------------- estimates and builds
def _program_and_buffers(dev, prog, tensors, runtime):
    from kohakutt.kernels.custom import Signature, TensorRef

    refs = [TensorRef(n, t.dtype, t.dtype.format, Layout.TILE, output=n in prog.outputs) for n, t in tensors.items()]
    sig = Signature(prog.name, tuple(r for r in refs if not r.output), tuple(r for r in refs if r.output),
                    (("km.cores", prog.cores_for(runtime)),))  # fmt: skip
    return prog.build_program(sig), [t.buffer for t in tensors.values()]


def test_the_work_estimate_counts_what_the_kernels_do(dev, examples):
    prog = examples["scaled_add_km"].scaled_add_program
    tiles = 40
    ta = tile(dev, np.ones((tiles * 32, 32)))
    tensors = {"a": ta, "b": tile(dev, np.ones((tiles * 32, 32))), "out": empty_like(dev, ta)}
    rt = {"tiles": tiles, "s": bits(2.0)}
    built, bufs = _program_and_buffers(dev, prog, tensors, rt)
    work = built.work(bufs, rt)
    # per tile: two pages read, one written; two copies (FPU), a scalar multiply and an add (SFPU)
    assert (work.dram_bytes, work.fpu_tiles, work.sfpu_tiles, work.matmul_tiles) == (3 * tiles * 2048, 2 * tiles,
                                                                                      2 * tiles, 0)  # fmt: skip
    assert len(built.cores()) == min(tiles, 130) == prog.cores_for(rt)
    assert prog.cores_for({"tiles": 1000, "s": 0}) == 130 and prog.cores_for({"tiles": 0, "s": 0}) == 1


def test_a_cpp_error_on_the_simulator_names_the_dsl_line(dev, examples):
    import dataclasses

    prog = examples["scaled_add_km"].scaled_add_program
    ta = tile(dev, np.ones((32, 32)))
    tensors = {"a": ta, "b": ta, "out": empty_like(dev, ta)}
    rt = {"tiles": 1, "s": bits(1.0)}
    built, bufs = _program_and_buffers(dev, prog, tensors, rt)
    compute = next(k for k in built.kernels if k.kind == "compute")
    assert compute.source.count("mul_unary_tile(0, s);") == 1
    broken = dataclasses.replace(compute, source=compute.source.replace("mul_unary_tile(0, s);", "mul_unary_tile(0);"))
    built = dataclasses.replace(built, kernels=[broken if k is compute else k for k in built.kernels])
    line = next(i for i, ln in enumerate((EXAMPLES / "scaled_add_km.py").read_text().splitlines(), 1)
                if 'c.op("mul_scalar", 0, value=s)' in ln)  # fmt: skip
    dev.run_program(built, bufs, rt)
    with pytest.raises(CommandError, match=rf"KernelBuildError: .*scaled_add_km\.py:{line}: no matching function"):
        dev.synchronize()
