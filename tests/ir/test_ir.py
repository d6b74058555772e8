from __future__ import annotations

import threading

import pytest

from kohakutt import ir
from kohakutt.errors import ConfigError, DtypeError, KohakuTTError, KohakuTTUnsupportedOperator
from kohakutt.hal.layout import Layout
from kohakutt.ir import DType, Fidelity, Graph, Numerics, TensorSpec, numerics
from kohakutt.ir.numerics import current, resolve
from kohakutt.ir.ops import ShapeError, broadcast_shapes, define, elementwise, norm_dims, same


def test_numerics_scope_nests_and_is_per_thread():
    assert current() == Numerics()
    with numerics(fidelity="hifi4") as outer:
        assert outer.fidelity is Fidelity.HiFi4 and outer.fp32_acc is None
        with numerics(fp32_acc=True) as inner:
            assert inner == Numerics(Fidelity.HiFi4, True, None)
            seen = []
            t = threading.Thread(target=lambda: seen.append(current()))
            t.start()
            t.join()
            assert seen == [Numerics()]  # another thread has its own scope
        assert current() == outer
    assert current() == Numerics()
    assert resolve(Numerics(Fidelity.LoFi, False, True)) == Numerics(Fidelity.LoFi, False, True)
    with numerics(fidelity=2):  # TT-Metal's MathFidelity numbering: 2 is HiFi2
        assert resolve(Numerics(Fidelity.LoFi, False, True)) == Numerics(Fidelity.HiFi2, False, True)


def test_bad_fidelity_and_dtype_names():
    with pytest.raises(ConfigError, match="unknown math fidelity 'HiFi5'"), numerics(fidelity="HiFi5"):
        pass
    with pytest.raises(DtypeError, match="no dtype 'float64'"):
        DType.of("float64")


def test_broadcasting_and_dims():
    assert broadcast_shapes((3, 1, 5), (4, 1), ()) == (3, 4, 5)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        broadcast_shapes((3,), (4,))
    assert norm_dims(-1, 3) == (2,) and norm_dims(None, 2) == (0, 1) and norm_dims((0, -3), 3) == (0,)
    with pytest.raises(ShapeError, match="out of range"):
        norm_dims(3, 3)


def test_fidelity_is_one_enum_with_phases():
    from kohakutt.hal.program import MathFidelity
    from kohakutt.kernels import cardmath

    assert cardmath.Fidelity is Fidelity  # cardmath uses the IR's enum
    assert [f.phases for f in Fidelity] == [1, 2, 3, 4]
    assert Fidelity.of(MathFidelity.HiFi3) is Fidelity.HiFi3  # the HAL's enum (below the IR) is read by name
    assert MathFidelity is Fidelity  # the HAL's, the IR's and the frontends' fidelity are one enum
    assert [int(f) for f in Fidelity] == [0, 2, 3, 4]  # TT-Metal's MathFidelity values
    for bad in (True, 1, 5, None):
        with pytest.raises(ConfigError, match="unknown math fidelity"):
            Fidelity.of(bad)


