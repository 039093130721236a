"""Clock alignment, rank mapping and epoch/step propagation on a real TimeLogger + DFTracer run.

The workload (no TensorFlow, so it is fast) reads files inside nested app phases, in the main process
and in a forked child, under the DFTracer preload.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.runs import make_data, preload_env
from tests.helpers.traces import shift_dftracer_trace
from trace_merge import align as al
from trace_merge import intervals as I
from trace_merge.merge import merge_sources
from trace_merge.readers import read_any
from trace_merge.schema import concat_frames, to_frame

READ_LOOP = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from timelogger import TimeLogger

    run, data = Path(sys.argv[1]), Path(sys.argv[2])
    files = sorted(data.glob("*.bin"))
    tl = TimeLogger(run, rank=0, world_size=1)

    def read(path):
        with tl.phase("Load File", cat="io") as p:
            with open(path, "rb") as fh:
                p.update(bytes=len(fh.read()), file=str(path))

    with tl.phase("Train Loop"):
        for epoch in range(2):
            tl.set_epoch(epoch)
            with tl.phase("Epoch"):
                for step in range(2):
                    tl.set_step(epoch * 2 + step)
                    with tl.phase("Training Iteration", cat="compute"):
                        read(files[step])
                        time.sleep(0.005)
                tl.set_step(None)
                with tl.phase("Checkpoint", cat="checkpoint"):
                    read(files[2])
        pid = os.fork()
        if pid == 0:  # a loader worker: its own app file, the parent's rank
            with tl.phase("Worker Read", cat="io"):
                read(files[0])
            tl.close()
            os._exit(0)
        os.waitpid(pid, 0)
    tl.close()
    """
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("align")
    run, data = tmp / "run", tmp / "data"
    make_data(data)
    (run / "posix").mkdir(parents=True)
    script = tmp / "read_loop.py"
    script.write_text(READ_LOOP)
    subprocess.run([sys.executable, str(script), str(run), str(data)], check=True, timeout=120,
                   env=preload_env(run / "posix" / "trace", data), capture_output=True)
    return run


def sources(run: Path) -> list:
    files = sorted((run / "app").glob("*.pfw")) + sorted((run / "posix").glob("*.pfw*"))
    return [read_any(p) for p in files]


def test_posix_rows_get_rank_epoch_step_from_app(run: Path) -> None:
    srcs = sources(run)
    app = [s for s in srcs if s.kind == "timelogger"]
    assert len(app) == 2, "main process and forked child each write an app file"
    posix = [s for s in srcs if s.kind == "dftracer"]
    assert posix and all((s.frame["rank"] == -1).all() for s in posix)  # DFTracer knows no rank
    res = merge_sources(srcs)
    f = res.frame
    px = f[f["layer"] == "posix"]
    assert len(px) and (px["rank"] == 0).all(), "rank mapped through (host, pid) of the app files"
    assert set(px["pid"]) == {int(s.meta.pid) for s in app}, "the forked child's reads are traced too"
    reads = px[px["name"].astype(str).isin(["read", "pread64", "open64", "open"])]
    iters = f[(f["layer"] == "app") & (f["name"] == "Training Iteration")]
    for it in iters.itertuples():
        inside = reads[(reads["start_ns"] >= it.start_ns) & (reads["end_ns"] <= it.end_ns)]
        assert len(inside), f"reads of step {it.step}"
        # exact lists: a <NA> (nothing propagated) must fail, not be skipped by .all()
        assert inside["step"].fillna(-1).tolist() == [it.step] * len(inside)
        assert inside["epoch"].fillna(-1).tolist() == [it.epoch] * len(inside)
    # the checkpoint read after set_step(None) gets the epoch of its enclosing phase but no step
    ckpt = f[(f["layer"] == "app") & (f["name"] == "Checkpoint")]
    for c in ckpt.itertuples():
        inside = reads[(reads["start_ns"] >= c.start_ns) & (reads["end_ns"] <= c.end_ns)]
        assert len(inside) and inside["step"].isna().all()
        assert inside["epoch"].fillna(-1).tolist() == [c.epoch] * len(inside)
    # reads outside every tagged interval keep nulls (the child's read after the epochs)
    worker = f[(f["layer"] == "app") & (f["name"] == "Worker Read")].iloc[0]
    wr = reads[(reads["start_ns"] >= worker.start_ns) & (reads["end_ns"] <= worker.end_ns)]
    assert len(wr) and (wr["pid"] == worker.pid).all()


