"""``python -m benchmarks.<name> noise``: can other work share the node? Quiet runs against runs with noise
generators beside the ranks (``timelogger run --noise``, ``docs/noise.md``).

Rounds of one quiet run followed by one run per noise setting, ``--repeats`` rounds, each a real MPI job
(``OUT/<setting>-r<k>``, setting ``quiet``, ``cpu-1``, ...) with the POSIX layer, the Horovod timeline and a TF
profile of every step (so the layered breakdown can tell framework compute, input wait and Python apart), merged
after it exits. Interleaving the settings pairs each noisy run with the quiet run of its round, so a slow drift of
a shared machine's load falls on both. Writes ``noise.txt`` (:func:`trace_merge.noise.format_noise`),
``noise.json`` (every cell) and ``noise.png`` (slowdown per phase x component, one panel per setting) over all
epochs, and the same as ``noise-steady.*`` over the epochs after the first.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks.common.errors import TraceInputError
from benchmarks.common.launch import Layers, run_command, stream
from benchmarks.common.runs import finalize_run, json_ready
from benchmarks.common.sweep import add_job_flags, layers_for
from trace_merge.outputs import refuse_existing

#: what ``noise`` runs by default: one of the two cores busy, memory and loopback streams, device I/O
DEFAULT_NOISE = ("cpu:1", "memory:4", "io:200", "net:500")
QUIET = "quiet"


def setting_name(spec: str) -> str:
    """``cpu:1`` -> ``cpu-1`` (a directory name)."""
    return spec.replace(":", "-").replace(",", "+")


def noise_main(argv: Sequence[str] | None, benchmark: str, check: Callable[[Path, int], Any],
               phases: Sequence[str] = ()) -> int:
    """``python -m benchmarks.<benchmark> noise``; ``phases``: the benchmark's phases the table shows first (its
    read, wait and training phases), before the longest others."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{benchmark} noise",
                                description="Quiet runs against runs with noise generators beside the ranks, "
                                            "repeated; other flags go to `train` (default: --smoke).")
    add_job_flags(p, "directory for the runs and the table")
    p.add_argument("--repeats", type=int, default=3, help="rounds (quiet + each setting once per round)")
    p.add_argument("--noise", action="append", default=None, metavar="KIND:LEVEL",
                   help=f"a noise setting (repeatable; default: {' '.join(DEFAULT_NOISE)})")
    p.add_argument("--noise-dir", type=Path, default=None,
                   help="where io noise writes (default: OUT/noise-scratch, the data's file system when beside it)")
    p.add_argument("--noise-cpus", default=None, help="pin the generators (e.g. 1)")
    p.add_argument("--noise-io-mode", default="evict", choices=("evict", "direct", "cached"))
    p.add_argument("--from-epoch", type=int, default=1,
                   help="the second table (noise-steady.txt): only epochs >= E, from 0 (default 1: without the "
                        "first epoch's graph building and cold reads)")
    p.add_argument("--dist", default="horovod")
    p.add_argument("--tables-only", action="store_true",
                   help="run nothing: make the tables and figures again from the runs already in OUT")
    p.add_argument("--force", action="store_true", help="replace the runs already in OUT")
    p.add_argument("--debug", action="store_true")
    args, train_args = p.parse_known_args(argv)
    if args.ranks < 1 or args.repeats < 1:
        raise TraceInputError("--ranks/--repeats", "need at least 1")
    settings = args.noise or list(DEFAULT_NOISE)
    from timelogger import noise as tn

    for spec in settings:
        try:
            tn.parse_spec(spec)
        except tn.NoiseError as exc:
            raise TraceInputError("--noise", str(exc).removeprefix("--noise: ")) from None
    check(args.data, args.ranks)
    if not any(a in ("--smoke", "--demo-preset") for a in train_args):
        train_args = ["--smoke", *train_args]
    if not any(a.startswith("--tf-profile-steps") for a in train_args):
        train_args += ["--tf-profile-steps", "0:100000"]
    names = [QUIET, *map(setting_name, settings)]
    dirs = {(k, n): args.out / f"{n}-r{k}" for k in range(args.repeats) for n in names}
    if args.tables_only:
        missing = [d for d in dirs.values() if not (d / "manifest.json").is_file()]
        if missing:
            raise TraceInputError(missing[0], "no run here (--tables-only uses the runs of an earlier `noise`)")
        quiet = [dirs[(k, QUIET)] for k in range(args.repeats)]
        noisy = [dirs[(k, n)] for n in names[1:] for k in range(args.repeats)]
        write_noise_table(quiet, noisy, args.out, benchmark, phases)
        write_noise_table(quiet, noisy, args.out, benchmark, phases, args.from_epoch)
        return 0
    refuse_existing(*dirs.values(), force=args.force)
    args.out.mkdir(parents=True, exist_ok=True)  # the run logs go beside the runs, also when --noise-dir is elsewhere
    scratch = args.noise_dir or args.out / "noise-scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    base = layers_for(args.data, True, True)
    program = [sys.executable, "-m", f"benchmarks.{benchmark}", "train", "--data", str(args.data.absolute()),
               "--dist", args.dist, "--no-merge", *train_args]
    done: dict[str, list[Path]] = {n: [] for n in names}
    for k in range(args.repeats):
        for name, spec in zip(names, [None, *settings]):
            run_dir = dirs[(k, name)]
            if run_dir.exists():
                shutil.rmtree(run_dir)
            layers = Layers(**{**base.__dict__, "noise": spec, "noise_dir": str(scratch.absolute()),
                               "noise_cpus": args.noise_cpus, "noise_io_mode": args.noise_io_mode})
            cmd = run_command(args.ranks, run_dir, program, layers)
            print(f"== round {k + 1}/{args.repeats} {name}: {' '.join(cmd)}", flush=True)
            stream(cmd, prefix=f"  {name}-r{k} ", log=run_dir.parent / f"{run_dir.name}.log")
            left = tn.wait_stopped(run_dir)
            if left:
                print(f"  {name}-r{k}: noise generator(s) {left} still running 5 s after the job", flush=True)
            finalize_run(run_dir)
            done[name].append(run_dir)
    quiet, noisy = done[QUIET], [d for n in names[1:] for d in done[n]]
    write_noise_table(quiet, noisy, args.out, benchmark, phases)
    write_noise_table(quiet, noisy, args.out, benchmark, phases, args.from_epoch)
    return 0


