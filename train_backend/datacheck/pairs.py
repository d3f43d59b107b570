"""The data check of a preference objective (dpo, kto, orpo: docs/preference.md): every row read as the
trainer reads it (train_backend.preference.rows, so both refuse the same rows with the same words),
its tokens counted as TRL counts them and what the cuts take (train_backend.preference.lengths).

Data errors: a missing column (`rejected`, a KTO `label`), chosen equal to rejected, a label that is
not a boolean, a value that is neither text nor chat turns, a row that is not JSON. Warnings: prompts
`preference.max_prompt_length` cuts (their start goes), answers `training.max_length` cuts (their end
goes), rows whose prompt leaves no room for an answer (dropped). The report has the SFT check's shape
(train_backend.datacheck.check) and a `preference` part."""

from __future__ import annotations

import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cockpit.config.schema import TrainConfig
from train_backend.data import LONG_ROW_FACTOR
from train_backend.datacheck import REPORT_VERSION
from train_backend.datacheck.lengths import histogram, load_tokenizer, percentiles
from train_backend.datacheck.opening import Opened, Problem, open_source
from train_backend.preference import data as pref_data
from train_backend.preference import lengths as lengths_mod
from train_backend.preference import rows as rows_mod

SHOWN_ROWS = 5  # rows named a problem
MESSAGES = {  # code -> (what, expected, fix); {column} is the column's name
    "missing_column": (
        "no column the objective needs",
        "every row with the objective's columns",
        "add it to those rows, or name the column that holds it (preference.*_field, dataset.prompt_field)",
    ),
    "same_answers": (
        "the chosen answer equal to the rejected one (nothing to prefer)",
        "a chosen answer that differs from the rejected one",
        "fix or remove those rows",
    ),
    "bad_label": (
        "a label that is not a boolean",
        "label true (desirable) or false (undesirable), as JSON booleans",
        'write the label as true or false (not "true", 1 or "good")',
    ),
    "bad_chat": (
        "malformed chat turns",
        "a list of {role, content} turns",
        "fix those turns",
    ),
    "bad_value": (
        "values of the wrong kind",
        "all text or all lists of chat turns",
        "give prompt and answers all as text or all as turns",
    ),
}


@dataclass
class Tally:
    """What reading one source found."""

    records: list[dict[str, Any]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)  # each record's row (1-based)
    read: int = 0
    unused: int = 0
    refused: dict[str, list[int]] = field(default_factory=dict)  # code -> rows
    detail: dict[str, str] = field(default_factory=dict)  # code -> the first row's words
    dropped: dict[str, list[int]] = field(default_factory=dict)  # reason -> rows


