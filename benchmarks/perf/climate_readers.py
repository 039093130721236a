"""Climate input pipeline throughput against ``--readers 1,2,4`` in threads and in processes, next to the raw read
bandwidth of the same files, in one run; prints a table and one JSON line.

Each point is a real single-rank run of ``benchmarks.climate train --mode io-only`` (the pipeline alone: reads,
normalisation, weights, IPC, batching; no training) under ``timelogger run --posix``, merged. Reported per point:

* ``samples_per_s``: steady-state pipeline throughput (epochs after the first);
* per image, from the merged frame: the parent's wait on a reader (``Parallel Read Images``), the reader's own time
  (``Time to Read Single Image``) split into file-system time (Σ of the reader's POSIX calls on data files),
  the rest of ``Read Image`` (HDF5 library and Python around the calls), ``Normalise`` and ``Per-pixel Weights``,
  and, for processes, the hand-off (parent's wait minus the reader's time: pickling, pipe, scheduling).

Beside them, measured in the same run on the same (warm) files: ``raw_whole_file``, a plain ``read()`` of every
whole file, and ``raw_used_channels``, h5py reading just the channels, labels and stats the pipeline uses, each as
MB/s and samples/s. ``saturates_at`` is the smallest reader count after which adding readers gains < 10 %.

Usage: ``python benchmarks/perf/climate_readers.py [--data DIR] [--files 24] [--height 768 --width 1152]
[--readers 1,2,4] [--epochs 3]``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.climate.data import GenSpec, check_dataset, generate  # noqa: E402
from benchmarks.climate.pipeline import PARENT_PHASE, WORKER_PHASE  # noqa: E402
from benchmarks.common.launch import Layers, launcher_command, stream  # noqa: E402
from benchmarks.common.runs import finalize_run  # noqa: E402
from benchmarks.perf.reader_efficiency import raw_read  # noqa: E402

CHANNELS = (0, 1, 2, 10)
GAIN = 1.10


def raw_used_channels(files: list[str]) -> tuple[int, float]:
    """h5py reads of what the pipeline uses (4 channels, labels, stats), no normalisation: (bytes, seconds)."""
    import h5py
    import numpy as np

    total, t0 = 0, time.perf_counter()
    for path in files:
        with h5py.File(path, "r") as f:
            dset = f["climate/data"]
            data = np.empty((len(CHANNELS), *dset.shape[1:]), dtype=np.float32)
            for i, c in enumerate(CHANNELS):
                dset.read_direct(data, np.s_[c], np.s_[i])
            total += data.nbytes + f["climate/labels"][...].nbytes + f["climate/stats"][...].nbytes
    return total, time.perf_counter() - t0


def per_image(parts: dict, data_dir: Path) -> dict[str, float]:
    """Milliseconds per image of each reader phase, from the merged frame (steady-state epochs)."""
    frame = parts["run"].frame
    frame = frame[frame["epoch"].notna() & (frame["epoch"] > 0)]
    app = frame[frame["layer"] == "app"]
    workers = app[app["name"] == WORKER_PHASE]
    images = max(len(workers), 1)

    def ms(name: str) -> float:
        return float(app[app["name"] == name]["dur_ns"].sum()) / images / 1e6

    posix = frame[(frame["layer"] == "posix") & (frame["cat"] == "io")]
    files = posix["file"].astype(str)
    on_data = posix[files.str.startswith(str(data_dir.resolve())) & posix["pid"].isin(workers["pid"].unique())]
    fs = float(on_data["dur_ns"].sum()) / images / 1e6
    out = {"images": len(workers), "parent_wait_ms": ms(PARENT_PHASE), "reader_ms": ms(WORKER_PHASE),
           "file_system_ms": fs, "read_outside_fs_ms": ms("Read Image") - fs, "normalise_ms": ms("Normalise"),
           "weights_ms": ms("Per-pixel Weights")}
    out["handoff_ms"] = out["parent_wait_ms"] - out["reader_ms"]
    out["outside_fs_pct_of_reader"] = 100.0 * (1 - fs / out["reader_ms"]) if out["reader_ms"] else None
    return out


def saturation(points: list[dict], kind: str) -> "int | None":
    """Smallest reader count after which the next count gains less than 10 % (None: still growing)."""
    series = sorted((p["readers"], p["samples_per_s"]) for p in points if p["read_in"] == kind)
    for (n, rate), (_, nxt) in zip(series, series[1:]):
        if nxt < rate * GAIN:
            return n
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, help="dataset directory (default: generate one in a temporary directory)")
    p.add_argument("--files", type=int, default=24)
    p.add_argument("--height", type=int, default=768)
    p.add_argument("--width", type=int, default=1152)
    p.add_argument("--readers", default="1,2,4")
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    counts = [int(x) for x in args.readers.split(",")]
    with tempfile.TemporaryDirectory(prefix="climate-readers-") as tmp:
        data = args.data or generate(Path(tmp) / "data", GenSpec(args.files, args.height, args.width),
                                     show_progress=False)
        info = check_dataset(data)
        files = info.paths
        points = []
        for kind in ("threads", "processes"):
            for n in counts:
                run = Path(tmp) / f"{kind}-{n}"
                program = [sys.executable, "-m", "benchmarks.climate", "train", "--data", str(data), "--dist",
                           "none", "--mode", "io-only", "--epochs", str(args.epochs), "--batch", "1",
                           "--readers", str(n), "--read-in", kind, "--prefetch", str(2 * n), "--no-merge",
                           "--blocks", "2,2,3"]
                cmd = launcher_command(run, program, Layers(posix=True, posix_filter=str(data.resolve())))
                with open(os.devnull, "w") as quiet:  # the ranks' progress lines would bury the table
                    stream(cmd, prefix=f"  {kind}-{n} ", echo=quiet)
                parts = finalize_run(run)
                s = parts["summary"]
                points.append({"read_in": kind, "readers": n, "samples_per_s": s["steady_throughput_samples_per_s"],
                               **per_image(parts, data)})
        raw = {}
        for name, fn in (("raw_whole_file", raw_read), ("raw_used_channels", raw_used_channels)):
            fn(files)  # warm
            nbytes, sec = fn(files)
            raw[name] = {"MB_per_s": nbytes / sec / 1e6, "samples_per_s": len(files) / sec}
    result = {"benchmark": "climate_readers", "files": len(files), "height": info.height, "width": info.width,
              "cores": os.cpu_count(), "points": points, **raw,
              "saturates_at": {k: saturation(points, k) for k in ("threads", "processes")}}
    print(f"{'read in':<10} {'readers':>7} {'samples/s':>9} {'wait ms':>8} {'reader ms':>9} {'fs ms':>7} "
          f"{'hdf5/py ms':>10} {'norm ms':>8} {'weight ms':>9} {'handoff ms':>10} {'outside fs':>10}")
    for pt in points:
        print(f"{pt['read_in']:<10} {pt['readers']:>7} {pt['samples_per_s']:9.2f} {pt['parent_wait_ms']:8.2f} "
              f"{pt['reader_ms']:9.2f} {pt['file_system_ms']:7.2f} {pt['read_outside_fs_ms']:10.2f} "
              f"{pt['normalise_ms']:8.2f} {pt['weights_ms']:9.2f} {pt['handoff_ms']:10.2f} "
              f"{pt['outside_fs_pct_of_reader']:9.1f}%")
    for name, r in raw.items():
        print(f"{name:<18} {r['MB_per_s']:9.1f} MB/s = {r['samples_per_s']:.1f} samples/s")
    print(f"saturates at (readers, < {round((GAIN - 1) * 100)} % gain beyond): {result['saturates_at']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
