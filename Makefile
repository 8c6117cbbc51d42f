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
DEMO_DIR ?= demo
DIST_DIR ?= dist
BACKENDS := jax torch tensorflow
PIP_PINNED = $(BIN)/pip install --quiet --no-build-isolation --constraint

.PHONY: demo test lint docs dist engine-tests app-tests bench clean lock docker-lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r $(REQ)/build.txt

# The demo environment: prfmap with the JAX backend only.
$(VENV)/.demo-installed: $(BIN)/python pyproject.toml $(REQ)/build.txt $(REQ)/demo.txt
	$(PIP_PINNED) $(REQ)/demo.txt -e ".[jax]"
	touch $@

# The test environment: all three backends and the test tools.
$(VENV)/.test-installed: $(BIN)/python pyproject.toml $(REQ)/build.txt $(REQ)/test.txt
	$(PIP_PINNED) $(REQ)/test.txt "$(TORCH_SPEC)"
	$(PIP_PINNED) $(REQ)/test.txt "$(TF_SPEC)" -e ".[jax,test,docs]" -e docker/
	# Debian's chromium for the report's browser test (CI runs as root on Debian).
	command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || echo "chromium is missing: the report browser tests will fail (PRFMAP_SKIP_BROWSER=1 skips them)"
	# Debian's slurm-wlm and munge for the SLURM array test (it starts a private one-node cluster as root).
	{ command -v slurmctld && command -v munged; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
	  && command -v apt-get >/dev/null && apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; } \
	  || echo "slurm-wlm or munge is missing: the SLURM test needs them (and root)"
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	rm -rf $(DEMO_DIR)
	$(BIN)/prfmap-synth $(DEMO_DIR)/bids --subjects 1 --runs 2 --space fsaverage5
	$(BIN)/prfmap $(DEMO_DIR)/bids $(DEMO_DIR)/out participant --backend jax --work-dir $(DEMO_DIR)/work
	@echo "Maps:   $(DEMO_DIR)/out/sub-01/func/"
	@echo "Report: $(DEMO_DIR)/out/sub-01.html"

lint: $(VENV)/.test-installed
	$(BIN)/ruff format --check app tests docker
	$(BIN)/ruff check app tests docker

# The documentation site (Sphinx): offline, every warning an error. tests/test_docs.py builds it too,
# so `make test` (and CI) does.
docs: $(VENV)/.test-installed
	$(BIN)/sphinx-build -W -b html docs docs/_build/html
	@echo "Documentation: docs/_build/html/index.html"

# The sdist and the wheel, built with the pinned build tools, checked as PyPI would render them.
dist: $(VENV)/.test-installed
	rm -rf $(DIST_DIR)
	$(BIN)/python -m build --no-isolation --sdist --wheel --outdir $(DIST_DIR) .
	$(BIN)/twine check --strict $(DIST_DIR)/*

# Engine tests run once per backend (Keras picks its backend at import time). torch.compile costs
# minutes of C++ compilation per shape on a CPU, so the torch session runs eagerly; one test per backend
# (test_compiled_and_eager_fits_agree) runs the compiled path and checks it against the eager one.
engine-tests: $(VENV)/.test-installed
	set -e; for b in $(BACKENDS); do \
	  echo "== engine tests on $$b"; \
	  KERAS_BACKEND=$$b PRFMAP_COMPILE=$$( [ $$b = torch ] && echo 0 || echo 1 ) $(BIN)/python -m pytest -q tests/engine; \
	done

app-tests: $(VENV)/.test-installed
	KERAS_BACKEND=jax $(BIN)/python -m pytest -q tests --ignore=tests/engine --ignore=tests/benchmarks

test: lint engine-tests app-tests

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
	rm -rf $(VENV) $(DEMO_DIR) $(DIST_DIR) docs/_build .pytest_cache
