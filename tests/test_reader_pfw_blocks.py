"""``pfw.read_blocks``: a large DFTracer trace read block by block gives the rows :func:`pfw.read` gives, and the
same bad-input handling (a corrupt gzip member left out with a warning, a truncated stream kept up to the damage).
Real traces from ``dftracer_gen_fake_trace``; tiny blocks make small files stream."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.runs import make_dftracer_set
from trace_merge import threads
from trace_merge.errors import TraceInputError
from trace_merge.readers import pfw
from trace_merge.readers.pfw import reader
from trace_merge.schema import concat_frames, to_frame

BLOCK = 1 << 16  # 64 KiB of text per block: a ~1 MiB trace comes in many blocks


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    out = make_dftracer_set(tmp_path_factory.mktemp("blocks") / "t", ranks=1, epochs=2, steps=60)
    return sorted(out.glob("*.pfw.gz"))[0]


def _comparable(frame: pd.DataFrame) -> pd.DataFrame:
    cats = [c for c in frame.columns if str(frame[c].dtype) == "category"]
    return frame.astype({c: object for c in cats}).reset_index(drop=True)


def test_blocks_give_the_whole_files_rows_and_tables(trace: Path) -> None:
    whole = pfw.read(trace)
    parts = list(pfw.read_blocks(trace, BLOCK))
    assert len(parts) >= 4
    pd.testing.assert_frame_equal(_comparable(whole.frame), _comparable(concat_frames([p.frame for p in parts])))
    assert parts[-1].meta.files == whole.meta.files
    assert all(not p.warnings for p in parts) and not whole.warnings


def test_without_args_the_rows_are_the_same_and_args_empty(trace: Path, tmp_path: Path) -> None:
    """``args=False`` (a summary's pieces keep no args): the same rows and columns, ``args`` missing everywhere,
    block by block and whole (a category of the app's own is kept in ``args``: ``{"cat": "MyLoader"}``)."""
    own = tmp_path / "own.pfw.gz"
    own.write_bytes(gzip.compress(gzip.decompress(trace.read_bytes()).replace(b'"cat":"POSIX"', b'"cat":"MyLoader"')))
    with_args = concat_frames([p.frame for p in pfw.read_blocks(own, BLOCK)])
    assert with_args["args"].notna().any()
    for frame in (concat_frames([p.frame for p in pfw.read_blocks(own, BLOCK, args=False)]),
                  pfw.read(own, args=False).frame):
        assert str(frame["args"].dtype) == "string" and frame["args"].isna().all()
        pd.testing.assert_frame_equal(_comparable(frame.drop(columns="args")),
                                      _comparable(with_args.drop(columns="args")))


def test_a_plain_text_trace_streams_too(trace: Path, tmp_path: Path) -> None:
    plain = tmp_path / "t.pfw"
    plain.write_bytes(gzip.decompress(trace.read_bytes()))
    parts = list(pfw.read_blocks(plain, BLOCK))
    assert len(parts) >= 4
    assert sum(len(p.frame) for p in parts) == len(pfw.read(trace).frame)


def _streamed(path: Path) -> "tuple[int, list[str]]":
    """Rows and warnings of ``path`` read block by block, each block's warnings taken as it comes (as the merge
    takes them): a warning added to an earlier block's list after it was handed on would be lost."""
    rows, warnings = 0, []
    for part in pfw.read_blocks(path, BLOCK):
        rows += len(part.frame)
        warnings += list(part.warnings)
    return rows, warnings


def _members(data: bytes) -> list[int]:
    """Offsets of the gzip members of ``data`` (DFTracer compresses in chunks)."""
    out, at = [], 0
    while (at := data.find(b"\x1f\x8b\x08", at)) != -1:
        out.append(at)
        at += 3
    return out


def _chunked(trace: Path, out: Path, parts: int = 6) -> Path:
    """The trace re-compressed as ``parts`` gzip members of whole lines, as DFTracer writes in chunks."""
    lines = gzip.decompress(trace.read_bytes()).splitlines(keepends=True)
    step = -(-len(lines) // parts)
    out.write_bytes(b"".join(gzip.compress(b"".join(lines[i:i + step])) for i in range(0, len(lines), step)))
    return out


def test_a_corrupt_member_is_left_out_with_a_warning_and_reading_goes_on(trace: Path, tmp_path: Path) -> None:
    chunked = _chunked(trace, tmp_path / "chunked.pfw.gz")
    assert sum(len(p.frame) for p in pfw.read_blocks(chunked, BLOCK)) == len(pfw.read(trace).frame)
    data = bytearray(chunked.read_bytes())
    members = _members(bytes(data))
    assert len(members) >= 3
    hit = members[len(members) // 2]
    data[hit + 40: hit + 60] = b"\xff" * 20  # damage the deflate data of a middle member
    bad = tmp_path / "bad.pfw.gz"
    bad.write_bytes(bytes(data))
    whole = pfw.read(bad)
    rows, warnings = _streamed(bad)
    assert any("corrupt gzip data" in w and str(bad) in w for w in warnings), warnings
    full = len(pfw.read(trace).frame)
    assert 0 < rows < full  # the damaged member's events are gone, the rest are read
    assert abs(rows - len(whole.frame)) <= full // len(members) + 5  # as read() recovers, within one member


def _made_first(items):
    """:func:`trace_merge.threads.ahead` at its latest schedule: the next item is made before this one is handed on."""
    items = iter(items)
    coming = next(items, None)
    while coming is not None:
        item, coming = coming, next(items, None)
        yield item


def test_each_block_has_the_same_rows_and_warnings_whether_the_next_is_read_ahead_or_not(
        trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The text of the next block is decompressed while one is parsed (:func:`trace_merge.threads.ahead`): what the
    decompression finds still goes with the block it came with, however far the reading ahead has got."""
    data = bytearray(_chunked(trace, tmp_path / "chunked.pfw.gz", parts=12).read_bytes())
    for hit in _members(bytes(data))[3::4]:
        data[hit + 40: hit + 60] = b"\xff" * 20
    bad = tmp_path / "bad.pfw.gz"
    bad.write_bytes(bytes(data[: int(len(data) * 0.9)]))  # and a truncated end
    before = threads.limit()
    try:
        threads.set_limit(1)  # nothing read ahead
        plain = [(len(p.frame), p.warnings) for p in pfw.read_blocks(bad, BLOCK)]
        threads.set_limit(2)
        assert [(len(p.frame), p.warnings) for p in pfw.read_blocks(bad, BLOCK)] == plain
    finally:
        threads.set_limit(before)
    monkeypatch.setattr(reader, "ahead", _made_first)
    assert [(len(p.frame), p.warnings) for p in pfw.read_blocks(bad, BLOCK)] == plain
    assert sum(len(w) for _, w in plain) >= 3


def test_a_truncated_stream_keeps_what_was_complete(trace: Path, tmp_path: Path) -> None:
    data = trace.read_bytes()
    cut = tmp_path / "cut.pfw.gz"
    cut.write_bytes(data[: int(len(data) * 0.7)])
    rows, warnings = _streamed(cut)
    assert [w for w in warnings if "truncated" in w] == [f"{cut}: gzip stream truncated (unexpected end of file); "
                                                         "read what was complete"], warnings
    assert 0 < rows < len(pfw.read(trace).frame)


def test_garbage_after_a_member_is_an_error_naming_the_file(trace: Path, tmp_path: Path) -> None:
    bad = tmp_path / "tail.pfw.gz"
    bad.write_bytes(trace.read_bytes() + b"this is not gzip" * 100)
    with pytest.raises(TraceInputError, match="tail.pfw.gz: corrupt gzip data"):
        list(pfw.read_blocks(bad, BLOCK))


def test_resolve_names_maps_categories_not_rows() -> None:
    """DFTracer file hashes a block could not resolve get the run's names: two hashes of one file become one
    category, a hash nobody named stays, a missing file stays missing, and the other columns are untouched."""
    from trace_merge.sources import resolve_names

    frame = pd.DataFrame({"file": pd.Categorical(["h1", "h2", None, "/data/a.h5", "h3", "h1"]), "x": range(6)})
    out = resolve_names(frame, {"h1": "/data/a.h5", "h2": "/data/b.h5", "h9": "/data/z.h5"})
    assert out["file"].tolist()[:2] == ["/data/a.h5", "/data/b.h5"] and pd.isna(out["file"].iloc[2])
    assert out["file"].tolist()[3:] == ["/data/a.h5", "h3", "/data/a.h5"]
    assert sorted(out["file"].cat.categories) == ["/data/a.h5", "/data/b.h5", "h3"]
    assert out["x"].tolist() == list(range(6)) and frame["file"].tolist()[0] == "h1"  # the input is not changed
    assert resolve_names(frame, {"h7": "/elsewhere"}) is frame  # nothing to resolve: the same frame


def test_a_frame_built_from_owned_columns_takes_them_and_copies_read_only_ones() -> None:
    """``to_frame(owned=True)`` (the reader's fresh columns) takes an array of the column's type as it is, the same
    frame as copying them gives; a read-only array (a view of Arrow's buffers) is still copied."""
    n = 5
    rank = np.arange(n, dtype=np.int64)
    start = np.arange(n, dtype=np.int64) * 10
    start.flags.writeable = False  # as a zero-copy view of an Arrow buffer is
    cols = {"layer": pd.Categorical(["app"] * n), "cat": pd.Categorical(["io"] * n),
            "name": pd.Categorical(list("abcde")), "rank": rank, "start_ns": start,
            "dur_ns": np.ones(n, dtype=np.int64),
            "step": pd.arrays.IntegerArray(np.arange(n, dtype=np.int64), np.array([0, 1, 0, 0, 1], dtype=bool))}
    owned, copied = to_frame(cols, owned=True), to_frame(cols)
    pd.testing.assert_frame_equal(owned, copied)
    assert np.shares_memory(owned["rank"].to_numpy(), rank)
    assert not np.shares_memory(copied["rank"].to_numpy(), rank)
    assert owned["step"].array is cols["step"]
    assert not np.shares_memory(owned["start_ns"].to_numpy(), start) and owned["start_ns"].to_numpy().flags.writeable
