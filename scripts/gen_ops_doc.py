"""Writes docs/reference/ops.md from the op registry: every IR op, its implementations and its numerics.

Run `python scripts/gen_ops_doc.py` after adding or changing an op; a test fails while the file is stale.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from kohakutt import ir
from kohakutt.kernels import registry

OUT = Path(__file__).resolve().parents[1] / "docs/reference/ops.md"


def render() -> str:
    ops = ir.all_ops()
    registry._load()
    impls = defaultdict(list)
    for (op, backend, provider) in sorted(registry.IMPLS):
        impls[op].append(f"{backend}:{provider}")
    by_family = defaultdict(list)
    for op in ops.values():
        if op.family != "test":
            by_family[op.family].append(op)
    lines = [
        "# IR ops",
        "",
        "Generated from the op registry by `scripts/gen_ops_doc.py`; a test fails when this file is stale.",
        "Implementations are `backend:provider`: `sim` is the simulated card, `ttnn` a real card; the provider",
        "`ttnn` is TT-NN's kernel (on the sim, a model of what it computes), `ktt` is Kohaku-TT's own program and",
        "`host` is the host CPU (counted). The provider that runs is the first of `ktt`, `ttnn`, `host` that the",
        "card (`ttnn:`) has, on every backend (`KTT_CUSTOM_KERNELS=0` puts `ttnn` before `ktt`); a `sim:ktt`",
        "program the card has no launcher for runs only when asked for by name. An op with no implementation on",
        "a backend runs its decomposition there. Numerics are the family default (fidelity, fp32 accumulation,",
        "SFPU approximate mode); `kohakutt.numerics(...)` overrides them for a scope.",
        "",
        f"{len([o for o in ops.values() if o.family != 'test'])} ops.",
        "",
    ]
    for family in sorted(by_family):
        lines += [f"## {family}", "", "| op | signature | implementations | numerics | semantics |",
                  "|---|---|---|---|---|"]
        for op in sorted(by_family[family], key=lambda o: o.name):
            where = ", ".join(impls.get(op.name, [])) or ("decomposition" if op.decomposition else "none")
            if impls.get(op.name) and op.decomposition:
                where += ", decomposition"
            num = str(op.numerics) or "-"
            doc = " ".join(op.doc.split()).replace("|", "\\|") or "-"
            sig = op.signature().replace("|", "\\|")
            lines.append(f"| `{op.name}` | `{sig}` | {where} | {num} | {doc} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
