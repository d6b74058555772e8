"""Every op family's implementations, imported once by the kernel registry."""

from kohakutt.kernels import (  # noqa: F401
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
