"""DLIO 2.0.0's PyTorch loader (``framework: pytorch``, ``data_loader: pytorch``) as it comes: its own DFTracer
traces, read as they are, give DLIO's own AU within 10 points and the verdict, and the findings name the
DataLoader's knobs.

The same two settings as ``tests/test_dlio.py`` on 2 ranks (HDF5), with PyTorch's ``DataLoader`` (DLIO runs its
reader threads as ``num_workers`` processes, whose DFTracer traces are ``trace-<r>-of-2-*-fork.pfw.gz`` files of
their rank). DLIO 2.0.0 imports TensorFlow whatever its framework (its profiler factory imports ``tf_profiler``), so
this needs TensorFlow *and* PyTorch in one environment, with h5py, mpi4py and PyYAML: neither ``.venv`` (no torch)
nor ``.venv-torch`` (no TensorFlow, h5py, PyYAML) has all of them, and the test skips there. Run it with both, e.g.
``.venv``'s Python with ``.venv-torch``'s ``torch`` (and what it imports that ``.venv`` lacks) on ``PYTHONPATH``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

for _needed in ("torch", "tensorflow", "h5py", "mpi4py", "yaml"):
    pytest.importorskip(_needed)

from tests.helpers.dlio import check, dlio_args, dlio_au, dlio_env, dlio_site  # noqa: E402
from trace_merge.run import Run  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.tf, pytest.mark.mpi, pytest.mark.slow]

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def dlio_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both settings, generated and then trained by DLIO with DFTracer on (``DFTRACER_INC_METADATA=1``)."""
    site = dlio_site(BIN)
    root = tmp_path_factory.mktemp("dlio-torch")
    for kind in ("compute", "input"):
        data = root / "data" / kind
        gen = dlio_args(f"tiny_torch_{kind}", data, root / f"gen-{kind}", "++workload.workflow.generate_data=True",
                        "++workload.workflow.train=False")
        check(subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, *gen], cwd=root, env=dlio_env(site),
                             capture_output=True, text=True, timeout=300))
        check(subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable,
                              *dlio_args(f"tiny_torch_{kind}", data, root / f"traced-{kind}")], cwd=root,
                             env=dlio_env(site, DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1"),
                             capture_output=True, text=True, timeout=300))
    return root


@pytest.mark.parametrize("kind,verdict", [("compute", ("not input-bound", "moderately input-bound")),
                                          ("input", ("highly input-bound",))])
def test_dlio_pytorch_traces_give_dlio_au_and_the_verdict(dlio_runs: Path, kind: str, verdict: tuple) -> None:
    out = dlio_runs / f"traced-{kind}"
    traces = sorted(out.glob("trace-*-of-2-*.pfw.gz"))
    assert any(t.name.endswith("-app.pfw.gz") for t in traces) and any(t.name.endswith("-fork.pfw.gz") for t in traces)
    run = Run.open(out)
    assert sorted(run.frame["rank"].unique().tolist()) == [0, 1]  # workers' traces on their rank, never -1
    assert not [w for w in run.warnings if "could not be placed" in w]
    v = run.verdict()
    dlio = dlio_au(out)
    assert abs(v.au_pct - dlio) <= 10, (v, dlio)
    # compute-bound: the DataLoader's restart at an epoch's first fetch can lift the input wait past 5 %
    assert v.label in verdict, v
    assert v.cycles_total == 32 and v.basis == "app", v  # TorchFramework.compute marks the steps
    a = run.analyse()
    assert any("PyTorch profile window" in n for n in a.verdict.notes), a.verdict.notes
    actions = " ".join(f.action for f in run.findings(a))
    assert "num_parallel_calls" not in actions and "tf.data" not in actions
    if kind == "input":
        assert "num_workers" in actions
