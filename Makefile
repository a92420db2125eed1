# Set-up and the two commands of the README. Everything installs into .venv (created here).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
ARGS    ?=
# The CPU build of torch that lies on these machines' disk; the `models` extra itself is
# unpinned so GPU users get their CUDA build.
TORCH_CPU ?= torch==2.13.0

.PHONY: sweep test test-nojit install install-test lint bench proofs clean validate bench-real profile

$(VENV)/.stamp-core: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.stamp-test: $(VENV)/.stamp-core
	$(BIN)/pip install --quiet "$(TORCH_CPU)"
	$(BIN)/pip install --quiet -e ".[dev,models,dist]"
	touch $@

install: $(VENV)/.stamp-core
install-test: $(VENV)/.stamp-test

## The main job: the default sweep (extra options via ARGS="--preset quick ...").
sweep: $(VENV)/.stamp-core
	$(BIN)/python -m treespec_sim.sweep --workers 2 $(ARGS)

## Install what the tests need and run the whole suite.
# One BLAS/OpenMP thread per test worker: two workers on two cores gain nothing from more, and
# one CI run (2026-12-01) sat 18 minutes in a futex wait of a worker holding the BLAS and torch
# thread pools (not reproduced; the suite then takes the same 2.5 minutes either way).
test: $(VENV)/.stamp-test
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -q $(ARGS)
	$(MAKE) --no-print-directory test-nojit
	OMP_NUM_THREADS=1 $(BIN)/python -m real_models.validate --quick

## The compiled modules' tests with numba off (the same source as Python): the small cases only
## (part of `make test`).
test-nojit: $(VENV)/.stamp-test
	NUMBA_DISABLE_JIT=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -q \
		tests/sim/test_world_numerics.py tests/sim/test_numerics.py tests/sim/test_tree.py \
		tests/sim/test_ddtree.py tests/sim/test_traversal.py \
		-k "not scale and not million and not large_arrays and not torch and not peaked and (not test_traversal or residual)"

## End-to-end check on the shipped tiny Qwen3 target + DFlash drafter (ARGS="--quick", "--device cuda", ...).
validate: $(VENV)/.stamp-test
	OMP_NUM_THREADS=1 $(BIN)/python -m real_models.validate $(ARGS)

## Measure this machine's latency (ARGS="--out my.json"; see docs/real_models.md).
profile: $(VENV)/.stamp-test
	OMP_NUM_THREADS=1 $(BIN)/python -m real_models.profile $(ARGS)

bench-real: $(VENV)/.stamp-test
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_real_models.py

lint: $(VENV)/.stamp-test
	$(BIN)/ruff check .

bench: $(VENV)/.stamp-core
	$(BIN)/python benchmarks/bench_ddtree.py
	$(BIN)/python benchmarks/bench_verification.py
	$(BIN)/python benchmarks/bench_caddtree.py
	$(BIN)/python benchmarks/bench_batch_caddtree.py
	$(BIN)/python benchmarks/bench_sweep.py

## Every theorem as an exact check (table; ARGS="--json" for JSON).
proofs: $(VENV)/.stamp-core
	$(BIN)/python -m proofs_check $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
