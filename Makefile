# The two commands a fresh machine needs: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kohakutt-setup
PYTEST_ARGS ?=
TTNN_VENV ?= .venv-ttnn

.PHONY: setup demo test lint format bench conformance conformance-tinygrad clean

$(STAMP): pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) examples/01_tensors.py

test: $(STAMP)
	@bash scripts/ttnn_venv.sh $(TTNN_VENV) || echo "make: no TT-NN venv (reason above); the TT-NN contract tests will skip"
	$(PY) -m ruff check .
	KTT_TTNN_PYTHON=$(abspath $(TTNN_VENV))/bin/python $(PY) -m pytest -q -m "not conformance" $(PYTEST_ARGS)

KERNEL_CPP = $(shell find kohakutt/kernels/programs tests/hal/kernels -name '*.cpp' -o -name '*.h')

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	clang-format --style=file --dry-run --Werror $(KERNEL_CPP)

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .
	clang-format --style=file -i $(KERNEL_CPP)

bench: $(STAMP)
	$(PY) benchmarks/host_transfer.py
	$(PY) benchmarks/dispatch.py
	$(PY) benchmarks/dsl_kernels.py
	$(PY) benchmarks/custom_op.py
	$(PY) benchmarks/mlp_training.py
	$(PY) benchmarks/precision.py
	$(PY) benchmarks/capture.py
	$(PY) benchmarks/mesh.py
	$(PY) benchmarks/sim_kernels.py
	$(PY) benchmarks/tinygrad_training.py
	$(PY) benchmarks/import_time.py

conformance: $(STAMP)
	$(PY) -m pytest -q -m conformance

# tinygrad's own tests (test/backend/test_ops.py from a tinygrad git checkout; not in its wheel) on KTT and on
# tinygrad's CPU device (needs clang), against the installed tinygrad; TINYGRAD_K=<pytest -k> runs a subset,
# TINYGRAD_ALLOW_TF32=1 runs them with tinygrad's ALLOW_TF32=1 (KTT's float32 matmuls on TF32 operands; 0, tinygrad's
# default, splits them for float32 accuracy).
TINYGRAD_SRC ?=
TINYGRAD_TESTS ?= test/backend/test_ops.py
TINYGRAD_K ?=
TINYGRAD_ALLOW_TF32 ?= 0
conformance-tinygrad: $(STAMP)
	@test -n "$(TINYGRAD_SRC)" || { echo "make: set TINYGRAD_SRC=<a tinygrad git checkout> (git clone https://github.com/tinygrad/tinygrad)"; exit 2; }
	$(PY) -m kohakutt.frontends.tinygrad.conformance --src "$(TINYGRAD_SRC)" --tests $(TINYGRAD_TESTS) \
		--allow-tf32 $(TINYGRAD_ALLOW_TF32) $(if $(TINYGRAD_K),-k "$(TINYGRAD_K)")

clean:
	rm -rf build .pytest_cache $(STAMP)
