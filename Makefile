# One entry point. Every target creates the virtual environment it needs when it is missing.
#   make demo   set up, then run the end-to-end demo on the embedded model (the main job)
#   make test   set up, install what the tests need beyond the venv (test-deps), then run the test suite
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
                 tests/test_train_packing.py tests/test_train_batch.py tests/test_train_multigpu.py tests/test_generation.py \
                 tests/test_train_schedule.py tests/test_train_settings.py tests/test_train_start.py \
                 tests/test_train_probe.py tests/test_train_dev.py tests/test_train_ranks.py

# What the tests need beyond the venv (tests/agent_clis.py): the agent CLIs and the MCP Inspector from
# npm, pinned in .ci/clis/*/package-lock.json (skipped without npm, outside CI; `npm install`, not `npm
# ci`: the locks hold only the Linux x64 builds of the CLIs' per-platform packages), pip's wheel plus
# Python 3.10 wheels of our requirements for the PostTrainBench container test (skipped without that
# Python, outside CI), and Harbor from PyPI in a venv of its own (it needs Python >= 3.12 and packages
# of its own; pinned in .ci/harbor/requirements.txt; tests/test_harbor.py, skipped without it outside
# CI). Chromium is required: installed from Debian when root, else a clear failure. Bubblewrap (the
# unit-tests grader's sandbox, and the Harbor test's local environment) is installed from Debian when
# root; without it those tests are skipped outside CI and fail in CI.
CLIS       := .ci/clis
WHEELHOUSE := .ci/wheels/py310
HARBOR     := .ci/harbor
HARBOR_PYTHON ?= $(shell pyenv root 2>/dev/null)/versions/3.12.1/bin/python
NPM        ?= npm

.PHONY: setup demo test test-deps chromium bubblewrap clis wheelhouse harbor bench compat deepspeed lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/aci demo --workdir demo-work

test: setup test-deps
	$(VENV)/bin/pytest $(PYTEST_ARGS) --ignore=$(DEEPSPEED_TESTS)

test-deps: chromium bubblewrap clis wheelhouse harbor

bubblewrap:
	@command -v bwrap >/dev/null || if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing bubblewrap (Debian) for the unit-tests grader's sandbox"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	else echo "no bwrap: the grader uses its partial sandbox and the sandbox tests are skipped (CI fails instead);" \
	  "install it with: sudo apt-get install bubblewrap"; fi

chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
	|| if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium (Debian) for the report test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "make test needs Chromium for the report test: install it (Debian: sudo apt-get install chromium), then run make test again" >&2; \
	  exit 1; \
	fi

clis: $(CLIS)/current/.installed $(CLIS)/harness/.installed

$(CLIS)/%/.installed: $(CLIS)/%/package.json $(CLIS)/%/package-lock.json
	@if command -v $(NPM) >/dev/null; then \
	  echo "installing the $* agent CLIs from npm into $(CLIS)/$*"; \
	  $(NPM) install --prefix $(CLIS)/$* --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "no npm: the tests that run the real agent CLIs will be skipped (CI installs Node and fails instead)"; fi

harbor: bubblewrap $(HARBOR)/venv/.installed

$(HARBOR)/venv/.installed: $(HARBOR)/requirements.txt
	@if [ -x "$(HARBOR_PYTHON)" ]; then \
	  echo "installing Harbor into $(HARBOR)/venv"; \
	  rm -rf $(HARBOR)/venv && $(HARBOR_PYTHON) -m venv $(HARBOR)/venv \
	  && $(HARBOR)/venv/bin/python -m pip install -q --disable-pip-version-check -r $(HARBOR)/requirements.txt \
	  && touch $@; \
	else echo "no Python 3.12 at $(HARBOR_PYTHON): the Harbor test will be skipped (CI fails instead)"; fi


wheelhouse: $(WHEELHOUSE)/.complete

$(WHEELHOUSE)/.complete: pyproject.toml | setup
	@if [ -x "$(COMPAT_PYTHON)" ]; then \
	  echo "downloading pip and Python 3.10 wheels of posttrain-aci's requirements into $(WHEELHOUSE)"; \
	  mkdir -p $(WHEELHOUSE) && $(PY) -c 'import importlib.metadata as m, re; print("\n".join(r.split(";")[0] for r in m.requires("posttrain-aci") if not re.search("extra == .(?!data)", r)))' > $(WHEELHOUSE)/requirements.txt \
	  && $(COMPAT_PYTHON) -m pip download -q --disable-pip-version-check --only-binary=:all: -d $(WHEELHOUSE) pip -r $(WHEELHOUSE)/requirements.txt \
	  && touch $@; \
	else echo "no Python 3.10 at $(COMPAT_PYTHON): the PostTrainBench container test will be skipped (CI fails instead)"; fi

bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

$(COMPAT_VENV)/.installed: pyproject.toml ci/compat-constraints.txt
	test -x $(COMPAT_VENV)/bin/python || $(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q --upgrade pip
	$(COMPAT_VENV)/bin/python -m pip install -q -c ci/compat-constraints.txt -e ".[train,data,dev]"
	touch $@

compat: $(COMPAT_VENV)/.installed
	$(COMPAT_VENV)/bin/pytest $(PYTEST_ARGS) $(COMPAT_TESTS)

# DeepSpeed ZeRO-2/3 end to end (tests/test_train_deepspeed.py): pinned in .ci/deepspeed/requirements.txt,
# installed beside the venv's torch (--no-deps; --no-build-isolation: its setup imports torch) into a
# folder of its own, so the other lanes keep running without DeepSpeed, as the PostTrainBench image does.
DEEPSPEED := .ci/deepspeed
# its own lane: `make test` leaves it out rather than skip it
DEEPSPEED_TESTS := tests/test_train_deepspeed.py

$(DEEPSPEED)/lib/.installed: $(DEEPSPEED)/requirements.txt | setup
	$(PY) -m pip install -q --no-deps --no-build-isolation --target $(DEEPSPEED)/lib -r $(DEEPSPEED)/requirements.txt
	touch $@

deepspeed: $(DEEPSPEED)/lib/.installed
	PYTHONPATH=$(abspath $(DEEPSPEED)/lib) $(VENV)/bin/pytest $(PYTEST_ARGS) $(DEEPSPEED_TESTS)

lint: setup
	$(VENV)/bin/ruff check aci tests bench

clean:
	rm -rf $(VENV) $(COMPAT_VENV) $(DEEPSPEED)/lib demo-work .pytest_cache .ci/wheels $(CLIS)/*/node_modules $(CLIS)/*/.installed $(HARBOR)/venv
