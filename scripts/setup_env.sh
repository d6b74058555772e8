#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment and installs the package into it.
# torch is pinned to the CPU build 2.13.0 unless a torch in [2.13, 2.16) is already there:
# an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
venv=${1:-.venv}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

pick_python() {
  for c in "${KTT_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 14))' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  for c in "$HOME"/.pyenv/versions/3.1[123]*/bin/python3; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  echo "no Python 3.11-3.13 found: install one, or point KTT_PYTHON at it" >&2
  return 1
}

if [ ! -x "$venv/bin/python" ]; then
  py=$(pick_python)
  echo "setup: creating $venv with $py"
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
if ! "$venv/bin/python" -c 'import torch, sys; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(not (2, 13) <= v < (2, 16))' 2>/dev/null; then
  echo "setup: installing torch==2.13.0 (CPU build)"
  "${pip[@]}" install "torch==2.13.0"
fi
echo "setup: installing kohakutt and its dev and tinygrad extras"
"${pip[@]}" install -e ".[dev,tinygrad]"
# Hugging Face transformers and accelerate for tests/integration; both depend on torch, so the installed torch is
# pinned (a resolver free to upgrade it could pull a multi-GB CUDA build).
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==$torch_version" >"$constraints"
echo "setup: installing transformers and accelerate (torch pinned at $torch_version)"
"${pip[@]}" install -c "$constraints" "transformers==5.25.0" "accelerate==1.16.0"
"$venv/bin/python" -c "import sys, torch; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '$torch_version' else f'setup: torch moved to {torch.__version__}')"
# tinygrad's CPU device (the reference of the KTT benchmark and of make conformance-tinygrad) compiles with clang.
if ! command -v clang >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing clang (tinygrad's CPU device needs it)"
    apt-get install -y -q clang >/dev/null || echo "setup: apt-get install clang failed; install clang yourself" >&2
  else
    echo "setup: no clang: tinygrad's CPU device (the KTT benchmark's reference) needs it: sudo apt-get install clang" >&2
  fi
fi
# The kernel compile check (tests/ttnn/test_kernel_check.py) replays TT-Metal's JIT commands with clang for riscv32
# over Debian's bare-metal newlib / libstdc++ headers; clang-format checks the kernels' formatting; the C++ extension
# example (examples/kernels/cpp_extension) builds with torch.utils.cpp_extension, which needs ninja.
need=()
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
[ -f /usr/include/newlib/stdint.h ] || need+=(libnewlib-dev)
ls -d /usr/include/newlib/c++/* >/dev/null 2>&1 || need+=(libstdc++-arm-none-eabi-newlib)
command -v clang-format >/dev/null 2>&1 || need+=(clang-format)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need[*]} (the kernel compile check)"
    apt-get install -y -q "${need[@]}" >/dev/null || echo "setup: apt-get install ${need[*]} failed; the kernel compile check will skip" >&2
  else
    echo "setup: the kernel compile check needs ${need[*]}: sudo apt-get install ${need[*]}" >&2
  fi
fi
