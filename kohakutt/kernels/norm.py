"""The norm family on each backend."""
