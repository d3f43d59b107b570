"""The whole check: every source opened and streamed, its rows counted and measured, the mix,
the data errors (each with its file, rows, what was expected and the fix) and the warnings, and a
few rows through the template with the loss mask: one report, plain data (docs/data.md)."""

from __future__ import annotations

import math
import resource
import time
from collections import Counter
from collections.abc import Callable

from cockpit.config.schema import TrainConfig
from cockpit.config.sources import mix_counts
from train_backend.data import LONG_ROW_FACTOR
from train_backend.datacheck import preview as preview_mod
from train_backend.datacheck.lengths import Lengths, histogram, load_tokenizer, percentiles, sample_every
from train_backend.datacheck.opening import Problem, open_source
from train_backend.datacheck.rows import Duplicates, SourceRows

REPORT_VERSION = 1
PREVIEW_PER_SOURCE = 2
PREVIEW_MAX = 6
REASONS = {
    "null": "null {column}",
    "empty": "empty or whitespace-only {column}",
    "no_turns": "no turns in {column}",
    "empty_completion": "an empty completion",
}


def run_check(cfg: TrainConfig, progress: Callable[[dict], None] | None = None) -> dict:
    started = time.monotonic()
    max_length = cfg.training.max_length
    limit = LONG_ROW_FACTOR * max_length
    found = load_tokenizer(cfg)
    tokenizer = found.tokenizer
    train_on = getattr(cfg.dataset, "train_on", "auto")
    answers = preview_mod.answer_cut_reader(tokenizer, train_on, max_length) if tokenizer else None
    duplicates = Duplicates()
    several = cfg.dataset.sources is not None
    specs = cfg.dataset.source_list()
    problems: list[Problem] = []
    warnings: list[Problem] = []
    sources: list[dict] = []
    tallies: list[SourceRows | None] = []
    for number, spec in enumerate(specs, 1):
        split_key = f"dataset.sources[{number}].split" if several else "dataset.split"
        opened = open_source(number, spec, limit, split_key)
        entry = {
            "number": number,
            "path": opened.label,
            "kind": opened.kind,
            "file": opened.file,
            "bytes": opened.bytes,
            "splits": opened.splits,
            "split": spec.split,
            "weight": spec.weight,
            "samples": spec.samples,
        }
        sources.append(entry)
        if opened.problem is not None:
            opened.problem.source, opened.problem.file = number, opened.label
            problems.append(opened.problem)
            tallies.append(None)
            continue
        lengths = Lengths(max_length, every=sample_every(opened.bytes, opened.num_rows))
        max_rows = cfg.dataset.max_samples if not several else None
        rows = SourceRows(opened, tokenizer, lengths, duplicates, limit, max_rows, answers)

        def said(read: int, read_bytes: int, number=number, total=opened.bytes) -> None:
            if progress is not None:
                progress(
                    {"source": number, "rows_read": read, "bytes_read": read_bytes, "bytes_total": total}
                )

        rows.run(said)
        tallies.append(rows)
        entry.update(_source_part(rows, tokenizer is not None))
        problems.extend(_errors(rows, max_length, limit))
        warnings.extend(_warnings(rows, cfg))
    formats = {t.format for t in tallies if t is not None and t.format}
    if len(formats) > 1:
        named = ", ".join(f"source {t.opened.number}: {t.format}" for t in tallies if t is not None)
        problems.append(
            Problem(
                "formats",
                f"the sources are in different formats ({named}); one run trains on one format",
                expected="every source in the same format",
                fix="convert the odd source's rows, or set each source's format and fields so they agree",
            )
        )
    if train_on == "answers" and formats & {"text", "tokens"}:
        problems.append(
            Problem(
                "train_on",
                f"dataset.train_on: answers, but the rows are {', '.join(sorted(formats))}: text and tokens "
                "have no answers to tell from prompts",
                expected="chat rows (messages) or prompt/completion rows",
                fix="set dataset.train_on: all (every token trains), or give chat or prompt/completion rows",
            )
        )
    if tokenizer is None:
        warnings.append(Problem("tokenizer", f"token lengths not counted: no tokenizer ({found.problem})"))
    totals = _totals(cfg, tallies, sources, tokenizer is not None)
    dupes = duplicates.found()
    if dupes["count"]:
        several = len(specs) > 1
        pairs = ", ".join(f"{_at(d['copy'], several)} = {_at(d['of'], several)}" for d in dupes["rows"][:3])
        warnings.append(
            Problem(
                "duplicates",
                f"{_rows(dupes['count'])} {'is an exact copy' if dupes['count'] == 1 else 'are exact copies'}"
                f" of an earlier row ({pairs}"
                f"{', ...' if dupes['count'] > 3 else ''}); each copy trains that row once more",
                fix="remove the copies, unless the repetition is meant",
                count=dupes["count"],
            )
        )
    report = {
        "version": REPORT_VERSION,
        "ok": not problems,
        "max_length": max_length,
        "long_row_chars": limit,
        "train_on": train_on,
        "tokenizer": {
            "source": found.source,
            "problem": found.problem or None,
            "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        },
        "format": next(iter(formats)) if len(formats) == 1 else None,
        "sources": sources,
        "totals": totals,
        "duplicates": dupes,
        "preview": _preview(tallies, tokenizer, train_on, max_length),
        "problems": [p.to_dict() for p in problems],
        "warnings": [w.to_dict() for w in warnings],
        "elapsed_s": round(time.monotonic() - started, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    return report


def _source_part(rows: SourceRows, counted: bool) -> dict:
    dropped = [
        {"reason": REASONS[why].format(column=repr(rows.column)), "count": n.count, "rows": n.rows}
        for why, n in rows.dropped.items()
    ]
    errors = sum(n.count for n in rows.errors.values())
    return {
        "format": rows.format,
        "format_why": rows.format_why,
        "columns_used": rows.used_columns(),
        "columns_ignored": rows.ignored_columns(),
        "rows": {
            "read": rows.read,
            "kept": rows.kept,
            "dropped": sum(d["count"] for d in dropped),
            "refused": errors,
            "unused": rows.unused,
        },
        "dropped": dropped,
        "empty_answers": {"count": rows.empty_answers.count, "rows": rows.empty_answers.rows},
        "no_answer": {"count": rows.no_answer.count, "rows": rows.no_answer.rows},
        "tokens": rows.lengths.to_dict() if counted else None,
    }


def _totals(cfg: TrainConfig, tallies: list, sources: list[dict], counted: bool) -> dict:
    live = [(t, s) for t, s in zip(tallies, sources) if t is not None]
    kept = [t.kept for t, _ in live]
    counts = mix_counts(kept, [t.spec for t, _ in live]) if live else []
    mix_rows = sum(counts)
    per_epoch = 0
    weighted: Counter = Counter()
    for (rows, entry), count in zip(live, counts):
        share = count / rows.kept if rows.kept else 0.0
        entry["mix"] = {"rows": count, "share": round(count / mix_rows, 4) if mix_rows else 0.0}
        per_epoch += rows.lengths.used_tokens() * share
        for length, n in rows.lengths.sample.items():
            weighted[length] += n * rows.lengths.every * share
    held = 0
    if cfg.dataset.eval_fraction is not None and mix_rows:
        held = max(1, round(mix_rows * cfg.dataset.eval_fraction))
        per_epoch *= (mix_rows - held) / mix_rows
    rounded = Counter({k: max(1, round(v)) for k, v in weighted.items() if v > 0})
    out = {
        "rows_read": sum(t.read for t, _ in live),
        "rows_kept": sum(kept),
        "mix_rows": mix_rows,
        "eval_held_out_rows": held,
        "train_rows": mix_rows - held,
        "tokens_per_epoch": int(per_epoch) if counted and live else None,
        "exact": all(t.lengths.estimated_rows == 0 for t, _ in live),
        "max": max((t.lengths.longest for t, _ in live), default=0),
        "truncated": sum(t.lengths.truncated.count for t, _ in live),
        "histogram": histogram(rounded, cfg.training.max_length) if counted else [],
    }
    out.update(percentiles(rounded) if counted else {})
    return out


def _errors(rows: SourceRows, max_length: int, limit: int) -> list[Problem]:
    out = []
    label, number, column = rows.opened.label, rows.opened.number, rows.column
    for code, named in rows.errors.items():
        detail = rows.error_detail.get(code, "")
        where = _where(named.rows, named.count)
        first = named.rows[0] if named.rows else {}
        byte = rows.error_detail.get(f"{code}:byte")
        message, expected, fix = {
            "encoding": (
                f"{_at(first)}, byte {byte} ({detail}) is not UTF-8"
                + (f"; {named.count} lines have such bytes ({where})" if named.count > 1 else ""),
                "UTF-8 text (the file looks like Latin-1 or Windows-1252)",
                f"convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8 {label} > utf8.jsonl, and point "
                "the config at the new file",
            ),
            "not_json": (
                f"{where} {'is' if named.count == 1 else 'are'} not JSON ({detail})",
                'one JSON object per line, e.g. {"text": "..."}',
                "fix or remove those lines",
            ),
            "not_object": (
                f"{where} {'is' if named.count == 1 else 'are'} JSON but not an object ({detail})",
                'one JSON object per line, e.g. {"text": "..."}',
                "fix or remove those lines",
            ),
            "not_csv": (f"{where}: {detail}", "a CSV file with a header line", "fix the quoting there"),
            "too_long": (
                f"{where} {'is' if named.count == 1 else 'are'} far longer than training.max_length "
                f"({max_length} tokens) allows: more than {limit:,} characters ({LONG_ROW_FACTOR} x "
                f"max_length){f'; {_at(first)} is {detail}' if detail else ''}. The trainer would read and "
                f"tokenize all of it to keep its first {max_length} tokens",
                f"rows of at most {limit:,} characters",
                "split such a row into several, remove it, or raise training.max_length",
            ),
            "missing_column": (
                f"{where} {'lacks' if named.count == 1 else 'lack'} a column the format {rows.format} trains "
                f"on ({_at(first)}: {detail})",
                f"every row with {_names(rows.needed)} ({rows.format_why})",
                f"add {_names(rows.needed)} to those rows or remove them; if another column holds the data, "
                "set the source's text_field, messages_field, prompt_field or completion_field",
            ),
            "bad_value": (f"{where}: {detail}", f"{column!r} as {rows.format}", "fix those rows"),
            "bad_chat": (
                f"{where}: {detail}",
                'a list of turns like {"role": "user", "content": "..."} (system, user, assistant, tool)',
                "fix those rows or remove them",
            ),
            "template": (
                f"{where}: the tokenizer's chat template refused it: {detail}",
                "turns the model's chat template accepts (its roles, in its order)",
                "fix those rows (e.g. the order of the roles) or remove them",
            ),
        }.get(code, (f"{where}: {detail}", "", ""))
        problem = Problem(
            code, message, fix, expected, number, label, named.rows, named.count, int(byte) if byte else None
        )
        out.append(problem)
    if rows.format and rows.kept == 0 and not rows.errors:
        out.append(
            Problem(
                "no_rows",
                f"no row can be trained on ({rows.read} read)",
                expected=f"rows with {column!r}",
                fix="check the file and the format",
                source=number,
                file=label,
            )
        )
    return out


def _warnings(rows: SourceRows, cfg: TrainConfig) -> list[Problem]:
    out = []
    label, number, column = rows.opened.label, rows.opened.number, rows.column
    for why, named in rows.dropped.items():
        out.append(
            Problem(
                "dropped",
                f"{named.count:,} of {rows.read:,} rows dropped: {REASONS[why].format(column=repr(column))} "
                f"({_where(named.rows, named.count)})",
                fix="fill those rows or remove them",
                source=number,
                file=label,
                rows=named.rows,
                count=named.count,
            )
        )
    if rows.both_columns.count:
        text = rows.spec.text_field
        out.append(
            Problem(
                "both_columns",
                f"{_rows(rows.both_columns.count)} {_have(rows.both_columns.count)} both {text!r} and "
                f"{column!r}: training uses "
                f"{column!r} (chat turns) and ignores {text!r}",
                fix=f"set format: text to train on {text!r} instead, or drop the column you do not mean",
                source=number,
                file=label,
                rows=rows.both_columns.rows,
                count=rows.both_columns.count,
            )
        )
    if rows.empty_answers.count:
        out.append(
            Problem(
                "empty_answers",
                f"{_rows(rows.empty_answers.count)} {_have(rows.empty_answers.count)} an empty or "
                "whitespace-only assistant turn "
                f"({_where(rows.empty_answers.rows, rows.empty_answers.count)}): trained on the answers, "
                "such a turn teaches the model to answer with nothing",
                fix="write those answers, or remove the empty turns",
                source=number,
                file=label,
                rows=rows.empty_answers.rows,
                count=rows.empty_answers.count,
            )
        )
    if rows.no_answer.count:
        out.append(
            Problem(
                "no_answer",
                f"{_rows(rows.no_answer.count)} {_have(rows.no_answer.count)} no assistant turn "
                f"({_where(rows.no_answer.rows, rows.no_answer.count)}): on the answers they train nothing",
                fix="add the answers, or remove those rows",
                source=number,
                file=label,
                rows=rows.no_answer.rows,
                count=rows.no_answer.count,
            )
        )
    lengths = rows.lengths
    if lengths.truncated.count:
        max_length = lengths.max_length
        cut = lengths.truncated
        message = (
            f"{_rows(cut.count)} {'is' if cut.count == 1 else 'are'} longer than training.max_length "
            f"({max_length}) and cut ({_where(cut.rows, cut.count)}); the longest is {lengths.longest:,} "
            f"tokens ({_at(lengths.longest_row or {})}); {lengths.cut_tokens:,} tokens are cut off in all"
        )
        if lengths.answer_lost.count:
            message += (
                f". In {lengths.answer_lost.count:,} of them the cut takes every answer token: "
                f"{'it trains' if lengths.answer_lost.count == 1 else 'they train'} nothing "
                f"({_where(lengths.answer_lost.rows, lengths.answer_lost.count)})"
            )
        if lengths.answer_cut.count:
            message += (
                f". In {lengths.answer_cut.count:,} the cut takes the end of the answer "
                f"({_where(lengths.answer_cut.rows, lengths.answer_cut.count)})"
            )
        elif rows.format == "text":
            message += ". The cut takes the end of each such text"
        wanted = _round_up(lengths.longest)
        out.append(
            Problem(
                "truncated",
                message,
                fix=f"raise training.max_length (to {wanted} keeps every row whole), shorten those rows, or "
                "remove them",
                source=number,
                file=label,
                rows=lengths.truncated.rows,
                count=lengths.truncated.count,
            )
        )
    if rows.unused:
        out.append(
            Problem(
                "max_samples",
                f"dataset.max_samples: {cfg.dataset.max_samples}: {rows.unused:,} more usable rows are read "
                "and checked, not trained on",
                source=number,
                file=label,
                count=rows.unused,
            )
        )
    return out


def _preview(tallies: list, tokenizer, train_on: str, max_length: int) -> list[dict]:
    if tokenizer is None:
        return []
    chosen: list[tuple[int, dict, dict, str]] = []
    for rows in tallies:
        if rows is None or rows.format is None:
            continue
        for ref, row in rows.preview[:PREVIEW_PER_SOURCE]:
            chosen.append((rows.opened.number, ref, row, rows.format))
    cut = next((t for t in tallies if t is not None and t.first_truncated is not None), None)
    if cut is not None and all(c[1] != cut.first_truncated[0] or c[0] != cut.opened.number for c in chosen):
        chosen = [*chosen[: PREVIEW_MAX - 1], (cut.opened.number, *cut.first_truncated, cut.format)]
    out = []
    for number, ref, row, fmt in chosen[:PREVIEW_MAX]:
        shown = preview_mod.masked(tokenizer, row, fmt, train_on, max_length)
        out.append({"source": number, **ref, "format": fmt, **shown})
    return out


def _at(ref: dict, several: bool = True) -> str:
    source = f"source {ref['source']} " if "source" in ref and several else ""
    if ref.get("line") is not None:
        return f"{source}line {ref['line']}"
    return f"{source}row {ref.get('row', '?')}"


def _where(refs: list[dict], count: int) -> str:
    """`line 7`, `lines 3, 9, 12`, `rows 3, 9, 12, 40, 41 and 17 more`."""
    if not refs:
        return f"{count} rows"
    word = "line" if refs[0].get("line") is not None else "row"
    numbers = ", ".join(str(r.get(word)) for r in refs)
    more = f" and {count - len(refs):,} more" if count > len(refs) else ""
    return f"{word}{'s' if count > 1 else ''} {numbers}{more}"


def _round_up(tokens: int) -> int:
    """A max_length that holds `tokens`: the next multiple of 64."""
    return max(64, math.ceil(tokens / 64) * 64)


def _rows(count: int) -> str:
    return f"{count:,} row{'' if count == 1 else 's'}"


def _have(count: int) -> str:
    return "has" if count == 1 else "have"


def _names(columns: list[str]) -> str:
    return " and ".join(repr(c) for c in columns)
