"""The pool family on each backend."""
