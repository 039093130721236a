"""TF profiler reader on real profiles made by the TensorFlow of the running environment.

The same file runs under TF 2.15 (.venv: no absolute time in xplane.pb -> anchor path) and TF 2.21
(.venv-latest: ``Task Environment`` plane -> its profile_start_time, marker as cross-check).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from trace_merge.errors import TraceInputError  # noqa: E402
from trace_merge.readers import detect, read_any, xplane  # noqa: E402

pytestmark = pytest.mark.tf

# A tiny tf.data + tf.function training loop profiled through TimeLogger.tf_profile, which writes the
# wire-format anchor (docs/wire-format.md, "TF 2.15 anchor marker") into the app file. A known 50 ms
# sleep runs inside a wall-clock window measured by the script and inside the TraceMe `sleep_marker`.
WORKLOAD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    import tensorflow as tf
    from timelogger import TimeLogger

    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    tl = TimeLogger(run, rank=0, world_size=1)
    ds = (tf.data.Dataset.range(48)
          .map(lambda x: tf.cast(x, tf.float32) * 2.0, num_parallel_calls=2)
          .batch(8).prefetch(1))
    w = tf.Variable(1.0)

    @tf.function
    def train_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(x * w)
        w.assign_sub(0.001 * tape.gradient(loss, w))
        return loss

    steps = []
    with tl.tf_profile(run / "tf" / "rank-0"):
        for i, x in enumerate(ds):
            s0 = time.time_ns()
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                train_step(x)
            steps.append([s0, time.time_ns()])
        p0 = time.time_ns()
        with tf.profiler.experimental.Trace("sleep_marker"):
            time.sleep(0.05)
        p1 = time.time_ns()
    tl.close()
    out.write_text(json.dumps({"sleep_phase": [p0, p1], "steps": steps, "tf_version": tf.__version__}))
    """
)


def tf_profile_anchors(run: Path) -> list:
    """The ``tf_profile`` metadata events of the run's app files (docs/wire-format.md)."""
    anchors = []
    for app in sorted((run / "app").glob("*.pfw")):
        for line in app.read_text().splitlines():
            if '"tf_profile"' in line:
                anchors.append(json.loads(line.rstrip(","))["args"])
    return anchors


def run_workload(tmp: Path, run: Path) -> dict:
    """Profile :data:`WORKLOAD` in a fresh interpreter (the profiler is process-global)."""
    script = tmp / "workload.py"
    script.write_text(WORKLOAD)
    out = tmp / "workload.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([sys.executable, str(script), str(run), str(out)], check=True, env=env, timeout=300,
                   capture_output=True)
    info = json.loads(out.read_text())
    (info["anchor"],) = tf_profile_anchors(run)
    return info


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("xplane")
    run = tmp / "run"
    info = run_workload(tmp, run)
    (pb,) = sorted(run.glob("tf/rank-0/plugins/profile/*/*.xplane.pb"))
    info["path"] = pb
    return info


def _tf_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_time_base_follows_tf_version(profile: dict) -> None:
    src = xplane.read(profile["path"], anchors=[profile["anchor"]])
    version = _tf_minor(profile["tf_version"])
    if version <= (2, 15):
        # TF 2.15 writes no absolute time: only the anchor can place the file.
        assert src.meta.time_base == "anchor"
        assert xplane.profile_start_ns(xplane.parse_xspace(profile["path"])) is None
    elif version >= (2, 21):
        assert src.meta.time_base == "task_environment"
        # The marker cross-checks the profile's own start time: the two agree within 1 ms.
        assert abs(src.meta.anchor_check_ns) < 1_000_000
    else:
        assert src.meta.time_base in ("anchor", "task_environment")
    assert src.warnings == []


def test_sleep_marker_lines_up_with_wall_clock(profile: dict) -> None:
    frame = xplane.read(profile["path"], anchors=[profile["anchor"]]).frame
    (row,) = frame[frame["name"] == "sleep_marker"].itertuples()
    p0, p1 = profile["sleep_phase"]
    assert abs(row.start_ns - p0) < 1_000_000
    assert abs(row.end_ns - p1) < 1_000_000
    assert row.dur_ns >= 50_000_000


def test_steps_and_classes(profile: dict) -> None:
    src = read_any(profile["path"], anchors=[profile["anchor"]])
    frame = src.frame
    assert src.kind == "xplane" and src.meta.rank == 0  # rank from tf/rank-0/
    assert set(frame["layer"].unique()) == {"framework"}
    train = frame[frame["name"] == "train"].sort_values("start_ns")
    assert train["step"].tolist() == list(range(len(profile["steps"])))
    # each TF step event lies inside the wall-clock window the app measured around it
    for (s0, s1), start, end in zip(profile["steps"], train["start_ns"], train["end_ns"]):
        assert s0 - 1_000_000 <= start and end <= s1 + 1_000_000
    cats = frame.groupby("name", observed=True)["cat"].agg(lambda c: set(c.astype(str)))
    assert cats["EagerLocalExecute: IteratorGetNext"] == {"wait"}
    assert cats["IteratorGetNextOp::DoCompute"] == {"wait"}
    assert "compute" in cats[[n for n in cats.index if "__inference_train_step" in n][0]]
    assert cats["EagerExecute"] == {"other", "compute"}  # wrappers of GetNext are not compute
    threads = src.meta.threads
    tf_data = frame[frame["tid"].map(lambda t: threads[t].startswith("tf_data"))]
    assert len(tf_data) and set(tf_data["cat"].astype(str)) == {"preprocess"}
    assert (frame["dur_ns"] >= 0).all() and (frame["end_ns"] == frame["start_ns"] + frame["dur_ns"]).all()
    assert set(frame["host"].astype(str)) == {socket.gethostname()}


def test_without_anchor(profile: dict) -> None:
    if _tf_minor(profile["tf_version"]) <= (2, 15):
        with pytest.raises(TraceInputError, match="no absolute time") as err:
            xplane.read(profile["path"])
        assert str(err.value).startswith(str(profile["path"]))
    else:
        src = xplane.read(profile["path"])
        assert src.meta.time_base == "task_environment"


def test_detect(profile: dict) -> None:
    assert detect(profile["path"]) == "xplane"


@pytest.mark.parametrize("cut", [0.5, 0.97])
def test_truncated_xplane(profile: dict, tmp_path: Path, cut: float) -> None:
    data = profile["path"].read_bytes()
    bad = tmp_path / "vm.xplane.pb"
    bad.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(TraceInputError, match="corrupt or truncated") as err:
        xplane.read(bad, anchors=[profile["anchor"]])
    assert str(err.value).startswith(str(bad))


def test_corrupt_and_empty_xplane(tmp_path: Path) -> None:
    bad = tmp_path / "junk.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff\xff\xffnot a protobuf")
    with pytest.raises(TraceInputError, match="corrupt or truncated"):
        xplane.read(bad)
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    with pytest.raises(TraceInputError, match="empty file"):
        xplane.read(empty)
