# Two commands for a new machine: `make artifacts-quick` (all figures, CPU, minutes) and `make test`.
PYTHON ?= python3
# Pinned: an unpinned torch may pull a multi-GB CUDA build. On a GPU box, any CUDA build of this
# version works (e.g. TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130").
TORCH ?= torch==2.13.0
EXTRAS ?= rl,jax,sims,dist,dev
# The environment make installs into and runs from; the container sets VENV=/opt/venv, the image's.
VENV ?= .venv
PY := $(VENV)/bin/python
RLSCOPE := $(VENV)/bin/rlscope
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
MANIFESTS := $(sort $(wildcard configs/*.yaml))
JOBS ?= 1

.PHONY: install test artifacts-quick artifacts smoke-gpu clean

install: $(STAMP)

$(STAMP): pyproject.toml CMakeLists.txt $(shell find csrc -type f 2>/dev/null)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

test: $(STAMP)
	$(PY) -m pytest

# Every manifest at quick scale on this machine; figures land in output/artifacts/experiment_<experiment>/,
# and output/report.html shows them all (written whether or not a run failed).
artifacts-quick: $(STAMP)
	$(RLSCOPE) run $(MANIFESTS) --scale quick --jobs $(JOBS); status=$$?; $(RLSCOPE) report output; exit $$status

# The papers' sizes: for a GPU machine (hours). A failed run never stops the other manifests; the
# end lists every manifest's runs and the exit status is non-zero if any failed.
artifacts: $(STAMP)
	$(RLSCOPE) run $(MANIFESTS) --scale full --jobs $(JOBS); status=$$?; $(RLSCOPE) report output; exit $$status

# The GPU smoke run (.github/workflows/smoke-gpu.yml, a self-hosted GPU runner): the doctor at full
# scale, the GPU tests, then every manifest at quick scale with its policy and simulators on the GPU.
# 477 s on one H100 (docs/results/smoke-gpu.md); its own output directory, so it never replaces the
# CPU quick runs' results.
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
	$(RLSCOPE) doctor --scale full
	$(PY) -m pytest -m gpu
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(RLSCOPE) run $(SMOKE_FIRST) $(filter-out $(SMOKE_FIRST),$(MANIFESTS)) \
	  --scale quick $(SMOKE_SET) --output $(SMOKE_OUTPUT) --jobs $(SMOKE_JOBS); \
	status=$$?; $(RLSCOPE) report $(SMOKE_OUTPUT); exit $$status

clean:
	rm -rf build $(VENV) output/*/ .pytest_cache
