"""trace_merge.bandwidth: reads of data files versus other files (imports, libraries, configuration).

Hand-built frames check exact bytes and times per kind under both rules of ``data_file_mask`` (files named by
the app layer; the path fallback); a real run (TimeLogger + DFTracer preload, no path filter, h5py reading
``.h5`` files) checks that the data-file bytes are those of the ``.h5`` files and imports land in "other".
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from trace_merge import bandwidth as B
from trace_merge.schema import to_counters, to_frame

SEC = 10 ** 9


def mixed_frame(app_names: bool = True) -> pd.DataFrame:
    """Rank 0: two overlapping preads of /data/x.h5 (100 B over [0,2] s, 50 B over [1,3] s), a .py read (30 B,
    [3,4] s), a .so read (20 B, [3.5,5] s), a read without a file (5 B, [4,4.5] s); rank 1: a read of
    /data/y.h5 (10 B, [0,1] s). With ``app_names``, rank 0's app ``Load File`` names /data/x.h5."""
    cols = {
        "layer": ["posix"] * 6, "cat": ["io"] * 6,
        "name": ["pread64", "pread64", "read", "read", "read", "read"],
        "rank": [0, 0, 0, 0, 0, 1], "tid": [1, 2, 1, 2, 1, 1],
        "start_ns": [0, 1 * SEC, 3 * SEC, int(3.5 * SEC), 4 * SEC, 0],
        "end_ns": [2 * SEC, 3 * SEC, 4 * SEC, 5 * SEC, int(4.5 * SEC), 1 * SEC],
        "bytes": [100, 50, 30, 20, 5, 10], "offset": [0, 100, pd.NA, pd.NA, pd.NA, pd.NA],
        "file": ["/data/x.h5", "/data/x.h5", "/opt/env/lib/site-packages/foo.py", "/usr/lib/x.so", None,
                 "/data/y.h5"],
    }
    if app_names:
        for k, v in {"layer": "app", "cat": "io", "name": "Load File", "rank": 0, "tid": 1, "start_ns": 0,
                     "end_ns": 3 * SEC, "bytes": 150, "offset": pd.NA, "file": "/data/x.h5"}.items():
            cols[k] = [*cols[k], v]
    return to_frame(cols)


def by_kind(bw: pd.DataFrame) -> dict:
    return {(int(r["rank"]), r["files"]): (int(r["read_bytes"]), r["read_time_s"], r["read_sum_s"])
            for _, r in bw.iterrows()}


def test_files_named_by_the_app_are_the_data():
    f = mixed_frame()
    rows = B.read_rows(f)
    assert B.data_file_mask(rows, f).tolist() == [True, True, False, False, False, False]
    assert by_kind(B.bandwidth_df(f)) == {(0, "data"): (150, 3.0, 4.0), (0, "other"): (55, 2.0, 3.0),
                                          (1, "other"): (10, 1.0, 1.0)}
    tot = B.bandwidth_totals(f)
    assert (tot["read_bytes"], tot["ranks"], tot["slowest_rank"], tot["slowest_read_time_s"]) == (150, 1, 0, 3.0)
    assert tot["aggregate_bw_MB_per_s"] == pytest.approx(150 / 3.0 / 1e6)
    assert tot["bw_over_job_wall_MB_per_s"] == pytest.approx(150 / 5.0 / 1e6)
    assert (tot["data_files"], tot["other_read_bytes"], tot["other_read_time_s"]) == (1, 65, 2.0)
    ap = B.access_pattern_df(f)
    assert ap[["rank", "files", "reads", "read_bytes", "consecutive"]].values.tolist() == [[0, 1, 2, 150, 1]]


def test_without_app_file_names_code_libraries_and_system_paths_are_other():
    f = mixed_frame(app_names=False)
    assert by_kind(B.bandwidth_df(f)) == {(0, "data"): (150, 3.0, 4.0), (0, "other"): (55, 2.0, 3.0),
                                          (1, "data"): (10, 1.0, 1.0)}
    tot = B.bandwidth_totals(f)
    assert set(tot) == {"read_bytes", "ranks", "slowest_rank", "slowest_read_time_s", "aggregate_bw_MB_per_s",
                        "job_wall_s", "bw_over_job_wall_MB_per_s", "data_files", "other_read_bytes",
                        "other_read_time_s"}
    assert (tot["read_bytes"], tot["ranks"], tot["data_files"], tot["other_read_bytes"]) == (160, 2, 2, 55)
    assert tot["aggregate_bw_MB_per_s"] == pytest.approx(160 / 3.0 / 1e6)


