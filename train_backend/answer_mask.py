"""Which tokens of a row train: the answers (a chat's assistant turns, a prompt/completion row's
completion) or every token, for any chat template.

The answers are found from the turn boundaries, not from `{% generation %}` markers (which most
templates lack): the conversation's prefixes are rendered with the chat template; an assistant
turn's span starts where the prefix before it, with the generation prompt, ends (what the model
writes after `<|im_start|>assistant\n` or `[/INST]`, a leading space included) and runs to where
the rendering through that turn ends, so the template's end-of-turn (`<|im_end|>`, `</s>`,
`<|eot_id|>`) trains with it: the model must learn to stop. The full rendering is tokenized once
with character offsets, and a token trains when its characters overlap such a span. Where a
template renders a prefix apart from the whole (a last turn treated differently), each turn's
text is found in order instead, and the end-of-turn the template writes after an answer.

A trained token is one whose prediction counts in the loss: the first token of a row never
trains, since nothing before it predicts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cockpit.fmt import quoted
from train_backend.errors import DataError

TRAIN_ON = ("auto", "answers", "all")
ANSWER_FORMATS = ("messages", "prompt_completion")  # formats whose rows have answers
IGNORE = -100  # the label of a token that does not train (the loss's ignore_index)
_PROBE_USER, _PROBE_ANSWER = "cockpit-probe-question", "cockpit-probe-answer"
_MARKER_MAX_CHARS = 32  # an end-of-turn longer than this is not one (a template that writes more)


@dataclass
class MaskedSample:
    """One row tokenized, with the tokens that train."""

    input_ids: list[int]  # truncated to max_length
    trained: list[bool]  # per token of input_ids: its prediction counts in the loss
    text: str = ""  # what was tokenized (the chat template's rendering); "" for token rows
    spans: list[tuple[int, int]] = field(default_factory=list)  # characters of `text` that train
    length: int = 0  # tokens before truncation
    answer_tokens_cut: int = 0  # trained tokens that max_length cut off

    @property
    def labels(self) -> list[int]:
        """input_ids with IGNORE where a token does not train (what the trainer's loss reads)."""
        return [t if keep else IGNORE for t, keep in zip(self.input_ids, self.trained)]

    @property
    def trained_tokens(self) -> int:
        return sum(self.trained)

    @property
    def truncated_answer(self) -> bool:
        """max_length cut some of the tokens that train."""
        return self.answer_tokens_cut > 0

    @property
    def answers_cut_off(self) -> bool:
        """max_length cut every token that trains: the row trains nothing."""
        return self.answer_tokens_cut > 0 and self.trained_tokens == 0


def resolve_train_on(train_on: str, fmt: str) -> str:
    """`answers` or `all` for data of format `fmt`: auto means the answers where rows have them."""
    if train_on == "auto":
        return "answers" if fmt in ANSWER_FORMATS else "all"
    if train_on == "answers" and fmt not in ANSWER_FORMATS:
        raise DataError(
            f"dataset.train_on: answers, but the data is in format {fmt!r}, which has no answers to tell "
            "from prompts. Give chat rows (a 'messages' column) or prompt/completion rows ('prompt' and "
            "'completion' columns), or set dataset.train_on: all to train on every token."
        )
    return train_on


def tokenize_with_mask(tokenizer, row: dict, fmt: str, train_on: str, max_length: int) -> MaskedSample:
    """`row` tokenized as the trainer trains it, with the tokens that train.

    Args:
        tokenizer: a fast tokenizer (character offsets); chat rows need its chat template.
        row: the dataset row, its columns named for `fmt`: `messages` (a list of role/content
            turns), `prompt` and `completion` (strings, or lists of turns), `text`, or `input_ids`.
        fmt: messages | prompt_completion | text | tokens.
        train_on: auto | answers | all (`resolve_train_on`).
        max_length: tokens kept (the rest cut off, as the trainer truncates).

    Returns:
        A MaskedSample; its `labels` are what the loss reads.

    Raises:
        DataError: `answers` on text or token rows; a template whose rendering hides an answer.
    """
    mode = resolve_train_on(train_on, fmt)
    if fmt == "tokens":
        ids = list(row["input_ids"])
        return _cut(ids, [True] * len(ids), "", [], max_length)
    text, spans, special = _render(tokenizer, row, fmt)
    if mode == "all":
        spans = [(0, len(text))]
    encoded = _encode(tokenizer, text, special)
    trained = [_inside(start, end, spans) for start, end in encoded["offset_mapping"]]
    return _cut(list(encoded["input_ids"]), trained, text, spans, max_length)


def _cut(ids: list[int], trained: list[bool], text: str, spans, max_length: int) -> MaskedSample:
    if trained:
        trained[0] = False  # nothing before the first token predicts it
    return MaskedSample(
        input_ids=ids[:max_length],
        trained=trained[:max_length],
        text=text,
        spans=spans,
        length=len(ids),
        answer_tokens_cut=sum(trained[max_length:]),
    )


def _render(tokenizer, row: dict, fmt: str) -> tuple[str, list[tuple[int, int]], bool]:
    """(the text tokenized, the answers' character spans, whether the tokenizer adds its specials)."""
    if fmt == "messages":
        turns = list(row["messages"])
        text = tokenizer.apply_chat_template(turns, tokenize=False)
        return text, answer_spans(tokenizer, turns, text), False
    if fmt == "prompt_completion":
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, list):  # conversational: only the completion's assistant turns train
            turns = list(prompt) + list(completion)
            text = tokenizer.apply_chat_template(turns, tokenize=False)
            return text, answer_spans(tokenizer, turns, text, first=len(prompt)), False
        eos = tokenizer.eos_token or ""
        tail = completion if completion.endswith(eos) else completion + eos  # as TRL adds it
        return prompt + tail, [(len(prompt), len(prompt) + len(tail))], True
    if fmt == "text":
        eos = tokenizer.eos_token or ""
        text = row["text"]
        return (text if text.endswith(eos) else text + eos), [], True
    raise DataError(f"dataset.format: {fmt!r} is not one of messages, prompt_completion, text, tokens")


