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

#: per notebook: the environment it is given (filled by the fixtures), the figures it must draw (png and plotly
#: outputs) and the column names its key tables must show
EXPECT = {
    "breakdown.ipynb": (2, 1, ["fs_s", "python_s", "input_wait_s", "max / min", "exposed_s", "verdict"]),
    "shuffle_and_scaling.ipynb": (3, 0, ["read_pct", "load_pct", "aggregate_bw_MB_per_s", "files",
                                          "local_read_pct", "global_bw_GB_per_s", "epoch0_read_bw_MB_per_s"]),
    "climate_ablation.ipynb": (2, 0, ["Parallel Read Images: file system", "outside the file system",
                                       "our read phase, s per rank", "read_s"]),
    "darshan_logs.ipynb": (4, 0, ["POSIX_BYTES_READ", "POSIX_F_READ_TIME", "LUSTRE_COMP_STRIPE_SIZE", "offset_ns",
                                   "fs_s"]),
}


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
                 str(out / "sweep"), "--smoke", "--epochs", "3", "--node-cache", "emulate"]) == 0
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


def _run_notebook(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("NOTEBOOK_SCRATCH", str(tmp_path / "scratch"))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, "\n".join("\n".join(e.get("traceback", [])) for e in errors)[-3000:]
    return outputs


_REAL_RUNS = (pytest.mark.horovod, pytest.mark.mpi, pytest.mark.slow)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "darshan_logs.ipynb" else _REAL_RUNS)
                                  for n in sorted(EXPECT)])
def test_notebook_runs_top_to_bottom(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     request: pytest.FixtureRequest) -> None:
    env = {}
    if name in ("breakdown.ipynb", "shuffle_and_scaling.ipynb"):
        sweep = request.getfixturevalue("sweep_dir")
        env = {"NOTEBOOK_RUN": str(sweep / "n2-local"), "NOTEBOOK_SWEEP": str(sweep)}
        assert json.loads((sweep / "comparison.json").read_text())
    elif name == "climate_ablation.ipynb":
        env = {"NOTEBOOK_ABLATION": str(request.getfixturevalue("ablation_dir"))}
    outputs = _run_notebook(Path(__file__).resolve().parent.parent / "notebooks" / name, tmp_path, monkeypatch,
                            env)
    png, plotly, columns = EXPECT[name]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= png, "a figure was not drawn"
    assert sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs) >= plotly
    text = " ".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    missing = [c for c in columns if c not in text]
    assert not missing, f"{name}: tables lack {missing}"
    if env:
        assert not (tmp_path / "scratch").exists(), "the notebook made its own runs although it was given some"
