"""The cpu layer read back (``docs/cpu.md``): which threads used the node's cores, by role, per rank and epoch, while
the steps computed, inside each app phase, and what the node's cores did.

Its rows (``timelogger run``'s CPU sampler) are one interval per thread and sample window whose duration is the
thread's CPU time in that window, centred in it; ``core <n>`` rows (``pid`` 0) are a core's busy time, all processes
of the node. CPU "in" a time window is the rows' overlap with it, so placement is good to a sample period: the
tables below are sums over many windows.

A thread's **role** comes from what the other layers know about it, never from a guess:

- ``main``: the program's main thread (the thread whose id is the program's pid);
- ``input`` / ``compute`` / ``comm``: a thread of the program on which the framework profile or the app layer
  recorded work (tf.data's producer threads, a TimeLogger reader thread; TensorFlow's executor threads, PyTorch's
  autograd threads; communication), by the category of most of that work;
- ``workers``: threads of the program's child processes (DataLoader workers, reader pools), and the CPU time of
  children that ended between two samples;
- ``unattributed``: the program's other threads (TensorFlow names none of its threads for the OS: a ``--tf-profile``
  window tells its tf.data threads from its compute threads).

The **input side** is ``input`` + ``workers``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import pandas as pd

from trace_merge.intervals import covered_ns, merge_intervals

LAYER = "cpu"
ROLES = ("main", "input", "compute", "comm", "workers", "unattributed")
INPUT_ROLES = ("input", "workers")
#: the columns the view reads
#: the columns the view reads (a summary-only merge keeps no ``host``: the sampler's header names it)
COLUMNS = ("layer", "cat", "name", "rank", "pid", "tid", "start_ns", "end_ns")
#: the app phases per rank whose CPU is shown (the longest): a run with thousands of phase names is not a table
TOP_PHASES = 12
#: thread names (``/proc``) that say a role by themselves: PyTorch names its threads
NAMED_ROLES = (("pt_data_worker", "workers"), ("pt_autograd", "compute"), ("pt_pin_memory", "input"))
_INPUT_CATS = ("io", "preprocess")


@dataclass
class CpuView:
    """The cpu layer's tables (:func:`cpu_view`); ``as_dict`` is the form ``summary --json`` shows."""

    period_s: Optional[float]
    threads: pd.DataFrame  # rank, host, pid, tid, name, role, cpu_s
    per_epoch: pd.DataFrame  # rank, epoch (NA: the whole run), wall_s, cores_available, busy_cores, <role>_cores
    during_compute: pd.DataFrame  # rank, compute_s, busy_cores, input_cores, profiled_input_cores, ... (DURING_COMPUTE)
    phases: pd.DataFrame  # rank, phase, wall_s, cpu_s, cores
    nodes: pd.DataFrame  # host, ranks, cores, wall_s, node_busy_cores, job_busy_cores, idle_cores
    sampler_share_of_core: Optional[float] = None
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        from trace_merge.formatting import json_records

        return {"period_s": self.period_s, "sampler_share_of_core": self.sampler_share_of_core,
                "threads": json_records(self.threads), "per_epoch": json_records(self.per_epoch),
                "during_compute": json_records(self.during_compute), "phases": json_records(self.phases),
                "nodes": json_records(self.nodes), "notes": list(self.notes)}


def sampler_records(run_dir: Optional[Path]) -> "dict[int, dict[str, Any]]":
    """rank -> the CPU sampler's header settings (``cpu``) and close record (``close``) from ``RUN_DIR/cpu/``."""
    from timelogger import layout

    out: dict[int, dict[str, Any]] = {}
    if run_dir is None or not (run_dir / layout.CPU_DIR).is_dir():
        return out
    for path in sorted((run_dir / layout.CPU_DIR).glob("rank-*.pfw")):
        try:
            header, close = (_event(line) for line in _header_and_last_line(path))
        except OSError:
            continue
        args = (header or {}).get("args") or {}
        rank = args.get("rank")
        if isinstance(rank, int) and isinstance(args.get("cpu"), dict):
            out[rank] = {"cpu": args["cpu"], "host": args.get("hostname"),
                         "close": (close or {}).get("args") if (close or {}).get("name") == "timelogger_close"
                         else None}
    return out


