# Set up one virtual environment for the generator, the tests and the rendered projects.
#   make demo   render the default project into build/demo and train it
#   make test   run the repository's tests, then check the pairwise set of combinations
#   make check  check every combination (render, lint, train, resume, export; CHECK_ARGS)
# TORCH_SPEC and TORCH_INDEX_URL choose the torch build, e.g.
#   make setup TORCH_SPEC="torch==2.13.0" TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PY := $(abspath $(BIN))/python
STAMP := $(VENV)/.setup-stamp
TORCH_SPEC ?=
TORCH_INDEX_URL ?=
# One worker more than CI's 2 cores: many tests wait on launched processes, collective
# timeouts or sweep heartbeats, and a third worker uses the core they leave idle (pytest:
# 12 minutes instead of 17 on a fresh clone, 2 cores).
PYTEST_WORKERS ?= 3
CHECK_JOBS ?= 2
CHECK_ARGS ?= --all

.PHONY: setup demo test lint check

setup: $(STAMP)

# Torch goes in first and pinned where there is no GPU, so resolving `.[dev]` keeps it instead
# of pulling the newest (CUDA, multi-GB) release. For PyTorch's own CPU-only wheels, add
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if [ -n "$(TORCH_SPEC)$(TORCH_INDEX_URL)" ]; then \
		$(BIN)/python -m pip install $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) \
			"$(or $(TORCH_SPEC),torch==2.13.0)"; \
	elif ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(BIN)/python -m pip install "torch==2.13.0"; \
	fi
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

demo: setup
	rm -rf build/demo
	$(PY) -m generator render build/demo
	cd build/demo && PYTHONPATH=src $(PY) -m \
		$$($(PY) -c 'from generator.render import package_of; print(package_of("."))').train

# The tests run the reference projects' own suites; the pairwise check then renders, lints,
# trains, resumes and exports every pair of choices, and runs the own tests of a few more
# combinations, enough to use every choice the reference projects leave out (rest).
# worksteal: a few tests take minutes (a project's whole suite); an idle worker takes over
# queued ones instead of waiting for a busy worker's share to run out. --durations: the
# slowest tests, in every CI log, for keeping make test within its 25 minutes.
test: setup
	$(PY) -m generator report status  # whether docs/MATRIX.md is of this template: informs only
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations 25
	$(PY) -m generator check --pairwise --device cpu --jobs $(CHECK_JOBS) --project-tests rest \
		--report build/check/pairwise

check: setup
	$(PY) -m generator check $(CHECK_ARGS) --jobs $(CHECK_JOBS) --report build/check/matrix

# .pre-commit-config.yaml's hooks on every file: ruff on generator/, tests/ and bench/,
# whitespace, YAML, TOML and conflict markers everywhere but template/ and reference_projects/.
lint: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pre-commit run --all-files --show-diff-on-failure
