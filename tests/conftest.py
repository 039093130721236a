"""Shared fixtures and helpers: real inputs for the analysis/interface tests, made by the real tools.

pytest finds the fixtures here by itself (no imports in the test modules). The expensive ones are
session-scoped and read-only: tests that write into a run directory copy it first. A fixture whose tool
or optional package is missing skips the tests that use it; nothing here imports an optional package at
collection time. ``test_run_fixtures.py`` checks that the fixtures hold what the other tests rely on.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable

import pytest

#: the virtualenv's bin directory (console scripts, DFTracer tools, mpiexec)
BIN = Path(sys.executable).parent

#: A TimeLogger-instrumented "training" loop: per step a compute phase containing an io phase that reads one
#: whole file (bytes and file recorded), then a busy-wait standing in for compute.
TRAIN_SCRIPT = textwrap.dedent("""
    import sys, time
    from timelogger import default_logger
    tl = default_logger()
    files = sys.argv[2:]
    for epoch in range(int(sys.argv[1])):
        tl.set_epoch(epoch)
        for step, path in enumerate(files):
            tl.set_step(step)
            with tl.phase("Training Iteration", cat="compute"):
                with tl.phase("Load File", cat="io") as p:
                    with open(path, "rb") as fh:
                        data = fh.read()
                    p.update(bytes=len(data), file=path)
                t = time.perf_counter()
                while time.perf_counter() - t < 0.01:
                    pass
    tl.close()
""")


def _env_with_bin() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _need_tool(name: str) -> Path:
    exe = BIN / name
    if not exe.exists():
        pytest.skip(f"{name} not installed in {BIN}")
    return exe


def make_dftracer_set(out: Path, ranks: int = 2, epochs: int = 2, steps: int = 5) -> Path:
    """A multi-rank DFTracer trace set from ``dftracer_gen_fake_trace`` (``.pfw.gz`` per rank)."""
    exe = _need_tool("dftracer_gen_fake_trace")
    subprocess.run([str(exe), "-o", str(out), "-p", str(ranks), "-H", "1",
                    "-e", str(epochs), "-s", str(steps)], check=True, capture_output=True, env=_env_with_bin())
    return out


def make_real_run(root: Path, sizes: tuple[int, ...] = (3_000_000, 5_000_000), epochs: int = 2,
                  posix: bool = True, ranks: int = 1) -> tuple[Path, list[Path]]:
    """A real run directory: ``timelogger run`` (with the DFTracer preload when ``posix``) around
    :data:`TRAIN_SCRIPT` reading files of the given sizes, under ``mpiexec -n ranks`` when ``ranks > 1``
    (every rank reads every file).

    ``DFTRACER_INC_METADATA=1`` makes the preload record each call's arguments (``ret`` = bytes read).
    """
    if posix and importlib.util.find_spec("dftracer") is None:
        pytest.skip("dftracer (the POSIX preload) is not installed")
    if ranks > 1:
        _need_tool("mpiexec")
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    files = []
    for i, size in enumerate(sizes):
        p = data / f"sample-{i}.bin"
        p.write_bytes(os.urandom(size))
        files.append(p)
    script = root / "train.py"
    script.write_text(TRAIN_SCRIPT)
    run_dir = root / "run"
    env = _env_with_bin()
    env["DFTRACER_INC_METADATA"] = "1"
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] if ranks > 1 else []
    cmd += [str(BIN / "timelogger"), "run", "-o", str(run_dir)]
    if posix:
        cmd += ["--posix", "--posix-filter", str(data)]
    cmd += ["--", sys.executable, str(script), str(epochs), *map(str, files)]
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=root, timeout=120)
    return run_dir, files


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The virtualenv's bin directory (:data:`BIN`)."""
    return BIN


@pytest.fixture()
def tool_env() -> dict[str, str]:
    """``os.environ`` with :data:`BIN` first on ``PATH``, for subprocesses running the installed tools."""
    return _env_with_bin()


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
