"""trace_merge.analysis: interval arithmetic, breakdown, exposed I/O, verdict, bandwidth, access pattern, stats.

Pure-arithmetic tests build frames with ``trace_merge.schema.to_frame`` and check against a brute-force
raster or hand-computed values; the rest run on real traces (DFTracer generator, TimeLogger + DFTracer preload).
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from trace_merge import analysis as A
from trace_merge import intervals as I
from trace_merge.schema import to_frame

PCT = [*(f"{c}_pct" for c in A.PRIORITY), "outside_epochs_pct"]  # a row sums to 100 %


def raster(starts, ends, size=1000) -> np.ndarray:
    cover = np.zeros(size, dtype=bool)
    for s, e in zip(starts, ends):
        cover[s:e] = True
    return cover


def random_intervals(rng, n, size=1000, max_len=80):
    s = rng.integers(0, size - 1, n)
    e = np.minimum(s + rng.integers(0, max_len, n), size)
    return s, e


# -- interval primitives --------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_merge_intervals_matches_raster_and_union_le_sum(seed):
    rng = np.random.default_rng(seed)
    s, e = random_intervals(rng, 60)
    ms, me = I.merge_intervals(s, e)
    assert np.all(me > ms)
    assert np.all(ms[1:] > me[:-1])  # sorted, disjoint, not touching
    assert I.union_ns(s, e) == raster(s, e).sum() == (me - ms).sum()
    assert I.union_ns(s, e) <= (e - s).sum()


def test_merge_intervals_joins_touching_and_drops_empty():
    ms, me = I.merge_intervals([0, 10, 30, 40], [10, 20, 30, 45])
    assert ms.tolist() == [0, 40] and me.tolist() == [20, 45]
    assert I.merge_intervals([], [])[0].size == 0


@pytest.mark.parametrize("seed", range(5))
def test_intersect_and_subtract_match_raster(seed):
    rng = np.random.default_rng(100 + seed)
    a = I.merge_intervals(*random_intervals(rng, 40))
    b = I.merge_intervals(*random_intervals(rng, 40))
    ra, rb = raster(*a), raster(*b)
    inter = I.intersect_intervals(*a, *b)
    diff = I.subtract_intervals(*a, *b)
    assert np.array_equal(raster(*inter), ra & rb)
    assert np.array_equal(raster(*diff), ra & ~rb)
    assert np.all(inter[0][1:] >= inter[1][:-1]) and np.all(diff[0][1:] >= diff[1][:-1])


def test_grouped_union_equals_union_per_group():
    rng = np.random.default_rng(7)
    s, e = random_intervals(rng, 300)
    g = rng.integers(0, 5, s.size)
    s = s + 10 ** 18 * (g % 2)  # groups far apart in absolute time must not matter
    e = e + 10 ** 18 * (g % 2)
    got = I.grouped_union_ns(g, s, e, 6)
    want = [I.union_ns(s[g == k], e[g == k]) for k in range(6)]
    assert got.tolist() == want


def test_covered_ns_counts_coverage_inside_each_window(sweeps: str):
    ms, me = I.merge_intervals([10, 50], [30, 60])
    got = I.covered_ns(ms, me, np.array([0, 20, 55, 70, 0]), np.array([100, 55, 58, 80, 10]))
    assert got.tolist() == [30, 15, 3, 0, 0]


@pytest.mark.parametrize("seed", range(40))
def test_covered_ns_equals_the_overlap_summed_per_window(seed: int, sweeps: str):
    """Windows in time order (the walk), in random order (the searches), empty, reversed, outside the list, on its
    bounds: each window's coverage is the sum of its overlaps with the merged intervals."""
    rng = np.random.default_rng(seed)
    s, e = random_intervals(rng, int(rng.integers(0, 60)))
    ms, me = I.merge_intervals(s, e)
    n = int(rng.integers(0, 80))
    bounds = np.concatenate((ms, me, rng.integers(-50, 1200, n)))
    ws = rng.choice(bounds, n) if bounds.size else np.zeros(0, dtype=np.int64)
    we = ws + rng.integers(-20, 300, n)
    if seed % 2:
        order = np.argsort(ws, kind="stable")
        ws, we = ws[order], np.sort(we)
    want = [int(np.maximum(np.minimum(me, b) - np.maximum(ms, a), 0).sum()) for a, b in zip(ws, we)]
    assert I.covered_ns(ms, me, ws, we).tolist() == want


