from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ops_reference_is_current():
    gen = _load("gen_ops_doc")
    assert gen.OUT.read_text() == gen.render(), "docs/reference/ops.md is stale: run python scripts/gen_ops_doc.py"


def test_every_ir_op_has_a_doc_and_an_implementation_or_decomposition():
    from kohakutt import ir
    from kohakutt.kernels import registry

    registry._load()
    implemented = {op for (op, backend, _p) in registry.IMPLS if backend == "sim"}
    missing_doc = [o.name for o in ir.all_ops().values() if not o.doc.strip() and o.family != "test"]
    orphans = [o.name for o in ir.all_ops().values()
               if o.name not in implemented and o.decomposition is None and o.family != "test"]
    assert not missing_doc, f"ops without a doc string: {missing_doc}"
    assert not orphans, f"ops the simulator cannot run: {orphans}"


def test_readme_links_resolve():
    import re

    for md in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]:
        text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # code blocks hold code, not links
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (md.parent / target).exists(), f"{md.relative_to(ROOT)} links to missing {target}"


def test_readme_code_runs():
    """The README's Python blocks, run in order as one script (later blocks use names the earlier ones define)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 3
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "loss" in done.stdout and "accuracy" in done.stdout
