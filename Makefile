# The two commands: `make lab` and `make test`. Both create .venv and install the project into it
# when needed: `make lab` what a learner needs, `make test` the test extra on top (JupyterHub,
# dask-gateway-server, jupyter-book, Playwright, ruff). A stamp file for each makes its install happen
# again only when pyproject.toml changes, so `make lab` then `make test` installs the extra once.

PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 8888
IP     ?= 127.0.0.1
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# Jupyter refuses to run as root without --allow-root (containers, CI); no browser without a display.
LAB_FLAGS := $(if $(DISPLAY),,--no-browser) $(if $(filter 0,$(shell id -u)),--allow-root,)
# The project's JupyterLab settings come first (jupyter-config/README.md: no news or update toasts).
LAB_CONFIG := JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter-config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}

.PHONY: lab test test-lab-figures lint install install-test bench bench-node peers site clean distclean

install: $(STAMP)
install-test: $(TEST_STAMP)

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python >= 3.11 is needed; run: make PYTHON=python3.12 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(TEST_STAMP)

# Every lesson's cluster serves Dask's dashboard, linked through JupyterLab's proxy (jupyter-server-proxy):
# dask-labextension's sidebar finds it from the notebook's client (docs/course/setup.md).
LAB_DASK := WORKBENCH_DASHBOARD=1 DASK_DISTRIBUTED__DASHBOARD__LINK=/proxy/{port}/status

lab: $(STAMP)
	$(LAB_CONFIG) $(LAB_DASK) $(BIN)/jupyter lab --notebook-dir=. --LabApp.default_url=/lab/tree/notebooks --ip=$(IP) --port=$(PORT) $(LAB_FLAGS)

# The linter and the formatter (settings in pyproject.toml: 120 columns) run before the tests.
lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

# Lessons 03 and 04 executed at size "lab", then opened in JupyterLab in Chromium: no figure, table or widget
# wider than its output area, screenshots in build/artifacts/browser/lessons-lab/ (.ci/run runs it after
# `make test`; the lessons' run at "lab" is most of its time).
test-lab-figures: $(TEST_STAMP)
	WORKBENCH_LAB_FIGURES=1 $(BIN)/python -m pytest tests/test_notebooks_in_browser.py -k at_lab

# The course site: syllabus, guide, setup and every lesson executed at size ci (build/site/index.html).
site: $(TEST_STAMP)
	$(BIN)/python -m workbench.teach.site

# Every benchmark, each in its own process: build/bench/HOST-TIME/results.json and results.html
# (about 12 min on 2 cores; BENCH_FLAGS="--size ci" for a smoke run, about 7 min).
bench: $(STAMP)
	$(BIN)/workbench bench all $(BENCH_FLAGS)

# The day before a course on a cluster node: the checks of the papers' effects at their scale (issue 36),
# one worker per core at NODE_WORKERS workers: RRO against the node's read floor (shm), k-means SplIter
# (splitter) and the active store (store), their goals on one page (build/bench/HOST-TIME).
NODE_WORKERS ?= 16
bench-node: $(STAMP)
	$(BIN)/workbench bench all --workers $(NODE_WORKERS) --only shm,splitter,store $(BENCH_FLAGS)

# The peers the benchmarks measure against (optional; each benchmark skips a missing one, saying so).
peers: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,peers,dataclay,mpi]"
	command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get install -y -qq redis-server; } \
	  || echo "redis-server is missing (apt-get install redis-server as root): the dataClay peer will be skipped"

clean:
	rm -rf build .pytest_cache .ipynb_checkpoints notebooks/.ipynb_checkpoints
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
	find . -path ./$(VENV) -prune -o -name '*.egg-info' -type d -exec rm -rf {} +
	rm -rf $${XDG_CACHE_HOME:-$$HOME/.cache}/locality-workbench/numba

distclean: clean
	rm -rf $(VENV)