# -- attribution of wall time -----------------------------------------------------------------------------


def nested_frame() -> pd.DataFrame:
    """Thread 1: Epoch(other) ⊃ Training Iteration(compute) ⊃ Call to Next Batch(wait) ⊃ Load File(io);
    thread 2: a prefetch read (io) while thread 1 computes. Times in ns."""
    return to_frame({
        "layer": "app",
        "cat": ["other", "compute", "wait", "io", "io"],
        "name": ["Epoch", "Training Iteration", "Call to Next Batch", "Load File", "prefetch"],
        "rank": 0, "pid": 1, "tid": [1, 1, 1, 1, 2],
        "start_ns": [0, 0, 10, 20, 50], "end_ns": [120, 100, 40, 30, 70],
        "epoch": [0, 0, 0, 0, 0], "step": [pd.NA, 0, 0, 0, 0],
        "bytes": [pd.NA, pd.NA, pd.NA, 1000, 2000],
    })


def test_breakdown_innermost_phase_per_thread_then_priority_across_threads():
    bd = A.breakdown_df(nested_frame())
    assert bd["epoch"].tolist()[0] == 0 and pd.isna(bd["epoch"].tolist()[1])  # per epoch + whole-run row
    row = bd.iloc[0]
    assert row["wall_s"] == pytest.approx(120e-9)
    # io: Load File [20,30] + prefetch [50,70] = 30; compute: [0,10]+[40,100] minus [50,70] (io wins) = 50;
    # wait: [10,20]+[30,40] = 20; other: Epoch's own [100,120] = 20.
    assert row["io_pct"] == pytest.approx(100 * 30 / 120)
    assert row["compute_pct"] == pytest.approx(100 * 50 / 120)
    assert row["wait_pct"] == pytest.approx(100 * 20 / 120)
    assert row["other_pct"] == pytest.approx(100 * 20 / 120)
    assert row[PCT].sum() == pytest.approx(100.0)
    # union per cat counts a parent's whole length
    assert row["compute_s"] == pytest.approx(100e-9) and row["wait_s"] == pytest.approx(30e-9)


def test_breakdown_per_layer_adds_a_layer_column():
    f = nested_frame()
    posix = to_frame({"layer": "posix", "cat": "io", "name": "read", "rank": 0, "pid": 1, "tid": 1,
                      "start_ns": [21], "end_ns": [29], "epoch": [0], "bytes": [1000]})
    from trace_merge.schema import concat_frames

    both = concat_frames([f, posix])
    per = A.breakdown_df(both, "all", per_layer=True)
    assert set(per["layer"]) == {"app", "posix"}
    assert A.breakdown_df(both).equals(A.breakdown_df(f))  # default: app layer only
    np.testing.assert_allclose(per[PCT].sum(axis=1), 100.0)


def random_frame(seed: int, ranks: int = 3, threads: int = 2, n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 10 ** 7, n)
    e = s + rng.integers(1, 10 ** 6, n)
    return to_frame({
        "layer": "app", "cat": rng.choice(list(A.PRIORITY), n), "name": "x",
        "rank": rng.integers(0, ranks, n), "pid": 1, "tid": rng.integers(0, threads, n),
        "start_ns": s + 1_700_000_000 * 10 ** 9, "end_ns": e + 1_700_000_000 * 10 ** 9,
        "epoch": s // (4 * 10 ** 6), "step": s // 10 ** 5,
    })


