# prfmap: `make demo` and `make test` do all the set-up on a fresh machine with Python >= 3.10.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Every version `make demo` and `make test` install is pinned in requirements/ (`make lock` refreshes
# the pins; pyproject.toml keeps the loose ranges for `pip install prfmap`).
REQ := requirements
# The versions come from the pins; on machines whose pip finds a local CPU wheel of the pinned torch
# (PIP_FIND_LINKS) it takes that one (a local "+cpu" label ranks first), else PyPI's build.
TORCH_SPEC ?= torch
TF_SPEC ?= tensorflow-cpu
NEUROPYTHY ?= neuropythy==0.13.0
DEMO_DIR ?= demo
DIST_DIR ?= dist
BACKENDS := jax torch tensorflow
TEST_WORKERS ?= 2
PIP_PINNED = $(BIN)/pip install --quiet --no-build-isolation --constraint

.PHONY: demo test lint docs dist engine-tests app-tests slowest bench clean lock docker-lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r $(REQ)/build.txt

# The demo environment: prfmap with the JAX backend only.
$(VENV)/.demo-installed: $(BIN)/python pyproject.toml $(REQ)/build.txt $(REQ)/demo.txt
	$(PIP_PINNED) $(REQ)/demo.txt -e ".[jax]"
	$(BIN)/pip install --quiet --no-deps --no-build-isolation $(NEUROPYTHY)
	touch $@

# The test environment: all three backends and the test tools.
$(VENV)/.test-installed: $(BIN)/python pyproject.toml $(REQ)/build.txt $(REQ)/test.txt
	$(PIP_PINNED) $(REQ)/test.txt "$(TORCH_SPEC)"
	$(PIP_PINNED) $(REQ)/test.txt "$(TF_SPEC)" -e ".[jax,test,docs]" -e docker/
	# The fsaverage visual-area atlases (--atlas benson14|wang15): prfmap reads neuropythy's package
	# data as files and never imports it, so none of its own dependencies is installed.
	$(BIN)/pip install --quiet --no-deps --no-build-isolation $(NEUROPYTHY)
	# Debian's chromium for the report's browser test (CI runs as root on Debian).
	command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || echo "chromium is missing: the report browser tests will fail (PRFMAP_SKIP_BROWSER=1 skips them)"
	# Debian's slurm-wlm and munge for the SLURM array test (it starts a private one-node cluster as root).
	{ command -v slurmctld && command -v munged; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
	  && command -v apt-get >/dev/null && apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; } \
	  || echo "slurm-wlm or munge is missing: the SLURM test needs them (and root)"
	touch $@ $(VENV)/.demo-installed $(VENV)/.docs-installed

# The documentation environment: prfmap with the JAX backend and the docs tools only, at the test
# environment's pins (a constraints file installs nothing it does not name).
$(VENV)/.docs-installed: $(BIN)/python pyproject.toml $(REQ)/build.txt $(REQ)/test.txt
	$(PIP_PINNED) $(REQ)/test.txt -e ".[jax,docs]"
	touch $@

demo: $(VENV)/.demo-installed
	rm -rf $(DEMO_DIR)
	$(BIN)/prfmap-synth $(DEMO_DIR)/bids --subjects 1 --runs 2 --space fsaverage5
	$(BIN)/prfmap $(DEMO_DIR)/bids $(DEMO_DIR)/out participant --backend jax --work-dir $(DEMO_DIR)/work
	@echo "Maps:   $(DEMO_DIR)/out/sub-01/func/"
	@echo "Report: $(DEMO_DIR)/out/sub-01.html"

# --no-cache: ruff keys its cache on each file, not on the files that decide first-party imports
# (tests/conftest.py), so a cached run can pass where a fresh clone fails.
lint: $(VENV)/.test-installed
	$(BIN)/ruff format --no-cache --check app tests docker
	$(BIN)/ruff check --no-cache app tests docker

# The documentation site (Sphinx): offline, every warning an error. tests/test_docs.py builds it too,
# so `make test` (and CI) does.
docs: $(VENV)/.docs-installed
	$(BIN)/sphinx-build -W -b html docs docs/_build/html
	@echo "Documentation: docs/_build/html/index.html"

