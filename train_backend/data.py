"""Loading the training data and describing it (counts, token lengths, truncation)."""

from __future__ import annotations

import bisect
import json
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from cockpit.config.schema import DatasetSection
from cockpit.fmt import quoted
from train_backend import answer_data
from train_backend import prompt_completion as pc
from train_backend.errors import DataError

LOCAL_BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}
LONG_ROW_FACTOR = 64  # a row of more than this x max_length characters is refused, never read whole


def demo_dataset_path() -> str:
    return str(resources.files("cockpit") / "data" / "demo" / "train.jsonl")


@dataclass
class PreparedData:
    # datasets.Dataset with one column: text, messages or input_ids; prompt and completion; rows
    # tokenized with their answers (answer_data) have input_ids and labels beside them
    dataset: object
    format: str
    stats: dict
    lengths: list[int] = field(default_factory=list)  # each sample's tokens, before truncation
    dropped_note: str | None = None  # "dropped 3 of 345 rows: empty or missing 'text' (rows 4, 9, 12)"


def load_raw(section: DatasetSection, split_key: str = "dataset.split", long_row_bytes: int | None = None):
    """`split_key`: the config key that named `section.split`, for the error that it is missing.
    `long_row_bytes`: a JSON-lines row longer than this is refused before datasets reads it whole."""
    import datasets

    path = demo_dataset_path() if section.path == "demo" else section.path
    local = Path(path).expanduser()
    try:
        if local.is_dir():
            loaded = datasets.load_from_disk(str(local))
            if isinstance(loaded, datasets.DatasetDict):
                if section.split not in loaded:
                    raise DataError(
                        f"{split_key}: {quoted(section.split)} not in {quoted(str(local))}; splits are: "
                        f"{', '.join(loaded.keys())}"
                    )
                loaded = loaded[section.split]
            elif section.split != "train":
                raise DataError(
                    f"{split_key}: {section.split!r}, but {str(local)!r} holds one dataset, no splits: "
                    "set the split to train (or save a DatasetDict with that split)"
                )
            return loaded
        if local.is_file():
            builder = LOCAL_BUILDERS.get(local.suffix.lower())
            if builder is None:
                raise DataError(
                    f"dataset.path: {quoted(str(local))} has suffix {quoted(local.suffix)}; expected one of "
                    f"{', '.join(LOCAL_BUILDERS)} or a folder written by save_to_disk"
                )
            if local.stat().st_size == 0 or not _has_bytes(local):
                raise DataError(
                    f"dataset.path: {quoted(str(local))} is empty; give a file with one sample per row"
                )
            if section.split != "train":  # a file has one split; datasets would call it train
                raise DataError(
                    f"{split_key}: {section.split!r}, but {str(local)!r} is one file: its rows are all the "
                    "split 'train'. Set the split to train; to evaluate on held-out rows, set "
                    "dataset.eval_fraction: 0.05, or give them as a file: dataset.eval_split: eval.jsonl"
                )
            if long_row_bytes is not None and builder == "json":
                guard_lines(local, long_row_bytes)
            return datasets.load_dataset(builder, data_files=str(local), split="train")
        return datasets.load_dataset(path, split=section.split)
    except DataError:
        raise
    except Exception as exc:  # datasets raises many types; the user needs the path and the reason
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
        where = "local file" if local.exists() else f"hub dataset (endpoint {endpoint})"
        bad_line = _first_bad_json_line(local) if local.suffix.lower() == ".jsonl" else None
        reason = bad_line or _reason(exc)
        raise DataError(f"could not load dataset {quoted(path)} as a {where}: {reason}") from exc