@pytest.mark.parametrize("seed", range(4))
def test_breakdown_rows_sum_to_100_and_exclusive_le_union_le_sum(seed):
    f = random_frame(seed)
    bd = A.breakdown_df(f)
    np.testing.assert_allclose(bd[PCT].sum(axis=1), 100.0, atol=1e-9)
    assert (bd[PCT] >= -1e-9).all().all()
    for c in A.PRIORITY[:-1]:
        assert (bd[f"{c}_pct"] / 100 * bd["wall_s"] <= bd[f"{c}_s"] + 1e-12).all()
    tot = bd[bd["epoch"].isna()].set_index("rank")
    for (rank, cat), rows in f.groupby(["rank", "cat"], observed=True):
        union = I.union_ns(rows["start_ns"], rows["end_ns"])
        assert tot.loc[rank, f"{cat}_s"] == pytest.approx(union / 1e9)
        assert union <= rows["dur_ns"].sum()


def test_exposed_io_and_verdict_exact():
    f = nested_frame()
    exp = A.exposed_io_df(f).iloc[0]
    # input = io ∪ wait self time = [10,40] ∪ [50,70] = 50; compute self = [0,10] ∪ [40,100] = 70;
    # overlap = [50,70] (thread 2 reads while thread 1 computes) = 20; exposed = 30
    assert (exp["input_s"], exp["compute_s"], exp["overlap_s"], exp["exposed_s"]) == pytest.approx(
        (50e-9, 70e-9, 20e-9, 30e-9))
    ib = A.input_bound_df(f).iloc[0]
    # step window = rows tagged step 0 = [0,100]: exposed input 30 of 100, compute 70 of 100
    assert ib["basis"] == "app"  # app-layer evidence: no framework layer covers the step
    assert ib["input_pct"] == pytest.approx(30.0) and ib["au_pct"] == pytest.approx(70.0)
    v = A.verdict(f)
    assert v.label == "highly input-bound" and v.input_pct == pytest.approx(30.0)
    assert A.accelerator_utilisation(f) == pytest.approx(0.7)


@pytest.mark.parametrize("pct,label", [(0.0, "not input-bound"), (4.99, "not input-bound"),
                                       (5.0, "moderately input-bound"), (19.9, "moderately input-bound"),
                                       (20.0, "highly input-bound"), (float("nan"), "unknown")])
def test_verdict_thresholds(pct, label):
    assert A.verdict_label(pct) == label


def test_untagged_compute_marks_steps_then_epoch_windows_without_steps():
    """No step tags: the compute phases mark the steps (DLIO's compute events without metadata, a hooked step);
    without compute or fetch evidence either, the verdict falls back to the epoch windows."""
    f = nested_frame().assign(step=pd.array([pd.NA] * 5, dtype="Int64"))
    ib = A.input_bound_df(f)
    assert ib["basis"].tolist() == ["app"] and ib["steps_total"].tolist() == [1]
    bare = f[~f["cat"].isin(["compute", "wait"])]
    assert A.input_bound_df(bare)["basis"].tolist() == ["epoch"]
    # a framework profile's untagged operators are no steps: many to a step
    ops = f.assign(layer=pd.Series(["framework"] * 5, dtype="category"))
    assert A.input_bound_df(ops)["basis"].tolist() == ["epoch"]


# -- bytes ------------------------------------------------------------------------------------------------


def bytes_frame() -> pd.DataFrame:
    """Rank 0: app phase (bytes 100) plus two overlapping posix preads (bytes 60 + 40) on two threads;
    rank 1: app phase only (bytes 300, 3 s)."""
    sec = 10 ** 9
    return to_frame({
        "layer": ["app", "posix", "posix", "posix", "app"],
        "cat": ["io", "io", "io", "io", "io"],
        "name": ["Load File", "pread64", "pread64", "close", "Load File"],
        "rank": [0, 0, 0, 0, 1], "tid": [1, 1, 2, 1, 1],
        "start_ns": [0, 0, 1 * sec, 4 * sec, 0], "end_ns": [5 * sec, 2 * sec, 3 * sec, 5 * sec, 3 * sec],
        "bytes": [100, 60, 40, pd.NA, 300], "offset": [pd.NA, 0, 60, pd.NA, pd.NA],
        "file": ["f", "f", "f", "f", "g"],
    })


