"""The run directory's records, typed: each rank's launch record (``launch/rank-<r>.json``) and rank 0's manifest
(``manifest.json``), as ``timelogger run`` writes them and ``trace_merge`` reads them.

``to_json`` gives the JSON object that is written (keys in the order of the files, optional keys left out as they
always were); ``from_json`` reads any JSON value leniently, as the readers always did: a manifest written by an
older launcher, one missing keys or holding values of the wrong type still reads (a missing or wrong value is the
field's empty value; a manifest keeps a wrong ``world_size`` or launch time in ``rejected`` so a reader can name
it), and keys it does not know (``node_cache``, added by the benchmarks) are kept in ``extra``. Standard library
only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Union

__all__ = ["Clock", "PosixLayer", "NoiseLevel", "NoiseLayer", "Layers", "LaunchRecord", "RankEntry", "Manifest",
           "JSON"]

#: a JSON value as ``json.loads`` gives it
JSON = Union[None, bool, int, float, str, List["JSON"], Dict[str, "JSON"]]
JSONObject = Dict[str, JSON]


def _int(value: object) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> Optional[str]:
    return value if isinstance(value, str) else None


def _obj(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _strs(value: object) -> List[str]:
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else []


def _str_map(value: object) -> Dict[str, str]:
    return {k: v for k, v in _obj(value).items() if isinstance(v, str)}


def _opt_str_map(value: object) -> Optional[Dict[str, str]]:
    return _str_map(value) if isinstance(value, Mapping) else None


def _or_false(value: Optional[str]) -> JSON:
    """An optional layer's setting as the files hold it: ``false`` when off."""
    return False if value is None else value


@dataclass
class Clock:
    """A ``(wall_ns, perf_ns)`` pair read together: ``time.time_ns`` and ``time.perf_counter_ns``."""

    wall_ns: int = 0
    perf_ns: int = 0

    def to_json(self) -> JSONObject:
        return {"wall_ns": self.wall_ns, "perf_ns": self.perf_ns}

    @classmethod
    def from_json(cls, doc: object) -> "Clock":
        d = _obj(doc)
        return cls(_int(d.get("wall_ns")) or 0, _int(d.get("perf_ns")) or 0)


@dataclass
class PosixLayer:
    """``--posix``: the DFTracer preload, the directory it traces (``all``: every file) and who starts DFTracer
    (``preload`` or ``program``; why the program does, when it does)."""

    preload: str
    data_dir: str
    init: str
    program_starts_dftracer: Optional[str] = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"preload": self.preload, "data_dir": self.data_dir, "init": self.init}
        if self.program_starts_dftracer is not None:
            out["program_starts_dftracer"] = self.program_starts_dftracer
        return out

    @classmethod
    def from_json(cls, doc: object) -> Optional["PosixLayer"]:
        if not isinstance(doc, Mapping):
            return None
        return cls(_str(doc.get("preload")) or "", _str(doc.get("data_dir")) or "", _str(doc.get("init")) or "",
                   _str(doc.get("program_starts_dftracer")))


@dataclass
class NoiseLevel:
    """One noise generator's setting (``cpu:1`` is kind ``cpu``, level 1 core); ``pid`` once it is started."""

    kind: str
    level: float
    unit: str
    pid: Optional[int] = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"kind": self.kind, "level": self.level, "unit": self.unit}
        if self.pid is not None:
            out["pid"] = self.pid
        return out

    @classmethod
    def from_json(cls, doc: object) -> Optional["NoiseLevel"]:
        d = _obj(doc)
        kind, level = _str(d.get("kind")), d.get("level")
        if kind is None or not isinstance(level, (int, float)) or isinstance(level, bool):
            return None
        return cls(kind, level, _str(d.get("unit")) or "", _int(d.get("pid")))

    @classmethod
    def list_from_json(cls, doc: object) -> List["NoiseLevel"]:
        levels = [cls.from_json(x) for x in doc] if isinstance(doc, list) else []
        return [x for x in levels if x is not None]


@dataclass
class NoiseLayer:
    """``--noise``: the generators' settings, where io noise writes, how, the CPUs they are pinned to."""

    specs: List[NoiseLevel]
    dir: Optional[str] = None
    io_mode: Optional[str] = None
    cpus: Optional[List[int]] = None
    started_by: str = "the lowest local rank of each host"
    files: str = "noise"

    def to_json(self) -> JSONObject:
        return {"specs": [s.to_json() for s in self.specs], "dir": self.dir, "io_mode": self.io_mode,
                "cpus": None if self.cpus is None else list(self.cpus), "started_by": self.started_by,
                "files": self.files}

    @classmethod
    def from_json(cls, doc: object) -> Optional["NoiseLayer"]:
        if not isinstance(doc, Mapping):
            return None
        cpus = doc.get("cpus")
        return cls(NoiseLevel.list_from_json(doc.get("specs")), _str(doc.get("dir")), _str(doc.get("io_mode")),
                   [c for c in cpus if _int(c) is not None] if isinstance(cpus, list) else None,
                   _str(doc.get("started_by")) or "", _str(doc.get("files")) or "")