def answer_spans(tokenizer, turns: list[dict], text: str, first: int = 0) -> list[tuple[int, int]]:
    """The character spans of `text` (the template's rendering of `turns`) that hold the assistant
    turns from turn `first` on, each with the end-of-turn the template writes after it.
    An empty assistant turn has no span."""
    spans: list[tuple[int, int]] = []
    cursor = 0  # where the next turn's text may start
    marker = None
    for index, turn in enumerate(turns):
        content = _content(turn).strip()
        answer = turn.get("role") == "assistant" and index >= first and content
        header_end = None  # where the template's generation prompt ends: the answer starts there
        if answer:
            header_end = _prefix_end(tokenizer, turns[:index], text, generation_prompt=True)
            if header_end is not None and header_end < cursor:
                header_end = None
        found = text.find(content, cursor if header_end is None else header_end) if content else -1
        if not answer:
            if found >= 0:
                cursor = found + len(content)
            continue
        if found < 0:
            raise DataError(
                f"the chat template does not write assistant turn {index + 1} as its text "
                f"({quoted(content, 60)}): the answer's tokens cannot be told from the prompt's. "
                "Set dataset.train_on: all, or use a template that writes each turn's content as it is."
            )
        content_end = found + len(content)
        end = _prefix_end(tokenizer, turns[: index + 1], text, generation_prompt=False)
        if end is not None and end >= content_end:
            end = max(content_end, len(text[:end].rstrip()))  # the newline after an end-of-turn: not it
        else:
            if marker is None:  # one probe per row, only where the prefixes did not tell
                marker = end_of_turn(tokenizer)
            end = content_end + _marker_length(text, content_end, marker)
        spans.append((found if header_end is None else header_end, end))
        cursor = end
    return spans


def end_of_turn(tokenizer) -> str:
    """What the chat template writes right after an assistant's answer (`<|im_end|>`, `</s>`,
    `<|eot_id|>`): the first word after it in a probe conversation; "" when it writes nothing there
    or refuses the probe."""
    turns = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ANSWER}]
    try:
        text = tokenizer.apply_chat_template(turns, tokenize=False)
    except Exception:  # a template with rules of its own (roles, a system turn): no marker known
        return ""
    at = text.rfind(_PROBE_ANSWER)
    words = text[at + len(_PROBE_ANSWER) :].split() if at >= 0 else []
    return words[0] if words and len(words[0]) <= _MARKER_MAX_CHARS else ""


def _marker_length(text: str, at: int, marker: str) -> int:
    """Characters from `at` to the end of the end-of-turn `marker` when only whitespace comes
    between, else 0."""
    rest = text[at:]
    stripped = rest.lstrip()
    if marker and stripped.startswith(marker):
        return len(rest) - len(stripped) + len(marker)
    return 0


def _prefix_end(tokenizer, turns: list[dict], text: str, generation_prompt: bool) -> int | None:
    """The length of the rendering of `turns` when `text` starts with it, else None."""
    if not turns:
        return None
    try:
        head = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)
    except Exception:  # a template that refuses a partial conversation: found by content instead
        return None
    return len(head) if isinstance(head, str) and text.startswith(head) else None


def _content(turn: dict) -> str:
    content = turn.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


def _encode(tokenizer, text: str, special: bool) -> dict:
    try:
        return tokenizer(text, add_special_tokens=special, return_offsets_mapping=True)
    except NotImplementedError as exc:  # a slow (Python) tokenizer has no offsets
        raise DataError(
            "dataset.train_on: answers needs a fast tokenizer (character offsets); "
            f"{type(tokenizer).__name__} has none. Use the model's tokenizer.json, or set "
            "dataset.train_on: all."
        ) from exc


def _inside(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    """Whether the token of characters [start, end) falls in a span (overlaps it; an empty token:
    sits in it)."""
    for a, b in spans:
        overlaps = start < b and end > a
        if overlaps or (start == end and a <= start < b):
            return True
    return False
