# One entry point. Every target creates the virtual environment it needs when it is missing.
#   make demo   set up, then run the end-to-end demo on the embedded model (the main job)
#   make test   set up, then run the test suite
#   make bench  run the performance benchmarks (each prints name=value last)
#   make compat the PostTrainBench compatibility lane (Python 3.10, transformers 4.57, trl 0.27, peft 0.18)

PYTHON   ?= python3
VENV     ?= .venv
# The CPU build by default (this is what CI and laptops want); set TORCH=torch for your platform's default.
TORCH    ?= torch==2.13.0
EXTRAS   ?= train,eval,data,dev
PY       := $(VENV)/bin/python
PYTEST_ARGS ?= -q

COMPAT_PYTHON ?= $(shell pyenv root 2>/dev/null)/versions/3.10.13/bin/python
COMPAT_VENV   ?= .venv-compat
COMPAT_TESTS  ?= tests/test_templates.py tests/test_train.py tests/test_train_gates.py tests/test_train_jobs.py \
                 tests/test_train_packing.py tests/test_train_batch.py tests/test_train_multigpu.py tests/test_generation.py

.PHONY: setup demo test bench compat lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/aci demo --workdir demo-work

test: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

$(COMPAT_VENV)/.installed: pyproject.toml ci/compat-constraints.txt
	test -x $(COMPAT_VENV)/bin/python || $(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q --upgrade pip
	$(COMPAT_VENV)/bin/python -m pip install -q -c ci/compat-constraints.txt -e ".[train,data,dev]"
	touch $@

compat: $(COMPAT_VENV)/.installed
	$(COMPAT_VENV)/bin/pytest $(PYTEST_ARGS) $(COMPAT_TESTS)

lint: setup
	$(VENV)/bin/ruff check aci tests bench

clean:
	rm -rf $(VENV) $(COMPAT_VENV) demo-work .pytest_cache
