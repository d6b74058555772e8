"""Stand-in declarations for the sfpi headers (``sfpi.h``, ``lltt.h``), written at test time for the kernel compile
check (``kernel_check.py``).

TT-Metal's compute kernels include the SFPU's C++ library, sfpi, which ships with sfpi's RISC-V compiler and not in
the ttnn wheel. For a syntax-only check of kernel code these declarations stand in for it: one permissive vector
type that every sfpi vector type names, the enums and constants the LLK headers use, and the ``v_if`` family as
plain C++ blocks. They are written here from the names the wheel's headers use; nothing of sfpi is copied. They are
good enough to parse and instantiate the SFPU paths a kernel calls, not to say anything about the SFPU's semantics.
"""

from __future__ import annotations

from pathlib import Path

_TYPES = [
    "vFloat",
    "vInt",
    "vUInt",
    "vBool",
    "vMag",
    "vSMag",
    "vSMag8",
    "vSMag16",
    "vUInt8",
    "vUInt16",
    "vInt8",
    "vInt16",
    "vFloat16a",
    "vFloat16b",
    "vLut",
    "vLut4",
    "vLut8si",
    "vLut16ss",
    "vLut16ii",
    "vLut16",
    "sFloat16a",
    "sFloat16b",
    "vCond",
    "vCCState",
]
_ENUMS = {
    "RoundMode": "Nearest NearestAway NearestEven NearestStochastic",
    "DataLayout": "Default F16a F16b F32 FSrcB I32 M32 None SM16 SM32 SM8 U16 U32 U8",
    "LRegs": "LReg0 LReg1 LReg2 LReg3 LReg4 LReg5 LReg6 LReg7 LRegCount",
    "ExponentMode": "Biased Debiased",
    "MantissaMode": "ImplicitOne NoImplicitOne",
    "ShiftMode": "Arithmetic Logical",
    "LutSign": "Retain Update",
    "FractionalHalf": "High Low",
}
_CONSTANTS = [
    "vConst0",
    "vConst1",
    "vConstNeg1",
    "vConst0p8373",
    "vConstLn2",
    "vConst1Ln2",
    "vConstTileId",
    "vConstFloatPrgm0",
    "vConstFloatPrgm1",
    "vConstFloatPrgm2",
    "vConstIntPrgm0",
    "vConstIntPrgm1",
    "vConstIntPrgm2",
    "vConstFloatPrgmN",
]
_FUNCTIONS = [
    "abs",
    "addexp",
    "approx_recip",
    "as",
    "clamp",
    "convert",
    "copysgn",
    "exexp",
    "exexp_nodebias",
    "exman",
    "exman8",
    "exman9",
    "float_to_fp16a",
    "float_to_fp16b",
    "float_to_int16",
    "float_to_int8",
    "float_to_uint16",
    "float_to_uint8",
    "fractional_mul",
    "int32_to_float",
    "is_finite",
    "is_inf",
    "is_nan",
    "is_neg",
    "is_pos",
    "lreg_pressure",
    "lut",
    "lut2",
    "lut2_sign",
    "lut_sign",
    "max",
    "min",
    "min_max",
    "nearby",
    "reinterpret",
    "setexp",
    "setman",
    "setsgn",
    "setsgn2",
    "shft",
    "subvec_shflror1",
    "subvec_shflshr1",
    "subvec_transp",
    "symmetric_clamp",
    "vec_min_max",
    "lz",
    "reduce_max",
]

