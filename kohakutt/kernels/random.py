"""The random family on each backend."""
