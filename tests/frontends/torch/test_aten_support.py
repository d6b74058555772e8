"""The ATen support table (docs/reference/aten_support.md) is current and says what the dispatcher does."""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
DEV = torch.device("tt", 0)


@functools.cache
def _gen():
    spec = importlib.util.spec_from_file_location("gen_aten_support", ROOT / "scripts" / "gen_aten_support.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_aten_support_table_is_current():
    gen = _gen()
    assert gen.OUT.read_text() == gen.render(), (
        "docs/reference/aten_support.md is stale: run python scripts/gen_aten_support.py"
    )


def test_core_aten_count_comes_from_the_dispatcher():
    gen = _gen()
    core = gen.core_overloads()
    assert len(core) == len(set(core)) >= 190
    assert {"add.Tensor", "mm", "convolution", "_softmax", "native_layer_norm", "sym_size.int"} <= set(core)
    text = gen.OUT.read_text()
    assert f"**{len(core)} overloads**" in text
    for n in core:
        assert f"| `{n}` |" in text


def test_registered_kernels_are_what_the_dispatcher_runs():
    from kohakutt.frontends.torch import decomposes, dispatched
    from kohakutt.frontends.torch.aten import all_kernels

    for k in all_kernels().values():
        if k.dispatch_key != "PrivateUse1" or not dispatched(k.name):
            continue
        registered = torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{k.name}", "PrivateUse1")
        assert registered != decomposes(k.name) or k.name in {
            x.name for x in all_kernels().values() if x.dispatch_key == "AutogradPrivateUse1"
        }, k.name


CALLS = {  # a valid call of each Core ATen overload that may lack a tt kernel
    "_pdist_forward": lambda x: torch.ops.aten._pdist_forward(x, 2.0),
    "_cdist_forward": lambda x: torch.ops.aten._cdist_forward(x, x, 2.0, None),
    "col2im": lambda x: torch.ops.aten.col2im(x.reshape(1, 4, 2), [2, 3], [2, 2], [1, 1], [0, 0], [1, 1]),
    "grid_sampler_2d": lambda x: torch.ops.aten.grid_sampler_2d(
        x.reshape(1, 1, 2, 4), x.reshape(1, 2, 2, 2)[..., :2].contiguous(), 0, 0, False
    ),
    "_fft_r2c": lambda x: torch.ops.aten._fft_r2c(x, [1], 0, True),
}


def test_overloads_the_table_says_lack_a_kernel_raise_unsupported():
    import pytest

    from kohakutt.errors import KohakuTTUnsupportedOperator
    from kohakutt.frontends.torch.aten import all_kernels

    gen = _gen()
    kernels = {k.name: k for k in all_kernels().values()}
    missing = [n for n in gen.core_overloads() if gen.how(n, kernels, set()) == "**no tt kernel**"]
    for name in missing:
        if name in CALLS:
            with pytest.raises(KohakuTTUnsupportedOperator, match=name):
                CALLS[name](torch.arange(8.0).reshape(4, 2).to(DEV))


def test_conformance_record_is_well_formed():
    gen = _gen()
    if not gen.RECORD.exists():
        return
    record = json.loads(gen.RECORD.read_text())
    assert set(record) >= {"torch", "samples", "totals", "aten", "opinfos", "seconds"}
    assert record["samples"] == sum(record["totals"].values())
    assert set(record["totals"]) <= set(gen.STATUSES)