_SFPI_H = """\
// Written by tests/ttnn/sfpi_stand_in.py for a syntax-only kernel check: stand-ins for sfpi's declarations.
#pragma once
#include <cstdint>

namespace sfpi {
struct vAny;
struct vRef {
    template <class T> vRef& operator=(const T&) { return *this; }
    template <class T> operator T() const { return T(); }
    vAny get() const;
};
struct vAny {
    constexpr vAny() {}
    template <class... A> constexpr vAny(const A&...) {}
    template <class T> vAny& operator=(const T&) { return *this; }
    template <class T> operator T() const { return T(); }
    vRef operator[](int) const { return vRef(); }
    vAny get() const { return *this; }
    template <class T> vAny operator+=(const T&) { return *this; }
    template <class T> vAny operator-=(const T&) { return *this; }
    template <class T> vAny operator*=(const T&) { return *this; }
    template <class T> vAny operator&=(const T&) { return *this; }
    template <class T> vAny operator|=(const T&) { return *this; }
    template <class T> vAny operator^=(const T&) { return *this; }
    template <class T> vAny operator<<=(const T&) { return *this; }
    template <class T> vAny operator>>=(const T&) { return *this; }
    vAny operator++(int) { return *this; }
    vAny operator--(int) { return *this; }
    vAny operator-() const { return *this; }
    vAny operator~() const { return *this; }
    vAny operator!() const { return *this; }
};
inline vAny vRef::get() const { return vAny(); }
#define KTT_SFPI_BINOP(op) \\
    inline vAny operator op(const vAny&, const vAny&) { return vAny(); } \\
    template <class T> vAny operator op(const vAny&, const T&) { return vAny(); } \\
    template <class T> vAny operator op(const T&, const vAny&) { return vAny(); } \\
    inline vAny operator op(const vRef&, const vRef&) { return vAny(); } \\
    template <class T> vAny operator op(const vRef&, const T&) { return vAny(); } \\
    template <class T> vAny operator op(const T&, const vRef&) { return vAny(); }
KTT_SFPI_BINOP(+) KTT_SFPI_BINOP(-) KTT_SFPI_BINOP(*) KTT_SFPI_BINOP(/) KTT_SFPI_BINOP(&) KTT_SFPI_BINOP(|)
KTT_SFPI_BINOP(^) KTT_SFPI_BINOP(<<) KTT_SFPI_BINOP(>>) KTT_SFPI_BINOP(<) KTT_SFPI_BINOP(>) KTT_SFPI_BINOP(<=)
KTT_SFPI_BINOP(>=) KTT_SFPI_BINOP(==) KTT_SFPI_BINOP(!=) KTT_SFPI_BINOP(&&) KTT_SFPI_BINOP(||)
#undef KTT_SFPI_BINOP
@TYPES@
@ENUMS@
@CONSTANTS@
inline vAny dst_reg[1024];
inline vAny l_reg[8];
@FUNCTIONS@
}  // namespace sfpi

#define sfpi_inline inline
#define v_if(x) if (true) {
#define v_elseif(x) } else if (true) {
#define v_else } else {
#define v_endif }
#define v_block {
#define v_endblock }
#define v_and(x)
#define KTT_SFPI_IMM(name) constexpr int name = 0;
"""

_LLTT_H = """\
// Written by tests/ttnn/sfpi_stand_in.py for a syntax-only kernel check: stand-ins for sfpi's lltt.h.
#pragma once
#include <cstdint>

namespace lltt {
enum ExecBool { NoExec = 0, Exec = 1 };
template <ExecBool E = NoExec, class... A> inline void record(const A&...) {}
template <class... A> inline void replay(const A&...) {}
template <class... A> inline void replay_insn(const A&...) {}
}  // namespace lltt
"""


def _sfpi_h(imm_names: list[str]) -> str:
    types = "\n".join(f"using {t} = vAny;" for t in _TYPES)
    enums = "\n".join(f"enum class {n} {{ {', '.join(v.split())} }};" for n, v in _ENUMS.items())
    consts = "\n".join(f"inline vAny {c};" for c in _CONSTANTS)
    funcs = "\n".join(
        f"template <class... T, class... A> inline vAny {f}(const A&...) {{ return vAny(); }}\n"
        f"template <auto... N, class... A> inline vAny {f}(const A&...) {{ return vAny(); }}"
        for f in _FUNCTIONS
    )
    imms = "\n".join(f"constexpr int {n} = 0;" for n in imm_names)
    text = _SFPI_H.replace("@TYPES@", types).replace("@ENUMS@", enums).replace("@CONSTANTS@", consts)
    return text.replace("@FUNCTIONS@", funcs + "\n" + imms)


def sfpu_constant_names(headers: Path) -> list[str]:
    """The ``sfpi::SFP...`` instruction-modifier constants the wheel's headers under ``headers`` name."""
    import re

    names: set[str] = set()
    pat = re.compile(r"sfpi::(SFP[A-Z0-9_]+)")
    for p in headers.rglob("*.h"):
        names.update(pat.findall(p.read_text(errors="replace")))
    return sorted(names)


def write(folder: Path, tt_metal: Path) -> Path:
    """Write ``sfpi.h`` and ``lltt.h`` stand-ins into ``folder`` (the constants named by the headers of the wheel's
    ``tt_metal`` folder); return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sfpi.h").write_text(_sfpi_h(sfpu_constant_names(tt_metal)))
    (folder / "lltt.h").write_text(_LLTT_H)
    return folder