@pytest.mark.parametrize("path,data", [
    ("/scratch/train/a.tfrecord", True), ("/scratch/x.npy", True), ("/scratch/a.py", False),
    ("/home/u/.venv/lib/python3.11/abc.pyc", False), ("/opt/lib/libcudart.so.12.1", False),
    ("/opt/env/lib/python3.10/site-packages/numpy-1.26.dist-info/METADATA", False), ("/etc/passwd", False),
    ("/proc/self/maps", False), ("/usr/share/zoneinfo/UTC", False), ("/data/labels.json", False),
    ("/x/__pycache__/m.cpython-311.pyc", False), ("/data/sofa.bin", True), ("/data/lib/x.h5", True),
])
def test_fallback_path_rule(path, data):
    rows = to_frame({"layer": "posix", "cat": "io", "name": "read", "rank": 0, "start_ns": [0], "end_ns": [1],
                     "bytes": [1], "file": [path]})
    assert B.data_file_mask(rows).tolist() == [data]


def test_app_names_match_exact_paths_directories_and_relative_tails():
    f = to_frame({"layer": "app", "cat": "io", "name": "Load File", "rank": 0, "start_ns": [0] * 3,
                  "end_ns": [1] * 3, "file": ["data/a.h5", "/scratch/train/", "./data/x.py"]})
    paths = ["/scratch/data/a.h5", "/scratch/train/b.tfrecord", "/scratch/other/c.h5", "/scratch/data/x.py"]
    rows = to_frame({"layer": "posix", "cat": "io", "name": "read", "rank": 0, "start_ns": [0] * 4,
                     "end_ns": [1] * 4, "bytes": [1] * 4, "file": paths})
    assert B.data_file_mask(rows, f).tolist() == [True, True, False, True]


def test_darshan_counter_records_are_split_by_file():
    counters = to_counters({
        "layer": "posix", "rank": 3, "file": ["/data/x.h5", "/data/x.h5", "/usr/lib/libz.so.1", "/usr/lib/libz.so.1"],
        "counter": ["POSIX_BYTES_READ", "POSIX_F_READ_TIME", "POSIX_BYTES_READ", "POSIX_F_READ_TIME"],
        "value": [1000.0, 2.0, 40.0, 0.5]})
    bw = B.bandwidth_df(mixed_frame(), counters)
    assert by_kind(bw[bw["basis"] == "counters"]) == {(3, "data"): (1000, 2.0, 2.0), (3, "other"): (40, 0.5, 0.5)}
    tot = B.bandwidth_totals(mixed_frame(), counters)
    assert (tot["read_bytes"], tot["data_files"], tot["other_read_bytes"]) == (1150, 1, 105)


#: Imports numpy and h5py (reads of .py/.pyc files; .so files are mapped), then reads whole .h5 datasets
#: through h5py in TimeLogger ``Load File`` phases that name the file.
H5_SCRIPT = textwrap.dedent("""
    import sys
    from timelogger import default_logger
    tl = default_logger()
    import h5py
    for epoch in range(2):
        tl.set_epoch(epoch)
        for step, path in enumerate(sys.argv[1:]):
            tl.set_step(step)
            with tl.phase("Load File", cat="io") as p:
                with h5py.File(path, "r") as fh:
                    data = fh["x"][...]
                p.update(bytes=int(data.nbytes), file=path)
    tl.close()
""")


def test_real_run_data_bytes_are_the_h5_reads_and_imports_are_other(tmp_path, bin_dir, tool_env):
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("dftracer")
    from trace_merge.run import Run

    files = []
    for i, n in enumerate((40_000, 70_000)):
        files.append(tmp_path / f"sample-{i}.h5")
        with h5py.File(files[-1], "w") as fh:
            fh["x"] = np.arange(n, dtype=np.float64)
    (tmp_path / "train.py").write_text(H5_SCRIPT)
    env = tool_env | {"DFTRACER_INC_METADATA": "1"}
    subprocess.run([str(bin_dir / "timelogger"), "run", "-o", str(tmp_path / "run"), "--posix", "--",
                    sys.executable, str(tmp_path / "train.py"), *map(str, files)],
                   check=True, capture_output=True, env=env, cwd=tmp_path, timeout=120)
    run = Run.open(tmp_path / "run")
    rows = B.read_rows(run.frame)
    path = rows["file"].astype(str)
    h5 = path.str.endswith(".h5").to_numpy()
    code = path.str.contains(r"\.(?:py|pyc|so)$|\.so\.", regex=True).to_numpy()
    assert h5.any() and code.sum() > 10
    bw = run.bandwidth().set_index("files")
    assert bw.loc["data", "read_bytes"] == rows["bytes"][h5].sum() >= 2 * 8 * (40_000 + 70_000)
    assert bw.loc["other", "read_bytes"] == rows["bytes"][~h5].sum() >= rows["bytes"][code].sum() > 0
    mask = B.data_file_mask(rows, run.frame)
    assert not mask[code].any() and mask[h5].all()
    tot = B.bandwidth_totals(run.frame)
    assert tot["data_files"] == 2 and tot["read_bytes"] == bw.loc["data", "read_bytes"]
