"""Kohaku-TT's own Metalium programs for the op library: each module builds hal Programs (reader / compute / writer
C++ sources with their simulator twins) and runs them through ``device.run_program``. The vectorized model of the
same arithmetic, the op library's fast path, sits in the program's module or in its op family's
(``kohakutt/kernels/<family>.py``); the tests check the two against each other."""