def test_innermost_interval_wins() -> None:
    # parent [0, 100] step 1; children [10, 20] step 2, [30, 60] step 3 with grandchild [40, 50] step 4
    starts = np.array([0, 10, 30, 40])
    ends = np.array([100, 20, 60, 50])
    q_start = np.array([5, 12, 35, 41, 55, 70, 20, 150])
    q_end = np.array([6, 18, 36, 49, 58, 80, 35, 160])
    got = I.innermost(starts, ends, q_start, q_end)
    assert got.tolist() == [0, 1, 2, 3, 2, 0, 0, -1]


@pytest.mark.parametrize("seed", range(12))
def test_innermost_equals_the_climb_from_the_last_start(seed: int, sweeps: str) -> None:
    """Compiled or vectorised: from the last interval starting at or before a query, up the forest to the first
    that ends at or after the query's end (crossing intervals, equal starts; queries in start order, and not)."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 300)), int(rng.integers(1, 400))
    starts = rng.integers(0, 1000, n)
    ends = starts + rng.integers(1, 300 if seed % 2 else 20, n)
    order = I.start_order(starts, starts - ends)
    s, e = starts[order], ends[order]
    parent = I.nesting_parents(s, e)
    q_start = rng.integers(-10, 1100, m)
    if seed % 3:
        q_start = np.sort(q_start)
    q_end = q_start + rng.integers(0, 50, m)

    def climb(qs: int, qe: int) -> int:
        i = int(np.searchsorted(s, qs, "right")) - 1
        while i >= 0 and e[i] < qe:
            i = int(parent[i])
        return i

    got = I.innermost(s, e, q_start, q_end, parent)
    assert got.dtype == np.int64
    assert got.tolist() == [climb(a, b) for a, b in zip(q_start.tolist(), q_end.tolist())]


@pytest.mark.parametrize("seed", range(16))
def test_self_segments_tile_each_thread_by_its_innermost_open_interval(seed: int, monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:
    """Each instant of a thread belongs to its innermost open interval (the latest-started one still open): the C
    pass and numpy's give the same segments in the same order, and every ns of them is checked against that rule
    (nested, crossing and equal-start intervals on a few threads)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    groups = rng.integers(0, 1 + seed % 3, n)
    starts = rng.integers(0, 400, n)
    ends = starts + rng.integers(1, 120 if seed % 2 else 15, n)
    assert I._sweep is not None, "pip install did not compile trace_merge/_sweep.c"
    compiled = I.self_segments(groups, starts, ends)
    monkeypatch.setattr(I, "_sweep", None)
    vectorised = I.self_segments(groups, starts, ends)
    for a, b in zip(compiled, vectorised):
        assert a.tolist() == b.tolist()
    seg_s, seg_e, owner = compiled
    for g in np.unique(groups):
        mine = np.flatnonzero(groups == g)
        order = I.start_order(starts[mine], starts[mine] - ends[mine])
        rows = mine[order]
        for t in range(int(starts[mine].min()), int(ends[mine].max())):
            # the stack sweep up to t: intervals popped once they end at or before the next start, then at t
            held: list[int] = []
            for r in (int(r) for r in rows if starts[r] <= t):
                while held and ends[held[-1]] <= starts[r]:
                    held.pop()
                held.append(r)
            while held and ends[held[-1]] <= t:
                held.pop()
            want = held[-1] if held else None
            got = [int(o) for s, e, o in zip(seg_s, seg_e, owner) if groups[o] == g and s <= t < e]
            assert got == ([want] if want is not None else []), (g, t, got, want)


