"""Pins on attribution: epoch/step propagation, the app-layer breakdown against a per-ns oracle, rank mapping.

Every expectation here is an exact value (lists, ns counts), never ``(col == x).all()``, which passes on
``<NA>``. The oracle hard-codes the priority order so that changing :data:`PRIORITY` in the source fails.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trace_merge import align as al
from trace_merge import attribution as AT
from trace_merge.merge import merge_sources
from trace_merge.readers.pfw import TimeLoggerMeta
from trace_merge.schema import SourceMeta, to_frame

#: io > comm > checkpoint > preprocess > compute > wait > other (first wins), written out on purpose
ORDER = ("io", "comm", "checkpoint", "preprocess", "compute", "wait", "other")


def tags(col: pd.Series) -> list:
    """A nullable column as a plain list, ``None`` for missing (so ``<NA>`` compares unequal to a number)."""
    return col.astype(object).where(col.notna(), None).tolist()


def test_priority_order_is_pinned():
    assert AT.PRIORITY == ORDER


# -- epoch/step propagation -------------------------------------------------------------------------------

# (layer, name, rank, start, end, epoch, step, expected epoch, expected step)
_NA = None
PROPAGATION_ROWS = [
    # the app layer: a Train Loop over two epochs, tagged (at its end) with the last epoch and step; a
    # container keeps neither tag (it would stretch the last epoch's window over the run)
    ("app", "Train Loop", 0, 0, 1000, 2, 25, _NA, _NA),
    ("app", "Epoch", 0, 100, 400, 1, 12, 1, _NA),  # tagged at its end with its last step: a step container
    ("app", "Training Iteration", 0, 110, 150, 1, 10, 1, 10),
    ("app", "Training Iteration", 0, 160, 200, 1, 11, 1, 11),
    ("app", "Training Iteration", 0, 250, 300, 1, 12, 1, 12),
    ("app", "Epoch", 0, 500, 800, 2, 25, 2, _NA),
    ("app", "Training Iteration", 0, 510, 550, 2, 24, 2, 24),
    ("app", "Training Iteration", 0, 600, 650, 2, 25, 2, 25),
    # inside iterations: that iteration's epoch and step
    ("posix", "read", 0, 115, 120, _NA, _NA, 1, 10),
    ("framework", "op", 0, 130, 140, _NA, 0, 1, 10),  # a reader's own (per-epoch) step is replaced
    ("posix", "read", 0, 160, 200, _NA, _NA, 1, 11),  # exactly the iteration's span
    ("framework", "op", 0, 170, 190, _NA, _NA, 1, 11),
    ("posix", "read", 0, 250, 260, _NA, _NA, 1, 12),  # starts at the same ns as its iteration
    ("posix", "read", 0, 290, 300, _NA, _NA, 1, 12),  # ends at the same ns as its iteration
    ("framework", "op", 0, 520, 540, _NA, _NA, 2, 24),
    ("posix", "read", 0, 600, 610, _NA, _NA, 2, 25),
    # inside an Epoch but in no iteration: the epoch, no step (not the Epoch's end-of-phase step)
    ("posix", "read", 0, 100, 105, _NA, _NA, 1, _NA),  # starts at the same ns as the Epoch
    ("posix", "read", 0, 205, 240, _NA, _NA, 1, _NA),  # between two iterations
    ("posix", "read", 0, 140, 170, _NA, _NA, 1, _NA),  # crosses from one iteration into the next
    ("posix", "read", 0, 700, 790, _NA, _NA, 2, _NA),
    # inside the Train Loop only: it spans two epochs, so it lends neither epoch nor step
    ("posix", "read", 0, 50, 60, _NA, _NA, _NA, _NA),
    ("posix", "read", 0, 450, 480, _NA, _NA, _NA, _NA),
    ("posix", "read", 0, 390, 510, _NA, _NA, _NA, _NA),  # crosses out of epoch 1 into epoch 2
    # outside everything: nothing, or what the reader gave
    ("posix", "read", 0, 1100, 1200, _NA, _NA, _NA, _NA),
    ("framework", "op", 0, 1100, 1150, 7, 3, 7, 3),
    # another rank (no app rows of its own) is not lent rank 0's tags
    ("posix", "read", 1, 115, 120, _NA, _NA, _NA, _NA),
]


def propagation_frame() -> pd.DataFrame:
    """:data:`PROPAGATION_ROWS` as a frame; ``offset`` holds the row's index there (a row id for the checks)."""
    cols = list(zip(*PROPAGATION_ROWS))
    return to_frame({
        "layer": list(cols[0]), "cat": "other", "name": list(cols[1]), "rank": list(cols[2]),
        "pid": 1, "tid": 1, "start_ns": list(cols[3]), "end_ns": list(cols[4]),
        "epoch": list(cols[5]), "step": list(cols[6]), "offset": range(len(PROPAGATION_ROWS)),
    })


