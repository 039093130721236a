"""merge_path / write_merged on a real run directory: TimeLogger app layer, TF profile, DFTracer POSIX.

One TF training loop (tf.data with a numpy_function reader, tf.function step) runs inside TimeLogger
phases with ``tl.tf_profile`` under the DFTracer preload. The same file runs under TF 2.15 (anchor time
base) and TF 2.21 (Task Environment).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("tensorflow")

from tests.helpers.runs import make_data, preload_env  # noqa: E402
from tests.helpers.traces import shift_dftracer_trace  # noqa: E402
from trace_merge.errors import OutputExistsError, TraceInputError  # noqa: E402
from trace_merge.merge import merge_path, read_merged, write_merged  # noqa: E402
from trace_merge.schema import COUNTER_DTYPES, FRAME_DTYPES  # noqa: E402

pytestmark = pytest.mark.tf

TRAIN_LOOP = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    import tensorflow as tf
    from timelogger import TimeLogger

    run, data = Path(sys.argv[1]), Path(sys.argv[2])
    files = sorted(str(p) for p in data.glob("*.bin"))
    tl = TimeLogger(run, rank=0, world_size=1)

    def load(i):
        with tl.phase("Load File", cat="io") as p:
            with open(files[int(i) % len(files)], "rb") as fh:
                b = fh.read()
            p.update(bytes=len(b))
        return np.frombuffer(b, dtype=np.float32)[:8]

    ds = tf.data.Dataset.range(6).map(lambda i: tf.numpy_function(load, [i], tf.float32)).batch(2)
    w = tf.Variable(1.0)

    @tf.function
    def train_step(x):
        return tf.reduce_sum(x * w)

    with tl.tf_profile():  # default logdir: <run>/tf/rank-0
        with tl.phase("Train Loop"):
            tl.set_epoch(0)
            it = iter(ds)
            for s in range(3):
                tl.set_step(s)
                with tl.phase("Training Iteration", cat="compute"):
                    x = next(it)
                    with tf.profiler.experimental.Trace("train", step_num=s, _r=1):
                        train_step(x)
            tl.set_step(None)
            with tl.phase("sleep phase", cat="io"):
                with tf.profiler.experimental.Trace("sleep_marker"):
                    with open(files[0], "rb") as fh:
                        fh.read()
                    time.sleep(0.05)
                    with open(files[1], "rb") as fh:
                        fh.read()
    tl.close()
    """
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("merge")
    run, data = tmp / "run", tmp / "data"
    make_data(data, size=1 << 20)
    (run / "posix").mkdir(parents=True)
    script = tmp / "train_loop.py"
    script.write_text(TRAIN_LOOP)
    subprocess.run([sys.executable, str(script), str(run), str(data)], check=True, timeout=300,
                   env=preload_env(run / "posix" / "trace", data), capture_output=True)
    return run


@pytest.fixture(scope="module")
def merged(run_dir: Path):
    return merge_path(run_dir)


def merged_root(res) -> Path:
    (app,) = [Path(p) for p in res.sources if p.endswith(".pfw")]
    return app.parent.parent


def copy_run(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest, ignore=shutil.ignore_patterns("merged.parquet", "counters.parquet",
                                                                  "merge_info.json"))
    return dest


def test_run_dir_has_every_layer(merged) -> None:
    f = merged.frame
    assert merged.warnings == []
    assert set(f["layer"].astype(str)) == {"app", "framework", "posix"}
    assert sorted(Path(p).relative_to(merged_root(merged)).parts[0] for p in merged.sources) == [
        "app", "posix", "tf"]
    assert list(f.columns) == list(FRAME_DTYPES)
    assert {c: str(t) for c, t in f.dtypes.items()} == {c: str(pd.Series(dtype=t).dtype)
                                                        for c, t in FRAME_DTYPES.items()}
    assert f["start_ns"].is_monotonic_increasing
    assert (f["rank"] == 0).all(), "POSIX rows mapped to rank 0 by pid; framework from tf/rank-0"
    # TF train steps vs app Training Iteration: all three checked, none outside by more than 1 ms
    assert merged.residual.checked == 3 and merged.residual.outside == 0
    assert merged.residual.max_outside_ns < 1_000_000


