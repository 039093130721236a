"""One bad value costs its line (or, for a per-file value, the value), never the merge; nothing absurd reaches
the analysis unflagged. Each test damages a real file: a TimeLogger + DFTracer run (``run_copy``) or a
``dftracer_gen_fake_trace`` set, corrupted here, and checks the warning names the file (and line)."""
from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.helpers.traces import app_file, shift_file
from trace_merge.cli import main
from trace_merge.merge import merge_path
from trace_merge.readers import read_any
from trace_merge.readers.pfw import OUTLIER_GAP_NS
from trace_merge.schema import MAX_RANKS


def edit_event(path: Path, name: str, nth: int, edit) -> int:
    """Apply ``edit`` (str -> str) to the ``nth`` line holding event ``name``; returns its line number (1-based)."""
    lines = path.read_text().split("\n")
    index = [i for i, line in enumerate(lines) if f'"name":"{name}"' in line][nth]
    new = edit(lines[index])
    assert new != lines[index]
    lines[index] = new
    path.write_text("\n".join(lines))
    return index + 1


@pytest.mark.parametrize("edit, cause", [
    (lambda s: re.sub(r'"ts":[0-9.]+', '"ts":1e30', s), "ts 1E+30 is not a time"),
    (lambda s: s.replace('"rank":0', '"rank":99999999999999999999'), "rank 99999999999999999999 out of range"),
    (lambda s: re.sub(r'"dur":[0-9.]+', '"dur":-5.0', s), "negative dur -5.0"),
    (lambda s: re.sub(r'"bytes":[0-9]+', '"bytes":-4096', s), "negative bytes -4096"),
])
def test_a_bad_value_skips_its_event(run_copy: Path, edit, cause: str, capsys) -> None:
    before = merge_path(run_copy)
    app = app_file(run_copy)
    line = edit_event(app, "Load File", 1, edit)
    res = merge_path(run_copy)
    assert f"{app}:{line}: {cause}; event skipped" in res.warnings
    assert res.rows_per_layer()["app"] == before.rows_per_layer()["app"] - 1
    assert res.rows_per_layer()["posix"] == before.rows_per_layer()["posix"]
    # and the command line carries on with the same warning, exit 0
    assert main(["summary", str(run_copy)]) == 0
    assert f"{app}:{line}: {cause}" in capsys.readouterr().err


def test_an_absurd_timestamp_is_left_out_not_stretching_the_run(run_copy: Path) -> None:
    app = app_file(run_copy)
    before = merge_path(run_copy)
    wall = before.frame["end_ns"].max() - before.frame["start_ns"].min()
    line = edit_event(app, "Load File", 1, lambda s: re.sub(r'"ts":1(\d{15})', r'"ts":2\1', s))  # +~30 years
    res = merge_path(run_copy)
    assert any(w.startswith(f"{app}: 1 event(s) more than {OUTLIER_GAP_NS // 3_600_000_000_000} h away")
               and f"(line {line})" in w for w in res.warnings)
    assert res.frame["end_ns"].max() - res.frame["start_ns"].min() == wall


@pytest.mark.parametrize("record, value, warning", [
    ("clock_sync", '"abc"', "clock_sync clock_offset_ns 'abc' is not an integer"),
    ("header", '"two"', "world_size 'two' is not an integer"),
])
def test_a_bad_header_value_is_ignored_with_a_warning(run_copy: Path, record: str, value: str,
                                                      warning: str) -> None:
    app = app_file(run_copy)
    lines = app.read_text().split("\n")
    if record == "clock_sync":
        lines.insert(2, '{"name":"clock_sync","ph":"M","ts":1,"pid":1,"tid":1,"args":{"clock_offset_ns":%s,'
                        '"rtt_ns":10}}' % value)
    else:
        lines[1] = re.sub(r'"world_size":\d+', f'"world_size":{value}', lines[1])
    app.write_text("\n".join(lines))
    res = merge_path(run_copy)
    assert any(w.startswith(f"{app}: {warning}") and w.endswith("; ignored") for w in res.warnings)
    assert res.clock_offsets_ns == {0: 0}
    assert len(res.frame) == len(merge_path(run_copy).frame)


@pytest.mark.parametrize("world", ['"two"', "100000000", str(10**30), "-1"])
def test_a_bad_world_size_in_the_manifest(run_copy: Path, world: str) -> None:
    manifest = run_copy / "manifest.json"
    manifest.write_text(re.sub(r'"world_size": \d+', f'"world_size": {world}', manifest.read_text()))
    res = merge_path(run_copy)
    assert f"{manifest}: world_size {json.loads(world)!r} is not an integer in [1, {MAX_RANKS}]; ignored" \
        in res.warnings
    assert len(json.dumps(res.warnings)) < 2000


def test_missing_ranks_of_a_large_world_are_ranges(run_copy: Path) -> None:
    """world_size 1,000,000 with one rank present: one bounded warning with a range, not a million numbers."""
    manifest = run_copy / "manifest.json"
    manifest.write_text(re.sub(r'"world_size": \d+', '"world_size": 1000000', manifest.read_text()))
    res = merge_path(run_copy)
    [w] = [w for w in res.warnings if "no app (TimeLogger) files" in w]
    assert w == (f"{run_copy}: no app (TimeLogger) files for rank(s) 1-999999 of world_size 1000000; their layers"
                 " are unaligned (999999 missing, only 1 present: is world_size right?)")


