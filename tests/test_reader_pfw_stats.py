"""``trace-merge summary --json`` (in-process) agrees with ``dftracer_stats`` per event name, on real
DFTracer traces made by ``dftracer_gen_fake_trace``; the check ``benchmarks/perf/merge_scale.py`` runs at scale."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.perf.merge_scale import dftracer_stats_by_name, mismatches, summary_by_name
from trace_merge.cli import main as trace_merge

BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    exe = BIN / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} not installed (pip install 'dlio-layers[posix]')")
    return found


def test_summary_json_equals_dftracer_stats(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    traces = tmp_path / "traces"
    subprocess.run([_tool("dftracer_gen_fake_trace"), "-o", str(traces), "-p", "3", "-H", "2", "-e", "3", "-s", "8"],
                   check=True, capture_output=True)
    report = subprocess.run(
        [_tool("dftracer_stats"), "-d", str(traces), "--index-dir", str(tmp_path / "index"), "--report", "detailed",
         "--json", "--log-level", "off"], check=True, capture_output=True, text=True)
    theirs = dftracer_stats_by_name(json.loads(report.stdout))

    assert trace_merge(["summary", str(traces), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    ours = summary_by_name(summary)

    assert mismatches(ours, theirs) == []
    # the comparison is not vacuous: every name, and bytes for the read family
    assert summary["events"] == sum(d["count"] for d in theirs.values()) > 1000
    assert {n for n, d in ours.items() if d["bytes"]} == {"pread", "read", "fread"}


def test_mismatches_are_reported() -> None:
    theirs = {"read": {"count": 2, "sum": 10, "min": 4, "max": 6, "bytes": 100}}
    ours = {"read": dict(theirs["read"], bytes=99), "open": dict(theirs["read"], bytes=None)}
    assert mismatches(ours, theirs) == ["open: only in trace-merge",
                                        "read: bytes 99 (trace-merge) != 100 (dftracer_stats)"]
