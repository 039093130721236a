"""Numbers for people, one rule for the CLI, the report and the notebooks: a fixed format per unit, never
scientific notation, a missing number as :data:`MISSING`.

- :func:`cell` / :func:`formatted` (CLI and report): a column's name says its unit: ``*_s`` seconds and other
  measures to 3 significant digits, ``*_pct`` percent to 0.1, ``*MB_per_s`` MB/s, ``*bytes*`` in decimal units
  (:func:`size_text`), integers as whole numbers with thousands separators.
- :func:`readable` / :func:`number` (notebooks): the caller names each column and its unit; the label gets the unit.
- :func:`wrap` / :func:`frame_text`: CLI text at the terminal's width (:func:`text_width`).

Bytes and bandwidth are decimal everywhere (kB/MB/GB/TB = 10^3/10^6/10^9/10^12 bytes; MB/s), as storage and
network vendors quote them and as the bandwidth columns always were: one system, so that the same run never shows
MiB beside MB. :data:`BYTES_IN` is the one table of scales.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

MISSING = "–"

#: bytes per unit, largest first: the one unit system for bytes (decimal; bandwidth is MB/s of the same MB)
BYTES_IN = {"TB": 1e12, "GB": 1e9, "MB": 1e6, "kB": 1e3}
#: the CLI's width when stdout is no terminal (a pipe, a file, a test)
DEFAULT_WIDTH = 100


def sig3(x: float) -> str:
    """3 significant digits without scientific notation (whole numbers from 100 up, thousands separated)."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{2 - math.floor(math.log10(abs(x)))}f}"


def size_text(nbytes: float) -> str:
    """Bytes in the largest decimal unit that keeps the number at least 1, 3 significant digits: ``549755813888``
    -> ``550 GB``, ``4096`` -> ``4.10 kB``, ``512`` -> ``512 B``."""
    if nbytes is None or not math.isfinite(nbytes):
        return MISSING
    for unit, scale in BYTES_IN.items():
        if abs(nbytes) >= scale:
            return f"{sig3(nbytes / scale)} {unit}"
    return f"{nbytes:,.0f} B"


def cell(x: Any, column: str = "") -> str:
    """One value in its column's unit (the module docstring's rule)."""
    if hasattr(x, "item") and not isinstance(x, str):
        x = x.item()
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if column.endswith("_pct"):
        return f"{x:.1f}"
    if "bytes" in column:
        return size_text(x)
    if isinstance(x, int):
        return f"{x:,}"
    if column.endswith("MB_per_s"):
        return f"{x:,.0f}" if abs(x) >= 10 else sig3(x)
    return sig3(x)


def formatted(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every cell as its text (:func:`cell`), columns in place."""
    return pd.DataFrame({c: [cell(v, str(c)) for v in df[c].tolist()] for c in df.columns}, index=df.index)


#: unit -> how one value is written (:func:`number`); values are already in that unit
UNITS = {"s": "sig3", "ms": "sig3", "MB/s": "sig3", "GB/s": "sig3", "MB": "sig3", "GB": "sig3", "%": "pct",
         "×": "ratio",
         "count": "int", "": "sig3"}


def number(value: Any, style: str = "sig3") -> str:
    """One value as text: ``sig3`` (:func:`sig3`), ``pct`` one decimal, ``ratio`` two decimals, ``int`` a whole
    number with thousands separators; a missing value is :data:`MISSING`."""
    if value is None or pd.isna(value):
        return MISSING
    v = float(value)
    if style == "int":
        return f"{v:,.0f}"
    if style == "pct":
        return f"{v:.1f}"
    if style == "ratio":
        return f"{v:.2f}"
    return sig3(v)


def readable(df: pd.DataFrame, columns: Mapping[str, "tuple[str, str] | str"], index: bool = False) -> pd.DataFrame:
    """``df`` with only ``columns``, renamed and written as text.

    ``columns`` maps a column name to ``(label, unit)`` -- the label gets `` (unit)`` appended and every value is
    written in the unit's format (:data:`UNITS`) -- or to a plain label for a column shown as it is (names,
    ranks). With ``index`` the index is kept (its values as they are), else it is reset.
    """
    out = pd.DataFrame(index=df.index)
    for col, spec in columns.items():
        if isinstance(spec, str):
            out[spec] = [MISSING if not isinstance(v, str) and pd.isna(v) else v for v in df[col]]
            continue
        label, unit = spec
        out[f"{label} ({unit})" if unit else label] = [number(v, UNITS[unit]) for v in df[col]]
    return out if index else out.reset_index(drop=True)


def text_width() -> int:
    """The terminal's width, :data:`DEFAULT_WIDTH` when stdout is no terminal (``COLUMNS`` overrides both)."""
    return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns


