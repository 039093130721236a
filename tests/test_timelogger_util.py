"""Helpers shared by the timelogger tests (no tests here)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]


def read_pfw(path: Path, allow_partial_last: bool = False) -> List[dict]:
    """Events of one ``.pfw`` file, checking the line layout of docs/wire-format.md.

    Every line after ``[`` must be one JSON object; only the last may be cut (after a crash) when
    ``allow_partial_last``.
    """
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    assert lines[0] == "[", f"{path}: first line {lines[0]!r}"
    body = [line for line in lines[1:]]
    if body and body[-1] == "":
        body.pop()
    events = []
    for i, line in enumerate(body):
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            if allow_partial_last and i == len(body) - 1:
                break
            raise AssertionError(f"{path}: line {i + 2} is not JSON: {line[:200]!r}")
    return events


def app_files(run_dir: Path) -> List[Path]:
    return sorted((Path(run_dir) / "app").glob("*.pfw"))


def intervals(events: List[dict], name: Optional[str] = None) -> List[dict]:
    return [e for e in events if e.get("ph") == "X" and (name is None or e["name"] == name)]


def meta(events: List[dict], name: str) -> List[dict]:
    return [e for e in events if e.get("ph") == "M" and e["name"] == name]


def clean_env(**extra: str) -> Dict[str, str]:
    """The test environment without launcher/timelogger variables, plus ``extra``; venv bin first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TIMELOGGER_", "PMI_", "PMIX_", "OMPI_", "SLURM_", "HOROVOD_", "DFTRACER_"))
           and k != "LD_PRELOAD"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(extra)
    return env


def run_py(script: str, cwd: Path, timeout: float = 60, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """Run ``script`` with this interpreter in a clean environment."""
    p = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=clean_env(**env), capture_output=True,
                       text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p
