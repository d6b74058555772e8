# The two commands a fresh machine needs: `make demo` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kohakutt-setup
PYTEST_ARGS ?=
TTNN_VENV ?= .venv-ttnn

.PHONY: setup demo test lint format bench conformance clean

$(STAMP): pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) examples/00_quickstart.py

test: $(STAMP)
	@bash scripts/ttnn_venv.sh $(TTNN_VENV) || echo "make: no TT-NN venv (reason above); the TT-NN contract tests will skip"
	$(PY) -m ruff check .
	KTT_TTNN_PYTHON=$(abspath $(TTNN_VENV))/bin/python $(PY) -m pytest -q -m "not conformance" $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: $(STAMP)
	$(PY) benchmarks/host_transfer.py

conformance: $(STAMP)
	$(PY) -m pytest -q -m conformance

clean:
	rm -rf build .pytest_cache $(STAMP)
