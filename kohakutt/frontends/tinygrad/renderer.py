"""The KTT renderer: each kernel's AST, not its scalar code, compiled into a tile program.

tinygrad lowers a kernel to flat scalar UOps inside ``tinygrad.codegen.do_to_program``, which ``to_program`` looks up
at call time. Wrapping that one function (at import of this module, which is also what unpickling a
:class:`KTTRenderer` in one of tinygrad's compile workers does) hands KTT kernels to :func:`compile_ast` before any
lowering; every other device goes through the original unchanged. Nothing of tinygrad is changed on disk.

A patch because tinygrad 0.14 has no public way to hand a device a kernel's AST: a ``Renderer`` only ever receives
the linearized scalar UOps. ``tests/frontends/tinygrad/test_library_hooks.py`` fails when tinygrad changes under it.
"""

from __future__ import annotations

import platform
import shutil
from dataclasses import replace
from typing import Any

import tinygrad.codegen as codegen
from kohakutt.frontends.tinygrad import translate
from kohakutt.frontends.tinygrad.translate import HOST, RANDOM, TILE, NoTileForm
from tinygrad.device import Compiler
from tinygrad.helpers import Target
from tinygrad.renderer import Estimates, Renderer
from tinygrad.uop.ops import KernelInfo, Ops, ProgramInfo, UOp, graph_rewrite

RANDOM_KERNEL = "ktt_uniform"  # KernelInfo name of the random kernels built by random.py


class KTTCompiler(Compiler):
    """The identity: a KTT program's source is already its binary (the PROGRAM carries both)."""

    def __init__(self) -> None:
        super().__init__(None)


class KTTRenderer(Renderer):
    """Marks kernels for :func:`compile_ast`; never renders scalar code itself."""

    has_local = False
    has_shared = False
    supports_float4 = False
    global_max = None
    local_max = None
    compiler = KTTCompiler()

    def __init__(self, target: Target):
        super().__init__(replace(target, device="KTT", renderer="KTT"))

    def render(self, uops: list[UOp]) -> str:
        raise NotImplementedError("KTT kernels are compiled from their AST by compile_ast, not from scalar uops")


def _python_renderer() -> Renderer:
    from tinygrad.runtime.ops_python import PythonRenderer

    return PythonRenderer(Target(device="PYTHON", renderer="PYTHON"))


def _estimates(prog: translate.TileProgram, ast: UOp) -> Estimates:
    n = 1
    for s in prog.sizes:
        n *= s
    mem = sum(
        int(u.src[0].arg) * getattr(u.dtype, "base", u.dtype).itemsize
        for u in ast.toposort()
        if u.op is Ops.PARAM and u.src and u.src[0].op is Ops.CONST and isinstance(u.src[0].arg, int)
    )
    alu = sum(2 if nd.kind == "matmul" else 1 for nd in prog.nodes if nd.kind in ("alu", "matmul", "reduce"))
    return Estimates(ops=n * alu, lds=mem, mem=mem)


