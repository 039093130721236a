"""What the parsers collect of one file's events: :class:`State` (its metadata and bookkeeping events, hash tables,
counts of what was skipped) and :class:`Cols` (its complete events as columns), shared by the line parser and the
table parsers, and the JSON value helpers both use."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Optional

import numpy as np
import pandas as pd

#: DFTracer's ``time_metric`` -> ns per unit of ``ts``/``dur``.
_TIME_SCALE = {"NS": 1, "US": 1_000, "MS": 1_000_000, "S": 1_000_000_000}
METADATA_PH = ("M", 4)
COMPLETE_PH = ("X", 1)
BOOKKEEPING_CAT = "dftracer"
#: ``args`` fields read as integers and as strings by every parser
INT_ARGS = ("ret", "size", "offset", "epoch", "step", "rank", "bytes")
STR_ARGS = ("hhash", "fhash", "file", "fname")
#: DFTracer's hash tables: host, file and string hashes
HASH_TABLES = ("HH", "FH", "SH")
#: a JSON value as ``json.loads`` gives it with exact decimals (:func:`plain` makes the decimals numbers)
Json = object


class State:
    """Metadata collected while parsing one file."""

    def __init__(self, path: str, known: "Optional[dict[str, dict[str, str]]]" = None, time_metric: str = "US",
                 args: bool = True) -> None:
        self.path = path
        self.args = args  # False: the frame's args column is left empty (:func:`~.reader.read`)
        self.truncated_last_line = False
        self.started = False
        self._known = known or {k: {} for k in HASH_TABLES}
        self._time_metric = time_metric
        self.reset()

    def reset(self) -> None:
        """Forget what a failed parse attempt collected (hash tables of earlier blocks stay)."""
        self.maps: dict[str, dict[str, str]] = {k: dict(v) for k, v in self._known.items()}
        self.time_metric = self._time_metric
        self.header: Optional[dict[str, Json]] = None
        self.clock_sync: list[dict[str, Json]] = []
        self.tf_profile: list[dict[str, Json]] = []
        self.evidence_missing: list[str] = []  # what capture was asked for and did not produce (hooks, profile)
        self.close: Optional[dict[str, Json]] = None
        self.write_failed: Optional[str] = None
        self.dropped = 0  # intervals the TimeLogger writer could not write (timelogger_dropped / close records)
        self.thread_names: dict[int, str] = {}
        self.process_names: dict[int, str] = {}
        self.bookkeeping: list[str] = []
        self.other_meta: Counter[str] = Counter()
        self.meta_pids: set[int] = set()
        self.saw_meta = False
        self.ignored: Counter[str] = Counter()
        self.no_ts = 0

    @property
    def is_timelogger(self) -> bool:
        return self.header is not None

    @property
    def saw_any(self) -> bool:
        return self.saw_meta or bool(self.ignored) or self.no_ts > 0

    @property
    def time_scale(self) -> int:
        return _TIME_SCALE.get(str(self.time_metric).upper(), 1_000)

    def take_special(self, ev: dict[str, Json]) -> bool:
        """Record a metadata or DFTracer bookkeeping event; False if ``ev`` is neither."""
        ph = ev.get("ph")
        if ph in METADATA_PH and not isinstance(ph, bool):
            self._metadata(ev)
            return True
        if ev.get("cat") == BOOKKEEPING_CAT and ph in COMPLETE_PH:
            self.saw_meta = True
            self.bookkeeping.append(str(ev.get("name")))
            return True
        return False

    def _metadata(self, ev: dict[str, Json]) -> None:
        self.saw_meta = True
        name = ev.get("name")
        args = as_dict(ev.get("args"))
        pid = as_int(ev.get("pid"))
        if pid is not None:
            self.meta_pids.add(pid)
        if name in self.maps:
            key, value = args.get("value"), args.get("name")
            if key is not None and value is not None:
                self.maps[str(name)][str(key)] = str(value)
        elif name == "CM":
            if args.get("name") == "time_metric" and args.get("value") is not None:
                self.time_metric = str(args["value"])
        elif name == "timelogger":
            self.header = plain_dict(args)
        elif name == "clock_sync":
            self.clock_sync.append(plain_dict(args))
        elif name == "tf_profile":
            self.tf_profile.append(plain_dict(args))
        elif name == "tf_profile_missed":
            self.evidence_missing.append(f"--tf-profile: nothing profiled: {args.get('reason')}")
        elif name == "timelogger_hooks":
            if not args.get("seen"):
                self.evidence_missing.append("the zero-code hooks saw no framework loop (no tf.data iteration, "
                                             "tf.function call or Keras fit): the program never iterated where they "
                                             "look; time its loop with timelogger.iterate/phase (README)")
        elif name == "timelogger_close":
            self.close = plain_dict(args)
            self.dropped = max(self.dropped, as_int(args.get("dropped")) or 0)
        elif name == "timelogger_dropped":  # running total, written as intervals are dropped (survives kill -9)
            self.dropped = max(self.dropped, as_int(args.get("total")) or 0)
        elif name == "timelogger_lost":  # reserved after the header, rewritten in place when a write failed
            self.dropped = max(self.dropped, as_int(args.get("lost")) or 0)
            why = str(args.get("why") or "").strip()
            if why:
                self.write_failed = why
        elif name in ("thread_name", "process_name"):
            target = self.thread_names if name == "thread_name" else self.process_names
            ident = as_int(ev.get("tid" if name == "thread_name" else "pid"))
            if ident is not None and args.get("name") is not None:
                target[ident] = str(args["name"])
        else:
            self.other_meta[str(name)] += 1


def as_dict(value: Json) -> dict[str, Json]:
    return value if isinstance(value, dict) else {}


def plain(obj: Json) -> Json:
    """``Decimal`` -> int/float, recursively (metadata is parsed with exact decimals)."""
    if isinstance(obj, Decimal):
        return int(obj) if obj == obj.to_integral_value() else float(obj)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


def plain_dict(args: dict[str, Json]) -> dict[str, Json]:
    """:func:`plain` of a metadata event's ``args``."""
    return {k: plain(v) for k, v in args.items()}