def test_clock_offset_subtracted_per_rank(run: Path) -> None:
    srcs = sources(run)
    raw = {s.path: s.frame for s in srcs}
    for s in srcs:
        if s.kind == "timelogger":
            s.meta.clock_offset_ns = 2_500_000  # this rank's clock runs 2.5 ms ahead of rank 0's
    res = merge_sources(srcs)
    assert res.clock_offsets_ns == {0: 2_500_000}
    merged_starts = np.sort(res.frame["start_ns"].to_numpy())
    raw_starts = np.sort(pd.concat([f["start_ns"] for f in raw.values()]).to_numpy())
    np.testing.assert_array_equal(merged_starts, raw_starts - 2_500_000)


def test_different_day_source_left_out(run: Path, tmp_path: Path) -> None:
    """A DFTracer trace whose clock is 30 h off (wrong node clock / wrong run) is reported and dropped."""
    src = max((run / "posix").glob("*.pfw.gz"), key=lambda p: p.stat().st_size)  # the main process
    shifted = shift_dftracer_trace(src, tmp_path / src.name, hours=30)
    app = [read_any(p) for p in sorted((run / "app").glob("*.pfw"))]
    res = merge_sources(app + [read_any(shifted)])
    assert str(shifted) not in res.sources
    assert len(res.warnings) == 1 and res.warnings[0].startswith(f"{shifted}: timestamps are +30.0 h")
    assert set(res.frame["layer"].astype(str)) == {"app"}


def test_residual_counts_events_outside_their_step(run: Path) -> None:
    """Framework rows carrying a step: inside their app step -> not outside; shifted 5 ms -> outside."""
    app = [read_any(p) for p in sorted((run / "app").glob("*.pfw"))]
    frame = concat_frames([s.frame for s in app])
    iters = frame[frame["name"] == "Training Iteration"]
    fw = iters.copy()
    fw["layer"] = pd.Categorical(["framework"] * len(fw))
    fw["start_ns"] = fw["start_ns"] + 1000
    fw["end_ns"] = fw["end_ns"] - 1000
    ok = al.alignment_residual(concat_frames([frame, fw]))
    assert ok.checked == len(iters) and ok.outside == 0 and ok.max_outside_ns == 0
    fw["start_ns"] += 5_000_000
    fw["end_ns"] += 5_000_000
    bad = al.alignment_residual(concat_frames([frame, fw]), tolerance_ns=1_000_000)
    assert bad.outside == len(iters) and bad.max_outside_ns >= 5_000_000 - 1000 - 1_000_000
    assert al.Residual.parse(bad.as_dict()) == bad  # merge_info.json's form reads back
    assert al.Residual.parse({"checked": "3", "numbering": "weekly"}) == al.Residual()  # a hand-edited one


def test_enclosing_phase_tag_is_not_propagated() -> None:
    """An Epoch phase tagged (at its end) with its last step must not lend that step to what it holds."""
    # Epoch [0, 100] ends tagged step 7; its iterations [10, 20] step 6 and [30, 40] step 7;
    # an outer Train Loop [0, 200] with step 7 as well.
    starts = np.array([0, 0, 10, 30])
    ends = np.array([200, 100, 20, 40])
    steps = np.array([7.0, 7.0, 6.0, 7.0])
    parent = I.nesting_parents(starts, ends)
    assert parent.tolist() == [-1, 0, 1, 1]
    assert I.spans_several(parent, steps).tolist() == [True, True, False, False]
    # one step everywhere: nothing spans several
    assert not I.spans_several(parent, np.full(4, 3.0)).any()