#: the space between a number and its unit, which a wrapped line keeps ("77.1 %", "0.2 s", "24 MB/s")
_UNIT_SPACE = re.compile(r"(?<=\d) (?=(?:%|[kMGT]?B(?:/s)?|m?s)(?!\w))")
_GLUE = "\u00a0"  # textwrap splits at ASCII whitespace only


class Preformatted(str):
    """Text :func:`wrap` leaves as it is (a table, already fitted to the width by :func:`frame_text`)."""


def wrap(lines: "Iterable[str]", width: int) -> str:
    """``lines`` joined, each prose line filled to ``width`` with its continuation indented under its own text
    (its leading spaces, a list's ``- `` or ``1. `` marker); words are never broken, so only a token longer than
    the width (a path, a URL) can overrun it. :class:`Preformatted` items are kept as they are."""
    out = []
    for item in lines:
        for line in ([item] if isinstance(item, Preformatted) else item.split("\n")):
            if isinstance(item, Preformatted) or len(line) <= width:
                out.append(line)
                continue
            lead = len(line) - len(line.lstrip(" "))
            marker = line[lead:].split(" ", 1)[0]
            hang = lead + (len(marker) + 1 if marker in ("-", "*") or marker.rstrip(".").isdigit() else 2)
            out += [part.replace(_GLUE, " ") for part in textwrap.wrap(
                _UNIT_SPACE.sub(_GLUE, line), width, subsequent_indent=" " * hang, break_long_words=False,
                break_on_hyphens=False)]
    return "\n".join(out)


def frame_text(df: pd.DataFrame, width: "int | None" = None, index: bool = False) -> Preformatted:
    """A table as text for the terminal (:func:`formatted` cells; the index, as row names, with ``index``);
    ``(none)`` when empty. With ``width`` its columns are set in blocks no wider than that (pandas'
    ``line_width``), each block under the last."""
    if not len(df):
        return Preformatted("  (none)")
    text = formatted(df).to_string(index=index, line_width=width)
    return Preformatted("\n".join(line.rstrip() for line in text.split("\n")))