def test_bandwidth_is_bytes_over_union_read_time_from_lowest_layer():
    bw = A.bandwidth_df(bytes_frame()).set_index("rank")
    assert bw.loc[0, "layer"] == "posix" and bw.loc[1, "layer"] == "app"
    assert bw.loc[0, "read_bytes"] == 100 and bw.loc[0, "read_time_s"] == pytest.approx(3.0)  # union [0,3]
    assert bw.loc[0, "read_sum_s"] == pytest.approx(4.0)
    assert bw.loc[0, "read_bw_MB_per_s"] == pytest.approx(100 / 3.0 / 1e6)
    assert bw.loc[1, "read_bw_MB_per_s"] == pytest.approx(300 / 3.0 / 1e6)
    tot = A.bandwidth_totals(bytes_frame())
    assert tot["read_bytes"] == 400 and tot["slowest_read_time_s"] == pytest.approx(3.0)
    assert tot["aggregate_bw_MB_per_s"] == pytest.approx(400 / 3.0 / 1e6)
    assert tot["bw_over_job_wall_MB_per_s"] == pytest.approx(400 / 5.0 / 1e6)


def test_access_pattern_follows_darshan_sequentiality():
    # first read at 0: Darshan's last byte starts at 0, so neither; then 100 consecutive; 300 leaves a gap
    # (sequential); 50 goes back (random); 150 = 50 + 100 consecutive
    offsets = [0, 100, 300, 50, 150]
    f = to_frame({"layer": "posix", "cat": "io", "name": "pread64", "rank": 0,
                  "start_ns": np.arange(5) * 10, "end_ns": np.arange(5) * 10 + 5,
                  "bytes": [100, 100, 100, 100, 2_000_000], "offset": offsets, "file": "f", "epoch": 0})
    ap = A.access_pattern_df(f).iloc[0]
    assert (ap["files"], ap["reads"], ap["classified"]) == (1, 5, 5)
    assert (ap["consecutive"], ap["sequential"], ap["random"]) == (2, 3, 2)
    assert ap["size_0_100"] == 4 and ap["size_1M_4M"] == 1  # Darshan bins include their upper bound


def test_event_stats_exact():
    st = A.event_stats_df(bytes_frame(), by=("layer", "name")).set_index(["layer", "name"])
    row = st.loc[("posix", "pread64")]
    assert row["count"] == 2 and row["sum_us"] == 4e6 and row["min_us"] == 2e6 and row["max_us"] == 2e6
    assert row["bytes"] == 100 and pd.isna(st.loc[("posix", "close"), "bytes"])


@pytest.mark.parametrize("seed", range(4))
def test_event_stat_parts_equal_a_group_by(seed):
    """The dense-code reduction against the group-by it replaces: missing keys dropped, bytes missing where no row
    of a group has any, sums exact past 2**53."""
    from trace_merge.kernels import event_stat_parts
    from trace_merge.schema import as_text, to_frame

    rng = np.random.default_rng(seed)
    n = 500
    pick = lambda values: [values[i] for i in rng.integers(0, len(values), n)]  # noqa: E731
    dur = rng.integers(0, 2**50, n) if seed % 2 else rng.integers(0, 1000, n)
    names = pick([f"op{i}" for i in range(12)] + [None])
    nbytes = [None if name in ("op0", "op1") or b < 2**38 else int(b)
              for name, b in zip(names, rng.integers(0, 2**40, n))]
    frame = to_frame({"layer": pick(["app", "posix", None]), "cat": pick(["io", "compute", None]), "name": names,
                      "rank": 0, "start_ns": np.zeros(n, dtype=np.int64), "end_ns": dur, "dur_ns": dur,
                      "bytes": pd.array(nbytes, dtype="Int64")})  # op0, op1: no bytes in any row
    for by in (["layer", "cat", "name"], ["name"]):
        g = frame.groupby(by, observed=True)
        want = pd.DataFrame({"count": g.size(), "sum_ns": g["dur_ns"].sum(), "min_ns": g["dur_ns"].min(),
                             "max_ns": g["dur_ns"].max(), "bytes": g["bytes"].sum(min_count=1)}).reset_index()
        for c in by:
            want[c] = as_text(want[c])
        want["bytes"] = pd.array(want["bytes"], dtype="Int64")
        got = event_stat_parts(frame, by).sort_values(by).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want.sort_values(by).reset_index(drop=True), check_exact=True)


