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

.PHONY: lab test test-lab-figures test-oldest wheelhouse lint install install-test bench bench-node bench-device peers site clean distclean

install: $(STAMP)
install-test: $(TEST_STAMP)

# WHEELS=DIR: every install below takes its wheels from the bundle in DIR ('make wheelhouse', carried to a
# node with no package index) and asks no index.
WHEELHOUSE ?= build/wheelhouse
WHEELS ?=
PIP_FROM := $(if $(WHEELS),--no-index --find-links $(abspath $(WHEELS)),)

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python >= 3.11 is needed; run: make PYTHON=python3.12 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(PIP_FROM) --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(PIP_FROM) -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet $(PIP_FROM) -e ".[test]"
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

# Every wheel the workbench needs, for a node with no package index (README, "On an HPC cluster"):
# BUNDLE_FLAGS="--python 3.12 --platform manylinux2014_x86_64 --extra gpu" names another node.
wheelhouse: $(STAMP)
	$(BIN)/workbench bundle $(WHEELHOUSE) $(BUNDLE_FLAGS)

# The oldest versions pyproject.toml supports (.ci/oldest.txt), bundled, installed into $(OLDEST_VENV) in a
# network namespace with no network (.ci/offline), and the Dask seam's contract tests and the smoke subset
# run there against them, still without a network (.ci/run runs it after `make test`).
OLDEST_VENV ?= .venv-oldest
OLDEST_WHEELS ?= build/wheelhouse-oldest
# The histogram tests named are those whose answers follow numpy's dtype and binning rules (what moved the numpy floor).
SMOKE_TESTS := tests/test_dask_seam.py tests/test_store.py \
  tests/test_kernels_histogram.py::test_histogram1d_follows_numpy_dtype_rules_over_many_random_ranges \
  tests/test_kernels_histogram.py::test_histogram1d_float32_data_with_python_and_numpy_float64_ends \
  tests/test_kernels_histogram.py::test_histogram1d_fails_where_numpy_fails_on_mixed_range_types \
  tests/test_kernels_histogram.py::test_range_whose_width_overflows_is_refused_as_numpy_refuses \
  tests/test_kernels_histogram.py::test_every_edge_and_its_neighbours_bin_as_numpy \
  tests/test_kernels_histogram.py::test_large_integers_near_random_range_ends_bin_as_numpy \
  tests/test_splitter.py::test_three_ways_to_run_a_partition_agree tests/test_splitter.py::test_granularity_variants_give_the_same_answer \
  tests/test_tasks.py::test_every_mode_gives_the_same_product tests/test_tasks.py::test_rro_publishes_once_per_node_and_hits_the_table \
  "tests/test_notebooks.py::test_notebook_runs_at_ci_size[00-welcome.ipynb]"
test-oldest: $(STAMP)
	$(BIN)/workbench bundle $(OLDEST_WHEELS) --constraint .ci/oldest.txt --extra test-core
	PYTHON=$(PYTHON) .ci/offline $(OLDEST_WHEELS) $(OLDEST_VENV) "locality-workbench[test-core]" -- \
	  $(OLDEST_VENV)/bin/python -m pytest -p no:cacheprovider -q $(SMOKE_TESTS)

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

# The node's and the GPU's measurements in one command, on a 16-core GPU node with no package index
# (README, "On an HPC cluster"): with the checkout and a bundle made with BUNDLE_FLAGS="--extra gpu" carried
# there, `make bench-device WHEELS=DIR` installs from the bundle and runs bench-node's three, bench gpu and
# lesson 10 at size lab: one results.json and results.html (build/bench/HOST-TIME).
bench-device: $(STAMP)
	$(BIN)/python -m pip install --quiet $(PIP_FROM) -e ".[gpu]"
	$(BIN)/workbench bench all --size lab --workers $(NODE_WORKERS) --only shm,splitter,store,gpu,lessons --lessons 10 $(BENCH_FLAGS)

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
	rm -rf $(VENV) $(OLDEST_VENV)