def _header_and_last_line(path: Path) -> "tuple[str, str]":
    """A ``.pfw`` file's header line (the one after ``[``) and its last line, without reading what is between."""
    from timelogger.sidecar import last_line

    with open(path, "rb") as fh:
        fh.readline()
        header = fh.readline()
    return header.decode("utf-8", "replace"), last_line(path).decode("utf-8", "replace")


def _event(line: str) -> Optional[dict]:
    try:
        doc = json.loads(line.strip().rstrip(","))
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _weighted_cover(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray):
    """``F(t)``: the length of the disjoint sorted intervals before ``t``, each weighted (``F(b) - F(a)`` is the
    weighted overlap of ``[a, b)`` with them; unweighted: :func:`~trace_merge.intervals.covered_ns`)."""
    w = np.asarray(weights, dtype=float)
    before = np.concatenate([[0.0], np.cumsum((ends - starts) * w)])

    def cover(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(starts, t, side="right") - 1
        inside = k >= 0
        kk = np.where(inside, k, 0)
        part = np.clip(t - starts[kk], 0, (ends - starts)[kk]) * w[kk] if starts.size else np.zeros(t.size)
        return np.where(inside, before[kk] + part, 0.0)

    return cover


def _overlap_s(rows: pd.DataFrame, starts: Iterable[int], ends: Iterable[int]) -> float:
    """CPU seconds of ``rows`` inside the union of ``[starts, ends)``."""
    s, e = merge_intervals(starts, ends)
    if not s.size or not len(rows):
        return 0.0
    return float(covered_ns(s, e, rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()).sum()) / 1e9


def _roles(threads: pd.DataFrame, evidence: pd.DataFrame, programs: "dict[int, int]") -> pd.Series:
    """The role of each thread (:data:`ROLES`) from the program's pid and the other layers' work on its tid."""
    by_tid: dict[tuple[int, int], str] = {}
    if len(evidence):
        totals = evidence.pivot_table(index=["rank", "tid"], columns="cat", values="dur_ns", aggfunc="sum",
                                      fill_value=0, observed=True)
        for (rank, tid), row in totals.iterrows():
            work = {c: float(row.get(c, 0)) for c in ("io", "preprocess", "compute", "comm")}
            if sum(work.values()) <= 0:
                continue
            inputs = work["io"] + work["preprocess"]
            by_tid[(int(rank), int(tid))] = "input" if inputs * 2 >= sum(work.values()) else (
                "compute" if work["compute"] >= work["comm"] else "comm")
    roles = []
    for rank, pid, tid, name in zip(threads["rank"], threads["pid"], threads["tid"], threads["name"]):
        program = programs.get(int(rank))
        named = next((role for prefix, role in NAMED_ROLES if str(name).startswith(prefix)), None)
        if program is not None and pid == program and tid == program:
            roles.append("main")
        elif (program is not None and pid != program) or tid == 0:  # tid 0: children that ended between samples
            roles.append("workers")
        elif (int(rank), int(tid)) in by_tid:
            roles.append(by_tid[(int(rank), int(tid))])
        else:
            roles.append(named or "unattributed")
    return pd.Series(roles, index=threads.index, dtype=object)


def cpu_view(frames: Iterable[pd.DataFrame], steps: pd.DataFrame, run_dir: Optional[Path] = None
             ) -> Optional[CpuView]:
    """The cpu layer's tables from the run's rows (``frames``: :data:`COLUMNS`, e.g. a rank at a time) and the
    summary's step cycles (:func:`~trace_merge.attribution.step_series_df`); None when the run has no cpu rows."""
    cpu_parts, evidence_parts, phase_parts, producer_parts = [], [], [], []
    for f in frames:
        layer = f["layer"].astype(object).to_numpy()
        cpu_parts.append(f[layer == LAYER])
        lower = (layer == "framework") | (layer == "app")
        ev = f[lower]
        evidence_parts.append(pd.DataFrame({"rank": ev["rank"].to_numpy(), "tid": ev["tid"].to_numpy(),
                                            "cat": ev["cat"].astype(object).to_numpy(),
                                            "dur_ns": (ev["end_ns"] - ev["start_ns"]).to_numpy()}))
        producers = ev[(ev["layer"].astype(object).to_numpy() == "framework")
                       & ev["cat"].astype(object).isin(_INPUT_CATS).to_numpy()]
        producer_parts.append(producers[["rank", "tid", "start_ns", "end_ns"]])
        app = f[layer == "app"]
        phase_parts.append(pd.DataFrame({"rank": app["rank"].to_numpy(), "phase": app["name"].astype(object).to_numpy(),
                                         "start_ns": app["start_ns"].to_numpy(), "end_ns": app["end_ns"].to_numpy()}))
    rows = pd.concat(cpu_parts, ignore_index=True) if cpu_parts else pd.DataFrame()
    if not len(rows):
        return None
    records = sampler_records(run_dir)
    hosts = {r: d.get("host") for r, d in records.items()}
    rows = rows.assign(name=rows["name"].astype(object),
                       host=[hosts.get(int(r)) or "?" for r in rows["rank"].to_numpy()])
    evidence = pd.concat(evidence_parts, ignore_index=True)
    producers = pd.concat(producer_parts, ignore_index=True)
    phases = pd.concat(phase_parts, ignore_index=True)
    programs = {r: int(d["cpu"]["program_pid"]) for r, d in records.items()
                if isinstance(d["cpu"].get("program_pid"), int)}
    core_rows = rows[rows["pid"] == 0]
    windows = core_windows(core_rows)
    thread_rows = rows[rows["pid"] != 0].copy()
    thread_rows["role"] = _roles(thread_rows, evidence, programs).to_numpy()
    available = _cores_available(records, core_rows)
    spans = _sampled_spans(rows, windows)

    threads = (thread_rows.assign(cpu_ns=thread_rows["end_ns"] - thread_rows["start_ns"])
               .groupby(["rank", "host", "pid", "tid", "name", "role"], dropna=False, sort=False)["cpu_ns"].sum()
               .reset_index())
    threads["cpu_s"] = threads.pop("cpu_ns") / 1e9
    threads = threads.sort_values(["rank", "cpu_s"], ascending=[True, False], kind="stable").reset_index(drop=True)

    periods = [d["cpu"].get("period_s") for d in records.values() if isinstance(d["cpu"].get("period_s"), (int, float))]
    shares = [d["close"].get("sampler_share_of_core") for d in records.values()
              if d.get("close") and isinstance(d["close"].get("sampler_share_of_core"), (int, float))]
    view = CpuView(
        period_s=max(periods) if periods else None, threads=threads,
        per_epoch=_per_epoch(thread_rows, steps, available, spans),
        during_compute=_during_compute(thread_rows, _busy_per_thread(producers), _one_rank_per_core(windows),
                                       steps, available),
        phases=_phases(thread_rows, phases),
        nodes=_nodes(thread_rows, windows, records, available, spans),
        sampler_share_of_core=max(shares) if shares else None)
    if (threads["role"] == "unattributed").any() and not (thread_rows["role"].isin(("input", "compute"))).any():
        view.notes.append("the program's threads other than its main thread are 'unattributed': no app interval or "
                          "profile names them (which layers name which threads: docs/cpu.md, Roles)")
    return view


def _cores_available(records: "dict[int, dict[str, Any]]", core_rows: pd.DataFrame) -> "dict[int, float]":
    """rank -> the cores its program may use: its affinity, less a cgroup quota (else the cores with rows)."""
    out: dict[int, float] = {}
    for rank, d in records.items():
        cores = d["cpu"].get("cores")
        n = float(len(cores)) if isinstance(cores, list) and cores else None
        quota = d["cpu"].get("quota_cores")
        if isinstance(quota, (int, float)) and quota > 0:
            n = min(n, float(quota)) if n is not None else float(quota)
        if n is not None:
            out[rank] = n
    for rank, g in core_rows.groupby("rank", sort=False):
        out.setdefault(int(rank), float(g["tid"].nunique()))
    return out


def _role_cores(rows: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, wall_s: float) -> dict:
    out = {"busy_cores": _overlap_s(rows, starts, ends) / wall_s if wall_s > 0 else None}
    for role in ROLES:
        sel = rows[rows["role"].to_numpy() == role]
        out[f"{role}_cores"] = _overlap_s(sel, starts, ends) / wall_s if wall_s > 0 and len(sel) else 0.0
    return out


def core_windows(core_rows: pd.DataFrame) -> pd.DataFrame:
    """The ``core <n>`` rows as windows: ``rank``, ``host``, ``core``, ``start_ns``, ``end_ns`` (a core's rows end at
    its windows' ends, end to end from an origin row) and ``busy_ns``, the core's busy time in the window."""
    if not len(core_rows):
        return pd.DataFrame(columns=["rank", "host", "core", "start_ns", "end_ns", "busy_ns"])
    c = core_rows.sort_values(["rank", "tid", "end_ns"], kind="stable")
    ends = c["end_ns"].to_numpy(np.int64)
    key = c["rank"].to_numpy(np.int64) * (1 << 20) + c["tid"].to_numpy(np.int64)
    first = np.concatenate([[True], key[1:] != key[:-1]])  # a core's origin: no window ends before it
    starts = np.concatenate([[0], ends[:-1]])
    keep = ~first
    return pd.DataFrame({"rank": c["rank"].to_numpy()[keep], "host": c["host"].to_numpy()[keep],
                         "core": c["tid"].to_numpy()[keep], "start_ns": starts[keep], "end_ns": ends[keep],
                         "busy_ns": (ends - c["start_ns"].to_numpy(np.int64))[keep]})


def _sampled_spans(rows: pd.DataFrame, windows: pd.DataFrame) -> "dict[int, tuple[int, int]]":
    """rank -> the time its sampler watched: its cores' windows (a thread's rows are only where it ran) and its
    rows (the first window starts at the launcher's reading, before the sampler's first core reading)."""
    out: dict[int, tuple[int, int]] = {}
    for rank, g in rows.groupby("rank", sort=False):
        lo, hi = int(g["start_ns"].min()), int(g["end_ns"].max())
        w = windows[(windows["rank"] == rank).to_numpy()]
        if len(w):
            lo, hi = min(lo, int(w["start_ns"].min())), max(hi, int(w["end_ns"].max()))
        out[int(rank)] = (lo, hi)
    return out


def _per_epoch(rows: pd.DataFrame, steps: pd.DataFrame, available: "dict[int, float]",
               spans: "dict[int, tuple[int, int]]") -> pd.DataFrame:
    """Cores busy of cores available per rank, over the whole run (epoch NA) and each epoch's step cycles."""
    out = []
    for rank, g in rows.groupby("rank", sort=True):
        lo, hi = spans[int(rank)]
        windows = [(pd.NA, np.array([lo]), np.array([hi]))]
        st = steps[steps["rank"] == rank] if len(steps) else steps
        if len(st) and st["epoch"].notna().any():
            for epoch, e in st.groupby("epoch", sort=True):
                windows.append((int(epoch), np.array([int(e["start_ns"].min())]), np.array([int(e["end_ns"].max())])))
        for epoch, s, e in windows:
            wall = float((e - s).sum()) / 1e9
            out.append({"rank": int(rank), "epoch": epoch, "wall_s": wall, "cores_available": available.get(int(rank)),
                        **_role_cores(g, s, e, wall)})
    df = pd.DataFrame(out)
    if len(df):
        df["epoch"] = pd.array(df["epoch"], dtype="Int64")
    return df


def _busy_per_thread(rows: pd.DataFrame) -> pd.DataFrame:
    """The union of each profiled thread's intervals (nested iterator events on one thread overlap): its busy time."""
    out = []
    for (rank, _), g in rows.groupby(["rank", "tid"], sort=False):
        s, e = merge_intervals(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
        out.append(pd.DataFrame({"rank": int(rank), "start_ns": s, "end_ns": e}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["rank", "start_ns", "end_ns"])


DURING_COMPUTE = ["rank", "compute_s", "busy_cores", "input_cores", "profiled_input_cores", "node_busy_cores",
                  "cores_available", "input_pct", "profiled_input_pct", "busy_pct"]


def _one_rank_per_core(windows: pd.DataFrame) -> pd.DataFrame:
    """The core windows of one rank per host and core (ranks of a node that share cores record them alike)."""
    if not len(windows):
        return windows
    first = windows.groupby(["host", "core"], sort=False, dropna=False)["rank"].transform("min")
    return windows[(windows["rank"] == first).to_numpy()]


def _during_compute(rows: pd.DataFrame, producers: pd.DataFrame, cores: pd.DataFrame, steps: pd.DataFrame,
                    available: "dict[int, float]") -> pd.DataFrame:
    """Per rank: the CPU its threads used while its steps computed: the CPU inside its step cycles weighted by each
    cycle's compute share (where inside a cycle the compute fell is finer than the sample period). The input side
    (``input_cores``): the threads whose role is :data:`INPUT_ROLES`; ``profiled_input_cores``: the busy time of the
    framework profile's input threads (``producers``: tf.data's; TensorFlow's thread ids are not the OS's, so its
    threads have no role in the cpu layer): cores' worth of threads that wanted a core, an upper bound of their CPU
    (it holds their waits for a core and their file reads). ``busy_pct`` is the busier of
    the rank's own threads and its node's cores (``cores``: every process, whose windows are ten periods)."""
    out = []
    if not len(steps):
        return pd.DataFrame(columns=DURING_COMPUTE)
    for rank, st in steps.groupby("rank", sort=True):
        st = st[~st["warmup"].astype(bool)] if "warmup" in st else st
        st = st[(st["end_ns"] > st["start_ns"]) & (st["step_s"] > 0)].sort_values("start_ns")
        g = rows[rows["rank"].to_numpy() == rank]
        if not len(st) or not len(g):
            continue
        s, e = st["start_ns"].to_numpy(np.int64), st["end_ns"].to_numpy(np.int64)
        keep = np.concatenate([[True], s[1:] >= np.maximum.accumulate(e)[:-1]])  # disjoint cycles only
        s, e = s[keep], e[keep]
        share = (st["compute_s"].to_numpy(float) / st["step_s"].to_numpy(float))[keep]
        cover = _weighted_cover(s, e, share)
        compute_s = float(st["compute_s"].to_numpy(float)[keep].sum())

        weighted = cover(g["end_ns"].to_numpy()) - cover(g["start_ns"].to_numpy())
        is_input = g["role"].isin(INPUT_ROLES).to_numpy()
        p = producers[producers["rank"].to_numpy() == rank]
        profiled = float((cover(p["end_ns"].to_numpy()) - cover(p["start_ns"].to_numpy())).sum()) / 1e9
        busy = float(weighted.sum()) / 1e9 / compute_s if compute_s > 0 else None
        host = g["host"].iloc[0]
        c = cores[(cores["host"] == host).to_numpy()] if len(cores) else cores
        # a window's busy time spread evenly over it (where inside the window the core was busy is not known)
        length = (c["end_ns"] - c["start_ns"]).to_numpy(float)
        inside = cover(c["end_ns"].to_numpy()) - cover(c["start_ns"].to_numpy())
        node = (float((c["busy_ns"].to_numpy(float) * inside / np.maximum(length, 1.0)).sum()) / 1e9 / compute_s
                if len(c) and compute_s > 0 else None)
        inputs = float(weighted[is_input].sum()) / 1e9 / compute_s if compute_s > 0 else None
        n = available.get(int(rank))
        out.append({"rank": int(rank), "compute_s": compute_s, "busy_cores": busy, "input_cores": inputs,
                    "profiled_input_cores": profiled / compute_s if compute_s > 0 else None,
                    "node_busy_cores": node, "cores_available": n,
                    "input_pct": 100 * inputs / n if n and inputs is not None else None,
                    "profiled_input_pct": 100 * profiled / compute_s / n if n and compute_s > 0 else None,
                    "busy_pct": 100 * max(busy or 0.0, node or 0.0) / n if n and busy is not None else None})
    return pd.DataFrame(out, columns=DURING_COMPUTE)


def _phases(rows: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """Per rank, its longest app phases (:data:`TOP_PHASES`): their time (union) and the rank's CPU inside them."""
    out = []
    if not len(phases):
        return pd.DataFrame(columns=["rank", "phase", "wall_s", "cpu_s", "cores"])
    phases = phases.assign(dur_ns=phases["end_ns"] - phases["start_ns"])
    for rank, p in phases.groupby("rank", sort=True):
        g = rows[rows["rank"].to_numpy() == rank]
        top = p.groupby("phase", sort=False)["dur_ns"].sum().nlargest(TOP_PHASES).index
        for name in top:
            sel = p[p["phase"].to_numpy() == name]
            s, e = merge_intervals(sel["start_ns"].to_numpy(), sel["end_ns"].to_numpy())
            wall = float((e - s).sum()) / 1e9
            cpu = _overlap_s(g, s, e)
            out.append({"rank": int(rank), "phase": name, "wall_s": wall, "cpu_s": cpu,
                        "cores": cpu / wall if wall > 0 else None})
    return pd.DataFrame(out, columns=["rank", "phase", "wall_s", "cpu_s", "cores"])


def _nodes(rows: pd.DataFrame, windows: pd.DataFrame, records: "dict[int, dict[str, Any]]",
           available: "dict[int, float]", spans: "dict[int, tuple[int, int]]") -> pd.DataFrame:
    """Per host: the job's cores (the union of its ranks' affinities), how busy they were (every process of the
    node) and how much of that was the job's; idle = cores - busy."""
    out = []
    for host, g in rows.groupby("host", sort=True, dropna=False):
        ranks = sorted(int(r) for r in g["rank"].unique())
        lo, hi = min(spans[r][0] for r in ranks), max(spans[r][1] for r in ranks)
        wall = (hi - lo) / 1e9
        cores: set = set()
        for r in ranks:
            c = records.get(r, {}).get("cpu", {}).get("cores")
            cores |= set(c) if isinstance(c, list) else set()
        n = float(len(cores)) if cores else max((available.get(r) or 0.0) for r in ranks)
        c = _one_rank_per_core(windows[(windows["rank"].isin(ranks)).to_numpy()])
        per_core = c.assign(window_ns=c["end_ns"] - c["start_ns"]).groupby("core")[["busy_ns", "window_ns"]].sum()
        per_core = per_core[per_core["window_ns"] > 0]
        node_busy = float((per_core["busy_ns"] / per_core["window_ns"]).sum()) if len(per_core) else None
        job = float((g["end_ns"] - g["start_ns"]).sum()) / 1e9 / wall if wall > 0 else None
        out.append({"host": host, "ranks": len(ranks), "cores": n, "wall_s": wall, "node_busy_cores": node_busy,
                    "job_busy_cores": job,
                    "idle_cores": None if node_busy is None else max(0.0, n - node_busy)})
    return pd.DataFrame(out, columns=["host", "ranks", "cores", "wall_s", "node_busy_cores", "job_busy_cores",
                                      "idle_cores"])
