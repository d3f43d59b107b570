"""Prompt/completion rows (`dataset.format: prompt_completion`), as TRL takes them: a `prompt` and
its `completion`, both plain strings, or both lists of chat turns (rendered with the chat
template; the completion's assistant turns are the answer). Auto-detected where both columns
exist (`dataset.prompt_field`, `dataset.completion_field`)."""

from __future__ import annotations

from cockpit.config.schema import DatasetSection
from cockpit.fmt import quoted
from train_backend.errors import DataError

FORMAT = "prompt_completion"
HOW_ROWS_LOOK = (
    'Each row has a prompt and a completion, both text ({"prompt": "2+2=", "completion": " 4"}) or both '
    'lists of turns ({"prompt": [{"role": "user", "content": "..."}], "completion": [{"role": '
    '"assistant", "content": "..."}]})'
)


def has_columns(columns: list[str], section: DatasetSection) -> bool:
    return section.prompt_field in columns and section.completion_field in columns


def select(raw, section: DatasetSection):
    """`raw` with the two columns alone, named prompt and completion."""
    wanted = (section.prompt_field, section.completion_field)
    missing = [c for c in wanted if c not in raw.column_names]
    if missing:
        key = "dataset.prompt_field" if missing[0] == section.prompt_field else "dataset.completion_field"
        raise DataError(
            f"dataset column {quoted(missing[0])} not found; columns are: {', '.join(raw.column_names)}. "
            f"Set {key} to the right column (or dataset.format)."
        )
    raw = raw.select_columns(list(wanted))
    for name, new in zip(wanted, ("prompt", "completion")):
        if name != new:
            raw = raw.rename_column(name, new)
    return raw


def rows(raw) -> list[dict]:
    return [{"prompt": p, "completion": c} for p, c in zip(raw["prompt"], raw["completion"])]


def is_empty(row: dict) -> bool:
    completion = row.get("completion")
    if isinstance(completion, str):
        return not completion.strip()
    return not completion


def problem(row: dict, chat_problem) -> str | None:
    """What is wrong with a row (`chat_problem`: the check of a list of turns), or None."""
    prompt, completion = row.get("prompt"), row.get("completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        return None
    if isinstance(prompt, list) and isinstance(completion, list):
        for name, turns in (("prompt", prompt), ("completion", completion)):
            found = chat_problem(turns)
            if found:
                return f"{name}: {found}"
        return None
    return (
        f"prompt is {type(prompt).__name__} and completion is {type(completion).__name__}; give both as "
        "text or both as lists of turns"
    )


def conversational(dataset) -> bool:
    return len(dataset) > 0 and isinstance(dataset[0]["prompt"], list)


def style_inputs(dataset) -> tuple[str, list[str]]:
    """(the format, the texts) the prompt style is told from (train_backend.generation.detect_style):
    a chat's for lists of turns, the rows' text for strings."""
    if conversational(dataset):
        return "messages", []
    head = dataset.select(range(min(50, len(dataset))))
    return "text", [p + c for p, c in zip(head["prompt"], head["completion"])]


def as_example(row: dict):
    """An eval row as the prompt splitter takes it: the conversation (turns) or the prompt's text."""
    if isinstance(row["prompt"], list):
        return "messages", [*row["prompt"], *row["completion"]]
    return FORMAT, row
