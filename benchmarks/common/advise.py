"""``python -m benchmarks.<name> advise``: the loader-knob advisor (:mod:`trace_merge.advise`, docs/advise.md) on a
benchmark, each point a real ``mpiexec -n N timelogger run`` job of ``train`` as ``sweep`` starts them.

A benchmark may have variants the model does not treat as a number (climate: reader processes or threads): the
advisor runs once per variant into ``OUT/<variant>/`` and the variant whose verified best is fastest is the
advice. Points already measured in ``OUT`` (same command) are re-used, so a long ``--full-sweep`` can be run in
parts (one ``--variant`` at a time) and the table made again at the end without running anything.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks.common.errors import TraceInputError
from benchmarks.common.launch import run_command
from benchmarks.common.sweep import add_job_flags, layers_for, parse_list
from trace_merge import advise as tm


@dataclass(frozen=True)
class Knobs:
    """How a benchmark's ``train`` takes the advisor's knobs, their grid and default, its variants and preset."""

    flags: dict[str, str]  # knob -> train flag (readers -> --loader-threads)
    grid: dict[str, list[int]]
    default: dict[str, int]
    preset: tuple[str, ...]  # train flags when none are given: small and quick, but input cost visible
    variant_flag: str = ""  # e.g. --read-in; "" = no variants
    variants: tuple[str, ...] = ("",)
    default_variant: str = ""
    batch: int = 1  # samples per rank and step when batch is no knob (overridden by a --batch in the train flags)


def _batch(train_args: Sequence[str], fallback: int) -> int:
    """The ``--batch`` among the train flags (the samples per rank and step of every point), else ``fallback``."""
    for i, a in enumerate(train_args):
        text = train_args[i + 1] if a == "--batch" and i + 1 < len(train_args) else \
            a.split("=", 1)[1] if a.startswith("--batch=") else None
        if text is not None:
            if not text.isdigit() or int(text) < 1:
                raise TraceInputError("--batch", f"expected a positive whole number, got {text!r}")
            return int(text)
    return fallback


def advise_main(argv: Sequence[str] | None, benchmark: str, check: Callable[[Path, int], Any], knobs: Knobs) -> int:
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{benchmark} advise",
                                description="Measure a few loader settings, fit the throughput model, predict the "
                                            "best setting and verify it (docs/advise.md); other flags go to `train` "
                                            f"(default: {' '.join(knobs.preset)}).")
    add_job_flags(p, "directory for the runs and advise.txt")
    p.add_argument("--repeats", type=int, default=2, help="runs per measured setting (2)")
    p.add_argument("--full-sweep", type=int, default=0, metavar="N",
                   help="also run every setting of the grid N times and compare the advice with its best")
    for knob, flag in knobs.flags.items():
        p.add_argument(f"--{knob}", type=lambda t: parse_list(t, int), default=knobs.grid[knob],
                       help=f"{knob} values to consider ({flag}; default {','.join(map(str, knobs.grid[knob]))})")
    if knobs.variant_flag:
        p.add_argument("--variant", type=lambda t: parse_list(t, str), default=list(knobs.variants),
                       help=f"{knobs.variant_flag} values to advise on (default {','.join(knobs.variants)})")
    p.add_argument("--no-posix", action="store_true", help="without the DFTracer POSIX layer (no fs share)")
    p.add_argument("--dist", default="horovod")
    p.add_argument("--debug", action="store_true")
    args, train_args = p.parse_known_args(argv)
    if args.ranks < 1 or args.repeats < 1:
        raise TraceInputError("--ranks/--repeats", "need at least 1")
    grid = {k: tm.checked_values(k, getattr(args, k), f"--{k}") for k in knobs.flags}
    variants = getattr(args, "variant", [""])
    unknown = [v for v in variants if v not in knobs.variants]
    if unknown:
        raise TraceInputError("--variant", f"unknown {unknown[0]!r}; expected {','.join(knobs.variants)}")
    # the default setting where the grid has it, else each knob's nearest value
    default = {k: min(v, key=lambda x: abs(x - knobs.default[k])) for k, v in grid.items()}
    check(args.data, args.ranks)
    train_args = list(train_args) or list(knobs.preset)
    batch = _batch(train_args, knobs.batch)
    found: dict[str, tm.Advice] = {}
    for variant in variants:
        program = [sys.executable, "-m", f"benchmarks.{benchmark}", "train", "--data", str(args.data.absolute()),
                   "--dist", args.dist, "--no-merge", *train_args,
                   *([knobs.variant_flag, variant] if variant else []),
                   *(x for k, flag in knobs.flags.items() for x in (flag, f"{{{k}}}"))]
        cmd = run_command(args.ranks, Path("{run_dir}"), program, layers_for(args.data, not args.no_posix, False))
        out = args.out / variant if variant else args.out
        title = f"{benchmark} advise{f' ({knobs.variant_flag} {variant})' if variant else ''}: {' '.join(cmd)}"
        print(f"== {title}", flush=True)
        runner = tm.Runner(tuple(cmd), batch, echo=lambda s: print(s, flush=True))
        found[variant] = tm.advise(runner, grid, default, out, args.repeats, args.full_sweep)
        print(tm.write_advice(found[variant], out, title), flush=True)
    if len(found) > 1:
        text = format_variants(found, knobs)
        (args.out / "advise.txt").write_text(text + "\n")
        print(text)
        print(f"wrote {args.out / 'advise.txt'}")
    return 0


def format_variants(found: dict[str, tm.Advice], knobs: Knobs) -> str:
    """The advice across variants: each one's verified best, the fastest of them, and against the full sweeps."""
    lines = [f"{knobs.variant_flag:<12} {'recommended':<22} {'predicted':>9} {'verified median [min-max]':>26} "
             f"{'err %':>6} {'gain %':>7}"]
    for variant, a in found.items():
        v = a.verified
        lines.append(f"{variant:<12} {tm.label(a.recommended):<22} {a.model.predict(a.recommended):9.1f} "
                     f"{f'{v.throughput:.1f} [{v.low:.1f}-{v.high:.1f}]':>26} {a.error_pct:6.1f} {a.gain_pct:7.1f}")
    pick = max(found, key=lambda v: found[v].verified.throughput)
    base = found.get(knobs.default_variant)
    gain = ""
    if base is not None:
        gain = (f"; {100 * (found[pick].verified.throughput / base.default_point.throughput - 1):+.1f} % over the "
                f"default ({knobs.variant_flag} {knobs.default_variant} {tm.label(base.default)}, "
                f"{base.default_point.throughput:.1f} samples/s)")
    lines.append(f"advice: {knobs.variant_flag} {pick} {tm.label(found[pick].recommended)}, verified "
                 f"{found[pick].verified.throughput:.1f} samples/s{gain}")
    if all(a.sweep for a in found.values()):
        tops = {v: a.sweep_best() for v, a in found.items()}
        best_variant = max(tops, key=lambda v: tops[v].throughput)  # type: ignore[union-attr]
        top = tops[best_variant]
        assert top is not None
        steps = tm.distance(found[pick].knobs, found[pick].recommended, top.setting) if pick == best_variant else None
        lines.append(f"full sweep best: {knobs.variant_flag} {best_variant} {tm.label(top.setting)} "
                     f"{top.throughput:.1f} [{top.low:.1f}-{top.high:.1f}] samples/s; the advice is "
                     + (f"{steps} grid step(s) from it" if steps is not None else "another variant"))
    return "\n".join(lines)
