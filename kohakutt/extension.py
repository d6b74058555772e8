"""C++ extensions: programs built in C++ (``KTT_REGISTER_PROGRAM``) and torch ops that run them
(``ktt::extension::run``), built with ``torch.utils.cpp_extension`` and loaded with :func:`load`.

- :func:`include_paths` gives the folder of the shipped headers (``ktt/program.h``: the program description and
  ``KTT_REGISTER_PROGRAM``, no torch; ``ktt/extension.h``: ``ktt::extension::run``), in the style of
  ``torch.utils.cpp_extension.include_paths``: pass it as ``extra_include_paths``.
- :func:`load` loads a built library: ``torch.ops.load_library`` runs its ``TORCH_LIBRARY`` registrations (its ops
  appear under ``torch.ops.<namespace>``), and its programs become op layers
  (:class:`~kohakutt.kernels.custom.ProgramOp`) whose builder calls the C++ builder: a signature goes in, the
  program's description (kernels, circular buffers, semaphores) comes back as the HAL's
  :class:`~kohakutt.hal.program.Program`, with runtime arguments computed by the C++ ``runtime_args`` at every run.
- ``ktt::extension::run(name, inputs, outputs, runtime)`` calls :func:`_run`, which queues the program like any
  custom op (staged tensors, stream order, capture and compile, the simulator's C++ run or ``generic_op``).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from kohakutt.errors import ProgramError
from kohakutt.hal.program import CircularBuffer, CoreRange, Kernel, Program, Semaphore
from kohakutt.kernels.custom import Call, ProgramOp, Signature

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
PROGRAMS: dict[str, ProgramOp] = {}  # program name -> its op layer, from every loaded library
LIBRARIES: dict[str, ctypes.CDLL] = {}  # resolved path -> the loaded library
_lock = threading.Lock()
# c10::toString(ScalarType) names, as ktt::extension::run passes output dtypes.
_DTYPES = {"Float": torch.float32, "BFloat16": torch.bfloat16, "Half": torch.float16, "Int": torch.int32,
           "Long": torch.int64, "Bool": torch.bool, "Byte": torch.uint8, "UInt16": torch.uint16,
           "UInt32": torch.uint32, "Double": torch.float64, "Short": torch.int16, "Char": torch.int8}  # fmt: skip


def include_paths() -> list[str]:
    """The include folders of Kohaku-TT's C++ extension headers (``ktt/extension.h``, ``ktt/program.h``)."""
    return [str(INCLUDE_DIR)]


def load(path: str | os.PathLike[str]) -> list[str]:
    """Load the extension library at ``path``: its ops appear under ``torch.ops.<namespace>``; returns the names of
    the programs it registers. Loading the same file again does nothing."""
    p = Path(path).resolve()
    if not p.is_file():
        raise ProgramError(f"no extension library at {p}; build it first (torch.utils.cpp_extension)")
    with _lock:
        lib = LIBRARIES.get(str(p))
        if lib is not None:
            return _names(lib)
        torch.ops.load_library(str(p))  # runs its TORCH_LIBRARY and KTT_REGISTER_PROGRAM registrations
        lib = ctypes.CDLL(str(p))
        try:
            lib.ktt_extension_programs.restype = ctypes.c_void_p
            lib.ktt_extension_build.restype = ctypes.c_void_p
            lib.ktt_extension_build.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            lib.ktt_extension_runtime_args.restype = ctypes.c_void_p
            lib.ktt_extension_runtime_args.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                                                       ctypes.c_uint64, ctypes.c_char_p]  # fmt: skip
            lib.ktt_extension_free.argtypes = [ctypes.c_void_p]
        except AttributeError:
            raise ProgramError(f"{p} registers no Kohaku-TT programs: include ktt/program.h (or ktt/extension.h) "
                               "and register one with KTT_REGISTER_PROGRAM") from None  # fmt: skip
        LIBRARIES[str(p)] = lib
        names = _names(lib)
        for name in names:
            if name in PROGRAMS:
                raise ProgramError(f"program {name!r} of {p} is registered already by another library")
            PROGRAMS[name] = ProgramOp(name, _CppBuilder(lib, name, p))
        return names


def _take(lib: ctypes.CDLL, ptr: int | None) -> str:
    if not ptr:
        raise ProgramError("the extension library returned nothing")
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        lib.ktt_extension_free(ptr)


