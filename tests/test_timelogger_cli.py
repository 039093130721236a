"""``timelogger run``: in-process preparation and refusals, plus real runs (DFTracer preload, ``mpiexec -n 2``)."""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import clean_env
from tests.helpers.traces import app_files, intervals, meta, read_pfw
from timelogger import cli
from timelogger.layout import LAYER_DIRS
from timelogger.tf import ProfileWindow, parse_profile_spec


def _args(run_dir: Path, *extra: str, cmd: tuple = ("python", "train.py")) -> argparse.Namespace:
    return cli.setup_parser().parse_args(["-o", str(run_dir), *extra, "--", *cmd])


def test_prepare_sets_env_and_writes_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"PATH": "/usr/bin", "PMI_RANK": "0", "PMI_SIZE": "2"}
    args = _args(tmp_path / "run", "--posix", "--posix-filter", str(tmp_path), "--horovod-timeline")
    args.cmd = args.cmd[1:] if args.cmd[0] == "--" else args.cmd
    record = cli.prepare(args, env, cli.Waits(ranks_s=0.1))  # rank 1 never checks in here
    run_dir = (tmp_path / "run").resolve()
    assert env["TIMELOGGER_DIR"] == str(run_dir)
    assert env["HOROVOD_TIMELINE"] == str(run_dir / "horovod" / "timeline.json")
    assert env["LD_PRELOAD"].endswith("libdftracer_preload.so") and Path(env["LD_PRELOAD"]).is_file()
    assert env["DFTRACER_ENABLE"] == "1" and env["DFTRACER_INIT"] == "PRELOAD"
    assert env["DFTRACER_LOG_FILE"] == str(run_dir / "posix" / "trace")
    assert env["DFTRACER_DATA_DIR"] == str(tmp_path.resolve())
    assert env["DFTRACER_INC_METADATA"] == "1"  # bytes and offsets of each call
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["command"] == ["python", "train.py"] and manifest["world_size"] == 2
    assert manifest["launcher"] == "mpich-hydra" and manifest["layers"]["app"] is True
    assert manifest["layers"]["posix"]["data_dir"] == str(tmp_path.resolve())
    assert set(manifest["clocks"]) == {"wall_ns", "perf_ns"} and manifest["versions"]["timelogger"]
    assert json.loads((run_dir / "launch" / "rank-0.json").read_text()) == record.to_json()
    assert not list(run_dir.rglob("*.tmp"))
    assert manifest["ranks"] == [{"rank": 0, "hostname": record.hostname, "pid": record.pid,
                                  "launch_id": record.launch_id}]


@pytest.mark.parametrize("opts, spec", [((), None), (("--tf-profile",), "all"), (("--tf-profile=3:5",), "3:5"),
                                         (("--tf-profile", "2:", "--force"), "2:")])
def test_tf_profile_option_sets_env_and_manifest(tmp_path: Path, opts: tuple, spec: "str | None") -> None:
    env: dict = {}
    cli.prepare(_args(tmp_path / "run", *opts), env)
    assert env.get("TIMELOGGER_TF_PROFILE") == spec
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["layers"]["tf_profile"] == (spec or False)
    assert manifest["env"].get("TIMELOGGER_TF_PROFILE") == spec


def test_bad_tf_profile_spec_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "-o", str(tmp_path), "--tf-profile=5:3", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "--tf-profile" in err and "START:STOP" in err and not (tmp_path / "manifest.json").exists()


@pytest.mark.parametrize("spec, window", [
    ("all", ProfileWindow(None, None)), (True, ProfileWindow(None, None)), ("3:5", ProfileWindow(3, 5)),
    ("3:", ProfileWindow(3, None)), (":4", ProfileWindow(0, 4)), ("7", ProfileWindow(7, 8)),
    (7, ProfileWindow(7, 8)), ((1, 3), ProfileWindow(1, 3)), (None, None), (False, None), ("", None),
    ("off", None)])
def test_parse_profile_spec(spec: object, window: "ProfileWindow | None") -> None:
    assert parse_profile_spec(spec) == window


