"""The fused family on each backend."""
