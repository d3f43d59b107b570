"""The data check's report as plain text: what `cockpit data` prints and `cockpit train` says
before it starts (80 columns unless the terminal is wider). The trained text of a preview row is
wrapped in «...»; ✂ marks where max_length cuts it."""

from __future__ import annotations

from typing import Any

from cockpit import fmt
from cockpit.plain import wrapped

TRAINED_OPEN, TRAINED_CLOSE, CUT_MARK = "«", "»", "✂"
KINDS = {
    "jsonl": "JSON lines",
    "json": "JSON",
    "csv": "CSV",
    "parquet": "Parquet",
    "saved": "save_to_disk folder",
    "hub": "hub dataset",
}
BAR_WIDTH = 40


def report_lines(report: dict[str, Any], source: str, width: int) -> list[str]:
    """The whole report: sources, tokens, the run's time and cost, errors, warnings, the preview."""
    lines = [_head(report, source)]
    for entry in report["sources"]:
        lines += source_lines(entry, report)
    lines += token_lines(report, width)
    lines += preference_lines(report.get("preference"))
    lines += run_lines(report.get("run"))
    lines += problem_lines(report)
    lines += warning_lines(report)
    lines += preview_lines(report, width)
    lines.append(_verdict(report))
    return wrapped(lines, width)


def _head(report: dict[str, Any], source: str) -> str:
    count = len(report["sources"])
    what = report.get("format") or "no single format"
    tok = report["tokenizer"]
    where = tok["source"] if not tok.get("problem") else f"none ({tok['problem']})"
    sources = f"{count} sources" if count > 1 else "1 source"
    return (
        f"data of {source}: {sources}, format {what}, max_length {report['max_length']}, tokenizer: {where}"
    )


def where(refs: list[dict[str, Any]], count: int) -> str:
    """`line 7`, `rows 3, 9 and 12 more`."""
    if not refs:
        return ""
    word = "line" if refs[0].get("line") is not None else "row"
    numbers = ", ".join(str(r.get(word)) for r in refs)
    more = f" and {count - len(refs):,} more" if count > len(refs) else ""
    return f"{word}{'s' if count > 1 else ''} {numbers}{more}"


def source_lines(entry: dict[str, Any], report: dict[str, Any]) -> list[str]:
    kind = KINDS.get(entry["kind"], entry["kind"])
    size = f", {fmt.size(entry['bytes'])}" if entry.get("bytes") else ""
    splits = ", ".join(entry.get("splits") or []) or "-"
    lines = [
        f"source {entry['number']}: {entry['path']} ({kind}{size}); split {entry['split']} (splits: {splits})"
    ]
    if entry.get("format") is None and "rows" not in entry:
        return lines
    used = ", ".join(entry.get("columns_used") or []) or "none"
    ignored = ", ".join(entry.get("columns_ignored") or []) or "none"
    why = entry.get("format_why")
    lines.append(f"  format {entry.get('format')} ({why}); columns used: {used}; ignored: {ignored}")
    rows = entry["rows"]
    parts = [f"{rows['read']:,} read", f"{rows['kept']:,} kept"]
    for dropped in entry.get("dropped") or []:
        parts.append(
            f"{dropped['count']:,} dropped ({dropped['reason']}: {where(dropped['rows'], dropped['count'])})"
        )
    if rows.get("refused"):
        parts.append(f"{rows['refused']:,} refused (below)")
    if rows.get("unused"):
        parts.append(f"{rows['unused']:,} past max_samples")
    lines.append("  rows: " + ", ".join(parts))
    tokens = entry.get("tokens")
    if tokens and tokens.get("rows") and len(report["sources"]) > 1:
        at = where([tokens["max_row"]], 1) if tokens.get("max_row") else ""
        lines.append(
            f"  tokens: p50 {tokens['p50']}, p90 {tokens['p90']}, p99 {tokens['p99']}, max {tokens['max']:,}"
            f"{f' ({at})' if at else ''}; {tokens['truncated']['count']:,} cut at max_length; "
            f"{tokens['per_epoch']:,} a pass"
        )
    mix = entry.get("mix")
    if mix and len(report["sources"]) > 1:
        how = (
            f"weight {entry['weight']:g}"
            if entry.get("weight") is not None
            else f"samples {entry['samples']:,}"
            if entry.get("samples") is not None
            else "all its rows"
        )
        lines.append(f"  in the mix: {how} -> {mix['rows']:,} rows ({mix['share']:.1%} of the mix)")
    return lines