@pytest.mark.parametrize("seed", range(20))
def test_nesting_parents_equal_the_stack_sweep(seed: int, sweeps: str) -> None:
    """The forest (int32 positions), compiled or vectorised, is the stack sweep's, for shallow traces, for nesting
    deeper than the level-by-level path takes (a sort by depth) and for crossing intervals the sweep steps repair."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 600))
    if seed % 2:  # chains nested up to ~40 deep, some crossing their parent's end
        starts = np.sort(rng.integers(0, 50, n)) * 10 + np.arange(n) % 7
        ends = starts + rng.integers(1, 400, n)
    else:
        starts = rng.integers(0, 5000, n)
        ends = starts + rng.integers(1, 60, n)
    order = I.start_order(starts, starts - ends)
    s, e = starts[order], ends[order]
    got = I.nesting_parents(s, e)
    assert got.dtype == np.int32
    assert got.tolist() == I._nesting_parents_loop(s, e).tolist()


def _thread_parents_by_loop(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """The definition: each thread's own stack sweep over its intervals (in the given order)."""
    parent = np.full(len(starts), -1, dtype=np.int64)
    for t in np.unique(threads):
        idx = np.flatnonzero(threads == t)
        own = I._nesting_parents_loop(starts[idx], ends[idx])  # positions within the thread
        parent[idx] = np.where(own >= 0, idx[np.maximum(own, 0)], -1)
    return parent


