# solo-geometry: README's two commands.
#   make demo   set up, then run the main job on the embedded digits data
#   make test   set up, then run the whole test suite
#   make docs   set up, then serve the documentation site (docs/, mkdocs.yml) on 127.0.0.1:8000
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch and torchvision are installed explicitly first so that pip never pulls a second
# multi-GB build to satisfy a looser requirement later.
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1

.PHONY: setup demo test docs docs-build lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=23" "setuptools>=64,<81" wheel
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e ".[lightly,umap,dev,docs]" --config-settings editable_mode=compat
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) -m solo_geometry.cli demo $(DEMO_ARGS)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

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
