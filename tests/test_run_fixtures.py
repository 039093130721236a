"""The shared fixtures of ``conftest.py`` hold what the other tests rely on."""
from __future__ import annotations

import gzip
import json


def test_fixture_real_run_has_app_and_posix_layers(real_run):
    run_dir, files = real_run
    assert (run_dir / "manifest.json").is_file()
    assert len(list((run_dir / "app").glob("*.pfw"))) == 1
    posix = list((run_dir / "posix").glob("*.pfw*"))
    assert len(posix) == 1
    with gzip.open(posix[0], "rt") if posix[0].name.endswith(".gz") else open(posix[0]) as fh:
        reads = [json.loads(line) for line in fh if '"name":"read"' in line]
    assert sum(r["args"]["ret"] for r in reads) == 2 * sum(f.stat().st_size for f in files)


def test_fixture_dftracer_set_has_one_file_per_rank(dftracer_set):
    assert sorted(p.name for p in dftracer_set.iterdir()) == ["rank_0.pfw.gz", "rank_1.pfw.gz"]