def json_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-able records (missing values become ``None``, numpy scalars plain numbers)."""
    return json.loads(df.to_json(orient="records", double_precision=10)) if len(df) else []


def json_plain(obj: Any) -> Any:
    """Make nested dicts/lists of scalars JSON-able (numpy scalars → numbers, NaN/NA → None)."""
    if isinstance(obj, dict):
        return {str(k): json_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_plain(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if obj is pd.NA or (isinstance(obj, float) and not math.isfinite(obj)):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def _float_text(x: float) -> str:
    """A float as ``json.dumps`` writes it (``allow_nan``: NaN, Infinity, -Infinity)."""
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


#: the JSON text of a scalar of exactly these types (subclasses take json's own checks, in :func:`_encode`)
_SCALAR: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii, int: int.__repr__, float: _float_text, bool: lambda b: "true" if b else "false",
    type(None): lambda _: "null"}


def _key_text(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it (str, float, bool, None and int keys; others are a TypeError)."""
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if isinstance(key, float):
        return encode_basestring_ascii(_float_text(key))
    if key is True or key is False or key is None:
        return encode_basestring_ascii(_SCALAR[type(key)](key))
    if isinstance(key, int):
        return encode_basestring_ascii(int.__repr__(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def _column_texts(values: list) -> "list[str] | None":
    """The JSON texts of a column of scalars (None: a value of another type). Columns without strings go through
    json's C encoder at once (no number's text holds a comma), strings through its C string encoder."""
    types = set(map(type, values))
    if not types <= _SCALAR.keys():
        return None
    if str not in types:
        return json.dumps(values, separators=(",", ":"))[1:-1].split(",")
    if types == {str}:
        return list(map(encode_basestring_ascii, values))
    return [_SCALAR[type(v)](v) for v in values]


def _records_text(items: "list | tuple", level: int, indent: str) -> "str | None":
    """The text of a list of flat dicts with the same keys (a table's records), a column at a time; None for
    any other list."""
    first = items[0]
    if type(first) is not dict or not first:
        return None
    keys = tuple(first)
    if not all(type(d) is dict and tuple(d) == keys for d in items):
        return None
    columns = []
    for key in keys:
        texts = _column_texts([d[key] for d in items])
        if texts is None:
            return None
        columns.append(texts)
    inner = "\n" + indent * (level + 2)
    # one %-template per record: its keys' texts are fixed, its values filled in
    template = "{" + ",".join(inner + _key_text(k).replace("%", "%%") + ": %s" for k in keys) + \
        "\n" + indent * (level + 1) + "}"
    outer = "\n" + indent * (level + 1)
    return "[" + outer + ("," + outer).join([template % row for row in zip(*columns)]) + "\n" + indent * level + "]"


def _encode(obj: Any, level: int, indent: str, default: Callable[[Any], Any], out: list[str]) -> None:
    """Append the text of ``obj`` at nesting ``level`` to ``out``: :func:`json.dumps`' pure-Python encoder's output,
    with a dict's scalar values written in one pass (the per-name tables hold a dict per name)."""
    scalar = _SCALAR.get(type(obj))
    if scalar is not None:
        out.append(scalar(obj))
    elif isinstance(obj, str):
        out.append(encode_basestring_ascii(obj))
    elif obj is None or obj is True or obj is False:
        out.append(_SCALAR[type(obj)](obj))
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, float):
        out.append(_float_text(obj))
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        records = _records_text(obj, level, indent)
        if records is not None:
            out.append(records)
            return
        inner = "\n" + indent * (level + 1)
        out.append("[" + inner)
        for i, item in enumerate(obj):
            if i:
                out.append("," + inner)
            _encode(item, level + 1, indent, default, out)
        out.append("\n" + indent * level + "]")
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        inner = "\n" + indent * (level + 1)
        out.append("{" + inner)
        first = True
        for key, value in obj.items():
            head = ("" if first else "," + inner) + _key_text(key) + ": "
            first = False
            scalar = _SCALAR.get(type(value))
            if scalar is not None:
                out.append(head + scalar(value))
            else:
                out.append(head)
                _encode(value, level + 1, indent, default, out)
        out.append("\n" + indent * level + "}")
    else:
        _encode(default(obj), level, indent, default, out)


def json_indented(obj: Any, indent: int = 1, default: Callable[[Any], Any] = str) -> str:
    """``json.dumps(obj, indent=indent, default=default)``, the same text, several times faster on large documents
    (json's C encoder writes no indented text; its Python one costs a generator step per value: a summary's per-name
    tables hold a dict per distinct name). Circular references are not detected."""
    out: list[str] = []
    _encode(obj, 0, " " * indent, default, out)
    return "".join(out)


__all__ = ["MISSING", "BYTES_IN", "DEFAULT_WIDTH", "sig3", "size_text", "cell", "formatted", "UNITS", "number",
           "readable", "text_width", "Preformatted", "wrap", "frame_text", "json_records",
           "json_plain", "json_indented"]
