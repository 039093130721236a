"""Run directories live in shared scratch: a symbolic link planted at a name the tools write must never make them
write into another file of the user running them (issue: hardening, planted links)."""
from __future__ import annotations

import os
from pathlib import Path

from timelogger import layout
from timelogger.cli import prepare, setup_parser
from trace_merge.cli import main as trace_merge

OUTPUTS = (layout.MERGED, layout.COUNTERS, layout.MERGE_INFO)
SECRET = "the victim's own data\n"


def victim(tmp_path: Path, name: str) -> Path:
    v = tmp_path / "home" / name
    v.parent.mkdir(exist_ok=True)
    v.write_text(SECRET)
    return v


def test_merge_refuses_a_link_at_its_lock(run_copy, tmp_path, capsys):
    v = victim(tmp_path, "lock-victim")
    (run_copy / layout.MERGE_LOCK).symlink_to(v)
    assert trace_merge(["merge", str(run_copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"trace-merge: error: {run_copy / layout.MERGE_LOCK}: is a symbolic link, not a lock file; "
                       "not written through (remove it if it is not yours)")
    assert v.read_text() == SECRET and not any((run_copy / n).exists() for n in OUTPUTS)


def test_merge_never_writes_through_links_at_temporary_names(run_copy, tmp_path, capsys):
    """Links at the temporaries' old predictable names (this process's pid and others', live and dead) and at
    names of the new form: the merge writes to names nobody could plant, and leaves every victim as it was."""
    victims = []
    for name in OUTPUTS:
        for pid in (os.getpid(), 1, 999_999):
            for suffix in ("", "-0123456789abcdef"):
                v = victim(tmp_path, f"{name}-{pid}{suffix}")
                (run_copy / f".{name}.tmp-{pid}{suffix}").symlink_to(v)
                victims.append(v)
    assert trace_merge(["merge", str(run_copy)]) == 0
    capsys.readouterr()
    assert all(v.read_text() == SECRET for v in victims)
    for name in OUTPUTS:
        out = run_copy / name
        assert out.is_file() and not out.is_symlink() and out.stat().st_size > 0


def test_report_and_export_never_write_through_links(run_copy, tmp_path, capsys):
    v = victim(tmp_path, "report-victim")
    for pid in (os.getpid(), 1):
        (tmp_path / f".report.html.tmp-{pid}").symlink_to(v)
        (tmp_path / f".trace.json.gz.tmp-{pid}").symlink_to(v)
    assert trace_merge(["report", str(run_copy), "-o", str(tmp_path / "report.html")]) == 0
    assert trace_merge(["export", str(run_copy), "--perfetto", str(tmp_path / "trace.json.gz")]) == 0
    capsys.readouterr()
    assert v.read_text() == SECRET and (tmp_path / "report.html").stat().st_size > 0


def test_launcher_never_writes_through_links(tmp_path, monkeypatch):
    """The manifest's and the launch record's temporaries and the --force trash directory at their old
    predictable names: the launcher writes its own files and leaves the victims alone."""
    run = tmp_path / "run"
    (run / layout.LAUNCH_DIR).mkdir(parents=True)
    pid = os.getpid()
    v_manifest = victim(tmp_path, "manifest-victim")
    v_record = victim(tmp_path, "record-victim")
    v_dir = tmp_path / "home" / "dir-victim"
    v_dir.mkdir()
    (v_dir / "keep.txt").write_text(SECRET)
    (run / f".{layout.MANIFEST}.{pid}.tmp").symlink_to(v_manifest)
    (run / layout.LAUNCH_DIR / f".rank-0.json.{pid}.tmp").symlink_to(v_record)
    (run / f".timelogger-previous-run-{pid}").symlink_to(v_dir, target_is_directory=True)
    (run / layout.MANIFEST).write_text("{}")  # a previous run, so that --force clears it
    for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    args = setup_parser().parse_args(["-o", str(run), "--force", "--", "python", "train.py"])
    prepare(args, dict(os.environ))
    assert v_manifest.read_text() == SECRET and v_record.read_text() == SECRET
    assert (v_dir / "keep.txt").read_text() == SECRET
    manifest = run / layout.MANIFEST
    assert manifest.is_file() and not manifest.is_symlink() and '"world_size": 1' in manifest.read_text()
