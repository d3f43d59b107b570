"""The data check's words: each data error and warning of one source, with its rows, what was
expected and the fix (docs/data.md lists them)."""

from __future__ import annotations

import math

from cockpit.config.schema import TrainConfig
from train_backend.data import LONG_ROW_FACTOR
from train_backend.datacheck.opening import Problem
from train_backend.datacheck.rows import SourceRows

REASONS = {
    "null": "null {column}",
    "empty": "empty or whitespace-only {column}",
    "no_turns": "no turns in {column}",
    "empty_completion": "an empty completion",
}


def errors(rows: SourceRows, max_length: int, limit: int) -> list[Problem]:
    out = []
    label, number, column = rows.opened.label, rows.opened.number, rows.column
    for code, named in sorted(rows.errors.items(), key=lambda item: _first_row(item[1])):
        detail = rows.error_detail.get(code, "")
        rows_at = where(named.rows, named.count)
        first = named.rows[0] if named.rows else {}
        byte = rows.error_detail.get(f"{code}:byte")
        message, expected, fix = {
            "encoding": (
                f"{at(first)}, byte {byte} ({detail}) is not UTF-8"
                + (f"; {named.count} lines have such bytes ({rows_at})" if named.count > 1 else ""),
                "UTF-8 text (the file looks like Latin-1 or Windows-1252)",
                f"convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8 {label} > utf8.jsonl, and point "
                "the config at the new file",
            ),
            "not_json": (
                f"{rows_at} {'is' if named.count == 1 else 'are'} not JSON ({detail})",
                'one JSON object per line, e.g. {"text": "..."}',
                "fix or remove those lines",
            ),
            "not_object": (
                f"{rows_at} {'is' if named.count == 1 else 'are'} JSON but not an object ({detail})",
                'one JSON object per line, e.g. {"text": "..."}',
                "fix or remove those lines",
            ),
            "not_csv": (f"{rows_at}: {detail}", "a CSV file with a header line", "fix the quoting there"),
            "too_long": (
                f"{rows_at} {'is' if named.count == 1 else 'are'} far longer than training.max_length "
                f"({max_length} tokens) allows: more than {limit:,} characters ({LONG_ROW_FACTOR} x "
                f"max_length){f'; {at(first)} is {detail}' if detail else ''}. The trainer would read and "
                f"tokenize all of it to keep its first {max_length} tokens",
                f"rows of at most {limit:,} characters",
                "split such a row into several, remove it, or raise training.max_length",
            ),
            "missing_column": (
                f"{rows_at} {'lacks' if named.count == 1 else 'lack'} a column the format {rows.format} "
                f"trains on ({at(first)}: {detail})",
                f"every row with {names(rows.needed)} ({rows.format_why})",
                f"add {names(rows.needed)} to those rows or remove them; if another column holds the data, "
                "set the source's text_field, messages_field, prompt_field or completion_field",
            ),
            "bad_value": (f"{rows_at}: {detail}", f"{column!r} as {rows.format}", "fix those rows"),
            "bad_chat": (
                f"{rows_at}: {detail}",
                'a list of turns like {"role": "user", "content": "..."} (system, user, assistant, tool)',
                "fix those rows or remove them",
            ),
            "template": (
                f"{rows_at}: the tokenizer's chat template refused it: {detail}",
                "turns the model's chat template accepts (its roles, in its order)",
                "fix those rows (e.g. the order of the roles) or remove them",
            ),
        }.get(code, (f"{rows_at}: {detail}", "", ""))
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


def warnings(rows: SourceRows, cfg: TrainConfig) -> list[Problem]:
    out = []
    label, number, column = rows.opened.label, rows.opened.number, rows.column
    for why, named in rows.dropped.items():
        out.append(
            Problem(
                "dropped",
                f"{named.count:,} of {rows.read:,} rows dropped: {REASONS[why].format(column=repr(column))} "
                f"({where(named.rows, named.count)})",
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
                f"{rows_text(rows.both_columns.count)} {have(rows.both_columns.count)} both {text!r} and "
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
                f"{rows_text(rows.empty_answers.count)} {have(rows.empty_answers.count)} an empty or "
                "whitespace-only assistant turn "
                f"({where(rows.empty_answers.rows, rows.empty_answers.count)}): trained on the answers, "
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
                f"{rows_text(rows.no_answer.count)} {have(rows.no_answer.count)} no assistant turn "
                f"({where(rows.no_answer.rows, rows.no_answer.count)}): on the answers they train nothing",
                fix="add the answers, or remove those rows",
                source=number,
                file=label,
                rows=rows.no_answer.rows,
                count=rows.no_answer.count,
            )
        )
    out.extend(_truncation(rows))
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


