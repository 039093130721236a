"""Zero-code capture: TF2 scripts with no TimeLogger code under ``timelogger run`` get step cycles and a verdict.

``tests/workloads/plain_tf.py`` is a custom loop (``for batch in dataset`` + a ``@tf.function`` step) or a Keras
``fit``, with its own wall-clock truth (time blocked in ``next()`` and time in the step, from the first step's end to
the last step's end). The verdict must agree with it within 10 points, input-bound and compute-bound, with and
without ``--tf-profile``; the program's own TimeLogger code wins over the hooks; a run whose hooks saw nothing says
so at its end and in the summary.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from tests.helpers.launch import WORKLOADS, launch_env  # noqa: E402
from tests.helpers.launch import launch as _launch  # noqa: E402
from tests.helpers.tools import REPO  # noqa: E402
from trace_merge.analysis import verdict_label  # noqa: E402
from trace_merge.run import Run  # noqa: E402

pytestmark = [pytest.mark.tf, pytest.mark.zerocode]

BIN = Path(sys.executable).parent
_env = launch_env


def _plain(tmp_path: Path, *args: str, options: tuple = ()) -> tuple[Run, dict, subprocess.CompletedProcess]:
    run_dir = tmp_path / "run"
    p = _launch(run_dir, sys.executable, str(WORKLOADS / "plain_tf.py"), *args, options=options)
    truth = json.loads(next(x for x in p.stdout.splitlines() if x.startswith("TRUTH "))[6:])
    return Run.open(run_dir), truth, p


def _app_names(run: Run) -> set:
    app = run.frame[run.frame["layer"] == "app"]
    return set(app["name"].astype(str))


CUSTOM = {"input": ("--gen-ms", "16", "--step-ms", "20"),
          "compute": ("--gen-ms", "1", "--step-ms", "40", "--prefetch")}


@pytest.mark.parametrize("kind", ["input", "compute"])
def test_unmodified_custom_loop_verdict_matches_its_own_clock(tmp_path, kind):
    run, truth, p = _plain(tmp_path, "--loop", "custom", *CUSTOM[kind])
    assert "hooks saw tf.data x26, tf.function x24; 24 step(s), 26 fetch(es), 2 epoch end(s)" in p.stderr
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["layers"]["hooks"] is True
    v = run.verdict()
    assert abs(v.input_pct - truth["input_pct"]) <= 10 and abs(v.au_pct - truth["au_pct"]) <= 10, (v, truth)
    assert v.label == verdict_label(truth["input_pct"]), (v, truth)
    assert v.label == ("highly input-bound" if kind == "input" else "not input-bound")
    assert v.basis == "app" and v.cycles_total == 24
    # the hooks' intervals, numbered into steps and epochs by the hooks: 12 steps in each of 2 epochs
    assert _app_names(run) == {"Fetch Batch", "Step train_step"}
    marks = run.step_series()
    assert marks.groupby("epoch").size().to_dict() == {0: 12, 1: 12}
    app = run.frame[run.frame["layer"] == "app"]
    fetches = app[app["name"].astype(str) == "Fetch Batch"]
    assert len(fetches) == 26  # 12 batches and the exhausted fetch, per epoch


@pytest.mark.parametrize("kind,profile", [("input", False), ("input", True), ("compute", False)])
def test_unmodified_keras_fit_verdict_matches_its_own_clock(tmp_path, kind, profile):
    args = ("--gen-ms", "16", "--step-ms", "20") if kind == "input" else ("--gen-ms", "0", "--step-ms", "40")
    run, truth, p = _plain(tmp_path, "--loop", "keras", *args, options=("--tf-profile",) if profile else ())
    # without --tf-profile the hooks profile a few steps: only a profile sees the fetch inside a Keras batch
    assert ("keras profile window" in p.stderr) is not profile, p.stderr[-2000:]
    v = run.verdict()
    assert v.basis == "framework", v
    assert abs(v.input_pct - truth["input_pct"]) <= 10 and abs(v.au_pct - truth["au_pct"]) <= 10, (v, truth)
    assert v.label == verdict_label(truth["input_pct"])
    # the default window covers steps 1:21; the cycle in which the profiler stops (Keras 3 stops it later in the
    # batch than Keras 2) may be covered for half its length, and then counts too
    assert v.cycles_total == 24 and (v.cycles == 24 if profile else v.cycles in (20, 21)), v
    assert "Training Iteration" in _app_names(run)  # the callback the hooks added
    assert not any(n.startswith("Step ") or n == "Fetch Batch" for n in _app_names(run))  # fit records itself


def test_custom_loop_tf_profile_window_follows_the_hooked_steps(tmp_path):
    run, truth, p = _plain(tmp_path, "--loop", "custom", *CUSTOM["input"], options=("--tf-profile=3:9",))
    assert list((tmp_path / "run" / "tf" / "rank-0").rglob("*.xplane.pb")), p.stderr[-2000:]
    v = run.verdict()
    assert abs(v.input_pct - truth["input_pct"]) <= 10, (v, truth)
    assert v.basis == "app" and any("6 of them inside a TF profile window" in n for n in v.notes), v.notes


def test_a_loop_that_idles_between_steps_is_an_idle_accelerator_not_unknown(tmp_path):
    """Python between the steps (30 ms after each 5 ms step) is neither input nor compute: the accelerator idles,
    and the verdict says so, naming where the unexplained time is."""
    run, truth, _ = _plain(tmp_path, "--loop", "custom", "--gen-ms", "1", "--step-ms", "5", "--host-ms", "30",
                           "--prefetch")
    v = run.verdict()
    assert v.label == "accelerator idle", v
    assert abs(v.au_pct - truth["au_pct"]) <= 10 and abs(v.input_pct - truth["input_pct"]) <= 10, (v, truth)
    assert v.unexplained_gap_pct > 50  # outside every app phase: the loop's own Python
    assert any("idles" in n and "outside every app phase" in n for n in v.notes), v.notes
    assert run.findings()[0].key == "accelerator_idle"


def test_the_programs_own_timelogger_code_wins_over_the_hooks(tmp_path):
    """The README's loop (its own fetch, step and epoch marks) under the launcher: the hooks record nothing."""
    run_dir = tmp_path / "run"
    _launch(run_dir, sys.executable, str(WORKLOADS / "tfdata_guide.py"), str(run_dir), "--instrument", "readme")
    run = Run.open(run_dir)
    assert _app_names(run) == {"Call to Next Batch", "Training Iteration"}
    assert len(list((run_dir / "app").iterdir())) == 1  # no second logger made by the hooks


