"""A big JSON-lines file checked by several processes, one per core, each over a range of whole
lines, their tallies merged into one source's as if one process had read it all.

The format is decided first, from the file's first rows, and handed to every worker; each numbers
its rows and lines from 1, and the merge shifts them by the rows and lines of the ranges before
it. Forked after the tokenizer is loaded and before it has run, so the workers share its memory
and its thread pool is not yet started.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from train_backend.datacheck import reader
from train_backend.datacheck.lengths import ROWS_NAMED, Named
from train_backend.datacheck.rows import FORMAT_ROWS, PREVIEW_ROWS, SourceRows

PARALLEL_BYTES = 64 << 20  # a JSON-lines file this big is read by several processes
WORKERS_MAX = 8

_FORKED: dict[str, Any] = {}  # what each worker inherits: the factory of its SourceRows


@dataclass
class Range:
    start: int
    end: int | None


def workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(WORKERS_MAX, cores))


def wanted(rows: SourceRows) -> bool:
    opened = rows.opened
    return (
        opened.kind in ("jsonl", "json")
        and opened.rows is not None
        and (opened.bytes or 0) >= PARALLEL_BYTES
        and rows.max_rows is None
        and workers() > 1
        and not reader.starts_with_array(str(opened.file))
    )


def ranges(path: str, size: int, count: int) -> list[Range]:
    starts = sorted({reader.line_start_after(path, size * i // count) for i in range(count)})
    return [Range(a, b) for a, b in zip(starts, [*starts[1:], None])]


def run(rows: SourceRows, make_rows: Callable[[], SourceRows]) -> None:
    """Read `rows`' source in ranges, each in a worker with a SourceRows from `make_rows()` told the
    format `rows` decided; merge their tallies into `rows`."""
    path, size = str(rows.opened.file), int(rows.opened.bytes or 0)
    columns: dict[str, None] = {}
    for number, raw in enumerate(reader.json_lines(path, rows.limit_chars), 1):
        columns.update(dict.fromkeys(raw.value or {}))
        if number >= FORMAT_ROWS:
            break
    rows.decide_columns(list(columns))
    _FORKED.update(make_rows=make_rows, decided=rows.decided(), path=path)
    parts = ranges(path, size, workers())
    context = multiprocessing.get_context("fork")
    with context.Pool(len(parts)) as pool:
        states = pool.map(_work, parts)
    _FORKED.clear()
    row_shift = line_shift = 0
    for state in states:
        absorb(rows, state, row_shift, line_shift)
        row_shift += state["rows"]
        line_shift += state["lines"]


def _work(part: Range) -> dict[str, Any]:
    rows: SourceRows = _FORKED["make_rows"]()
    rows.decide(*_FORKED["decided"])
    last_line = 0
    for raw in reader.json_lines(_FORKED["path"], rows.limit_chars, part.start, part.end):
        rows.feed(raw)
        last_line = raw.line or last_line
    rows.finish()
    lines = _lines_in(_FORKED["path"], part) if part.end is not None else last_line
    return {"rows": rows.read, "lines": lines, **rows.state()}


def _lines_in(path: str, part: Range) -> int:
    """Newlines in [start, end): the range's lines (it ends at a line start)."""
    count, at = 0, part.start
    with open(path, "rb") as f:
        f.seek(part.start)
        while at < (part.end or 0):
            chunk = f.read(min(reader.CHUNK_BYTES, (part.end or 0) - at))
            if not chunk:
                break
            count += chunk.count(b"\n")
            at += len(chunk)
    return count


def absorb(rows: SourceRows, state: dict[str, Any], row_shift: int, line_shift: int) -> None:
    """One worker's tallies into `rows`, its row and line numbers shifted."""

    def moved(ref: dict[str, Any] | None) -> dict[str, Any] | None:
        if ref is None:
            return None
        out = {**ref, "row": ref["row"] + row_shift}
        if ref.get("line") is not None:
            out["line"] = ref["line"] + line_shift
        return out

    def join(mine: Named, theirs: Named) -> None:
        mine.count += theirs.count
        mine.rows.extend(moved(r) for r in theirs.rows[: ROWS_NAMED - len(mine.rows)])

    rows.read += state["read"]
    rows.kept += state["kept"]
    rows.bytes_read += state["bytes_read"]
    for name, count in state["columns"].items():
        rows.columns[name] = rows.columns.get(name, 0) + count
    for code, named in state["errors"].items():
        for key in (code, f"{code}:byte"):
            if key in state["error_detail"] and key not in rows.error_detail:
                rows.error_detail[key] = state["error_detail"][key]
        join(rows.errors.setdefault(code, Named()), named)
    for why, named in state["dropped"].items():
        join(rows.dropped.setdefault(why, Named()), named)
    for name in ("empty_answers", "no_answer", "both_columns"):
        join(getattr(rows, name), state[name])
    for ref, row in state["preview"][: PREVIEW_ROWS - len(rows.preview)]:
        rows.preview.append((moved(ref), row))
    if rows.first_truncated is None and state["first_truncated"] is not None:
        ref, row = state["first_truncated"]
        rows.first_truncated = (moved(ref), row)
    theirs, mine = state["lengths"], rows.lengths
    mine.sample.update(theirs.sample)
    for name in ("exact_rows", "exact_used", "sample_tokens", "sample_chars", "estimated_rows"):
        setattr(mine, name, getattr(mine, name) + getattr(theirs, name))
    mine.estimated_chars += theirs.estimated_chars
    mine.cut_tokens += theirs.cut_tokens
    mine.answers_looked_at += theirs.answers_looked_at
    if theirs.longest > mine.longest:
        mine.longest, mine.longest_row = theirs.longest, moved(theirs.longest_row)
    for name in ("truncated", "answer_lost", "answer_cut"):
        join(getattr(mine, name), getattr(theirs, name))
    hashes, refs = state["duplicates"]
    rows.duplicates.extend(hashes, [r + row_shift for r in refs])
