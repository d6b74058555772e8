"""The movement family on each backend."""
