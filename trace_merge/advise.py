"""The loader-knob advisor: measure a few settings of a real job, fit a small throughput model from their layered
measurements, predict the best setting of the grid, run it again to verify (docs/advise.md; keep the two in step).

Every measured point is a real run of the user's command, its placeholders (``{readers}``, ``{prefetch}``,
``{batch}``, ``{run_dir}``) filled in; its run directory is opened with :class:`~trace_merge.run.Run` and read
through the one :class:`~trace_merge.analysis.Summary` (step cycles, event stats, layered breakdown).

The model, per job of ``n`` ranks (all times per rank, from the step cycles and the input phase; ``n`` is a knob
too, ``{ranks}``, for a sweep over ranks x batch size and its scaling efficiency):

- input cost per sample with ``r`` readers: ``c(r) = c1 * (1 + alpha * (r - 1))`` (``alpha``: contention), so the
  input pipeline's capacity is ``X_in(r) = n * r / c(r)`` samples/s;
- compute per step of batch ``b``: ``C(b) = c0 + cb * b``, capacity ``X_comp(b) = n * b / C(b)``;
- a step takes ``T = (I**k + C**k) ** (1 / k)`` with ``I = b * c(r) / r``, a smooth maximum: with a prefetch
  (``prefetch >= 1``) input and compute overlap, and ``k`` (fitted, 1..:data:`K_MAX`) says how well: large ``k`` is
  ``max(I, C)`` (perfect overlap), ``k = 1`` is ``I + C`` (none); ``prefetch = 0`` is ``k = 1``;
- predicted throughput ``n * b / T`` (``min(X_in, X_comp)`` as ``k`` grows).
"""
from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, overload

import numpy as np

from trace_merge.errors import TraceInputError
from trace_merge.formatting import json_plain

#: the knobs the model knows: parallel input slots, prefetch depth, samples per rank and step, ranks
KNOBS = ("readers", "prefetch", "batch", "ranks")
#: the accelerator utilisation (AU, % of step-cycle time computing) a batch size should keep, by default
TARGET_AU_PCT = 80.0
RUN_DIR = "run_dir"
#: the sharpest overlap the fit considers (at 12 the smooth maximum is within 6 % of max(I, C) where I = C)
K_MAX = 12.0
#: the file a finished point leaves in its run directory (a later advise re-uses the point instead of running it)
POINT_FILE = "advise-point.json"
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def parse_knob(text: str) -> tuple[str, list[int]]:
    """``readers=1,2,4`` -> ``("readers", [1, 2, 4])``; a one-line :class:`TraceInputError` for anything else."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or name not in KNOBS:
        raise TraceInputError("--knob", f"{text!r}: expected NAME=V1,V2,... with NAME one of {', '.join(KNOBS)}")
    out = []
    for v in values.split(","):
        try:
            out.append(int(v))
        except ValueError:
            raise TraceInputError("--knob", f"{name}: value {v.strip()!r} is not a whole number") from None
    return name, checked_values(name, out, "--knob")


def checked_values(name: str, values: Sequence[int], where: str) -> list[int]:
    """A knob's values, sorted and unique; a one-line :class:`TraceInputError` naming ``where`` when there are none
    or one is below the knob's least (prefetch 0 = none; every other knob at least 1)."""
    low = 0 if name == "prefetch" else 1
    if not values or min(values) < low:
        raise TraceInputError(where, f"{name}: values must be at least {low}, got {','.join(map(str, values))}")
    return sorted(set(values))


