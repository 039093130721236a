"""Execute the analysis notebooks on given runs and write every figure they show to a directory, to look at.

``python tools/notebook_figures.py OUT [--run DIR] [--sweep DIR] [--ablation DIR] [--darshan-log FILE]
[--notebook NAME ...]``: each notebook runs top to bottom (nbclient, as Jupyter would) with its parameters taken
from the options (unset ones keep the notebook's defaults: ``make demo``'s runs); every PNG a cell shows is written
to ``OUT/<notebook>-<cell>-<n>.png``, every plotly figure to ``OUT/<notebook>-<cell>-<n>.html`` (self-contained:
plotly figures need a browser to render), and the executed notebook to ``OUT/<notebook>.ipynb`` (for ``jupyter
nbconvert --to html``).
"""
from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path
from typing import Sequence

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
#: option -> the environment variable the notebooks' first code cell reads
PARAMETERS = {"run": "NOTEBOOK_RUN", "sweep": "NOTEBOOK_SWEEP", "ablation": "NOTEBOOK_ABLATION",
              "darshan_log": "NOTEBOOK_DARSHAN_LOG"}


def execute(path: Path, env: dict[str, str], timeout: int = 600):
    """The notebook at ``path`` executed in a fresh kernel with ``env`` added to the environment."""
    import nbclient
    import nbformat

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nb = nbformat.read(path, as_version=4)
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def write_figures(nb, stem: str, out: Path) -> list[Path]:
    """Every PNG and plotly output of the executed ``nb`` as files in ``out``."""
    written = []
    for i, cell in enumerate(nb.cells):
        for n, output in enumerate(o for o in cell.get("outputs", []) if o.get("output_type") != "stream"):
            data = output.get("data", {})
            if "image/png" in data:
                written.append(out / f"{stem}-{i:02d}-{n}.png")
                written[-1].write_bytes(base64.b64decode(data["image/png"]))
            if "application/vnd.plotly.v1+json" in data:
                import plotly.io as pio

                written.append(out / f"{stem}-{i:02d}-{n}.html")
                fig = pio.from_json(__import__("json").dumps(data["application/vnd.plotly.v1+json"]))
                written[-1].write_text(pio.to_html(fig, include_plotlyjs=True, full_html=True))
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory for the figures")
    p.add_argument("--run", help="one run directory (breakdown)")
    p.add_argument("--sweep", help="a sweep directory or `make demo`'s runs/demo/latest (shuffle_and_scaling)")
    p.add_argument("--ablation", help="a climate ablation directory (climate_ablation)")
    p.add_argument("--darshan-log", help="a Darshan log (darshan_logs)")
    p.add_argument("--notebook", action="append", help="only this notebook (repeatable), e.g. breakdown")
    args = p.parse_args(argv)
    env = {var: str(Path(getattr(args, opt)).absolute()) for opt, var in PARAMETERS.items() if getattr(args, opt)}
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        if args.notebook and path.stem not in args.notebook and path.name not in args.notebook:
            continue
        import nbformat
        from nbclient.exceptions import CellExecutionError

        try:
            nb = execute(path, env)
        except CellExecutionError as err:
            print(f"{path.name}: failed\n{str(err)[-2000:]}", file=sys.stderr)
            failed += 1
            continue
        nbformat.write(nb, args.out / path.name)
        for f in write_figures(nb, path.stem, args.out):
            print(f"wrote {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