def test_compare_df_puts_runs_side_by_side():
    table = A.compare_df([nested_frame(), bytes_frame()], ["nested", "bytes"])
    assert list(table.columns) == ["nested", "bytes", "delta bytes", "ratio bytes"]
    assert table.loc["read_bytes", "bytes"] == 400
    assert table.loc["io_pct", "nested"] == pytest.approx(25.0)
    assert table.loc["read_bytes", "delta bytes"] == 400 - 3000
    assert table.loc["read_bytes", "ratio bytes"] == pytest.approx(400 / 3000)
    # no comm time in either: the ratio to 0 is missing; the verdict is not a number
    assert table.loc["comm_pct", "delta bytes"] == 0 and table.loc["comm_pct", "ratio bytes"] is None
    assert table.loc["verdict", "delta bytes"] is None and table.loc["verdict", "ratio bytes"] is None
    with pytest.raises(ValueError):
        A.compare_df([nested_frame()], ["a", "b"])


def test_compare_df_deltas_and_ratios_against_the_first_run():
    more = bytes_frame()
    more["bytes"] = more["bytes"] * 2  # 800 bytes over the same read times
    table = A.compare_df([bytes_frame(), more, bytes_frame()], ["a", "b", "c"])
    assert list(table.columns) == ["a", "b", "c", "delta b", "ratio b", "delta c", "ratio c"]
    assert (table.loc["read_bytes", "delta b"], table.loc["read_bytes", "ratio b"]) == (400, 2.0)
    assert (table.loc["read_bytes", "delta c"], table.loc["read_bytes", "ratio c"]) == (0, 1.0)
    assert table.loc["aggregate_bw_MB_per_s", "ratio b"] == pytest.approx(2.0)
    assert table.loc["job_wall_s", "delta b"] == 0.0


# -- real traces ------------------------------------------------------------------------------------------


def test_event_stats_match_dftracer_stats_per_name(dftracer_set, tmp_path, bin_dir, tool_env):
    from trace_merge.merge import merge_path

    frame = merge_path(dftracer_set).frame
    ours = A.event_stats_df(frame, by=("name",)).set_index("name")
    out = subprocess.run([str(bin_dir / "dftracer_stats"), "-d", str(dftracer_set), "--index-dir", str(tmp_path),
                          "--report", "detailed", "--json"], capture_output=True, text=True, check=True,
                         env=tool_env)
    theirs: dict[str, dict] = {}
    sizes: dict[str, int] = {}
    for per_file in json.loads(out.stdout):
        det = per_file["detailed"]
        for name, d in det["grouped_duration"].items():
            acc = theirs.setdefault(name, {"count": 0, "sum": 0, "min": np.inf, "max": -np.inf})
            acc["count"] += d["count"]
            acc["sum"] += d["sum"]
            acc["min"] = min(acc["min"], d["min"])
            acc["max"] = max(acc["max"], d["max"])
        for name, d in det.get("grouped_io", {}).items():
            sizes[name] = sizes.get(name, 0) + d["size"]["sum"]
    assert set(theirs) == set(ours.index.astype(str))
    for name, d in theirs.items():
        row = ours.loc[name]
        assert (row["count"], row["sum_us"], row["min_us"], row["max_us"]) == (
            d["count"], d["sum"], d["min"], d["max"]), name
    assert sizes and all(ours.loc[name, "bytes"] == size for name, size in sizes.items())


