"""Token lengths of preference rows, counted as TRL's DPO and KTO trainers tokenize them (the prompt
alone, and the prompt with each answer; the answer is what follows the prompt's tokens), and what
the cuts take: `preference.max_prompt_length` keeps the end of a longer prompt, then
`training.max_length` keeps the start of each prompt + answer (TRL's keep_start), so the end of a
long answer goes, and a prompt as long as max_length leaves no answer (TRL drops that row)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BATCH = 256


@dataclass(frozen=True)
class RowTokens:
    """One row: its prompt's tokens and each answer's (chosen and rejected, or the completion)."""

    prompt: int
    answers: tuple[int, ...]

    def sequences(self) -> tuple[int, ...]:
        """Each prompt + answer as the model sees it, before any cut."""
        return tuple(self.prompt + a for a in self.answers)


@dataclass(frozen=True)
class Cut:
    """What the cuts take from one row."""

    prompt_cut: int  # prompt tokens max_prompt_length takes off its start
    answer_cut: int  # answer tokens max_length takes off the ends (all answers together)
    answer_lost: bool  # an answer with no token left: TRL drops the row
    kept: tuple[int, ...]  # each sequence's tokens after the cuts

    @property
    def cut(self) -> bool:
        return self.prompt_cut > 0 or self.answer_cut > 0


def cut(row: RowTokens, max_length: int, max_prompt_length: int | None) -> Cut:
    prompt = row.prompt if max_prompt_length is None else min(row.prompt, max_prompt_length)
    kept, answer_cut, lost = [], 0, False
    for answer in row.answers:
        room = max(0, max_length - prompt)
        answer_cut += max(0, answer - room)
        lost = lost or (answer > 0 and room == 0)
        kept.append(min(prompt + answer, max_length))
    return Cut(row.prompt - prompt, answer_cut, lost, tuple(kept))


def measure(records: list[dict[str, Any]], tokenizer, answer_keys: tuple[str, ...]) -> list[RowTokens]:
    """Every record's tokens, in batches. `answer_keys`: ("chosen", "rejected") or ("completion",)."""
    out: list[RowTokens] = []
    for start in range(0, len(records), BATCH):
        out.extend(_batch(records[start : start + BATCH], tokenizer, answer_keys))
    return out


def _batch(records: list[dict[str, Any]], tokenizer, answer_keys: tuple[str, ...]) -> list[RowTokens]:
    prompts = _encode([r["prompt"] for r in records], tokenizer, generation=True)
    eos = getattr(tokenizer, "eos_token", None) or ""
    whole = []
    for key in answer_keys:
        joined = [_joined(r["prompt"], r[key], eos) for r in records]
        whole.append(_encode(joined, tokenizer, generation=False))
    out = []
    for i, prompt_ids in enumerate(prompts):
        shared = min(_common(prompt_ids, seq[i]) for seq in whole)
        out.append(RowTokens(shared, tuple(len(seq[i]) - shared for seq in whole)))
    return out


def _joined(prompt: Any, answer: Any, eos: str) -> Any:
    if isinstance(answer, list):
        return [*(prompt or []), *answer]
    text = str(prompt or "") + answer
    return text if not eos or text.endswith(eos) else text + eos  # TRL adds the eos a text answer lacks


def _encode(items: list[Any], tokenizer, generation: bool) -> list[list[int]]:
    """Text with the tokenizer's specials (as TRL's _tokenize); chat turns through the template."""
    texts, chats = [], []
    for i, item in enumerate(items):
        (chats if isinstance(item, list) else texts).append(i)
    out: list[list[int]] = [[] for _ in items]
    if texts:
        encoded = tokenizer([str(items[i]) for i in texts], add_special_tokens=True)["input_ids"]
        for i, ids in zip(texts, encoded):
            out[i] = list(ids)
    if chats:
        rendered = [
            tokenizer.apply_chat_template(items[i], tokenize=False, add_generation_prompt=generation)
            if items[i]
            else ""
            for i in chats
        ]
        encoded = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        for i, ids in zip(chats, encoded):
            out[i] = list(ids)
    return out


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
