# The single entry point. `make demo` runs the system; `make test` runs every check.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export OMP_NUM_THREADS ?= 1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo test lint typecheck contracts migrations-check pytest pytest-core bench install clean-run

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
	# torch first, the pinned CPU build (another version would pull several GB of CUDA packages), then the rest.
	$(BIN)/pip install -q torch==2.13.0 -e '.[dev]' 2>&1 | grep -v '^WARNING: Location' || true
	$(BIN)/python -c "import django, torch, megatron.core, celery, channels, rest_framework"
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/python -m controlplane.config.demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy's Django plugin imports the settings, which start no server (with nothing set they only name the
# embedded servers' addresses).
typecheck: install
	$(BIN)/mypy controlplane agents docs/examples tools/recipe_errors.py

contracts: install
	$(BIN)/lint-imports

migrations-check: install
	$(BIN)/python manage.py makemigrations --check --dry-run

pytest-core: install
	$(BIN)/pytest tests/core tests/contract -p no:django -q

# The browser tests run in their own pytest process: Playwright's sync API keeps an event loop running
# in the main thread for the session, which the async (Channels) tests cannot share.
# Each run lists its 40 slowest tests: where the suite's time goes shows in every CI log.
pytest: install
	$(BIN)/pytest -q --durations=40 --ignore=tests/browser
	$(BIN)/pytest -q --durations=5 tests/browser

test: lint typecheck contracts migrations-check pytest

bench: install
	$(BIN)/python bench/planner.py
	$(BIN)/python bench/detectors.py
	$(BIN)/python bench/iteration.py
	$(BIN)/python bench/detection.py
	$(BIN)/python bench/transition.py
	$(BIN)/python bench/spares.py
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/quality.py
	$(BIN)/python -m controlplane.core.sim all

clean-run:
	rm -rf .run