def as_int(value: Json) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal):
        try:
            if value == value.to_integral_value():
                return int(value)
        except (InvalidOperation, ValueError):
            return None
    return None


def as_str(value: Json) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(plain(value))


def json_default(obj: Json) -> Json:
    if isinstance(obj, Decimal):
        return plain(obj)
    raise TypeError(type(obj).__name__)


@dataclass
class Cols:
    """The complete events of a file (or block), as both kinds of parser produce them."""

    name: pd.Categorical
    cat: pd.Categorical
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray  # int64 ns
    dur: np.ndarray  # int64 ns
    strs: dict[str, pd.Categorical]  # key in STR_ARGS
    ints: dict[str, tuple[np.ndarray, np.ndarray]]  # key in INT_ARGS -> (int64 values, bool mask: True = missing)
    extra: Optional[list[Optional[dict[str, Json]]]] = None  # per-row leftover args (TimeLogger), else None
    lines: Optional[np.ndarray] = None  # per-row line number (line parser only)

    @property
    def n(self) -> int:
        return len(self.ts)

    def take(self, keep: np.ndarray) -> Cols:
        """The rows where ``keep`` (bool) is True."""
        return Cols(
            name=self.name[keep], cat=self.cat[keep], pid=self.pid[keep], tid=self.tid[keep], ts=self.ts[keep],
            dur=self.dur[keep], strs={k: v[keep] for k, v in self.strs.items()},
            ints={k: (v[keep], m[keep]) for k, (v, m) in self.ints.items()},
            extra=None if self.extra is None else [e for e, k in zip(self.extra, keep) if k],
            lines=None if self.lines is None else self.lines[keep],
        )

    @classmethod
    def empty(cls) -> Cols:
        z = np.zeros(0, dtype=np.int64)
        c = pd.Categorical([])
        return cls(c, c, z, z, z, z, {k: c for k in STR_ARGS},
                   {k: (z, np.zeros(0, dtype=bool)) for k in INT_ARGS})
