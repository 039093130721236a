"""Perfetto export: strictly valid Chrome-trace JSON, one process per rank × layer, µs relative to run start."""
from __future__ import annotations

import gzip
import json

import pytest

from trace_merge.errors import OutputExistsError
from trace_merge.perfetto import export_perfetto
from trace_merge.run import Run


def load(path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_export_real_run_is_valid_chrome_trace(real_run, tmp_path, name):
    run = Run.open(real_run[0])
    out = export_perfetto(run.frame, tmp_path / name)
    doc = load(out)
    events = doc["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    assert len(x) == len(run.frame)
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == ["rank 0 · app", "rank 0 · posix"]
    threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
    assert {(t["pid"], t["tid"]) for t in threads} == {(e["pid"], e["tid"]) for e in x}
    t0 = doc["otherData"]["run_start_epoch_ns"]
    assert t0 == int(run.frame["start_ns"].min())
    assert min(e["ts"] for e in x) == 0.0
    latest = max(x, key=lambda e: e["ts"])
    assert latest["ts"] == pytest.approx((int(run.frame["start_ns"].max()) - t0) / 1e3, abs=1e-3)
    loads = [e for e in x if e["name"] == "Load File"]
    assert all(e["args"]["bytes"] > 0 and e["args"]["file"].endswith(".bin") and "epoch" in e["args"]
               for e in loads)
    app_pid = next(p for p, n in procs.items() if n.endswith("app"))
    assert all(e["pid"] == app_pid for e in loads)


def test_export_dftracer_set_keeps_durations(dftracer_set, tmp_path):
    run = Run.open(dftracer_set)
    doc = load(export_perfetto(run.frame, tmp_path / "t.json"))
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sum(e["dur"] for e in x) == pytest.approx(run.frame["dur_ns"].sum() / 1e3)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {"rank 0 · posix", "rank 1 · posix"} <= names


def test_export_refuses_existing_output(real_run, tmp_path):
    out = tmp_path / "t.json"
    out.write_text("keep")
    with pytest.raises(OutputExistsError):
        export_perfetto(Run.open(real_run[0]).frame, out)
    assert out.read_text() == "keep"