def test_same_and_elementwise_keep_the_layout():
    """TT-NN's unary ops keep the input's layout and its binary ops give tile results from tile inputs: a tile input
    gives a tile result; block floats are tile only and int64 row major only, whatever the inputs."""
    rm, tile = Layout.ROW_MAJOR, Layout.TILE
    f32, b8 = TensorSpec((2, 3), DType.FLOAT32), TensorSpec((2, 3), DType.BFLOAT8_B, tile)
    assert same()([b8], {}) == [b8]
    assert same()([f32.with_(layout=tile)], {})[0].layout is tile
    assert same()([f32], {})[0].layout is rm
    assert same(dtype=DType.BFLOAT4_B)([f32], {})[0] == TensorSpec((2, 3), DType.BFLOAT4_B, tile)
    assert same(dtype=DType.INT64)([f32.with_(layout=tile)], {})[0].layout is rm
    assert same(1)([ir.ScalarSpec(1.0), b8], {}) == [b8]
    ew = elementwise()
    assert ew([f32, ir.ScalarSpec(2.0)], {}) == [f32]
    assert ew([f32, TensorSpec((3,), DType.BFLOAT16, tile)], {}) == [TensorSpec((2, 3), DType.FLOAT32, tile)]
    assert ew([ir.ScalarSpec(2.0), b8], {}) == [TensorSpec((2, 3), DType.BFLOAT16, tile)]  # block floats promote
    assert elementwise(DType.BFLOAT8_B)([f32, f32], {})[0].layout is tile
    assert elementwise(DType.BOOL)([b8, f32], {})[0] == TensorSpec((2, 3), DType.BOOL, tile)
    assert ir.infer("copy", [b8]) == [b8]
    assert ir.infer("typecast", [f32], {"dtype": "bfloat8_b"}) == [TensorSpec((2, 3), DType.BFLOAT8_B, tile)]
    assert ir.infer("typecast", [b8], {"dtype": "float32"}) == [f32.with_(layout=tile)]


def test_registry_rejects_duplicates_and_unknown_ops():
    with pytest.raises(KohakuTTError, match="defined twice"):
        define("copy", "test", ["x"], lambda i, a: [])
    with pytest.raises(KohakuTTUnsupportedOperator, match="no IR op named 'frobnicate'"):
        ir.get("frobnicate")
    with pytest.raises(ShapeError, match="takes 1 operand"):
        ir.infer("copy", [])
    with pytest.raises(ShapeError, match="no attribute"):
        ir.infer("typecast", [TensorSpec((2,), DType.FLOAT32)], {"dtyp": "int32"})
    out = ir.infer("typecast", [TensorSpec((2, 3), DType.FLOAT32)], {"dtype": "bfloat16"})
    assert out == [TensorSpec((2, 3), DType.BFLOAT16)]


def _double(b, x):
    return b.add("typecast", b.add("copy", x), dtype="float32")


def test_graph_build_print_rewrite_decompose():
    if "test_double" not in ir.all_ops():
        define("test_double", "test", ["x"], ir.ops.same(), decomposition=_double, doc="test only")
    g = Graph("g")
    x = g.input(TensorSpec((4, 8), DType.BFLOAT16), "x")
    with numerics(fidelity="LoFi"):
        y = g.add("test_double", x)
    z = g.add("typecast", y, dtype="float32")
    dead = g.add("copy", x)
    g.set_outputs(z)
    text = str(g)
    assert "graph g(%x: bfloat16[4, 8])" in text and "test_double(%x) {fidelity=LoFi}" in text
    assert text.strip().endswith("}") and f"return {z}" in text
    assert g.eliminate_dead() == 1 and dead.producer not in g.nodes
    assert ir.decompose(g) == 1
    ops = [n.op for n in g]
    assert ops == ["copy", "typecast", "typecast"]
    assert all(n.numerics.fidelity is Fidelity.LoFi for n in g.nodes[:2])  # sub-ops keep the node's numerics
    assert g.users()[x.id][0].op == "copy"

    def drop_casts_to_same(graph, node):
        src = node.inputs[0] if node.inputs else None
        if node.op == "typecast" and src is not None and src.spec.dtype == node.outputs[0].spec.dtype:
            return [src]
        return None

    assert g.rewrite(drop_casts_to_same) == 1
    assert [n.op for n in g] == ["copy", "typecast"]
    assert g.outputs[0].producer is g.nodes[-1]


def test_rewrite_may_not_change_shapes():
    g = Graph()
    x = g.input(TensorSpec((2, 2), DType.FLOAT32))
    g.set_outputs(g.add("copy", x))
    other = g.input(TensorSpec((3,), DType.FLOAT32))
    with pytest.raises(ShapeError, match="changed shape"):
        g.rewrite(lambda graph, node: [other])