def test_posix_reads_get_step_of_their_iteration(merged) -> None:
    f = merged.frame
    loads = f[(f["layer"] == "app") & (f["name"] == "Load File") & f["step"].notna()]
    px = f[f["layer"] == "posix"]
    assert len(loads) >= 4
    for ld in loads.itertuples():
        inside = px[(px["start_ns"] >= ld.start_ns) & (px["end_ns"] <= ld.end_ns) & (px["tid"] == ld.tid)]
        assert len(inside), f"no POSIX rows inside Load File at {ld.start_ns}"
        assert inside["step"].fillna(-1).tolist() == [ld.step] * len(inside)  # <NA> must fail
        assert inside["epoch"].fillna(-1).tolist() == [ld.epoch] * len(inside)
        assert (inside["rank"] == 0).all()


def test_sleep_phase_lines_up_across_layers(merged) -> None:
    """The key alignment check: one 50 ms sleep seen by the app, the TF profiler and DFTracer."""
    f = merged.frame
    (phase,) = f[(f["layer"] == "app") & (f["name"] == "sleep phase")].itertuples()
    (marker,) = f[(f["layer"] == "framework") & (f["name"] == "sleep_marker")].itertuples()
    assert abs(marker.start_ns - phase.start_ns) < 1_000_000
    assert abs(marker.end_ns - phase.end_ns) < 1_000_000
    px = f[(f["layer"] == "posix") & (f["tid"] == phase.tid)
           & (f["start_ns"] >= phase.start_ns - 1_000_000) & (f["end_ns"] <= phase.end_ns + 1_000_000)]
    opens = px[px["name"].astype(str).str.startswith("open")]
    assert len(opens) == 2
    assert 0 <= opens["start_ns"].min() - phase.start_ns < 1_000_000
    assert 0 <= phase.end_ns - px["end_ns"].max() < 1_000_000
    # the two opens are separated by the 50 ms sleep, all within the app's phase
    gap = opens["start_ns"].max() - opens["start_ns"].min()
    assert 50_000_000 <= gap < phase.dur_ns


