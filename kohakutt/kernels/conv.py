"""The conv family on each backend."""
