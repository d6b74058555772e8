"""Every op family's IR definitions, imported once by the op registry."""

from kohakutt.ir.defs import (  # noqa: F401
    core,
    elementwise,
    random,
    reduce,
    softmax,
    matmul,
    conv,
    pool,
    norm,
    attention,
    fused,
    movement,
    embedding,
)
