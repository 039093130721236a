"""The analysis's words: every sentence, note and label the CLI, the HTML report and the notebooks print about a
summary -- the verdict in one line and its notes, the explanations of numbers that seem to disagree, the names of
the layered breakdown's components and the headings of a component view. The numbers are computed elsewhere
(:mod:`trace_merge.attribution`, :mod:`trace_merge.verdict`, :mod:`trace_merge.kernels`); this module only words
them. Definitions for users: ``docs/metrics.md``.
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pandas as pd

from trace_merge.frameworks import PYTORCH, TF_WORDS, TORCH_WORDS, Words
from trace_merge.verdict import Verdict, idles, verdict_label

if TYPE_CHECKING:
    from trace_merge.component_view import ComponentView
    from trace_merge.cpu_use import CpuView
    from trace_merge.kernels import Metrics

#: the layered breakdown's components (:data:`trace_merge.attribution.COMPONENTS`) as the legends name them
COMPONENT_LABELS: dict[str, str] = {
    "fs": "file system", "comm": "communication", "input_wait": "input wait (tf.data)",
    "compute": "framework compute", "python": "Python / decode / IPC (inside profiled windows)",
    "not_observed": "not observed (no framework profile there)",
}

def component_labels(tfdata: bool, dataloader: bool = False) -> dict[str, str]:
    """:data:`COMPONENT_LABELS` as a run's legends name them: "input wait (tf.data)" only for a run with tf.data
    events (:func:`trace_merge.analysis.has_tfdata`), "input wait (DataLoader)" for one whose PyTorch profile saw
    its DataLoader wait (:func:`trace_merge.analysis.has_dataloader`); a loop without either waits for its own
    loader, so there it is "input wait"."""
    if tfdata:
        return COMPONENT_LABELS
    return {**COMPONENT_LABELS, "input_wait": TORCH_WORDS.input_wait if dataloader else "input wait"}


#: what each basis of the verdict measured, for the text outputs; the step bases' evidence is counted per run
#: (:func:`_evidence_text`), so no sentence names evidence the frame does not hold
BASIS_TEXT = {
    "framework": "step cycles (one step start to the next), most of them inside a TF profile window",
    "app": "step cycles (one step start to the next)",
    "epoch": "the app layer's exposed io/wait phases inside epochs (no step tags)",
}
#: the one command that makes input wait inside Keras batches visible
CAPTURE_HINT = "timelogger run -o RUN --tf-profile -- python train.py"


def unexplained_text(v: "Verdict") -> str:
    """Where the cycles' unexplained time is: the largest of its app phase and the gap outside every phase."""
    gap = v.unexplained_gap_pct or 0.0
    phase = v.unexplained_phase_pct or 0.0
    if v.unexplained_phase and phase >= gap:
        return f"largest in phase '{v.unexplained_phase}': {phase:.0f} % of cycle time"
    return f"largest outside every app phase: {gap:.0f} % of cycle time"


#: how the verdict line names the AU's basis where it is not the host's compute evidence alone
AU_BASIS_TEXT = {"kernels": "GPU kernel time", "kernels,compute": "GPU kernel time where traced"}


def verdict_text(v: Verdict) -> str:
    """The verdict in one line with its numbers and evidence, as the CLI and the report show it."""
    if v.input_pct is None:
        why = ("no wait evidence inside the step cycles: see the blind spot below" if v.cycles_total
               else "no training steps or epochs tagged in the trace")
        return f"unknown ({why})"
    sync = f"waiting for other ranks {v.sync_wait_pct:.1f} %, " if v.sync_wait_pct else ""
    au = f" ({AU_BASIS_TEXT[v.au_basis]})" if v.au_basis in AU_BASIS_TEXT else ""
    return (f"{v.label} ({v.input_pct:.1f} % of step-cycle time waiting for input, AU {v.au_pct:.1f} %{au}, "
            f"{sync}other {v.other_pct:.1f} %; {v.cycles} of {v.cycles_total} cycles; basis {v.basis})")


