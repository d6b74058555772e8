"""Kohaku-TT's own Metalium programs for the op library: each module builds hal Programs (reader / compute / writer
kernels over circular buffers, with their simulator twins) and runs them through ``device.run_program``. The
kernels' C++ sources are files beside the modules, one folder per program (``SOURCE_DIR / "<program>" /
"{reader,compute,writer}.cpp"``, shared kernels under ``shared/``), shipped as package data. The vectorized model of
the same arithmetic, the op library's fast path, sits in the program's module or in its op family's
(``kohakutt/kernels/<family>.py``); the tests check the two against each other."""

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
"""Where the programs' kernel sources live: ``<program>/{reader,compute,writer}.cpp``."""

__all__ = ["SOURCE_DIR"]
