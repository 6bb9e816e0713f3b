# solo-geometry: README's two commands.
#   make demo   set up, then run the main job on the embedded digits data
#   make test   set up, then run the whole test suite; with SOLO_LEARN_ROOT naming a solo-learn
#               checkout, solo-learn is installed from it first and its tests run too
#   make fuzz   set up, then run the fuzzers (tests/fuzz) long: fresh examples, FUZZ_EXAMPLES each
#   make docs   set up, then serve the documentation site (docs/, mkdocs.yml) on 127.0.0.1:8000
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch and torchvision are installed explicitly first so that pip never pulls a second
# multi-GB build to satisfy a looser requirement later.
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1

.PHONY: setup solo demo test check fuzz docs docs-build lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=23" "setuptools>=64,<81" wheel
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e ".[lightly,umap,dev,docs,bench]" --config-settings editable_mode=compat
	touch $@

setup: $(VENV)/.installed

# solo-learn 1.0.6 is not on the package index: install it from the checkout SOLO_LEARN_ROOT
# names (never a copy in this repository), then only those of its requirements that are missing,
# by name, with torch and lightning held at their installed versions (solo-learn pins
# lightning==2.1.2; pip must not downgrade it). Editable, so that its main_pretrain.py lies next
# to the `solo` package, where the tests find it. Nothing happens without SOLO_LEARN_ROOT.
solo: setup
ifdef SOLO_LEARN_ROOT
	$(PY) -m pip install -q --no-deps --no-build-isolation -e "$(SOLO_LEARN_ROOT)" \
	    --config-settings editable_mode=compat
	$(PY) -m pip freeze | grep -iE '^(torch|torchvision|lightning)==' > $(VENV)/solo-constraints.txt
	missing="$$($(PY) .ci/solo_requirements.py "$(SOLO_LEARN_ROOT)/requirements.txt")"; \
	if [ -n "$$missing" ]; then \
	    $(PY) -m pip install -q -c $(VENV)/solo-constraints.txt $$missing; fi
endif

demo: setup
	$(PY) -m solo_geometry.cli demo $(DEMO_ARGS)

# The suite runs on every core (pytest-xdist): tests go to the workers one at a time, the long ones
# (marked slow) first (tests/conftest.py), so no worker ends alone on an end-to-end case; one torch
# thread per worker and per subprocess, so the workers do not contend for the cores (set
# OMP_NUM_THREADS to change it). The slowest cases are listed at the end. TEST_WORKERS=0 runs it
# in one process.
TEST_WORKERS ?= auto
OMP_NUM_THREADS ?= 1
# Where PYTHONDONTWRITEBYTECODE is set (as on CI) Python writes no bytecode, and each of the
# tests' hundred-odd new processes would compile the package's sources again (about a second of
# CPU each): they are compiled once here, before the tests (files already compiled are skipped).
BYTECODE = $(PY) -m compileall -q -j 0 solo_geometry tests
test: solo
	$(BYTECODE)
	OMP_NUM_THREADS=$(OMP_NUM_THREADS) $(PY) -m pytest -n $(TEST_WORKERS) --dist load \
	    --maxschedchunk 1 --durations 40 $(PYTEST_ARGS)

# The fast layer: every test that runs no real recipe (tests/conftest.py marks the others e2e),
# for after each edit; make test (what CI runs) runs them all.
check: solo
	$(BYTECODE)
	OMP_NUM_THREADS=$(OMP_NUM_THREADS) $(PY) -m pytest -n $(TEST_WORKERS) --dist load \
	    --maxschedchunk 1 --durations 10 -m "not e2e" $(PYTEST_ARGS)

# The fuzzers with tests/fuzz/conftest.py's "long" profile: fresh examples on every run,
# FUZZ_EXAMPLES a test (default 2000), failures kept in .hypothesis/ and tried first next time;
# FUZZ_SEED=N repeats a run. make test runs the same tests with the fixed-seed "ci" profile.
FUZZ_EXAMPLES ?= 2000
fuzz: solo
	HYPOTHESIS_PROFILE=long FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) OMP_NUM_THREADS=$(OMP_NUM_THREADS) \
	    $(PY) -m pytest tests/fuzz -n $(TEST_WORKERS) --dist load --maxschedchunk 1 \
	    --hypothesis-show-statistics $(if $(FUZZ_SEED),--hypothesis-seed=$(FUZZ_SEED)) $(PYTEST_ARGS)

docs: setup
	$(VENV)/bin/mkdocs serve

docs-build: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

lint: setup
	$(VENV)/bin/ruff check solo_geometry hydra_plugins scripts tests benchmarks
	$(VENV)/bin/ruff format --check solo_geometry hydra_plugins scripts tests benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build site *.egg-info
