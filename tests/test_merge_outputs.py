"""``trace-merge merge`` writes its three outputs all or none: two merges at once, SIGTERM, kill -9, disk full.

Every case runs the real CLI in a real subprocess on a copy of a real run. To hit the narrow moments that
matter (outputs half written, or one file renamed of three), the subprocess stops itself there with SIGSTOP
from a hook on the call that follows (writing ``merge_info.json``, the second ``os.replace``); the test then
sends the real signal. Disk full is a real short write: ``RLIMIT_FSIZE`` makes
the kernel fail the write with ``EFBIG``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trace_merge.cli import main
from trace_merge.errors import OutputBusyError
from trace_merge.merge import merge_path, write_merged
from trace_merge.outputs import _take_exclusive_create
from trace_merge.run import Run

OUTPUTS = ("merged.parquet", "counters.parquet", "merge_info.json")

#: ``trace-merge merge`` that stops itself (SIGSTOP) at ``argv[2]``: "info" = the two parquet files written to
#: their temporary names, merge_info.json about to be; "second-rename" = merged.parquet renamed into place,
#: the other two not yet
PAUSED_MERGE = textwrap.dedent("""
    import os, pathlib, signal, sys
    from trace_merge.cli import main

    def stop():
        os.kill(os.getpid(), signal.SIGSTOP)

    if sys.argv[2] == "info":
        real_write = pathlib.Path.write_text
        def hook(self, *a, **kw):
            if self.name.startswith(".merge_info.json.tmp-"):
                stop()
            return real_write(self, *a, **kw)
        pathlib.Path.write_text = hook
    else:
        real_replace, calls = os.replace, []
        def hook(src, dst):
            calls.append(dst)
            if len(calls) == 2:
                stop()
            return real_replace(src, dst)
        os.replace = hook
    sys.exit(main(["merge", sys.argv[1], *sys.argv[3:]]))
