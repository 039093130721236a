"""The Darshan-log view on PyDarshan's own example logs: bytes, operation counts and file categories equal what
PyDarshan computes (its accumulator and its operation-count aggregator); the CLI and the report show the view
instead of the training sections for a plain log."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from trace_merge.cli import main
from trace_merge.darshan_view import darshan_view, heatmap_df, plot_dxt_heatmap
from trace_merge.run import Run

LOGS = ["ior_hdf5_example.darshan", "dxt.darshan", "example.darshan", "noposix.darshan",
        "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan"]
#: our operation -> PyDarshan's agg_ioops counters summed for it
PYDARSHAN_OPS = {
    "POSIX": {"opens": ["POSIX_OPENS"], "reads": ["POSIX_READS"], "writes": ["POSIX_WRITES"],
              "seeks": ["POSIX_SEEKS"], "stats": ["POSIX_STATS"], "fsyncs": ["POSIX_FSYNCS", "POSIX_FDSYNCS"]},
    "MPI-IO": {"opens": ["MPIIO_INDEP_OPENS", "MPIIO_COLL_OPENS"],
               "reads": ["MPIIO_INDEP_READS", "MPIIO_COLL_READS", "MPIIO_NB_READS"],
               "writes": ["MPIIO_INDEP_WRITES", "MPIIO_COLL_WRITES", "MPIIO_NB_WRITES"], "fsyncs": ["MPIIO_SYNCS"]},
    "STDIO": {"opens": ["STDIO_OPENS"], "reads": ["STDIO_READS"], "writes": ["STDIO_WRITES"],
              "seeks": ["STDIO_SEEKS"], "flushes": ["STDIO_FLUSHES"]},
    "H5F": {"opens": ["H5F_OPENS"], "flushes": ["H5F_FLUSHES"]},
    "H5D": {"opens": ["H5D_OPENS"], "reads": ["H5D_READS"], "writes": ["H5D_WRITES"], "flushes": ["H5D_FLUSHES"]},
}


def pydarshan(path):
    """PyDarshan's numbers: per module bytes and file categories from its C accumulator, op counts from
    ``agg_ioops`` (what ``python -m darshan summary`` draws)."""
    import darshan
    from darshan.backend.cffi_backend import accumulate_records

    darshan.enable_experimental()
    report = darshan.DarshanReport(str(path), read_all=True)
    ioops = report.agg_ioops(mode="return")
    out = {}
    for mod in ("POSIX", "MPI-IO", "STDIO"):
        if mod in report.records and len(report.records[mod]):
            acc = accumulate_records(report.records[mod].to_df(), mod, report.metadata["job"]["nprocs"])
            cc = acc.derived_metrics.category_counters
            out[mod] = {"files": int(cc[0].count), "bytes_read": int(cc[0].total_read_volume_bytes),
                        "bytes_written": int(cc[0].total_write_volume_bytes),
                        "categories": {name: (int(cc[i].count), int(cc[i].total_read_volume_bytes),
                                              int(cc[i].total_write_volume_bytes))
                                       for i, name in ((1, "read-only"), (2, "write-only"), (3, "read-write"))}}
    for mod in ("H5D",):
        if mod in report.records and len(report.records[mod]):
            counters = report.records[mod].to_df()["counters"]
            out[mod] = {"bytes_read": int(counters["H5D_BYTES_READ"].sum()),
                        "bytes_written": int(counters["H5D_BYTES_WRITTEN"].sum())}
    ops = {mod: {op: int(sum(ioops[mod][c] for c in names)) for op, names in table.items()}
           for mod, table in PYDARSHAN_OPS.items() if mod in ioops}
    return out, ops, report.metadata


@pytest.mark.parametrize("log", LOGS)
def test_numbers_equal_pydarshan(darshan_logs, log):
    ours = darshan_view(Run.open(darshan_logs / log))
    theirs, ops, meta = pydarshan(darshan_logs / log)
    modules = ours.modules.set_index("module")
    for mod, ref in theirs.items():
        assert int(modules.loc[mod, "bytes_read"]) == ref["bytes_read"], (mod, "read")
        assert int(modules.loc[mod, "bytes_written"]) == ref["bytes_written"], (mod, "written")
        if "files" in ref:
            assert modules.loc[mod, "files"] == ref["files"]
            cats = ours.files[ours.files["module"] == mod].set_index("category")
            for name, (n, r, w) in ref["categories"].items():
                assert tuple(int(x) for x in cats.loc[name, ["files", "bytes_read", "bytes_written"]]) == (n, r, w)
    table = ours.operations.set_index("module")
    compared = 0
    for mod, counts in ops.items():
        for op, n in counts.items():
            mine = table.loc[mod, op]
            # Darshan's -1 (not recorded) in a record makes our count unknown rather than off by the -1s
            if not pd.isna(mine):
                assert int(mine) == n, (mod, op)
                compared += 1
    assert compared >= 5
    job = ours.job[0]
    assert (job["job id"], job["uid"], job["nprocs"]) == (str(meta["job"]["jobid"]), str(meta["job"]["uid"]),
                                                         meta["job"]["nprocs"])
    assert job["run time (s)"] == pytest.approx(meta["job"]["run_time"])


def test_heatmap_conserves_bytes(darshan_logs, tmp_path):
    run = Run.open(darshan_logs / "ior_hdf5_example.darshan")
    df, module = heatmap_df(run.frame, bins=50)
    assert module == "POSIX"
    posix = darshan_view(run).modules.set_index("module").loc["POSIX"]
    for op, col in (("read", "bytes_read"), ("write", "bytes_written")):
        assert df.loc[df["op"] == op, "bytes"].sum() == pytest.approx(int(posix[col]))
    assert sorted(df["rank"].unique()) == [0, 1, 2, 3]
    plot_dxt_heatmap(run.frame).savefig(tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 10_000


def test_summary_of_a_plain_log_is_the_darshan_view(darshan_logs, capsys):
    assert main(["summary", str(darshan_logs / "ior_hdf5_example.darshan")]) == 0
    out = capsys.readouterr().out
    for heading in ("job context:", "I/O per module", "operation counts", "file categories"):
        assert heading in out
    assert "verdict:" not in out and "no data" not in out and "input wait" not in out and "input_pct" not in out
    assert re.search(r"^ POSIX +1 +4,202,504 +4,195,800 ", out, re.M), out
    assert "32324925" in out and "/global/cscratch1 (lustre)" in out
    # JSON keeps its keys and adds the view
    assert main(["summary", str(darshan_logs / "ior_hdf5_example.darshan"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {m["module"]: m["bytes_written"] for m in doc["darshan"]["modules"]}["POSIX"] == 4195800


def test_report_of_a_plain_log_shows_the_view(darshan_logs, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(darshan_logs / "dxt.darshan"), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    heads = re.findall(r"<h2>([^<]*)</h2>", text)
    assert heads[1:] == ["Job context: dxt.darshan", "I/O per module", "Operation counts", "File categories",
                         "DXT heat map"]
    assert "Input-bound verdict" not in text and text.count("<img") == 1


def test_training_run_with_darshan_gets_a_drill_down(real_run, darshan_logs, tmp_path, capsys):
    """A training run whose directory also holds a Darshan log: the training output first, the view after."""
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(real_run[0], run_dir)
    (run_dir / "darshan").mkdir()
    shutil.copy(darshan_logs / "example.darshan", run_dir / "darshan")
    assert main(["summary", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.index("verdict:") < out.index("drill-down, the Darshan log:") < out.index("operation counts")
    assert main(["report", str(run_dir), "-o", str(tmp_path / "r.html")]) == 0
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert text.index("Is it input-bound?") < text.index("Drill-down: the Darshan log")


def test_a_large_runs_summary_counts_the_dxt_segments_without_its_rows(darshan_logs, tmp_path, capsys,
                                                                        monkeypatch):
    """A large run's ``summary`` keeps no rows: the DXT segments are counted by the merge, as the frame has them."""
    from trace_merge import partitioned, run as run_mod

    log = darshan_logs / "dxt.darshan"
    segments = Run.open(log, partitioned=False).dxt_segments()
    assert segments > 0
    monkeypatch.setattr(run_mod, "PARTITION_ABOVE_BYTES", 0)  # the partitioned merge, however small the log
    lean = Run.open(log, keep_rows=False)
    assert lean._partitioned is not None and not lean._partitioned.rows_kept
    assert lean.dxt_segments() == segments
    assert main(["summary", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["darshan"]["dxt_segments"] == segments
    assert main(["summary", str(log)]) == 0
    assert f"{segments:,} DXT segments" in capsys.readouterr().out
    with pytest.raises(partitioned.RowsNotKept):
        lean.frame