@pytest.mark.parametrize("seed", range(30))
def test_thread_forest_from_the_cross_thread_forest_equals_a_sweep_per_thread(seed: int, sweeps: str) -> None:
    """Reader threads' intervals inside the main thread's steps, crossings and equal starts: only the threads whose
    rows have a parent on another thread are swept again, with the same result as a sweep of every thread."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    starts = rng.integers(0, 1000, n)
    ends = starts + rng.integers(1, 200 if seed % 3 else 5, n)  # some seeds: short, rarely nested intervals
    threads = rng.integers(0, 1 + seed % 4, n)  # seed 0, 4, ...: one thread
    order = I.start_order(starts, starts - ends)
    s, e, t = starts[order], ends[order], threads[order]
    forest = I.nesting_parents(s, e)
    got = al._thread_parents(s, e, I.combined_codes(np.full(n, 7), t), forest)
    assert got.tolist() == _thread_parents_by_loop(s, e, t).tolist()


def _random_forest(rng: np.random.Generator, n: int) -> np.ndarray:
    """A nesting forest of ``n`` intervals in start order: each one's parent an earlier interval or none."""
    return np.array([-1 if i == 0 or rng.random() < 0.2 else int(rng.integers(0, i)) for i in range(n)], dtype=np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_forest_edits_equal_their_definitions(seed: int, sweeps: str) -> None:
    """drop_from_forest: each kept node's nearest kept ancestor, re-indexed; spans_several: an interval with a
    descendant of another value (checked against walks up the forest, one node at a time)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    parent = _random_forest(rng, n)
    drop = rng.random(n) < (0.1, 0.5, 0.9)[seed % 3]

    def ancestors(i):
        while parent[i] >= 0:
            i = parent[i]
            yield i

    new_parent, keep = I.drop_from_forest(parent, drop)
    assert keep.tolist() == [i for i in range(n) if not drop[i]]
    narrow_parent, narrow_keep = I.drop_from_forest(parent.astype(np.int32), drop)  # int32 forests stay int32
    assert narrow_parent.dtype == narrow_keep.dtype == np.int32
    assert narrow_parent.tolist() == new_parent.tolist() and narrow_keep.tolist() == keep.tolist()
    where = {int(k): j for j, k in enumerate(keep)}
    assert new_parent.tolist() == [next((where[a] for a in ancestors(int(k)) if not drop[a]), -1) for k in keep]
    # a forest whose parents do not all come first (not a sweep's): the same rule, the nodes climbed in numpy
    shuffled = rng.permutation(n)
    other = np.where(parent[shuffled] >= 0, np.argsort(shuffled)[np.maximum(parent[shuffled], 0)], -1)
    other_drop = drop[shuffled]
    other_parent, other_keep = I.drop_from_forest(other, other_drop)
    at = {int(k): j for j, k in enumerate(other_keep)}

    def climb(i):
        while other[i] >= 0:
            i = other[i]
            if not other_drop[i]:
                return at[int(i)]
        return -1

    assert other_keep.tolist() == np.flatnonzero(~other_drop).tolist()
    assert other_parent.tolist() == [climb(int(k)) for k in other_keep]
    values = rng.integers(0, 3, n) if seed % 2 else (rng.random(n) < 0.05).astype(np.int64)  # few differ: most don't
    several = np.zeros(n, dtype=bool)
    for i in range(n):
        for a in ancestors(i):
            several[a] |= values[a] != values[i]
    assert I.spans_several(parent, values).tolist() == several.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_propagate_steps_in_place_equals_the_copy_and_writes_into_the_frame(seed: int) -> None:
    """``in_place`` writes the tags into the frame's own columns; without it the frame is left as it was."""
    rng = np.random.default_rng(seed)
    frame = concat_frames([_random_piece(rng, 60) for _ in range(3)])
    frame["step"] = pd.array([None if k < 0 else int(k) for k in rng.integers(-1, 5, len(frame))], dtype="Int64")
    before = frame.copy(deep=True)
    copied = al.propagate_steps(frame)
    pd.testing.assert_frame_equal(frame, before)
    assert not copied["step"].equals(before["step"]) or not copied["epoch"].equals(before["epoch"])
    step_buffer = frame["step"].array._data
    got = al.propagate_steps(frame, in_place=True)
    pd.testing.assert_frame_equal(got, copied, check_exact=True)
    assert got is frame and frame["step"].array._data is step_buffer


def _random_piece(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Rows of one piece: few distinct starts (ties across pieces), layers and names from piece-specific sets
    (categories the pieces do not share), some without a layer or a tag."""
    layers = rng.choice(["app", "posix", "framework", None], n)
    return to_frame({"layer": list(layers), "cat": list(rng.choice(["io", "compute", "wait"], n)),
                     "name": [f"op{int(k)}" for k in rng.integers(0, 40, n)], "rank": 0,
                     "pid": 1, "tid": list(rng.integers(1, 4, n)),
                     "start_ns": rng.integers(0, 60, n) + 10**18, "end_ns": rng.integers(60, 90, n) + 10**18,
                     "epoch": pd.array([None if k < 0 else int(k) for k in rng.integers(-1, 3, n)], dtype="Int64")})


@pytest.mark.parametrize("seed", range(8))
def test_time_ordered_is_the_time_order_of_the_concatenation_asking_each_part_for_one_column_at_a_time(seed):
    from trace_merge.schema import concat_frames

    rng = np.random.default_rng(seed)
    pieces = [_random_piece(rng, int(rng.integers(1, 50))) for _ in range(int(rng.integers(1, 5)))]
    asked: list = []

    def part(i: int):
        def column(name: str) -> pd.Series:
            asked.append((i, name))
            return pieces[i][name]
        return column

    columns = list(pieces[0].columns)
    got = al.TimeOrdered([part(i) for i in range(len(pieces))]).frame(columns)
    pd.testing.assert_frame_equal(got, al.time_order(concat_frames(pieces)), check_exact=True)
    assert sorted(asked) == sorted((i, c) for i in range(len(pieces)) for c in columns)  # each once, one at a time


@pytest.mark.parametrize("seed", range(6))
def test_start_order_takes_the_tie_key_of_tied_rows_alone(seed: int) -> None:
    """The tie key as a function of the tied rows' positions gives the order the whole key gives, on sorted starts
    (not sorted again) and on shuffled ones; the function sees only rows whose start is shared."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 500))
    starts = rng.integers(0, 40, n) * 10
    if seed % 2:
        starts = np.sort(starts)
    ends = starts + rng.integers(1, 50, n)
    asked = []

    def key(at: np.ndarray) -> np.ndarray:
        asked.append(at)
        return starts[at] - ends[at]

    got = I.start_order(starts, key)
    assert got.tolist() == I.start_order(starts, starts - ends).tolist() == np.lexsort((starts - ends, starts)).tolist()
    seen = np.concatenate(asked) if asked else np.zeros(0, dtype=np.int64)
    assert all((starts == starts[i]).sum() > 1 for i in seen)