@pytest.mark.parametrize("order", ["time", "as_built", "reversed"])
def test_propagate_steps_exact_epoch_and_step_of_every_row(order):
    frame = propagation_frame()
    if order == "time":
        frame = al.time_order(frame)
    elif order == "reversed":
        frame = frame.iloc[::-1].reset_index(drop=True)
    out = al.propagate_steps(frame)
    ids = out["offset"].tolist()
    assert sorted(ids) == list(range(len(PROPAGATION_ROWS)))
    assert list(zip(ids, tags(out["epoch"]))) == [(i, PROPAGATION_ROWS[i][7]) for i in ids]
    assert list(zip(ids, tags(out["step"]))) == [(i, PROPAGATION_ROWS[i][8]) for i in ids]
    assert str(out["epoch"].dtype) == str(out["step"].dtype) == "Int64"


def test_propagate_steps_through_align_on_one_rank():
    """The same rows through :func:`~trace_merge.merge.merge_sources` (rank mapping by pid, time order, then
    propagation)."""
    from trace_merge.schema import SourceData

    app_rows = [r for r in PROPAGATION_ROWS if r[0] == "app"]
    px_rows = [r for r in PROPAGATION_ROWS if r[0] == "posix" and r[2] == 0]

    def frame_of(rows, layer):
        cols = list(zip(*rows))
        return to_frame({"layer": layer, "cat": "io", "name": list(cols[1]),
                         "rank": 0 if layer == "app" else -1, "pid": 4242, "tid": 1, "host": "nodeA",
                         "start_ns": np.array(cols[3]) + 10**18, "end_ns": np.array(cols[4]) + 10**18,
                         "epoch": list(cols[5]), "step": list(cols[6])})

    app = SourceData(path="app/rank-0.pfw", kind="timelogger", frame=frame_of(app_rows, "app"),
                     meta=TimeLoggerMeta(rank=0, pid=4242, host="nodeA"))
    px = SourceData(path="posix/trace.pfw.gz", kind="dftracer", frame=frame_of(px_rows, "posix"))
    f = merge_sources([app, px]).frame
    posix = f[f["layer"] == "posix"].sort_values(["start_ns", "end_ns"], kind="stable")
    want = sorted((r[3] + 10**18, r[4] + 10**18, r[7], r[8]) for r in px_rows)
    got = list(zip(posix["start_ns"], posix["end_ns"], tags(posix["epoch"]), tags(posix["step"])))
    assert got == want
    assert posix["rank"].tolist() == [0] * len(px_rows)


# -- the app-layer breakdown against a per-nanosecond oracle ----------------------------------------------

SPAN = 200


