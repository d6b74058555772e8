"""The matmul family on each backend."""