def token_lines(report: dict[str, Any], width: int, duplicates: bool = True) -> list[str]:
    """Tokens per epoch and how they were counted, the lengths' percentiles and histogram, and
    (with `duplicates`) the line that none were found."""
    totals = report.get("totals") or {}
    if totals.get("tokens_per_epoch") is None:
        return []
    exact = all(
        (s.get("tokens") or {}).get("estimated_rows", 0) == 0 for s in report["sources"] if s.get("tokens")
    )
    how = "every row tokenized" if exact else _sampled_words(report)
    held = totals.get("eval_held_out_rows") or 0
    rows = f"{totals['train_rows']:,} rows" + (f" ({held:,} held out for eval)" if held else "")
    lines = [
        f"tokens per epoch: {totals['tokens_per_epoch']:,} over {rows}, each cut at max_length ({how})",
        f"token lengths: p50 {totals.get('p50')}, p90 {totals.get('p90')}, p99 {totals.get('p99')}, "
        f"max {totals.get('max', 0):,}; {_rows(totals.get('truncated', 0))} cut at max_length "
        f"{report['max_length']}",
    ]
    lines += histogram_lines(totals.get("histogram") or [], width)
    dupes = report.get("duplicates") or {}
    if duplicates and not dupes.get("count"):
        lines.append(f"exact duplicates: none among {dupes.get('checked_rows', 0):,} rows")
    return lines


def preference_lines(part: dict[str, Any] | None) -> list[str]:
    """A preference objective's rows in tokens: prompts and answers, and what the cuts take."""
    if not part or "prompt_tokens" not in part:
        return []
    pairs = part["sequences_per_row"] == 2
    limit = part.get("max_prompt_length")
    rows = "a pair a row: chosen and rejected each with the prompt" if pairs else "one completion a row"
    lines = [
        f"{part['objective']}: {rows}; prompt tokens p50 {part['prompt_tokens']['p50']}, "
        f"max {part['prompt_tokens']['max']:,}; "
        f"answer tokens p50 {part['answer_tokens']['p50']}, max {part['answer_tokens']['max']:,}",
        f"  cuts: {_rows(part['prompt_cut']['count'])} lose the start of their prompt "
        f"(max_prompt_length {limit if limit is not None else 'null'}), {_rows(part['answer_cut']['count'])} "
        f"the end of an answer (max_length), {_rows(part['answer_lost']['count'])} dropped (no room left for "
        "an answer)",
    ]
    return lines


def _sampled_words(report: dict[str, Any]) -> str:
    parts = []
    for entry in report["sources"]:
        tokens = entry.get("tokens") or {}
        if tokens.get("estimated_rows"):
            parts.append(
                f"source {entry['number']}: every {tokens['sample_every']}th row and the long ones "
                f"({tokens['exact_rows']:,}) tokenized, the other {tokens['estimated_rows']:,} counted at "
                f"{tokens['chars_per_token']} characters a token"
            )
    return "; ".join(parts) or "every row tokenized"


def histogram_lines(bins: list[dict[str, Any]], width: int) -> list[str]:
    """One line per bin: its range, a bar, the rows; the bars fit `width` (80 by default)."""
    if not bins:
        return []
    most = max(b["count"] for b in bins) or 1
    label_width = max(len(_range(b)) for b in bins)
    count_width = max(len(f"{b['count']:,}") for b in bins)
    room = max(10, min(BAR_WIDTH, width - label_width - count_width - 6))
    out = []
    for b in bins:
        bar = "#" * (round(room * b["count"] / most) if b["count"] else 0)
        if b["count"] and not bar:
            bar = "."
        out.append(f"  {_range(b):>{label_width}} {bar:<{room}} {b['count']:>{count_width},}")
    return out


def _range(b: dict[str, Any]) -> str:
    return f"{b['low']}-{b['high']}" if b["low"] <= b["high"] else f"{b['low']}+"


def run_lines(run: dict[str, Any] | None) -> list[str]:
    if not run:
        return []
    if run.get("why_none"):
        return [f"run time and cost: not worked out ({run['why_none']})"]
    price = f"${run['usd_per_hour']:.2f}/h ({run['price_from']})"
    fits = "" if run.get("fits") == "fits" else f"; the run {_fit_words(run.get('fits'))} on it"
    speed = f"{fmt.rate(run['tokens_per_s'])} tok/s (speed model, an estimate)"
    return [
        f"run on {run['card_name']} ({run['card_from']}): {run['run']}; {speed}: "
        f"{fmt.duration(run['time_s'])}, {fmt.money(run['cost_usd'])} at {price}{fits}"
    ]


