"""The compute ops of the DSL (``c.init(name, ...)`` / ``c.op(name, ...)``): what each one emits in TT-Metal 0.81.1's
compute API, which init it needs, which header declares it and what it costs.

Operand forms (``c.op`` arguments; ``slot`` is a DST register slot, an int):
  * ``sfpu``    unary SFPU op on a slot: ``c.op("exp", slot)``
  * ``scalar``  SFPU op with a scalar: ``c.op("mul_scalar", slot, value=v)``  (v: a float, fp32 bits or a runtime value)
  * ``fill``    ``c.op("fill", slot, value=v)``: every element of the slot set to v
  * ``binary``  SFPU op on two slots: ``c.op("add", a, b, out)``  (out = a + b)
  * ``fpu``     FPU op on tiles of two CBs: ``c.op("mul_tiles", cb0, cb1, tile0, tile1, slot)`` (broadcasts, matmul)
  * ``reduce``  ``c.op("reduce_row_sum", cb, cb_scaler, tile, scaler_tile, slot)``: accumulates into the slot
  * ``unary_cb`` ``c.op("transpose", cb, tile, slot)``
The init forms (``c.init``): SFPU ops take no CB; ``fpu`` ops take (cb0, cb1); ``reduce`` ops (cb, cb_scaler, cb_out);
``copy`` and ``transpose`` take (cb).
"""

from __future__ import annotations

from dataclasses import dataclass

# Headers (0.81.1's api/compute/...): every compute kernel includes these, and each op adds its own.
BASE_HEADERS = ("api/compute/common.h", "api/compute/compute_kernel_api.h", "api/compute/compute_kernel_hw_startup.h",
                "api/compute/reconfig_data_format.h", "api/compute/pack.h", "api/compute/tile_move_copy.h")  # fmt: skip


@dataclass(frozen=True)
class OpSpec:
    name: str
    form: str  # sfpu / scalar / fill / binary / fpu / reduce / unary_cb / copy
    family: str  # the init state the op needs (FPU families and SFPU families are tracked apart)
    unit: str  # "fpu" or "sfpu": which init state c.init of this op sets
    init: str  # C++ of the init, with {cb0} {cb1} {cb2} {approx}
    call: str  # C++ of the op, with {cb0} {cb1} {t0} {t1} {slot} {a} {b} {out} {value} {approx}
    header: str
    cost: str  # work class: fpu / sfpu / matmul
    order: str = "regular"  # which CB feeds SrcA: regular (cb0 -> SrcA), reverse (cb0 -> SrcB), srca (one CB)