def profile_words(rows: pd.DataFrame, framework: Optional[str] = None) -> Words:
    """The words of the profiler whose windows ``rows`` (ranks of the verdict table) were profiled in: PyTorch's
    where every rank with a profile had a PyTorch one, or where none had one and the run's ``framework``
    (:func:`trace_merge.frameworks.framework_of`) is PyTorch; else TensorFlow's."""
    seen = {p for p in rows["profiler"].astype(object) if p} if "profiler" in rows else set()
    return TORCH_WORDS if seen == {PYTORCH} or (not seen and framework == PYTORCH) else TF_WORDS


def _ranks_text(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(int(r)) for r in ranks)


def _evidence_text(rows: pd.DataFrame, framework: Optional[str] = None) -> str:
    """What the step cycles of ``rows`` (ranks of one basis) counted and where their input wait came from, with
    the numbers: cycles counted (and how many lost their warm-up step), cycles a TF profile covered, and the
    input wait split into the profiler's input-pipeline wait and the app's own wait/io phases."""
    steps, total = int(rows["steps"].sum()), int(rows["steps_total"].sum())
    warm, profiled = int(rows["warmup_steps"].sum()), int(rows["profiled_steps"].sum())
    words = profile_words(rows, framework)
    step_s, wait_s = float(rows["step_s"].sum()), float(rows["input_wait_s"].sum())
    fw_s = min(float(rows["framework_wait_s"].sum()), wait_s)
    out = f"; {steps} of {total} cycles counted"
    if warm:
        out += f" ({warm} without {'its' if warm == 1 else 'their'} warm-up step)"
    out += (f", {profiled} of them inside a {words.profile} window" if profiled else
            f", none inside a {words.profile} window")

    def pct(x: float) -> str:
        return f"{100.0 * x / step_s:.1f} % of cycle time" if step_s > 0 else "none"

    sources = []
    if profiled:
        sources.append(f"the profiler's {words.profiler_wait} {pct(fw_s)}" if fw_s > 0 else
                       f"the profiler's {words.profiler_wait}: none in the profiled cycles")
    if wait_s - fw_s > 0:
        sources.append(f"the app's wait/io phases of the training loop {pct(wait_s - fw_s)}")
    elif not profiled or fw_s > 0:
        sources.append("the app's wait/io phases of the training loop: none")
    return out + "; input wait from " + ", ".join(sources)


def verdict_notes(per: pd.DataFrame, v: Verdict, framework: Optional[str] = None) -> list[str]:
    """The notes of the verdict ``v`` of the per-rank table ``per`` (:func:`trace_merge.attribution.input_bound_df`):
    the evidence of each basis, the warm-up steps left out, the ranks where no wait could be seen, the time between
    epochs, and where the accelerator idles for reasons partly unknown. ``framework``: the run's
    (:func:`trace_merge.frameworks.framework_of`), for the words of a run without a profile."""
    notes: list[str] = []
    if not len(per):
        return notes
    for basis, text in BASIS_TEXT.items():
        rows = per[per["basis"] == basis]
        if not len(rows):
            continue
        if basis == "framework":
            text = text.replace(TF_WORDS.profile, profile_words(rows, framework).profile)
        line = f"basis {basis} ({_ranks_text(rows['rank'])}): {text}"
        if basis in ("framework", "app"):
            line += _evidence_text(rows, framework)
        notes.append(line)
    if v.au_basis and "kernels" in v.au_basis and "au_basis" in per:
        gpu = per[per["au_basis"] == "kernels"]
        host = per[(per["au_basis"] != "kernels") & (per["basis"] != "run")]
        line = (f"AU from the accelerator's own timeline on {_ranks_text(gpu['rank'])}: GPU compute kernels busy "
                f"{float(gpu['device_busy_s'].sum()):.3g} s of {float(gpu['step_s'].sum()):.3g} s of counted step "
                "cycles (PyTorch profiler device events; collectives' kernels not counted)")
        if len(host):
            line += f"; from the host's compute evidence on {_ranks_text(host['rank'])} (no device timeline)"
        notes.append(line)
    warm = per[per["excluded_s"] > 0]
    if len(warm):
        over = " (summed over ranks)" if len(warm) > 1 else ""
        notes.append(f"excluded: the first step of each epoch and rank (pipeline warm-up, e.g. shuffle-buffer fill, "
                     f"graph tracing, first file opens; DLIO's rule), {float(warm['excluded_s'].sum()):.3g} s in "
                     f"all{over}")
    blind = per[~per["input_visible"].astype(bool)]
    if len(blind):
        notes.append(f"blind spot on {_ranks_text(blind['rank'])}: no wait evidence inside the step cycles (the "
                     "app layer times whole steps, as a Keras TimeLoggerCallback batch that includes the fetch of "
                     "its batch, and no TF profile covers them), so input wait cannot be seen and the verdict is "
                     f"'unknown'. Capture it: {CAPTURE_HINT}, or time the fetch with tl.iterate(..., cat='wait')")
    if v.between_epochs_s:
        notes.append(f"between epochs: {v.between_epochs_s:.3g} s outside every epoch's iteration, in no step "
                     "cycle and not input wait (what a job does there: e.g. validation, checkpoints, callbacks, a "
                     "profiler starting)")
    if idles(v):
        notes.append(f"the accelerator idles {100 - (v.au_pct or 0.0):.0f} % of the step cycles: input wait "
                     f"{v.input_pct:.0f} %, unexplained {v.other_pct:.0f} % ({unexplained_text(v)}); time what the "
                     f"loop does there with timelogger.phase(...), or profile it: {CAPTURE_HINT}")
    return notes


