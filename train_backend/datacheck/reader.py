"""Reading a local data file row by row in bounded memory, whatever the file holds.

A file is read in chunks of CHUNK_BYTES; a line (a JSON-lines row, a CSV line) longer than the
limit is never joined: its bytes are counted and skipped, and it comes out as a `Line` without
data, so one 100 MB line costs no more memory than a chunk. Bytes are decoded as strict UTF-8
line by line, so an undecodable byte is named with its line and its offset in the file.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass

CHUNK_BYTES = 1 << 20
BOM = b"\xef\xbb\xbf"


@dataclass
class Line:
    number: int  # from 1
    offset: int  # of its first byte in the file
    size: int  # bytes, without the newline
    data: bytes | None  # None when longer than the limit (its bytes were skipped)


@dataclass
class RawRow:
    """One row as read, or why it could not be: `problem` is a code of `Problem` (reader.py)."""

    row: int  # from 1, among the file's rows (blank lines are not rows)
    line: int | None  # the line it starts on, for a file of lines
    size: int  # bytes (or characters, for rows not read from a file)
    value: dict | None = None
    problem: str | None = None  # encoding | not_json | not_object | too_long
    byte: int | None = None  # encoding: the offset of the bad byte in the file
    detail: str = ""


def lines(
    path: str, limit_bytes: int, chunk_bytes: int = CHUNK_BYTES, start: int = 0, end: int | None = None
) -> Iterator[Line]:
    """Every line of the file (CRLF or LF), the last one with or without its newline; with `start`
    (a line's first byte) and `end`, the lines that start in [start, end), numbered from 1."""
    number = pending_size = 0
    offset = start
    pending: list[bytes] = []
    too_long = False
    with open(path, "rb") as f:
        f.seek(start)
        while chunk := f.read(chunk_bytes):
            parts = chunk.split(b"\n")
            for part in parts[:-1]:
                if end is not None and offset >= end:
                    return
                size = pending_size + len(part)
                number += 1
                if too_long or size > limit_bytes:
                    yield Line(number, offset, size, None)
                else:
                    yield Line(number, offset, size, b"".join((*pending, part)) if pending else part)
                offset += size + 1
                pending, pending_size, too_long = [], 0, False
            tail = parts[-1]
            if tail:
                pending_size += len(tail)
                if not too_long:
                    pending.append(tail)
                    if pending_size > limit_bytes:  # never joined: counted, then dropped
                        too_long, pending = True, []
    if pending_size and (end is None or offset < end):
        yield Line(number + 1, offset, pending_size, None if too_long else b"".join(pending))


def line_start_after(path: str, at: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """The offset of the first line that starts at `at` or after it (the file's size if none)."""
    if at <= 0:
        return 0
    with open(path, "rb") as f:
        f.seek(at - 1)
        position = at - 1
        while chunk := f.read(chunk_bytes):
            newline = chunk.find(b"\n")
            if newline >= 0:
                return position + newline + 1
            position += len(chunk)
    return position


def decode(line: Line) -> tuple[str | None, int | None, str]:
    """(text, None, "") or (None, the bad byte's offset in the file, what it is)."""
    data = line.data or b""
    if line.number == 1 and line.offset == 0 and data.startswith(BOM):
        data = data[len(BOM) :]
    if data.endswith(b"\r"):
        data = data[:-1]
    try:
        return data.decode("utf-8"), None, ""
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        skipped = len(BOM) if line.offset == 0 and (line.data or b"").startswith(BOM) else 0
        return None, line.offset + skipped + exc.start, f"0x{bad.hex().upper()}"


def json_lines(path: str, limit_bytes: int, start: int = 0, end: int | None = None) -> Iterator[RawRow]:
    """A JSON-lines file's rows: one object per non-blank line (of the lines in [start, end))."""
    row = 0
    for line in lines(path, limit_bytes, start=start, end=end):
        if line.data is not None and not line.data.strip():
            continue
        row += 1
        if line.data is None:
            yield RawRow(row, line.number, line.size, problem="too_long", detail=f"{line.size:,} bytes")
            continue
        text, byte, bad = decode(line)
        if text is None:
            yield RawRow(row, line.number, line.size, problem="encoding", byte=byte, detail=bad)
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            yield RawRow(
                row, line.number, line.size, problem="not_json", detail=f"{exc}: {text.strip()[:80]!r}"
            )
            continue
        if not isinstance(value, dict):
            kind = type(value).__name__
            yield RawRow(
                row, line.number, line.size, problem="not_object", detail=f"a {kind}: {text.strip()[:80]!r}"
            )
            continue
        yield RawRow(row, line.number, line.size, value=value)


def starts_with_array(path: str) -> bool:
    """Whether a .json file holds one array (else it is read as JSON lines, as datasets does)."""
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(BOM).lstrip()
    return head.startswith(b"[")


def json_array(path: str, limit_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[RawRow]:
    """A file holding one JSON array of objects, read element by element; an element longer than
    the limit ends the reading there (its end cannot be found without reading it)."""
    decoder = json.JSONDecoder()
    buffer, consumed, row = "", 0, 0
    started = False
    incremental = _utf8_decoder()
    with open(path, "rb") as f:
        done = False
        while not done:
            chunk = f.read(chunk_bytes)
            try:
                buffer += incremental.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                yield RawRow(row + 1, None, 0, problem="encoding", byte=consumed + exc.start, detail="")
                return
            done = not chunk
            position = 0
            while True:
                while position < len(buffer) and buffer[position] in " \t\r\n,\ufeff":
                    position += 1
                if not started:
                    if position < len(buffer) and buffer[position] == "[":
                        started, position = True, position + 1
                        continue
                    if position < len(buffer) or done:
                        yield RawRow(1, None, 0, problem="not_json", detail="the file does not start with [")
                        return
                    break
                if position < len(buffer) and buffer[position] == "]":
                    return
                if position >= len(buffer):
                    break
                try:
                    value, end = decoder.raw_decode(buffer, position)
                except ValueError as exc:
                    if len(buffer) - position > limit_bytes:
                        yield RawRow(row + 1, None, len(buffer) - position, problem="too_long")
                        return
                    if done:
                        yield RawRow(row + 1, None, 0, problem="not_json", detail=str(exc))
                        return
                    break  # the element goes on in the next chunk
                row += 1
                size = end - position
                if not isinstance(value, dict):
                    yield RawRow(row, None, size, problem="not_object", detail=f"a {type(value).__name__}")
                elif size > limit_bytes:
                    yield RawRow(row, None, size, problem="too_long")
                else:
                    yield RawRow(row, None, size, value=value)
                position = end
            consumed += len(buffer[:position].encode("utf-8"))
            buffer = buffer[position:]


def csv_rows(path: str, limit_bytes: int) -> Iterator[RawRow]:
    """A CSV file's records as dicts keyed by its header; a record over the limit is refused."""
    csv.field_size_limit(limit_bytes)
    found: list[RawRow] = []
    last_line = [0]  # the line the reader has reached

    def texts() -> Iterator[str]:
        for line in lines(path, limit_bytes):
            last_line[0] = line.number
            if line.data is None:
                found.append(RawRow(0, line.number, line.size, problem="too_long"))
                return
            text, byte, bad = decode(line)
            if text is None:
                found.append(RawRow(0, line.number, line.size, problem="encoding", byte=byte, detail=bad))
                return
            yield text + "\n"

    header: list[str] | None = None
    row = 0
    try:
        for record in csv.reader(texts()):
            if header is None:
                header = record
                continue
            if not any(cell.strip() for cell in record):
                continue
            row += 1
            yield RawRow(row, last_line[0], sum(map(len, record)), value=dict(zip(header, record)))
    except csv.Error as exc:
        code = "too_long" if "field limit" in str(exc) else "not_csv"
        found.append(RawRow(0, last_line[0], 0, problem=code, detail=str(exc)))
    for problem in found[:1]:
        problem.row = row + 1
        yield problem


def _utf8_decoder():
    import codecs

    return codecs.getincrementaldecoder("utf-8")("strict")