def check_command(cmd: Sequence[str], knobs: dict[str, list[int]]) -> None:
    """Every placeholder of ``cmd`` is a knob or ``{run_dir}``; ``{run_dir}`` and every knob appear."""
    used = {m for token in cmd for m in _PLACEHOLDER.findall(token)}
    unknown = sorted(used - set(knobs) - {RUN_DIR})
    if not cmd:
        raise TraceInputError("advise", "no command after `--`")
    if unknown:
        raise TraceInputError("advise", f"unknown placeholder {{{unknown[0]}}} in the command; known: "
                              + ", ".join(f"{{{k}}}" for k in (*knobs, RUN_DIR)))
    if RUN_DIR not in used:
        raise TraceInputError("advise", "the command has no {run_dir}: each point's run directory must be "
                              "given to it (`timelogger run -o {run_dir} -- ...`)")
    unused = [k for k in knobs if k not in used]
    if unused:
        raise TraceInputError("--knob", f"{unused[0]} is not used in the command (no {{{unused[0]}}})")


def substitute(cmd: Sequence[str], values: dict[str, Any]) -> list[str]:
    """``cmd`` with each ``{name}`` replaced by ``values[name]`` (other braces are left as they are)."""
    return [_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), t)
            for t in cmd]


@dataclass(frozen=True)
class Measurement:
    """One run of one setting, from its step cycles (steady: the warm-up step and each epoch's first cycle, which
    holds the pipeline's start, are left out) and its input phase (the app's io/preprocess phase with the most
    time: the outermost work of one input slot)."""

    setting: dict
    run_dir: str
    ranks: int
    samples_per_s: float  # job throughput: Σ over ranks of samples per steady cycle time
    step_s: float  # mean steady cycle, per rank
    input_wait_s: float  # mean input wait per cycle
    compute_s: float  # mean compute + other + waiting for other ranks per cycle: all but the input wait
    input_phase: str
    input_s_per_sample: float  # input-phase seconds per sample consumed (one slot's cost, c)
    fs_s_per_sample: float  # the file system's part of the input phases per sample (posix layer; 0 without it)
    au_pct: float = float("nan")  # the verdict's accelerator utilisation (compute ÷ step-cycle time)

    @property
    def wait_pct(self) -> float:
        return 100 * self.input_wait_s / self.step_s if self.step_s > 0 else 0.0


def measure(run_dir: "str | Path", setting: dict, samples_per_step: int,
            input_phase: Optional[str] = None) -> Measurement:
    """The numbers of one finished run (:class:`Measurement`); ``samples_per_step``: samples per rank and step."""
    from trace_merge.run import Run

    a = Run.open(run_dir).analyse()
    steps = a.steps
    if not len(steps):
        raise TraceInputError(run_dir, "no training step cycles (the workload marks no `Training Iteration`)")
    first = steps.groupby(["rank", "epoch"], dropna=False).cumcount().to_numpy() == 0
    steady = steps[(steps["counted"] & ~steps["warmup"]).to_numpy() & ~first]
    if len(steady) < 2:
        raise TraceInputError(run_dir, f"{len(steady)} steady step cycle(s): too short to measure, run more steps")
    per_rank = steady.groupby("rank")["step_s"].agg(["sum", "count"])
    throughput = float((samples_per_step * per_rank["count"] / per_rank["sum"]).sum())
    stats = a.event_stats
    inputs = stats[(stats["layer"] == "app") & stats["cat"].isin(["io", "preprocess"])] if len(stats) else stats
    if input_phase is None and len(inputs):
        input_phase = str(inputs.sort_values("sum_us").iloc[-1]["name"])
    chosen = inputs[inputs["name"] == input_phase] if input_phase is not None and len(inputs) else inputs.iloc[0:0]
    if not len(chosen):
        raise TraceInputError(run_dir, "no input phase (an app io/preprocess phase around each sample's read) "
                              + ("" if input_phase is None else f"named {input_phase!r}"))
    samples = len(steps) * samples_per_step
    lay = a.layered
    fs = float(lay[lay["cat"].isin(["io", "preprocess"])]["fs_s"].sum()) if len(lay) else 0.0
    return Measurement(
        setting=dict(setting), run_dir=str(run_dir), ranks=int(steps["rank"].nunique()), samples_per_s=throughput,
        step_s=float(steady["step_s"].mean()), input_wait_s=float(steady["input_wait_s"].mean()),
        compute_s=float((steady["compute_s"] + steady["other_s"] + steady["sync_wait_s"]).mean()),
        input_phase=str(input_phase),
        input_s_per_sample=float(chosen["sum_us"].sum()) / 1e6 / samples, fs_s_per_sample=fs / samples,
        au_pct=float(a.verdict.au_pct if a.verdict.au_pct is not None else float("nan")))


