"""Every notebook runs top to bottom on the public API against small real runs made in this test session, and
draws its figures and key tables (STYLE item 13)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("plotly")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))

#: per notebook: the column names its key tables must show
EXPECT = {
    # the test's HEP-CNN runs (smoke preset) have no TF profile, so no tf.data events: "input wait", not "(tf.data)"
    "breakdown.ipynb": ["file system (s)", "Python / decode / IPC", "input wait (s)",
                        "slowest / fastest rank (×)", "exposed input (s)", "verdict:"],
    "shuffle_and_scaling.ipynb": ["read (%)", "load − read (%)", "aggregate read bandwidth (MB/s)", "files (count)",
                                  "local shuffle read share (%)", "global shuffle bandwidth (GB/s)",
                                  "epoch 0 read bandwidth (MB/s)", "shuffle is higher"],
    "climate_ablation.ipynb": ["Parallel Read Images: file system", "outside the file system",
                               "ours: Parallel Read Images per rank (s)", "study: read timer (s)"],
    "darshan_logs.ipynb": ["read (MB)", "read time (s)", "written (MB)", "POSIX_OPENS"],
}
#: (notebook, layout) -> (matplotlib figures shown, plotly figures shown, extra strings its outputs must show);
#: "demo": make demo's runs/demo/latest and runs/demo-climate/latest with the notebook's defaults
CASES = {
    ("breakdown.ipynb", "demo"): (3, 1, []),
    ("shuffle_and_scaling.ipynb", "demo"): (2, 0, ["one rank count (2)"]),
    ("shuffle_and_scaling.ipynb", "sweep"): (3, 0, []),
    ("climate_ablation.ipynb", "demo"): (2, 0, []),
    ("darshan_logs.ipynb", "dxt"): (3, 0, ["LUSTRE_COMP_STRIPE_SIZE", "offset found (ms)"]),
    ("darshan_logs.ipynb", "plain"): (1, 0, ["has no DXT segments", "has no POSIX DXT segments"]),
}

#: injected after the parameters cell (after `%matplotlib inline` has set the PNG formatter): records every figure
#: that reaches the PNG formatter, however it got displayed (returned, display(), pyplot's end-of-cell flush)
RECORD = """import matplotlib.figure as _mf
_shown_figures = []
_png = get_ipython().display_formatter.formatters["image/png"]
_draw = _png.lookup_by_type(_mf.Figure)


def _record(fig, *args, **kwargs):
    _shown_figures.append(fig)
    return _draw(fig, *args, **kwargs)


_png.for_type(_mf.Figure, _record)"""

#: appended: what each shown figure's axes carry, as one JSON line
REPORT = """import json as _json
from matplotlib.colors import to_hex as _hex


def _colours(ax):
    found = [p.get_facecolor() for p in ax.patches] + [c for coll in ax.collections for c in coll.get_facecolor()]
    return sorted({_hex(c, keep_alpha=False) for c in found} | {_hex(l.get_color()) for l in ax.lines})


def _legend(ax):
    leg = ax.get_legend()
    if leg is None:
        return []
    return [[t.get_text(), _hex(h.get_facecolor() if hasattr(h, "get_facecolor") else h.get_color(), keep_alpha=False)]
            for t, h in zip(leg.get_texts(), leg.legend_handles)]


print("FIGURES" + _json.dumps([{"id": id(f), "axes": [
    {"x": a.get_xlabel(), "y": a.get_ylabel(), "colours": _colours(a), "legend": _legend(a)}
    for a in f.axes if a.axison]} for f in _shown_figures]))"""


def _palette() -> tuple[set[str], dict[str, str]]:
    """Every colour of the project's palette, and the colour each cat or component label must have."""
    from trace_merge import plots
    from trace_merge.analysis import COMPONENT_LABELS

    palettes = [plots.CAT_COLOURS, plots.COMPONENT_COLOURS, plots.IO_COLOURS, plots.STUDY_COLOURS,
                plots.SHUFFLE_COLOURS]
    named = {**plots.CAT_COLOURS, **{COMPONENT_LABELS[c]: plots.COMPONENT_COLOURS[c] for c in COMPONENT_LABELS}}
    return {c.lower() for p in palettes for c in p.values()}, {k: v.lower() for k, v in named.items()}


def test_every_notebook_is_tested_and_committed_without_outputs() -> None:
    assert {p.name for p in NOTEBOOKS} == set(EXPECT)
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{path.name} has outputs"
        assert "os.environ.get(" in nb.cells[1].source, f"{path.name}: the first code cell sets the parameters"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real HEP-CNN sweep: 1 and 2 ranks x local and global shuffle, node-cache emulation, POSIX layer."""
    pytest.importorskip("horovod.tensorflow")
    from benchmarks.hepcnn.__main__ import main

    out = tmp_path_factory.mktemp("nbsweep")
    from benchmarks.hepcnn.config import SMOKE_DATA
    from benchmarks.hepcnn.data import generate

    data = generate(out / "data", SMOKE_DATA, show_progress=False)
    assert main(["sweep", "--data", str(data), "--ranks", "1,2", "--shuffle", "local,global", "--out",
                 str(out / "sweep"), "--smoke", "--epochs", "2", "--node-cache", "emulate"]) == 0
    return out / "sweep"


@pytest.fixture(scope="module")
def ablation_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real climate ablation (full and no-io on 2 ranks) as `ablate` writes it."""
    pytest.importorskip("horovod.tensorflow")
    from benchmarks.climate.__main__ import main
    from benchmarks.climate.data import SMOKE_DATA, generate

    out = tmp_path_factory.mktemp("nbablate")
    data = generate(out / "data", SMOKE_DATA, show_progress=False)
    assert main(["ablate", "--data", str(data), "--out", str(out / "ablate"), "--modes", "full,no-io",
                 "--smoke"]) == 0
    return out / "ablate"