def test_bandwidth_on_a_real_read_equals_bytes_read_over_read_time(real_run):
    from trace_merge.run import Run

    run_dir, files = real_run
    run = Run.open(run_dir)
    bw = run.bandwidth()
    expected_bytes = 2 * sum(p.stat().st_size for p in files)  # two epochs read every file whole
    assert bw["layer"].tolist() == ["posix"] and bw["read_bytes"].tolist() == [expected_bytes]
    reads = run.frame[(run.frame["layer"] == "posix") & (run.frame["name"] == "read")]
    union = I.union_ns(reads["start_ns"], reads["end_ns"])
    assert bw["read_time_s"].iloc[0] == pytest.approx(union / 1e9)
    assert bw["read_bw_MB_per_s"].iloc[0] == pytest.approx(expected_bytes / 1e6 / (union / 1e9))
    # the app layer alone (TimeLogger's own bytes) gives the same bytes over its Load File phases
    app = run.frame[run.frame["layer"] == "app"]
    app_bw = A.bandwidth_df(app)
    load = app[app["name"] == "Load File"]
    assert app_bw["read_bytes"].tolist() == [expected_bytes]
    assert app_bw["read_time_s"].iloc[0] == pytest.approx(load["dur_ns"].sum() / 1e9)


def test_breakdown_of_a_real_run(real_run):
    from trace_merge.run import Run

    run = Run.open(real_run[0])
    bd = run.breakdown()
    per_epoch = bd[bd["epoch"].notna()]
    assert per_epoch["epoch"].tolist() == [0, 1] and per_epoch["rank"].tolist() == [0, 0]
    np.testing.assert_allclose(bd[PCT].sum(axis=1), 100.0)
    assert (per_epoch["io_pct"] > 0).all() and (per_epoch["compute_pct"] > 0).all()
    app = run.frame[run.frame["layer"] == "app"]
    for epoch, rows in app.groupby("epoch"):
        load = rows[rows["name"] == "Load File"]
        row = per_epoch[per_epoch["epoch"] == epoch].iloc[0]
        assert row["io_s"] == pytest.approx(load["dur_ns"].sum() / 1e9)
        assert row["wall_s"] == pytest.approx((rows["end_ns"].max() - rows["start_ns"].min()) / 1e9)


def test_access_pattern_matches_darshan_counters_on_a_real_dxt_log(darshan_logs):
    import darshan

    from trace_merge.run import Run

    log = darshan_logs / "dxt.darshan"
    counters = darshan.DarshanReport(str(log), read_all=True).records["POSIX"].to_df()["counters"]
    ap = Run.open(log).access_pattern().sum()
    assert ap["reads"] == counters["POSIX_READS"].sum()
    assert ap["consecutive"] == counters["POSIX_CONSEC_READS"].sum()
    # 4 of 4696 differ: reads on pipes, whose DXT offsets are not the positions Darshan's counters tracked
    assert ap["sequential"] == pytest.approx(counters["POSIX_SEQ_READS"].sum(), abs=5)
    for b, _ in A.SIZE_BINS:
        assert ap[f"size_{b}"] == counters[f"POSIX_SIZE_READ_{b}"].sum(), b


@pytest.mark.mpi
def test_aggregate_bandwidth_of_a_real_two_rank_run(tmp_path, real_run_factory):
    from trace_merge.run import Run

    run_dir, files = real_run_factory(tmp_path, sizes=(2_000_000, 1_000_000), epochs=1, ranks=2)
    run = Run.open(run_dir)
    bw = run.bandwidth()
    per_rank = sum(p.stat().st_size for p in files)
    assert bw["rank"].tolist() == [0, 1] and bw["layer"].tolist() == ["posix", "posix"]
    assert bw["read_bytes"].tolist() == [per_rank, per_rank]
    tot = A.bandwidth_totals(run.frame)
    slowest = bw["read_time_s"].max()
    assert tot["read_bytes"] == 2 * per_rank and tot["slowest_read_time_s"] == pytest.approx(slowest)
    assert tot["aggregate_bw_MB_per_s"] == pytest.approx(2 * per_rank / 1e6 / slowest)
    assert tot["bw_over_job_wall_MB_per_s"] == pytest.approx(2 * per_rank / 1e6 / (A.job_wall_ns(run.frame) / 1e9))
    bd = run.breakdown()
    assert sorted(set(bd["rank"])) == [0, 1]
    np.testing.assert_allclose(bd[PCT].sum(axis=1), 100.0)


