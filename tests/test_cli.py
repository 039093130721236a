"""``trace-merge`` CLI: every subcommand in-process on real inputs, bad input, and one real subprocess run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from trace_merge.cli import SUBCOMMANDS, main
from trace_merge.errors import TraceInputError
from trace_merge.run import Run


@pytest.fixture()
def run_copy(real_run, tmp_path):
    """A private copy of the real run directory (tests below write into it)."""
    dst = tmp_path / "run"
    shutil.copytree(real_run[0], dst)
    return dst


def one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("trace-merge: error: ")
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_every_subcommand_is_registered_with_setup_parser_and_main():
    assert [c.name for c in SUBCOMMANDS] == ["merge", "summary", "findings", "report", "export", "compare", "advise",
                                             "noise"]
    assert all(callable(c.setup_parser) and callable(c.main) for c in SUBCOMMANDS)


def test_summary_text_of_a_run_directory(run_copy, capsys):
    assert main(["summary", str(run_copy)]) == 0
    out = capsys.readouterr().out
    assert "verdict:" in out and "breakdown" in out and "read bandwidth per rank" in out
    assert "Load File" in out and "posix" in out


@pytest.mark.parametrize("width", [60, 100])
def test_text_fits_the_terminal_width(real_run, capsys, monkeypatch, width):
    """summary, summary --brief and findings wrap at the terminal's width (COLUMNS here, as a terminal sets it;
    100 without one): a longer line is a single token (a path) that cannot break."""
    monkeypatch.setenv("COLUMNS", str(width))
    for args in (["summary"], ["summary", "--brief"], ["findings"]):
        assert main([*args, str(real_run[0])]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) > 5
        over = [x for x in lines if len(x) > width and " " in x.strip()]
        assert not over, (args, over)
    monkeypatch.delenv("COLUMNS")  # set for every test by conftest.py
    from trace_merge.formatting import DEFAULT_WIDTH, text_width

    assert text_width() == DEFAULT_WIDTH  # stdout is no terminal under pytest


def test_summary_brief_is_the_first_screen(real_run, capsys):
    from trace_merge.run import Run

    run = Run.open(real_run[0])
    found = run.findings()
    assert main(["summary", "--brief", str(real_run[0])]) == 0
    out = capsys.readouterr().out
    first, rest = out.split("\n", 1)
    assert first.startswith(f"{real_run[0]}: verdict: ")
    words = " ".join(out.split())  # as read, whatever the wrapping
    assert "the input phases' time:" in words  # the idle line
    assert "where the time goes" in words and "Training Iteration" in out and "Load File" in out
    assert out.count("[high]") + out.count("[medium]") + out.count("[info]") == min(3, len(found))
    assert found[0].title in words
    for drill_down in ("terms:", "alignment residual", "events by total time", "layered breakdown"):
        assert drill_down not in out
    with pytest.raises(SystemExit):  # one or the other
        main(["summary", "--brief", "--json", str(real_run[0])])


def test_summary_json_of_a_bare_dftracer_directory(dftracer_set, capsys):
    assert main(["summary", str(dftracer_set), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranks"] == [0, 1] and doc["events"] > 0
    names = {s["name"] for s in doc["event_stats"]}
    assert {"pread", "read", "fread", "open"} <= names
    assert {r["rank"] for r in doc["bandwidth"]["per_rank"]} == {0, 1}
    assert doc["bandwidth"]["totals"]["read_bytes"] == sum(r["read_bytes"] for r in doc["bandwidth"]["per_rank"])
    assert all(abs(sum(r[f"{c}_pct"] for c in ("io", "comm", "checkpoint", "preprocess", "compute", "wait",
                                                "other")) - 100) < 1e-6 for r in doc["breakdown"])


@pytest.mark.parametrize("log,module", [("dxt.darshan", "POSIX"), ("ior_hdf5_example.darshan", "POSIX"),
                                        ("noposix.darshan", "STDIO")])
def test_summary_of_a_single_darshan_log_reads_what_darshan_counted(log, module, capsys, darshan_logs):
    """Bytes read equal Darshan's own ``<MOD>_BYTES_READ`` counters (DXT segments or, without DXT, counters;
    the shared-file record of rank -1 is not added on top of per-rank segments)."""
    import darshan

    report = darshan.DarshanReport(str(darshan_logs / log), read_all=True)
    counted = int(report.records[module].to_df()["counters"][f"{module}_BYTES_READ"].sum())
    assert main(["summary", str(darshan_logs / log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bandwidth"]["totals"]["read_bytes"] == counted > 0
    assert doc["verdict"]["verdict"] == "unknown"  # a bare Darshan log has no training steps


def test_merge_writes_outputs_and_refuses_to_overwrite(run_copy, capsys):
    assert main(["merge", str(run_copy)]) == 0
    merged = run_copy / "merged.parquet"
    assert merged.is_file() and (run_copy / "counters.parquet").is_file()
    before = merged.stat().st_mtime_ns, merged.read_bytes()
    capsys.readouterr()
    assert main(["merge", str(run_copy)]) == 2
    one_line_error(capsys.readouterr().err, "merged.parquet", "--force")
    assert (merged.stat().st_mtime_ns, merged.read_bytes()) == before
    assert main(["merge", str(run_copy), "--force"]) == 0


def test_report_default_output_and_no_overwrite(run_copy, capsys):
    assert main(["report", str(run_copy)]) == 0
    out = run_copy / "report.html"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    out.write_text("mine")
    capsys.readouterr()
    assert main(["report", str(run_copy)]) == 2
    one_line_error(capsys.readouterr().err, str(out), "already exists")
    assert out.read_text() == "mine"
    assert main(["report", str(run_copy), "-o", str(out), "--force"]) == 0
    assert out.read_text(encoding="utf-8") != "mine"


def test_export_perfetto(run_copy, tmp_path, capsys):
    out = tmp_path / "trace.json.gz"
    assert main(["export", str(run_copy), "--perfetto", str(out)]) == 0
    import gzip

    with gzip.open(out, "rt") as fh:
        assert json.load(fh)["traceEvents"]
    assert main(["export", str(run_copy), "--perfetto", str(out)]) == 2
    one_line_error(capsys.readouterr().err, str(out))
    assert main(["export", str(run_copy), "--perfetto", str(tmp_path / "trace.txt")]) == 2


def test_compare_two_runs(real_run, real_run_factory, tmp_path, capsys):
    other, _ = real_run_factory(tmp_path / "b", sizes=(1_000_000,), epochs=1, posix=False)
    assert main(["compare", str(real_run[0]), str(other), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 4
    (la, a), (lb, b), (ld, delta), (lr, ratio) = doc.items()
    assert (ld, lr) == (f"delta {lb}", f"ratio {lb}")
    assert a["read_bytes"] == 16_000_000 and b["read_bytes"] == 1_000_000
    assert delta["read_bytes"] == -15_000_000 and ratio["read_bytes"] == 1 / 16
    assert delta["verdict"] is None and ratio["verdict"] is None
    assert main(["compare", str(real_run[0]), str(other)]) == 0
    out = capsys.readouterr().out
    assert "read_bytes" in out and "verdict" in out
    row = next(line for line in out.splitlines() if line.startswith("read_bytes"))
    assert row.split() == ["read_bytes", "16.0", "MB", "1.00", "MB", "-15.0", "MB", "0.0625"]
    assert out.rstrip().splitlines()[-1].startswith(f"delta = run − {la}, ratio = run ÷ {la}")


# -- bad input ------------------------------------------------------------------------------------------


def test_empty_run_directory(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["summary", str(empty)]) == 2
    one_line_error(capsys.readouterr().err, str(empty))


def test_missing_path(tmp_path, capsys):
    assert main(["summary", str(tmp_path / "nope")]) == 2
    one_line_error(capsys.readouterr().err, "nope", "no such file")


def test_garbage_darshan_log(tmp_path, capsys):
    bad = tmp_path / "garbage.darshan"
    bad.write_bytes(os.urandom(4096))
    assert main(["summary", str(bad)]) == 2
    one_line_error(capsys.readouterr().err, str(bad))


@pytest.fixture()
def runs_parent(real_run, real_run_factory, tmp_path, monkeypatch):
    """``runs/a`` and ``runs/b``: two real runs in one directory (cwd = tmp_path, so paths print as given)."""
    shutil.copytree(real_run[0], tmp_path / "runs" / "a")
    other, _ = real_run_factory(tmp_path / "b", sizes=(100_000,), epochs=1, posix=False)
    shutil.copytree(other, tmp_path / "runs" / "b")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


SEVERAL_RUNS = ("runs: holds 2 runs (runs/a, runs/b); give one of them, or compare them with: "
                "trace-merge compare runs/a runs/b")


def test_a_directory_of_runs_is_refused_not_pooled(runs_parent, capsys):
    # before: summary pooled both runs' app files into one "rank 0" spanning both jobs
    before = sorted(p.relative_to(runs_parent) for p in runs_parent.rglob("*"))
    assert main(["summary", "runs"]) == 2
    cap = capsys.readouterr()
    one_line_error(cap.err, SEVERAL_RUNS)
    assert cap.out == ""
    with pytest.raises(TraceInputError) as err:
        Run.open("runs")
    assert str(err.value) == SEVERAL_RUNS
    for argv in (["merge", "runs"], ["report", "runs"], ["export", "runs", "--perfetto", "runs/t.json"],
                 ["compare", "runs", "runs/a"]):
        assert main(argv) == 2, argv
        one_line_error(capsys.readouterr().err, SEVERAL_RUNS)
    assert sorted(p.relative_to(runs_parent) for p in runs_parent.rglob("*")) == before  # nothing written
    assert main(["summary", "runs/a"]) == 0  # each run on its own is fine


def test_a_directory_holding_one_run_points_at_it(runs_parent, capsys):
    shutil.rmtree(runs_parent / "b")
    assert main(["summary", "runs"]) == 2
    one_line_error(capsys.readouterr().err, "runs: holds 1 run (runs/a); give that run directory itself")


def test_debug_lets_the_traceback_through(tmp_path):
    with pytest.raises(TraceInputError):
        main(["--debug", "summary", str(tmp_path / "nope")])


# -- real subprocess ---------------------------------------------------------------------------------------


def test_console_script_and_module_smoke(dftracer_set, tmp_path, bin_dir, tool_env):
    env = tool_env
    res = subprocess.run([str(bin_dir / "trace-merge"), "summary", str(dftracer_set)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "read bandwidth per rank" in res.stdout
    bad = subprocess.run([sys.executable, "-m", "trace_merge", "summary", str(tmp_path / "none")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2
    one_line_error(bad.stderr, "none")


def test_summary_layers_option(real_run, capsys):
    assert main(["summary", str(real_run[0]), "--json", "--layers", "posix"]) == 0
    posix_only = json.loads(capsys.readouterr().out)
    assert main(["summary", str(real_run[0]), "--json"]) == 0
    app = json.loads(capsys.readouterr().out)
    # the posix layer has no compute phases: its breakdown is io and other only
    assert all(r["compute_pct"] == 0 and r["io_pct"] > 0 for r in posix_only["breakdown"])
    assert all(r["compute_pct"] > 0 for r in app["breakdown"])
    with pytest.raises(SystemExit) as exc:
        main(["summary", str(real_run[0]), "--layers", "disk"])
    assert exc.value.code == 2
    assert "unknown layer(s) 'disk'" in capsys.readouterr().err


def test_merge_needs_a_directory(capsys, darshan_logs):
    log = darshan_logs / "dxt.darshan"
    assert main(["merge", str(log)]) == 2
    one_line_error(capsys.readouterr().err, str(log), "not a directory")


def test_the_program_freezes_what_is_left_before_exit_and_main_alone_does_not(run_copy):
    """``trace-merge`` (``cli.run``) freezes the objects left when the command is done, so that the interpreter's
    exit does not walk them all for garbage once more; :func:`main`, which a program may call many times, does not."""
    import gc

    before = gc.get_freeze_count()
    assert main(["summary", str(run_copy), "--json"]) == 0
    assert gc.get_freeze_count() == before
    code = ("import gc, sys; from trace_merge import cli; sys.argv = ['trace-merge', 'summary', sys.argv[1]]; "
            "status = cli.run(); print(status, gc.get_freeze_count(), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(run_copy)], capture_output=True, text=True, timeout=300)
    status, frozen = out.stderr.split()[-2:]
    assert status == "0" and int(frozen) > 10_000, out.stderr


def test_summary_of_a_directory_of_many_mostly_empty_trace_files(tmp_path, capsys):
    # DFTracer's preload leaves a zero-byte .pfw per process that traced nothing: a large job leaves tens of
    # thousands. Listing them was quadratic (20,000 files: 106 s) and each printed a warning of its own.
    traces = tmp_path / "traces"
    traces.mkdir()
    n, every = 20_000, 1_000
    for i in range(n):
        path = traces / f"trace-{i:05d}-rank_{i // every}.pfw"
        if i % every:
            path.touch()
            continue
        events = [{"name": "read", "cat": "POSIX", "ph": "X", "pid": 100 + i, "tid": 1,
                   "ts": 1_700_000_000_000_000 + 10 * k, "dur": 5, "args": {"ret": 4096, "fname": "/data/x"}}
                  for k in range(3)]
        path.write_text("[\n" + "".join(json.dumps(e) + "\n" for e in events))
    assert main(["summary", str(traces), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["events"] == 3 * (n // every) and doc["ranks"] == list(range(n // every))
    assert err.splitlines() == [f"trace-merge: warning: {traces}: {n - n // every} empty trace files skipped "
                                f"(first: {traces / 'trace-00001-rank_0.pfw'})"]


# -- every text command at the terminal's width ----------------------------------------------------------


def fits(out: str, width: int) -> list:
    """The lines over ``width`` that hold more than one token (a single path or name cannot break)."""
    return [x for x in out.splitlines() if len(x) > width and " " in x.strip()]


@pytest.mark.parametrize("log", ["ior_hdf5_example.darshan",
                                 "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan"])
def test_darshan_summary_fits_80_columns(darshan_logs, capsys, monkeypatch, log):
    """The Darshan-only summary (headline, findings, the view's prose, tables and job context) wraps at the
    width; a command line longer than it keeps every word, in the job context's value column."""
    import darshan

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["summary", str(darshan_logs / log)]) == 0
    out = capsys.readouterr().out
    assert "job context:" in out and "time per rank" in out and not fits(out, 80), fits(out, 80)
    exe = darshan.DarshanReport(str(darshan_logs / log), read_all=False).metadata["exe"]
    assert exe.split() == " ".join(out.split("command line", 1)[1].split("log format", 1)[0].split()).split()


def test_compare_fits_80_columns(real_run, real_run_factory, tmp_path, capsys, monkeypatch):
    other, _ = real_run_factory(tmp_path / "b", sizes=(100_000,), epochs=1, posix=False)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["compare", str(real_run[0]), str(other)]) == 0
    out = capsys.readouterr().out
    assert not fits(out, 80), fits(out, 80)
    # the four columns (two runs, delta, ratio) in blocks, each block with the row names
    assert sum(line.startswith("read_bytes ") for line in out.splitlines()) >= 2
    assert " ".join(out.split()).endswith("('-': not a number, missing, or divided by 0)")


def test_merge_output_fits_80_columns(run_copy, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["merge", str(run_copy)]) == 0
    out = capsys.readouterr().out
    assert not fits(out, 80), fits(out, 80)
    words = " ".join(out.split())
    assert f"{run_copy}: merged " in words and f"wrote {run_copy / 'merged.parquet'}" in words
