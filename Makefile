# Two commands do all the set-up on a machine with Python 3.11, make and git:
#   make run    create .venv if missing, install the project, speak the demo sentence, then run every notebook
#               (papermill) into outputs/ and write the shared report outputs/index.html + summary.json;
#               `make run FAST=1`: every notebook with FAST=True (the short version the tests run)
#   make test   the same set-up, then the test suite (unit + real-weights tiers)
#   make lab    the same set-up, then JupyterLab on notebooks/ (this environment's kernel; notebooks are saved
#               without outputs, the executed copies come from `make run` under outputs/)
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_TEXT := The quick brown fox jumped over the lazy dog.
# pytest-xdist workers for `make test`: whole test files per worker (module fixtures and shared builds stay
# together); artifact builds are locked, so two workers never build the same artifact twice. Files are handed
# out in collection order (tests/conftest.py puts the notebook tier and the files that build its artifacts
# first, then the other long files), not xdist's default of the most tests first
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

.PHONY: run test lab test-unit test-notebooks test-real test-slow lint clean-venv

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# bytecode on every core after the install, not file by file inside it (2-core Zen 2: 96 s so, 47 + 31 s this way)
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test]'
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true  # a few packages ship files that are not Python 3
	@# the 54 official Kokoro v1.0 voices (npm package kokoro-js@1.2.1, sha256-checked); without npm, one line
	@# says what to install, and the embedded Japanese voices still work
	$(BIN)/kokoro-tvm -q voices --fetch >/dev/null || echo "make: official voices not fetched; see the line above"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/kokoro-tvm say "$(DEMO_TEXT)" --voice af_heart -o outputs/demo.wav
	$(BIN)/kokoro-tvm pipeline $(if $(FAST),--fast)

lab: $(STAMP)
	$(BIN)/kokoro-tvm lab

test: $(STAMP)
	$(BIN)/ruff check kokoro_tvm tests
	$(BIN)/ruff format --check kokoro_tvm tests
	$(PYTEST)

test-unit: $(STAMP)
	$(PYTEST) -m "not real and not notebooks"

test-notebooks: $(STAMP)
	$(PYTEST) -m notebooks

test-real: $(STAMP)
	$(PYTEST) -m real

test-slow: $(STAMP)
	$(PYTEST) -m slow

lint: $(STAMP)
	$(BIN)/ruff check kokoro_tvm tests
	$(BIN)/ruff format --check kokoro_tvm tests

clean-venv:
	rm -rf $(VENV)