def test_layer_activity_is_union_per_layer_and_rank_over_job_wall() -> None:
    ms = 1_000_000
    frame = to_frame({
        "layer": ["app", "app", "posix", "posix", "comm"],
        "cat": ["io", "io", "io", "io", "comm"],
        "name": ["Load File", "HDF5 File Read", "pread64", "pread64", "ALLREDUCE"],
        "rank": [0, 0, 0, 1, 0],
        # app: nested 0-40 ms ⊃ 10-20 ms; posix rank 0: 10-15 ms; posix rank 1: 50-60 ms; comm: 70-100 ms
        "start_ns": [0, 10 * ms, 10 * ms, 50 * ms, 70 * ms],
        "end_ns": [40 * ms, 20 * ms, 15 * ms, 60 * ms, 100 * ms],
    })
    got = A.layer_activity_df(frame).set_index(["layer", "rank"])
    assert got.loc[("app", 0), "events"] == 2
    assert got.loc[("app", 0), "busy_s"] == pytest.approx(0.040)  # union, not the 50 ms sum
    assert got.loc[("posix", 0), "busy_s"] == pytest.approx(0.005)
    assert got.loc[("posix", 1), "busy_s"] == pytest.approx(0.010)
    assert got.loc[("comm", 0), "busy_pct"] == pytest.approx(30.0)  # 30 ms of the 100 ms job
    assert len(got) == 4
    assert list(A.layer_activity_df(frame.iloc[:0]).columns) == ["layer", "rank", "events", "busy_s", "busy_pct"]


def test_combined_codes_packed_keys_give_the_per_key_codes(sweeps: str) -> None:
    """Integer keys packed into one int64 give the codes of factorising key by key (dense, in order of first
    appearance), whatever their types and ranges, numbered by a table of the span (C) or hashed; keys whose spans
    cannot be packed take the per-key path."""
    def per_key(*keys: np.ndarray) -> np.ndarray:
        code = np.zeros(keys[0].size, dtype=np.int64)
        for k in keys:
            kc, uniq = pd.factorize(k)
            code = code * len(uniq) + kc
        return pd.factorize(code)[0]

    rng = np.random.default_rng(7)
    packed = 0
    for _ in range(150):
        n = int(rng.integers(1, 1500))
        keys = []
        for _ in range(int(rng.integers(1, 4))):
            dtype = rng.choice([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64, bool])
            if dtype is bool:
                keys.append(rng.integers(0, 2, n).astype(bool))
                continue
            info = np.iinfo(dtype)
            base = int(rng.integers(max(info.min, -10**12), min(info.max, 10**12) - 50))
            k = (base + rng.integers(0, int(rng.choice([2, 7, 40, 10**6])), n)).astype(dtype)
            if rng.random() < 0.15:  # the type's extremes: int64's span cannot be packed
                k[0], k[-1] = info.min, info.max
            keys.append(k)
        packed += I._packed(tuple(keys)) is not None
        got = I.combined_codes(*keys)
        assert got.dtype == np.int64 and np.array_equal(got, per_key(*keys))
    assert 50 < packed < 150  # both paths were taken
    # keys near int64's ends with small spans pack (the code wraps on the way and comes back exact)
    top = np.iinfo(np.int64).max - rng.integers(0, 40, 500)
    bottom = np.iinfo(np.int64).min + rng.integers(0, 3, 500)
    assert I._packed((bottom, top)) is not None
    assert np.array_equal(I.combined_codes(bottom, top), per_key(bottom, top))
    names = np.array(["b", "a", "b"], dtype=object)  # not integers: the per-key path
    assert I._packed((names,)) is None and I.combined_codes(names, np.array([1, 1, 1])).tolist() == [0, 1, 0]
