"""HPC I/O findings of plain Darshan logs (trace_merge.darshan_findings) and the data-file rule they share.

Each rule fires on counters built for it and stays silent on counters built not to; on every example log
PyDarshan ships, the findings carry no training advice and no evidence that contradicts itself."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from trace_merge.bandwidth import is_data_path
from trace_merge.darshan_findings import darshan_findings
from trace_merge.run import Run
from trace_merge.schema import to_counters

#: words of training advice that a non-DL job must never get
DL_WORDS = re.compile(r"tf\.data|prefetch|timelogger|tf-profile|keras|dataset\.|DataLoader|epoch|training loop",
                      re.IGNORECASE)


def counters(records: dict) -> "object":
    """``{(rank, file): {COUNTER: value}}`` as a counters table."""
    rows = [(c.split("_", 1)[0].lower(), rank, f, c, v) for (rank, f), cs in records.items() for c, v in cs.items()]
    layer, rank, file, counter, value = zip(*rows)
    return to_counters({"layer": list(layer), "rank": list(rank), "file": list(file), "counter": list(counter),
                        "value": list(value)})


def keys(records: dict, **kw) -> set:
    return {f.key for f in darshan_findings(counters(records), **kw)}


def test_small_requests_fire_on_small_and_not_on_large():
    small = {(0, "/scratch/out.h5"): {"POSIX_WRITES": 5000, "POSIX_SIZE_WRITE_100_1K": 5000,
                                      "POSIX_BYTES_WRITTEN": 5000 * 800}}
    large = {(0, "/scratch/out.h5"): {"POSIX_WRITES": 5000, "POSIX_SIZE_WRITE_1M_4M": 5000,
                                      "POSIX_BYTES_WRITTEN": 5000 * (2 << 20)}}
    found = darshan_findings(counters(small))
    assert [f.key for f in found] == ["small_write_requests"] and found[0].severity == "high"
    assert "5,000 of 5,000 writes" in found[0].evidence
    assert not keys(large)


def test_small_reads_that_are_not_the_bulk_are_info_and_config_reads_are_none():
    """sample-badost's shape: 512 GiB written in 2 MiB pieces; its 34,816 tiny reads are of IOR's input deck."""
    bulk = {(r, f"/scratch/ior.{r}"): {"POSIX_WRITES": 64, "POSIX_SIZE_WRITE_1M_4M": 64,
                                       "POSIX_BYTES_WRITTEN": 64 * (2 << 20)} for r in range(4)}
    deck = {(-1, "/home/u/inputs/posix1m2.in"): {"STDIO_READS": 34816, "STDIO_BYTES_READ": 1654784}}
    assert not keys({**bulk, **deck})  # the deck is no data file: no small reads, no STDIO bulk
    tiny = {(0, "/scratch/index.bin"): {"POSIX_READS": 5000, "POSIX_SIZE_READ_0_100": 5000,
                                        "POSIX_BYTES_READ": 5000 * 48}}
    found = [f for f in darshan_findings(counters({**bulk, **tiny})) if f.key == "small_read_requests"]
    assert found and found[0].severity == "info" and "a small part of this job's I/O" in found[0].title


def test_misaligned_requests():
    rec = {"POSIX_WRITES": 2000, "POSIX_SIZE_WRITE_1M_4M": 2000, "POSIX_BYTES_WRITTEN": 2000 << 21,
           "POSIX_FILE_ALIGNMENT": 1 << 20}
    assert "misaligned_requests" in keys({(0, "/s/a"): {**rec, "POSIX_FILE_NOT_ALIGNED": 1900}})
    assert "misaligned_requests" not in keys({(0, "/s/a"): {**rec, "POSIX_FILE_NOT_ALIGNED": 10}})


def test_random_access():
    rec = {"POSIX_READS": 4000, "POSIX_SIZE_READ_1M_4M": 4000, "POSIX_BYTES_READ": 4000 << 21}
    assert "random_reads" in keys({(0, "/s/a"): {**rec, "POSIX_SEQ_READS": 1000, "POSIX_CONSEC_READS": 500}})
    assert "random_reads" not in keys({(0, "/s/a"): {**rec, "POSIX_SEQ_READS": 3990, "POSIX_CONSEC_READS": 3990}})


def test_metadata_time():
    def rec(meta: float) -> dict:
        return {(r, f"/s/f{r}"): {"POSIX_OPENS": 100, "POSIX_STATS": 300, "POSIX_F_META_TIME": meta,
                                  "POSIX_F_WRITE_TIME": 5.0} for r in range(4)}
    assert "metadata_time" in keys(rec(40.0), nprocs=4, runtime_s=100.0)  # a rank over Drishti's 30 s
    assert "metadata_time" in keys(rec(8.0), nprocs=4, runtime_s=100.0)  # 62 % of the I/O time, 8 % of the run
    assert "metadata_time" not in keys(rec(0.5), nprocs=4, runtime_s=100.0)


def test_rank_imbalance_per_rank_and_on_a_shared_file():
    even = {(r, f"/s/f{r}"): {"POSIX_F_WRITE_TIME": 10.0 + 0.1 * r} for r in range(8)}
    slow = {**even, (7, "/s/f7"): {"POSIX_F_WRITE_TIME": 40.0}}
    assert "rank_io_imbalance" in keys(slow, nprocs=8, runtime_s=60.0)
    assert "rank_io_imbalance" not in keys(even, nprocs=8, runtime_s=60.0)
    shared = {(-1, "/s/shared.h5"): {"POSIX_F_WRITE_TIME": 100.0, "POSIX_F_SLOWEST_RANK_TIME": 30.0,
                                     "POSIX_F_FASTEST_RANK_TIME": 5.0, "POSIX_SLOWEST_RANK": 3,
                                     "POSIX_FASTEST_RANK": 0}}
    assert "rank_io_imbalance" in keys(shared, nprocs=4, runtime_s=60.0)
    tiny = {(-1, "/s/shared.h5"): {"POSIX_F_SLOWEST_RANK_TIME": 0.3, "POSIX_F_FASTEST_RANK_TIME": 0.1}}
    assert "rank_io_imbalance" not in keys(tiny, nprocs=4, runtime_s=60.0)  # 0.2 s: no one waits for that


def test_shared_file_without_collective_mpiio():
    def rec(indep: int, coll: int) -> dict:
        return {(-1, "/s/shared.h5"): {"MPIIO_INDEP_WRITES": indep, "MPIIO_COLL_WRITES": coll,
                                       "MPIIO_BYTES_WRITTEN": 1 << 30}}
    assert "no_collective_writes" in keys(rec(8000, 64))
    assert "no_collective_writes" not in keys(rec(0, 8000))


def test_stdio_bulk_data():
    posix = {(0, "/s/a.dat"): {"POSIX_BYTES_WRITTEN": 1 << 20}}
    assert "stdio_bulk_data" in keys({**posix, (0, "/s/b.dat"): {"STDIO_BYTES_WRITTEN": 1 << 30}})
    assert "stdio_bulk_data" not in keys({**posix, (0, "<STDOUT>"): {"STDIO_BYTES_WRITTEN": 1 << 30}})


@pytest.mark.parametrize("path, data", [
    ("/scratch/run/config.yaml", False), ("/scratch/run/params.yml", False), ("/x/meta.json", False),
    ("/x/history.csv", False), ("/x/topo.xml", False), ("/x/notes.txt", False), ("/x/setup.cfg", False),
    ("/x/a.ini", False), ("/x/train.log", False), ("/x/train.py", False), ("/tmp/hwloc-topo.abc", False),
    ("/proc/self/maps", False), ("/sys/devices/x", False), ("/etc/hosts", False), ("<STDOUT>", False),
    ("/v/lib/python3.11/site-packages/np/x.bin", False), ("/usr/lib/libz.so.1.2.13", False), ("/x/ior.in", False),
    ("/scratch/d/part-0.h5", True), ("/scratch/d/train-00001.tfrecord", True), ("/scratch/d/s0.bin", True),
    ("/scratch/ior.out.00000038", True), ("/scratch/d/x.npz", True)])
def test_one_rule_decides_what_is_a_data_file(path, data):
    assert is_data_path(path) is data


def _example_logs() -> list:
    try:
        import darshan
    except ImportError:
        return []
    return sorted((Path(darshan.__file__).parent / "examples" / "example_logs").glob("*.darshan"))


@pytest.mark.parametrize("log", _example_logs(), ids=lambda p: p.name)
def test_example_logs_get_no_training_advice_and_no_self_contradicting_evidence(log):
    """Every example log PyDarshan ships (the largest, sample-badost, is 450 KB and 2,048 ranks: 2 s)."""
    found = Run.open(log).findings()
    assert found[-1].key == "no_training_steps" or found[0].severity != "info"  # the info line never leads
    for f in found:
        text = f"{f.title} {f.evidence} {f.action}"
        assert not DL_WORDS.search(text), text
        assert not re.search(r"\bof 0 s\b|\bnan\b|\binf\b|rank -1\b", text), text
        for part, whole in re.findall(r"(\d[\d,.]*) of (\d[\d,.]*)", f.evidence):
            assert float(part.replace(",", "")) <= float(whole.replace(",", "")), text
        assert f.severity in ("high", "medium", "info")
    sev = [("high", "medium", "info").index(f.severity) for f in found]
    assert sev == sorted(sev)


#: the imbalance evidence on PyDarshan's example logs as the finding's own per-rank sums gave it, before the
#: finding read the view's time per rank (darshan_view.rank_times): the one computation must not change it
IMBALANCE_BEFORE = {
    "example.darshan": "shared file 'vpicio.hdf5': slowest rank 1312 85.5 s, fastest rank 597 20.4 s",
    "sample-badost.darshan": "rank 1507 spent 778 s in POSIX I/O on its own files, rank 959 4.61 s (median 12 s "
                             "over 2,048 ranks)",
}


@pytest.mark.parametrize("name", sorted(IMBALANCE_BEFORE))
def test_imbalance_is_the_views_time_per_rank(name):
    from trace_merge.darshan_view import darshan_view

    logs = {p.name: p for p in _example_logs()}
    if name not in logs:
        pytest.skip("PyDarshan's example logs are not installed")
    run = Run.open(logs[name])
    view = darshan_view(run)
    found = [f for f in darshan_findings(run.counters, view.nprocs, view.runtime_s) if f.key == "rank_io_imbalance"]
    assert len(found) == 1 and found[0].evidence == IMBALANCE_BEFORE[name]
    # these logs' POSIX records are all of data files: the view's table shows the same numbers
    posix = view.rank_times[view.rank_times["module"] == "POSIX"].iloc[0]
    assert f"rank {posix['slowest_rank']} " in found[0].evidence
    assert f"{posix['slowest_s']:.3g} s" in found[0].evidence and f"{posix['fastest_s']:.3g} s" in found[0].evidence