def _has_bytes(path: Path) -> bool:
    """Whether the file holds more than whitespace (read in chunks: it may be large)."""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def guard_lines(path: Path, limit_bytes: int) -> None:
    """Refuse a JSON-lines file with a line over `limit_bytes` or a byte that is not UTF-8, with its
    line and offset, before datasets reads each line whole (one 100 MB line: GBs of memory)."""
    from train_backend.datacheck.reader import decode, lines

    for line in lines(str(path), limit_bytes):
        if line.data is None:
            raise DataError(
                f"{path}: line {line.number} is {line.size:,} bytes, far longer than training.max_length "
                f"allows (rows of at most {limit_bytes:,} characters): split that row, remove it, or raise "
                "training.max_length. cockpit data CONFIG lists every such row"
            )
        text, byte, bad = decode(line)
        if text is None:
            raise DataError(
                f"{path}: line {line.number}, byte {byte} ({bad}) is not UTF-8 (the file looks like Latin-1 "
                f"or Windows-1252); convert it, e.g. iconv -f latin1 -t utf-8 {path} > utf8.jsonl"
            )


def _reason(exc: BaseException) -> str:
    """The parser's own message: datasets wraps it in a DatasetGenerationError that says nothing."""
    while type(exc).__name__ == "DatasetGenerationError" and exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


def _first_bad_json_line(path: Path) -> str | None:
    """'line N is not a JSON object: ...' for the first such line of a JSON-lines file, else None."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                if isinstance(json.loads(line), dict):
                    continue
            except ValueError:
                pass
            return (
                f"line {number} is not a JSON object: {line.strip()[:80]!r}. Each line must be one object, "
                'e.g. {"text": "..."}'
            )
    return None


def detect_format(columns: list[str], section: DatasetSection) -> str:
    if section.format != "auto":
        return section.format
    if "input_ids" in columns:
        return "tokens"
    if section.messages_field in columns:
        return "messages"
    if pc.has_columns(columns, section):
        return pc.FORMAT
    if section.text_field in columns:
        return "text"
    raise DataError(
        f"dataset has none of the expected columns ('{section.text_field}' for text, "
        f"'{section.messages_field}' for chat, '{section.prompt_field}' and '{section.completion_field}' for "
        f"prompt/completion, 'input_ids' for tokens); columns are: {', '.join(columns)}. "
        "Set dataset.text_field or dataset.messages_field to the right column."
    )


def prepare(
    section: DatasetSection, tokenizer, max_length: int, split_key: str = "dataset.split"
) -> PreparedData:
    """One source's training rows (several are mixed by `train_backend.data_mix.prepare_all`)."""
    raw = load_raw(section, split_key, long_row_bytes=LONG_ROW_FACTOR * max_length)
    columns = list(raw.column_names)
    fmt = detect_format(columns, section)
    column = {"text": section.text_field, "messages": section.messages_field, "tokens": "input_ids"}.get(fmt)
    if fmt == pc.FORMAT:
        raw = pc.select(raw, section)
        column = f"{section.prompt_field}, {section.completion_field}"
    elif column not in columns:
        key = {"text": "dataset.text_field", "messages": "dataset.messages_field"}.get(fmt, "dataset.format")
        raise DataError(
            f"dataset column {quoted(column)} not found; columns are: {', '.join(columns)}. Set {key} to "
            "the right column (or dataset.format)."
        )
    total = len(raw)
    if section.max_samples is not None:
        raw = raw.select(range(min(section.max_samples, total)))
    if fmt != pc.FORMAT:
        raw = raw.select_columns([column])
    if fmt == "text" and column != "text":
        raw = raw.rename_column(column, "text")
    if fmt == "messages" and column != "messages":
        raw = raw.rename_column(column, "messages")

    values = pc.rows(raw) if fmt == pc.FORMAT else raw[fmt if fmt != "tokens" else "input_ids"]
    rows = check_rows(values, fmt, column)
    if rows.kept == 0:
        raise DataError(
            f"dataset has no usable samples in column {quoted(column)}: {rows.dropped_note(len(raw))}"
        )
    kept = raw.select(rows.keep) if rows.dropped else raw
    dropped = len(raw) - len(kept)
    chat = fmt == "messages" or (fmt == pc.FORMAT and pc.conversational(kept))
    if chat and not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"dataset is in chat format ({fmt}) but the tokenizer has no chat template; use a model "
            "with one, or give a 'text' column with dataset.format: text"
        )
    answers = None
    if answer_data.pretokenized(fmt, section.train_on):
        answers = answer_data.tokenize_rows(kept, fmt, tokenizer, max_length, section.train_on, rows.keep)
        kept, lengths = answers.dataset, answers.lengths
    else:
        lengths = token_lengths(kept, fmt, tokenizer, rows.keep)
    stats = length_stats(lengths, max_length)
    stats.update(samples=len(kept), dropped=dropped, source_rows=total, format=fmt, column=column)
    stats.update(answer_data.trained_fields(kept, fmt, section.train_on, stats["tokens_total"]))
    if answers is not None:
        stats.update(answers.fields(max_length, _rows_text))
    note = rows.dropped_note(len(raw)) if dropped else None
    return PreparedData(kept, fmt, stats, lengths, note)