@dataclass(frozen=True)
class Point:
    """The repeats of one setting: medians (what the model is fitted to) and the throughput's range."""

    setting: dict
    runs: tuple[Measurement, ...]

    def median(self, field: str) -> float:
        return float(np.median([getattr(m, field) for m in self.runs]))

    @property
    def throughput(self) -> float:
        return self.median("samples_per_s")

    @property
    def low(self) -> float:
        return min(m.samples_per_s for m in self.runs)

    @property
    def high(self) -> float:
        return max(m.samples_per_s for m in self.runs)


def value(setting: dict, knob: str, default: int) -> int:
    return int(setting.get(knob, default))


@dataclass(frozen=True)
class Model:
    """The fitted throughput model (module docstring); ``samples_per_step`` is the batch when it is no knob."""

    ranks: int
    c1: float  # input seconds per sample with one reader
    alpha: float  # reader contention: each further reader makes a sample this share dearer
    c0: float  # compute seconds per step, fixed part
    cb: float  # ... per sample of the batch
    overlap: float  # k of the smooth maximum with prefetch >= 1: how well input hides behind compute
    samples_per_step: int = 1

    def input_cost(self, readers: int) -> float:
        return self.c1 * (1 + self.alpha * (readers - 1))

    def input_capacity(self, setting: dict) -> float:
        r = value(setting, "readers", 1)
        return value(setting, "ranks", self.ranks) * r / self.input_cost(r)

    def compute_capacity(self, setting: dict) -> float:
        b = value(setting, "batch", self.samples_per_step)
        return value(setting, "ranks", self.ranks) * b / (self.c0 + self.cb * b)

    def predict(self, setting: dict) -> float:
        """Predicted job throughput, samples/s."""
        r, b = value(setting, "readers", 1), value(setting, "batch", self.samples_per_step)
        i, c = b * self.input_cost(r) / r, self.c0 + self.cb * b
        n = value(setting, "ranks", self.ranks)
        return n * b / step_time(i, c, self.overlap if value(setting, "prefetch", 1) >= 1 else 1.0)

    def as_dict(self) -> dict:
        return asdict(self)