def test_no_hooks_switches_them_off_and_the_manifest_says_so(tmp_path):
    run_dir = tmp_path / "run"
    p = _launch(run_dir, sys.executable, str(WORKLOADS / "plain_tf.py"), "--loop", "custom", "--samples", "2",
                options=("--no-hooks",))
    assert "hooks saw" not in p.stderr
    assert json.loads((run_dir / "manifest.json").read_text())["layers"]["hooks"] is False
    assert not list((run_dir / "app").glob("*.pfw")) if (run_dir / "app").exists() else True


def test_hooks_that_saw_nothing_say_so_at_the_end_and_in_the_summary(tmp_path):
    run_dir = tmp_path / "run"
    # a second long: the CPU sampler beside it has started (a Python process) and sampled it
    p = _launch(run_dir, sys.executable, "-c", "import time; time.sleep(1); print('no training here')",
                options=("--tf-profile=2:5",))
    assert "timelogger: hooks saw no framework loop" in p.stderr
    assert "--tf-profile: nothing profiled in rank 0" in p.stderr and "2:5" in p.stderr
    s = subprocess.run([str(BIN / "trace-merge"), "summary", str(run_dir)], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert "hooks saw no framework loop" in s.stderr and "nothing profiled" in s.stderr
    # what was captured is still summarised: the program's CPU (the cpu layer), and no step, said so
    assert s.returncode == 0 and "layers: cpu" in s.stdout and "verdict: unknown" in s.stdout, s.stdout


def test_a_sitecustomize_of_the_program_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("MARK = 'mine'\n")
    run_dir = tmp_path / "run"
    p = _launch(run_dir, sys.executable, "-c", "import sitecustomize; print('MARK', sitecustomize.MARK)",
                env=_env(PYTHONPATH=os.pathsep.join((str(site), str(REPO)))))
    assert "MARK mine" in p.stdout
