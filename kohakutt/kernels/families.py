"""Every op family's implementations, imported once by the kernel registry."""

from kohakutt.kernels import (  # noqa: F401
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
    ttnn_io,
    wide,
)