# The sdist and the wheel, built with the pinned build tools, checked as PyPI would render them.
dist: $(VENV)/.test-installed
	rm -rf $(DIST_DIR)
	$(BIN)/python -m build --no-isolation --sdist --wheel --outdir $(DIST_DIR) .
	$(BIN)/twine check --strict $(DIST_DIR)/*

# Engine tests: the whole engine suite on JAX; on PyTorch and TensorFlow (Keras picks its backend at
# import time, so one session each) the tests marked `backend`, which check that backend's own behaviour
# (its compiler and eager path, autodiff, float64, the TensorFlow oneDNN workaround; agreement with JAX
# is checked from the JAX session). torch.compile costs minutes of C++ compilation per shape on a CPU,
# so the torch session runs eagerly; test_compiled_and_eager_fits_agree runs its compiled path.
# Each session writes a JUnit report to $(REPORTS); `make slowest` lists the slowest tests from them.
REPORTS ?= .test-reports
PYTEST = $(BIN)/python -m pytest -q -p no:cacheprovider
engine-tests: $(VENV)/.test-installed
	mkdir -p $(REPORTS)
	set -e; for b in $(BACKENDS); do \
	  echo "== engine tests on $$b"; \
	  KERAS_BACKEND=$$b PRFMAP_COMPILE=$$( [ $$b = torch ] && echo 0 || echo 1 ) $(PYTEST) \
	    $$( [ $$b = jax ] || echo "-m backend" ) --junitxml=$(REPORTS)/engine-$$b.xml tests/engine; \
	done

# The app tests on two workers (pytest-xdist): a module at a time, the tests marked
# xdist_group("serial") one after another on one worker (tests/conftest.py).
app-tests: $(VENV)/.test-installed
	mkdir -p $(REPORTS)
	KERAS_BACKEND=jax $(PYTEST) -n $(TEST_WORKERS) --dist loadgroup --junitxml=$(REPORTS)/app.xml \
	  tests --ignore=tests/engine --ignore=tests/benchmarks

slowest:
	$(BIN)/python .ci/slowest_tests.py $(REPORTS) 15

# The engine sessions (one process at a time) run beside the two app-test workers, so both cores are
# busy until the end. The app tests' progress streams; the engine sessions' output is kept in
# $(REPORTS)/engine-tests.log and printed after it. Each process computes on one thread (XLA, Eigen,
# OpenMP, TensorFlow's pools): three processes on two cores with a pool each lose more to contention
# than the pools gain.
ONE_THREAD = OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 \
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
test: lint
	mkdir -p $(REPORTS)
	@echo "== engine tests (JAX in full; PyTorch and TensorFlow: -m backend) beside the app tests; their log follows"
	@$(ONE_THREAD) $(MAKE) --no-print-directory engine-tests > $(REPORTS)/engine-tests.log 2>&1 & engine=$$!; \
	echo "== app tests on $(TEST_WORKERS) workers"; \
	$(ONE_THREAD) $(MAKE) --no-print-directory app-tests; app=$$?; \
	wait $$engine; engine=$$?; \
	cat $(REPORTS)/engine-tests.log; \
	echo "== make test: app tests exit $$app, engine tests exit $$engine"; \
	[ $$app = 0 ] && [ $$engine = 0 ]

bench: $(VENV)/.test-installed
	KERAS_BACKEND=jax $(BIN)/python tests/benchmarks/bench_engine.py

# Re-resolve every pin from pyproject.toml's ranges (then run `make test` before committing them).
lock:
	PYTHON=$(PYTHON) bash $(REQ)/lock.sh

# Re-resolve docker/requirements/lock.txt, the pins of everything the images install beyond their
# base image (then rebuild the images before committing it).
docker-lock:
	PYTHON=$(PYTHON) bash docker/requirements/lock.sh

clean:
	rm -rf $(VENV) $(DEMO_DIR) $(DIST_DIR) docs/_build .pytest_cache $(REPORTS)