@dataclass
class CpuLayer:
    """The CPU sampler (on unless ``--no-cpu``): its period, and the layer directory its files are in."""

    period_s: float
    files: str = "cpu"

    def to_json(self) -> JSONObject:
        return {"period_s": self.period_s, "files": self.files}

    @classmethod
    def from_json(cls, doc: object) -> Optional["CpuLayer"]:
        if not isinstance(doc, Mapping):
            return None
        period = doc.get("period_s")
        if not isinstance(period, (int, float)) or isinstance(period, bool):
            return None
        return cls(float(period), _str(doc.get("files")) or "cpu")


@dataclass
class Layers:
    """What each layer of the run captures: ``None`` is a layer that is off (``false`` in the files)."""

    app: bool = True
    posix: Optional[PosixLayer] = None
    #: ``HOROVOD_TIMELINE``, the timeline's path
    horovod_timeline: Optional[str] = None
    #: the TF profile window (``TIMELOGGER_TF_PROFILE``)
    tf_profile: Optional[str] = None
    #: the PyTorch profile window (``TIMELOGGER_TORCH_PROFILE``); its traces in ``torch/rank-<r>/``
    torch_profile: Optional[str] = None
    darshan: bool = False
    #: the zero-code hooks (:mod:`timelogger.hooks`), and why they are off when the program traces itself
    hooks: bool = False
    hooks_off: Optional[str] = None
    noise: Optional[NoiseLayer] = None
    #: the CPU sampler; None: off (``--no-cpu``), or a launcher from before it
    cpu: Optional[CpuLayer] = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"app": self.app, "posix": False if self.posix is None else self.posix.to_json(),
                           "horovod_timeline": _or_false(self.horovod_timeline),
                           "tf_profile": _or_false(self.tf_profile), "darshan": self.darshan, "hooks": self.hooks}
        if self.torch_profile is not None:  # left out when off: the files of launchers before it have no key
            out["torch_profile"] = self.torch_profile
        if self.hooks_off is not None:
            out["hooks_off"] = self.hooks_off
        if self.noise is not None:
            out["noise"] = self.noise.to_json()
        out["cpu"] = False if self.cpu is None else self.cpu.to_json()
        return out

    @classmethod
    def from_json(cls, doc: object) -> "Layers":
        d = _obj(doc)
        return cls(d.get("app") is True, PosixLayer.from_json(d.get("posix")), _str(d.get("horovod_timeline")),
                   _str(d.get("tf_profile")), _str(d.get("torch_profile")), d.get("darshan") is True,
                   d.get("hooks") is True, _str(d.get("hooks_off")), NoiseLayer.from_json(d.get("noise")),
                   CpuLayer.from_json(d.get("cpu")))


@dataclass
class LaunchRecord:
    """``launch/rank-<r>.json``: one rank's launch (``exec`` keeps the pid: it is also the program's)."""

    rank: Optional[int]
    world_size: Optional[int]
    launcher: str
    hostname: Optional[str]
    pid: Optional[int]
    #: tells this launch's record apart from a previous run's of the same rank (rank 0 lists it in the manifest)
    launch_id: Optional[str]
    clock: Clock
    command: List[str]
    cwd: str
    layers: Layers
    #: Slurm's job context (``timelogger._env.slurm_context``), when under Slurm
    slurm: Optional[Dict[str, str]] = None
    #: the noise generators this rank's launcher started
    noise_started: Optional[List[NoiseLevel]] = None
    #: the pid of this rank's CPU sampler
    cpu_sampler: Optional[int] = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"rank": self.rank, "world_size": self.world_size, "launcher": self.launcher,
                           "hostname": self.hostname, "pid": self.pid, "launch_id": self.launch_id,
                           "clock": self.clock.to_json(), "command": list(self.command), "cwd": self.cwd,
                           "layers": self.layers.to_json()}
        if self.slurm is not None:
            out["slurm"] = dict(self.slurm)
        if self.noise_started is not None:
            out["noise_started"] = [s.to_json() for s in self.noise_started]
        if self.cpu_sampler is not None:
            out["cpu_sampler"] = self.cpu_sampler
        return out

    @classmethod
    def from_json(cls, doc: object) -> Optional["LaunchRecord"]:
        """The record, or None when ``doc`` is no JSON object."""
        if not isinstance(doc, Mapping):
            return None
        started = doc.get("noise_started")
        return cls(_int(doc.get("rank")), _int(doc.get("world_size")), _str(doc.get("launcher")) or "",
                   _str(doc.get("hostname")), _int(doc.get("pid")), _str(doc.get("launch_id")),
                   Clock.from_json(doc.get("clock")), _strs(doc.get("command")), _str(doc.get("cwd")) or "",
                   Layers.from_json(doc.get("layers")), _opt_str_map(doc.get("slurm")),
                   NoiseLevel.list_from_json(started) if isinstance(started, list) else None,
                   _int(doc.get("cpu_sampler")))

    def entry(self) -> "RankEntry":
        """How the manifest lists this launch."""
        return RankEntry(self.rank, self.hostname, self.pid, self.launch_id)


