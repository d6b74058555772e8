"""The one native builder (kohakutt.native) and the C boundaries read from headers."""

from __future__ import annotations

import ctypes
from pathlib import Path

import cffi
import pytest

from kohakutt import native
from kohakutt.errors import KohakuTTError

TORCH_HEADER = native.NATIVE_DIR / "torch" / "ktt_torch.h"

# cffi's primitive type names -> the ctypes type of the same size and signedness
_CFFI_TO_CTYPES = {
    "int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "double": ctypes.c_double, "void *": ctypes.c_void_p,
    "char *": ctypes.c_char_p,
}  # fmt: skip


def _from_cffi(ffi: cffi.FFI, t: cffi.FFI.CType) -> object:
    """The ctypes type a cffi type stands for (an independent reading of the same declarations)."""
    if t.kind == "void":
        return None
    if t.kind == "primitive":
        return _CFFI_TO_CTYPES[t.cname]
    if t.kind == "pointer":
        if t.item.kind == "void" or t.item.cname == "char":
            return _CFFI_TO_CTYPES[f"{t.item.cname} *"]
        if t.item.kind == "struct":
            return ("struct", t.item.cname.removeprefix("struct "))
        return ctypes.POINTER(_from_cffi(ffi, t.item))
    raise AssertionError(f"unexpected cffi type {t.cname}")


def _same(ours: object, theirs: object) -> bool:
    if isinstance(theirs, tuple):  # a pointer to a struct of the boundary
        return issubclass(ours, ctypes._Pointer) and ours._type_.__name__ == theirs[1]  # type: ignore[union-attr]
    if theirs is None or ours is None:
        return ours is theirs
    if issubclass(theirs, ctypes._Pointer):  # type: ignore[arg-type]
        return issubclass(ours, ctypes._Pointer) and _same(ours._type_, theirs._type_)  # type: ignore[union-attr]
    return ctypes.sizeof(ours) == ctypes.sizeof(theirs) and ours._type_ == theirs._type_  # type: ignore[union-attr]


def test_the_torch_glue_boundary_reads_as_cffi_reads_it():
    """Every function and entry point of ktt_torch.h, as our reader makes it, has the signature cffi's C parser
    gives the same block (so the C++ side and the ctypes side cannot drift apart)."""
    ours = native.c_boundary(TORCH_HEADER)
    ffi = cffi.FFI()
    ffi.cdef(native.cdef_block(TORCH_HEADER))
    table = ffi.typeof("ktt_torch_hal")
    assert [name for name, _ in table.fields] == [s.name for s in ours.structs["ktt_torch_hal"]]
    for (name, field), sig in zip(table.fields, ours.structs["ktt_torch_hal"], strict=True):
        fn = field.type  # cffi's type of a function pointer
        assert fn.kind == "function", name
        assert _same(sig.restype, _from_cffi(ffi, fn.result)), name
        assert len(sig.argtypes) == len(fn.args), name
        for a, b in zip(sig.argtypes, fn.args, strict=True):
            assert _same(a, _from_cffi(ffi, b)), name
    import torch  # noqa: F401  (the glue is built against it)

    from kohakutt.frontends.torch import native as glue

    lib = ffi.dlopen(glue.load()._name)  # cffi types a declared function through a library that has it
    for name, sig in ours.functions.items():
        fn = ffi.typeof(getattr(lib, name))
        assert _same(sig.restype, _from_cffi(ffi, fn.result)), name
        assert [_same(a, _from_cffi(ffi, b)) for a, b in zip(sig.argtypes, fn.args, strict=True)] == [True] * len(
            fn.args
        ), name


def test_the_boundary_reader_refuses_what_it_cannot_type(tmp_path: Path):
    h = tmp_path / "x.h"
    h.write_text("/* KTT_CDEF_BEGIN */\nlong double f(int x);\n/* KTT_CDEF_END */\n")
    with pytest.raises(native.NativeBuildError, match="no ctypes type"):
        native.c_boundary(h)
    h.write_text("/* KTT_CDEF_BEGIN */\nint f(int);\n/* KTT_CDEF_END */\n")
    with pytest.raises(native.NativeBuildError, match="needs a type and a name"):
        native.c_boundary(h)
    h.write_text("int f(int x);\n")
    with pytest.raises(native.NativeBuildError, match="KTT_CDEF_BEGIN"):
        native.c_boundary(h)


def test_a_recipe_key_follows_sources_headers_flags_and_salt(tmp_path: Path):
    src, hdr = tmp_path / "a.c", tmp_path / "a.h"
    src.write_text("int a(void) { return 1; }\n")
    hdr.write_text("int a(void);\n")
    cc = native.find_compiler("c")
    base = native.Recipe("liba.so", "a test library", "c", (src,), (hdr,), ("-O2",))
    key = base.key(cc)
    assert base.key(cc) == key
    assert native.Recipe("liba.so", "a", "c", (src,), (hdr,), ("-O1",)).key(cc) != key
    assert native.Recipe("liba.so", "a", "c", (src,), (hdr,), ("-O2",), salt="torch 9").key(cc) != key
    hdr.write_text("int a(void); /* changed */\n")
    assert base.key(cc) != key


def test_build_compiles_once_and_a_failed_build_leaves_nothing(tmp_path: Path):
    src = tmp_path / "b.c"
    src.write_text("int ktt_b(void) { return 42; }\n")
    cc = native.find_compiler("c")
    recipe = native.Recipe("libb.so", "a test library", "c", (src,), flags=("-O2", "-fPIC", "-shared"))
    path = native.build(recipe, tmp_path / "cache", cc)
    assert ctypes.CDLL(str(path)).ktt_b() == 42
    stamp = path.stat().st_mtime_ns
    assert native.build(recipe, tmp_path / "cache", cc) == path and path.stat().st_mtime_ns == stamp
    src.write_text("int ktt_b(void) { return oops; }\n")
    with pytest.raises(native.BuildFailed, match="building a test library failed") as info:
        native.build(recipe, tmp_path / "cache", cc)
    assert "oops" in info.value.stderr and isinstance(info.value, KohakuTTError)
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()) == ["libb.so"]
    with pytest.raises(native.NativeBuildError, match="missing"):
        native.build(native.Recipe("libc.so", "x", "c", (tmp_path / "nope.c",)), tmp_path / "cache", cc)


def test_missing_compilers_say_which_knob_to_set(monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(native.NativeBuildError, match="KTT_CXX"):
        native.find_compiler("c++", "no-such-compiler-ktt")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(native.NativeBuildError, match=r"install g\+\+.*KTT_CXX"):
        native.find_compiler("c++")
    with pytest.raises(native.NativeBuildError, match=r"install gcc.*KTT_CC"):
        native.find_compiler("c")


def test_the_built_glue_exports_exactly_the_boundarys_functions():
    import shutil
    import subprocess

    import torch  # noqa: F401  (the glue is built against it)

    from kohakutt.frontends.torch import native as glue

    if shutil.which("nm") is None:
        pytest.skip("no nm to list the glue's symbols")
    lib = glue.load()
    out = subprocess.run(["nm", "-D", "--defined-only", lib._name], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("ktt_torch_")}
    assert exported == set(glue.boundary().functions)