def write_noise_table(quiet: Sequence[Path], noisy: Sequence[Path], out: Path, benchmark: str,
                      phases: Sequence[str] = (), from_epoch: int | None = None) -> None:
    """The table and figure of finished runs into ``out``: ``noise.{txt,json,png}`` over all epochs, or
    ``noise-steady.*`` over epochs ``>= from_epoch``. Shown: ``phases`` that ran, then the longest others (8 in
    all)."""
    from trace_merge import noise

    table = noise.noise_table(noise.open_runs(quiet, from_epoch), noise.open_runs(noisy, from_epoch))
    ran = set(table["phase"])
    shown = [p for p in phases if p in ran]
    shown += [p for p in noise.top_phases(table, len(ran)) if p not in shown][:max(0, 8 - len(shown))]
    text = noise.format_noise(table, shown)
    stem = "noise" if from_epoch is None else "noise-steady"
    what = "all epochs" if from_epoch is None else f"epochs >= {from_epoch} (from 0)"
    title = f"{benchmark}: slowdown under noise, {what}, {len(quiet)} quiet repeats"
    (out / f"{stem}.txt").write_text(f"== {title}\n{text}\n")
    (out / f"{stem}.json").write_text(json.dumps(json_ready(table.to_dict(orient="records")), indent=1) + "\n")
    noise.plot_noise(table, shown, title=title).savefig(out / f"{stem}.png", dpi=110)
    print(f"== {title}\n{text}")
    print(f"wrote {out / (stem + '.txt')}, {out / (stem + '.json')}, {out / (stem + '.png')}")
