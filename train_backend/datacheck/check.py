"""The whole check: every source opened and streamed, its rows counted and measured, the mix,
the data errors (each with its file, rows, what was expected and the fix) and the warnings, and a
few rows through the template with the loss mask: one report, plain data (docs/data.md)."""

from __future__ import annotations

import resource
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cockpit.config.schema import DatasetSource, TrainConfig
from cockpit.config.sources import mix_counts
from train_backend.data import LONG_ROW_FACTOR
from train_backend.datacheck import REPORT_VERSION, findings, parallel
from train_backend.datacheck import preview as preview_mod
from train_backend.datacheck.lengths import Lengths, histogram, load_tokenizer, percentiles, sample_every
from train_backend.datacheck.opening import Problem, open_source
from train_backend.datacheck.rows import Duplicates, SourceRows

PREVIEW_PER_SOURCE = 2
PREVIEW_MAX = 6


@dataclass
class Checking:
    """What every source's reading shares: the config, the tokenizer, the duplicates seen so far."""

    cfg: TrainConfig
    tokenizer: Any
    answers: Callable[..., tuple[int, bool]] | None
    duplicates: Duplicates
    progress: Callable[[dict[str, Any]], None] | None

    @property
    def max_length(self) -> int:
        return self.cfg.training.max_length

    @property
    def limit(self) -> int:
        return LONG_ROW_FACTOR * self.max_length


def run_check(cfg: TrainConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The report of `cfg`'s data (docs/data.md); a preference objective's: datacheck.pairs."""
    if cfg.objective != "sft":
        from train_backend.datacheck import pairs

        return pairs.run_check(cfg, progress)
    started = time.monotonic()
    found = load_tokenizer(cfg)
    tokenizer = found.tokenizer
    train_on = getattr(cfg.dataset, "train_on", "auto")
    answers = (
        preview_mod.answer_cut_reader(tokenizer, train_on, cfg.training.max_length) if tokenizer else None
    )
    checking = Checking(cfg, tokenizer, answers, Duplicates(), progress)
    problems: list[Problem] = []
    warnings: list[Problem] = []
    sources: list[dict[str, Any]] = []
    tallies: list[SourceRows | None] = []
    for number, spec in enumerate(cfg.dataset.source_list(), 1):
        entry, rows = _read_source(checking, number, spec)
        sources.append(entry)
        tallies.append(rows)
        if rows is None:
            problems.append(entry.pop("problem"))
            continue
        problems.extend(findings.errors(rows, checking.max_length, checking.limit))
        warnings.extend(findings.warnings(rows, cfg))
    formats = {t.format for t in tallies if t is not None and t.format}
    problems.extend(findings.mix_errors(formats, [t for t in tallies if t is not None], train_on))
    if tokenizer is None:
        warnings.append(Problem("tokenizer", f"token lengths not counted: no tokenizer ({found.problem})"))
    totals = _totals(cfg, tallies, sources, tokenizer is not None)
    dupes = checking.duplicates.found()
    if dupes["count"]:
        warnings.append(findings.duplicates_warning(dupes, len(sources) > 1))
    return {
        "version": REPORT_VERSION,
        "ok": not problems,
        "max_length": checking.max_length,
        "long_row_chars": checking.limit,
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
        "preview": _preview(tallies, tokenizer, train_on, checking.max_length),
        "problems": [p.to_dict() for p in problems],
        "warnings": [w.to_dict() for w in warnings],
        "elapsed_s": round(time.monotonic() - started, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _read_source(
    checking: Checking, number: int, spec: DatasetSource
) -> tuple[dict[str, Any], SourceRows | None]:
    """One source opened and read: its part of the report, and its rows' tally (None when it cannot
    be read: the entry's `problem` says why)."""
    cfg, max_length, limit = checking.cfg, checking.max_length, checking.limit
    several = cfg.dataset.sources is not None
    split_key = f"dataset.sources[{number}].split" if several else "dataset.split"
    opened = open_source(number, spec, limit, split_key)
    entry = opened.entry()
    if opened.problem is not None:
        opened.problem.source, opened.problem.file = number, opened.label
        entry["problem"] = opened.problem
        return entry, None
    every = sample_every(opened.bytes, opened.num_rows)
    max_rows = cfg.dataset.max_samples if not several else None
    tokenizer, answers = checking.tokenizer, checking.answers
    rows = SourceRows(
        opened, tokenizer, Lengths(max_length, every=every), checking.duplicates, limit, max_rows, answers
    )

    def said(read: int, read_bytes: int) -> None:
        if checking.progress is not None:
            checking.progress(
                {"source": number, "rows_read": read, "bytes_read": read_bytes, "bytes_total": opened.bytes}
            )

    if parallel.wanted(rows):

        def worker_rows() -> SourceRows:
            lengths = Lengths(max_length, every=every)
            return SourceRows(opened, tokenizer, lengths, Duplicates(), limit, None, answers)

        said(0, 0)
        parallel.run(rows, worker_rows)
    else:
        rows.run(said)
    entry.update(_source_part(rows, tokenizer is not None))
    return entry, rows


def _source_part(rows: SourceRows, counted: bool) -> dict:
    dropped = [
        {"reason": findings.REASONS[why].format(column=repr(rows.column)), "count": n.count, "rows": n.rows}
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
