"""The embedding family on each backend."""
