"""Kohaku-TT's own Metalium programs for the op library: each module builds hal Programs (C++ sources with their
simulator twins) and holds the vectorized model of the same arithmetic that the fast path runs."""
