"""trace_merge.dxt_clock: DXT segments of real Darshan logs placed on the app clock by content.

The app phases are written by the real TimeLogger with a scripted ``perf_counter_ns`` so that each phase
spans one group of a rank's DXT segments (plus some µs of Python around the calls), shifted by a known
per-rank offset: the offset of the rank's Darshan start from the job header's start time.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from timelogger import TimeLogger
from timelogger.layout import APP_DIR, DARSHAN_DIR
from trace_merge import dxt_clock
from trace_merge.merge import merge_path, merge_sources, write_merged
from trace_merge.readers import darshan as reader
from trace_merge.readers import pfw
from trace_merge.schema import SourceData, to_frame

#: injected offsets (ns): rank r's Darshan started this much after the job header's start time
OFFSETS = {0: 3_700_000, 1: -5_200_000, 2: 8_100_000, 3: 1_300_000}
#: a new app phase when the gap between a rank's segments of one file exceeds this
PHASE_GAP_NS = 5_000_000
IOR = "ior_hdf5_example.darshan"


def _groups(seg: pd.DataFrame) -> "list[pd.DataFrame]":
    """A rank's segments of one file, split where the gap exceeds PHASE_GAP_NS (one app phase each)."""
    seg = seg.sort_values("start_ns")
    gap = seg["start_ns"].to_numpy()[1:] - np.maximum.accumulate(seg["end_ns"].to_numpy())[:-1]
    cut = np.flatnonzero(gap > PHASE_GAP_NS) + 1
    return [seg.iloc[a:b] for a, b in zip(np.r_[0, cut], np.r_[cut, len(seg)])]


def _write_app(run: Path, dxt: pd.DataFrame, offsets: dict, rename: "str | None" = None,
               with_file: bool = True) -> None:
    """One real TimeLogger file per rank: an ``io`` phase per group of the rank's POSIX segments of a file,
    at the segments' header placement + the rank's offset, 20–200 µs wider on each side (seeded)."""
    rng = np.random.default_rng(8)
    posix = dxt[dxt["layer"] == "posix"]
    for rank, seg in posix.groupby("rank"):
        tl = TimeLogger(run, rank=int(rank), world_size=len(offsets))
        script = []
        for _, group in seg.groupby("file", observed=True):
            for g in _groups(group):
                before, after = rng.integers(20_000, 200_000, 2)
                t0 = int(g["start_ns"].min()) + offsets[int(rank)] - int(before)
                t1 = int(g["end_ns"].max()) + offsets[int(rank)] + int(after)
                script.append((t0, t1, rename or str(g["file"].iloc[0]), int(g["bytes"].sum())))
        for t0, t1, fname, nbytes in script:  # intervals at given wall times: what a phase there would write
            tl.record("Read File", t0, t1, cat="io", **({"file": fname, "bytes": nbytes} if with_file else {}))
        tl.close()


@pytest.fixture
def ior_run(tmp_path: Path, darshan_logs: Path) -> "tuple[Path, pd.DataFrame]":
    run = tmp_path / "run"
    (run / DARSHAN_DIR).mkdir(parents=True)
    shutil.copy(darshan_logs / IOR, run / DARSHAN_DIR / IOR)
    return run, reader.read(darshan_logs / IOR).frame


def test_injected_offsets_recovered_from_app_phases(ior_run) -> None:
    run, dxt = ior_run
    _write_app(run, dxt, OFFSETS)
    res = merge_path(run)
    clocks = {c["rank"]: c for c in res.dxt_clock}
    assert sorted(clocks) == sorted(OFFSETS)
    for rank, injected in OFFSETS.items():
        c = clocks[rank]
        assert c["basis"] == "app" and c["confidence"] >= dxt_clock.MIN_CONFIDENCE, c
        assert abs(c["offset_ns"] - injected) <= 500_000, (rank, c, injected)
        assert c["matched"] >= dxt_clock.MIN_SEGMENTS
    # every DXT row moved by its rank's offset, POSIX and MPI-IO alike
    f = res.frame
    for layer in ("posix", "mpiio"):
        moved = f[(f["layer"] == layer)].sort_values(["rank", "start_ns"])
        orig = dxt[dxt["layer"] == layer].sort_values(["rank", "start_ns"])
        shift = moved["start_ns"].to_numpy() - orig["start_ns"].to_numpy()
        assert (shift == np.array([clocks[r]["offset_ns"] for r in orig["rank"]])).all()
    assert not [w for w in res.warnings if "DXT" in w]
    # every POSIX segment now lies inside an app phase of its rank
    app = f[f["layer"] == "app"]
    for _, row in f[f["layer"] == "posix"].iterrows():
        mine = app[app["rank"] == row["rank"]]
        assert ((mine["start_ns"] <= row["start_ns"]) & (mine["end_ns"] >= row["end_ns"])).any()
    # reported in merge_info.json and in the summary
    write_merged(res, run)
    info = json.loads((run / "merge_info.json").read_text())
    assert [c["offset_ns"] for c in info["dxt_clock"]] == [clocks[r]["offset_ns"] for r in sorted(clocks)]


