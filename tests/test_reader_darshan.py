"""trace_merge.readers.darshan on the real logs shipped inside the darshan wheel."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trace_merge.errors import TraceInputError
from trace_merge.readers import darshan as reader

darshan = pytest.importorskip("darshan")
EXAMPLES = Path(darshan.__file__).parent / "examples" / "example_logs"
TEST_INPUT = Path(darshan.__file__).parent / "tests" / "input"
# the wheel ships some logs twice (examples and tests/input): read each name once
LOGS = list({p.name: p for p in sorted(TEST_INPUT.glob("*.darshan")) + sorted(EXAMPLES.glob("*.darshan"))}.values())
BYTE_COUNTERS = {
    "POSIX": ("posix", ["POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN", "POSIX_READS", "POSIX_WRITES"]),
    "STDIO": ("stdio", ["STDIO_BYTES_READ", "STDIO_BYTES_WRITTEN"]),
    "MPI-IO": ("mpiio", ["MPIIO_BYTES_READ", "MPIIO_BYTES_WRITTEN"]),
    "H5D": ("hdf5", ["H5D_BYTES_READ", "H5D_BYTES_WRITTEN"]),
}


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_counters_equal_pydarshan(log: Path) -> None:
    src = reader.read(log)
    report = darshan.DarshanReport(str(log), read_all=True)
    c = src.counters
    assert src.kind == "darshan" and src.warnings == []
    for module, (layer, names) in BYTE_COUNTERS.items():
        if module not in report.records or not len(report.records[module]):
            continue
        tables = report.records[module].to_df()
        own = tables["counters"]
        for name in names:
            mine = c[(c["layer"] == layer) & (c["counter"] == name)]
            assert len(mine) == len(own)
            assert mine["value"].sum() == own[name].sum(), (module, name)
        # one row per record and counter (integer and floating point)
        width = sum(len(tables[k].columns) - 2 for k in ("counters", "fcounters"))
        prefix = module.replace("-", "") + "_"
        mine_module = [k for k in c["counter"].cat.categories if k.startswith(prefix)]
        assert c["counter"].isin(mine_module).sum() == len(own) * width
    # file names resolved through the name records
    assert set(c["file"].astype(str)) <= set(report.name_records.values())
    assert src.meta.nprocs == report.metadata["job"]["nprocs"]


def test_dxt_segments_are_absolute_intervals() -> None:
    log = EXAMPLES / "ior_hdf5_example.darshan"
    src = reader.read(log)
    report = darshan.DarshanReport(str(log), read_all=True)
    job = report.metadata["job"]
    f = src.frame
    for module, layer in (("DXT_POSIX", "posix"), ("DXT_MPIIO", "mpiio")):
        recs = report.records[module].to_df()
        for op in ("read", "write"):
            mine = f[(f["layer"] == layer) & (f["name"] == op)]
            assert len(mine) == sum(r[f"{op}_count"] for r in recs)
            assert mine["bytes"].sum() == sum(int(r[f"{op}_segments"]["length"].sum())
                                              for r in recs if len(r[f"{op}_segments"]))
    # absolute epoch ns: job start + seconds of the segment
    start = job["start_time_sec"] * 10**9 + job["start_time_nsec"]
    first = report.records["DXT_POSIX"].to_df()[0]["write_segments"].iloc[0]
    row = f[(f["layer"] == "posix") & (f["rank"] == 0) & (f["name"] == "write")].iloc[0]
    assert row["start_ns"] == start + round(first["start_time"] * 1e9)
    assert row["end_ns"] == start + round(first["end_time"] * 1e9)
    assert row["offset"] == first["offset"] and row["bytes"] == first["length"]
    assert set(f["cat"]) == {"io"} and set(f["host"]) == {"nid00097"} and sorted(set(f["rank"])) == [0, 1, 2, 3]
    assert set(f["file"]) == {"/global/cscratch1/sd/ssnyder/test123.h5"}
    assert (f["dur_ns"] >= 0).all() and src.meta.start_ns == start


def test_dxt_bytes_match_posix_counters() -> None:
    # dxt.darshan traced every POSIX access: DXT totals equal the POSIX byte counters.
    src = reader.read(EXAMPLES / "dxt.darshan")
    f, c = src.frame, src.counters
    for op, counter in (("read", "POSIX_BYTES_READ"), ("write", "POSIX_BYTES_WRITTEN")):
        assert f.loc[f["name"] == op, "bytes"].sum() == c.loc[c["counter"] == counter, "value"].sum()
    assert f["start_ns"].is_monotonic_increasing  # one rank, sorted by time


def test_lustre_striping_under_posix() -> None:
    src = reader.read(EXAMPLES / "example.darshan")
    report = darshan.DarshanReport(str(EXAMPLES / "example.darshan"), read_all=True)
    comp = report.records["LUSTRE"].to_df()["components"]
    c = src.counters
    lustre = c[c["counter"].astype(str).str.startswith("LUSTRE_")]
    assert set(lustre["layer"]) == {"posix"}
    size = lustre[lustre["counter"] == "LUSTRE_COMP_STRIPE_SIZE"]
    assert size["value"].tolist() == comp["LUSTRE_COMP_STRIPE_SIZE"].astype(float).tolist()
    osts = lustre[lustre["counter"].astype(str).str.startswith("LUSTRE_OST_ID_")]
    assert sorted(osts["value"].astype(int)) == sorted(int(o) for ids in comp["LUSTRE_OST_IDS"] for o in ids)


@pytest.mark.parametrize("keep", [100, 2000, 50_000])
def test_truncated_log(tmp_path: Path, keep: int) -> None:
    # PyDarshan itself segfaults on some of these (e.g. the first 2000 bytes of dxt.darshan).
    bad = tmp_path / "cut.darshan"
    bad.write_bytes((EXAMPLES / "dxt.darshan").read_bytes()[:keep])
    with pytest.raises(TraceInputError, match=rf"^{bad}: (truncated|corrupted)"):
        reader.read(bad)


def test_corrupted_region(tmp_path: Path) -> None:
    data = bytearray((EXAMPLES / "dxt.darshan").read_bytes())
    data[5000:5100] = bytes(100)
    bad = tmp_path / "corrupt.darshan"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceInputError, match=rf"^{bad}: corrupted Darshan log"):
        reader.read(bad)


def test_garbage_log(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.darshan"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes())
    with pytest.raises(TraceInputError, match=rf"^{bad}: not a Darshan log \(bad magic number\)"):
        reader.read(bad)


def test_empty_log(tmp_path: Path) -> None:
    bad = tmp_path / "empty.darshan"
    bad.write_bytes(b"")
    with pytest.raises(TraceInputError, match=rf"^{bad}: empty file"):
        reader.read(bad)
