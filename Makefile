# warpSPHCore developer commands. `make demo` and `make test` are the two entry points the
# README promises; both create .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Every transitive dependency of the package and its extras (dev, io, docs), pinned; written by
# `make lock` (pip-compile). Used as constraints: what no requirement asks for is not installed.
LOCK := requirements/constraints.txt

.PHONY: install lock demo test test-all bench census docs tables lint gpu-check clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	# torch first: the CPU wheel on disk satisfies the pin; a bare requirement would pull CUDA.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c $(LOCK) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Regenerate $(LOCK) from pyproject.toml. The previous pins are kept where they still satisfy
# pyproject.toml; `make lock LOCKFLAGS=--upgrade` (or `LOCKFLAGS='-P numpy'`) moves them.
# Resolved with this machine's pip configuration (torch from the CPU wheel on disk), then:
# the package's own line (the dev extra names warpSPHCore[io,docs]) is dropped, and torch's
# local label (+cpu) is cut so that a CUDA build of the same release installed beforehand
# also satisfies the pin. The file is replaced only when it changes.
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(if $(wildcard $(LOCK)),-c $(LOCK)) pip-tools
	mkdir -p $(dir $(LOCK))
	rm -f $(LOCK).tmp
	if [ -f $(LOCK) ]; then cp $(LOCK) $(LOCK).tmp; fi
	CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet $(LOCKFLAGS) \
		--extra dev --extra io --extra docs --strip-extras --unsafe-package pip \
		--no-emit-index-url --no-emit-find-links --output-file $(LOCK).tmp pyproject.toml
	sed -i -e '/^warpsphcore @ /{N;d;}' -e '/^    #   warpsphcore$$/d' \
		-e 's/^torch==\([^+]*\)+[^ ]*$$/torch==\1/' $(LOCK).tmp
	if cmp -s $(LOCK).tmp $(LOCK); then rm $(LOCK).tmp; else mv $(LOCK).tmp $(LOCK); fi

demo: $(STAMP)
	$(VENV)/bin/warpsph demo

# Exit code 5 (no tests collected) is a failure, never success.
test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

# Every test, the slow ones included, the larger hypothesis profile of the fuzz tests, and
# the per-configuration specialised kernels in every test (tests/conftest.py).
test-all: $(STAMP)
	WARPSPHCORE_HYPOTHESIS_PROFILE=all WARPSPHCORE_TEST_SPECIALIZE=all \
		$(PY) -m pytest -q -p no:cacheprovider -m ""

bench: $(STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/bench_density.py
	$(PY) benchmarks/bench_gradient.py
	$(PY) benchmarks/bench_laplacian.py
	$(PY) benchmarks/bench_jvp.py
	$(PY) benchmarks/bench_fluids.py
	$(PY) benchmarks/bench_cases.py
	$(PY) benchmarks/bench_scenes.py
	$(PY) benchmarks/bench_func.py
	$(PY) benchmarks/bench_reverse.py
	$(PY) benchmarks/bench_distributed.py
	$(PY) benchmarks/bench_distributed_simulation.py
	$(PY) benchmarks/bench_precision.py
	$(PY) benchmarks/bench_scale.py
	$(PY) benchmarks/bench_order.py

# Whole-repository host-sync census of one simulated step: every device->host readback
# (.item(), .tolist(), synchronize, data-dependent shapes, ...) counted per call site.
census: $(STAMP)
	$(PY) scripts/benchmarks/count_host_syncs.py --markdown docs/regression/host-syncs.md

# Rewrite the tables that docs/ renders from the operator registry (between the
# <!-- registry:NAME --> markers); tests/test_registry_docs.py fails when a page is stale.
tables: $(STAMP)
	$(PY) scripts/docs/registry_tables.py

# The documentation site in ./site (warnings are errors).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/lint-imports --no-cache

# For a lent CUDA machine: CUDA-marked tests and the benchmarks on cuda:0, as one script.
gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf $(VENV) warpsph-out .pytest_cache site
