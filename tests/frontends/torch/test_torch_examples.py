"""The PyTorch examples and the README's PyTorch code run, and say what they claim.

Training losses on tt and on the CPU (float32, same initial weights and data) agree to the card's fp32 matmul
precision: operands are TF32-truncated (2^-10 relative each), so after five Adam steps a relative difference of
5e-3 in the loss is allowed.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
DEV = torch.device("tt", 0)


def run_example(name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    return out.getvalue()


def test_tensors_example():
    text = run_example("01_tensors.py")
    sums = re.search(r"row sums: tensor\(\[([^\]]+)\]\)", text).group(1)
    ref = re.search(r"CPU float32 row sums: tensor\(\[([^\]]+)\]\)", text).group(1)
    for a, b in zip(sums.split(","), ref.split(",")):  # float32 matmuls (PyTorch's "highest"), 4 printed decimals
        assert abs(float(a) - float(b)) <= 2e-4 * max(1.0, abs(float(b)))
    assert "loaded views share storage: True" in text and "float64 -> DtypeError" in text
    assert "autocast dtypes: torch.bfloat16 torch.float32" in text
    assert float(re.search(r"four 256 x 256 matmuls: ([0-9.]+) ms", text).group(1)) > 0


def test_training_example_matches_the_cpu():
    text = run_example("02_training.py")
    steps = re.findall(r"loss on tt ([0-9.]+), on the CPU ([0-9.]+)", text)
    assert len(steps) == 5
    for tt, cpu in steps:  # float32 matmuls and sums: the CPU's float32 to its rounding (5 printed decimals)
        assert abs(float(tt) - float(cpu)) <= 1e-4 * float(cpu)
    assert float(steps[-1][0]) < float(steps[0][0]) * 0.8
    assert float(re.search(r"accuracy ([0-9.]+)", text).group(1)) > 0.5


def test_readme_pytorch_code_runs():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## PyTorch", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 2
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile("\n".join(blocks), "README.md", "exec"), {})
    finally:
        from kohakutt.frontends.torch import mesh as tmesh

        if tmesh.current() is not None:  # the README's mesh section opens one: give the chips' references back
            tmesh.current().close()
    losses = [float(x) for x in re.findall(r"(?m)^loss ([0-9.]+)", out.getvalue())]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert "accuracy" in out.getvalue()
    traced = float(re.search(r"trace loss ([0-9.]+)", out.getvalue()).group(1))  # the captured step, replayed
    assert traced < losses[-1]
