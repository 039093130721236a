"""Horovod timeline reader on a real 2-rank timeline (``mpiexec -n 2`` + ``HOROVOD_TIMELINE``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.tools import mpiexec
from trace_merge.errors import TraceInputError
from trace_merge.readers import detect, horovod, read_any

ALLREDUCE_LOOP = textwrap.dedent(
    """
    import json, sys, time
    import tensorflow as tf
    import horovod.tensorflow as hvd

    hvd.init()
    t0 = time.time_ns()
    x = tf.ones([1024])
    for i in range(4):
        y = hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum, name="grad_%d" % (i % 2))
    t1 = time.time_ns()
    time.sleep(0.3)  # let Horovod's timeline writer catch up before shutdown
    if hvd.rank() == 0:
        open(sys.argv[1], "w").write(json.dumps({"window": [t0, t1], "size": hvd.size(),
                                                 "value": float(y.numpy()[0])}))
    """
)


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("horovod.tensorflow")
    tmp = tmp_path_factory.mktemp("hvd")
    script = tmp / "allreduce.py"
    script.write_text(ALLREDUCE_LOOP)
    out = tmp / "window.json"
    tl = tmp / "horovod" / "timeline.json"
    tl.parent.mkdir()
    env = dict(os.environ, HOROVOD_TIMELINE=str(tl), TF_CPP_MIN_LOG_LEVEL="2",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run([mpiexec(), "-n", "2", sys.executable, str(script), str(out)], check=True, env=env,
                   timeout=300, capture_output=True)
    info = json.loads(out.read_text())
    info["path"] = tl
    return info


pytestmark = [pytest.mark.horovod, pytest.mark.mpi]


def test_comm_rows_inside_app_window(timeline: dict) -> None:
    assert timeline["size"] == 2 and timeline["value"] == 3.0  # the allreduce really ran on 2 ranks
    src = read_any(timeline["path"])
    assert src.kind == "horovod" and src.meta.complete
    # Horovod 0.28 may lose the last E events at shutdown; those activities are reported, not invented
    assert all("never ended" in w for w in src.warnings)
    f = src.frame
    neg = f["name"].astype(str).str.startswith("NEGOTIATE_").to_numpy()
    assert set(f["layer"].astype(str)) == {"comm"} and set(f.loc[~neg, "cat"].astype(str)) == {"comm"}
    assert {"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "MPI_ALLREDUCE"} <= set(f["name"].astype(str))
    assert (f["rank"] == 0).all()
    t0, t1 = timeline["window"]
    # absolute via start_time_since_epoch_in_micros: every activity inside the app's wall window
    assert f["start_ns"].min() >= t0 - 1_000_000
    assert f["end_ns"].max() <= t1 + 1_000_000
    assert (f["end_ns"] >= f["start_ns"]).all()
    tensors = {json.loads(a)["tensor"] for a in f["args"]}
    assert tensors and all(t for t in tensors)
    # MPI_ALLREDUCE nests inside its ALLREDUCE (B/E pairs matched per tensor stack)
    ar = f[f["name"] == "ALLREDUCE"].sort_values("start_ns")
    mpi = f[f["name"] == "MPI_ALLREDUCE"].sort_values("start_ns")
    assert len(ar) == len(mpi) >= 3
    assert (mpi["start_ns"].to_numpy() >= ar["start_ns"].to_numpy()).all()
    assert (mpi["end_ns"].to_numpy() <= ar["end_ns"].to_numpy()).all()
    assert all("dtype" in json.loads(a) for a in ar["args"])


def test_ready_marks_name_the_last_ready_rank(timeline: dict) -> None:
    """Horovod 0.28 marks each rank ready ("0", "1") in a tensor's first negotiation only (the rest come from its
    response cache): the reader keeps the order, gives the cached ones the first's last ready rank, and says in
    ``cat`` whether rank 0 (the writer) waited for it (``wait``) or was it (``other``)."""
    f = read_any(timeline["path"]).frame
    neg = f[f["name"].astype(str).str.startswith("NEGOTIATE_")].sort_values("start_ns")
    first: dict = {}
    for a, cat in zip(neg["args"], neg["cat"].astype(str)):
        a = json.loads(a)
        if a["tensor"] in first:
            assert "ready_order" not in a and a["last_ready"] == first[a["tensor"]]
        else:
            assert sorted(a["ready_order"]) == [0, 1] and a["last_ready"] == a["ready_order"][-1]
            first[a["tensor"]] = a["last_ready"]
        assert cat == ("other" if a["last_ready"] == 0 else "wait")
    # eager hvd.allreduce names its tensor HorovodAllreduce whatever name= says: one tensor, 4 negotiations (the
    # last may be lost at shutdown), 3 of them cached
    assert len(first) == 1 and len(neg) >= 3


@pytest.mark.parametrize("cut", [0.4, 0.75])
def test_truncated_timeline(timeline: dict, tmp_path: Path, cut: float) -> None:
    text = timeline["path"].read_text()
    full = horovod.read(timeline["path"]).frame
    bad = tmp_path / "timeline.json"
    inside_event = text.index('"ts"', int(len(text) * cut)) + 3  # a crash mid-write
    bad.write_text(text[:inside_event])
    src = horovod.read(bad)
    assert any("truncated timeline" in w for w in src.warnings)
    assert all(w.startswith(str(bad)) for w in src.warnings)
    assert 0 < len(src.frame) < len(full)
    # what survived is exactly the start of the full reading
    assert set(src.frame["start_ns"]) <= set(full["start_ns"])


def test_unterminated_but_whole_timeline(timeline: dict, tmp_path: Path) -> None:
    """While the job runs the array has no closing bracket; every event is still read."""
    text = timeline["path"].read_text().rstrip()
    assert text.endswith("]")
    open_file = tmp_path / "timeline.json"
    open_file.write_text(text[:-1] + ",\n")
    src, closed = horovod.read(open_file), horovod.read(timeline["path"])
    assert not any("truncated" in w for w in src.warnings)
    assert len(src.warnings) == len(closed.warnings)
    assert len(src.frame) == len(closed.frame)


def test_timeline_without_events(timeline: dict, tmp_path: Path) -> None:
    header = timeline["path"].read_text().split("\n")
    started = tmp_path / "timeline.json"
    started.write_text("\n".join(header[:3]) + "\n")  # "[" + process metadata, no activity yet
    with pytest.raises(TraceInputError, match="no Horovod activities"):
        horovod.read(started)


def test_not_a_timeline(tmp_path: Path) -> None:
    bad = tmp_path / "timeline.json"
    bad.write_text('[{"ph": "X", "name": "x", "ts": 1, "dur": 2, "pid": 0}]')
    with pytest.raises(TraceInputError, match="start_time_since_epoch_in_micros") as err:
        horovod.read(bad)
    assert str(err.value).startswith(str(bad))
    (tmp_path / "notes.json").write_text('{"lr": 0.1}')
    with pytest.raises(TraceInputError, match="neither a Horovod timeline nor a PyTorch profiler trace"):
        detect(tmp_path / "notes.json")


def test_a_corrupt_event_is_skipped_not_the_rest(timeline: dict, tmp_path: Path) -> None:
    """A damaged event in the middle (a byte the JSON decoder refuses): that event goes, everything after stays,
    and the warning names the line and does not call the file truncated."""
    text = timeline["path"].read_text()
    full = horovod.read(timeline["path"]).frame
    at = text.index('{"ph": "B", "name": "ALLREDUCE"', len(text) // 3)
    bad = tmp_path / "timeline.json"
    bad.write_text(text[:at] + '{"ph": "B", "name": "ALL\x01REDUCE", "ts": 1@2' + text[at + 40:])
    src = horovod.read(bad)
    line = 1 + text.count("\n", 0, at)
    assert [w for w in src.warnings if "corrupt event" in w] == [
        f"{bad}:{line}: 1 corrupt event(s) skipped (first: Invalid control character at); read the rest"]
    assert not any("truncated" in w for w in src.warnings)
    # the ALLREDUCE that lost its B is gone (its E has nothing to close); every other row is there
    assert len(full) - 1 <= len(src.frame) < len(full)
    assert src.frame["start_ns"].max() == full["start_ns"].max()


@pytest.mark.parametrize("value", ['"x"', "1e400", "true", "-5"])
def test_an_event_with_a_bad_ts_or_dur_is_skipped(timeline: dict, tmp_path: Path, value: str) -> None:
    text = timeline["path"].read_text()
    full = horovod.read(timeline["path"]).frame
    key = '"dur": ' if value == "-5" else '"ts": '
    at = text.index('{"ph": "X"') if value == "-5" else text.index('{"ph": "B", "name": "MPI_ALLREDUCE"')
    start = text.index(key, at) + len(key)
    end = start + len(text[start:].split(",")[0].split("}")[0])
    bad = tmp_path / "timeline.json"
    bad.write_text(text[:start] + value + text[end:])
    src = horovod.read(bad)
    [w] = [w for w in src.warnings if "bad values" in w]
    assert w.startswith(f"{bad}:{1 + text.count(chr(10), 0, at)}: 1 event(s) with bad values skipped")
    assert len(src.frame) >= len(full) - 1 and (src.frame["end_ns"] >= src.frame["start_ns"]).all()
