"""The rows a preference run trains on: read and checked (train_backend.preference.rows), measured
in tokens and cut as the trainer cuts them (train_backend.preference.lengths), the eval split held
out, and the prompts whose answers are sampled beside the chosen one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from cockpit.config.schema import DatasetSection, TrainConfig
from cockpit.fmt import quoted
from train_backend import data as data_mod
from train_backend import generation
from train_backend.errors import DataError
from train_backend.evaluation import EvalData, Prompt, held_out
from train_backend.preference import lengths as lengths_mod
from train_backend.preference import rows as rows_mod

DEMO_FILES = {"dpo": "preference.jsonl", "orpo": "preference.jsonl", "kto": "kto.jsonl"}
FORMAT = "preference"
DROPS = {
    "empty_chosen": "an empty chosen answer",
    "empty_rejected": "an empty rejected answer",
    "empty_completion": "an empty completion",
    "answer_lost": "a prompt as long as training.max_length, which leaves no answer",
}


def demo_path(objective: str) -> str:
    return str(resources.files("cockpit") / "data" / "demo" / DEMO_FILES[objective])


@dataclass
class Rows:
    """One file's rows, read: TRL's records, their tokens, and what was dropped (reason -> rows)."""

    records: list[dict[str, Any]]
    tokens: list[lengths_mod.RowTokens]
    source_rows: int
    dropped: dict[str, list[int]]
    row_numbers: list[int]  # each record's row in the source (1-based)


def read_rows(
    cfg: TrainConfig, section: DatasetSection, tokenizer, split_key: str, limit: int | None
) -> Rows:
    """The rows of one file or split, refused (DataError) where one is wrong, the empty dropped."""
    path = demo_path(cfg.objective) if section.path == "demo" else section.path
    raw = data_mod.load_raw(
        dataclasses.replace(section, path=path),
        split_key,
        long_row_bytes=data_mod.LONG_ROW_FACTOR * cfg.training.max_length,
    )
    fields = rows_mod.Fields.of(cfg)
    columns = list(raw.column_names)
    missing = [c for c in fields.needed(columns) if c not in columns]
    if missing:
        raise DataError(
            f"objective {cfg.objective}: dataset column {quoted(missing[0])} not found; columns are: "
            f"{', '.join(columns)}. {_how(fields)}; if another column holds it, set "
            f"{_key_of(missing[0], fields)}"
        )
    total = len(raw)
    if limit is not None:
        raw = raw.select(range(min(limit, total)))
    records, numbers, dropped = [], [], {}
    refused: dict[str, list[int]] = {}
    first: dict[str, str] = {}
    for number, value in enumerate(raw, 1):
        checked = rows_mod.read(value, fields)
        if checked.record is not None:
            records.append(checked.record)
            numbers.append(number)
        elif checked.drop is not None:
            dropped.setdefault(checked.drop, []).append(number)
        else:
            refused.setdefault(str(checked.code), []).append(number)
            first.setdefault(str(checked.code), checked.detail)
    if refused:
        code, rows = min(refused.items(), key=lambda item: item[1][0])
        more = sum(len(v) for v in refused.values()) - 1
        raise DataError(
            f"dataset row {rows[0]}: {first[code]}"
            + (f"; {more} more rows have such problems (cockpit data CONFIG lists them)" if more else "")
            + f". {_how(fields)}; fix those rows or remove them"
        )
    keys = ("chosen", "rejected") if fields.paired else ("completion",)
    tokens = lengths_mod.measure(records, tokenizer, keys)
    kept = _drop_lost(cfg, records, tokens, numbers, dropped)
    if not kept.records:
        raise DataError(f"dataset has no rows to train on: {dropped_note(kept)}")
    kept.source_rows = total
    return kept


def _drop_lost(
    cfg: TrainConfig, records: list, tokens: list, numbers: list[int], dropped: dict[str, list[int]]
) -> Rows:
    """Rows whose answer max_length leaves no token of (TRL drops them too): dropped here, and said."""
    t, limit = cfg.training, cfg.preference.max_prompt_length
    keep = [i for i, row in enumerate(tokens) if not lengths_mod.cut(row, t.max_length, limit).answer_lost]
    kept = set(keep)
    lost = [numbers[i] for i in range(len(tokens)) if i not in kept]
    if lost:
        dropped["answer_lost"] = lost
    return Rows(
        [records[i] for i in keep],
        [tokens[i] for i in keep],
        len(records),
        dropped,
        [numbers[i] for i in keep],
    )


def dropped_note(rows: Rows) -> str:
    parts = []
    for why, numbers in rows.dropped.items():
        named = ", ".join(map(str, numbers[:5])) + (
            f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
        )
        parts.append(f"{len(numbers)} with {DROPS[why]} (row{'s' if len(numbers) > 1 else ''} {named})")
    return "dropped " + "; ".join(parts) if parts else ""


def stats(cfg: TrainConfig, rows: Rows) -> dict[str, Any]:
    """The `data` event's figures: per row its longest sequence (prompt + the longer answer), and
    what the cuts take."""
    t, limit = cfg.training, cfg.preference.max_prompt_length
    longest = [max(r.sequences()) for r in rows.tokens]
    out = data_mod.length_stats(longest, t.max_length)
    cuts = [lengths_mod.cut(r, t.max_length, limit) for r in rows.tokens]
    out.update(
        samples=len(rows.records),
        dropped=sum(len(v) for v in rows.dropped.values()),
        source_rows=rows.source_rows,
        format=FORMAT,
        column=", ".join(_columns(cfg)),
        tokens_total=sum(sum(c.kept) for c in cuts),
        truncated=sum(1 for c in cuts if c.cut),
        note=dropped_note(rows) or None,
    )
    return out


def setup_fields(cfg: TrainConfig, rows: Rows) -> dict[str, Any]:
    """What the `preference_setup` event says of the data: rows, the prompts' and answers' tokens,
    what max_prompt_length and max_length cut."""
    t, limit = cfg.training, cfg.preference.max_prompt_length
    cuts = [lengths_mod.cut(r, t.max_length, limit) for r in rows.tokens]
    prompts = sorted(r.prompt for r in rows.tokens)
    answers = sorted(a for r in rows.tokens for a in r.answers)
    return {
        "rows": len(rows.records),
        "prompt_tokens_p50": prompts[len(prompts) // 2],
        "prompt_tokens_max": prompts[-1],
        "answer_tokens_p50": answers[len(answers) // 2],
        "answer_tokens_max": answers[-1],
        "prompts_cut": sum(1 for c in cuts if c.prompt_cut),
        "answers_cut": sum(1 for c in cuts if c.answer_cut),
        "rows_dropped_by_length": len(rows.dropped.get("answer_lost", [])),
        "sequences_per_row": len(rows.tokens[0].answers) if rows.tokens else 1,
    }


def split(cfg: TrainConfig, rows: Rows, tokenizer) -> tuple[Rows, Rows | None, str | None]:
    """(training rows, held-out rows or None, where they come from)."""
    ds = cfg.dataset
    if ds.eval_fraction is not None:
        n = len(rows.records)
        held, kept = held_out(cfg, n, "rows")
        if cfg.eval.max_samples is not None:
            held = held[: cfg.eval.max_samples]
        source = f"eval_fraction {ds.eval_fraction} of {n} rows, seed {cfg.training.seed}"
        return _subset(rows, kept), _subset(rows, held), source
    if ds.eval_split is not None:
        as_file = Path(ds.eval_split).expanduser().is_file()
        section = dataclasses.replace(
            ds, path=ds.eval_split if as_file else ds.path, split="train" if as_file else ds.eval_split
        )
        held_rows = read_rows(cfg, section, tokenizer, "dataset.eval_split", cfg.eval.max_samples)
        return rows, held_rows, f"file {ds.eval_split}" if as_file else f"split {ds.eval_split!r}"
    return rows, None, None


def _subset(rows: Rows, picked: list[int]) -> Rows:
    return Rows(
        [rows.records[i] for i in picked],
        [rows.tokens[i] for i in picked],
        rows.source_rows,
        rows.dropped,
        [rows.row_numbers[i] for i in picked],
    )


def to_dataset(rows: Rows):
    import datasets

    return datasets.Dataset.from_list(rows.records)


def eval_data(rows: Rows, source: str) -> EvalData:
    """The held-out rows as the trainer's evaluation takes them (input_ids: one entry a row, its
    longest sequence's length only: the preference eval runs through TRL's own evaluate)."""
    return EvalData(
        to_dataset(rows), FORMAT, source, input_ids=[[0] * max(r.sequences()) for r in rows.tokens]
    )


def prompt_style(rows: Rows, tokenizer) -> str:
    """How a sample's prompt is written: the chat template for chat turns, else as the text is."""
    if (
        rows.records
        and rows_mod.conversational(rows.records[0])
        and getattr(tokenizer, "chat_template", None)
    ):
        return "chat_template"
    return "plain"


