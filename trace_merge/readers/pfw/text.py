"""The text of a ``.pfw``/``.pfw.gz`` file: gzip members decompressed (ISA-L where installed), over-long lines and
gzip bombs stopped before their text is held, whole or in blocks of whole lines, and where its event lines are."""
from __future__ import annotations

import json
import logging
import os
import re
import zlib
from types import ModuleType
from typing import Iterator, Optional

import numpy as np

from ...errors import TraceInputError
from ...formatting import size_text
from .options import ParseOptions

log = logging.getLogger(__name__)

_pfwscan: Optional[ModuleType]
try:  # the native scanner (optional: built where there is a C compiler)
    from .. import _pfwscan
except ImportError:
    _pfwscan = None

_inflate: ModuleType
try:  # ISA-L's inflate: the same gzip, faster (docs/partitioned.md); optional
    from isal import isal_zlib as _inflate

    ZLIB_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate.error)
except ImportError:  # pragma: no cover - isal is in the requirements
    _inflate = zlib
    ZLIB_ERRORS = (zlib.error,)

#: text per block when a large DFTracer trace is read block by block (:func:`~.reader.read_blocks`): a worker
#: holds several times its block while parsing it, and larger blocks were no faster (docs/partitioned.md, "Memory")
STREAM_BLOCK_BYTES = 16 << 20
#: text bytes per gzip byte of a DFTracer trace (measured on dftracer_gen_fake_trace sets), to tell from its size
#: whether a file fits one block
GZIP_RATIO = 16
#: text decompressed per call, so that the limit is checked before the text is held
_INFLATE_CHUNK = 16 << 20
_GZIP_MEMBER = b"\x1f\x8b\x08"


def gzip_decompressor() -> "zlib._Decompress":
    """A decompressor of one gzip member (ISA-L when installed, else zlib)."""
    return _inflate.decompressobj(16 + zlib.MAX_WBITS)


def bomb(path: str, compressed_bytes: int, options: ParseOptions) -> TraceInputError:
    """The error naming a gzip file whose text would exceed :meth:`ParseOptions.text_limit`."""
    return TraceInputError(path, f"decompresses to more than {size_text(options.text_limit(compressed_bytes))} "
                                 f"({options.max_text_ratio}x its {size_text(compressed_bytes)}): not a trace (a "
                                 "gzip bomb?); skipped")


def long_line_warning(path: str, lineno: int, length: int, options: ParseOptions) -> str:
    """The warning for an event line longer than :attr:`ParseOptions.max_line_bytes` (every read path says it so)."""
    return f"{path}:{lineno}: a line of {length:,} bytes (limit {options.max_line_bytes:,}); event skipped"


def newlines(text: "bytes | bytearray | memoryview", chunk: int = 1 << 22) -> int:
    """``text.count(b"\\n")``: the scanner's one pass of ``memchr`` where it is built, else numpy's comparison,
    4 MiB at a time (both faster than ``bytes.count``)."""
    if _pfwscan is not None:
        return int(_pfwscan.newlines(text))
    view = np.frombuffer(text, np.uint8)
    return sum(int(np.count_nonzero(view[i:i + chunk] == 10)) for i in range(0, len(view), chunk))


# ----------------------------------------------------------------------------------------------
# a whole file