def test_write_merged_round_trip(merged, run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    paths = write_merged(merged, out)
    assert sorted(p.name for p in paths.values()) == ["counters.parquet", "merge_info.json", "merged.parquet"]
    back = pd.read_parquet(out / "merged.parquet")  # plain pandas: dtypes come back by themselves
    pd.testing.assert_frame_equal(back, merged.frame)
    counters = pd.read_parquet(out / "counters.parquet")
    assert {c: str(t) for c, t in counters.dtypes.items()} == {c: str(pd.Series(dtype=t).dtype)
                                                               for c, t in COUNTER_DTYPES.items()}
    frame, _, info = read_merged(out)
    pd.testing.assert_frame_equal(frame, merged.frame)
    assert info.rows_per_layer == merged.rows_per_layer() and info.rows == len(merged.frame)
    assert info.residual == merged.residual and info.sources == merged.sources
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "no temporary files left"
    before = (out / "merged.parquet").stat().st_mtime_ns
    with pytest.raises(OutputExistsError, match="already exists"):
        write_merged(merged, out)
    assert (out / "merged.parquet").stat().st_mtime_ns == before
    write_merged(merged, out, force=True)
    json.loads((out / "merge_info.json").read_text())


def test_corrupt_profile_among_others_is_skipped(run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    (good,) = run.glob("tf/rank-0/plugins/profile/*/*.xplane.pb")
    bad = run / "tf" / "rank-1" / "plugins" / "profile" / "2026_01_01_00_00_00" / "vm.xplane.pb"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(good.read_bytes()[:2000])  # a profile cut short (job killed while writing)
    res = merge_path(run)
    assert len(res.warnings) == 1 and res.warnings[0].startswith(f"{bad}: ")
    assert "corrupt or truncated" in res.warnings[0]
    assert str(bad) not in res.sources and len(res.frame) == len(merge_path(run_dir).frame)


def test_source_from_another_day_is_left_out(run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    (trace,) = run.glob("posix/*.pfw.gz")
    moved = shift_dftracer_trace(trace, run / "posix" / "node2-trace.pfw.gz", hours=-26)
    res = merge_path(run)
    assert [w for w in res.warnings if "h from the app layer" in w] == [
        f"{moved}: timestamps are -26.0 h from the app layer's (a different run or a wrong clock); "
        "left out of the merge"]
    assert str(moved) not in res.sources and str(trace) in res.sources
    assert len(res.frame) == len(merge_path(run_dir).frame)


def test_empty_run_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceInputError, match="no trace files found") as err:
        merge_path(tmp_path)
    assert str(err.value).startswith(str(tmp_path))
    (tmp_path / "app").mkdir()
    with pytest.raises(TraceInputError, match=r"looked for app/\*\.pfw"):
        merge_path(tmp_path)


def test_loose_inputs(run_dir: Path, tmp_path: Path) -> None:
    # a bare directory of DFTracer traces: no app layer, so no rank mapping (rank -1 stays)
    posix = tmp_path / "posix_only"
    shutil.copytree(run_dir / "posix", posix)
    res = merge_path(posix)
    assert set(res.frame["layer"].astype(str)) == {"posix"} and res.manifest is None
    # a single app file
    (app,) = (run_dir / "app").glob("*.pfw")
    assert set(merge_path(app).frame["layer"].astype(str)) == {"app"}
    # a TF logdir alone: fine where xplane.pb has absolute time, an actionable error where it has not
    logdir = run_dir / "tf" / "rank-0"
    import tensorflow as tf

    if tuple(int(x) for x in tf.__version__.split(".")[:2]) <= (2, 15):
        with pytest.raises(TraceInputError, match="no absolute time"):
            merge_path(logdir)
    else:
        assert set(merge_path(logdir).frame["layer"].astype(str)) == {"framework"}


def test_unreadable_manifest_is_a_warning(run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    (run / "manifest.json").write_text('{"world_size": 2, "ranks": [')  # launcher killed mid-write
    res = merge_path(run)
    assert res.manifest is None
    assert len(res.warnings) == 1 and res.warnings[0].startswith(f"{run / 'manifest.json'}: unreadable manifest")
    assert len(res.frame) == len(merge_path(run_dir).frame)


def darshan_example_logs() -> Path:
    darshan = pytest.importorskip("darshan")
    logs = Path(darshan.__file__).parent / "examples" / "example_logs"
    if not (logs / "dxt.darshan").exists():
        pytest.skip("the darshan wheel ships no example logs")
    return logs


def test_detect_and_read_any_every_kind(run_dir: Path) -> None:
    from trace_merge.readers import detect, read_any

    (app,) = (run_dir / "app").glob("*.pfw")
    (posix,) = (run_dir / "posix").glob("*.pfw.gz")
    (pb,) = run_dir.glob("tf/rank-0/plugins/profile/*/*.xplane.pb")
    dxt = darshan_example_logs() / "dxt.darshan"
    assert [detect(p) for p in (app, posix, pb, dxt)] == ["timelogger", "dftracer", "xplane", "darshan"]
    assert read_any(app).kind == "timelogger" and read_any(posix).kind == "dftracer"
    src = read_any(dxt)
    assert src.kind == "darshan" and len(src.counters) and len(src.frame)
    with pytest.raises(TraceInputError, match="unrecognised trace file"):
        detect(Path(__file__))
    with pytest.raises(TraceInputError, match="no such file"):
        detect(run_dir / "missing.pfw")


def test_single_darshan_log() -> None:
    log = darshan_example_logs() / "dxt.darshan"
    res = merge_path(log)
    assert res.sources == [str(log)] and res.manifest is None and res.warnings == []
    assert len(res.counters) and set(res.counters.columns) == set(COUNTER_DTYPES)
    assert set(res.frame["layer"].astype(str)) <= {"posix", "mpiio", "stdio", "hdf5"}
