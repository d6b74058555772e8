"""How the KTT device hooks into tinygrad 0.14, which has no public API for any of the three things below, so each
is a patch of one name. These tests fail when tinygrad changes under a patch: re-check it (and whether a public hook
has appeared) before changing the test."""

from __future__ import annotations

import inspect
from importlib import metadata

import numpy as np
import pytest

tinygrad = pytest.importorskip("tinygrad")

import tinygrad.codegen as codegen  # noqa: E402
from tinygrad import Device, Tensor, dtypes  # noqa: E402
from tinygrad.engine import realize  # noqa: E402
from tinygrad.mixin.rand import RandMixin  # noqa: E402

import kohakutt.tinygrad  # noqa: E402, F401  (registers KTT)
from kohakutt.frontends.tinygrad import counters, random, renderer  # noqa: E402


def test_the_pinned_tinygrad_is_the_one_the_patches_were_written_for():
    assert metadata.version("tinygrad").startswith("0.14."), "pyproject pins tinygrad 0.14: re-check every patch"


# --------------------------------------------------------------- the device: a module placed where Device looks
def test_tinygrad_finds_devices_by_importing_runtime_ops_modules():
    source = inspect.getsource(type(Device).get_class)
    assert "import_module" in source and ".runtime.ops_" in source
    assert type(Device["KTT"]).__name__ == "KTTDevice"


# ---------------------------------------------------- kernels: whole ASTs through codegen.do_to_program
def test_to_program_looks_do_to_program_up_when_called():
    # the patch replaces the module attribute; callers must reach it through codegen.to_program, which reads the
    # global at call time, and never hold the original themselves
    assert "do_to_program" in codegen.to_program.__code__.co_names
    assert realize.to_program is codegen.to_program
    assert "do_to_program(ast, renderer)" in inspect.getsource(codegen.to_program)  # the arguments the patch takes
    assert codegen.do_to_program is renderer._do_to_program and renderer._original is not renderer._do_to_program


def test_a_ktt_kernel_gets_a_tile_program_and_other_devices_tinygrads_own():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    before = counters.stats()["tile_kernels"]
    got = (Tensor(a, device="KTT") * 2 + 1).numpy()
    np.testing.assert_array_equal(got, a * 2 + 1)
    assert counters.stats()["tile_kernels"] > before
    np.testing.assert_array_equal((Tensor(a, device="PYTHON") * 2 + 1).numpy(), a * 2 + 1)


# ---------------------------------------------------------------------- random numbers: Tensor.rand on the card
def test_rand_is_the_one_entry_of_tinygrads_random_functions():
    # tinygrad draws with Threefry on uint64 (no device hook for its generator): randn, rand_like, uniform and
    # dropout all come through cls.rand / type(self).rand, the one name the patch replaces on Tensor
    assert Tensor.__dict__["rand"].__func__ is random._rand
    original = inspect.signature(RandMixin.rand)
    assert list(original.parameters) == ["shape", "device", "dtype", "contiguous"]  # what random._rand takes
    assert "_next_counter" in inspect.getsource(RandMixin.rand)


def test_every_random_function_draws_on_the_card():
    Tensor.manual_seed(3)
    for make in (
        lambda: Tensor.rand(64, device="KTT"),
        lambda: Tensor.randn(64, device="KTT"),
        lambda: Tensor.uniform(64, low=-1, high=1, device="KTT"),
        lambda: Tensor.ones(64, device="KTT").rand_like(),
        lambda: Tensor.rand(64, device="KTT", dtype=dtypes.bfloat16),
    ):
        before = counters.stats()["random_kernels"]
        make().realize()
        assert counters.stats()["random_kernels"] > before
