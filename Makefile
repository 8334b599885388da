# warpSPHCore developer commands. `make demo` and `make test` are the two entry points the
# README promises; both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all bench census docs lint gpu-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first: the CPU wheel on disk satisfies the pin; a bare requirement would pull CUDA.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/warpsph demo

# Exit code 5 (no tests collected) is a failure, never success.
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

# Every test, the slow ones included, and the larger hypothesis profile of the fuzz tests.
test-all: $(STAMP)
	WARPSPHCORE_HYPOTHESIS_PROFILE=all $(PY) -m pytest -q -p no:cacheprovider -m ""

bench: $(STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/bench_density.py
	$(PY) benchmarks/bench_gradient.py
	$(PY) benchmarks/bench_jvp.py

# Whole-repository host-sync census of one simulated step (autodiff.md §15.2).
census: $(STAMP)
	$(PY) scripts/benchmarks/count_host_syncs.py --markdown docs/regression/host-syncs.md

# The documentation site in ./site (warnings are errors).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts

# For a lent CUDA machine: CUDA-marked tests and the benchmarks on cuda:0, as one script.
gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) warpsph-out .pytest_cache site