def load(path: str, warnings: list[str], options: ParseOptions) -> "bytes | bytearray":
    """The file's text, decompressed when it is gzip (all members), less its over-long lines (:class:`LongLines`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            if head == b"\x1f\x8b":
                return gunzip(path, head + fh.read(), warnings, options)
            if path.endswith(".gz") and head:
                raise TraceInputError(path, "not a gzip file (bad magic bytes)")
            out = bytearray(head)
            guard = LongLines(path, warnings, options)
            guard.appended(out, 0)
            while chunk := fh.read(_INFLATE_CHUNK):  # in chunks: a line with no end is dropped as it comes
                out += chunk
                guard.appended(out, len(out) - len(chunk))
            guard.end(out)
            return out
    except OSError as err:
        raise TraceInputError(path, f"cannot read: {err.strerror or err}") from None


class LongLines:
    """Drops every line longer than :attr:`ParseOptions.max_line_bytes` from a text buffer as the text is appended,
    as soon as the line is that long, so that it is never held whole: a crashed writer can leave gigabytes with no
    newline. The dropped line's newline stays, so the lines after it keep their numbers; each drop is a
    :func:`long_line_warning`, as the parsers give for a long line they see whole (one within a chunk of text is
    left to them)."""

    def __init__(self, path: str, warnings: list[str], options: ParseOptions) -> None:
        self.path, self.warnings, self.options = path, warnings, options
        self.line_start = 0  # where the unfinished line starts in the buffer
        self.dropped: Optional[int] = None  # bytes of the over-long line dropped so far; None outside one

    def appended(self, buf: bytearray, at: int) -> None:
        """Check ``buf[at:]``, just appended."""
        if self.dropped is not None:
            nl = buf.find(b"\n", at)
            cut = len(buf) if nl == -1 else nl
            self.dropped += cut - at
            del buf[at:cut]
            if nl == -1:
                return
            self._report(buf)
        nl = buf.rfind(b"\n", max(at, self.line_start))
        if nl != -1:
            self.line_start = nl + 1
        if len(buf) - self.line_start > self.options.max_line_bytes:
            self.dropped = len(buf) - self.line_start
            del buf[self.line_start:]

    def end(self, buf: bytearray) -> None:
        """The text ends (or a damaged gzip member cut it): a line being dropped is reported."""
        if self.dropped is not None:
            self._report(buf)
        self.line_start = len(buf)

    def _report(self, buf: bytearray) -> None:
        lineno = buf.count(b"\n", 0, self.line_start) + 1  # counted only here: long lines are rare
        self.warnings.append(long_line_warning(self.path, lineno, self.dropped or 0, self.options))
        self.dropped = None


def gunzip(path: str, raw: bytes, warnings: list[str], options: ParseOptions) -> bytearray:
    """All gzip members of ``raw``, decompressed. A corrupt member is left out (deflate output past damage cannot
    be trusted) with a warning, and reading resumes at the next member: DFTracer compresses in chunks, so one
    flipped bit costs one chunk, not the file."""
    # one growing buffer: a list of parts joined at the end would hold the text twice
    out = bytearray()
    guard = LongLines(path, warnings, options)
    pos = 0
    limit = options.text_limit(len(raw))
    produced = 0  # text decompressed, over-long lines included (the bomb limit counts them)
    view = memoryview(raw)
    while pos < len(raw):
        dec = gzip_decompressor()
        member = len(out)  # where this member's text starts in ``out``
        try:
            data: "bytes | memoryview" = view[pos:]
            while data and not dec.eof:
                text = dec.decompress(data, _INFLATE_CHUNK)
                produced += len(text)
                if produced > limit:
                    raise bomb(path, len(raw), options)
                out += text
                guard.appended(out, len(out) - len(text))
                data = dec.unconsumed_tail
            text = dec.flush()
            out += text
            guard.appended(out, len(out) - len(text))
        except ZLIB_ERRORS as err:
            del out[member:]  # the damaged member's text
            guard.line_start = min(guard.line_start, len(out))
            guard.end(out)
            nxt = raw.find(_GZIP_MEMBER, pos + 1)
            if not out and nxt == -1:
                raise TraceInputError(path, f"corrupt gzip data ({err})") from None
            lost = (nxt if nxt != -1 else len(raw)) - pos
            warnings.append(f"{path}: corrupt gzip data at byte {pos} ({err}); {lost} compressed bytes left out"
                            + (", reading went on at the next gzip member" if nxt != -1 else ""))
            if out and not out.endswith(b"\n"):
                out += b"\n"
                guard.line_start = len(out)
            if nxt == -1:
                break
            pos = nxt
            continue
        if not dec.eof:
            warnings.append(f"{path}: gzip stream truncated (unexpected end of file); read what was complete")
            break
        rest = dec.unused_data
        pos = len(raw) - len(rest)
        if rest and rest[:2] != b"\x1f\x8b":
            if rest.strip(b"\0"):
                raise TraceInputError(path, "corrupt gzip data (garbage after a gzip member)")
            break
    guard.end(out)
    return out


# ----------------------------------------------------------------------------------------------
# a file in blocks


def text_blocks(path: str, gz: bool, block_bytes: int, warnings: list[str], options: ParseOptions
                ) -> Iterator[tuple[int, bytes]]:
    """The file's text in blocks of whole lines of about ``block_bytes``, gzip members decompressed in turn, each
    with the number of lines before it (lines are counted once, here, for the warnings that name one).

    Damage is handled as :func:`gunzip` does: a corrupt member is left out with a warning and decompression
    resumes at the next member; a truncated stream keeps what was complete, with a warning. Memory stays bounded
    on hostile input: a line longer than a block is dropped as it streams (an empty line keeps the numbering),
    and text beyond :meth:`ParseOptions.text_limit` raises (a gzip bomb).
    """
    pending = Lines()
    size = os.path.getsize(path)
    limit = options.text_limit(size)
    produced = 0  # text bytes decompressed so far
    lines = 0  # newlines in the blocks already yielded
    long_at, long_len = 0, -1  # line number and bytes dropped so far of a line longer than a block; -1 outside one

    def dropped() -> None:
        nonlocal long_len
        warnings.append(long_line_warning(path, long_at, long_len, options))
        long_len = -1

    def take(text: bytes) -> None:
        nonlocal produced, long_len
        produced += len(text)
        if gz and produced > limit:
            raise bomb(path, size, options)
        if long_len != -1:  # its text is dropped up to its newline
            nl = text.find(b"\n")
            long_len += len(text) if nl == -1 else nl
            if nl == -1:
                return
            text = text[nl:]
            dropped()
        pending.add(text)

    def whole_lines() -> Iterator[tuple[int, bytes]]:
        nonlocal lines, long_at, long_len
        while pending.size >= block_bytes:
            block = pending.whole_lines()
            if block is None:  # one line longer than a block: not an event line of any tracer
                long_at, long_len = lines + 1, pending.size
                pending.clear()
                return
            before, lines = lines, lines + newlines(block)
            yield before, block

    with open(path, "rb") as fh:
        dec = gzip_decompressor() if gz else None
        offset = 0  # compressed bytes consumed before ``data``
        resync = False
        inside = False  # a member begun and not ended
        while True:
            data = fh.read(max(1 << 12, min(4 << 20, block_bytes // GZIP_RATIO)))
            if not data:
                break
            if dec is None:
                take(data)
            while dec is not None and data:
                if resync:
                    at = data.find(_GZIP_MEMBER)
                    if at == -1:
                        offset += max(0, len(data) - 2)
                        data = data[-2:]  # a magic number may straddle two reads
                        break
                    offset += at
                    data, resync = data[at:], False
                    dec = gzip_decompressor()
                try:
                    inside = True
                    take(dec.decompress(data, block_bytes))
                except ZLIB_ERRORS as err:
                    warnings.append(f"{path}: corrupt gzip data near byte {offset} ({err}); that gzip member is "
                                    "left out, reading went on at the next one")
                    pending.drop_part_line()  # a line cut by the damage cannot be trusted
                    resync, data = True, data[1:]
                    offset += 1
                    continue
                if dec.unconsumed_tail:  # a block's worth of text came out: hand it on before inflating more
                    offset += len(data) - len(dec.unconsumed_tail)
                    data = dec.unconsumed_tail
                    yield from whole_lines()
                    continue
                if not dec.eof:
                    offset += len(data)
                    break
                rest = dec.unused_data
                inside = False
                offset += len(data) - len(rest)
                data = rest
                if data and data[:2] != b"\x1f\x8b":
                    if data.strip(b"\0"):
                        raise TraceInputError(path, "corrupt gzip data (garbage after a gzip member)")
                    data = b""
                dec = gzip_decompressor()
            yield from whole_lines()
        if dec is not None and inside and not resync:
            warnings.append(f"{path}: gzip stream truncated (unexpected end of file); read what was complete")
        if long_len != -1:  # the text ended inside it (a crashed writer's last line)
            dropped()
    if pending.size:
        yield lines, pending.join()


class Lines:
    """Text as it streams in, held as the pieces that came: a block is joined from them once, so the text of a
    large trace is copied once on its way to the parser (a growing buffer cut into blocks copied it three times)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, text: bytes) -> None:
        if text:
            self.parts.append(text)
            self.size += len(text)

    def clear(self) -> None:
        self.parts, self.size = [], 0

    def join(self) -> bytes:
        out = b"".join(self.parts)
        self.clear()
        return out

    def _split(self) -> "tuple[int, int]":
        """(part, position) of the last newline held; (-1, -1) when none."""
        for i in range(len(self.parts) - 1, -1, -1):
            nl = self.parts[i].rfind(b"\n")
            if nl != -1:
                return i, nl
        return -1, -1

    def whole_lines(self) -> Optional[bytes]:
        """Every whole line held, taken out (the part line after them stays); None when no line is whole."""
        i, nl = self._split()
        if i == -1:
            return None
        last, after = self.parts[i], self.parts[i + 1:]
        out = b"".join([*self.parts[:i], memoryview(last)[: nl + 1]])
        self.clear()
        for part in (last[nl + 1:], *after):
            self.add(part)
        return out

    def drop_part_line(self) -> None:
        """Drop the text after the last newline (all of it when none is held)."""
        i, nl = self._split()
        kept = [*self.parts[:i], self.parts[i][: nl + 1]] if i != -1 else []
        self.clear()
        for part in kept:
            self.add(part)


