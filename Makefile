# Two commands: `make demo` (the main job on generated data) and `make test`.
# Each environment is built once from pinned requirements and then re-used (a stamp file makes it idempotent).
PY ?= python3.11
VENV := .venv
VENV_LATEST := .venv-latest
VENV_TORCH := .venv-torch
HOROVOD_FLAGS := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1
PYTEST_ARGS ?=

.PHONY: env env-latest env-torch lint test test-zerocode test-findings test-latest test-torch test-slurm demo bench notebooks browser clean-env

# The project's own modules compiled to bytecode, as pip does for an installed package (an editable install leaves
# it to the import system, which writes none under PYTHONDONTWRITEBYTECODE: every process then compiled them again,
# 0.1-0.15 s of CPU each). Quick when up to date; a stale file is compiled again in memory, as without it.
BYTECODE := -m compileall -q trace_merge timelogger benchmarks

env: $(VENV)/.stamp
	$(VENV)/bin/python $(BYTECODE)
env-latest: $(VENV_LATEST)/.stamp
	$(VENV_LATEST)/bin/python $(BYTECODE)
env-torch: $(VENV_TORCH)/.stamp
	$(VENV_TORCH)/bin/python $(BYTECODE)

$(VENV)/.stamp: tools/requirements-tf215.txt setup.cfg setup.py trace_merge/readers/_pfwscan.c trace_merge/_sweep.c timelogger/_capture.c
	@echo "== setting up $(VENV) (TF 2.15 + MPICH + Horovod 0.28.1; Horovod builds from source, ~3 min once)"
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip wheel setuptools
	$(VENV)/bin/pip install -q -r tools/requirements-tf215.txt
	$(VENV)/bin/python -c "import horovod.tensorflow" 2>/dev/null || \
	  PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(HOROVOD_FLAGS) $(VENV)/bin/pip install -q --no-build-isolation --no-cache-dir horovod==0.28.1
	$(VENV)/bin/pip install -q --no-deps -e .
	$(VENV)/bin/python -c "import horovod.tensorflow, tensorflow, mpi4py, h5py, pandas, pyarrow, duckdb, darshan, dftracer"
	touch $@

$(VENV_LATEST)/.stamp: tools/requirements-latest.txt setup.cfg setup.py trace_merge/readers/_pfwscan.c trace_merge/_sweep.c timelogger/_capture.c
	@echo "== setting up $(VENV_LATEST) (newest TensorFlow, no Horovod)"
	test -x $(VENV_LATEST)/bin/python || $(PY) -m venv $(VENV_LATEST)
	$(VENV_LATEST)/bin/pip install -q --upgrade pip wheel setuptools
	$(VENV_LATEST)/bin/pip install -q -r tools/requirements-latest.txt
	$(VENV_LATEST)/bin/pip install -q --no-deps -e .
	touch $@

$(VENV_TORCH)/.stamp: tools/requirements-torch.txt setup.cfg setup.py trace_merge/readers/_pfwscan.c trace_merge/_sweep.c timelogger/_capture.c
	@echo "== setting up $(VENV_TORCH) (PyTorch's CPU build, MPICH, the merge stack, TensorFlow's CPU build for DLIO)"
	test -x $(VENV_TORCH)/bin/python || $(PY) -m venv $(VENV_TORCH)
	$(VENV_TORCH)/bin/pip install -q --upgrade pip wheel setuptools
	$(VENV_TORCH)/bin/pip install -q -r tools/requirements-torch.txt
	$(VENV_TORCH)/bin/pip install -q --no-deps -e .
	$(VENV_TORCH)/bin/python -c "import torch, mpi4py, pandas, pyarrow, duckdb, dftracer, h5py"
	touch $@

# ruff (pyflakes, pycodestyle at 120 columns, bugbear, import order) and mypy; pinned, installed into .venv once
$(VENV)/.lint-stamp: tools/requirements-lint.txt $(VENV)/.stamp
	$(VENV)/bin/pip install -q -r tools/requirements-lint.txt
	touch $@

lint: env $(VENV)/.lint-stamp
	$(VENV)/bin/ruff check trace_merge timelogger benchmarks tests
	$(VENV)/bin/mypy

test: env
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m pytest -q -m "not zerocode and not findings_real and not torch" $(PYTEST_ARGS)

# Unmodified workloads (plain TF2 loops, Keras fit, DLIO's default traces) under the launcher's zero-code hooks
test-zerocode: env
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m pytest -q -m zerocode $(PYTEST_ARGS)

# Findings' rules on real runs built for and against them: 2-rank Horovod stragglers, Keras fit with and without
# prefetch under the POSIX tracer
test-findings: env
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m pytest -q -m findings_real $(PYTEST_ARGS)

test-latest: env-latest
	PATH=$(CURDIR)/$(VENV_LATEST)/bin:$$PATH $(VENV_LATEST)/bin/python -m pytest -q -m "not horovod and not torch" $(PYTEST_ARGS)

# PyTorch capture (plain PyTorch scripts under the launcher's hooks, DataLoader workers, DDP over Gloo under mpiexec and
# torchrun, --torch-profile) in .venv-torch: PyTorch without TensorFlow, built once
test-torch: env-torch
	PATH=$(CURDIR)/$(VENV_TORCH)/bin:$$PATH $(VENV_TORCH)/bin/python -m pytest -q -m torch $(PYTEST_ARGS)

# The Slurm scripts for real (tests/test_slurm.py, docs/cluster.md): a one-node Slurm cluster on this machine for the
# length of the tests (root + apt: Debian's slurm-wlm and munge, installed once), torn down after. Skips without them.
test-slurm: env
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH tools/slurm/cluster.sh -- $(VENV)/bin/python -m pytest -q -m slurm \
	  -p no:cacheprovider tests/test_slurm.py $(PYTEST_ARGS)

demo: env
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m benchmarks.hepcnn demo --out runs/demo
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m benchmarks.climate demo --out runs/demo-climate

bench: env
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python benchmarks/perf/overhead.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python benchmarks/perf/merge_scale.py
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python benchmarks/perf/reader_efficiency.py

# The analysis notebooks in JupyterLab (installed into .venv on first use). They default to `make demo`'s runs.
notebooks: env
	$(VENV)/bin/python -c "import jupyterlab" 2>/dev/null || $(VENV)/bin/pip install -q jupyterlab
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/jupyter lab notebooks/

# Headless Chromium for the test that screenshots the HTML report (skipped without it). Needs root and apt.
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	  echo "make browser: could not install chromium (needs root + apt); the report screenshot test will skip"; }

clean-env:
	rm -rf $(VENV) $(VENV_LATEST) $(VENV_TORCH)
