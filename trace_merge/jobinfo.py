"""The batch job a run came from, as one line for the first lines of ``trace-merge summary`` and the report."""
from __future__ import annotations

from typing import Any, Mapping, Optional


def slurm_line(manifest: Optional[Mapping[str, Any]]) -> Optional[str]:
    """``"Slurm job 1234 (hepcnn-io), nodes nid[001-004] (4), 8 task(s), partition batch"``, from the job context
    ``timelogger run`` keeps in manifest.json (``slurm``; older manifests: ``env.SLURM_JOB_ID`` only); None outside
    Slurm or without a manifest."""
    if not isinstance(manifest, Mapping):
        return None
    slurm = manifest.get("slurm")
    if not isinstance(slurm, Mapping):
        env = manifest.get("env")
        job = env.get("SLURM_JOB_ID") if isinstance(env, Mapping) else None
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
