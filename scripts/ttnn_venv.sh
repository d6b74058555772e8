#!/usr/bin/env bash
# Creates (or reuses) a Python 3.12 virtual environment holding TT-NN 0.81.1, for the real-card backend's contract
# test, TT-NN's host-side conversions and the tests on a mocked P150 (tests/ttnn), which run Kohaku-TT's HAL there
# (so its own torch-free dependencies, pluggy and cffi, are installed too). TT-NN ships wheels for Python 3.10 and
# 3.12 only; it does not need torch.
# Usage: scripts/ttnn_venv.sh [VENV]   (default: .venv-ttnn in the checkout)
# Exit codes: 0 ready, 3 no Python 3.12 found (install one, or point KTT_TTNN_BASE_PYTHON at it), other: pip failed.
set -euo pipefail
TTNN_VERSION=0.81.1
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$here/.venv-ttnn}

is_312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }

pick_python() {
  local c
  for c in "${KTT_TTNN_BASE_PYTHON:-}" python3.12; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && is_312 "$c"; then
      command -v "$c"; return 0
    fi
  done
  for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    [ -x "$c" ] && is_312 "$c" && { echo "$c"; return 0; }
  done
  return 1
}

has_ttnn() {
  "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('ttnn') != '$TTNN_VERSION' \
    or any(m.version(p) is None for p in ('numpy', 'loguru', 'graphviz', 'pluggy', 'cffi', 'pycparser')))" >/dev/null 2>&1
}

if [ -x "$venv/bin/python" ] && is_312 "$venv/bin/python" && has_ttnn; then
  echo "ttnn-venv: $venv has ttnn $TTNN_VERSION"
  exit 0
fi

if ! [ -x "$venv/bin/python" ] || ! is_312 "$venv/bin/python"; then
  if ! py=$(pick_python); then
    echo "ttnn-venv: no Python 3.12 found (TT-NN $TTNN_VERSION has wheels for 3.10 and 3.12 only);" \
      "install one (e.g. pyenv install 3.12) or set KTT_TTNN_BASE_PYTHON" >&2
    exit 3
  fi
  echo "ttnn-venv: creating $venv with $py"
  rm -rf "$venv"
  "$py" -m venv "$venv"
fi

# ttnn declares numpy<2, loguru, graphviz, networkx, pyyaml, click, pandas, seaborn and ml_dtypes (no torch), but
# importing it and converting host tensors needs only the first three; the rest (plotting and report tools, about
# 200 MB) is left out. Version ranges are ttnn's own (pluggy, cffi and its pycparser: Kohaku-TT's, for its HAL).
echo "ttnn-venv: installing ttnn==$TTNN_VERSION and the packages its import needs"
"$venv/bin/python" -m pip --disable-pip-version-check -q install --no-deps \
  "ttnn==$TTNN_VERSION" "numpy>=1.24.4,<2" "loguru>=0.6.0" "graphviz>=0.20.3" "pluggy>=1.3" "cffi>=1.15" "pycparser"
if ! err=$(TT_LOGGER_LEVEL=off LOGURU_LEVEL=WARNING "$venv/bin/python" -c 'import numpy, ttnn' 2>&1); then
  echo "ttnn-venv: ttnn installed but does not import: $err" >&2
  exit 1
fi
echo "ttnn-venv: ready: $venv ($(du -sh "$venv" | cut -f1))"