def run_check(cfg: TrainConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The report of a preference objective's data (one source: cockpit.config.preference)."""
    started = time.monotonic()
    found = load_tokenizer(cfg)
    spec = cfg.dataset.source_list()[0]
    if spec.path == "demo":
        import dataclasses

        spec = dataclasses.replace(spec, path=pref_data.demo_path(cfg.objective))
    opened = open_source(1, spec, LONG_ROW_FACTOR * cfg.training.max_length, "dataset.split")
    entry = opened.entry()
    problems: list[Problem] = []
    warnings: list[Problem] = []
    part: dict[str, Any] = {"objective": cfg.objective}
    totals: dict[str, Any] = {}
    duplicates: dict[str, Any] = {"count": 0, "checked_rows": 0}
    if opened.problem is not None:
        opened.problem.source, opened.problem.file = 1, opened.label
        problems.append(opened.problem)
    else:
        tally = read_source(cfg, opened, progress)
        problems += refusals(tally, opened.label)
        entry.update(_rows_part(cfg, tally))
        duplicates, repeated = copies(tally, opened.label)
        warnings += repeated
        if found.tokenizer is not None and tally.records:
            tokens = lengths_mod.measure(tally.records, found.tokenizer, _answer_keys(cfg))
            part, totals, cut_warnings = measured(cfg, tokens, tally.numbers)
            warnings += cut_warnings
        elif found.tokenizer is None:
            said = f"token lengths not counted: no tokenizer ({found.problem})"
            warnings.append(Problem("tokenizer", said))
    return {
        "version": REPORT_VERSION,
        "ok": not problems,
        "max_length": cfg.training.max_length,
        "long_row_chars": LONG_ROW_FACTOR * cfg.training.max_length,
        "train_on": "answers",
        "tokenizer": {
            "source": found.source,
            "problem": found.problem or None,
            "chat_template": bool(getattr(found.tokenizer, "chat_template", None)),
        },
        "format": pref_data.FORMAT,
        "sources": [entry],
        "totals": totals,
        "duplicates": duplicates,
        "preview": [],
        "preference": part,
        "problems": [p.to_dict() for p in problems],
        "warnings": [w.to_dict() for w in warnings],
        "elapsed_s": round(time.monotonic() - started, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def read_source(cfg: TrainConfig, opened: Opened, progress: Callable[[dict], None] | None) -> Tally:
    """Every row through the trainer's reading (train_backend.preference.rows)."""
    fields = rows_mod.Fields.of(cfg)
    tally = Tally()
    limit = cfg.dataset.max_samples
    assert opened.rows is not None
    for raw in opened.rows():
        if limit is not None and tally.read >= limit:
            tally.unused += 1
            continue
        tally.read += 1
        if raw.problem is not None or raw.value is None:
            code = str(raw.problem or "not_object")
            tally.refused.setdefault(code, []).append(raw.row)
            tally.detail.setdefault(code, raw.detail or code)
            continue
        checked = rows_mod.read(raw.value, fields)
        if checked.record is not None:
            tally.records.append(checked.record)
            tally.numbers.append(raw.row)
        elif checked.drop is not None:
            tally.dropped.setdefault(checked.drop, []).append(raw.row)
        else:
            tally.refused.setdefault(str(checked.code), []).append(raw.row)
            tally.detail.setdefault(str(checked.code), checked.detail)
        if progress is not None and tally.read % 1000 == 0:
            progress({"source": 1, "rows_read": tally.read, "bytes_read": 0, "bytes_total": opened.bytes})
    return tally


def refusals(tally: Tally, label: str) -> list[Problem]:
    """One data error a kind of refused row: how many, the first rows, the first one's words."""
    out = []
    for code, numbers in sorted(tally.refused.items(), key=lambda item: item[1][0]):
        what, expected, fix = MESSAGES.get(code, ("a row that cannot be read", "", "fix those rows"))
        first = f"row {numbers[0]}: {tally.detail.get(code, '')}"
        out.append(
            Problem(
                code,
                f"{len(numbers):,} row{'' if len(numbers) == 1 else 's'} with {what} ({first})",
                fix=fix,
                expected=expected,
                source=1,
                file=label,
                rows=[{"row": n} for n in numbers[:SHOWN_ROWS]],
                count=len(numbers),
            )
        )
    return out


def copies(tally: Tally, label: str) -> tuple[dict[str, Any], list[Problem]]:
    """Rows that repeat an earlier row exactly (prompt and answers): the report's `duplicates` and
    its warning (a repeated pair weighs twice)."""
    import json

    seen: dict[str, int] = {}
    repeats = []
    for number, record in zip(tally.numbers, tally.records):
        key = json.dumps(record, sort_keys=True, default=str)
        if key in seen:
            repeats.append(number)
        seen.setdefault(key, number)
    found = {"count": len(repeats), "checked_rows": len(tally.records)}
    if not repeats:
        return found, []
    warning = Problem(
        "duplicates",
        f"{len(repeats):,} row{'' if len(repeats) == 1 else 's'} repeat an earlier row exactly",
        fix="remove the copies unless a pair is meant to weigh more",
        source=1,
        file=label,
        rows=[{"row": n} for n in repeats[:SHOWN_ROWS]],
        count=len(repeats),
    )
    return found, [warning]


def measured(
    cfg: TrainConfig, tokens: list[lengths_mod.RowTokens], numbers: list[int]
) -> tuple[dict[str, Any], dict[str, Any], list[Problem]]:
    """(the report's `preference` part, its `totals`, the cuts' warnings) from the rows' tokens."""
    t, limit = cfg.training, cfg.preference.max_prompt_length
    cuts = [lengths_mod.cut(row, t.max_length, limit) for row in tokens]
    prompts = sorted(row.prompt for row in tokens)
    answers = sorted(a for row in tokens for a in row.answers)
    rows_of = {
        "prompt_cut": [n for n, c in zip(numbers, cuts) if c.prompt_cut],
        "answer_cut": [n for n, c in zip(numbers, cuts) if c.answer_cut and not c.answer_lost],
        "answer_lost": [n for n, c in zip(numbers, cuts) if c.answer_lost],
    }
    part = {
        "objective": cfg.objective,
        "sequences_per_row": len(tokens[0].answers),
        "max_prompt_length": limit,
        "prompt_tokens": {"p50": prompts[len(prompts) // 2], "max": prompts[-1]},
        "answer_tokens": {"p50": answers[len(answers) // 2], "max": answers[-1]},
        "prompt_tokens_cut": sum(c.prompt_cut for c in cuts),
        "answer_tokens_cut": sum(c.answer_cut for c in cuts if not c.answer_lost),
        **{key: {"count": len(rows), "rows": rows[:SHOWN_ROWS]} for key, rows in rows_of.items()},
    }
    longest = Counter(max(c.kept) for c in cuts if not c.answer_lost)
    kept_rows = len(cuts) - len(rows_of["answer_lost"])
    held = max(1, round(kept_rows * cfg.dataset.eval_fraction)) if cfg.dataset.eval_fraction else 0
    totals = {
        "rows_read": len(numbers),
        "rows_kept": kept_rows,
        "mix_rows": kept_rows,
        "eval_held_out_rows": held,
        "train_rows": kept_rows - held,
        "tokens_per_epoch": sum(sum(c.kept) for c in cuts if not c.answer_lost),
        "exact": True,
        "max": max((max(r.sequences()) for r in tokens), default=0),
        "truncated": sum(1 for c in cuts if c.cut),
        "histogram": histogram(longest, t.max_length),
        **percentiles(longest),
    }
    return part, totals, cut_warnings(cfg, part)


def cut_warnings(cfg: TrainConfig, part: dict[str, Any]) -> list[Problem]:
    """What the cuts take, said: each with its rows and the key to change."""
    t, limit = cfg.training, cfg.preference.max_prompt_length
    out = []
    cut, lost, prompt = part["answer_cut"], part["answer_lost"], part["prompt_cut"]
    if prompt["count"]:
        out.append(
            Problem(
                "prompt_cut",
                f"preference.max_prompt_length {limit} cuts {prompt['count']:,} prompts "
                f"({part['prompt_tokens_cut']:,} tokens from their start; longest prompt "
                f"{part['prompt_tokens']['max']:,} tokens)",
                fix="raise preference.max_prompt_length if the start of the prompt matters",
                rows=[{"row": n} for n in prompt["rows"]],
                count=prompt["count"],
            )
        )
    if cut["count"]:
        out.append(
            Problem(
                "answer_cut",
                f"training.max_length {t.max_length} cuts the end of {cut['count']:,} rows' answers "
                f"({part['answer_tokens_cut']:,} tokens; a cut chosen and rejected are compared on what is "
                "left)",
                fix="raise training.max_length, or set preference.max_prompt_length to leave answers room",
                rows=[{"row": n} for n in cut["rows"]],
                count=cut["count"],
            )
        )
    if lost["count"]:
        out.append(
            Problem(
                "answer_lost",
                f"{lost['count']:,} rows have a prompt as long as training.max_length {t.max_length}: no "
                "answer is left, and they are dropped",
                fix="set preference.max_prompt_length below training.max_length (e.g. half of it)",
                rows=[{"row": n} for n in lost["rows"]],
                count=lost["count"],
            )
        )
    return out


def _answer_keys(cfg: TrainConfig) -> tuple[str, ...]:
    return ("chosen", "rejected") if rows_mod.Fields.of(cfg).paired else ("completion",)


def _rows_part(cfg: TrainConfig, tally: Tally) -> dict[str, Any]:
    fields = rows_mod.Fields.of(cfg)
    dropped = [
        {"reason": pref_data.DROPS[why], "count": len(rows), "rows": [{"row": n} for n in rows[:SHOWN_ROWS]]}
        for why, rows in tally.dropped.items()
    ]
    return {
        "format": pref_data.FORMAT,
        "format_why": f"objective {cfg.objective}",
        "columns_used": fields.used(list(tally.records[0]) if tally.records else []),
        "columns_ignored": [],
        "rows": {
            "read": tally.read,
            "kept": len(tally.records),
            "dropped": sum(len(v) for v in tally.dropped.values()),
            "refused": sum(len(v) for v in tally.refused.values()),
            "unused": tally.unused,
        },
        "dropped": dropped,
        "empty_answers": {"count": 0, "rows": []},
        "no_answer": {"count": 0, "rows": []},
        "tokens": None,
    }