def _names(lib: ctypes.CDLL) -> list[str]:
    return [n for n in _take(lib, lib.ktt_extension_programs()).splitlines() if n]


def _ranges(spec: Sequence[Sequence[Sequence[int]]]) -> list[CoreRange]:
    return [CoreRange(tuple(a), tuple(b)) for a, b in spec]


class _CppBuilder:
    """A program builder that asks the library's C++ builder."""

    def __init__(self, lib: ctypes.CDLL, name: str, path: Path):
        self.lib, self.name, self.path = lib, name, path

    def __call__(self, sig: Signature) -> Program:
        lines = []
        for t in sig.tensors:
            page = t.page_size or 0
            args = ",".join(str(a) for a in t.accessor_args())
            lines.append(f"tensor\t{t.name}\t{t.format.value}\t{t.layout.value}\t{int(t.output)}\t{page}\t{args}")
        lines += [f"static\t{k}\t{v}" for k, v in sig.static]
        desc = json.loads(_take(self.lib, self.lib.ktt_extension_build(self.name.encode(), "\n".join(lines).encode())))
        if "error" in desc:
            raise ProgramError(f"C++ program {self.name!r} ({self.path.name}): {desc['error']}")
        kernels = []
        for k in desc["kernels"]:
            source: Any = Path(k["source_file"]) if k["source_file"] else k["source"]
            kernels.append(Kernel(k["kind"], source, _ranges(k["cores"]), compile_time_args=k["compile_time_args"],
                                  defines=k["defines"], name=k["name"], math_fidelity=k["math_fidelity"],
                                  fp32_dest_acc_en=k["fp32_dest_acc_en"], math_approx_mode=k["math_approx_mode"],
                                  dst_full_sync_en=k["dst_full_sync_en"]))  # fmt: skip
        cbs = [CircularBuffer(c["index"], c["format"], c["page_size"], c["num_pages"], _ranges(c["cores"]))
               for c in desc["cbs"]]  # fmt: skip
        sems = [Semaphore(s["id"], _ranges(s["cores"]), s["initial_value"]) for s in desc["semaphores"]]
        handle = int(desc["handle"])

        def runtime_args(buffers: Sequence[Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
            words = (ctypes.c_uint64 * max(1, 4 * len(buffers)))()
            for i, b in enumerate(buffers):
                words[4 * i : 4 * i + 4] = [int(b.address), int(b.num_pages), int(b.page_size), int(b.nbytes)]
            rt = "\n".join(f"{k}\t{int(v)}" for k, v in runtime.items()).encode()
            out = json.loads(_take(self.lib, self.lib.ktt_extension_runtime_args(handle, words, len(buffers), rt)))
            if "error" in out:
                raise ProgramError(f"C++ program {self.name!r}: {out['error']}")
            return {kernel: {tuple(core): args for core, args in per_core} for kernel, per_core in out.items()}

        return Program(desc["name"] or self.name, kernels, cbs, sems, runtime_args=runtime_args, tensors=sig.names)


def program_op(name: str) -> ProgramOp:
    """The op layer of a loaded C++ program (its ``stats``, its programs by signature)."""
    try:
        return PROGRAMS[name]
    except KeyError:
        raise ProgramError(f"no C++ program {name!r} is loaded; loaded: {sorted(PROGRAMS)}. Load its library "
                           "with kohakutt.extension.load(path)") from None  # fmt: skip


def _run(name: str, inputs: Sequence[torch.Tensor], outputs: Sequence[tuple[list[int], str]],
         runtime: Mapping[str, int]) -> list[torch.Tensor]:  # fmt: skip
    """What ``ktt::extension::run`` calls: queue program ``name`` over ``inputs`` into new tensors ``outputs``
    (shape, c10 dtype name); tensors are named ``in0, in1, ..., out0, ...`` for the program."""
    from kohakutt.frontends.torch import custom_ops

    op = program_op(name)
    specs = {}
    for i, (shape, dtype) in enumerate(outputs):
        if dtype not in _DTYPES:
            raise ProgramError(f"C++ program {name!r}: output {i} has dtype {dtype}, which tt tensors cannot hold")
        specs[f"out{i}"] = (shape, _DTYPES[dtype])
    call = Call(inputs={f"in{i}": t for i, t in enumerate(inputs)}, outputs=specs, runtime=dict(runtime))
    return custom_ops.run_call(op, call)


__all__ = ["INCLUDE_DIR", "PROGRAMS", "include_paths", "load", "program_op"]