def coverage_notes(layered: pd.DataFrame) -> list[str]:
    """Where the framework layer sampled only part of a phase's calls: the sample behind its python/compute
    split, e.g. "framework profile: 8 of 192 calls of 'step' (all ranks)" -- one sentence per phase."""
    if not len(layered) or not (layered["not_observed_s"] > 0).any():
        return []
    g = layered.groupby("phase", sort=False)[["calls", "observed_calls", "time_s", "not_observed_s"]].sum()
    # a sample: some calls inside a window, some not (a container such as the loop's phase samples nothing)
    g = g[(g["not_observed_s"] > 0) & (g["observed_calls"] > 0) & (g["observed_calls"] < g["calls"])]
    g = g.sort_values("time_s", ascending=False)
    return [f"framework profile: {int(row['observed_calls'])} of {int(row['calls'])} calls of '{phase}' "
            f"(all ranks); its python/compute split is from those, {100 * row['not_observed_s'] / row['time_s']:.0f}"
            f" % of its time was not observed" for phase, row in g.head(2).iterrows()]


def explain(metrics: "Metrics", verdict: Verdict, layered: pd.DataFrame, words: Words = TF_WORDS) -> list[str]:
    """Sentences for where io %, exposed %, the layered split and the verdict seem to disagree."""
    out: list[str] = []
    io, exposed, wait = metrics.component_pct.get("io"), metrics.exposed_io_pct, verdict.input_pct
    if verdict.basis == "framework" and wait is not None and exposed is not None \
            and verdict_label(wait) != verdict_label(exposed):
        out.append(f"the verdict uses the input wait inside the step cycles, most of them profiled ({wait:.1f} % "
                   f"of step time; its sources are in the basis note), not the app layer's exposed I/O "
                   f"({exposed:.1f} % of all wall time, start-up included), "
                   "which also cannot see a wait inside a step phase that contains it (a Keras batch)")
    if io is not None and exposed is not None and io >= 1.0 and io >= 2 * exposed:
        out.append(f"io phases take {io:.1f} % of wall time but only {exposed:.1f} % is exposed: the rest ran "
                   "while another thread computed (prefetching hid it)")
    if exposed is not None and wait is not None and verdict.basis == "app" and abs(exposed - wait) >= 5:
        out.append(f"exposed I/O ({exposed:.1f} %) is a share of all wall time, start-up and epochs' edges "
                   f"included; the input wait of the verdict ({wait:.1f} %) is a share of step time only")
    if len(layered):
        io_phases = layered[layered["cat"] == "io"].groupby("phase")[["time_s", "fs_s", "python_s",
                                                                       "not_observed_s"]].sum()
        # the io phases that matter (>= 1 % of the ranks' wall time), largest first: a 6 us phase explains nothing
        floor = 0.01 * (metrics.job_wall_s or 0.0) * max(metrics.ranks, 1)
        io_phases = io_phases[io_phases["time_s"] >= max(floor, 1e-9)].sort_values("time_s", ascending=False)
        # which of them the POSIX layer saw in some row: their rows taken in one pass, not a selection per phase
        rows = layered[layered["phase"].isin(io_phases.index).to_numpy(dtype=bool)]
        posix = set(rows.loc[np.array(["posix" in s for s in rows["layers"]], dtype=bool), "phase"])
        shown = 0
        for phase, row in io_phases.iterrows():
            rest = row["python_s"] + row["not_observed_s"]
            if shown < 3 and rest >= 0.5 * row["time_s"] and phase in posix:
                shown += 1
                pct = {k: 100 * row[k] / row["time_s"] for k in ("fs_s", "python_s", "not_observed_s")}
                rest_text = (f"Python / decode / IPC seen inside a {words.profile} ({pct['python_s']:.0f} %) or not "
                             f"observed ({pct['not_observed_s']:.0f} %)" if row["python_s"] > 0 else
                             "time no lower layer saw (Python, decoding, IPC or waiting: no "
                             f"{words.profile} covered it)")
                out.append(f"'{phase}' is an io phase, but only {pct['fs_s']:.0f} % of its {row['time_s']:.3g} s is "
                           f"file-system time; the rest is {rest_text}")
        out.extend(coverage_notes(layered))
    return out


