"""The reduce family on each backend."""
