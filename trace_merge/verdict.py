"""The input-bound verdict and the accelerator utilisation (AU): TF profiler's thresholds on the share of step-cycle
time waiting for input, DLIO's AU, judged per rank (:func:`judge`) and for the job (:func:`verdict_numbers`) from
the per-rank table of :func:`trace_merge.attribution.input_bound_df`. The verdict's sentences are
:mod:`trace_merge.explain`'s. Definitions for users: ``docs/metrics.md``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

#: Input-bound thresholds (TF profiler): share of step time waiting for input, percent.
INPUT_BOUND_MODERATE_PCT = 5.0
INPUT_BOUND_HIGH_PCT = 20.0
#: Below this share of cycle time explained by wait or compute evidence a verdict would be a guess: "unknown".
MIN_EXPLAINED_PCT = 50.0
#: the verdict of cycles whose compute is a small share and whose input wait does not explain the rest
IDLE_LABEL = "accelerator idle"


def verdict_label(input_pct: float) -> str:
    """TF profiler's rule on the share of step time waiting for input (percent)."""
    if not np.isfinite(input_pct):
        return "unknown"
    if input_pct >= INPUT_BOUND_HIGH_PCT:
        return "highly input-bound"
    if input_pct >= INPUT_BOUND_MODERATE_PCT:
        return "moderately input-bound"
    return "not input-bound"


def explained_label(input_pct: float, au_pct: float) -> str:
    """:func:`verdict_label`; where wait and compute together explain under :data:`MIN_EXPLAINED_PCT` of the cycles
    the accelerator idles most of the time, which is the answer: 'highly input-bound' when the input wait alone is
    that high, else :data:`IDLE_LABEL` (the rest is split into known and unexplained time by the verdict)."""
    if input_pct + au_pct >= MIN_EXPLAINED_PCT or input_pct >= INPUT_BOUND_HIGH_PCT:
        return verdict_label(input_pct)
    return IDLE_LABEL


def judge(input_pct: float, au_pct: float, basis: str, visible: bool) -> str:
    """A rank's verdict: 'unknown' where there is no step time to be input-bound in (``run``) or no wait could be
    seen, else :func:`explained_label`."""
    return "unknown" if basis == "run" or not visible else explained_label(input_pct, au_pct)


@dataclass
class Verdict:
    """Job-level input-bound verdict (:func:`trace_merge.attribution.verdict`); ``as_dict`` is its JSON form
    (``label`` as ``verdict``)."""

    label: str = "unknown"  # not / moderately / highly input-bound, or unknown
    input_pct: Optional[float] = None  # Σ input wait ÷ Σ cycle time over the counted step cycles
    au_pct: Optional[float] = None  # DLIO's AU: Σ compute ÷ Σ cycle time (Σ kernel busy time on ranks with kernels)
    #: what the AU was measured from: "compute" (the host's compute evidence), "kernels" (the accelerator's own
    #: timeline on every rank) or "kernels,compute" (some ranks each)
    au_basis: Optional[str] = None
    other_pct: Optional[float] = None  # none of them: 100 - input - AU - sync wait
    sync_wait_pct: Optional[float] = None  # Σ waiting for other ranks (Horovod negotiations) ÷ Σ cycle time
    basis: Optional[str] = None  # the ranks' bases joined
    cycles: int = 0  # step cycles counted
    cycles_total: int = 0  # step cycles seen
    worst_rank: Optional[int] = None
    worst_rank_input_pct: Optional[float] = None
    unexplained_phase: Optional[str] = None  # the app phase holding most of the cycles' unexplained time
    unexplained_phase_pct: Optional[float] = None  # its share of cycle time
    unexplained_gap_pct: Optional[float] = None  # unexplained time outside every app phase, share of cycle time
    between_epochs_s: Optional[float] = None  # time between epochs' iterations, in no cycle (its own term)
    notes: list[str] = field(default_factory=list)  # the evidence used and its coverage, exclusions, blind spots

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        return {"input_pct": self.input_pct, "verdict": out.pop("label"), **out}


def verdict_numbers(per: pd.DataFrame) -> Verdict:
    """The job's verdict from its per-rank table (:func:`trace_merge.attribution.input_bound_df`): Σ input wait ÷
    Σ cycle time over the counted cycles of the ranks where input wait could be seen; without its notes
    (:func:`trace_merge.explain.verdict_notes`)."""
    per = per[per["basis"] != "run"] if len(per) else per
    seen = per[per["input_visible"].astype(bool)] if len(per) else per
    step = float(seen["step_s"].sum()) if len(seen) else 0.0
    out = Verdict(cycles=int(per["steps"].sum()) if len(per) else 0,
                  cycles_total=int(per["steps_total"].sum()) if len(per) else 0)
    if not len(seen) or step <= 0:
        return out
    pct = 100.0 * float(seen["input_wait_s"].sum()) / step
    kernels = (seen["au_basis"] == "kernels").to_numpy(dtype=bool) if "au_basis" in seen else \
        np.zeros(len(seen), dtype=bool)
    busy = np.where(kernels, seen["device_busy_s"].to_numpy(dtype=float) if kernels.any() else 0.0,
                    seen["compute_s"].to_numpy(dtype=float))
    au = 100.0 * float(busy.sum()) / step
    au_basis = ",".join(b for b, has in (("kernels", kernels.any()), ("compute", (~kernels).any())) if has)
    sync = 100.0 * float(seen["sync_wait_s"].sum()) / step
    worst = seen.loc[seen["input_pct"].idxmax()]
    by_phase = seen.groupby(seen["unexplained_phase"].astype(object).fillna(""))["unexplained_phase_s"].sum()
    by_phase = by_phase[by_phase.index != ""]
    top = str(by_phase.idxmax()) if len(by_phase) and by_phase.max() > 0 else None
    # waiting for the other ranks is explained time: the accelerator idles for a known reason (a straggler)
    return dataclasses.replace(out, input_pct=pct, label=explained_label(pct, au + sync), au_pct=au, au_basis=au_basis,
                               other_pct=max(0.0, 100.0 - pct - au - sync), sync_wait_pct=sync,
                               basis=",".join(sorted(set(seen["basis"]))),
                               worst_rank=int(worst["rank"]), worst_rank_input_pct=float(worst["input_pct"]),
                               unexplained_phase=top,
                               unexplained_phase_pct=100.0 * float(by_phase.max()) / step if top else None,
                               unexplained_gap_pct=100.0 * float(seen["unexplained_gap_s"].sum()) / step,
                               between_epochs_s=float(seen["between_epochs_s"].sum()))


def idles(v: Verdict) -> bool:
    """Whether wait and compute (and waiting for other ranks) explain under :data:`MIN_EXPLAINED_PCT` of the cycles:
    the accelerator idles and what it waits for is partly unknown."""
    return v.input_pct is not None and v.input_pct + (v.au_pct or 0.0) + (v.sync_wait_pct or 0.0) < MIN_EXPLAINED_PCT
