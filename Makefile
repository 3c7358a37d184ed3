# The one interface for people and CI. Every target installs what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
CORE_VENV := .venv-core
# The demo's own environment: the core and the plot extra only (no framework), so a fresh
# machine plans and draws in well under a minute.
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed
# Frameworks that work on a CPU machine, for the dev environment only: users bring
# their own. torch is pinned to the CPU build this machine carries (any other
# version pulls a multi-GB CUDA build). torch_npu is never installed: it needs CANN.
DEV_FRAMEWORKS := torch==2.13.0 mindspore nvidia-ml-py
BACKEND_DIRS := $(patsubst %/pyproject.toml,%,$(filter-out backends/_template/%,$(wildcard backends/*/pyproject.toml)))
STAMP := $(VENV)/.installed
COV_FLOOR ?= 91
# pytest-xdist workers for make test (this project's machines have 2 cores).
TEST_WORKERS ?= 2

.PHONY: install demo test test-core test-all lint bench seed-cases hardware accuracy fuzz docs clean

$(STAMP): pyproject.toml bench/pyproject.toml $(wildcard backends/*/pyproject.toml) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(DEV_FRAMEWORKS)
	$(PIP) install -q -e ".[dev]" -e ./bench $(foreach d,$(BACKEND_DIRS),-e ./$(d))
	touch $(STAMP)

install: $(STAMP)

$(DEMO_STAMP): pyproject.toml Makefile
	test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -e ".[plot]"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	mkdir -p out
	$(DEMO_VENV)/bin/memacct plan --model qwen2.5-7b --device h100-80gb --plot out/plan.png

# The core alone, in an environment with no backend distribution and no framework.
test-core:
	test -x $(CORE_VENV)/bin/python || $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install -q --upgrade pip
	$(CORE_VENV)/bin/python -m pip install -q -e ".[dev]"
	$(CORE_VENV)/bin/python -m pytest tests -q -p no:cacheprovider -n $(TEST_WORKERS)

# coverage starts before pytest, so the import-time lines of memacct's own pytest
# plugin (loaded before pytest-cov could start) are measured too; the tests run in
# TEST_WORKERS pytest-xdist processes (one per core here), each measured from its first
# line (pyproject.toml: patch = subprocess), their data combined before the report.
test-all: install
	$(PY) -m coverage erase
	$(PY) -m coverage run -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)
	$(PY) -m coverage combine -q
	$(PY) -m coverage report --skip-covered --sort=cover --fail-under=$(COV_FLOOR)

test: test-all test-core

lint: install
	$(VENV)/bin/ruff check memacct backends bench tests tools
	$(VENV)/bin/mypy --strict memacct bench/memacct_bench $(foreach d,$(BACKEND_DIRS),$(d)/memacct_$(notdir $(d)))

# The truth-source accuracy benchmark (writes docs/results.md), then allocator throughput,
# then KV-cache planning time per model (fails above 5 ms), then how long `memacct backends`
# takes (docs/reliability.md), then how long a preset plan takes as a command (imports).
bench: install
	$(VENV)/bin/memacct bench --full --output docs/results.md
	$(PY) benchmarks/bench_allocator.py
	$(PY) -m memacct_bench.seed_cases
	$(PY) benchmarks/bench_plan.py
	$(PY) benchmarks/bench_offline_plan.py
	$(PY) benchmarks/bench_model_paths.py
	$(PY) benchmarks/bench_backends.py
	$(PY) benchmarks/bench_cli_startup.py

# On a machine with a GPU or NPU: the hardware-marked tests, a real profile and plan, the
# same trace on the simulator, a JSON report (docs/hardware.md). Without one: says so, exit 0.
hardware: install
	$(PY) tools/hardware.py --output out/hardware-report.json

# The seed's published vllm-mindspore cases replayed on the simulated device
# (docs/simulator.md, "The seed's cases").
seed-cases: install
	$(PY) -m memacct_bench.seed_cases

# Replays the real start-up logs of tests/data/startup_logs/ and writes docs/accuracy.md.
accuracy: install
	$(PY) tools/accuracy.py --output docs/accuracy.md

# The property tests with 20x the examples, from a fresh random seed (not in CI; see
# docs/reliability.md for the last run's figures).
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider -m "not slow" \
		--hypothesis-show-statistics tests

clean:
	rm -rf $(VENV) $(CORE_VENV) $(DEMO_VENV) out .pytest_cache .mypy_cache .ruff_cache .coverage
