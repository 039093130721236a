"""Climate segmentation data: a synthetic generator in the original (CAM5) file layout, and the checks run before
training.

Layout of one file ``data-YYYY-MM-DD-HH-<k>.h5`` (k = file index; the timestamp is 2006-01-01 00:00 + 3 h * k):

====================  ===================================  ========================================================
dataset               dtype / shape                        meaning
====================  ===================================  ========================================================
``/climate/data``     float32 (16, H, W), contiguous       CAM5-like variables (:data:`CHANNEL_NAMES`), uncompressed
``/climate/labels``   float32 (H, W)                       0 = background, 1 = tropical cyclone, 2 = atmospheric river
``/climate/stats``    float32 (16, 4)                      per channel min, max, mean, std of this file's ``data``
====================  ===================================  ========================================================

Rows run south to north (latitude -90 to 90), columns west to east (longitude 0 to 360). The default 768 x 1152 is
the original's grid (about 57 MiB per file).

Nothing here imports TensorFlow, so bad input is reported within a second of starting.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from benchmarks.common import datasets
from benchmarks.common.datasets import atomic_path
from benchmarks.common.errors import TraceInputError

log = logging.getLogger(__name__)

#: the CAM5 variables of the original files, in channel order
CHANNEL_NAMES = ("TMQ", "U850", "V850", "UBOT", "VBOT", "QREFHT", "PS", "PSL",
                 "T200", "T500", "PRECT", "TS", "TREFHT", "Z1000", "Z200", "ZBOT")
CHANNELS = len(CHANNEL_NAMES)
#: label value -> class name
CLASS_NAMES = ("background", "tropical cyclone", "atmospheric river")
#: the original data's class frequencies (fraction of pixels, per dataset on average); the generator aims at them
CLASS_FREQUENCIES = (0.982, 0.00071, 0.017)
#: the three datasets every file must have (under ``GROUP``)
GROUP = "climate"
REQUIRED = ("data", "labels", "stats")
#: ``stats`` columns
STATS = ("min", "max", "mean", "std")

_NAME = re.compile(r"^data-(\d{4})-(\d{2})-(\d{2})-(\d{2})-(\d+)\.h5$")
_EPOCH = datetime(2006, 1, 1)
_STEP = timedelta(hours=3)


def file_name(k: int) -> str:
    """``data-YYYY-MM-DD-HH-<k>.h5``, the timestamp being 2006-01-01 00:00 + 3 h * k."""
    return f"data-{_EPOCH + k * _STEP:%Y-%m-%d-%H}-{k}.h5"


def list_files(data_dir: Path) -> list[Path]:
    """``data-YYYY-MM-DD-HH-<k>.h5`` in ``data_dir``, sorted by k (other names are ignored)."""
    found = []
    for path in Path(data_dir).iterdir():
        m = _NAME.match(path.name)
        if m:
            found.append((int(m.group(5)), path.name, path))
    return [p for _, _, p in sorted(found)]


# --------------------------------------------------------------------------------------------- generation

# Per channel: offset, scale (a typical value and spread of the variable), latitude profile, and how strongly
# the noise shows. Profiles (of latitude phi): "warm" peaks at the equator, "jet" is westerly at mid-latitudes and
# easterly in the tropics, "highs" has subtropical highs and subpolar lows, "flat" has no zonal mean.
_BACKGROUND = {
    "TMQ": (22.0, 18.0, "warm"), "U850": (2.0, 8.0, "jet"), "V850": (0.0, 5.0, "flat"),
    "UBOT": (1.0, 6.0, "jet"), "VBOT": (0.0, 4.0, "flat"), "QREFHT": (0.009, 0.006, "warm"),
    "PS": (97500.0, 2500.0, "highs"), "PSL": (101200.0, 900.0, "highs"), "T200": (218.0, 6.0, "warm"),
    "T500": (258.0, 12.0, "warm"), "PRECT": (3e-8, 3e-8, "warm"), "TS": (283.0, 22.0, "warm"),
    "TREFHT": (282.0, 20.0, "warm"), "Z1000": (110.0, 80.0, "highs"), "Z200": (11700.0, 350.0, "warm"),
    "ZBOT": (62.0, 4.0, "warm"),
}
_NOISE = 0.03  # noise std as a fraction of the channel's scale (uniform noise)
_WAVES = 3  # separable low-frequency waves per channel
_NON_NEGATIVE = ("TMQ", "QREFHT", "PRECT")
_C = {name: i for i, name in enumerate(CHANNEL_NAMES)}

# Feature sizes as fractions of sqrt(H * W), so the class frequencies hold at any image size. With these, a file
# has on average about 1.7 % river and 0.07 % cyclone pixels (measured over 400 files; CLASS_FREQUENCIES).
_RIVERS = (1, 4)  # rivers per file: uniform integer in [1, 4)
_RIVER_LENGTH = (0.22, 0.42)
_RIVER_WIDTH = (0.024, 0.042)
_RIVER_BEND = 0.15  # centre-line offset at the ends, as a fraction of the length, up to this either way
_CYCLONES = 3.0  # cyclones per file: Poisson mean
_CYCLONE_RADIUS = (0.006, 0.011)  # radius of the labelled disk


def _latitude_profile(kind: str, phi: np.ndarray) -> np.ndarray:
    if kind == "warm":
        return 2.0 * np.cos(phi) - 1.27
    if kind == "jet":
        return 2.0 * np.sin(2.0 * phi) ** 2 - 0.8
    if kind == "highs":
        return 0.8 * np.cos(6.0 * phi) * np.cos(phi) ** 0.5
    return np.zeros_like(phi)


def make_sample(rng: np.random.Generator, height: int, width: int) -> dict[str, np.ndarray]:
    """Synthesise one file's content on a ``height`` x ``width`` grid.

    Every channel is a smooth background (a latitude profile plus a few low-frequency separable waves, with the
    variable's typical offset and scale) plus a little (uniform) noise. On top of it:

    - atmospheric rivers (label 2): long, narrow, gently curved bands from the subtropics poleward; inside, water
      vapour (``TMQ``), humidity and precipitation are raised and the winds blow along the band;
    - tropical cyclones (label 1): small disks in the tropics with a strong pressure low (``PSL``, ``PS``,
      ``Z1000``), a cyclonic vortex in the wind channels, a warm core and heavy precipitation.

    An image too small for a cyclone to cover a pixel centre may have none.

    Returns
    -------
    dict
        ``data`` float32 (16, height, width), ``labels`` float32 (height, width), ``stats`` float32 (16, 4).
    """
    h, w = int(height), int(width)
    phi = ((np.arange(h) + 0.5) / h - 0.5) * np.pi  # latitude, radians, south to north
    lam = (np.arange(w) + 0.5) / w * 2.0 * np.pi  # longitude, radians
    # Background: for channel c, data[c] = A[c] @ B[c] with A (h, 2 + waves) and B (2 + waves, w): the offset, the
    # latitude profile and the separable waves sin(k phi + p) * sin(m lambda + q) in one matrix product.
    cols = np.empty((CHANNELS, h, 2 + _WAVES), np.float64)
    rows = np.empty((CHANNELS, 2 + _WAVES, w), np.float64)
    noise_scale = np.empty(CHANNELS, np.float32)
    for c, name in enumerate(CHANNEL_NAMES):
        offset, scale, kind = _BACKGROUND[name]
        cols[c, :, 0] = offset
        rows[c, 0] = 1.0
        cols[c, :, 1] = scale * _latitude_profile(kind, phi)
        rows[c, 1] = 1.0
        amp = rng.uniform(0.15, 0.45, _WAVES) * scale
        k = rng.integers(1, 5, _WAVES)
        m = rng.integers(1, 7, _WAVES)
        p, q = rng.uniform(0.0, 2.0 * np.pi, (2, _WAVES))
        cols[c, :, 2:] = amp * np.sin(np.outer(phi, k) + p)
        rows[c, 2:] = np.sin(np.outer(m, lam) + q[:, None])
        noise_scale[c] = _NOISE * scale
    data = np.matmul(cols.astype(np.float32), rows.astype(np.float32))
    labels = np.zeros((h, w), np.float32)
    size = float(np.sqrt(h * w))
    for _ in range(rng.integers(*_RIVERS)):
        _add_river(rng, data, labels, size)
    for _ in range(rng.poisson(_CYCLONES)):
        _add_cyclone(rng, data, labels, size)
    # Uniform noise of the intended std: several times cheaper to draw than normal noise (~50 vs ~280 ms at full size).
    noise = rng.random((CHANNELS, h, w), dtype=np.float32)
    noise -= 0.5
    noise *= np.float32(np.sqrt(12.0)) * noise_scale[:, None, None]
    data += noise
    del noise
    for name in _NON_NEGATIVE:
        np.maximum(data[_C[name]], 0.0, out=data[_C[name]])
    return {"data": data, "labels": labels, "stats": channel_stats(data)}


def channel_stats(data: np.ndarray) -> np.ndarray:
    """float32 (C, 4): per channel min, max, mean, std of ``data`` (C, H, W); mean and std summed in float64."""
    stats = np.empty((data.shape[0], len(STATS)), np.float32)
    for c, channel in enumerate(data):
        stats[c] = (channel.min(), channel.max(), channel.mean(dtype=np.float64), channel.std(dtype=np.float64))
    return stats


def _window(centre: tuple[float, float], reach: float, shape: tuple[int, int]) -> tuple[slice, slice] | None:
    """The pixel rows/columns within ``reach`` of ``centre`` (y, x), clipped to the image; None if none."""
    y0, y1 = max(int(np.floor(centre[0] - reach)), 0), min(int(np.ceil(centre[0] + reach)) + 1, shape[0])
    x0, x1 = max(int(np.floor(centre[1] - reach)), 0), min(int(np.ceil(centre[1] + reach)) + 1, shape[1])
    if y0 >= y1 or x0 >= x1:
        return None
    return slice(y0, y1), slice(x0, x1)


def _add_river(rng: np.random.Generator, data: np.ndarray, labels: np.ndarray, size: float) -> None:
    h, w = labels.shape
    north = rng.random() < 0.5
    lat = rng.uniform(20.0, 45.0) * (1 if north else -1)  # degrees
    yc = (lat / 180.0 + 0.5) * h
    xc = rng.uniform(0.0, w)
    length = rng.uniform(*_RIVER_LENGTH) * size
    width = rng.uniform(*_RIVER_WIDTH) * size
    bend = rng.uniform(-_RIVER_BEND, _RIVER_BEND) * length
    # From the tropics poleward and eastward: south-west to north-east in the north, north-west to south-east in the
    # south (rows run northward, so a positive angle points north-east).
    angle = np.radians(rng.uniform(15.0, 45.0)) * (1 if north else -1)
    vapour = rng.uniform(20.0, 30.0)
    wind = rng.uniform(10.0, 18.0)
    win = _window((yc, xc), length / 2 + width + abs(bend), (h, w))
    if win is None:
        return
    dy = (np.arange(win[0].start, win[0].stop) + 0.5 - yc)[:, None]
    dx = (np.arange(win[1].start, win[1].stop) + 0.5 - xc)[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    t = 2.0 * (dx * cos + dy * sin) / length  # along the band, -1 .. 1
    v = -dx * sin + dy * cos - bend * t ** 2  # across the band, from the (parabolic) centre line
    along = np.clip(1.0 - t ** 4, 0.0, 1.0)  # blunt ends
    half = 0.5 * width * np.sqrt(along)
    inside = (np.abs(t) <= 1.0) & (np.abs(v) <= half)
    profile = (np.exp(-(v / (0.5 * width)) ** 2) * along).astype(np.float32)
    labels[win][inside] = 2.0
    block = data[:, win[0], win[1]]
    block[_C["TMQ"]] += vapour * profile
    block[_C["QREFHT"]] += 0.006 * profile
    block[_C["PRECT"]] += 1.5e-7 * profile
    # Winds along the band's axis (the curve is gentle; its local direction is close enough).
    for u_name, v_name, gain in (("U850", "V850", 1.0), ("UBOT", "VBOT", 0.6)):
        block[_C[u_name]] += gain * wind * cos * profile
        block[_C[v_name]] += gain * wind * sin * profile


def _add_cyclone(rng: np.random.Generator, data: np.ndarray, labels: np.ndarray, size: float) -> None:
    h, w = labels.shape
    north = rng.random() < 0.5
    lat = rng.uniform(8.0, 30.0) * (1 if north else -1)
    yc = (lat / 180.0 + 0.5) * h
    xc = rng.uniform(0.0, w)
    radius = rng.uniform(*_CYCLONE_RADIUS) * size
    drop = rng.uniform(3000.0, 6000.0)  # Pa at the centre
    vmax = rng.uniform(30.0, 60.0)  # m/s at the labelled radius
    win = _window((yc, xc), 4.0 * radius + 1.0, (h, w))
    if win is None:
        return
    dy = (np.arange(win[0].start, win[0].stop) + 0.5 - yc)[:, None]
    dx = (np.arange(win[1].start, win[1].stop) + 0.5 - xc)[None, :]
    r = np.sqrt(dx ** 2 + dy ** 2) / radius
    labels[win][r <= 1.0] = 1.0
    low = np.exp(-(r / 1.5) ** 2).astype(np.float32)
    core = np.exp(-r ** 2).astype(np.float32)
    # Cyclonic: counter-clockwise in the north, clockwise in the south; the tangential speed peaks at the radius.
    speed = vmax * r * np.exp(0.5 * (1.0 - r ** 2)) * (1 if north else -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.where(r > 0, -speed * dy / (r * radius), 0.0).astype(np.float32)
        v = np.where(r > 0, speed * dx / (r * radius), 0.0).astype(np.float32)
    block = data[:, win[0], win[1]]
    block[_C["PSL"]] -= drop * low
    block[_C["PS"]] -= drop * low
    block[_C["Z1000"]] -= 0.08 * drop * low  # about 8 m of geopotential height per hPa
    block[_C["UBOT"]] += u
    block[_C["VBOT"]] += v
    block[_C["U850"]] += 0.8 * u
    block[_C["V850"]] += 0.8 * v
    block[_C["TMQ"]] += 20.0 * core
    block[_C["PRECT"]] += 5e-7 * core
    block[_C["T500"]] += 4.0 * core  # warm core
    block[_C["T200"]] += 2.0 * core


def write_file(path: Path, sample: dict[str, np.ndarray]) -> None:
    """Write one file; every dataset contiguous and uncompressed like the original (h5py's default layout)."""
    import h5py

    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        group = f.create_group(GROUP)
        for name in REQUIRED:
            group.create_dataset(name, data=sample[name])


@dataclass(frozen=True)
class GenSpec:
    """What a generated dataset is; stored in ``generator.json`` beside the files to recognise it on re-runs."""

    files: int
    height: int = 768
    width: int = 1152
    seed: int = 0

    def as_dict(self) -> dict:
        return {"files": self.files, "height": self.height, "width": self.width, "seed": self.seed}


#: ``make smoke``-sized: 4 files of 64 x 96 (a few hundred KiB)
SMOKE_DATA = GenSpec(files=4, height=64, width=96)
#: ``make demo``-sized: 16 files of 192 x 288 (about 3.6 MiB each)
DEMO_DATA = GenSpec(files=16, height=192, width=288)


def read_spec(out: Path) -> GenSpec | None:
    """The spec of a dataset this generator wrote in ``out``, None if there is none."""
    return datasets.read_spec(out, GenSpec)


def generate(out: "str | os.PathLike[str]", spec: GenSpec, force: bool = False, show_progress: bool = True) -> Path:
    """Write a dataset to ``out``; deterministic for a given ``spec`` (file k depends only on seed and k).

    An existing directory holding the same spec is left as it is; one with other ``data-*.h5`` files is an error
    unless ``force``.
    """
    from benchmarks.common.progress import progress

    if spec.files < 1 or spec.height < 8 or spec.width < 8:
        raise TraceInputError(out, "need --files >= 1, --height >= 8 and --width >= 8")
    out = Path(out)
    if datasets.prepare_output(out, spec, "data-*.h5", [file_name(k) for k in range(spec.files)], force):
        return out
    jobs = range(spec.files)
    for k in progress(jobs, total=len(jobs), desc=f"generating {out}") if show_progress else jobs:
        rng = np.random.default_rng([spec.seed, k])
        write_file(out / file_name(k), make_sample(rng, spec.height, spec.width))
    datasets.write_spec(out, spec)
    return out


# --------------------------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class FileInfo:
    """One checked file: its grid and where its ``data`` lies (for byte accounting)."""

    path: str
    height: int
    width: int
    channels: int
    data_offset: int
    data_bytes: int


@dataclass(frozen=True)
class DatasetInfo:
    """The checked files, sorted by file index."""

    files: tuple[FileInfo, ...]
    height: int
    width: int
    channels: int

    @property
    def paths(self) -> list[str]:
        """The files' absolute paths, in order."""
        return [f.path for f in self.files]


def check_file(path: Path, height: int | None = None, width: int | None = None) -> FileInfo:
    """Check one file's layout; raise :class:`TraceInputError` naming the file and what is wrong."""
    import h5py

    path = Path(path)
    with datasets.open_hdf5(path) as f:
        found = {}
        for name in REQUIRED:
            where = f"/{GROUP}/{name}"
            item = f.get(where) if isinstance(f.get(GROUP), h5py.Group) else None
            if not isinstance(item, h5py.Dataset):
                raise TraceInputError(path, f"no dataset '{where}'")
            if item.dtype != np.float32:
                raise TraceInputError(path, f"'{where}' has dtype {item.dtype}, expected float32")
            found[name] = item
        data, labels, stats = found["data"], found["labels"], found["stats"]
        shape = data.shape
        if len(shape) != 3 or shape[0] != CHANNELS or shape[1] < 1 or shape[2] < 1:
            raise TraceInputError(path, f"'/{GROUP}/data' has shape {shape}, expected ({CHANNELS}, H, W)")
        c, h, w = (int(n) for n in shape)
        if (height is not None and h != height) or (width is not None and w != width):
            want = f"{height if height is not None else h} x {width if width is not None else w}"
            raise TraceInputError(path, f"image size {h} x {w} does not match the requested {want}")
        if labels.shape != (h, w):
            raise TraceInputError(path, f"'/{GROUP}/labels' has shape {labels.shape}, expected ({h}, {w})")
        if stats.shape != (c, len(STATS)):
            raise TraceInputError(path, f"'/{GROUP}/stats' has shape {stats.shape}, expected ({c}, {len(STATS)})")
        offset, nbytes = datasets.contiguous_extent(path, data, f"/{GROUP}/data")
        ends = []
        for name, item in found.items():
            where = item.id.get_offset()
            if where is not None and item.chunks is None:
                ends.append((int(where) + int(item.id.get_storage_size()), f"/{GROUP}/{name}"))
    datasets.check_not_truncated(path, ends)
    return FileInfo(str(path), h, w, c, offset, nbytes)


def check_dataset(data_dir: "str | os.PathLike[str]", ranks: int = 1, height: int | None = None,
                  width: int | None = None) -> DatasetInfo:
    """Check a data directory before training.

    Raises
    ------
    TraceInputError
        missing directory, no data files, fewer files than ranks, a file with wrong layout, dtype or shape, a
        truncated file, image sizes that differ between files or from ``height``/``width``, or a file whose size
        differs from the first's.
    """
    data_dir = datasets.data_directory(data_dir)
    paths = list_files(data_dir)
    if not paths:
        raise TraceInputError(data_dir, "no data files (data-YYYY-MM-DD-HH-<k>.h5)")
    datasets.need_one_per_rank(data_dir, len(paths), ranks)
    infos: list[FileInfo] = []
    first_size = 0
    for path in paths:
        info = check_file(path, height, width)
        size = path.stat().st_size
        if infos:
            first = infos[0]
            if (info.height, info.width) != (first.height, first.width):
                raise TraceInputError(path, f"image size {info.height} x {info.width} differs from {first.height} x "
                                            f"{first.width} in {Path(first.path).name}")
            if size != first_size:
                raise TraceInputError(path, f"size {size} bytes differs from {first_size} of {Path(first.path).name}")
        else:
            first_size = size
        infos.append(info)
    first = infos[0]
    return DatasetInfo(tuple(infos), first.height, first.width, first.channels)


def shape_without_reading(data_dir: "str | os.PathLike[str]", ranks: int = 1
                          ) -> tuple[list[Path], int, int] | None:
    """The data files (absolute, sorted by k) and (height, width) from ``generator.json``, opening no ``.h5`` file.

    For runs that must not touch the data files (the ``no-io`` ablation). None when ``data_dir`` has no
    ``generator.json`` (then only :func:`check_dataset` can tell the shape).

    Raises
    ------
    TraceInputError
        missing directory, an unreadable ``generator.json``, fewer files than ``ranks``.
    """
    data_dir = datasets.data_directory(data_dir)
    spec = read_spec(data_dir)
    if spec is None:
        return None
    files = list_files(data_dir)
    datasets.need_one_per_rank(data_dir, len(files), ranks)
    return files, spec.height, spec.width
