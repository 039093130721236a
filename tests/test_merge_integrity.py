"""A stored merge is used only for the sources it was made from; copies, odd entries and a run compared with itself.

Every test copies a real run (TimeLogger + DFTracer preload, ``real_run`` in conftest) and damages the copy.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from trace_merge.cli import main
from trace_merge.errors import TraceInputError
from trace_merge.identity import EDGE_BYTES, duplicates, fingerprint, identity_of
from trace_merge.merge import merge_path, read_merged, write_merged
from trace_merge.run import Run


@pytest.fixture()
def merged_copy(run_copy) -> Path:
    """``run_copy`` with its merge stored (and used: the first open is from the cache)."""
    write_merged(merge_path(run_copy), run_copy)
    assert Run.open(run_copy).cached
    return run_copy


def posix_file(run: Path) -> Path:
    (p,) = (run / "posix").glob("*.pfw.gz")
    return p


def app_file(run: Path) -> Path:
    (p,) = (run / "app").glob("*.pfw")
    return p


# -- 1. source identity ------------------------------------------------------------------------------------


def test_deleted_source_is_merged_again(merged_copy):
    posix = posix_file(merged_copy)
    posix.unlink()
    run = Run.open(merged_copy)
    assert not run.cached and "posix" not in set(run.frame["layer"].astype(str))
    assert f"sources changed since it was made (posix/{posix.name} removed)" in run.warnings[0]


def test_source_added_with_an_old_mtime_is_merged_again(merged_copy, dftracer_set):
    """``cp -p`` / ``rsync -a``: the new file is older than merged.parquet, which the mtime rule trusted."""
    added = merged_copy / "posix" / "node2-trace.pfw.gz"
    shutil.copy2(dftracer_set / "rank_1.pfw.gz", added)
    old = (merged_copy / "merged.parquet").stat().st_mtime - 86_400
    os.utime(added, (old, old))
    run = Run.open(merged_copy)
    assert not run.cached
    assert "sources changed since it was made (posix/node2-trace.pfw.gz added)" in run.warnings[0]
    assert any(w.startswith(str(added)) for w in run.warnings[1:]), "the merge itself looked at the new file"


def test_manifest_is_part_of_the_identity(merged_copy):
    manifest = json.loads((merged_copy / "manifest.json").read_text())
    manifest["world_size"] = 2
    (merged_copy / "manifest.json").write_text(json.dumps(manifest))
    run = Run.open(merged_copy)
    assert not run.cached and "manifest.json changed" in run.warnings[0]
    assert any("rank(s) 1 of world_size 2" in w for w in run.warnings)


def test_a_copied_run_keeps_its_merge(merged_copy, tmp_path):
    """Names are relative and times are not part of the identity: ``cp -r`` (new mtimes) keeps the cache."""
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(merged_copy, moved, copy_function=shutil.copy)
    run = Run.open(moved)
    assert run.cached and run.warnings == []


def restamp(run: Path) -> None:
    """Record the current parquet files in merge_info.json, as the writer of a consistent set would."""
    info = json.loads((run / "merge_info.json").read_text())
    info["outputs"] = {n: identity_of(run / n) for n in ("merged.parquet", "counters.parquet")}
    (run / "merge_info.json").write_text(json.dumps(info))


def test_merged_parquet_with_the_wrong_schema_is_merged_again(merged_copy):
    frame = pd.read_parquet(merged_copy / "merged.parquet").drop(columns=["bytes"]).rename(columns={"file": "path"})
    frame.to_parquet(merged_copy / "merged.parquet")
    restamp(merged_copy)  # a complete set from another version: the schema check, not the identity, catches it
    with pytest.raises(TraceInputError, match=r"merged.parquet: columns are not the schema's \(missing: bytes, "
                                              r"file; unexpected: path\)"):
        read_merged(merged_copy)
    run = Run.open(merged_copy)
    assert not run.cached and run.frame["bytes"].sum() > 0
    assert "columns are not the schema's" in run.warnings[0] and "merged again from the sources" in run.warnings[0]


def test_unreadable_merged_parquet_is_merged_again(merged_copy):
    data = (merged_copy / "merged.parquet").read_bytes()
    (merged_copy / "merged.parquet").write_bytes(data[: len(data) // 2])  # cut short
    run = Run.open(merged_copy)
    assert not run.cached and len(run.frame) == 32
    assert run.warnings[0].startswith(f"{merged_copy}: merge outputs do not belong together (merged.parquet changed")
    restamp(merged_copy)
    run = Run.open(merged_copy)
    assert not run.cached and run.warnings[0].startswith(f"{merged_copy / 'merged.parquet'}: cannot be read")


@pytest.mark.parametrize("text,why", [("[1, 2]", "merge_info.json is not a JSON object"),
                                      ('{"sources": [', "merge_info.json cannot be read"),
                                      ('{"sources": []}', "no source identity recorded")])
def test_bad_merge_info_is_merged_again_and_does_not_block_merge(merged_copy, text, why, capsys):
    (merged_copy / "merge_info.json").write_text(text)
    run = Run.open(merged_copy)
    assert not run.cached and why in run.warnings[0] and len(run.frame) == 32
    if why != "no source identity recorded":  # a set from an older version is complete: --force replaces it
        capsys.readouterr()
        assert main(["merge", str(merged_copy)]) == 0
        assert why in capsys.readouterr().err
        assert Run.open(merged_copy).cached


def test_fingerprint_reads_the_edges_of_a_file(tmp_path):
    """Size and the first and last 64 KiB: a change there is seen, one in the middle of a large file is not
    (the documented limit; trace files grow at the end)."""
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(4 * EDGE_BYTES))

    def flipped(at: int) -> tuple[int, str]:
        data = bytearray(big.read_bytes())
        data[at] ^= 1
        other = tmp_path / f"flip-{at}.bin"
        other.write_bytes(data)
        return fingerprint(other)

    base = fingerprint(big)
    assert base[0] == 4 * EDGE_BYTES
    assert flipped(10) != base and flipped(4 * EDGE_BYTES - 1) != base
    assert flipped(2 * EDGE_BYTES) == base
    with open(big, "ab") as fh:
        fh.write(b"x")
    assert fingerprint(big)[0] == base[0] + 1 and fingerprint(big) != base


# -- 2. the same content twice ---------------------------------------------------------------------------


@pytest.mark.parametrize("layer,copy_name", [("app", "rank-0-pid-1-1.pfw"), ("posix", "trace-copy-preload.pfw.gz")])
def test_a_duplicated_file_is_read_once(run_copy, real_run, layer, copy_name):
    original = app_file(run_copy) if layer == "app" else posix_file(run_copy)
    copy = run_copy / layer / copy_name
    shutil.copy(original, copy)
    res, ref = merge_path(run_copy), merge_path(real_run[0])
    first, second = sorted([original, copy])
    assert f"{second}: same content as {first}; skipped" in res.warnings
    assert len(res.frame) == len(ref.frame)
    rows = res.frame["layer"] == layer
    assert rows.sum() == (ref.frame["layer"] == layer).sum()
    assert res.frame.loc[rows, "bytes"].sum() == ref.frame.loc[ref.frame["layer"] == layer, "bytes"].sum()
    assert str(second) not in res.sources


def test_same_size_and_edges_but_different_content_is_not_a_copy(run_copy):
    """Candidates are confirmed byte by byte: a trace differing only in its middle is a different trace."""
    with gzip.open(posix_file(run_copy), "rt") as fh:
        lines = fh.read().splitlines()
    pad = ['{"id":%d,"name":"pad","cat":"POSIX","pid":1,"tid":1,"ts":1,"dur":1,"ph":"X","args":{}}' % i
           for i in range(6000)]  # enough lines that the middle is beyond both 64 KiB edges
    text = "\n".join(lines[:1] + pad + lines[1:]) + "\n"
    a, b = run_copy / "posix" / "a.pfw", run_copy / "posix" / "b.pfw"
    a.write_text(text)
    mid = len(text) // 2
    mid = text.index('"dur":1', mid) + len('"dur":')
    b.write_text(text[:mid] + "2" + text[mid + 1:])
    assert os.path.getsize(a) > 3 * EDGE_BYTES and fingerprint(a) == fingerprint(b)
    assert duplicates({a: identity_of(a), b: identity_of(b)}) == {}
    shutil.copy(a, run_copy / "posix" / "c.pfw")
    assert duplicates({p: identity_of(p) for p in (a, b, run_copy / "posix" / "c.pfw")}) == {
        run_copy / "posix" / "c.pfw": a}


# -- 4. odd entries and a run compared with itself ---------------------------------------------------------


def test_a_directory_named_like_a_trace_file_is_named(run_copy, tmp_path):
    odd = run_copy / "posix" / "x.pfw.gz"
    odd.mkdir()
    res = merge_path(run_copy)
    assert f"{odd}: a directory named like a trace file; skipped" in res.warnings
    loose = tmp_path / "loose"
    shutil.copytree(run_copy / "posix", loose)
    assert f"{loose / 'x.pfw.gz'}: a directory named like a trace file; skipped" in merge_path(loose).warnings


def test_a_dangling_tf_directory_is_named(run_copy, tmp_path):
    """``tf/`` a link to scratch space that was purged: the framework layer is gone, and the merge says so."""
    (run_copy / "tf").symlink_to(tmp_path / "purged-scratch")
    res = merge_path(run_copy)
    assert f"{run_copy / 'tf'}: cannot list (No such file or directory); the traces in it are left out" in res.warnings


def test_an_unreadable_tf_directory_is_named(run_copy):
    """``tf/`` with mode 000. Root reads it anyway: as root the merge runs without the capabilities that let
    root pass file permissions (``setpriv``), where it meets the same ``EACCES`` as any user."""
    (run_copy / "tf" / "rank-0").mkdir(parents=True)
    cmd = [sys.executable, "-m", "trace_merge", "summary", "--json", str(run_copy)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root, where mode 000 does not stop reads, and without setpriv to drop that")
        cmd = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *cmd]
    os.chmod(run_copy / "tf", 0o000)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(run_copy / "tf", 0o755)
    assert res.returncode == 0, res.stderr
    expected = f"{run_copy / 'tf'}: cannot list (Permission denied); the traces in it are left out"
    assert expected in json.loads(res.stdout)["warnings"]
    assert f"trace-merge: warning: {expected}" in res.stderr


def test_compare_a_run_with_itself(real_run, capsys):
    assert main(["compare", str(real_run[0]), str(real_run[0]), "--json"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert list(doc) == ["run", "run #2", "delta run #2", "ratio run #2"]
    assert doc["run"]["read_bytes"] == doc["run #2"]["read_bytes"] == 16_000_000
    assert doc["delta run #2"]["read_bytes"] == 0 and doc["ratio run #2"]["read_bytes"] == 1
    assert f"{real_run[0]}: given 2 times, compared with itself" in cap.err


# -- 5. one read, one identity pass ---------------------------------------------------------------------------


@pytest.mark.parametrize("partitioned", [False, True])
def test_opening_a_stored_merge_reads_merge_info_once_and_fingerprints_sources_once(merged_copy, monkeypatch,
                                                                                       partitioned):
    """Whether a stored merge is used is decided once per open, whichever path then reads it (whole frame, or
    partition by partition)."""
    from trace_merge import sources, store

    if partitioned:  # store it again with a partition layout
        from trace_merge import engines
        from trace_merge import partitioned as pt

        pm = pt.merge_partitioned(merged_copy, engine=engines.Inline(), summary_only=False)
        try:
            write_merged(pm, merged_copy, force=True)
        finally:
            pm.cleanup()
    calls = {"info": 0, "identity": 0}
    read_info, identity = store._read_info, store.source_identity

    def counted(name, fn):
        def inner(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return inner

    monkeypatch.setattr(store, "_read_info", counted("info", read_info))
    monkeypatch.setattr(store, "source_identity", counted("identity", identity))
    monkeypatch.setattr(sources, "source_identity", counted("identity", identity))
    run = Run.open(merged_copy, partitioned=partitioned)
    assert run.cached and calls == {"info": 1, "identity": 1}
    assert (not run.merge.in_memory) == partitioned


def test_merge_info_round_trips_and_a_hand_edited_field_falls_back(merged_copy):
    from trace_merge.merged import MergeInfo

    text = (merged_copy / "merge_info.json").read_text()
    info = MergeInfo.parse(json.loads(text))
    assert info.to_json() == text and info.rows == len(Run.open(merged_copy).frame) and info.inputs
    edited = json.loads(text) | {"rows": "many", "dropped_intervals": {"a.pfw": -3, "b.pfw": 7},
                                 "partitions": [{"rank": 0}]}
    back = MergeInfo.parse(edited)
    assert back.rows == 0 and back.dropped_intervals == {"b.pfw": 7} and back.partitions is None
    with pytest.raises(ValueError, match="not a JSON object"):
        MergeInfo.parse([1, 2])