def _demo_layout(root: Path, sweep: Path, ablation: Path) -> None:
    """`make demo`'s layout under root/runs, from the fixtures' real runs: demo/<stamp>/{local,global} with the
    2-rank points' comparison.json, demo-climate/<stamp>/{full,no-io}, and each `latest` link."""
    stamp = root / "runs" / "demo" / "20260101-000000"
    stamp.mkdir(parents=True)
    rows = [r for r in json.loads((sweep / "comparison.json").read_text()) if r["ranks"] == 2]
    (stamp / "comparison.json").write_text(json.dumps(rows))
    for r in rows:
        (stamp / r["shuffle"]).symlink_to(sweep / r["point"], target_is_directory=True)
    climate = root / "runs" / "demo-climate" / "20260101-000000"
    climate.mkdir(parents=True)
    from benchmarks.common.ablate import find_modes

    # `ablate` names the run directories by point (n2-local-no-io), the demo by mode
    for mode, run_dir in find_modes(ablation).items():
        (climate / mode).symlink_to(run_dir, target_is_directory=True)
    for out in (stamp, climate):
        (out.parent / "latest").symlink_to(out.name)


def _run_notebook(path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]):
    """The notebook executed in cwd with only ``env`` as parameters, the figure recorder and report injected."""
    for key in ("NOTEBOOK_RUN", "NOTEBOOK_SWEEP", "NOTEBOOK_ABLATION", "NOTEBOOK_DARSHAN_LOG", "NOTEBOOK_LUSTRE_LOG",
                "NOTEBOOK_MAKE_RUNS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NOTEBOOK_SCRATCH", str(cwd / "scratch"))
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(2, nbformat.v4.new_code_cell(RECORD))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}}, allow_errors=True)
    client.execute()
    return nb


def _outputs(nb) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


_REAL_RUNS = (pytest.mark.horovod, pytest.mark.mpi, pytest.mark.slow)


@pytest.mark.parametrize("name,layout", [pytest.param(*case, marks=() if case[0] == "darshan_logs.ipynb"
                                                       else _REAL_RUNS) for case in CASES])
def test_notebook_runs_top_to_bottom(name: str, layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     request: pytest.FixtureRequest) -> None:
    env = {}
    if layout == "demo":
        _demo_layout(tmp_path, request.getfixturevalue("sweep_dir"), request.getfixturevalue("ablation_dir"))
    elif layout == "sweep":
        env = {"NOTEBOOK_SWEEP": str(request.getfixturevalue("sweep_dir"))}
    elif layout == "plain":
        import darshan

        env = {"NOTEBOOK_DARSHAN_LOG": str(Path(darshan.__file__).parent / "examples" / "example_logs" /
                                           "example.darshan")}
    nb = _run_notebook(Path(__file__).resolve().parent.parent / "notebooks" / name, tmp_path, monkeypatch, env)
    outputs = _outputs(nb)
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, "\n".join("\n".join(e.get("traceback", [])) for e in errors)[-3000:]
    n_png, n_plotly, extra = CASES[(name, layout)]

    # each figure exactly once: no figure object shown twice, no identical image twice, as many as the notebook draws
    report = json.loads(next(o["text"] for o in outputs if o.get("text", "").startswith("FIGURES"))[7:])
    assert len({f["id"] for f in report}) == len(report) == n_png, [f["axes"] for f in report]
    pngs = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == len(set(pngs)) == n_png
    plotly = [o["data"] for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plotly) == n_plotly
    if plotly:  # an HTML export draws it offline: the figure's HTML and plotly.js itself are in the outputs
        from plotly.offline import get_plotlyjs

        assert all("Plotly.newPlot" in d.get("text/html", "") for d in plotly)
        assert any(get_plotlyjs()[:2000] in o.get("data", {}).get("text/html", "") for o in outputs)

    # every axes labelled; colours from the one palette; a legend label means the same colour everywhere
    colours, named = _palette()
    seen: dict[str, str] = {}
    for fig in report:
        for ax in fig["axes"]:
            assert ax["x"] and ax["y"], f"{name}: an axes lacks a label: {ax}"
            assert set(ax["colours"]) <= colours | {"#ffffff"}, f"{name}: colours outside the palette: {ax}"
            for label, colour in ax["legend"]:
                assert named.get(label, colour) == colour, f"{name}: {label!r} drawn in {colour}"
                assert seen.setdefault(label, colour) == colour, f"{name}: {label!r} changes colour"

    text = " ".join(str(o.get("data", {}).get("text/html", "")) + str(o.get("data", {}).get("text/plain", ""))
                    + str(o.get("data", {}).get("text/markdown", "")) + str(o.get("text", "")) for o in outputs)
    missing = [c for c in EXPECT[name] + extra if c not in text]
    assert not missing, f"{name}: outputs lack {missing}"
    assert not (tmp_path / "scratch" / "sweep").exists() and not (tmp_path / "scratch" / "breakdown").exists(), \
        "the notebook made its own runs although it was given some"


def test_a_notebook_without_runs_says_what_to_run_and_trains_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No runs where the defaults look and no NOTEBOOK_MAKE_RUNS: the notebook stops with what to run."""
    nb = _run_notebook(Path(__file__).resolve().parent.parent / "notebooks" / "shuffle_and_scaling.ipynb", tmp_path,
                       monkeypatch, {})
    errors = [o for o in _outputs(nb) if o.get("output_type") == "error"]
    assert errors and errors[0]["ename"] == "FileNotFoundError"
    assert "make demo" in errors[0]["evalue"] and "NOTEBOOK_MAKE_RUNS=1" in errors[0]["evalue"]
    assert not (tmp_path / "scratch").exists()