def view_heading(view: "ComponentView") -> str:
    """A component view's table heading in the text outputs: its title, what its components are, of which phase."""
    return f"{view.title} ({view.legend}; % of {view.total}):"


def view_heading_html(view: "ComponentView") -> str:
    """A component view's section heading in the HTML report (its text, HTML-escaped)."""
    return html.escape(f"{view.title[:1].upper()}{view.title[1:]}: {view.labels} (% of {view.total})", quote=False)


def cpu_text(view: "CpuView", width: int) -> list[str]:
    """The summary's CPU section: cores busy of cores available per rank (by role), while the steps computed,
    inside the app phases, per node, and the busiest threads (:mod:`trace_merge.cpu_use`)."""
    from trace_merge.formatting import frame_text

    period = f"sampled every {view.period_s:g} s" if view.period_s else "sampled"
    own = (f"; the sampler used {100 * view.sampler_share_of_core:.2f} % of a core"
           if view.sampler_share_of_core is not None else "")
    lines = [f"CPU (cpu layer, {period}{own}; roles: docs/cpu.md): cores busy of cores available per rank, by the "
             "threads' role; epoch 'all' = whole run:"]
    per = view.per_epoch.copy()
    if len(per):
        per["epoch"] = per["epoch"].astype(object).where(per["epoch"].notna(), "all")
        per = per[[c for c in per.columns if not (c.endswith("_cores") and c != "busy_cores" and not per[c].any())]]
    lines.append(frame_text(per, width))
    dc = view.during_compute
    for r in dc.itertuples():
        if r.busy_cores is None or r.input_cores is None:
            continue
        of = f" of {r.cores_available:g} cores ({r.input_pct:.0f} %)" if r.cores_available else ""
        node = f", the node's processes {r.node_busy_cores:.2f}" if pd.notna(r.node_busy_cores) else ""
        profiled = (f"; tf.data's threads were busy {r.profiled_input_cores:.2f} cores' worth in the TF profile "
                    "(running or waiting for a core)" if r.profiled_input_cores else "")
        lines.append(f"rank {r.rank}: while its steps computed ({r.compute_s:.3g} s), its input threads and workers "
                     f"used {r.input_cores:.2f}{of}, all its threads {r.busy_cores:.2f}{node}{profiled}")
    if len(view.phases):
        lines += ["CPU inside app phases (the rank's threads, cores = CPU s ÷ the phase's time):",
                  frame_text(view.phases, width)]
    if len(view.nodes):
        lines += ["nodes (the job's cores; node busy: every process of the node; idle = cores - node busy):",
                  frame_text(view.nodes, width)]
    top = view.threads.groupby("rank", sort=True).head(8)
    lines += ["busiest threads per rank (CPU s):", frame_text(top, width)]
    lines += [f"note: {n}" for n in view.notes]
    return lines
