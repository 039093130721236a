"""Shared fixtures: real inputs for the analysis/interface tests, made by the real tools (the helpers that make
them are in ``tests/helpers``).

pytest finds the fixtures here by itself (no imports in the test modules). The expensive ones are
session-scoped and read-only: tests that write into a run directory copy it first. A fixture whose tool
or optional package is missing skips the tests that use it; nothing here imports an optional package at
collection time. ``test_run_fixtures.py`` checks that the fixtures hold what the other tests rely on.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.helpers.runs import HVD_STEPS, make_dftracer_set, make_real_run
from tests.helpers.tools import BIN, env_with_bin, mpiexec


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The virtualenv's bin directory (:data:`BIN`)."""
    return BIN


@pytest.fixture()
def tool_env() -> dict[str, str]:
    """``os.environ`` with :data:`BIN` first on ``PATH``, for subprocesses running the installed tools."""
    return env_with_bin()


@pytest.fixture(scope="session")
def darshan_logs() -> Path:
    """PyDarshan's bundled example logs (skips when ``darshan`` is not installed)."""
    darshan = pytest.importorskip("darshan")
    return Path(darshan.__file__).parent / "examples" / "example_logs"


@pytest.fixture(scope="session")
def real_run_factory() -> Callable[..., tuple[Path, list[Path]]]:
    """:func:`make_real_run`, for tests that need a run of their own shape."""
    return make_real_run


@pytest.fixture(scope="session")
def dftracer_set(tmp_path_factory) -> Path:
    """Two ranks of generated DFTracer traces. Read-only: copy before writing into it."""
    return make_dftracer_set(tmp_path_factory.mktemp("dft") / "traces")


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> tuple[Path, list[Path]]:
    """``(run_dir, files)`` of one real TimeLogger + DFTracer run. Read-only: copy before writing into it."""
    return make_real_run(tmp_path_factory.mktemp("real"))


@pytest.fixture()
def run_copy(real_run, tmp_path) -> Path:
    """A writable copy of :func:`real_run`'s run directory, for tests that damage it."""
    dst = tmp_path / "run"
    shutil.copytree(real_run[0], dst)
    return dst


@pytest.fixture(scope="module")
def hvd_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank Horovod run (``mpiexec -n 2 timelogger run --horovod-timeline``) of :data:`HVD_STEPS`."""
    pytest.importorskip("horovod.tensorflow")
    tmp = tmp_path_factory.mktemp("hvdrun")
    run = tmp / "run"
    subprocess.run([mpiexec(), "-n", "2", str(BIN / "timelogger"), "run", "-o", str(run),
                    "--horovod-timeline", "--", sys.executable, str(HVD_STEPS)],
                   check=True, env=dict(env_with_bin(), TF_CPP_MIN_LOG_LEVEL="2"), timeout=300, capture_output=True)
    return run


@pytest.fixture(params=["C", "numpy"])
def sweeps(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The interval sweeps compiled (``trace_merge/_sweep.c``, which the install builds) or, as without a C compiler,
    numpy's."""
    from trace_merge import intervals

    if request.param == "C":
        assert intervals._sweep is not None, "pip install did not compile trace_merge/_sweep.c"
    else:
        monkeypatch.setattr(intervals, "_sweep", None)
    return request.param


@pytest.fixture(autouse=True)
def _one_logical_line_per_line(monkeypatch):
    """The CLI wraps its text at the terminal's width (100 without a terminal). Tests that read its lines read
    what they say, one logical line each, so the width is set past any line here; tests of the wrapping itself set
    COLUMNS (tests/test_cli.py)."""
    monkeypatch.setenv("COLUMNS", "100000")
