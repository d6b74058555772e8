"""IR ops of the fused family."""
