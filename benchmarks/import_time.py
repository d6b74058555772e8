"""What registering tt at ``import torch`` costs: ``python -c "import torch"`` with Kohaku-TT's ``torch.backends``
entry point and without it, in fresh processes, median of N runs of each (the kinds alternate, so a burst of load
from other processes hits all alike). "Without" is torch as it is when this package is not installed: the same
autoload, whose scan of the entry points finds none of ours.

  with / without   wall time and CPU time (user + system) of the whole process, start to exit
  added            the median of the paired differences with - without (run i of each kind back to back, so slow
                   swings of the machine's load cancel; CPU time is the steadier figure on a shared machine)
  autoload step    torch's autoload step alone, in CPU time inside a fresh process (scan, our entry point's import
                   and call), and the same scan finding nothing: their difference is the entry point's own cost
  first use        the first tensor on tt after import torch (loads the op library, registers the aten kernels;
                   the C++ glue was cached by a warm-up run)

Target: added < 150 ms. Run: python benchmarks/import_time.py [--runs 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0
HIDE = """
import importlib.metadata as md
_entry_points = md.entry_points
def entry_points(**kw):  # this package, uninstalled: torch's scan finds no entry point of ours
    eps = _entry_points(**kw)
    return md.EntryPoints(e for e in eps if not e.value.startswith("kohakutt")) if kw.get("group") else eps
md.entry_points = entry_points
"""
AUTOLOAD = """
import time, torch
t = time.process_time()
torch._import_device_backends()
print(time.process_time() - t)
"""
FIRST_USE = """
import time, torch
t = time.perf_counter()
torch.ones(3, device="tt").cpu()
print(time.perf_counter() - t)
"""


def timed(code: str, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of a fresh interpreter running ``code``, start to exit, and what it printed."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"a child interpreter failed:\n{done.stderr[-3000:]}")
    return wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, done.stdout


def printed(code: str, env: dict[str, str]) -> float:
    return float(timed(code, env)[2].strip().splitlines()[-1])


def run(runs: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    off = {**env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    printed(FIRST_USE, env)  # warm-up: builds the glue into the cache if it is not there, fills the OS file cache
    samples: dict[str, list[float]] = {k: [] for k in ("wall_with", "cpu_with", "wall_without", "cpu_without",
                                                       "autoload", "autoload_without", "first_use")}  # fmt: skip
    for _ in range(runs):
        for kind, code in (("with", "import torch"), ("without", HIDE + "import torch")):
            wall, cpu, _ = timed(code, env)
            samples[f"wall_{kind}"].append(wall)
            samples[f"cpu_{kind}"].append(cpu)
        samples["autoload"].append(printed(AUTOLOAD, off))
        samples["autoload_without"].append(printed(HIDE + AUTOLOAD, off))
        samples["first_use"].append(printed(FIRST_USE, env))
    ms = {k: 1e3 * statistics.median(v) for k, v in samples.items()}

    def paired(kind: str) -> float:
        return 1e3 * statistics.median(a - b for a, b in zip(samples[f"{kind}_with"], samples[f"{kind}_without"]))

    return {
        "runs": runs,
        **{f"{k}_ms": v for k, v in ms.items()},
        "added_cpu_ms": paired("cpu"),
        "added_wall_ms": paired("wall"),
        "entry_point_ms": ms["autoload"] - ms["autoload_without"],
        "target_ms": TARGET_MS,
        "load_average": os.getloadavg()[0],
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def table(r: dict) -> str:
    lines = [f"median of {r['runs']} fresh processes each (Python {r['python']}, {r['cpus']} CPUs, "
             f"load average {r['load_average']:.1f})",
             f"  {'import torch':<34}{'wall ms':>10}{'CPU ms':>10}"]  # fmt: skip
    lines += [f"  {'with the entry point':<34}{r['wall_with_ms']:10.1f}{r['cpu_with_ms']:10.1f}",
              f"  {'without (package not installed)':<34}{r['wall_without_ms']:10.1f}{r['cpu_without_ms']:10.1f}",
              f"  {'added (paired differences)':<34}{r['added_wall_ms']:10.1f}{r['added_cpu_ms']:10.1f}",
              f"  {'autoload step, with':<34}{'':>10}{r['autoload_ms']:10.1f}",
              f"  {'autoload step, without':<34}{'':>10}{r['autoload_without_ms']:10.1f}",
              f"  {'entry point alone':<34}{'':>10}{r['entry_point_ms']:10.1f}",
              f"  {'first tensor on tt':<34}{r['first_use_ms']:10.1f}"]  # fmt: skip
    ok = r["added_cpu_ms"] < r["target_ms"]
    lines.append(f"  target: added < {r['target_ms']:.0f} ms (CPU): {'met' if ok else 'NOT met'}")
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
