"""A run that ended early says so in the summary's first lines, per rank: an uncaught exception, SIGINT, SIGTERM,
a kill -9; a clean run and a reader pool's worker stopped by its parent say nothing."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.tools import REPO, clean_env
from trace_merge.cli import main as trace_merge

LOOP = textwrap.dedent('''
    import os, signal, sys, time
    from timelogger import TimeLogger
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even when started in background
    tl = TimeLogger(sys.argv[1], rank=int(sys.argv[3]), world_size=2)
    for step in range(3):
        tl.set_step(step)
        with tl.phase("Training Iteration", cat="compute"):
            time.sleep(0.005)
    tl.flush()
    how = sys.argv[2]
    if how == "exception":
        raise RuntimeError("boom")
    if how in ("SIGINT", "SIGTERM", "SIGKILL"):
        os.kill(os.getpid(), getattr(signal, how))
        time.sleep(5)
''')


def _run(run_dir: Path, how: str, rank: int) -> None:
    subprocess.run([sys.executable, "-c", LOOP, str(run_dir), how, str(rank)], env=clean_env(PYTHONPATH=str(REPO)),
                   capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("how,why", [("exception", "uncaught RuntimeError"),
                                     ("SIGINT", "uncaught KeyboardInterrupt (SIGINT)"),
                                     ("SIGTERM", "stopped by SIGTERM"),
                                     ("SIGKILL", "no close record (killed, crashed, or still running)")])
def test_summary_first_lines_name_the_rank_that_ended_early(tmp_path, capsys, how, why):
    run_dir = tmp_path / "run"
    _run(run_dir, "clean", 0)
    _run(run_dir, how, 1)
    assert trace_merge(["summary", str(run_dir)]) == 0
    head = capsys.readouterr().out.splitlines()[:3]
    early = [line for line in head if "ended early" in line]
    assert len(early) == 1 and early[0].startswith(f"rank 1 ended early: {why}"), head
    assert head.index(early[0]) < next(i for i, line in enumerate(head) if line.startswith("verdict:"))


def test_a_clean_run_says_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _run(run_dir, "clean", 0)
    _run(run_dir, "clean", 1)
    assert trace_merge(["summary", str(run_dir)]) == 0
    assert "ended early" not in capsys.readouterr().out


def test_a_file_cut_in_half_mid_line_is_flagged(tmp_path, capsys):
    """A copy cut short (a full disk, a half-copied file): no close record and a half line; named in the first
    lines, never accepted silently."""
    run_dir = tmp_path / "run"
    _run(run_dir, "clean", 0)
    _run(run_dir, "clean", 1)
    (path,) = (run_dir / "app").glob("rank-1-*.pfw")
    text = path.read_bytes()
    path.write_bytes(text[: len(text) // 2 + 7])
    assert trace_merge(["summary", str(run_dir)]) == 0
    head = capsys.readouterr().out.splitlines()[:3]
    assert any(line.startswith("rank 1 ended early: no close record") for line in head), head
