"""Every op family's IR definitions, imported once by the op registry."""

from kohakutt.ir.defs import (  # noqa: F401
    attention,
    conv,
    core,
    elementwise,
    embedding,
    fused,
    matmul,
    movement,
    norm,
    pool,
    random,
    reduce,
    softmax,
)
