# prfmap: `make demo` and `make test` do all the set-up on a fresh machine with Python >= 3.10.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU build of PyTorch; override on a GPU machine, e.g. TORCH_SPEC="torch".
TORCH_SPEC ?= torch==2.13.0
TF_SPEC ?= tensorflow-cpu>=2.16
DEMO_DIR ?= demo
BACKENDS := jax torch tensorflow

.PHONY: demo test lint engine-tests app-tests bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The demo environment: prfmap with the JAX backend only.
$(VENV)/.demo-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e ".[jax]"
	touch $@

# The test environment: all three backends and the test tools.
$(VENV)/.test-installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet "$(TF_SPEC)" -e ".[jax,test]" -e docker/
	# Debian's chromium for the report's browser test (CI runs as root on Debian).
	command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
	  || echo "chromium is missing: the report browser tests will fail (PRFMAP_SKIP_BROWSER=1 skips them)"
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	rm -rf $(DEMO_DIR)
	$(BIN)/prfmap-synth $(DEMO_DIR)/bids --subjects 1 --runs 2 --space fsaverage5
	$(BIN)/prfmap $(DEMO_DIR)/bids $(DEMO_DIR)/out participant --backend jax --work-dir $(DEMO_DIR)/work
	@echo "Maps:   $(DEMO_DIR)/out/sub-01/func/"
	@echo "Report: $(DEMO_DIR)/out/sub-01.html"

lint: $(VENV)/.test-installed
	$(BIN)/ruff check app tests docker

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

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache
