"""Run.open: merged.parquet of the same sources is used, of changed sources is not; summary is strict JSON; analyses
agree with the frame."""
from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pytest

from trace_merge.errors import TraceInputError
from trace_merge.merge import merge_path, write_merged
from trace_merge.run import Run


def test_open_uses_fresh_merged_parquet_and_remerges_stale(real_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(real_run[0], run_dir)
    direct = Run.open(run_dir)
    assert not direct.cached
    write_merged(merge_path(run_dir), run_dir)
    cached = Run.open(run_dir)
    assert cached.cached
    pd.testing.assert_frame_equal(cached.frame.reset_index(drop=True), direct.frame.reset_index(drop=True),
                                  check_categorical=False)
    pd.testing.assert_frame_equal(cached.breakdown(), direct.breakdown())
    # a newer modification time alone is no change (a copy of the run keeps its merge) ...
    source = next((run_dir / "app").glob("*.pfw"))
    later = (run_dir / "merged.parquet").stat().st_mtime + 5
    os.utime(source, (later, later))
    assert Run.open(run_dir).cached
    # ... new content is
    with open(source, "a") as fh:
        fh.write("\n")
    stale = Run.open(run_dir)
    assert not stale.cached
    assert f"out of date, sources changed since it was made (app/{source.name} changed)" in stale.warnings[0]


def test_summary_is_strict_json_and_consistent(real_run):
    run = Run.open(real_run[0])
    doc = json.loads(json.dumps(run.summary(), allow_nan=False))
    assert doc["ranks"] == [0] and doc["rows_per_layer"] == {"app": 8, "posix": int((run.frame.layer == "posix").sum())}
    assert doc["verdict"]["verdict"] in ("not input-bound", "moderately input-bound", "highly input-bound")
    assert doc["bandwidth"]["totals"]["read_bytes"] == 16_000_000
    assert doc["metrics"]["read_bytes"] == 16_000_000
    assert {r["epoch"] for r in doc["breakdown"]} == {0, 1, None}
    assert 0 < doc["metrics"]["au_pct"] < 100


def test_compare_labels_and_access_pattern(real_run, dftracer_set):
    a, b = Run.open(real_run[0]), Run.open(dftracer_set)
    table = a.compare(b)
    assert list(table.columns) == ["run", "traces", "delta traces", "ratio traces"]
    assert table.loc["ranks", "delta traces"] == 1 and table.loc["ranks", "ratio traces"] == 2.0
    assert table.loc["ranks", "traces"] == 2
    ap = a.access_pattern()
    assert ap["read_bytes"].sum() == 16_000_000 and (ap["files"] == 2).all()


def test_open_missing_path_names_it(tmp_path):
    with pytest.raises(TraceInputError, match="nope: no such file"):
        Run.open(tmp_path / "nope")


def test_damaged_merged_parquet_is_merged_again_with_a_warning(real_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(real_run[0], run_dir)
    write_merged(merge_path(run_dir), run_dir)
    (run_dir / "merged.parquet").write_bytes(b"not parquet")
    run = Run.open(run_dir)
    assert not run.cached and len(run.frame) == len(Run.open(real_run[0]).frame)
    assert any("merged.parquet" in w or str(run_dir) in w for w in run.warnings)
    assert "merged again from the sources" in run.warnings[0]
