# Two set-up commands: `make run` and `make test`. Both create .venv and install on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit slow wheel tour cluster bench clean chromium

# torch==2.13.0 (CPU wheel on this machine's disk) goes in first, so nothing pulls a CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,dist,ml,postgres]'
	$(BIN)/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/deepflow run configs/studies/default.yaml --out results/default

lint: $(STAMP)
	$(BIN)/ruff check deepflow tests benchmarks
	$(BIN)/ruff format --check deepflow tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# Headless Chromium for the report's browser test (tests/report/test_browser.py), from Debian;
# installed only when missing. DEEPFLOW_SKIP_BROWSER=1 skips it (and the test) without apt.
chromium:
	@if [ ! -x /usr/bin/chromium ] && [ "$$DEEPFLOW_SKIP_BROWSER" != 1 ]; then \
		echo "installing chromium (Debian) for the report's browser test"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
			>/dev/null; \
	fi

unit: $(STAMP) chromium
	$(BIN)/python -m pytest -q -m "not slow"

slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The wheel, built from a copy of the sources, installed into a fresh venv without the
# checkout and smoke-tested from a temporary folder (tests/test_packaging.py, about 30 s).
wheel: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests/test_packaging.py

# Every `.venv/bin/deepflow` line of the README, run in order in a copy of the checkout's
# files with an 80-column terminal (tests/test_readme.py, about 5 min on 2 cores).
tour: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests/test_readme.py

# Sweeps on a real local Ray cluster (tests/datasets/test_ray.py starts `ray start --head` on a free
# port and stops it): byte-identical to the local backend with a worker killed mid-run, and the
# lost-head message with --resume (about 2 min on 2 cores).
cluster: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests/datasets/test_ray.py

test: lint typecheck unit wheel tour cluster

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