# ----------------------------------------------------------------------------------------------
# where the event lines are


_NON_SPACE = re.compile(rb"\S")
_SPACE = b" \t\r\n"


def body_span(raw: "bytes | bytearray") -> "Optional[tuple[int, int, int, bool]]":
    """Where the event lines are, without copying the (possibly huge) buffer.

    Skips leading white space and the opening ``[``, a closing ``]`` and trailing comma, and a
    half-written last line. Returns ``(start, end, first_lineno, dropped_last_line)`` or ``None``
    when the file holds nothing but white space.
    """
    m = _NON_SPACE.search(raw)
    if m is None:
        return None
    start = m.start()
    if raw[start : start + 1] == b"[":
        m = _NON_SPACE.search(raw, start + 1)
        start = m.start() if m else len(raw)
    first_lineno = 1 + raw.count(b"\n", 0, start)
    end = len(raw)
    while end > start and raw[end - 1] in _SPACE:
        end -= 1
    if end > start and raw[end - 1 : end] == b"]":
        end -= 1
        while end > start and raw[end - 1] in _SPACE:
            end -= 1
    if end > start and raw[end - 1 : end] == b",":
        end -= 1
    dropped = False
    cut = raw.rfind(b"\n", start, end) + 1
    cut = max(cut, start)
    if end > cut:
        try:
            json.loads(raw[cut:end])
        except ValueError:
            log.debug("dropping a half-written last line (%d bytes)", end - cut)
            end, dropped = cut, True
    return start, end, first_lineno, dropped


def looks_timelogger(raw: "bytes | bytearray", start: int) -> bool:
    """TimeLogger files open with their ``timelogger`` metadata event (docs/wire-format.md)."""
    nl = raw.find(b"\n", start, start + 65536)
    return b'"timelogger"' in raw[start : start + 65536 if nl == -1 else nl]


def arrow_input(raw: "bytes | bytearray", start: int, end: int) -> "bytes | memoryview":
    """The event lines as the table parsers want them: one JSON object per line, no trailing commas."""
    nl = raw.find(b"\n", start, end)
    first = raw[start : end if nl == -1 else nl].rstrip()
    if first.endswith(b","):
        return re.sub(rb",[ \t]*(\r?\n)", rb"\1", raw[start:end])
    return memoryview(raw)[start:end]
