"""The attention family on each backend."""