def test_bad_deflate_data_costs_one_gzip_member(dftracer_set: Path, tmp_path: Path) -> None:
    """DFTracer compresses in chunks (gzip members): damage in one member loses that member, not the file."""
    src = sorted(dftracer_set.glob("*.pfw.gz"))[0]
    text = gzip.decompress(src.read_bytes()).split(b"\n")
    body = [line for line in text if line.strip() not in (b"", b"[", b"]")]
    thirds = [body[: len(body) // 3], body[len(body) // 3: 2 * len(body) // 3], body[2 * len(body) // 3:]]
    members = [gzip.compress(b"[\n" + b"\n".join(thirds[0]) + b"\n")]
    members += [gzip.compress(b"\n".join(part) + b"\n") for part in thirds[1:]]
    whole = tmp_path / "whole.pfw.gz"
    whole.write_bytes(b"".join(members))
    middle = bytearray(members[1])
    for k in range(len(middle) // 2, len(middle) // 2 + 16):  # flip bytes inside the deflate data
        middle[k] ^= 0xFF
    bad = tmp_path / "bad.pfw.gz"
    bad.write_bytes(members[0] + bytes(middle) + members[2])
    full, damaged = read_any(whole), read_any(bad)
    [w] = [w for w in damaged.warnings if "corrupt gzip data" in w]
    assert w.startswith(f"{bad}: corrupt gzip data at byte {len(members[0])} (")
    assert w.endswith(f"{len(middle)} compressed bytes left out, reading went on at the next gzip member")
    n_first = sum(1 for line in thirds[0] if b'"ph":"X"' in line or b'"ph":1' in line)
    assert 0 < len(damaged.frame) < len(full.frame)
    assert set(damaged.frame["start_ns"]) < set(full.frame["start_ns"])
    assert len(damaged.frame) >= n_first


def test_a_bad_value_in_a_dftracer_file_leaves_the_fast_parser(dftracer_set: Path, tmp_path: Path) -> None:
    """The bulk parser (the native scanner) finds the negative dur, and the line parser names its line."""
    src = sorted(dftracer_set.glob("*.pfw.gz"))[0]
    lines = gzip.decompress(src.read_bytes()).decode().split("\n")
    k = next(i for i, line in enumerate(lines) if re.search(r'"dur":\s*[1-9]', line))
    lines[k] = re.sub(r'"dur":\s*\d+', '"dur":-7', lines[k], count=1)
    bad = tmp_path / "rank_0.pfw.gz"
    bad.write_bytes(gzip.compress("\n".join(lines).encode()))
    full, damaged = read_any(src), read_any(bad)
    assert f"{bad}:{k + 1}: negative dur -7; event skipped" in damaged.warnings
    assert len(damaged.frame) == len(full.frame) - 1
    assert damaged.meta.parser == "lines" and full.meta.parser == "scan"


@pytest.fixture(scope="module")
def two_rank_run(real_run_factory, tmp_path_factory) -> Path:
    return real_run_factory(tmp_path_factory.mktemp("two"), ranks=2)[0]


@pytest.mark.parametrize("shift_s", [30, 2 * 86400])
def test_one_rank_shifted_is_flagged_or_left_out(two_rank_run: Path, tmp_path: Path, shift_s: int) -> None:
    run = tmp_path / "run"
    shutil.copytree(two_rank_run, run)
    (rank1,) = (run / "app").glob("rank-1-*.pfw")
    shift_file(rank1, shift_s * 1_000_000)
    res = merge_path(run)
    if shift_s == 30:
        [w] = [w for w in res.warnings if w.startswith(f"{rank1}: rank 1's app layer")]
        # the offset is measured against rank 0's own times, so the ranks' natural start jitter (~0.1 s) is in it
        m = re.search(r"starts and ends \+(\d+\.\d) s away from the other ranks'", w)
        assert m and abs(float(m.group(1)) - 30.0) <= 1.0, w
        assert any(w.startswith("rank 1: 100 % of its posix rows lie outside") for w in res.warnings)
        assert res.rows_per_layer()["app"] == merge_path(two_rank_run).rows_per_layer()["app"]
    else:  # a different day: not this run's; the run keeps its one-day span
        assert f"{rank1}: its events start +48.0 h from the run's launch (manifest.json): a different run or a " \
               "wrong clock; left out of the merge" in res.warnings
        assert set(res.frame.loc[res.frame["layer"] == "app", "rank"]) == {0}
        assert res.frame["end_ns"].max() - res.frame["start_ns"].min() < 3600 * 10**9


def test_unshifted_runs_are_not_flagged(two_rank_run: Path, real_run) -> None:
    for run in (two_rank_run, real_run[0]):
        res = merge_path(run)
        assert not [w for w in res.warnings if "suspect" in w or "left out" in w], res.warnings


def test_a_one_rank_app_file_shifted_from_its_own_posix_layer(run_copy: Path) -> None:
    shift_file(app_file(run_copy), 30_000_000)
    res = merge_path(run_copy)
    [w] = [w for w in res.warnings if w.startswith("rank 0: 100 % of its posix rows lie outside its app layer's")]
    m = re.search(r"\(median (-\d+\.\d) s apart\)", w)  # medians of two layers: a few ms of the run's own span
    assert m and abs(float(m.group(1)) + 30.0) <= 1.0, w