@pytest.mark.parametrize("spec", ["5:3", "2:2", "-1", "python", "1:x"])
def test_parse_profile_spec_refuses(spec: str) -> None:
    with pytest.raises(ValueError, match="START:STOP"):
        parse_profile_spec(spec)


def test_non_zero_rank_writes_no_manifest(tmp_path: Path) -> None:
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    rec = cli.prepare(_args(tmp_path), env)
    assert rec.rank == 1 and (tmp_path / "launch" / "rank-1.json").is_file()
    assert not (tmp_path / "manifest.json").exists()


def test_refuses_previous_run_without_force(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old = tmp_path / "app" / "rank-0-pid-123.pfw"
    old.parent.mkdir(parents=True)
    old.write_text("[\n")
    assert cli.main(["run", "-o", str(tmp_path), "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "app") in err[0] and "--force" in err[0]
    assert old.exists()
    cli.prepare(_args(tmp_path, "--force"), {})  # with --force this rank's old files go
    assert not old.exists()


def test_missing_command_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "-o", str(tmp_path)]) == 2
    assert "no command" in capsys.readouterr().err


def test_unwritable_run_dir_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["run", "-o", str(blocker / "run"), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert str(blocker / "run") in err and "Traceback" not in err


def _run(cmd: list, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


_READER = """
import os, sys, timelogger
data = sys.argv[1]
for epoch in range(2):
    for name in sorted(os.listdir(data)):
        with timelogger.phase("Load File", cat="io") as p:
            with open(os.path.join(data, name), "rb") as f:
                n = len(f.read())
            p.update(bytes=n, file=name)
"""


def _reader_workload(tmp_path: Path, files: int = 3, size: int = 65536) -> Path:
    """``tmp_path/reader.py`` (:data:`_READER`) and the data directory it reads; returns that directory."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(files):
        (data / f"sample-{i}.bin").write_bytes(bytes(size))
    (tmp_path / "reader.py").write_text(_READER)
    return data


def test_run_with_posix_preload_writes_dftracer_trace(tmp_path: Path) -> None:
    data = _reader_workload(tmp_path)
    run_dir = tmp_path / "run"
    p = _run([sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), "--posix", "--posix-filter", str(data),
              "--", sys.executable, "reader.py", str(data)], tmp_path)
    # the hint, since Darshan is not preloaded here: one short line (the recipe is in docs/wire-format.md)
    hint = [line for line in p.stderr.splitlines() if "Darshan is not enabled" in line]
    assert len(hint) == 1 and "DXT_ENABLE_IO_TRACE=1" in hint[0] and len(hint[0]) < 250
    (app,) = app_files(run_dir)
    assert len(intervals(read_pfw(app), "Load File")) == 6
    traces = list((run_dir / "posix").glob("*.pfw*"))
    assert traces and all(t.stat().st_size > 0 for t in traces)
    text = "".join(gzip.open(t, "rt").read() if t.suffix == ".gz" else t.read_text() for t in traces)
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(str(data / "sample-0.bin") in json.dumps(e.get("args", {})) for e in events)
    reads = [e for e in events if e.get("cat") == "POSIX" and "read" in e.get("name", "")]
    assert len(reads) >= 6
    # The launcher asks the preload for call metadata, so each read carries its byte count.
    assert sum(e["args"]["ret"] for e in reads if e["args"].get("ret", -1) > 0) >= 3 * 65536
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["layers"]["posix"]["data_dir"] == str(data.resolve())


_MPI_SCRIPT = """
import sys
from mpi4py import MPI
import timelogger
comm = MPI.COMM_WORLD
tl = timelogger.default_logger()
offset = tl.sync_clocks(comm)
with timelogger.phase("Training Iteration", cat="compute"):
    comm.Barrier()
# one file per rank: Hydra interleaves the ranks' stdout in the middle of lines
with open(f"result-{comm.Get_rank()}.txt", "w") as f:
    f.write(f"{comm.Get_rank()} {tl.rank} {tl.world_size} {offset}")
"""


@pytest.mark.mpi
def test_run_under_mpiexec_two_ranks(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip(f"{mpiexec} not found (pip install mpich)")
    (tmp_path / "train.py").write_text(_MPI_SCRIPT)
    run_dir = tmp_path / "run"
    _run([str(mpiexec), "-n", "2", "timelogger", "run", "-o", str(run_dir), "--", "python", "train.py"],
         tmp_path, timeout=120)
    ranks = sorted((tmp_path / f"result-{r}.txt").read_text().split()[:3] for r in (0, 1))
    assert ranks == [["0", "0", "2"], ["1", "1", "2"]]
    files = app_files(run_dir)
    assert sorted(f.name.split("-pid-")[0] for f in files) == ["rank-0", "rank-1"]
    for f in files:
        ev = read_pfw(f)
        rank = ev[0]["args"]["rank"]
        assert ev[0]["args"]["world_size"] == 2
        (sync,) = meta(ev, "clock_sync")
        args = sync["args"]
        assert args["method"] == "mpi-pingpong" and args["rounds"] == 10
        if rank == 0:
            assert args["clock_offset_ns"] == 0 and args["rtt_ns"] == 0
        else:
            assert 0 < args["rtt_ns"] < 50_000_000 and abs(args["clock_offset_ns"]) < args["rtt_ns"] + 1_000_000
        assert len(intervals(ev, "Training Iteration")) == 1 and ev[-1]["name"] == "timelogger_close"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["launcher"] == "mpich-hydra"
    assert sorted(r["rank"] for r in manifest["ranks"]) == [0, 1] and manifest["hosts"] == [socket.gethostname()]
    assert manifest["command"] == ["python", "train.py"]
    records = [json.loads(f.read_text()) for f in (run_dir / "launch").glob("*.json")]
    launches = {r["rank"]: r for r in records}
    assert set(launches) == {0, 1}
    for f in files:  # exec kept the pid: the launch record names the process that wrote the app file
        ev = read_pfw(f)
        assert launches[ev[0]["args"]["rank"]]["pid"] == ev[0]["args"]["pid"]


def test_posix_filter_without_posix_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", "-o", str(tmp_path), "--posix-filter", str(tmp_path), "--", "true"]) == 2
    assert "--posix-filter needs --posix" in capsys.readouterr().err


def test_posix_without_dftracer_warns_and_continues(tmp_path: Path) -> None:
    # -S: no site-packages, so this interpreter really has no dftracer; timelogger comes from the checkout
    script = (f"import sys; sys.path.insert(0, {str(Path(cli.__file__).parents[1])!r})\n"
              "from timelogger import cli\n"
              f"env = {{}}\nrec = cli.prepare(cli.setup_parser().parse_args(['-o', {str(tmp_path)!r}, '--posix', "
              "'--', 'true']), env)\n"
              "print('LAYERS', rec.to_json()['layers']['posix'], 'LD_PRELOAD' in env, env['TIMELOGGER_DIR'])\n")
    p = subprocess.run([sys.executable, "-S", "-c", script], env=clean_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"LAYERS False False {tmp_path.resolve()}" in p.stdout
    assert "dftracer package is not installed" in p.stderr


def test_command_that_cannot_run(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "timelogger", "run", "-o", str(tmp_path / "run"), "--",
                        str(tmp_path / "no-such-program")], env=clean_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 127
    assert "no-such-program: cannot execute" in p.stderr and "Traceback" not in p.stderr


def _layer_files(run_dir: Path) -> set:
    """Paths (relative to ``run_dir``) of the files in its layer directories."""
    return {p.relative_to(run_dir) for d in LAYER_DIRS for p in (run_dir / d).rglob("*") if p.is_file()}


def test_force_replaces_the_previous_run_in_every_layer(tmp_path: Path, darshan_logs: Path) -> None:
    from trace_merge.run import Run

    data = _reader_workload(tmp_path)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), "--posix", "--posix-filter", str(data),
           "--", sys.executable, "reader.py", str(data)]
    merge = [sys.executable, "-m", "trace_merge", "merge", str(run_dir)]
    _run(cmd, tmp_path)
    _run(merge, tmp_path)
    first = Run.open(run_dir)
    posix_rows = int((first.frame["layer"] == "posix").sum())
    assert posix_rows >= 6 and list(first.frame["rank"].unique()) == [0]
    # the previous run also had a site Darshan writing into darshan/ (kept: a job script may have made it)
    (run_dir / "darshan").mkdir()
    shutil.copy(darshan_logs / "dxt.darshan", run_dir / "darshan")
    old = _layer_files(run_dir)
    assert {p.parts[0] for p in old} == {"app", "posix", "darshan", "cpu"}

    p = subprocess.run(cmd, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=90)
    assert p.returncode == 2 and "holds a previous run" in p.stderr and "--force" in p.stderr
    assert _layer_files(run_dir) == old and (run_dir / "merged.parquet").exists()

    p = _run(cmd[:6] + ["--force"] + cmd[6:], tmp_path)
    assert "removed the previous run" in p.stderr
    new = _layer_files(run_dir)
    assert not new & old and {p.parts[0] for p in new} == {"app", "posix", "cpu"}
    assert (run_dir / "darshan").is_dir()
    assert not any((run_dir / n).exists() for n in ("merged.parquet", "counters.parquet", "merge_info.json"))
    assert sorted(p.name for p in run_dir.iterdir()) == ["app", "cpu", "darshan", "launch", "manifest.json", "posix"]
    _run(merge, tmp_path)
    second = Run.open(run_dir)
    assert int((second.frame["layer"] == "posix").sum()) == posix_rows  # not doubled by the previous run's file
    assert list(second.frame["rank"].unique()) == [0] and "darshan" not in set(second.frame["layer"])
    assert len(second.frame[second.frame["layer"] == "app"]) == 6


def _prepare_rank(run_dir: Path, rank: int, *extra: str) -> dict:
    args = _args(run_dir, *extra)
    args.cmd = args.cmd[1:] if args.cmd[0] == "--" else args.cmd
    return cli.prepare(args, {"PMI_RANK": str(rank), "PMI_SIZE": "2"}, cli.Waits(ranks_s=5.0)).to_json()


def test_force_other_ranks_wait_until_rank0_cleared(tmp_path: Path) -> None:
    """Rank 1 arrives first: it must not go on (or make its layer directories) before rank 0 has removed the
    previous run, although the previous run's manifest and its launch record are there."""
    import threading

    run_dir = tmp_path / "run"
    # the previous 2-rank launch, as the launcher left it
    t = threading.Thread(target=_prepare_rank, args=(run_dir, 1))
    t.start()
    _prepare_rank(run_dir, 0)
    t.join()
    previous = json.loads((run_dir / "manifest.json").read_text())["ranks"]
    assert sorted(r["rank"] for r in previous) == [0, 1]

    result: dict = {}
    t = threading.Thread(target=lambda: result.update(_prepare_rank(run_dir, 1, "--force", "--horovod-timeline")))
    t.start()
    t.join(0.5)
    assert t.is_alive() and not (run_dir / "horovod").exists()  # waiting for rank 0
    rec0 = _prepare_rank(run_dir, 0, "--force", "--horovod-timeline")
    t.join(30)
    assert not t.is_alive() and (run_dir / "horovod").is_dir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    ids = {r["rank"]: r["launch_id"] for r in manifest["ranks"]}
    assert ids == {0: rec0["launch_id"], 1: result["launch_id"]}
    assert not set(ids.values()) & {r["launch_id"] for r in previous}
    # rank 0 removed rank 1's new record with the old ones; rank 1 wrote it again
    assert json.loads((run_dir / "launch" / "rank-1.json").read_text()) == result
    assert not list(run_dir.glob(".timelogger-previous-run-*"))


def test_force_rank_gives_up_without_rank0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    for key, value in {"PMI_RANK": "1", "PMI_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    waits = cli.Waits(force_s=0.2, clear_margin_s=0.0)
    assert cli.main(["run", "-o", str(tmp_path), "--force", "--", "true"], waits) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "manifest.json") in err[0] and "rank 0 did not list rank 1" in err[0]


@pytest.mark.mpi
def test_force_under_mpiexec_replaces_a_larger_previous_run(tmp_path: Path) -> None:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip(f"{mpiexec} not found (pip install mpich)")
    data = _reader_workload(tmp_path, files=1, size=4096)
    run_dir = tmp_path / "run"

    def launch(n: int, *extra: str) -> subprocess.CompletedProcess:
        return _run([str(mpiexec), "-n", str(n), "timelogger", "run", "-o", str(run_dir), "--posix", *extra, "--",
                     "python", "reader.py", str(data)], tmp_path, timeout=120)

    launch(3)
    old = _layer_files(run_dir)
    assert sorted(p.name.split("-pid-")[0] for p in app_files(run_dir)) == ["rank-0", "rank-1", "rank-2"]
    launch(2, "--force")
    new = _layer_files(run_dir)
    assert not new & old and any(p.parts[0] == "posix" for p in new)
    # launch/ also holds each rank's launch lock (.rank-<r>.lock)
    launches = {json.loads(f.read_text())["rank"]: json.loads(f.read_text())
                for f in (run_dir / "launch").glob("rank-*.json")}
    assert set(launches) == {0, 1}
    files = app_files(run_dir)
    assert sorted((read_pfw(f)[0]["args"]["rank"], read_pfw(f)[0]["args"]["pid"]) for f in files) == \
        [(r, launches[r]["pid"]) for r in (0, 1)]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {r["rank"]: r["launch_id"] for r in manifest["ranks"]} == {r: launches[r]["launch_id"] for r in (0, 1)}
    assert not list(run_dir.glob(".timelogger-previous-run-*"))


def test_a_launch_that_cannot_write_is_one_line_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A full disk, a quota or no inodes left (here a file-size limit, which fails the same writes with EFBIG):
    one line naming the file, exit 2, and what the launch had made is gone; a directory that was there stays."""
    import resource

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    for parent in (tmp_path / "new" / "deep", tmp_path):
        run_dir = parent / "run"
        p = subprocess.run([sys.executable, "-m", "timelogger", "run", "-o", str(run_dir), "--", "true"],
                           preexec_fn=small_files, env=clean_env(), capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, p.stderr
        last = p.stderr.strip().splitlines()[-1]
        assert last.startswith(f"timelogger: {run_dir / 'launch' / 'rank-0.json'}: cannot prepare the run ("), last
        assert "Traceback" not in p.stderr
        assert not run_dir.exists() and parent.exists() == (parent == tmp_path)


def test_records_read_back_what_they_write_and_read_older_files(tmp_path: Path) -> None:
    """The typed records give back the JSON the launcher wrote (keys the benchmarks add kept), and read what an older
    or edited file holds: missing keys empty, a world size that is no integer kept for the warning naming it."""
    from timelogger.records import LaunchRecord, Manifest

    env = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    record = cli.prepare(_args(tmp_path / "run", "--horovod-timeline", "--tf-profile=2:4"), env)
    written = json.loads((tmp_path / "run" / "launch" / "rank-0.json").read_text())
    assert LaunchRecord.from_json(written) == record and record.to_json() == written
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    manifest["node_cache"] = {"dropped": True}
    assert Manifest.from_json(manifest).to_json() == manifest

    old = Manifest.from_json({"world_size": "two", "env": {"SLURM_JOB_ID": "9"},
                              "layers": {"noise": {"specs": [{"kind": "cpu", "level": 1}, "junk"]}}})
    assert old is not None and old.world_size is None and old.rejected == {"world_size": "two"}
    assert old.layers.noise is not None and [(s.kind, s.level) for s in old.layers.noise.specs] == [("cpu", 1)]
    assert old.env == {"SLURM_JOB_ID": "9"} and old.slurm is None and old.ranks == []
    assert Manifest.from_json([1]) is None and LaunchRecord.from_json(None) is None
