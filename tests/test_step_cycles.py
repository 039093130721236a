"""Step cycles on a workload we did not write: the `tf.data` guide's naive pipeline, instrumented the ways users do.

The same workload (``tests/workloads/tfdata_guide.py``: a generator that sleeps per sample, a step that sleeps) is
instrumented three ways -- the README's custom loop (fetch timed outside the step phase), one step phase around
fetch and step, Keras ``fit`` with ``TimeLoggerCallback`` -- with and without a TF profile window over the second
epoch. Each run prints its own wall-clock truth (the loop's waits and the step sleeps, on the step-cycle
definition, measured without TimeLogger); the verdict must agree with it within 10 points whatever the
instrumentation. Keras without a profile cannot see the wait inside its batches: the verdict says so
("unknown", a blind spot) instead of guessing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from tests.helpers.tools import REPO, clean_env  # noqa: E402
from trace_merge.analysis import verdict_label  # noqa: E402
from trace_merge.run import Run  # noqa: E402

pytestmark = pytest.mark.tf

WORKLOAD = Path(__file__).resolve().parent / "workloads" / "tfdata_guide.py"


def _run(tmp_path: Path, name: str, *args: str) -> tuple[Path, dict]:
    run_dir = tmp_path / name
    env = clean_env(PYTHONPATH=os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x))
    p = subprocess.run([sys.executable, str(WORKLOAD), str(run_dir), *args], env=env, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, f"rc={p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    truth = json.loads(next(x for x in p.stdout.splitlines() if x.startswith("TRUTH "))[6:])
    return run_dir, truth


@pytest.mark.parametrize("profile", [False, True], ids=["no-profile", "profile"])
@pytest.mark.parametrize("instrument", ["readme", "step-phase", "keras"])
def test_input_bound_pipeline_same_verdict_however_instrumented(tmp_path, instrument, profile):
    # sleeps long against Keras' own per-step work (a few ms), which the truth cannot time from Python
    run_dir, truth = _run(tmp_path, "run", "--instrument", instrument, "--gen-ms", "16", "--step-ms", "20",
                          *(["--profile"] if profile else []))
    assert truth["input_pct"] >= 25  # the workload is what it claims: the loop waits a third of its time or more
    run = Run.open(run_dir)
    v = run.verdict()
    if instrument == "keras" and not profile:
        assert v.label == "unknown" and v.input_pct is None and v.au_pct is None
        assert any(n.startswith("blind spot") and "--tf-profile" in n for n in v.notes), v.notes
        return
    # against the script's clock over the cycles the verdict counts (Keras with a profile: the profiled epoch's)
    ref = truth["profiled"] if v.cycles < v.cycles_total else truth
    assert abs(v.input_pct - ref["input_pct"]) <= 10, (v, ref)
    assert v.label == verdict_label(ref["input_pct"]) == "highly input-bound"
    assert abs(v.au_pct - ref["au_pct"]) <= 10, (v, ref)
    assert v.input_pct + v.au_pct <= 100 + 1e-9
    # the framework is the basis where a profile looked inside most counted cycles (Keras: only those count); a
    # profile of one epoch of two is named as coverage, not as the basis
    assert v.basis == ("framework" if profile and instrument == "keras" else "app")
    assert any(("of them inside a TF profile window" if profile else "none inside a TF profile window") in n
               for n in v.notes), v.notes
    # the evidence and its coverage are named: cycles counted of cycles seen
    assert v.cycles_total == 24 and v.cycles == (12 if profile and instrument == "keras" else 24)
    assert any(f"{v.cycles} of {v.cycles_total} cycles counted" in n for n in v.notes), v.notes
    found = [f.key for f in run.findings()]
    # the first finding of a run nobody here wrote: input-bound, and no file-system layer traced to say why
    assert found[0] == "input_bound_no_fs_layer", found
    if profile:
        lay = run.layered_breakdown()
        assert (lay["not_observed_s"] > 0).any() and (lay["observed_calls"] < lay["calls"]).any()


@pytest.mark.parametrize("instrument", ["readme", "step-phase"])
def test_compute_bound_variant_is_not_input_bound(tmp_path, instrument):
    run_dir, truth = _run(tmp_path, "run", "--instrument", instrument, "--gen-ms", "0", "--step-ms", "100")
    v = Run.open(run_dir).verdict()
    assert truth["input_pct"] < 5
    assert v.label == "not input-bound" and abs(v.input_pct - truth["input_pct"]) <= 10
    assert v.au_pct >= 80 and abs(v.au_pct - truth["au_pct"]) <= 10


def _launch(tmp_path: Path, spec: str) -> tuple[Path, subprocess.CompletedProcess]:
    run_dir = tmp_path / "launched"
    env = clean_env(PYTHONPATH=os.pathsep.join(x for x in (str(REPO), os.environ.get("PYTHONPATH", "")) if x),
                    PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    p = subprocess.run([sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), f"--tf-profile={spec}", "--",
                        sys.executable, str(WORKLOAD), str(run_dir), "--instrument", "readme"],
                       env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    return run_dir, p


def test_launcher_tf_profile_opens_a_window_for_a_custom_loop(tmp_path):
    """``--tf-profile=3:9`` on the README loop (no Keras): the window opens at set_step(3) and closes at step 9."""
    run_dir, p = _launch(tmp_path, "3:9")
    assert list((run_dir / "tf" / "rank-0").rglob("*.xplane.pb")), p.stderr[-2000:]
    run = Run.open(run_dir)
    lay = run.layered_breakdown()
    steps = lay[lay["phase"] == "Training Iteration"]
    assert int(steps["observed_calls"].sum()) == 6 and int(steps["calls"].sum()) == 24
    v = run.verdict()  # 6 of 24 cycles profiled: coverage in the notes, not the basis
    assert v.basis == "app" and any("6 of them inside a TF profile window" in n for n in v.notes), v.notes


def test_launcher_tf_profile_says_why_nothing_was_profiled(tmp_path):
    """A window no step of the loop reaches (its steps restart at 0 each epoch): said on stderr, not silent."""
    run_dir, p = _launch(tmp_path, "40:50")
    assert "--tf-profile: nothing profiled in rank 0" in p.stderr and "40:50" in p.stderr
    assert not list(run_dir.glob("tf/rank-0/**/*.xplane.pb"))
