"""Real inputs for the analysis/interface tests, made by the real tools in ``tmp_path``.

Imported by ``test_analysis*.py``, ``test_run*.py``, ``test_cli*.py``, ``test_report*.py``, ``test_perfetto*.py``
(pytest puts ``tests/`` on ``sys.path``). The checks at the bottom make sure the fixtures themselves hold what the
other tests rely on.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
DARSHAN_LOGS = Path(__import__("darshan").__file__).parent / "examples" / "example_logs"

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


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def make_dftracer_set(out: Path, ranks: int = 2, epochs: int = 2, steps: int = 5) -> Path:
    """A multi-rank DFTracer trace set from ``dftracer_gen_fake_trace`` (``.pfw.gz`` per rank)."""
    subprocess.run([str(BIN / "dftracer_gen_fake_trace"), "-o", str(out), "-p", str(ranks), "-H", "1",
                    "-e", str(epochs), "-s", str(steps)], check=True, capture_output=True, env=tool_env())
    return out


def make_real_run(root: Path, sizes: tuple[int, ...] = (3_000_000, 5_000_000), epochs: int = 2,
                  posix: bool = True, ranks: int = 1) -> tuple[Path, list[Path]]:
    """A real run directory: ``timelogger run`` (with the DFTracer preload when ``posix``) around
    :data:`TRAIN_SCRIPT` reading files of the given sizes, under ``mpiexec -n ranks`` when ``ranks > 1``
    (every rank reads every file).

    ``DFTRACER_INC_METADATA=1`` makes the preload record each call's arguments (``ret`` = bytes read).
    """
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
    env = tool_env()
    env["DFTRACER_INC_METADATA"] = "1"
    cmd = [str(BIN / "mpiexec"), "-n", str(ranks)] if ranks > 1 else []
    cmd += [str(BIN / "timelogger"), "run", "-o", str(run_dir)]
    if posix:
        cmd += ["--posix", "--posix-filter", str(data)]
    cmd += ["--", sys.executable, str(script), str(epochs), *map(str, files)]
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=root, timeout=120)
    return run_dir, files


@pytest.fixture(scope="module")
def dftracer_set(tmp_path_factory) -> Path:
    return make_dftracer_set(tmp_path_factory.mktemp("dft") / "traces")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> tuple[Path, list[Path]]:
    return make_real_run(tmp_path_factory.mktemp("real"))


def test_fixture_real_run_has_app_and_posix_layers(real_run):
    run_dir, files = real_run
    assert (run_dir / "manifest.json").is_file()
    assert len(list((run_dir / "app").glob("*.pfw"))) == 1
    posix = list((run_dir / "posix").glob("*.pfw*"))
    assert len(posix) == 1
    with gzip.open(posix[0], "rt") if posix[0].name.endswith(".gz") else open(posix[0]) as fh:
        reads = [json.loads(line) for line in fh if '"name":"read"' in line]
    assert sum(r["args"]["ret"] for r in reads) == 2 * sum(f.stat().st_size for f in files)


def test_fixture_dftracer_set_has_one_file_per_rank(dftracer_set):
    assert sorted(p.name for p in dftracer_set.iterdir()) == ["rank_0.pfw.gz", "rank_1.pfw.gz"]
