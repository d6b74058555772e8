"""Kernel DSLs: write a card program in Python (``kohakutt.dsl.metal``)."""