@dataclass
class RankEntry:
    """A rank as the manifest lists it: where and as which process it runs, and which launch it is."""

    rank: Optional[int]
    hostname: Optional[str]
    pid: Optional[int]
    launch_id: Optional[str] = None

    def to_json(self) -> JSONObject:
        return {"rank": self.rank, "hostname": self.hostname, "pid": self.pid, "launch_id": self.launch_id}

    @classmethod
    def from_json(cls, doc: object) -> Optional["RankEntry"]:
        if not isinstance(doc, Mapping):
            return None
        return cls(_int(doc.get("rank")), _str(doc.get("hostname")), _int(doc.get("pid")), _str(doc.get("launch_id")))


#: the manifest's keys, in the order they are written
_MANIFEST_KEYS = ("tool", "created_wall_ns", "command", "cwd", "world_size", "launcher", "ranks", "ranks_dir",
                  "hosts", "hostname", "versions", "clocks", "layers", "env", "slurm")


@dataclass
class Manifest:
    """``manifest.json``: rank 0's record of the job (command, ranks, hosts, versions, layers)."""

    created_wall_ns: Optional[int] = None
    command: List[str] = field(default_factory=list)
    cwd: str = ""
    world_size: Optional[int] = None
    launcher: str = ""
    #: the ranks that had checked in when rank 0 wrote the manifest (``launch/`` holds every rank's record)
    ranks: List[RankEntry] = field(default_factory=list)
    ranks_dir: str = "launch"
    hosts: List[str] = field(default_factory=list)
    hostname: str = ""
    versions: Dict[str, str] = field(default_factory=dict)
    clocks: Clock = field(default_factory=Clock)
    layers: Layers = field(default_factory=Layers)
    #: the capture environment the launcher set (run directory, profile window, timeline, DFTracer, Darshan)
    env: Dict[str, str] = field(default_factory=dict)
    #: Slurm's job context without the per-task keys (those stay in each rank's launch record)
    slurm: Optional[Dict[str, str]] = None
    tool: str = "timelogger"
    #: top-level keys this class does not know, kept as read (``node_cache``, added by the benchmarks)
    extra: JSONObject = field(default_factory=dict)
    #: values of the integer fields (``created_wall_ns``, ``world_size``) read that are no integer, by key, so that a
    #: reader can name them
    rejected: JSONObject = field(default_factory=dict)

    def to_json(self) -> JSONObject:
        out: JSONObject = {
            "tool": self.tool, "created_wall_ns": self.created_wall_ns, "command": list(self.command),
            "cwd": self.cwd, "world_size": self.world_size, "launcher": self.launcher,
            "ranks": [r.to_json() for r in self.ranks], "ranks_dir": self.ranks_dir, "hosts": list(self.hosts),
            "hostname": self.hostname, "versions": dict(self.versions), "clocks": self.clocks.to_json(),
            "layers": self.layers.to_json(), "env": dict(self.env)}
        if self.slurm is not None:
            out["slurm"] = dict(self.slurm)
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, doc: object) -> Optional["Manifest"]:
        """The manifest, or None when ``doc`` is no JSON object (no manifest, or an unreadable one)."""
        if not isinstance(doc, Mapping):
            return None
        created, world = doc.get("created_wall_ns"), doc.get("world_size")
        ranks = [RankEntry.from_json(r) for r in doc.get("ranks") or []] if isinstance(doc.get("ranks"), list) else []
        m = cls(created_wall_ns=_int(created), command=_strs(doc.get("command")), cwd=_str(doc.get("cwd")) or "",
                world_size=_int(world), launcher=_str(doc.get("launcher")) or "",
                ranks=[r for r in ranks if r is not None], ranks_dir=_str(doc.get("ranks_dir")) or "",
                hosts=_strs(doc.get("hosts")), hostname=_str(doc.get("hostname")) or "",
                versions=_str_map(doc.get("versions")), clocks=Clock.from_json(doc.get("clocks")),
                layers=Layers.from_json(doc.get("layers")), env=_str_map(doc.get("env")),
                slurm=_opt_str_map(doc.get("slurm")),
                tool=_str(doc.get("tool")) or "",
                extra={k: v for k, v in doc.items() if k not in _MANIFEST_KEYS})
        for key, value, typed in (("created_wall_ns", created, m.created_wall_ns), ("world_size", world, m.world_size)):
            if value is not None and typed is None:
                m.rejected[key] = value
        return m
