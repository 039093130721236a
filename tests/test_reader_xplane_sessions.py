"""Two ``tl.tf_profile`` sessions of one rank into the same logdir: each xplane.pb gets its own anchor.

On TF 2.15 both files depend on picking the right ``tf_profile`` metadata (same ``logdir``): the
session that started last before the file was written.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from trace_merge.merge import merge_path  # noqa: E402

pytestmark = pytest.mark.tf

TWO_SESSIONS = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import tensorflow as tf
    from timelogger import TimeLogger

    run = Path(sys.argv[1])
    tl = TimeLogger(run, rank=0, world_size=1)
    windows = []
    for session in range(2):
        with tl.tf_profile():
            with tl.phase("sleep phase", cat="other"):
                t0 = time.time_ns()
                with tf.profiler.experimental.Trace("sleep_marker", session=session):
                    time.sleep(0.03)
                windows.append([t0, time.time_ns()])
        time.sleep(1.1)  # profile directories are named by the second
    tl.close()
    (run / "windows.json").write_text(json.dumps(windows))
    """
)


@pytest.fixture(scope="module")
def two_sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sessions")
    script = tmp / "two.py"
    script.write_text(TWO_SESSIONS)
    run = tmp / "run"
    subprocess.run([sys.executable, str(script), str(run)], check=True, timeout=300, capture_output=True,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return run


def test_each_session_on_its_own_anchor(two_sessions: Path) -> None:
    assert len(list(two_sessions.glob("tf/rank-0/plugins/profile/*/*.xplane.pb"))) == 2
    res = merge_path(two_sessions)
    assert res.warnings == []
    f = res.frame
    markers = f[(f["layer"] == "framework") & (f["name"] == "sleep_marker")].sort_values("start_ns")
    phases = f[(f["layer"] == "app") & (f["name"] == "sleep phase")].sort_values("start_ns")
    windows = json.loads((two_sessions / "windows.json").read_text())
    assert len(markers) == len(phases) == len(windows) == 2
    for session, (m, p, (w0, w1)) in enumerate(zip(markers.itertuples(), phases.itertuples(), windows)):
        assert json.loads(m.args)["session"] == session
        assert abs(m.start_ns - p.start_ns) < 1_000_000 and abs(m.end_ns - p.end_ns) < 1_000_000
        assert w0 - 1_000_000 <= m.start_ns and m.end_ns <= w1 + 1_000_000
