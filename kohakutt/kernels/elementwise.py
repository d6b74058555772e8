"""The elementwise family on each backend."""
