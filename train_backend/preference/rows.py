"""One preference row as TRL takes it, checked: the trainer (train_backend.preference.data) and the
data check (train_backend.datacheck.pairs) read rows through here, so both refuse the same rows
with the same words.

Pairs (objectives dpo and orpo): a prompt, a chosen and a rejected answer, all text or all chat
turns; without a prompt column the prompt is what chosen and rejected share at their start (TRL's
implicit prompt, trl.data_utils.extract_prompt). KTO rows: a prompt, a completion and a boolean
label (desirable or not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cockpit.config.schema import TrainConfig

HOW_PAIRS_LOOK = (
    'Each row has a chosen and a rejected answer, and a prompt: {"prompt": "2+2=", "chosen": " 4", '
    '"rejected": " 5"}, or all as chat turns; without a prompt column, chosen and rejected are whole '
    "texts (or conversations) whose shared start is the prompt"
)
HOW_KTO_LOOKS = (
    'Each row has a prompt, a completion and a boolean label: {"prompt": "2+2=", "completion": " 4", '
    '"label": true} (true: desirable; false: undesirable), or prompt and completion as chat turns'
)
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Fields:
    """The columns one objective reads, as the config names them."""

    objective: str
    prompt: str
    chosen: str
    rejected: str
    completion: str
    label: str

    @classmethod
    def of(cls, cfg: TrainConfig) -> Fields:
        p, d = cfg.preference, cfg.dataset
        return cls(
            cfg.objective, d.prompt_field, p.chosen_field, p.rejected_field, d.completion_field, p.label_field
        )

    @property
    def paired(self) -> bool:
        return self.objective in ("dpo", "orpo")

    def needed(self, columns: list[str]) -> list[str]:
        """The columns a row must have (the prompt is optional for pairs: implicit)."""
        if self.paired:
            return [self.chosen, self.rejected]
        return [self.prompt, self.completion, self.label]

    def used(self, columns: list[str]) -> list[str]:
        optional = [self.prompt] if self.paired and self.prompt in columns else []
        return optional + self.needed(columns)


@dataclass
class Checked:
    """A row read: `record` in TRL's columns (prompt/chosen/rejected or prompt/completion/label), or
    why it is dropped (`drop`: empty) or refused (`code` and `detail`: a data error)."""

    record: dict[str, Any] | None = None
    drop: str | None = None
    code: str | None = None
    detail: str = ""


def read(value: dict[str, Any], fields: Fields) -> Checked:
    """One row of the source (a dict of its columns), as TRL will take it."""
    missing = [c for c in fields.needed(list(value)) if c not in value]
    if missing:
        keys = ", ".join(map(str, list(value)[:8])) or "none"
        return Checked(code="missing_column", detail=f"it has no {missing[0]!r} (its keys: {keys})")
    return _read_pair(value, fields) if fields.paired else _read_kto(value, fields)


def _read_pair(value: dict[str, Any], fields: Fields) -> Checked:
    chosen, rejected = value[fields.chosen], value[fields.rejected]
    prompt = value.get(fields.prompt)
    for name, part in ((fields.chosen, chosen), (fields.rejected, rejected)):
        if _blank(part):
            return Checked(drop=f"empty_{'chosen' if name == fields.chosen else 'rejected'}")
    problem = _kinds_problem(prompt, chosen, rejected, fields)
    if problem:
        return Checked(code="bad_chat" if "turn" in problem else "bad_value", detail=problem)
    if prompt is None or _blank(prompt):
        prompt, chosen, rejected = implicit_prompt(chosen, rejected)
    if chosen == rejected:
        return Checked(code="same_answers", detail=f"chosen and rejected are both {_short(chosen)}")
    return Checked(record={"prompt": prompt, "chosen": chosen, "rejected": rejected})


def _read_kto(value: dict[str, Any], fields: Fields) -> Checked:
    prompt, completion, label = value[fields.prompt], value[fields.completion], value[fields.label]
    if _blank(completion):
        return Checked(drop="empty_completion")
    if not isinstance(label, bool):
        return Checked(
            code="bad_label",
            detail=f"{fields.label!r} is {label!r} ({type(label).__name__}), not true or false",
        )
    problem = _kinds_problem(prompt, completion, None, fields)
    if problem:
        return Checked(code="bad_chat" if "turn" in problem else "bad_value", detail=problem)
    return Checked(record={"prompt": prompt, "completion": completion, "label": label})


def _kinds_problem(prompt: Any, first: Any, second: Any, fields: Fields) -> str | None:
    """All text or all turns, and every list of turns well formed."""
    parts = [(fields.prompt, prompt)] if prompt is not None and not _blank(prompt) else []
    names = (fields.chosen, fields.rejected) if fields.paired else (fields.completion,)
    parts += list(zip(names, (first, second)))
    kinds = {name: _kind(part) for name, part in parts}
    bad = [name for name, kind in kinds.items() if kind is None]
    if bad:
        return f"{bad[0]!r} is a {type(dict(parts)[bad[0]]).__name__}, neither text nor a list of turns"
    if len(set(kinds.values())) > 1:
        said = ", ".join(f"{name} is {kind}" for name, kind in kinds.items())
        return f"{said}; give all as text or all as lists of turns"
    for name, part in parts:
        if isinstance(part, list):
            found = turns_problem(part)
            if found:
                return f"{name}: {found}"
    return None


def _kind(part: Any) -> str | None:
    if isinstance(part, str):
        return "text"
    if isinstance(part, list):
        return "turns"
    return None


def turns_problem(turns: list) -> str | None:
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, dict):
            return f"turn {number} is not an object with role and content (a {type(turn).__name__})"
        if turn.get("role") not in ROLES:
            return f"turn {number} has role {str(turn.get('role'))[:40]!r}; allowed roles: {', '.join(ROLES)}"
        if not isinstance(turn.get("content"), str):
            return f"turn {number} has no text 'content'"
    return None


def implicit_prompt(chosen: Any, rejected: Any) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected): the shared start of chosen and rejected made the prompt, as TRL's
    extract_prompt does (turn by turn for conversations, character by character for text, a space
    before the split left with the answers)."""
    idx = 0
    for idx in range(min(len(chosen), len(rejected))):
        if chosen[idx] != rejected[idx]:
            if idx and chosen[idx - 1] == " ":
                idx -= 1
            break
    else:
        idx = min(len(chosen), len(rejected))
    return chosen[:idx], chosen[idx:], rejected[idx:]


def conversational(record: dict[str, Any]) -> bool:
    answer = record.get("chosen", record.get("completion"))
    return isinstance(answer, list)


def text_of(part: Any) -> str:
    """A prompt or an answer as one string, for a duplicate's key and for display."""
    if isinstance(part, str):
        return part
    return "\n".join(f"{t.get('role')}: {t.get('content')}" for t in part if isinstance(t, dict))


def _blank(part: Any) -> bool:
    if part is None:
        return True
    if isinstance(part, str):
        return not part.strip()
    return isinstance(part, list) and not part


def _short(part: Any) -> str:
    text = text_of(part).strip().replace("\n", " ")
    return repr(text if len(text) <= 60 else text[:57] + "...")
