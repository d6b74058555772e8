"""IR ops of the matmul family."""