def _fit_words(verdict: str | None) -> str:
    return {"tight": "is tight (inside the safety margin)", "no": "does NOT fit as set"}.get(
        verdict or "", "?"
    )


def problem_lines(report: dict[str, Any]) -> list[str]:
    """Each data error: where (file, rows, byte), what, what was expected, the fix."""
    problems = report.get("problems") or []
    if not problems:
        return []
    lines = [f"data errors ({len(problems)}): nothing can train until they are fixed"]
    for p in problems:
        head = f"source {p['source']} ({p['file']})" if p.get("file") else f"source {p.get('source')}"
        lines.append(f"  data error: {head}: {p['message']}")
        if p.get("expected"):
            lines.append(f"    expected: {p['expected']}")
        if p.get("fix"):
            lines.append(f"    fix: {p['fix']}")
    return lines


def warning_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for w in report.get("warnings") or []:
        head = f"source {w['source']}: " if w.get("source") is not None and len(report["sources"]) > 1 else ""
        lines.append(f"  warning: {head}{w['message']}" + (f". Fix: {w['fix']}" if w.get("fix") else ""))
    return ["warnings:", *lines] if lines else []


def preview_lines(report: dict[str, Any], width: int) -> list[str]:
    rows = report.get("preview") or []
    if not rows:
        return []
    marks = f"trained text in {TRAINED_OPEN}...{TRAINED_CLOSE}, {CUT_MARK} where max_length cuts"
    lines = [f"preview: {_rows(len(rows))} as the trainer sees them; {marks}"]
    for row in rows:
        at = where([row], 1)
        source = f"source {row['source']} " if len(report["sources"]) > 1 else ""
        if row.get("error"):
            lines.append(f"  {source}{at}: not shown: {row['error']}")
            continue
        lines.append(
            f"  {source}{at}: {row['tokens']:,} tokens, {row['trained_tokens']:,} trained"
            + (f", {row['answer_tokens_cut']:,} answer tokens cut" if row.get("answer_tokens_cut") else "")
        )
        text = marked_text(row)
        lines += [f"    {line}" for line in text.splitlines() or [""]]
        if row.get("chars_hidden"):
            lines.append(f"    ... ({row['chars_hidden']:,} characters more)")
    return lines


def marked_text(row: dict[str, Any]) -> str:
    """The preview row's text with «» around what trains and ✂ where max_length cuts."""
    out, at, cut = [], 0, row.get("cut_at")
    for segment in row.get("segments") or []:
        text = segment["text"]
        if cut is not None and at <= cut < at + len(text):
            text = text[: cut - at] + CUT_MARK + text[cut - at :]
        out.append(f"{TRAINED_OPEN}{text}{TRAINED_CLOSE}" if segment["trained"] else text)
        at += len(segment["text"])
    return "".join(out)


def _verdict(report: dict[str, Any]) -> str:
    took = f"checked in {report.get('elapsed_s', 0):.1f} s"
    if report.get("problems"):
        return f"data: {len(report['problems'])} error(s); nothing can train on it as it is ({took})"
    warned = len(report.get("warnings") or [])
    return f"data: OK{f' with {warned} warning(s)' if warned else ''} ({took})"


def start_lines(report: dict[str, Any], source: str) -> list[str]:
    """What `cockpit train` says before it starts: one line when the data is clean, the errors
    (and what to run for the whole report) when not, the warnings either way."""
    if report.get("problems"):
        return [
            *problem_lines(report),
            *warning_lines(report),
            f"(cockpit data {source} shows the whole report)",
        ]
    totals = report.get("totals") or {}
    tokens = totals.get("tokens_per_epoch")
    size = f", {tokens:,} tokens per epoch" if tokens is not None else ""
    head = (
        f"data: {totals.get('train_rows', 0):,} rows{size}, format {report.get('format')} "
        f"(checked in {report.get('elapsed_s', 0):.1f} s; cockpit data {source} shows it all)"
    )
    return [head, *warning_lines(report)]


def _rows(count: int) -> str:
    return f"{count:,} row{'' if count == 1 else 's'}"
