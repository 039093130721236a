"""Building real inputs with the real tools: run directories, DFTracer trace sets, data files."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.tools import BIN, env_with_bin, need_tool

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

#: the Horovod workload: by default 4 steps of 10 ms and an allreduce on each rank (options add a straggler)
HVD_STEPS = Path(__file__).resolve().parents[1] / "workloads" / "hvd_steps.py"


def make_dftracer_set(out: Path, ranks: int = 2, epochs: int = 2, steps: int = 5) -> Path:
    """A multi-rank DFTracer trace set from ``dftracer_gen_fake_trace`` (``.pfw.gz`` per rank)."""
    exe = need_tool("dftracer_gen_fake_trace")
    subprocess.run([str(exe), "-o", str(out), "-p", str(ranks), "-H", "1",
                    "-e", str(epochs), "-s", str(steps)], check=True, capture_output=True, env=env_with_bin())
    return out


def make_real_run(root: Path, sizes: tuple[int, ...] = (3_000_000, 5_000_000), epochs: int = 2,
                  posix: bool = True, ranks: int = 1, cpu: bool = False) -> tuple[Path, list[Path]]:
    """A real run directory: ``timelogger run`` (with the DFTracer preload when ``posix``) around
    :data:`TRAIN_SCRIPT` reading files of the given sizes, under ``mpiexec -n ranks`` when ``ranks > 1``
    (every rank reads every file). Without the cpu layer unless ``cpu``: its rows are samples, as many as the
    run's length allows, and the tests of this run count rows (tests/test_cpu_layer.py tests that layer).

    ``DFTRACER_INC_METADATA=1`` makes the preload record each call's arguments (``ret`` = bytes read).
    """
    if posix and importlib.util.find_spec("dftracer") is None:
        pytest.skip("dftracer (the POSIX preload) is not installed")
    if ranks > 1:
        need_tool("mpiexec")
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
    env = env_with_bin()
    env["DFTRACER_INC_METADATA"] = "1"
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] if ranks > 1 else []
    cmd += [str(BIN / "timelogger"), "run", "-o", str(run_dir)]
    if posix:
        cmd += ["--posix", "--posix-filter", str(data)]
    if not cpu:
        cmd += ["--no-cpu"]
    cmd += ["--", sys.executable, str(script), str(epochs), *map(str, files)]
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=root, timeout=120)
    return run_dir, files


def make_data(data: Path, n: int = 3, size: int = 1 << 18) -> None:
    data.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (data / f"f{i}.bin").write_bytes(os.urandom(size))


def preload_env(log_prefix: Path, data_dir: Path) -> dict:
    lib = Path(sys.executable).parents[1] / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    so = lib / "site-packages" / "dftracer" / "lib64" / "libdftracer_preload.so"
    if not so.exists():
        pytest.skip(f"no DFTracer preload library at {so}")
    return dict(os.environ, LD_PRELOAD=str(so), DFTRACER_ENABLE="1", DFTRACER_INIT="PRELOAD",
                DFTRACER_LOG_FILE=str(log_prefix), DFTRACER_DATA_DIR=str(data_dir), TF_CPP_MIN_LOG_LEVEL="2")


def sources_only(run_dir: Path, dst: Path) -> Path:
    """A copy of a run without its merge outputs (so that opening it merges the sources)."""
    shutil.copytree(run_dir, dst, ignore=shutil.ignore_patterns("merged.parquet", "counters.parquet",
                                                                  "merge_info.json", "report.html"))
    return dst
