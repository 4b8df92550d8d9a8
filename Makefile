# linumpy: `make demo` runs the main job on the embedded demo data, `make test` the whole suite.
SHELL := /bin/bash
comma := ,
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_DIR ?= demo_output
# The GPU extra is added when an NVIDIA driver is present; override e.g. EXTRAS=test,docs,gpu-cu12.
EXTRAS ?= test,docs$(shell command -v nvidia-smi >/dev/null 2>&1 && echo ,gpu-cu13)
# The main job runs on the GPU where there is one (the scripts fall back to the CPU, with a
# warning, when the GPU or its libraries are not usable); USE_GPU= forces the CPU.
USE_GPU ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo --use-gpu)

.PHONY: help venv demo test lint docs clean

help:
	@echo "make demo   - create $(VENV), install linumpy, run the main job on the demo data"
	@echo "make test   - run the whole test suite (lint, format check, pytest)"
	@echo "make docs   - build the documentation into docs/_build/html"

$(VENV)/.installed-$(subst $(comma),-,$(EXTRAS)): pyproject.toml
	@py=$$(.ci/find-python) || exit 1; \
	if [ ! -x $(PY) ]; then echo "creating $(VENV) with $$py"; "$$py" -m venv $(VENV) || exit 1; fi
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@rm -f $(VENV)/.installed-*; touch $@


venv: $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

demo: venv
	$(VENV)/bin/linum-make-demo-data $(DEMO_DIR)/mosaic.ome.zarr -f
	$(VENV)/bin/linum-estimate-transform $(DEMO_DIR)/mosaic.ome.zarr $(DEMO_DIR)/transform.json \
		-f $(USE_GPU)
	$(VENV)/bin/linum-stitch-3d $(DEMO_DIR)/mosaic.ome.zarr $(DEMO_DIR)/transform.json \
		$(DEMO_DIR)/stitched.ome.zarr --blending linear -f $(USE_GPU)
	$(VENV)/bin/linum-aip $(DEMO_DIR)/stitched.ome.zarr $(DEMO_DIR)/stitched_aip.ome.zarr \
		--png $(DEMO_DIR)/stitched_aip.png -f $(USE_GPU)
	@echo "demo done: $(DEMO_DIR)/stitched_aip.png"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(VENV)/bin/python -m pytest -q

docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) $(DEMO_DIR) docs/_build docs/api .pytest_cache .ruff_cache