def test_summary_text_names_the_dxt_clock(ior_run, capsys) -> None:
    from trace_merge.cli import main

    run, dxt = ior_run
    _write_app(run, dxt, OFFSETS)
    assert main(["summary", str(run)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("DXT clock:")]
    assert len(lines) == 4 and all("(basis app, confidence" in x for x in lines)
    shown = {int(m[1]): float(m[2]) for m in (re.search(r" rank (\d+): ([-+][\d.]+) ms from the header", x)
                                            for x in lines)}
    assert all(abs(shown[r] - OFFSETS[r] / 1e6) <= 0.5 for r in OFFSETS), shown
    assert main(["report", str(run)]) == 0
    assert "Darshan DXT placement per rank" in (run / "report.html").read_text()


@pytest.mark.parametrize("case", ["other-file", "no-file"])
def test_nothing_matches_keeps_header_with_warning(ior_run, case: str) -> None:
    run, dxt = ior_run
    if case == "other-file":
        _write_app(run, dxt, OFFSETS, rename="/scratch/somewhere/else.h5")
    else:  # app phases that name no file
        _write_app(run, dxt, OFFSETS, with_file=False)
    res = merge_path(run)
    assert [c["basis"] for c in res.dxt_clock] == ["header"] * 4
    assert all(c["offset_ns"] == 0 for c in res.dxt_clock)
    warned = [w for w in res.warnings if "DXT segments of rank" in w]
    assert len(warned) == 4 and all(w.startswith(str(run / DARSHAN_DIR / IOR)) for w in warned)
    f = res.frame
    assert np.array_equal(np.sort(f.loc[f["layer"] == "posix", "start_ns"].to_numpy()),
                          np.sort(dxt.loc[dxt["layer"] == "posix", "start_ns"].to_numpy()))


def test_darshan_alone_is_reported_not_warned(ior_run) -> None:
    """Without any other layer there is no clock for the header placement to be wrong against."""
    run, dxt = ior_run
    res = merge_path(run)
    assert [c["basis"] for c in res.dxt_clock] == ["header"] * 4 and res.warnings == []


def test_periodic_phases_are_ambiguous(ior_run) -> None:
    """Phases that fit the segments equally well at two offsets 20 ms apart cannot decide."""
    run, dxt = ior_run
    _write_app(run, dxt, OFFSETS)
    twin = run / "twin"
    _write_app(twin, dxt, {r: o + 20_000_000 for r, o in OFFSETS.items()})
    for p in (twin / APP_DIR).iterdir():  # second logger of the same ranks: its phases are one period later
        p.rename(run / APP_DIR / p.name.replace("rank-", "rank-") .replace(".pfw", "-twin.pfw"))
    sources = [reader.read(run / DARSHAN_DIR / IOR)] + [pfw.read(p) for p in sorted((run / APP_DIR).iterdir())]
    res = merge_sources(sources)
    assert all(c["basis"] == "header" for c in res.dxt_clock), res.dxt_clock
    assert any("ambiguous" in w for w in res.warnings)


def test_posix_rows_beat_app_phases(darshan_logs: Path) -> None:
    """DFTracer-like POSIX rows of the same calls (built as the pfw reader builds them) decide the offset
    even when the app phases alone are off by another 30 ms."""
    darshan_src = reader.read(darshan_logs / "dxt.darshan")
    dxt = darshan_src.frame
    rng = np.random.default_rng(3)
    injected = 6_400_000
    jitter = rng.integers(-3_000, 3_000, len(dxt))  # the two wrappers start the clock a few µs apart
    posix = SourceData(
        path="posix/trace-0.pfw.gz", kind="dftracer", frame=to_frame({
            "layer": "posix", "cat": "io", "name": np.where(dxt["name"] == "read", "pread64", "pwrite64"),
            "rank": 0, "pid": 4242, "host": "node", "start_ns": dxt["start_ns"].to_numpy() + injected + jitter,
            "dur_ns": dxt["dur_ns"].to_numpy(), "bytes": dxt["bytes"].array, "offset": dxt["offset"].array,
            "file": dxt["file"].astype(str).to_numpy()}))
    res = merge_sources([darshan_src, posix])
    (c,) = res.dxt_clock
    assert c["basis"] == "posix" and abs(c["offset_ns"] - injected) <= 100_000, c
    assert c["matched"] >= 0.9 * len(dxt) and c["confidence"] > 0.9


def test_module_dropped_by_pydarshan_is_named(tmp_path: Path, darshan_logs: Path) -> None:
    """A bad per-module version in the header makes PyDarshan skip the module (stderr only): we name it."""
    import darshan

    log = darshan_logs / "dxt.darshan"
    data = bytearray(log.read_bytes())
    header = reader.validate(log)
    posix_len = darshan.DarshanReport(str(log), read_all=False).modules["POSIX"]["len"]
    maps = [struct.unpack_from("<QQ", data, header["maps_at"] + 16 * (1 + k)) for k in range(16)]
    (slot,) = [k for k, (_, length) in enumerate(maps) if length == posix_len]
    struct.pack_into("<I", data, header["versions_at"] + 4 * slot, 99)
    bad = tmp_path / "badver.darshan"
    bad.write_bytes(bytes(data))
    src = reader.read(bad)
    assert src.warnings == [f"{bad}: module POSIX not read (PyDarshan dropped it: version 99 in the log header, "
                            f"{posix_len}-byte region, no records read)"]
    assert not (src.counters["layer"] == "posix").any() and len(src.frame)  # DXT still read