CHAT_ROLES = ("system", "user", "assistant", "tool")
CHAT_ROWS_LOOK = 'Each row is a list of turns like {"role": "user", "content": "..."}'
ROWS_NAMED = 5  # rows an error or a note names; the count says how many more


@dataclass
class RowCheck:
    """Which rows train: `keep` (indices), the empty ones dropped with why."""

    keep: list[int]
    empty: list[int]
    why_empty: str

    @property
    def kept(self) -> int:
        return len(self.keep)

    @property
    def dropped(self) -> int:
        return len(self.empty)

    def dropped_note(self, of: int) -> str:
        return f"dropped {self.dropped} of {of} rows: {self.why_empty} ({_rows_text(self.empty)})"


def check_rows(values: list, fmt: str, column: str) -> RowCheck:
    """Every row checked before training. A chat row with a wrong role or a missing key is refused
    (DataError naming the row, the value and what is allowed): training on it would fail in the
    chat template, or drop it silently. An empty row is dropped, and said."""
    keep, empty, bad = [], [], []
    first_bad = ""
    for index, value in enumerate(values):
        if _empty(value, fmt):
            empty.append(index)
            continue
        problem = _chat_problem(value) if fmt == "messages" else None
        if fmt == pc.FORMAT:
            problem = pc.problem(value, _chat_problem)
        if problem is None:
            keep.append(index)
            continue
        bad.append(index)
        first_bad = first_bad or problem
    if bad:
        more = f"; {len(bad)} rows have such problems ({_rows_text(bad)})" if len(bad) > 1 else ""
        how = pc.HOW_ROWS_LOOK if fmt == pc.FORMAT else CHAT_ROWS_LOOK
        raise DataError(
            f"dataset row {bad[0] + 1} (column {column!r}): {first_bad}{more}. {how}; fix those rows or "
            "remove them."
        )
    why = {
        "text": f"empty or missing {column!r}",
        "messages": f"no turns in {column!r}",
        pc.FORMAT: "empty or missing completion",
        "tokens": "empty or missing input_ids",
    }[fmt]
    return RowCheck(keep, empty, why)


def _empty(value, fmt: str) -> bool:
    if fmt == pc.FORMAT:
        return pc.is_empty(value)
    if fmt == "text":
        return not isinstance(value, str) or not value.strip()
    return value is None or (isinstance(value, list) and len(value) == 0)


def _chat_problem(turns) -> str | None:
    if not isinstance(turns, list):
        return f"is not a list of turns (a {type(turns).__name__})"
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            return f"turn {number} is not an object with role and content (a {type(turn).__name__})"
        # a JSON-lines file read by datasets gives every turn every key seen in the column: None when absent
        keys = ", ".join(str(k) for k, v in turn.items() if v is not None) or "none"
        if turn.get("role") is None:
            return f"turn {number} has no 'role' key (its keys: {keys})"
        if turn.get("content") is None:
            return f"turn {number} has no 'content' key (its keys: {keys})"
        if turn["role"] not in CHAT_ROLES:
            return (
                f"turn {number} has role {str(turn['role'])[:40]!r}; allowed roles: {', '.join(CHAT_ROLES)}"
            )
    return None