def nested_thread(rng: np.random.Generator, lo: int, hi: int, depth: int, out: list) -> None:
    """Properly nested phases inside [lo, hi]: disjoint siblings, each holding its own children; a child may
    share its parent's start or end."""
    k = int(rng.integers(1 if depth == 0 else 0, 4))
    points = np.arange(lo, hi + 1)
    if depth > 4 or k == 0 or len(points) < 2:
        return
    cut = np.sort(rng.choice(points, size=min(2 * k, len(points) // 2 * 2), replace=False)).tolist()
    for a, b in zip(cut[::2], cut[1::2]):
        out.append((a, b))
        nested_thread(rng, a, b, depth + 1, out)


def crossing_thread(rng: np.random.Generator, n: int) -> list:
    """Arbitrary intervals, crossing and with shared starts (async events on one thread)."""
    s = rng.integers(0, SPAN - 1, n)
    e = np.minimum(s + rng.integers(1, 80, n), SPAN)
    return list(zip(s.tolist(), e.tolist()))


def oracle_frame(seed: int, crossing: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for tid in range(int(rng.integers(1, 5))):
        ivs: list = []
        if crossing:
            ivs = crossing_thread(rng, int(rng.integers(1, 12)))
        else:
            while not ivs:
                nested_thread(rng, 0, SPAN, 0, ivs)
        for s, e in dict.fromkeys(ivs):  # no exact duplicates on one thread: which of two twins is inner is arbitrary
            rows.append((tid, s, e, str(rng.choice(ORDER))))
    rows = [rows[i] for i in rng.permutation(len(rows))]  # frame order must not matter
    tid, s, e, cat = zip(*rows)
    base = 1_700_000_000 * 10**9
    return to_frame({"layer": "app", "cat": list(cat), "name": "x", "rank": 3, "pid": 9, "tid": list(tid),
                     "start_ns": np.array(s) + base, "end_ns": np.array(e) + base,
                     "epoch": 0, "step": 0})


def oracle(frame: pd.DataFrame) -> dict:
    """Per ns: per thread the innermost open interval (latest start; same start: the shorter), its cat;
    across threads the first of :data:`ORDER`. Returns the ns counts the functions under test must give."""
    s = frame["start_ns"].to_numpy()
    e = frame["end_ns"].to_numpy()
    lo, hi = int(s.min()), int(e.max())
    tid = frame["tid"].to_numpy()
    cat = frame["cat"].astype(str).to_numpy()
    excl = dict.fromkeys(ORDER, 0)
    raw = dict.fromkeys(ORDER, 0)
    inp = comp = overlap = 0
    per_thread: list = []  # per ns: thread -> its innermost cat
    for t in range(lo, hi):
        open_ = (s <= t) & (t < e)
        inner_of = {}
        for th in np.unique(tid[open_]):
            idx = np.flatnonzero(open_ & (tid == th))
            best = max(idx, key=lambda i: (s[i], -e[i]))
            inner_of[int(th)] = cat[best]
        inner = set(inner_of.values())
        excl[next((c for c in ORDER if c in inner), "other")] += 1
        for c in set(cat[open_]):
            raw[c] += 1
        i_ = bool(inner & {"io", "wait"})
        c_ = "compute" in inner
        inp += i_
        comp += c_
        overlap += i_ and c_
        per_thread.append(inner_of)
    return {"wall": hi - lo, "excl": excl, "raw": raw, "input": inp, "compute": comp, "overlap": overlap,
            "per_thread": per_thread}


def check_against_oracle(frame: pd.DataFrame) -> None:
    want = oracle(frame)
    wall = want["wall"]
    bd = AT.breakdown_df(frame, include_total=True)
    total = bd[bd["epoch"].isna()]
    assert len(total) == 1 and total["rank"].tolist() == [3]
    row = total.iloc[0]
    assert round(row["wall_s"] * 1e9) == wall
    got = {c: round(row[f"{c}_pct"] * wall / 100) for c in ORDER}
    assert got == want["excl"]
    assert {c: round(row[f"{c}_s"] * 1e9) for c in ORDER} == want["raw"]
    ex = AT.exposed_io_df(frame)
    ex = ex[ex["epoch"].isna()].iloc[0]
    assert [round(ex[k] * 1e9) for k in ("input_s", "compute_s", "overlap_s", "exposed_s")] == [
        want["input"], want["compute"], want["overlap"], want["input"] - want["overlap"]]
    ib = AT.input_bound_df(frame).iloc[0]
    # every row has step 0: one step, marked by the compute rows where there are some (DLIO's compute events
    # mark its steps), else by every tagged row (the whole run)
    comp = frame[frame["cat"] == "compute"]
    marks = comp if len(comp) else frame
    # the consumer: the threads of the marking rows; the step's cycle runs to the epoch's last fetch (a wait row
    # of a consumer: the one that finds the data exhausted); a cycle's compute is the step's work (collectives
    # included), its input wait a consumer's io/wait while no consumer thread computes
    consumer = set(marks["tid"].tolist())
    fetches = frame[(frame["cat"] == "wait") & frame["tid"].isin(consumer)]
    lo = int(frame["start_ns"].min())
    a = int(marks["start_ns"].min()) - lo
    b = max(int(marks["end_ns"].max()), int(fetches["end_ns"].max()) if len(fetches) else 0) - lo
    assert ib["basis"] == "app" and round(ib["step_s"] * 1e9) == b - a
    busy = exposed = 0
    for inner_of in want["per_thread"][a:b]:
        mine = {c for th, c in inner_of.items() if th in consumer}
        busy += bool(mine & {"compute", "comm"})
        exposed += bool(mine & {"io", "wait"}) and not mine & {"compute", "comm"}
    assert round(ib["input_wait_s"] * 1e9) == exposed
    assert round(ib["compute_s"] * 1e9) == busy


@pytest.mark.parametrize("seed", range(60))
def test_breakdown_matches_per_ns_oracle_nested(seed):
    check_against_oracle(oracle_frame(seed, crossing=False))


@pytest.mark.parametrize("seed", range(60))
def test_breakdown_matches_per_ns_oracle_crossing(seed):
    check_against_oracle(oracle_frame(1000 + seed, crossing=True))


def two_threads(outer: str, inner: str) -> pd.DataFrame:
    """Thread 1: ``outer`` over [0, 100); thread 2: ``inner`` over [20, 50)."""
    return to_frame({"layer": "app", "cat": [outer, inner], "name": ["a", "b"], "rank": 0, "pid": 1,
                     "tid": [1, 2], "start_ns": [0, 20], "end_ns": [100, 50], "epoch": 0, "step": 0})


@pytest.mark.parametrize("long,short,want", [
    ("comm", "io", {"io": 30, "comm": 70}), ("io", "comm", {"io": 100}),
    ("compute", "wait", {"compute": 100}), ("wait", "compute", {"compute": 30, "wait": 70}),
    ("preprocess", "checkpoint", {"checkpoint": 30, "preprocess": 70}),
    ("checkpoint", "preprocess", {"checkpoint": 100}),
])
def test_priority_across_threads_explicit(long, short, want):
    """``long`` on thread 1 over [0, 100), ``short`` on thread 2 over [20, 50): [20, 50) goes to the one
    earlier in io > comm > checkpoint > preprocess > compute > wait."""
    row = AT.breakdown_df(two_threads(long, short)).iloc[-1]
    assert {c: round(row[f"{c}_pct"], 9) for c in ORDER} == {c: want.get(c, 0) for c in ORDER}


def test_wait_on_one_thread_while_another_computes_is_hidden():
    """wait (thread 2) under compute (thread 1): compute wins the breakdown, the wait is overlap, not exposed."""
    f = two_threads("compute", "wait")
    ex = AT.exposed_io_df(f).iloc[-1]
    assert [round(ex[k] * 1e9) for k in ("input_s", "compute_s", "overlap_s", "exposed_s")] == [30, 100, 30, 0]
    ib = AT.input_bound_df(f).iloc[0]
    # the compute rows mark the step, so thread 1 is the training loop: thread 2's wait is not the loop waiting;
    # a compute event (not a step phase) does not hold its fetch, so the loop computing all of its cycle is the
    # answer (a step phase could hold it, below)
    assert (ib["input_pct"], ib["au_pct"], ib["verdict"]) == (0.0, 100.0, "not input-bound")
    phase = f.assign(name=pd.Series(["Training Iteration", "b"]).astype("category"))
    assert AT.input_bound_df(phase).iloc[0]["verdict"] == "unknown"
    # the other way round, on one thread: wait nested in compute is exposed
    one = f.assign(tid=np.array([1, 1]))
    ex1 = AT.exposed_io_df(one).iloc[-1]
    assert [round(ex1[k] * 1e9) for k in ("input_s", "compute_s", "overlap_s", "exposed_s")] == [30, 70, 0, 30]


def test_innermost_on_one_thread_beats_priority():
    """One thread: io phase around a compute phase -> the inner compute owns its time, though io ranks higher."""
    f = to_frame({"layer": "app", "cat": ["io", "compute"], "name": ["a", "b"], "rank": 0, "pid": 1, "tid": 1,
                  "start_ns": [0, 20], "end_ns": [100, 50]})
    row = AT.breakdown_df(f).iloc[-1]
    assert (row["io_pct"], row["compute_pct"]) == pytest.approx((70.0, 30.0))
    # same start: the shorter is inner
    g = to_frame({"layer": "app", "cat": ["io", "compute"], "name": ["a", "b"], "rank": 0, "pid": 1, "tid": 1,
                  "start_ns": [0, 0], "end_ns": [30, 100]})
    row = AT.breakdown_df(g).iloc[-1]
    assert (row["io_pct"], row["compute_pct"]) == pytest.approx((30.0, 70.0))


# -- rank mapping across hosts ----------------------------------------------------------------------------


def test_assign_ranks_uses_host_and_pid():
    """Two hosts, one pid each, the same pid: each host's rows get their own host's rank."""
    procs = [al.Process(rank=0, pid=1234, host="nodeA"), al.Process(rank=1, pid=1234, host="nodeB"),
             al.Process(rank=2, pid=777, host="nodeB")]
    hosts = ["nodeB", "nodeA", "nodeB", None, "nodeA", None, "nodeA", "nodeB"]
    pids = [1234, 1234, 1234, 777, 1234, 1234, 999, 777]
    frame = to_frame({"layer": "posix", "cat": "io", "name": "read", "rank": -1, "pid": pids, "tid": 1,
                      "host": hosts, "start_ns": np.arange(8) * 10, "end_ns": np.arange(8) * 10 + 5})
    out = al.assign_ranks(frame, procs, "posix/trace-a.pfw.gz")
    # missing host: pid alone (777 is only rank 2; 1234 goes to the first process with that pid);
    # an unknown process keeps the reader's rank (no rank in the file name)
    assert out["rank"].tolist() == [1, 0, 1, 2, 0, 0, -1, 2]
    # an unknown process takes the rank named in the file name
    out = al.assign_ranks(frame, procs, "posix/rank-5/trace.pfw.gz")
    assert out["rank"].tolist() == [1, 0, 1, 2, 0, 0, 5, 2]


def test_align_two_hosts_same_pid():
    """Through :func:`~trace_merge.merge.merge_sources`: app files of rank 0 on nodeA and rank 1 on nodeB, both pid
    1234; each host's DFTracer rows land on their host's rank (and get that rank's clock offset)."""
    from trace_merge.schema import SourceData

    def src(layer, kind, host, rank, path, meta):
        return SourceData(path=path, kind=kind, meta=meta, frame=to_frame({
            "layer": layer, "cat": "io", "name": "x", "rank": rank, "pid": 1234, "tid": 1, "host": host,
            "start_ns": [10**18, 10**18 + 100], "end_ns": [10**18 + 50, 10**18 + 150]}))

    sources = [
        src("app", "timelogger", "nodeA", 0, "app/rank-0.pfw",
            TimeLoggerMeta(rank=0, pid=1234, host="nodeA")),
        src("app", "timelogger", "nodeB", 1, "app/rank-1.pfw",
            TimeLoggerMeta(rank=1, pid=1234, host="nodeB", clock_offset_ns=7)),
        src("posix", "dftracer", "nodeB", -1, "posix/b.pfw.gz", SourceMeta()),
        src("posix", "dftracer", "nodeA", -1, "posix/a.pfw.gz", SourceMeta()),
    ]
    f = merge_sources(sources).frame
    px = f[f["layer"] == "posix"]
    got = sorted(zip(px["host"].astype(str), px["rank"], px["start_ns"] - 10**18))
    assert got == [("nodeA", 0, 0), ("nodeA", 0, 100), ("nodeB", 1, -7), ("nodeB", 1, 93)]


def test_crossing_interval_does_not_take_the_time_of_one_it_contains():
    """One thread: X (compute) starts inside two phases that end before Y (io) starts; X contains Y.
    Y is the innermost interval over [20, 30), whatever X's nesting count at its own start was."""
    f = to_frame({"layer": "app", "cat": ["other", "other", "compute", "io"], "name": ["p1", "p2", "x", "y"],
                  "rank": 0, "pid": 1, "tid": 1, "start_ns": [0, 1, 2, 20], "end_ns": [12, 12, 100, 30]})
    row = AT.breakdown_df(f).iloc[-1]
    assert {c: round(row[f"{c}_pct"], 9) for c in ("io", "compute", "other")} == {"io": 10, "compute": 88, "other": 2}


def test_propagate_steps_lends_tags_exactly_beyond_float_precision():
    """Tags are int64 end to end: a step of 2**53 + 1 (a float would round it to 2**53) reaches the read inside it."""
    big = 2**53 + 1
    frame = to_frame({"layer": ["app", "posix"], "cat": ["compute", "io"], "name": ["step", "read"], "rank": 0,
                      "pid": 1, "tid": 1, "start_ns": [0, 10], "end_ns": [100, 20],
                      "epoch": pd.array([big + 2, None], dtype="Int64"), "step": pd.array([big, None], dtype="Int64")})
    assert frame["step"].tolist() == [big, pd.NA]
    out = al.propagate_steps(frame)
    assert out["step"].tolist() == [big, big] and out["epoch"].tolist() == [big + 2, big + 2]
