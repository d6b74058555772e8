"""What registering tt at ``import torch`` costs: ``python -c "import torch"`` with Kohaku-TT's ``torch.backends``
entry point loaded and without it, each in fresh processes, median of N runs (the two kinds alternate, so a burst of
load from other processes hits both alike).

  autoload on    import torch as installed: torch loads the entry point, which registers tt
  autoload off   TORCH_DEVICE_BACKEND_AUTOLOAD=0: torch loads no device extension
  added          on - off (an upper bound: it also holds torch's scan of the entry points, which it makes
                 whether or not this package is installed)
  entry point    the entry point alone (load + call), timed inside a fresh process after import torch
  first use      the first tensor on tt after import torch (loads the op library, registers the aten kernels;
                 the C++ glue was cached by a warm-up run)

Target: added < 150 ms. Run: python benchmarks/import_time.py [--runs 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0
ENTRY = """
import time, torch
from importlib.metadata import entry_points
ep = next(e for e in entry_points(group="torch.backends") if e.value.startswith("kohakutt"))
t = time.perf_counter()
ep.load()()
print(time.perf_counter() - t)
"""
FIRST_USE = """
import time, torch
t = time.perf_counter()
torch.ones(3, device="tt").cpu()
print(time.perf_counter() - t)
"""


def wall(code: str, env: dict[str, str]) -> float:
    """Seconds for a fresh interpreter to run ``code``, start to exit."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def inner(code: str, env: dict[str, str]) -> float:
    """The number a fresh interpreter running ``code`` prints last (seconds)."""
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def run(runs: int) -> dict:
    on = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    off = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    inner(FIRST_USE, on)  # warm-up: builds the glue into the cache if it is not there, fills the OS file cache
    t_on, t_off, t_entry, t_first = [], [], [], []
    for _ in range(runs):
        t_on.append(wall("import torch", on))
        t_off.append(wall("import torch", off))
        t_entry.append(inner(ENTRY, off))
        t_first.append(inner(FIRST_USE, on))
    ms = {k: 1e3 * statistics.median(v) for k, v in
          {"on": t_on, "off": t_off, "entry": t_entry, "first": t_first}.items()}  # fmt: skip
    return {
        "runs": runs,
        "import_torch_autoload_on_ms": ms["on"],
        "import_torch_autoload_off_ms": ms["off"],
        "added_ms": ms["on"] - ms["off"],
        "entry_point_ms": ms["entry"],
        "first_use_ms": ms["first"],
        "target_ms": TARGET_MS,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def table(r: dict) -> str:
    rows = [
        ("import torch, autoload on", r["import_torch_autoload_on_ms"]),
        ("import torch, autoload off", r["import_torch_autoload_off_ms"]),
        ("added (on - off)", r["added_ms"]),
        ("entry point alone", r["entry_point_ms"]),
        ("first tensor on tt", r["first_use_ms"]),
    ]
    lines = [f"median of {r['runs']} fresh processes each (Python {r['python']}, {r['cpus']} CPUs)"]
    lines += [f"  {name:<28}{v:9.1f} ms" for name, v in rows]
    ok = r["added_ms"] < r["target_ms"]
    lines.append(f"  target: added < {r['target_ms']:.0f} ms: {'met' if ok else 'NOT met'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per figure; medians count (default 15)")
    parser.add_argument("--json", action="store_true", help="also print all figures as one JSON object, last line")
    args = parser.parse_args(argv)
    report = run(max(1, args.runs))
    print(table(report))
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