def build_prompts(cfg: TrainConfig, held: Rows | None, tokenizer, style: str) -> list[Prompt]:
    """eval.prompts: the given strings, or the first N held-out rows' prompts with their chosen answer
    (a KTO row's completion where it is desirable) as the reference shown beside the model's."""
    wanted = cfg.eval.prompts
    if wanted is None:
        return []
    if isinstance(wanted, list):
        turns = [[{"role": "user", "content": text}] for text in wanted]
        return [
            Prompt(i, text, _render(style, tokenizer, turn, text), None)
            for i, (text, turn) in enumerate(zip(wanted, turns))
        ]
    if held is None:
        raise DataError("eval.prompts: a number takes prompts from the eval split, and there is none")
    out = []
    for record in held.records:
        if len(out) >= wanted:
            break
        if "label" in record and not record["label"]:
            continue  # an undesirable completion is no reference to show
        prompt, answer = record["prompt"], record.get("chosen", record.get("completion"))
        shown = _last_user(prompt)
        rendered = _render(style, tokenizer, prompt if isinstance(prompt, list) else None, str(prompt))
        out.append(Prompt(len(out), shown, rendered, rows_mod.text_of(_answer_text(answer)).strip()))
    return out


def _render(style: str, tokenizer, turns: list | None, text: str) -> generation.Rendered:
    if style == "chat_template" and turns is not None:
        return generation.render_chat(style, tokenizer, turns)
    return generation.Rendered(text, True)  # a text prompt is continued as it is, as TRL tokenizes it


def _last_user(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt.strip()
    users = [t.get("content", "") for t in prompt if isinstance(t, dict) and t.get("role") == "user"]
    return str(users[-1] if users else rows_mod.text_of(prompt)).strip()


def _answer_text(answer: Any) -> Any:
    if isinstance(answer, list):
        said = [t.get("content", "") for t in answer if isinstance(t, dict) and t.get("role") == "assistant"]
        return "\n".join(said) if said else answer
    return answer


def _columns(cfg: TrainConfig) -> list[str]:
    fields = rows_mod.Fields.of(cfg)
    return [fields.prompt, fields.chosen, fields.rejected] if fields.paired else fields.needed([])


def _how(fields: rows_mod.Fields) -> str:
    return rows_mod.HOW_PAIRS_LOOK if fields.paired else rows_mod.HOW_KTO_LOOKS


def _key_of(column: str, fields: rows_mod.Fields) -> str:
    return {
        fields.chosen: "preference.chosen_field",
        fields.rejected: "preference.rejected_field",
        fields.label: "preference.label_field",
        fields.prompt: "dataset.prompt_field",
        fields.completion: "dataset.completion_field",
    }.get(column, "the field's key")
