"""The batch job a run came from, as one line for the first lines of ``trace-merge summary`` and the report."""
from __future__ import annotations

from typing import Mapping, Optional

from timelogger.records import Manifest


def slurm_line(manifest: Optional[Mapping[str, object]]) -> Optional[str]:
    """``"Slurm job 1234 (hepcnn-io), nodes nid[001-004] (4), 8 task(s), partition batch"``, from the job context
    ``timelogger run`` keeps in manifest.json (``slurm``; older manifests: ``env.SLURM_JOB_ID`` only); None outside
    Slurm or without a manifest. ``manifest``: the file's JSON object, read as a :class:`Manifest`."""
    m = Manifest.from_json(manifest)
    if m is None:
        return None
    slurm = m.slurm
    if slurm is None:
        job = m.env.get("SLURM_JOB_ID")
        return f"Slurm job {job}" if job else None
    if not slurm.get("job_id"):
        return None
    text = f"Slurm job {slurm['job_id']}"
    if slurm.get("array_task_id") and slurm.get("array_job_id"):
        text += f" (array {slurm['array_job_id']}_{slurm['array_task_id']})"
    if slurm.get("job_name"):
        text += f" ({slurm['job_name']})"
    if slurm.get("nodelist"):
        text += f", nodes {slurm['nodelist']}" + (f" ({slurm['num_nodes']})" if slurm.get("num_nodes") else "")
    if slurm.get("ntasks"):
        text += f", {slurm['ntasks']} task(s)"
    if slurm.get("partition"):
        text += f", partition {slurm['partition']}"
    return text
