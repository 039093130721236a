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
    for heading in ("job context:", "I/O per module", "operation counts", "access pattern", "access sizes",
                    "common access sizes",
                    "file categories", "data per mount point", "time per rank"):
        assert heading in out
    assert "verdict:" not in out and "no data" not in out and "input wait" not in out and "input_pct" not in out
    assert re.search(r"^ POSIX +1 +4.20 MB +4.20 MB ", out, re.M), out  # decimal units, formatting.size_text
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
    assert heads[1:] == ["Warnings (0)", "Job context: dxt.darshan", "I/O per module", "Operation counts",
                         "Access pattern", "Access sizes", "Common access sizes", "File categories",
                         "Data per mount point", "Time per rank", "DXT heat map"]
    assert heads[0].startswith("Findings (")
    # I/O cost, operation counts, access pattern, access sizes, mounts, time per rank, DXT heat map: all drawn
    assert "Input-bound verdict" not in text and text.count("<img") == 7 and "not drawn" not in text


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
    from trace_merge.merged import RowsNotKept

    log = darshan_logs / "dxt.darshan"
    segments = Run.open(log, partitioned=False).dxt_segments()
    assert segments > 0
    lean = Run.open(log, keep_rows=False, partitioned=True)
    assert not lean.merge.in_memory and not lean.merge.rows_kept
    monkeypatch.setenv("TRACE_MERGE_PARTITION_ABOVE_BYTES", "0")  # the commands' merge partitioned, however small
    assert lean.dxt_segments() == segments
    assert main(["summary", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["darshan"]["dxt_segments"] == segments
    assert main(["summary", str(log)]) == 0
    assert f"{segments:,} DXT segments" in capsys.readouterr().out
    with pytest.raises(RowsNotKept):
        _ = lean.frame


# -- the tables PyDarshan's summary report also shows, against its own API ---------------------------------


def _report(path):
    import darshan

    darshan.enable_experimental()
    return darshan.DarshanReport(str(path), read_all=True)


@pytest.mark.parametrize("log", LOGS)
def test_access_sizes_equal_pydarshan(darshan_logs, log):
    """Our histogram is PyDarshan's ``mod_agg_iohist``; its totals are the read and write op counts."""
    from trace_merge.darshan_view import SIZE_BINS

    view = darshan_view(Run.open(darshan_logs / log))
    report = _report(darshan_logs / log)
    ops = view.operations.set_index("module")
    for mod, part in view.access_sizes.groupby("module"):
        report.mod_agg_iohist(mod)
        agg = report.summary["agg_iohist"][mod]
        for op in ("read", "write"):
            theirs = [int(agg[f"{op.upper()}_{b}"]) for b in SIZE_BINS]
            assert part[f"{op}s"].tolist() == theirs, (mod, op)
        if mod == "POSIX":  # every POSIX read and write falls in one bin
            assert part["reads"].sum() == ops.loc[mod, "reads"] and part["writes"].sum() == ops.loc[mod, "writes"]


@pytest.mark.parametrize("log", LOGS)
def test_common_sizes_equal_pydarshan(darshan_logs, log):
    from darshan.experimental.plots.plot_common_access_table import plot_common_access_table

    view = darshan_view(Run.open(darshan_logs / log))
    report = _report(darshan_logs / log)
    for mod, part in view.common_sizes.groupby("module"):
        theirs = plot_common_access_table(report, mod).df
        # the same counts, largest first (ties may be ordered apart), and each size with its count
        assert part["count"].tolist() == theirs["Count"].astype(int).tolist(), mod
        full = dict(zip(theirs["Access Size"].astype(int), theirs["Count"].astype(int)))
        assert all(full.get(s, n) == n for s, n in zip(part["access_size"], part["count"])), mod
        assert (part["access_bytes"] == part["access_size"]).all()


@pytest.mark.parametrize("log", LOGS)
def test_bytes_per_mount_add_up_to_the_modules(darshan_logs, log):
    """POSIX + STDIO bytes per mount point sum to the modules' totals; files read / written per mount sum to
    PyDarshan's unique-file counts of its "Data Access by Category"."""
    from darshan.experimental.plots import data_access_by_filesystem as dabf

    view = darshan_view(Run.open(darshan_logs / log))
    mods = view.modules.set_index("module")
    fs_mods = [m for m in ("POSIX", "STDIO") if m in mods.index]
    if not fs_mods:
        assert not len(view.mounts)
        return
    for col in ("bytes_read", "bytes_written"):
        assert view.mounts[col].sum() == sum(int(mods.loc[m, col]) for m in fs_mods), col
    report = _report(darshan_logs / log)
    reads, writes = dabf.rec_to_rw_counter_dfs_with_cols(report, file_id_dict=report.data["name_records"])
    files_read, files_written = dabf.process_unique_files(reads, writes)
    assert view.mounts["files_read"].sum() == int(files_read.sum())
    assert view.mounts["files_written"].sum() == int(files_written.sum())


@pytest.mark.parametrize("log", LOGS)
def test_file_sizes_and_rate_estimate_equal_pydarshan(darshan_logs, log):
    """Mean and largest file size per category (offset + 1) and the per-module I/O performance estimate (MB/s;
    PyDarshan's is MiB/s) from PyDarshan's C accumulator."""
    import darshan
    from darshan.backend.cffi_backend import accumulate_records

    view = darshan_view(Run.open(darshan_logs / log))
    report = darshan.DarshanReport(str(darshan_logs / log), read_all=True)
    mods = view.modules.set_index("module")
    for mod in ("POSIX", "MPI-IO", "STDIO"):
        if mod not in report.records or not len(report.records[mod]):
            continue
        derived = accumulate_records(report.records[mod].to_df(), mod, report.metadata["job"]["nprocs"]).derived_metrics
        theirs = derived.agg_perf_by_slowest * 1.048576
        if theirs > 0:  # PyDarshan's STDIO estimate of example.darshan is 0 though its ranks moved data
            assert mods.loc[mod, "MB_per_s_by_slowest"] == pytest.approx(theirs, rel=1e-6), mod
        cats = view.files[view.files["module"] == mod].set_index("category")
        for i, name in ((1, "read-only"), (2, "write-only"), (3, "read-write")):
            cc = derived.category_counters[i]
            if cc.count and cc.max_offset_bytes >= 0:
                assert cats.loc[name, "largest_file_bytes"] == cc.max_offset_bytes + 1, (mod, name)
                assert cats.loc[name, "mean_file_bytes"] == round((cc.total_max_offset_bytes + cc.count) / cc.count)


def test_time_per_rank_is_darshans(darshan_logs):
    """Shared files: Darshan's slowest/fastest-rank counters as they are; own files: per-rank sums."""
    import darshan

    log = darshan_logs / "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan"
    view = darshan_view(Run.open(log))
    report = darshan.DarshanReport(str(log), read_all=True)
    counters, names = report.records["POSIX"].to_df(), report.name_records
    c, f = counters["counters"], counters["fcounters"]
    row = view.rank_times[view.rank_times["files"] == "shared: macsio_hdf5_000.h5"].iloc[0]
    ref = f[[names[i].endswith("macsio_hdf5_000.h5") for i in f["id"]]].iloc[0]
    refc = c[[names[i].endswith("macsio_hdf5_000.h5") for i in c["id"]]].iloc[0]
    assert row["slowest_s"] == ref["POSIX_F_SLOWEST_RANK_TIME"] and row["fastest_s"] == ref["POSIX_F_FASTEST_RANK_TIME"]
    assert (row["slowest_rank"], row["fastest_rank"]) == (refc["POSIX_SLOWEST_RANK"], refc["POSIX_FASTEST_RANK"])
    total = ref["POSIX_F_READ_TIME"] + ref["POSIX_F_WRITE_TIME"] + ref["POSIX_F_META_TIME"]
    assert (row["mean_s"] == pytest.approx(total / 16)
            and row["stdev_s"] == pytest.approx(ref["POSIX_F_VARIANCE_RANK_TIME"] ** 0.5))
    assert row["slowest_over_mean"] == pytest.approx(row["slowest_s"] / row["mean_s"])
    # own files: dxt.darshan's one rank; ior's H5D records per rank
    ior = darshan_view(Run.open(darshan_logs / "ior_hdf5_example.darshan")).rank_times.set_index(["module", "files"])
    h5d = ior.loc[("H5D", "own files")]
    assert h5d["ranks"] == 3 and h5d["slowest_s"] >= h5d["median_s"] >= h5d["fastest_s"]


@pytest.mark.parametrize("log", ["ior_hdf5_example.darshan",
                                 "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan"])
def test_new_charts_render(darshan_logs, log, tmp_path):
    from trace_merge.darshan_view import (
        plot_access_pattern,
        plot_access_sizes,
        plot_io_cost,
        plot_mounts,
        plot_operations,
        plot_rank_times,
    )

    view = darshan_view(Run.open(darshan_logs / log))
    for plot in (plot_io_cost, plot_operations, plot_access_pattern, plot_access_sizes, plot_mounts,
                 plot_rank_times):
        out = tmp_path / f"{plot.__name__}.png"
        plot(view).savefig(out)
        assert out.stat().st_size > 5_000, plot.__name__


# -- the charts PyDarshan's summary report draws, bar for bar -----------------------------------------------


def _bars(ax, label: str) -> dict:
    """The heights of ``ax``'s bars of the legend entry ``label`` (None: the first set), by their x tick label."""
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    bars = next(c for c in ax.containers if label is None or c.get_label() == label)
    return {ticks[round(b.get_x() + b.get_width() / 2)]: b.get_height() for b in bars}


@pytest.mark.parametrize("log", LOGS)
def test_access_pattern_is_pydarshans(darshan_logs, log):
    """The table and the chart hold what PyDarshan's "Access Pattern" figure draws from its C accumulator's
    summary record: all, sequential and consecutive POSIX reads and writes."""
    import darshan
    from darshan.backend.cffi_backend import accumulate_records
    from darshan.experimental.plots import plot_posix_access_pattern

    from trace_merge.darshan_view import plot_access_pattern

    view = darshan_view(Run.open(darshan_logs / log))
    report = darshan.DarshanReport(str(darshan_logs / log), read_all=True)
    if "POSIX" not in report.records or not len(report.records["POSIX"]):
        assert not len(view.access_pattern)
        return
    record = accumulate_records(report.records["POSIX"].to_df(), "POSIX",
                                report.metadata["job"]["nprocs"]).summary_record
    theirs = plot_posix_access_pattern(record).axes[0]
    ours = plot_access_pattern(view).axes[0]
    table = view.access_pattern.set_index("op")
    for kind in ("total", "sequential", "consecutive"):
        expected = _bars(theirs, kind)  # PyDarshan's x labels: read, write
        assert [int(table.loc[op, kind]) for op in ("reads", "writes")] == [expected["read"], expected["write"]]
        assert _bars(ours, kind) == {"reads": expected["read"], "writes": expected["write"]}, kind
    for kind in ("sequential", "consecutive"):
        assert (table[f"{kind}_pct"] == 100 * table[kind] / table["total"]).where(table["total"] > 0, True).all()


#: PyDarshan's operation-count bar -> ours, per module of its figure
PYDARSHAN_BARS = {
    "POSIX": {"Read": "reads", "Write": "writes", "Open": "opens", "Stat": "stats", "Seek": "seeks",
              "Fsync": "fsyncs"},  # its Mmap bar is always 0 ("faulty?" in its source)
    "MPI-IO": {"Col. Read": "collective reads", "Col. Write": "collective writes", "Col. Open": "collective opens",
               "Sync": "fsyncs"},
    "STDIO": {"Read": "reads", "Write": "writes", "Open": "opens", "Seek": "seeks", "Flush": "flushes"},
    "H5F": {"H5F Open": "opens", "H5F Flush": "flushes"},
    "H5D": {"H5D Read": "reads", "H5D Write": "writes", "H5D Open": "opens", "H5D Flush": "flushes"},
}


@pytest.mark.parametrize("log", LOGS)
def test_operation_chart_is_pydarshans(darshan_logs, log):
    """Our operation-count bars against PyDarshan's ``plot_opcounts`` figure, bar for bar; MPI-IO's bar is the
    independent + collective (+ non-blocking) calls with the collective part drawn inside it."""
    from darshan.experimental.plots import plot_opcounts

    from trace_merge.darshan_view import plot_operations

    view = darshan_view(Run.open(darshan_logs / log))
    report = _report(darshan_logs / log)
    panels = {ax.get_title(loc="left").split(" operations")[0]: ax for ax in plot_operations(view).axes}
    assert list(panels) == list(view.operations["module"])
    compared = 0
    for mod, ax in panels.items():
        theirs = _bars(plot_opcounts(report, mod).axes[0], None)
        ours, collective = _bars(ax, "all"), (_bars(ax, "collective") if mod == "MPI-IO" else {})
        for label, op in PYDARSHAN_BARS[mod].items():
            if op.startswith("collective "):
                assert collective[op.split(" ", 1)[1]] == theirs[label], (mod, label)
            elif op in ours:  # absent: Darshan did not record it (the panel's title names it)
                assert ours[op] == theirs[label], (mod, label)
            compared += 1
        if mod == "MPI-IO":
            nb = report.summary["agg_ioops"]["MPI-IO"]
            for op, what in (("reads", "Read"), ("writes", "Write"), ("opens", "Open")):
                assert ours[op] == theirs[f"Ind. {what}"] + theirs[f"Col. {what}"] + nb.get(f"MPIIO_NB_{op.upper()}", 0)
    assert compared >= 4
