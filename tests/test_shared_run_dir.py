"""Run directories live in shared scratch: another user may plant links or directories of their own in a run
directory that root (or any other user) then launches into or merges. The launcher never writes or clears through
them, two launches of one rank never share a run directory, and ``trace-merge`` never reads through another user's
links and writes its outputs no more readable than its inputs (issue: hardening, shared run directories).

The cases with a second user are real: as root, with ``useradd`` at hand, the test makes one and chowns to it;
elsewhere they are skipped with the reason.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.tools import clean_env
from timelogger import layout

SECRET = "only root may write here\n"


@pytest.fixture(scope="module")
def other_uid() -> "int":
    """The uid of a second user, made for these tests (``useradd``) and removed after them."""
    if os.geteuid() != 0:
        pytest.skip("not root: cannot make a second user or chown to one")
    useradd, userdel = shutil.which("useradd"), shutil.which("userdel")
    if useradd is None or userdel is None:
        pytest.skip("useradd/userdel not available")
    name = f"tlshared{os.getpid() % 100000}"
    made = subprocess.run([useradd, "-M", "-N", "-s", "/usr/sbin/nologin", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"useradd {name} failed: {made.stderr.strip()}")
    try:
        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run([userdel, name], capture_output=True)


def root_only(tmp_path: Path) -> Path:
    """A directory only root may write, holding one file that must survive."""
    d = tmp_path / "root-only"
    d.mkdir(mode=0o700)
    (d / "keep.txt").write_text(SECRET)
    return d


def plant_link(at: Path, target: Path, uid: int) -> None:
    """``at`` -> ``target``, made by user ``uid`` (as root: the link is chowned to it)."""
    at.symlink_to(target, target_is_directory=target.is_dir())
    os.lchown(at, uid, -1)


def shared_run(tmp_path: Path, uid: int) -> Path:
    """An empty run directory the other user made (world-writable scratch of theirs)."""
    run = tmp_path / "run"
    run.mkdir()
    os.chown(run, uid, -1)
    os.chmod(run, 0o1777)
    return run


def launch(run: Path, *opts: str, cmd: tuple = ("true",)) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "timelogger", "run", "-o", str(run), *opts, "--", *cmd],
                          env=clean_env(), capture_output=True, text=True, timeout=90)


# -- 1. the launcher writes only inside the run ----------------------------------------------------------------

#: (layer directory, the option that makes the launcher create or use it)
LAYERS = [(layout.LAUNCH_DIR, ()), (layout.APP_DIR, ()), (layout.TF_DIR, ("--tf-profile",)),
          (layout.HOROVOD_DIR, ("--horovod-timeline",)), (layout.POSIX_DIR, ()), (layout.DARSHAN_DIR, ()),
          (layout.NOISE_DIR, ("--noise", "cpu:0.1"))]


@pytest.mark.parametrize("name, opts", LAYERS)
def test_launcher_refuses_a_layer_dir_linked_out_of_the_run(tmp_path, other_uid, name, opts):
    run = shared_run(tmp_path, other_uid)
    victim = root_only(tmp_path)
    plant_link(run / name, victim, other_uid)
    p = launch(run, *opts)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [f"timelogger: {run / name}: is a link or not a directory; refusing to write "
                                     "through it"]
    assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_text() == SECRET
    assert os.listdir(run) == [name]  # nothing left behind: no launch/, no lock, no manifest


@pytest.mark.parametrize("name, opts", LAYERS)
def test_launcher_refuses_a_layer_dir_of_another_user(tmp_path, other_uid, name, opts):
    run = shared_run(tmp_path, other_uid)
    (run / name).mkdir()
    os.chown(run / name, other_uid, -1)
    p = launch(run, *opts)
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [f"timelogger: {run / name}: owned by another user (uid {other_uid}); "
                                     "refusing to write there"]
    assert os.listdir(run) == [name] and os.listdir(run / name) == []


def test_launcher_refuses_a_launch_record_planted_as_a_link(tmp_path, other_uid):
    """A rank's launch record (and its temporaries) in a launch/ of ours: replaced, never written through."""
    run = tmp_path / "run"
    (run / layout.LAUNCH_DIR).mkdir(parents=True)
    victim = root_only(tmp_path) / "keep.txt"
    plant_link(layout.launch_record(run, 0), victim, other_uid)
    plant_link(layout.launch_lock(run, 0), victim, other_uid)
    p = launch(run)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert str(layout.launch_lock(run, 0)) in p.stderr and victim.read_text() == SECRET


# -- 2. --force never follows a link out of the run -------------------------------------------------------------

def test_force_refuses_a_layer_dir_linked_out_of_the_run(tmp_path, other_uid):
    """The previous run's app/ is a link into a root-only directory: --force must not move (and delete) the files
    there. It is refused, like any launch, and the target's files survive."""
    run = shared_run(tmp_path, other_uid)
    victim = root_only(tmp_path)
    (run / layout.MANIFEST).write_text("{}")  # a previous run, so that --force clears it
    plant_link(run / layout.APP_DIR, victim, other_uid)
    p = launch(run, "--force")
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [f"timelogger: {run / layout.APP_DIR}: is a link or not a directory; refusing "
                                     "to write through it"]
    assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_text() == SECRET
    assert sorted(os.listdir(run)) == [layout.APP_DIR, layout.MANIFEST]