@overload
def step_time(i: float, c: float, k: float) -> float: ...
@overload
def step_time(i: np.ndarray, c: np.ndarray, k: float) -> np.ndarray: ...
def step_time(i: "float | np.ndarray", c: "float | np.ndarray", k: float) -> "float | np.ndarray":
    """The smooth maximum of input time ``i`` and compute time ``c`` per step (module docstring)."""
    top = np.maximum(i, c)
    return top * ((i / top) ** k + (c / top) ** k) ** (1 / k)


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares intercept and slope of y over x (slope 0 when x has one value)."""
    if len(set(x.tolist())) < 2:
        return float(np.mean(y)), 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def fit(points: Sequence[Point], samples_per_step: int = 1) -> Model:
    """The model of the medians of ``points`` (docs/advise.md: what is fitted from which layer)."""
    if not points:
        raise TraceInputError("advise", "no measured points to fit")
    r = np.array([value(p.setting, "readers", 1) for p in points], float)
    b = np.array([value(p.setting, "batch", samples_per_step) for p in points], float)
    cost = np.array([p.median("input_s_per_sample") for p in points])
    compute = np.array([p.median("compute_s") for p in points])
    step = np.array([p.median("step_s") for p in points])
    a, s = _line(r - 1, cost)
    c1 = max(a, 1e-9)
    alpha = max(s / c1, 0.0)  # more readers never make a sample cheaper than one reader alone does
    c0, cb = _line(b, compute)
    if c0 < 0:  # a fixed part below zero is noise in a near-proportional compute: proportional then
        c0, cb = 0.0, float(np.sum(compute * b) / np.sum(b * b))
    cb = max(cb, 0.0)
    # the overlap k from the measured steps of the prefetching points: least squares of log step time over a grid
    # of k, with the model's own input and compute times (so k also absorbs what they miss at the design points)
    i = b * c1 * (1 + alpha * (r - 1)) / r
    c = c0 + cb * b
    hides = np.array([value(p.setting, "prefetch", 1) >= 1 for p in points])
    k = K_MAX
    if hides.any():
        ks = np.linspace(1.0, K_MAX, 111)
        err = [float(np.sum(np.log(step_time(i[hides], c[hides], x) / step[hides]) ** 2)) for x in ks]
        k = float(ks[int(np.argmin(err))])
    return Model(ranks=int(points[0].runs[0].ranks), c1=c1, alpha=alpha, c0=max(c0, 0.0), cb=cb, overlap=k,
                 samples_per_step=samples_per_step)


def grid(knobs: dict[str, list[int]]) -> list[dict]:
    """Every setting of the knobs' values."""
    names = list(knobs)
    return [dict(zip(names, combo)) for combo in itertools.product(*(knobs[n] for n in names))]


