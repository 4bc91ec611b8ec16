# Two commands for a new machine: `make artifacts-quick` (all figures, CPU, minutes) and `make test`.
# The venv's Python: the newest >= 3.12 on PATH or under pyenv, else python3 (a warning says what
# that costs: 3.11's profile hook does not see calls into nanobind, ufunc and Cython callables).
# `make PYTHON=...` chooses another.
# Candidates by the minor version their names give, newest first (python3 last); the first >= 3.12 wins.
FIND_PYTHON := { for n in 19 18 17 16 15 14 13 12; do p=$$(command -v python3.$$n) && echo "$$n $$p"; done; \
  for p in $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.1[2-9]*/bin/python3; do \
  v=$${p%/bin/python3}; v=$${v\#\#*/3.}; echo "$${v%%[!0-9]*} $$p"; done; echo "0 python3"; } | sort -rn | \
  while read -r n p; do "$$p" -S -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && \
  { echo "$$p"; break; }; done
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell $(FIND_PYTHON))
ifeq ($(PYTHON),)
PYTHON := python3
$(warning no Python >= 3.12 found (python3, python3.1x on PATH or under pyenv): using python3; on Python 3.11 rlscope \
  does not see calls into jaxlib, numpy's ufuncs, ale-py and other nanobind or Cython callables, and its \
  breakdowns carry that caveat)
endif
endif
# Pinned: an unpinned torch may pull a multi-GB CUDA build. On a GPU box, any CUDA build of this
# version works (e.g. TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130").
TORCH ?= torch==2.13.0
EXTRAS ?= rl,jax,sims,dist,dev
# The environment make installs into and runs from: the one variable for it (experiments/*.sh and the
# container read it too; the image sets VENV=/opt/venv).
VENV ?= .venv
PY := $(VENV)/bin/python
RLSCOPE := $(VENV)/bin/rlscope
MANIFESTS := $(sort $(wildcard configs/*.yaml))
JOBS ?= 1

# Installs are keyed by the content they are made from, not by timestamps: a checkout mounted into
# the container has other timestamps than the copy the image was built from, and must not trigger a
# reinstall when its content is the same. Dependencies (pyproject.toml, TORCH, EXTRAS) and rlscope
# itself (its native code too) are two steps, so the image caches the first as its own layer.
# A key is a hash of the files' names and contents (and of TORCH and EXTRAS for the dependencies).
hash = $(shell sha256sum $(1) | sha256sum | cut -c1-16)
DEPS_STAMP := $(VENV)/.deps-$(call hash,pyproject.toml)-$(shell printf '%s' '$(TORCH) $(EXTRAS)' | sha256sum | cut -c1-8)
STAMP := $(VENV)/.installed-$(call hash,$(wildcard pyproject.toml CMakeLists.txt) $(sort $(shell find csrc -type f 2>/dev/null)))
# pyproject.toml's requirements for EXTRAS, its build requirements included (rlscope is then built
# without pip's build isolation, against the venv's own nanobind and scikit-build-core).
REQUIREMENTS := import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb")); \
  extras = p["project"]["optional-dependencies"]; \
  print(*p["build-system"]["requires"], *p["project"]["dependencies"], \
        *(r for e in sys.argv[1].split(",") if e for r in extras[e]), sep="\n")

.PHONY: install deps test fuzz artifacts-quick artifacts docs smoke-gpu container-test clean

install: $(STAMP)
deps: $(DEPS_STAMP)

$(DEPS_STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(foreach word,$(TORCH),'$(word)')
	$(PY) -c '$(REQUIREMENTS)' '$(EXTRAS)' > $(VENV)/requirements.txt
	$(PY) -m pip install --quiet -r $(VENV)/requirements.txt
	rm -f $(VENV)/.deps-* && touch $@

$(STAMP): $(DEPS_STAMP)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-* && touch $@

test: $(STAMP)
	$(PY) -m pytest

# The command-line fuzz tests (tests/test_fuzz_cli.py) at length, with a fresh random seed each time
# (CI runs them with a fixed seed and a few examples); FUZZ_SEED=N repeats a run. The examples, the
# seed and what failed go to docs/results/reliability_fuzz.json.
FUZZ_EXAMPLES ?= 2000
FUZZ_SEED ?= $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
fuzz: $(STAMP)
	$(PY) bench/fuzz_cli.py --examples $(FUZZ_EXAMPLES) --seed $(FUZZ_SEED) --out docs/results/reliability_fuzz.json

# Every manifest at quick scale on this machine; figures land in output/artifacts/experiment_<experiment>/,
# output/report.html shows them all (written whether or not a run failed), and the last lines say
# which of the papers' claims the results reproduce (quick scale: many are "not run" or differ).
artifacts-quick: $(STAMP)
	$(RLSCOPE) run $(MANIFESTS) --scale quick --jobs $(JOBS); status=$$?; $(RLSCOPE) report output; \
	$(RLSCOPE) claims output; exit $$status

# The papers' sizes: for a GPU machine (hours). A failed run never stops the other manifests; the
# end lists every manifest's runs and the exit status is non-zero if any failed.
artifacts: $(STAMP)
	$(RLSCOPE) run $(MANIFESTS) --scale full --jobs $(JOBS); status=$$?; $(RLSCOPE) report output; \
	$(RLSCOPE) claims output; exit $$status

# The results pages' generated parts, from the data under docs/results: the claims tables
# (rlscope claims) and the marked tables (bench/results_tables.py). tests/test_results_pages.py
# fails when a page is not what this makes.
docs: $(STAMP)
	$(RLSCOPE) claims docs/results/h100 --into docs/results/claims.md
	$(RLSCOPE) claims docs/results/h100 --paper datacollection --into docs/results/datacollection.md
	$(PY) bench/results_tables.py

# The GPU smoke run (.github/workflows/smoke-gpu.yml, a self-hosted GPU runner): the doctor at full
# scale, the GPU tests, then every manifest at quick scale with its policy and simulators on the GPU.
# Target: under 10 minutes on one H100 (docs/results/smoke-gpu.md); its own output directory, so it
# never replaces the CPU quick runs' results. It leaves its record there beside the runs' results.csv:
# smoke-times.txt (each step's end in epoch seconds, "runs" with its exit status) and gpu-tests.xml
# (pytest's JUnit XML: counts and times of the GPU tests).
# Runs share the GPU SMOKE_JOBS at a time, across manifests (most of a quick run is its process
# starting): the smoke shows that everything runs on the GPU; its timings are not for reading. The
# overhead validation is cut to what shows that each way works: one calibration repetition with one
# start-up pair, one validation pair (budget_s), no sessions run (`pytest -m gpu` starts and stops
# sessions and calibrates on the GPU with every start-up pair). The manifests of the longest runs
# go first (the overhead validation, the calibrated XLA breakdown, the framework comparison, the
# simulator comparison), so the short runs fill the slots around them rather than wait behind.
SMOKE_OUTPUT ?= output/smoke-gpu
SMOKE_JOBS ?= 6
SMOKE_OVERHEAD := --set budget_s=60 --set session_steps=0 --set calibration_repetitions=1 --set calibration_startup_pairs=1
SMOKE_SET ?= --set device=cuda $(SMOKE_OVERHEAD)
SMOKE_FIRST := configs/overhead_correction.yaml configs/xla_breakdown.yaml configs/rl_framework_comparison.yaml \
  configs/simulator_comparison.yaml
smoke-gpu: $(STAMP)
	mkdir -p $(SMOKE_OUTPUT) && echo "start $$(date -u +%s)" > $(SMOKE_OUTPUT)/smoke-times.txt
	$(RLSCOPE) doctor --scale full
	echo "doctor $$(date -u +%s)" >> $(SMOKE_OUTPUT)/smoke-times.txt
	$(PY) -m pytest -m gpu --junitxml=$(SMOKE_OUTPUT)/gpu-tests.xml
	echo "gpu-tests $$(date -u +%s)" >> $(SMOKE_OUTPUT)/smoke-times.txt
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(RLSCOPE) run $(SMOKE_FIRST) $(filter-out $(SMOKE_FIRST),$(MANIFESTS)) \
	  --scale quick $(SMOKE_SET) --output $(SMOKE_OUTPUT) --jobs $(SMOKE_JOBS); \
	status=$$?; echo "runs $$(date -u +%s) $$status" >> $(SMOKE_OUTPUT)/smoke-times.txt; \
	$(RLSCOPE) report $(SMOKE_OUTPUT); exit $$status

# The container built and used on a real Docker engine, as a non-root user through run_docker.py:
# the CPU image's builds, the whole test suite, one experiment and the report inside it
# (dockerfiles/container_test.py; it installs and starts Docker where none is reachable, as root).
# CI runs it with --if-changed: only when what the image is made from changed since the recorded run.
CONTAINER_TEST_ARGS ?=
container-test:
	$(PYTHON) dockerfiles/container_test.py $(CONTAINER_TEST_ARGS)

clean:
	rm -rf build $(VENV) output/*/ .pytest_cache