""")

#: ``trace-merge merge`` whose files may not grow beyond ``argv[2]`` bytes (a write past it fails with EFBIG)
SMALL_DISK_MERGE = textwrap.dedent("""
    import resource, signal, sys
    from trace_merge.cli import main

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel's SIGXFSZ ends the process at the short write
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.exit(main(["merge", sys.argv[1], *sys.argv[3:]]))
""")


@pytest.fixture()
def run_copy(real_run, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(real_run[0], dst)
    return dst


def leftovers(run: Path) -> list[str]:
    """Temporaries and lock files in ``run``."""
    return sorted(p.name for p in run.iterdir() if p.name.startswith("."))


def present(run: Path) -> list[str]:
    return [n for n in OUTPUTS if (run / n).exists()]


def start_paused(run: Path, where: str, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_MERGE, str(run), where, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"merge ended before it stopped: {proc.communicate()}")
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return proc
        time.sleep(0.01)
    proc.kill()
    pytest.fail("merge did not reach its stop")


def one_line_error(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if not line.startswith("trace-merge: warning: ")]
    assert len(lines) == 1 and lines[0].startswith("trace-merge: error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_second_merge_is_refused_while_one_runs_and_kill_9_leaves_nothing_in_the_way(run_copy, capsys):
    first = start_paused(run_copy, "info")
    # stopped with the parquet files written; every temporary is created (empty) before any is written, under an
    # unpredictable name: .<output>.tmp-<pid>-<16 hex digits>
    temps = {n for n in leftovers(run_copy) if n != ".merge.lock"}
    assert sorted(re.sub(rf"\.tmp-{first.pid}-[0-9a-f]{{16}}$", "", n) for n in temps) == sorted(
        f".{n}" for n in OUTPUTS) and ".merge.lock" in leftovers(run_copy)
    # a second merge of the same run at once: refused before it looks at (or writes) anything
    assert main(["merge", str(run_copy)]) == 2
    assert one_line_error(capsys.readouterr().err) == (
        f"trace-merge: error: {run_copy / '.merge.lock'}: a merge of this run is already running "
        f"(pid {first.pid} on {socket.gethostname()}); try again when it has finished")
    assert main(["merge", str(run_copy), "--force"]) == 2  # --force does not override a running merge
    capsys.readouterr()
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert present(run_copy) == [] and set(leftovers(run_copy)) == temps | {".merge.lock"}
    # the next merge: the dead process's lock does not block, its temporaries are removed
    assert main(["merge", str(run_copy)]) == 0
    err = capsys.readouterr().err
    for name in sorted(temps):
        assert (f"trace-merge: warning: {run_copy / name}: left by an interrupted write (process {first.pid} "
                "no longer runs); removed") in err
    assert present(run_copy) == list(OUTPUTS) and leftovers(run_copy) == []
    assert Run.open(run_copy).cached


def test_sigterm_while_writing_removes_the_temporaries(run_copy, capsys):
    proc = start_paused(run_copy, "info")
    assert len(leftovers(run_copy)) == 4  # the lock and the three temporaries (created before any is written)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert one_line_error(err) == "trace-merge: error: terminated (SIGTERM); no output was left half-written"
    assert present(run_copy) == [] and leftovers(run_copy) == []
    assert main(["merge", str(run_copy)]) == 0 and Run.open(run_copy).cached


def test_sigterm_between_the_renames_waits_for_the_set(run_copy):
    proc = start_paused(run_copy, "second-rename")
    assert present(run_copy) == ["merged.parquet"]
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert present(run_copy) == list(OUTPUTS) and leftovers(run_copy) == []
    assert Run.open(run_copy).cached


@pytest.mark.parametrize("earlier", [False, True], ids=["no-earlier-set", "over-an-earlier-set"])
def test_a_set_left_half_renamed_by_kill_9_is_no_output(run_copy, earlier, capsys):
    if earlier:
        write_merged(merge_path(run_copy), run_copy)
        next((run_copy / "posix").iterdir()).unlink()  # so that the new merge differs from the stored one
    proc = start_paused(run_copy, "second-rename", *(["--force"] if earlier else []))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert present(run_copy) == (list(OUTPUTS) if earlier else ["merged.parquet"])
    run = Run.open(run_copy)
    assert not run.cached and set(run.frame["layer"].astype(str)) == ({"app"} if earlier else {"app", "posix"})
    why = ("merge outputs do not belong together (merged.parquet changed" if earlier else
           "incomplete merge outputs (counters.parquet, merge_info.json missing")
    assert run.warnings[0].startswith(f"{run_copy}: {why}")
    capsys.readouterr()
    assert main(["merge", str(run_copy)]) == 0  # no --force needed: an incomplete set is no output
    assert capsys.readouterr().err.count(f"trace-merge: warning: {run_copy}: {why}") == 1
    assert leftovers(run_copy) == [] and Run.open(run_copy).cached


def test_disk_full_leaves_no_partial_set(darshan_logs, tmp_path):
    """``noposix.darshan`` gives a counters.parquet larger than merged.parquet: with the limit between them
    merged.parquet is written in full and counters.parquet fails half-way, the partial set of before."""
    run = tmp_path / "run"
    (run / "darshan").mkdir(parents=True)
    shutil.copy(darshan_logs / "noposix.darshan", run / "darshan")
    reference = tmp_path / "reference"
    shutil.copytree(run, reference)
    write_merged(merge_path(reference), reference)
    merged, counters = ((reference / n).stat().st_size for n in OUTPUTS[:2])
    assert merged < counters
    limit = (merged + counters) // 2

    def small_disk(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", SMALL_DISK_MERGE, str(run), str(limit), *extra],
                              capture_output=True, text=True, timeout=120)

    res = small_disk()
    assert res.returncode == 2
    line = one_line_error(res.stderr)
    assert line.startswith(f"trace-merge: error: {run / 'counters.parquet'}: cannot write (")
    assert "File too large" in line and line.endswith("; nothing was written")
    assert present(run) == [] and leftovers(run) == []
    # an earlier complete set survives a failed --force merge untouched
    assert main(["merge", str(run)]) == 0
    before = {n: (run / n).read_bytes() for n in OUTPUTS}
    res = small_disk("--force")
    assert res.returncode == 2 and "File too large" in res.stderr
    assert {n: (run / n).read_bytes() for n in OUTPUTS} == before and leftovers(run) == []
    assert Run.open(run).cached


def test_lock_without_flock_takes_over_a_dead_process_lock(tmp_path, caplog):
    """The ``O_EXCL`` lock used where the file system has no ``flock``: a lock of a process that is gone is taken
    over, one of a live process (or of another host, where liveness cannot be told) refuses."""
    lock = tmp_path / ".merge.lock"
    me = f"{os.getpid()} {socket.gethostname()}\n"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    lock.write_text(f"{dead} {socket.gethostname()}\n")
    _take_exclusive_create(lock, "a merge of this run", me)
    assert lock.read_text() == me
    assert f"{lock}: left by process {dead}, which no longer runs; taken over" in caplog.text
    for holder in (f"{os.getppid()} {socket.gethostname()}", f"{dead} another-node"):
        lock.write_text(holder + "\n")
        with pytest.raises(OutputBusyError, match=rf"already running \(pid {holder.split()[0]} on "
                                                  rf"{holder.split()[1]}\).*remove {lock} if it is not running"):
            _take_exclusive_create(lock, "a merge of this run", me)
        assert lock.read_text() == holder + "\n"


def test_merge_info_records_sources_and_outputs(run_copy):
    write_merged(merge_path(run_copy), run_copy)
    info = json.loads((run_copy / "merge_info.json").read_text())
    posix = next((run_copy / "posix").iterdir())
    assert set(info["inputs"]) == {"manifest.json", f"app/{next((run_copy / 'app').iterdir()).name}",
                                   f"posix/{posix.name}"}
    assert info["inputs"][f"posix/{posix.name}"]["size"] == posix.stat().st_size
    assert set(info["outputs"]) == {"merged.parquet", "counters.parquet"}
    assert info["outputs"]["merged.parquet"]["size"] == (run_copy / "merged.parquet").stat().st_size
