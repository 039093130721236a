"""Reading and editing the trace files of a run: TimeLogger ``.pfw`` (the app layer), DFTracer ``.pfw.gz``."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Optional


def read_pfw(path: Path, allow_partial_last: bool = False) -> list[dict]:
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
        except json.JSONDecodeError as err:
            if allow_partial_last and i == len(body) - 1:
                break
            raise AssertionError(f"{path}: line {i + 2} is not JSON: {line[:200]!r}") from err
    return events


def app_files(run_dir: Path) -> list[Path]:
    return sorted((Path(run_dir) / "app").glob("*.pfw"))


def app_file(run: Path) -> Path:
    """The one app file of a one-rank run."""
    (p,) = (run / "app").glob("*.pfw")
    return p


def intervals(events: list[dict], name: Optional[str] = None) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and (name is None or e["name"] == name)]


def meta(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("ph") == "M" and e["name"] == name]


def shift_file(path: Path, us: int) -> None:
    """Add ``us`` µs to every ``ts`` of a TimeLogger file (what a wrong clock or an edit does)."""
    def move(m: re.Match) -> str:
        return f'"ts":{int(m.group(1)) + us}.'
    path.write_text(re.sub(r'"ts":(\d+)\.', move, path.read_text()))


def shift_dftracer_trace(src: Path, dest: Path, hours: int) -> Path:
    """Copy a real DFTracer trace with every ``ts`` moved by ``hours`` (a node with a wrong clock)."""
    with gzip.open(src, "rt") as fin, gzip.open(dest, "wt") as fout:
        for line in fin:
            text = line.strip().rstrip(",")
            if text.startswith("{"):
                ev = json.loads(text)
                if "ts" in ev:
                    ev["ts"] = int(ev["ts"]) + hours * 3600 * 10**6
                line = json.dumps(ev) + "\n"
            fout.write(line)
    return dest