def design(knobs: dict[str, list[int]], default: dict) -> list[dict]:
    """The few settings measured (3-5): the default, every knob at its lowest, the most readers, and a middle
    reader count with the deepest prefetch and largest batch (so readers are seen at three counts and the batch at
    two sizes)."""
    lo = {k: v[0] for k, v in knobs.items()}
    out = [default, lo]
    if "readers" in knobs:
        out.append({**lo, "readers": knobs["readers"][-1]})
    out.append({k: (v[len(v) // 2] if k == "readers" else v[-1]) for k, v in knobs.items()})
    unique: list[dict] = []
    for s in out:
        if s not in unique:
            unique.append(s)
    return unique


def best(model: Model, settings: Sequence[dict]) -> dict:
    """The setting of the highest predicted throughput; within 1 % of it, the one using least (first in grid
    order, lowest values): a deeper prefetch or another reader that the model sees no gain in is not advised."""
    top = max(model.predict(s) for s in settings)
    return next(s for s in settings if model.predict(s) >= 0.99 * top)


def distance(knobs: dict[str, list[int]], a: dict, b: dict) -> int:
    """Grid steps between two settings: the largest difference in value index over the knobs."""
    return max((abs(v.index(a[k]) - v.index(b[k])) for k, v in knobs.items()), default=0)


def name(setting: dict) -> str:
    """A directory name: ``readers2-prefetch1``."""
    return "-".join(f"{k}{v}" for k, v in setting.items()) or "default"


def label(setting: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in setting.items())


@dataclass(frozen=True)
class Runner:
    """Runs the command of one setting into a run directory and measures it; a point measured before (its
    ``advise-point.json`` names the same command) is read back instead of run again."""

    cmd: tuple[str, ...]
    samples_per_step: int = 1
    input_phase: Optional[str] = None
    echo: Callable[[str], None] = print

    def run(self, setting: dict, run_dir: Path) -> Measurement:
        cmd = substitute(self.cmd, {**setting, RUN_DIR: str(run_dir)})
        done = run_dir / POINT_FILE
        if done.is_file():
            kept = json.loads(done.read_text())
            if kept.get("command") == cmd:
                return Measurement(**kept["measurement"])
        if run_dir.exists():  # an interrupted or older point of this advisor's directory: derived, made again
            shutil.rmtree(run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        log = run_dir.parent / f"{run_dir.name}.log"
        self.echo(f"  run {label(setting)} -> {run_dir}")
        with open(log, "w") as out:
            try:
                rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise TraceInputError(cmd[0], f"cannot run the command: {exc.strerror or exc}") from None
        if rc != 0:
            lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
            raise TraceInputError(log, f"the command exited with status {rc} for {label(setting)}"
                                  + (f": {lines[-1]}" if lines else ""))
        if not run_dir.is_dir():
            raise TraceInputError(run_dir, f"the command made no run directory for {label(setting)} "
                                  "(does it pass {run_dir} to `timelogger run -o`?)")
        m = measure(run_dir, setting, value(setting, "batch", self.samples_per_step), self.input_phase)
        done.write_text(json.dumps({"command": cmd, "measurement": asdict(m)}, indent=1) + "\n")
        return m

    def point(self, setting: dict, out: Path, repeats: int) -> Point:
        return Point(setting, tuple(self.run(setting, out / f"{name(setting)}-k{k}") for k in range(repeats)))


@dataclass(frozen=True)
class Advice:
    """Everything one advise found: the measured design, the model, its best setting verified, the full sweep."""

    knobs: dict
    default: dict
    design: tuple[Point, ...]
    model: Model
    recommended: dict
    verified: Point
    sweep: tuple[Point, ...] = ()

    @property
    def default_point(self) -> Point:
        return next(p for p in self.design if p.setting == self.default)

    @property
    def error_pct(self) -> float:
        """Predicted against the verifying runs' median, % of the measured."""
        return 100 * (self.model.predict(self.recommended) / self.verified.throughput - 1)

    @property
    def gain_pct(self) -> float:
        """The verified setting's median throughput over the default's, %."""
        return 100 * (self.verified.throughput / self.default_point.throughput - 1)

    def sweep_best(self) -> Optional[Point]:
        return max(self.sweep, key=lambda p: p.throughput) if self.sweep else None

    def measured(self) -> list[Point]:
        """Every measured setting once, with the runs of the design, the verification and the sweep together."""
        runs: dict[str, list[Measurement]] = {}
        for p in (*self.design, self.verified, *self.sweep):
            runs.setdefault(name(p.setting), []).extend(p.runs)
        return [Point(r[0].setting, tuple(r)) for r in runs.values()]

    def as_dict(self) -> dict:
        def point(p: Point) -> dict:
            return {"setting": p.setting, "median_samples_per_s": p.throughput, "min": p.low, "max": p.high,
                    "predicted_samples_per_s": self.model.predict(p.setting),
                    "runs": [asdict(m) for m in p.runs]}

        top = self.sweep_best()
        return {"knobs": self.knobs, "default": self.default, "model": self.model.as_dict(),
                "design": [point(p) for p in self.design], "recommended": self.recommended,
                "predicted_samples_per_s": self.model.predict(self.recommended), "verified": point(self.verified),
                "error_pct": self.error_pct, "gain_over_default_pct": self.gain_pct,
                "sweep": [point(p) for p in self.sweep],
                "sweep_best": top.setting if top else None,
                "steps_from_sweep_best": distance(self.knobs, self.recommended, top.setting) if top else None,
                "scaling": [asdict(x) for x in scaling(self.measured())] if "ranks" in self.knobs else []}


@dataclass(frozen=True)
class Scaling:
    """One measured setting of a sweep over ranks: its throughput against ideal scaling, and its AU."""

    setting: dict
    samples_per_s: float  # median
    efficiency_pct: Optional[float]  # ÷ (ranks ÷ fewest ranks × the fewest ranks' throughput, other knobs equal)
    au_pct: float  # median accelerator utilisation: 100 - AU is the share of step cycles the compute side waited
    wait_pct: float  # input wait, % of step-cycle time (idle beyond it: the cycles' other time between steps)


def scaling(points: Sequence[Point]) -> list[Scaling]:
    """Scaling efficiency and AU of every measured setting (settings without ranks are one rank count)."""
    by = {name(p.setting): p for p in points}
    lowest = min(value(p.setting, "ranks", 1) for p in points) if points else 1
    out = []
    for p in sorted(points, key=lambda p: tuple(sorted(p.setting.items()))):
        n = value(p.setting, "ranks", 1)
        base = by.get(name({**p.setting, "ranks": lowest})) if "ranks" in p.setting else None
        eff = 100 * p.throughput / (base.throughput * n / lowest) if base is not None else None
        out.append(Scaling(p.setting, p.throughput, eff, p.median("au_pct"), p.median("wait_pct")))
    return out


def batch_for_au(rows: Sequence[Scaling], target_pct: float) -> dict[int, Optional[int]]:
    """Per rank count, the smallest measured batch whose median AU reaches ``target_pct`` (None: none did)."""
    out: dict[int, Optional[int]] = {}
    for row in sorted(rows, key=lambda x: value(x.setting, "batch", 0)):
        n = value(row.setting, "ranks", 1)
        out.setdefault(n, None)
        if out[n] is None and row.au_pct >= target_pct:
            out[n] = value(row.setting, "batch", 0)
    return out


def advise(runner: Runner, knobs: dict[str, list[int]], default: dict, out: Path, repeats: int = 2,
           full_sweep: int = 0) -> Advice:
    """Measure the design (``repeats`` runs each), fit, predict the best of the grid and verify it (``repeats``
    more runs); with ``full_sweep`` > 0 also measure every setting of the grid that many times."""
    if set(default) != set(knobs) or any(default[k] not in knobs[k] for k in knobs):
        raise TraceInputError("--default", f"{label(default)}: needs one value of each knob's list")
    if full_sweep < 0:
        raise TraceInputError("--full-sweep", f"must be 0 (no sweep) or more, got {full_sweep}")
    points = tuple(runner.point(s, out / "design", repeats) for s in design(knobs, default))
    model = fit(points, runner.samples_per_step)
    settings = grid(knobs)
    pick = best(model, settings)
    runner.echo(f"  predicted best: {label(pick)} at {model.predict(pick):.1f} samples/s; verifying")
    verified = runner.point(pick, out / "verify", repeats)
    sweep = tuple(runner.point(s, out / "sweep", full_sweep) for s in settings) if full_sweep else ()
    return Advice(knobs, dict(default), points, model, pick, verified, sweep)


def _range(p: Point) -> str:
    return f"{p.throughput:8.1f} [{p.low:.1f}-{p.high:.1f}]"


def format_scaling(rows: Sequence[Scaling], target_pct: float = TARGET_AU_PCT) -> str:
    """The scaling table and, per rank count, the batch that keeps AU above ``target_pct``."""
    width = max(len(label(r.setting)) for r in rows)
    lines = [f"  {'setting':<{width}} {'samples/s':>9} {'efficiency %':>12} {'AU %':>6} {'idle %':>6} "
             f"{'input wait %':>12}"]
    for r in rows:
        eff = f"{r.efficiency_pct:12.1f}" if r.efficiency_pct is not None else f"{'-':>12}"
        lines.append(f"  {label(r.setting):<{width}} {r.samples_per_s:9.1f} {eff} {r.au_pct:6.1f} "
                     f"{100 - r.au_pct:6.1f} {r.wait_pct:12.1f}")
    if any("batch" in r.setting for r in rows):
        need = batch_for_au(rows, target_pct)
        lines.append(f"  batch per rank to keep AU >= {target_pct:g} %: " + "; ".join(
            f"{n} rank(s): {b if b is not None else 'none of those measured'}" for n, b in sorted(need.items())))
    return "\n".join(lines)


def format_advice(a: Advice, title: str = "", target_au: float = TARGET_AU_PCT) -> str:
    m = a.model
    width = max(len(label(p.setting)) for p in (*a.design, a.verified, *a.sweep))
    head = f"  {'setting':<{width}} {'measured samples/s':>24} {'predicted':>9} {'err %':>6} {'wait %':>6} " \
           f"{'input ms/sample':>15} {'fs ms/sample':>12} {'compute ms/step':>15}"

    def row(p: Point) -> str:
        pred = m.predict(p.setting)
        return (f"  {label(p.setting):<{width}} {_range(p):>24} {pred:9.1f} {100 * (pred / p.throughput - 1):6.1f} "
                f"{p.median('wait_pct'):6.1f} {1e3 * p.median('input_s_per_sample'):15.2f} "
                f"{1e3 * p.median('fs_s_per_sample'):12.2f} {1e3 * p.median('compute_s'):15.2f}")

    lines = [title] if title else []
    lines += [f"measured design ({len(a.design[0].runs)} run(s) each; median [min-max]; input phase "
              f"{a.design[0].runs[0].input_phase!r}):", head, *map(row, a.design)]
    lines += [f"model: {m.ranks} rank(s); input {1e3 * m.c1:.3g} ms/sample with one reader, contention "
              f"alpha={m.alpha:.3g}; compute {1e3 * m.c0:.3g} ms + {1e3 * m.cb:.3g} ms/sample per step; "
              f"overlap k={m.overlap:.3g} (1: input and compute in turn; {K_MAX:g}: fully overlapped)"]
    pred = m.predict(a.recommended)
    lines += [f"recommended: {label(a.recommended)} (predicted {pred:.1f} samples/s: input capacity "
              f"{m.input_capacity(a.recommended):.1f}, compute capacity {m.compute_capacity(a.recommended):.1f})",
              f"verified ({len(a.verified.runs)} run(s)): {_range(a.verified).strip()} samples/s; prediction "
              f"error {a.error_pct:+.1f} %; gain over the default ({label(a.default)}, "
              f"{a.default_point.throughput:.1f}) {a.gain_pct:+.1f} %"]
    if a.sweep:
        top = a.sweep_best()
        assert top is not None
        rec = next(p for p in a.sweep if p.setting == a.recommended)
        steps = distance(a.knobs, a.recommended, top.setting)
        lines += [f"full sweep ({len(a.sweep[0].runs)} run(s) each):", head, *map(row, a.sweep),
                  f"sweep best: {label(top.setting)} {_range(top).strip()}; recommended "
                  f"{label(a.recommended)} measured {rec.throughput:.1f} in the sweep, "
                  f"{steps} grid step(s) from the best ({'within' if steps <= 1 else 'NOT within'} one step)"]
        errors = [abs(m.predict(p.setting) / p.throughput - 1) for p in a.sweep]
        lines.append(f"model over the sweep: median |error| {100 * float(np.median(errors)):.1f} %, "
                     f"max {100 * max(errors):.1f} %")
    if "ranks" in a.knobs:
        lines += ["scaling over ranks (every measured setting; efficiency against the fewest ranks' throughput "
                  "times the rank ratio):", format_scaling(scaling(a.measured()), target_au)]
    return "\n".join(lines)


def write_advice(a: Advice, out: Path, title: str = "", target_au: float = TARGET_AU_PCT) -> str:
    """``advise.txt`` and ``advise.json`` into ``out``; returns the text."""
    text = format_advice(a, title, target_au)
    out.mkdir(parents=True, exist_ok=True)
    (out / "advise.txt").write_text(text + "\n")
    (out / "advise.json").write_text(json.dumps(json_plain(a.as_dict()), indent=1) + "\n")
    return text


__all__ = ["KNOBS", "Measurement", "Point", "Model", "Runner", "Advice", "Scaling", "parse_knob", "checked_values",
           "check_command",
           "substitute", "measure", "fit", "design", "grid", "best", "advise", "scaling", "batch_for_au",
           "format_advice", "write_advice"]
