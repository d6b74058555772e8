"""tt exists as soon as torch does: the ``torch.backends`` entry point registers it cheaply at ``import torch`` (no chip
opened, no thread started, neither tinygrad nor the op library imported), the first real use initialises it, and
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns the autoload off. Each check runs in a fresh Python process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kohakutt import config

DEV = torch.device("tt", 0)


def run(code: str, env: dict[str, str] | None = None, timeout: float = 600) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line, which is returned."""
    full = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=full
    )
    assert done.returncode == 0, f"the child failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_torch_alone_registers_tt_cheaply_and_the_first_use_initialises_it():
    out = run(
        """
        import json, sys, threading
        import torch
        before = {
            "tt_module": torch.tt.__name__,
            "initialized": torch.tt.is_initialized() or torch.tt._initialized,
            "heavy": sorted(m for m in ("kohakutt.kernels", "kohakutt.hal", "kohakutt.frontends.torch.backend",
                                        "kohakutt.frontends.torch.runtime", "tinygrad") if m in sys.modules),
            "threads": threading.active_count(),
            "device": str(torch.device("tt")),
            "accelerator": str(torch.accelerator.current_accelerator()),
        }
        torch.manual_seed(7)  # before the device is initialised: applied when it is, as on CUDA
        model = torch.nn.Linear(3, 2)
        w = model.weight
        model.to("tt")  # the first use: initialises the device, keeps the parameter objects
        r = torch.rand(4, device="tt")
        after_seed = torch.tt.initial_seed()
        x = torch.arange(6.0).reshape(2, 3)
        y = x.to("tt:0")
        import kohakutt
        dev = kohakutt.device(0)
        torch.tt.manual_seed(7)
        again = torch.rand(4, device=dev)
        print(json.dumps({
            **before,
            "initialized_after": torch.tt.is_initialized(),
            "rand_device": str(r.device), "rand_equal_after_reseed": torch.equal(r.cpu(), again.cpu()),
            "seed": after_seed,
            "to": str(y.device), "to_equal": torch.equal(y.cpu(), x),
            "model": str(model.weight.device), "same_parameter": model.weight is w,
            "randn": list(torch.randn(3, device="tt").shape),
            "tt_module_is_torch_tt": sys.modules["torch.tt"] is torch.tt,
        }))
        """
    )
    assert out["tt_module"] == "kohakutt.frontends.torch.module" and out["tt_module_is_torch_tt"]
    assert out["initialized"] is False and out["heavy"] == [] and out["threads"] == 1
    assert out["device"] == "tt" and out["accelerator"] == "tt"
    assert out["initialized_after"] and out["rand_device"] == "tt:0" and out["randn"] == [3]
    assert out["seed"] == 7 and out["rand_equal_after_reseed"], "a seed set before initialisation was lost"
    assert out["to"] == "tt:0" and out["to_equal"]
    assert out["model"] == "tt:0" and out["same_parameter"]


def test_autoload_off_leaves_torch_alone_and_import_kohakutt_registers_tt():
    out = run(
        """
        import json
        import torch
        off = {"has_tt": hasattr(torch, "tt"), "name": torch._C._get_privateuse1_backend_name(),
               "accelerator": str(torch.accelerator.current_accelerator())}
        import kohakutt
        x = torch.randn(3, device="tt")
        acc = str(torch.accelerator.current_accelerator())
        print(json.dumps({**off, "after": str(x.device), "accelerator_after": acc}))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert out == {"has_tt": False, "name": "privateuseone", "accelerator": "None", "after": "tt:0",
                   "accelerator_after": "tt"}  # fmt: skip


def test_torch_load_in_a_fresh_process_gives_tt_tensors(tmp_path: Path):
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = base.to(DEV)
    obj = {"w": t, "row": t[1], "col": t[:, 2], "ints": torch.arange(5, dtype=torch.int32).to(DEV)}
    path = tmp_path / "saved.pt"
    torch.save(obj, path)
    out = run(
        f"""
        import json
        import torch
        obj = torch.load({str(path)!r})
        w, row = obj["w"], obj["row"]
        row.fill_(-1.0)  # a view saved with its base stays a view of it
        print(json.dumps({{
            "devices": sorted({{str(v.device) for v in obj.values()}}),
            "w": w.cpu().tolist(), "col": obj["col"].cpu().tolist(), "ints": obj["ints"].cpu().tolist(),
        }}))
        """
    )
    expect = base.clone()
    expect[1] = -1.0
    assert out["devices"] == ["tt:0"]
    assert out["w"] == expect.tolist() and out["col"] == expect[:, 2].tolist() and out["ints"] == list(range(5))


@pytest.mark.slow
def test_without_a_cached_glue_import_torch_builds_nothing_and_the_first_use_builds_it(tmp_path: Path):
    cache = tmp_path / "cache"
    out = run(
        """
        import json, os
        import torch
        from kohakutt.frontends.torch import native
        built_at_import = os.path.exists(os.path.join(os.environ["KTT_CACHE_DIR"], "torch"))
        loaded_at_import = native.loaded() is not None
        x = torch.ones(3, device="tt") * 2
        print(json.dumps({"built_at_import": built_at_import, "loaded_at_import": loaded_at_import,
                          "x": x.cpu().tolist(), "loaded": native.loaded() is not None}))
        """,
        env={"KTT_CACHE_DIR": str(cache)},
    )
    assert out == {"built_at_import": False, "loaded_at_import": False, "x": [2.0, 2.0, 2.0], "loaded": True}
    assert list((cache / "torch").glob("*/libktt_torch.so")), "the first use built no glue"


def test_the_glue_is_cached_where_the_knob_says():
    from kohakutt.frontends.torch import native

    assert native.loaded() is not None
    assert native.load_cached() is native.loaded()
    assert any(config.cache_dir().glob("torch/*/libktt_torch.so"))