def at(ref: dict, several: bool = True) -> str:
    source = f"source {ref['source']} " if "source" in ref and several else ""
    if ref.get("line") is not None:
        return f"{source}line {ref['line']}"
    return f"{source}row {ref.get('row', '?')}"


def where(refs: list[dict], count: int) -> str:
    """`line 7`, `lines 3, 9, 12`, `rows 3, 9, 12, 40, 41 and 17 more`."""
    if not refs:
        return f"{count} rows"
    word = "line" if refs[0].get("line") is not None else "row"
    numbers = ", ".join(str(r.get(word)) for r in refs)
    more = f" and {count - len(refs):,} more" if count > len(refs) else ""
    return f"{word}{'s' if count > 1 else ''} {numbers}{more}"


def round_up(tokens: int) -> int:
    """A max_length that holds `tokens`: the next multiple of 64."""
    return max(64, math.ceil(tokens / 64) * 64)


def rows_text(count: int) -> str:
    return f"{count:,} row{'' if count == 1 else 's'}"


def have(count: int) -> str:
    return "has" if count == 1 else "have"


def names(columns: list[str]) -> str:
    return " and ".join(repr(c) for c in columns)


def _first_row(named) -> int:
    return named.rows[0]["row"] if named.rows else 0


def mix_errors(formats: set[str], tallies: list[SourceRows], train_on: str) -> list[Problem]:
    """What the sources together cannot train: two formats; answers on rows without answers."""
    out = []
    if len(formats) > 1:
        named = ", ".join(f"source {t.opened.number}: {t.format}" for t in tallies)
        out.append(
            Problem(
                "formats",
                f"the sources are in different formats ({named}); one run trains on one format",
                expected="every source in the same format",
                fix="convert the odd source's rows, or set each source's format and fields so they agree",
            )
        )
    if train_on == "answers" and formats & {"text", "tokens"}:
        out.append(
            Problem(
                "train_on",
                f"dataset.train_on: answers, but the rows are {', '.join(sorted(formats))}: text and tokens "
                "have no answers to tell from prompts",
                expected="chat rows (messages) or prompt/completion rows",
                fix="set dataset.train_on: all (every token trains), or give chat or prompt/completion rows",
            )
        )
    return out


def duplicates_warning(dupes: dict, several: bool) -> Problem:
    count = dupes["count"]
    pairs = ", ".join(f"{at(d['copy'], several)} = {at(d['of'], several)}" for d in dupes["rows"][:3])
    return Problem(
        "duplicates",
        f"{rows_text(count)} {'is an exact copy' if count == 1 else 'are exact copies'} of an earlier row "
        f"({pairs}{', ...' if count > 3 else ''}); each copy trains that row once more",
        fix="remove the copies, unless the repetition is meant",
        count=count,
    )


def _truncation(rows: SourceRows) -> list[Problem]:
    """The rows max_length cuts, and whether the cut takes their answers."""
    out: list[Problem] = []
    label, number = rows.opened.label, rows.opened.number
    lengths = rows.lengths
    if lengths.truncated.count:
        max_length = lengths.max_length
        cut = lengths.truncated
        message = (
            f"{rows_text(cut.count)} {'is' if cut.count == 1 else 'are'} longer than training.max_length "
            f"({max_length}) and cut ({where(cut.rows, cut.count)}); the longest is {lengths.longest:,} "
            f"tokens ({at(lengths.longest_row or {})}); {lengths.cut_tokens:,} tokens are cut off in all"
        )
        if lengths.answer_lost.count:
            message += (
                f". In {lengths.answer_lost.count:,} of them the cut takes every answer token: "
                f"{'it trains' if lengths.answer_lost.count == 1 else 'they train'} nothing "
                f"({where(lengths.answer_lost.rows, lengths.answer_lost.count)})"
            )
        if lengths.answer_cut.count:
            message += (
                f". In {lengths.answer_cut.count:,} the cut takes the end of the answer "
                f"({where(lengths.answer_cut.rows, lengths.answer_cut.count)})"
            )
        elif rows.format == "text":
            message += ". The cut takes the end of each such text"
        wanted = round_up(lengths.longest)
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
    return out