def _rows_text(indices: list[int]) -> str:
    named = ", ".join(str(i + 1) for i in indices[:ROWS_NAMED])
    more = f" and {len(indices) - ROWS_NAMED} more" if len(indices) > ROWS_NAMED else ""
    return f"row{'s' if len(indices) > 1 else ''} {named}{more}"


def token_lengths(dataset, fmt: str, tokenizer, rows: list[int] | None = None) -> list[int]:
    """Each sample's tokens. `rows`: the samples' row numbers in the source (for an error)."""
    if fmt == "tokens":
        return [len(ids) for ids in dataset["input_ids"]]
    if fmt == "messages":
        texts = []
        for index, turns in enumerate(dataset["messages"]):
            try:
                texts.append(tokenizer.apply_chat_template(turns, tokenize=False))
            except Exception as exc:  # jinja's TemplateError: the template's own words
                row = (rows[index] if rows else index) + 1
                raise DataError(
                    f"dataset row {row}: the tokenizer's chat template refused it: {type(exc).__name__}: "
                    f"{str(exc)[:300]}"
                ) from exc
    else:
        texts = dataset["text"]
    lengths: list[int] = []
    for start in range(0, len(texts), 1024):
        encoded = tokenizer(texts[start : start + 1024], add_special_tokens=True)["input_ids"]
        lengths.extend(len(ids) for ids in encoded)
    return lengths


def length_stats(lengths: list[int], max_length: int) -> dict:
    ordered = sorted(lengths)
    n = len(ordered)

    def pct(p: float) -> int:
        return ordered[min(n - 1, int(p * (n - 1) + 0.5))]

    used = [min(x, max_length) for x in ordered]
    # samples longer than each power of two: what a shorter max_length would cut (the OOM wizard)
    over, edge = {}, 64
    while edge < ordered[-1]:
        over[str(edge)] = n - bisect.bisect_right(ordered, edge)
        edge *= 2
    return {
        "tokens_min": ordered[0],
        "tokens_mean": round(sum(ordered) / n, 1),
        "tokens_p50": pct(0.5),
        "tokens_p95": pct(0.95),
        "tokens_p99": pct(0.99),
        "tokens_max": ordered[-1],
        "tokens_total": sum(used),
        "truncated": sum(1 for x in ordered if x > max_length),
        "max_length": max_length,
        "tokens_over": over,
    }


class CpuBurningCollator:
    """Test aid (`collate_cpu_ms`, train_backend.test_aids): the trainer's collator, after burning
    `cpu_ms` of CPU time per batch, as an expensive on-the-fly preprocessing would; counted in CPU
    time, not wall time, so a busy machine does not change how much work a batch costs."""

    def __init__(self, collate, cpu_ms: float) -> None:
        self.collate = collate
        self.cpu_ms = cpu_ms

    def __call__(self, features):
        burn_cpu(self.cpu_ms)
        return self.collate(features)


def burn_cpu(cpu_ms: float) -> None:
    """Spin until this thread has used `cpu_ms` of CPU time (test aids: collate_cpu_ms, log_cpu_ms)."""
    end = time.thread_time() + cpu_ms / 1000.0
    while time.thread_time() < end:
        pass


def burn_cpu_in_collator(trainer, cpu_ms: float) -> None:
    """Wrap the trainer's data collator in a CpuBurningCollator when `cpu_ms` > 0."""
    if cpu_ms > 0:
        trainer.data_collator = CpuBurningCollator(trainer.data_collator, cpu_ms)