def compile_ast(ast: UOp, renderer: KTTRenderer) -> UOp:
    """The PROGRAM for kernel ``ast``: a tile program when it has a tile form, else a host program compiled by
    tinygrad's PYTHON renderer. src = (sink with the program's name, LINEAR(params), SOURCE, BINARY)."""
    sink = graph_rewrite(ast, codegen.multi_pm, name="multi_pm")
    sink = graph_rewrite(sink, codegen.pm_mops, name="early movement ops", bottom_up=True)
    name = getattr(ast.arg, "name", "") or ""
    if not name.startswith(RANDOM_KERNEL):
        # as tinygrad lowers: a one-hot sum that indexes a tensor by another becomes a load (a gather), and tinygrad's
        # algebra applies (x*(1/(1+x)) -> 1-1/(1+x) keeps an Inf from turning into NaN)
        sink = graph_rewrite(sink, codegen.pm_load_collapse, name="ktt load collapse")
        sink = graph_rewrite(sink, codegen.sym + codegen.pm_flatten_range, name="ktt symbolic")
    try:
        if name.startswith(RANDOM_KERNEL):
            prog, kind = translate.uniform_program(sink), RANDOM
        else:
            prog, kind = translate.build(sink), TILE
    except NoTileForm as e:
        return _host_program(ast, e)
    info = ProgramInfo.from_sink(sink, renderer.target)
    info = replace(
        info,
        name=prog.name,
        ins=tuple(s for s in prog.ins if s in info.globals),
        global_size=(1, 1, 1),
        local_size=(1, 1, 1),
    )
    params = sorted({u for u in sink.toposort() if u.op is Ops.PARAM}, key=lambda u: u.arg.slot)
    payload: dict[str, Any] = {"program": prog, "globals": info.globals}
    kinfo = sink.arg if isinstance(sink.arg, KernelInfo) else KernelInfo()
    named = sink.replace(arg=replace(kinfo, name=prog.name, estimates=_estimates(prog, sink)))
    return UOp(
        Ops.PROGRAM,
        src=(
            named,
            UOp(Ops.LINEAR, src=tuple(params)),
            UOp(Ops.SOURCE, arg=prog.listing()),
            UOp(Ops.BINARY, arg=translate.pack(kind, payload)),
        ),
        arg=info,
    )


def _cpu_program(ast: UOp) -> UOp | None:
    """``ast`` compiled as tinygrad's own CPU device compiles it (C through clang), or None where that is not
    available: no clang, or a kernel the C renderer refuses. Built without opening the CPU device (compile workers
    may not), for the CPU device's target. ``KTT_TINYGRAD_HOST`` chooses between it and the interpreter at run time."""
    if shutil.which("clang") is None:
        return None
    from tinygrad.renderer.cstyle import ClangRenderer

    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "aarch64": "arm64"}.get(machine, machine) + ",native"
    try:
        return _original(ast, ClangRenderer(Target(device="CPU", arch=arch)))
    except Exception:  # what the C renderer cannot build still runs in the interpreter
        return None


def _host_program(ast: UOp, why: NoTileForm) -> UOp:
    prg = _original(ast, _python_renderer())
    info: ProgramInfo = prg.arg
    name = f"ktt_host_{info.name}"
    cpu = _cpu_program(ast)
    payload = {
        "lib": prg.src[3].arg,
        "kind": why.kind,
        "detail": str(why),
        "name": name,
        "globals": info.globals,
        "vars": tuple(v.expr for v in info.vars),
        "outs": tuple(info.globals.index(s) for s in info.outs if s in info.globals),
        "cpu": None if cpu is None else (cpu.to_elf(), cpu.arg),
    }
    how = "tinygrad's PYTHON interpreter runs this kernel" if cpu is None else "tinygrad's CPU device runs this C"
    src = f"// host fallback ({why}): {how}\n{(prg if cpu is None else cpu).src[2].arg}"
    return UOp(
        Ops.PROGRAM,
        src=(prg.src[0], prg.src[1], UOp(Ops.SOURCE, arg=src), UOp(Ops.BINARY, arg=translate.pack(HOST, payload))),
        arg=replace(info, name=name),
    )


_original = getattr(codegen.do_to_program, "__ktt_original__", codegen.do_to_program)


def _do_to_program(ast: UOp, renderer: Renderer) -> UOp:
    if isinstance(renderer, KTTRenderer) and ast.op is Ops.SINK:
        return compile_ast(ast, renderer)
    return _original(ast, renderer)


_do_to_program.__ktt_original__ = _original  # type: ignore[attr-defined]


def install() -> None:
    """Route KTT kernels through :func:`compile_ast` (idempotent; done at import)."""
    if getattr(codegen.do_to_program, "__ktt_original__", None) is None:
        codegen.do_to_program = _do_to_program


install()