def test_force_removes_a_link_as_a_link(tmp_path, other_uid):
    """Links inside a layer directory of the previous run (to a directory and to a file) go as links: the files
    they point at survive, and the trash is deleted without following them."""
    run = tmp_path / "run"
    (run / layout.POSIX_DIR).mkdir(parents=True)
    (run / layout.MANIFEST).write_text("{}")
    victim = root_only(tmp_path)
    plant_link(run / layout.POSIX_DIR / "trace-old.pfw", victim, other_uid)
    plant_link(run / layout.POSIX_DIR / "trace-old-2.pfw", victim / "keep.txt", other_uid)
    p = launch(run, "--force")
    assert p.returncode == 0, p.stderr
    assert "removed the previous run" in p.stderr
    assert os.listdir(run / layout.POSIX_DIR) == []
    assert sorted(os.listdir(victim)) == ["keep.txt"] and (victim / "keep.txt").read_text() == SECRET
    assert not [n for n in os.listdir(run) if n.startswith(".timelogger-previous-run-")]


# -- 3. one launch of a rank per run directory ------------------------------------------------------------------

def _refused_by_lock(p: "subprocess.CompletedProcess | tuple", run: Path) -> bool:
    err = p[1] if isinstance(p, tuple) else p.stderr
    lines = err.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith(f"timelogger: {run.resolve()}: another launch of rank 0 is "
                                                   "running in this run directory")


def test_two_launches_started_together_one_runs(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "timelogger", "run", "-o", str(run), "--", "sleep", "2"]
    procs = [subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(60), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    (refused,) = [r for r in results if r[0] == 2]
    assert _refused_by_lock(refused, run), refused[1]
    assert len(list((run / layout.APP_DIR).glob("*.pfw"))) <= 1  # (sleep writes none; the logger is not in it)
    assert len(list((run / layout.LAUNCH_DIR).glob(layout.LAUNCH_GLOB))) == 1


def test_the_program_holds_the_lock_after_exec(tmp_path):
    """The launcher execs the program: the lock goes with it, so --force cannot clear a run that is still running,
    and once the program has ended the next launch goes ahead (the kernel dropped the lock)."""
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "timelogger", "run", "-o", str(run), "--", "sleep", "3"],
                             env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (run / layout.MANIFEST).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the launcher has execed sleep by now
        second = launch(run, "--force")
        assert second.returncode == 2 and _refused_by_lock(second, run), second.stderr
        assert (run / layout.MANIFEST).exists()  # the running job's files were left alone
    finally:
        assert first.wait(30) == 0
    third = launch(run, "--force")
    assert third.returncode == 0, third.stderr


# -- 4. trace-merge of another user's run -----------------------------------------------------------------------

def _chown_tree(top: Path, uid: int) -> None:
    for here, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            os.lchown(Path(here) / name, uid, -1)
    os.lchown(top, uid, -1)


def test_merge_never_reads_through_another_users_links(run_copy, tmp_path, other_uid, capsys):
    """Root merges a run another user owns, whose posix/ is a link to traces only root may read, and whose app/
    holds a link to a root-only trace file: neither is read (a warning names each), the rest is merged."""
    from trace_merge.cli import main as trace_merge
    from trace_merge.run import Run

    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    shutil.move(run_copy / layout.POSIX_DIR, secret / "posix")
    (app_file,) = (run_copy / layout.APP_DIR).glob("*.pfw*")
    shutil.copy(app_file, secret / app_file.name)
    _chown_tree(run_copy, other_uid)
    plant_link(run_copy / layout.POSIX_DIR, secret / "posix", other_uid)
    linked_app = run_copy / layout.APP_DIR / app_file.name.replace("rank-0-", "rank-1-")
    plant_link(linked_app, secret / app_file.name, other_uid)

    assert trace_merge(["merge", str(run_copy)]) == 0
    err = capsys.readouterr().err
    for link in (run_copy / layout.POSIX_DIR, linked_app):
        assert f"{link}: a symbolic link made by another user (uid {other_uid}); not followed" in err
    frame = Run.open(run_copy).frame
    assert "posix" not in set(frame["layer"]) and set(frame["rank"].unique()) == {0}
    inputs = json.loads((run_copy / layout.MERGE_INFO).read_text())["inputs"]
    assert inputs and not [k for k in inputs if k.startswith("posix/") or k == f"app/{linked_app.name}"]


@pytest.mark.parametrize("dir_mode, file_mode, expected", [(0o700, 0o600, 0o600), (0o750, 0o640, 0o640),
                                                           (0o755, 0o644, 0o644)])
def test_merge_outputs_are_no_more_readable_than_the_inputs(run_copy, tmp_path, capsys, dir_mode, file_mode,
                                                            expected):
    from trace_merge.cli import main as trace_merge

    for here, dirs, files in os.walk(run_copy):
        for name in files:
            os.chmod(Path(here) / name, file_mode)
        for name in dirs:
            os.chmod(Path(here) / name, dir_mode)
    os.chmod(run_copy, dir_mode)
    report = tmp_path / "report.html"
    old = os.umask(0o022)
    try:
        assert trace_merge(["merge", str(run_copy)]) == 0
        assert trace_merge(["report", str(run_copy), "-o", str(report)]) == 0
        assert os.umask(0o022) == 0o022  # the command's umask was put back
    finally:
        os.umask(old)
    capsys.readouterr()
    made = [run_copy / n for n in (layout.MERGED, layout.COUNTERS, layout.MERGE_INFO)] + [report]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in made} == {p.name: expected for p in made}
