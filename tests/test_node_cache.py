"""Node-local cache emulation: exactly the files new to a rank leave the page cache (mincore), and in real 2-rank
runs the POSIX layer shows one eviction open per file new to the rank in each epoch."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.common.node_cache import NodeCache, evict, resident_fraction
from benchmarks.common.shuffle import epoch_files


class _NoLogger:
    def phase(self, name: str, cat: str = "other"):
        import contextlib

        class _P(dict):
            def update(self, **kw):
                super().update(kw)

        return contextlib.nullcontext(_P())


def _warm(paths: list[Path]) -> None:
    for p in paths:
        p.read_bytes()


@pytest.fixture()
def files(tmp_path: Path) -> list[Path]:
    out = []
    for k in range(4):
        p = tmp_path / f"f{k}.bin"
        p.write_bytes(os.urandom(1 << 20))
        out.append(p)
    os.sync()  # dirty pages cannot be dropped: write them back first
    return out


def test_mincore_sees_warm_and_evicted(files: list[Path]) -> None:
    _warm(files)
    assert resident_fraction(str(files[0])) == 1.0
    assert evict([str(files[0])]) == 1
    assert resident_fraction(str(files[0])) == 0.0
    assert resident_fraction(str(files[1])) == 1.0


def test_emulation_evicts_exactly_the_files_new_to_the_rank(files: list[Path]) -> None:
    names = [str(p) for p in files]
    cache = NodeCache("emulate", _NoLogger())
    _warm(files)
    assert cache.before_epoch(names[:2]) == names[:2]  # epoch 0: both new
    assert [resident_fraction(n) for n in names] == [0.0, 0.0, 1.0, 1.0]
    _warm(files[:2])  # the rank reads its two files: now in its "node's" cache
    assert cache.before_epoch([names[1], names[0], names[2]]) == [names[2]]  # only f2 is new
    assert [resident_fraction(n) for n in names] == [1.0, 1.0, 0.0, 1.0]
    assert cache.summary() == {"mode": "emulate", "evicted_files_per_epoch": [2, 1],
                               "evicted_bytes_per_epoch": [2 << 20, 1 << 20]}
    off = NodeCache("off", _NoLogger())
    _warm(files)
    assert off.before_epoch(names) == [] and all(resident_fraction(n) == 1.0 for n in names)
    with pytest.raises(ValueError):
        NodeCache("sometimes", _NoLogger())


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["local", "global"])
def test_evictions_in_real_runs_match_the_files_new_to_each_rank(shuffle: str, tmp_path_factory) -> None:
    pytest.importorskip("horovod.tensorflow")
    from benchmarks.common.sweep import Point, layers_for, run_point
    from benchmarks.hepcnn.config import SMOKE_DATA
    from benchmarks.hepcnn.data import check_dataset, generate

    data = generate(tmp_path_factory.mktemp("nc") / "data", SMOKE_DATA, show_progress=False)
    run = tmp_path_factory.mktemp("ncrun") / shuffle
    parts = run_point(Point(2, shuffle), data, run, ["--smoke", "--epochs", "3", "--node-cache", "emulate"],
                      layers_for(data, posix=True, horovod_timeline=False), dist="horovod")
    files = check_dataset(data).train_files
    frame = parts["run"].frame
    app = frame[(frame["layer"] == "app") & (frame["name"] == "Node Cache Emulation")]
    opens = frame[(frame["layer"] == "posix") & frame["name"].astype(str).str.startswith("open")]
    for rank in (0, 1):
        seen: set[str] = set()
        for epoch in range(3):
            mine = epoch_files(files, rank, 2, epoch, shuffle, 0)
            new = {f for f in mine if f not in seen}
            seen |= set(mine)
            [phase] = app[(app["rank"] == rank) & (app["epoch"] == epoch)].itertuples()
            inside = opens[(opens["rank"] == rank) & (opens["start_ns"] >= phase.start_ns)
                           & (opens["end_ns"] <= phase.end_ns)]
            assert set(inside["file"].astype(str)) == new, (rank, epoch)
            assert json.loads(phase.args)["files"] == len(new)
    summary = parts["summary"]
    assert summary["node_cache"]["mode"] == "emulate"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["node_cache"] == summary["node_cache"]
    if shuffle == "local":  # each rank keeps its shard: only epoch 0 brings new files
        assert summary["node_cache"]["evicted_files_per_epoch"] == [4, 0, 0]  # the job's: 2 ranks x 2 files


def test_drop_says_whether_it_could(files: list[Path]) -> None:
    """``drop`` either drops the machine's cache (root, writable /proc/sys/vm) or says why not; never silent."""
    cache = NodeCache("drop", _NoLogger())
    _warm(files)
    cache.before_run(rank=0)
    summary = cache.summary()
    assert summary["mode"] == "drop"
    if summary["dropped"]:
        assert resident_fraction(str(files[0])) == 0.0 and "problem" not in summary
    else:
        assert "cannot drop the page cache" in summary["problem"]
    other = NodeCache("drop", _NoLogger())
    other.before_run(rank=1)  # only rank 0 drops
    assert other.summary() == {"mode": "drop", "dropped": False}