def _table() -> dict[str, OpSpec]:
    t: dict[str, OpSpec] = {}

    def add(spec: OpSpec) -> None:
        t[spec.name] = spec

    # copy (c.copy and c.init("copy", cb))
    add(OpSpec("copy", "copy", "copy", "fpu", "copy_init({cb0})", "copy_tile({cb0}, {t0}, {slot})",
               "api/compute/tile_move_copy.h", "fpu", "srca"))  # fmt: skip
    # unary SFPU ops: (name, C++ stem, header, takes the approx template)
    for name, stem, header, approx in (
        ("exp", "exp", "api/compute/eltwise_unary/exp.h", True),
        ("log", "log", "api/compute/compute_kernel_api.h", True),
        ("recip", "recip", "api/compute/eltwise_unary/recip.h", False),
        ("sqrt", "sqrt", "api/compute/eltwise_unary/sqrt.h", False),
        ("rsqrt", "rsqrt", "api/compute/eltwise_unary/rsqrt.h", False),
        ("gelu", "gelu", "api/compute/eltwise_unary/gelu.h", True),
        ("gelu_tanh", "gelu_tanh", "api/compute/eltwise_unary/gelu.h", False),
        ("sigmoid", "sigmoid", "api/compute/compute_kernel_api.h", True),
        ("tanh", "tanh", "api/compute/compute_kernel_api.h", True),
        ("silu", "silu", "api/compute/compute_kernel_api.h", False),
        ("square", "square", "api/compute/compute_kernel_api.h", False),
        ("abs", "abs", "api/compute/compute_kernel_api.h", False),
        ("negative", "negative", "api/compute/eltwise_unary/negative.h", False),
        ("relu", "relu", "api/compute/eltwise_unary/relu.h", False),
        ("sin", "sin", "api/compute/eltwise_unary/trigonometry.h", False),
        ("cos", "cos", "api/compute/eltwise_unary/trigonometry.h", False),
        ("erf", "erf", "api/compute/eltwise_unary/erf_erfc.h", True),
    ):
        if name == "sigmoid":
            init, call = "sigmoid_tile_init<{approx}>()", "sigmoid_tile<VectorMode::RC, {approx}>({slot})"
        elif approx:
            init, call = f"{stem}_tile_init<{{approx}}>()", f"{stem}_tile<{{approx}}>({{slot}})"
        else:
            init, call = f"{stem}_tile_init()", f"{stem}_tile({{slot}})"
        add(OpSpec(name, "sfpu", name, "sfpu", init, call, header, "sfpu"))
    # SFPU ops with a scalar (fp32 bits)
    for name, stem in (("add_scalar", "add"), ("sub_scalar", "sub"), ("mul_scalar", "mul"), ("div_scalar", "div"),
                       ("rsub_scalar", "rsub")):  # fmt: skip
        add(OpSpec(name, "scalar", "binop_with_scalar", "sfpu", "binop_with_scalar_tile_init()",
                   f"{stem}_unary_tile({{slot}}, {{value}})", "api/compute/eltwise_unary/binop_with_scalar.h",
                   "sfpu"))  # fmt: skip
    add(OpSpec("fill", "fill", "fill", "sfpu", "fill_tile_init()", "fill_tile_bitcast({slot}, {value})",
               "api/compute/eltwise_unary/fill.h", "sfpu"))  # fmt: skip
    # SFPU ops on two DST slots
    for name in ("add", "sub", "mul", "div"):
        add(OpSpec(name, "binary", f"binary_{name}", "sfpu", f"{name}_binary_tile_init()",
                   f"{name}_binary_tile({{a}}, {{b}}, {{out}})", "api/compute/eltwise_binary_sfpu.h",
                   "sfpu"))  # fmt: skip
    for name in ("max", "min"):
        add(OpSpec(name, "binary", f"binary_{name}", "sfpu", f"binary_{name}_tile_init()",
                   f"binary_{name}_tile({{a}}, {{b}}, {{out}})", "api/compute/binary_max_min.h", "sfpu"))  # fmt: skip
    # FPU element-wise ops on CB tiles, and their broadcasts (B's row 0 / column 0 / element 0)
    for op in ("add", "sub", "mul"):
        add(OpSpec(f"{op}_tiles", "fpu", f"{op}_tiles", "fpu", f"{op}_init({{cb0}}, {{cb1}})",
                   f"{op}_tiles({{cb0}}, {{cb1}}, {{t0}}, {{t1}}, {{slot}})", "api/compute/eltwise_binary.h",
                   "fpu"))  # fmt: skip
        for dim in ("rows", "cols", "scalar"):
            name = f"{op}_bcast_{dim}"
            add(OpSpec(name, "fpu", name, "fpu", f"{name}_init({{cb0}}, {{cb1}})",
                       f"{op}_tiles_bcast_{dim}({{cb0}}, {{cb1}}, {{t0}}, {{t1}}, {{slot}})", "api/compute/bcast.h",
                       "fpu"))  # fmt: skip
    add(OpSpec("matmul", "fpu", "matmul", "fpu", "matmul_init({cb0}, {cb1})",
               "matmul_tiles({cb0}, {cb1}, {t0}, {t1}, {slot})", "api/compute/matmul.h", "matmul",
               "reverse"))  # fmt: skip
    # reductions: (tile of cb) reduced along a dim, times the scaler tile's value, accumulated into the slot
    for dim, cdim in (("row", "REDUCE_ROW"), ("col", "REDUCE_COL"), ("scalar", "REDUCE_SCALAR")):
        for pool, cpool in (("sum", "SUM"), ("avg", "AVG"), ("max", "MAX")):
            tmpl = f"<PoolType::{cpool}, ReduceDim::{cdim}>"
            # a row sum / average runs as a matmul with the scaler in SrcA (0.81.1's reduce.h)
            order = "reverse" if dim == "row" and pool != "max" else "regular"
            add(OpSpec(f"reduce_{dim}_{pool}", "reduce", f"reduce_{dim}_{pool}", "fpu",
                       f"reduce_init{tmpl}({{cb0}}, {{cb1}}, {{cb2}})",
                       f"reduce_tile{tmpl}({{cb0}}, {{cb1}}, {{t0}}, {{t1}}, {{slot}})", "api/compute/reduce.h", "fpu",
                       order))  # fmt: skip
    add(OpSpec("transpose", "unary_cb", "transpose", "fpu", "transpose_init({cb0})",
               "transpose_tile({cb0}, {t0}, {slot})", "api/compute/transpose.h", "fpu", "srca"))  # fmt: skip
    return t


OPS: dict[str, OpSpec] = _table()
# c.init names that are not ops of their own: an SFPU family shared by several ops
INIT_ALIASES = {"binop_with_scalar": "mul_scalar"}


def spec(name: str) -> OpSpec | None:
    return OPS.get(INIT_ALIASES.get(name, name))


def names() -> list[str]:
    return sorted(OPS)


__all__ = ["BASE_HEADERS", "INIT_ALIASES", "OPS", "OpSpec", "names", "spec"]
