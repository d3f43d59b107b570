"""Each row of one source, as the trainer would take it: the format and its column, the rows it
drops (and why), the rows it cannot train on (data errors), empty answers, exact duplicates,
and the texts handed to the tokenizer in batches.

The format is decided as `train_backend.data.detect_format` decides it, from the columns of the
first FORMAT_ROWS rows (all of them, for a source with a schema).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable
from typing import Any

from train_backend import prompt_completion as pc
from train_backend.data import CHAT_ROLES, _chat_problem
from train_backend.datacheck.lengths import Lengths, Named
from train_backend.datacheck.opening import Opened, Problem
from train_backend.datacheck.reader import RawRow

FORMAT_ROWS = 200
PC = pc.FORMAT
BATCH = 256
COLUMNS_MAX = 200  # column names kept per source (a row of a million keys is not a schema)
DUPLICATES_MAX_ROWS = 8_000_000  # rows whose hashes are kept to find duplicates (12 bytes each)
PREVIEW_ROWS = 2  # kept rows of each source shown through the template
TEMPLATES_MAX = 10_000  # sequences of roles whose rendering is remembered


def ref_of(raw: RawRow) -> dict:
    return {"row": raw.row, "line": raw.line} if raw.line is not None else {"row": raw.row}


class Duplicates:
    """Exact duplicates across every source, by an 8-byte hash of what a row trains on."""

    def __init__(self) -> None:
        self.hashes = array("Q")
        self.refs = array("Q")  # source << 40 | row
        self.full = False

    def add(self, source: int, row: int, text: str) -> None:
        if len(self.hashes) >= DUPLICATES_MAX_ROWS:
            self.full = True
            return
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        self.hashes.append(int.from_bytes(digest, "little"))
        self.refs.append(source << 40 | row)

    def extend(self, hashes: array, refs: list[int]) -> None:
        room = DUPLICATES_MAX_ROWS - len(self.hashes)
        self.full = self.full or len(hashes) > room
        self.hashes.extend(hashes[:room])
        self.refs.extend(refs[:room])

    def found(self) -> dict:
        import numpy as np

        hashes = np.frombuffer(self.hashes, dtype=np.uint64) if len(self.hashes) else np.zeros(0, np.uint64)
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
        repeat = np.nonzero(ordered[1:] == ordered[:-1])[0] + 1 if len(ordered) > 1 else np.zeros(0, int)
        pairs = []
        for at in repeat[:200]:
            first = at - 1
            while first > 0 and ordered[first - 1] == ordered[at]:
                first -= 1
            pairs.append((int(self.refs[order[at]]), int(self.refs[order[first]])))
        pairs.sort()
        named = [{"copy": _ref(c), "of": _ref(o)} for c, o in pairs[:5]]
        return {
            "count": len(repeat),
            "rows": named,
            "checked_rows": len(self.hashes),
            "capped": self.full,
        }


def _ref(packed: int) -> dict:
    return {"source": packed >> 40, "row": packed & ((1 << 40) - 1)}


class SourceRows:
    """One source's rows: counted, checked, rendered and measured."""

    def __init__(
        self,
        opened: Opened,
        tokenizer,
        lengths: Lengths,
        duplicates: Duplicates,
        limit_chars: int,
        max_rows: int | None,
        answers: Callable | None,
    ) -> None:
        self.opened, self.spec = opened, opened.spec
        self.tokenizer = tokenizer
        self.lengths = lengths
        self.duplicates = duplicates
        self.limit_chars = limit_chars
        self.max_rows = max_rows  # dataset.max_samples: the rows past it are read, not trained on
        self.answers = answers  # (turns, max_length) -> (answer tokens cut, all cut), or None
        self.format: str | None = None
        self.format_why = ""
        self.column = ""
        self.needed: list[str] = []  # the columns the format trains on
        self.columns: dict[str, int] = {}  # name -> rows that have it
        self.read = self.kept = self.unused = 0
        self.bytes_read = 0
        self.errors: dict[str, Named] = {}
        self.error_detail: dict[str, str] = {}
        self.dropped: dict[str, Named] = {}
        self.empty_answers = Named()
        self.no_answer = Named()
        self.both_columns = Named()
        self.problems: list[Problem] = []
        self.preview: list[tuple[dict, dict]] = []  # (ref, row) of the first kept rows
        self.first_truncated: tuple[dict, dict] | None = None
        self._waiting: list[RawRow] = []
        self._decided = False
        self.templates: dict[tuple, int | str] = {}  # roles -> what the template adds, or its refusal
        self._batch: list[tuple[dict, object]] = []

    # ------------------------------------------------------------ reading

    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        for raw in self.opened.rows():
            self.feed(raw)
            if progress is not None and self.read % 4096 == 0:
                progress(self.read, self.bytes_read)
        self.finish()

    def feed(self, raw: RawRow) -> None:
        self.read += 1
        self.bytes_read += raw.size + 1
        if raw.problem is not None:
            self.error(raw.problem, ref_of(raw), raw.detail, byte=raw.byte)
            return
        if not self._decided:
            self._waiting.append(raw)
            if len(self._waiting) >= FORMAT_ROWS:
                self._decide()
            return
        self._row(raw)

    def finish(self) -> None:
        if not self._decided:
            self._decide()
        self._flush()

    def _decide(self) -> None:
        seen: dict[str, None] = dict.fromkeys(self.opened.columns or [])
        for raw in self._waiting:
            seen.update(dict.fromkeys(raw.value or {}))
        self.decide_columns(list(seen))
        waiting, self._waiting = self._waiting, []
        for raw in waiting:
            self._row(raw)

    def decided(self) -> tuple[str | None, str, str, list[str]]:
        """The format decided, for another SourceRows over the same source (datacheck.parallel)."""
        return self.format, self.format_why, self.column, list(self.needed)

    def decide(self, fmt: str | None, why: str, column: str, needed: list[str]) -> None:
        self.format, self.format_why, self.column, self.needed = fmt, why, column, needed
        self._decided = True

    def decide_columns(self, columns: list[str]) -> None:
        """The format and its columns, from the columns the first rows have."""
        seen = dict.fromkeys(columns)
        self._decided = True
        self.format, self.format_why = detect(list(seen), self.spec)
        self.column = {
            "text": self.spec.text_field,
            "messages": self.spec.messages_field,
            PC: self.spec.prompt_field,
        }.get(self.format or "", "input_ids")
        self.needed = [self.column] + ([self.spec.completion_field] if self.format == PC else [])
        if self.format is None:
            self.problems.append(
                Problem(
                    "format",
                    f"no column the trainer can use: the rows have {_names(list(seen))}",
                    expected=f"'{self.spec.text_field}' (text), '{self.spec.messages_field}' (chat turns) or "
                    "'input_ids' (tokens)",
                    fix="set text_field or messages_field to the right column, or the format",
                )
            )

    def state(self) -> dict[str, Any]:
        """What a worker hands back to be merged (train_backend.datacheck.parallel.absorb)."""
        return {
            "read": self.read,
            "kept": self.kept,
            "bytes_read": self.bytes_read,
            "columns": self.columns,
            "errors": self.errors,
            "error_detail": self.error_detail,
            "dropped": self.dropped,
            "empty_answers": self.empty_answers,
            "no_answer": self.no_answer,
            "both_columns": self.both_columns,
            "preview": self.preview,
            "first_truncated": self.first_truncated,
            "lengths": self.lengths,
            "duplicates": (self.duplicates.hashes, self.duplicates.refs),
        }

    # ------------------------------------------------------------ one row

    def _row(self, raw: RawRow) -> None:
        value = raw.value or {}
        for key in value:
            if key in self.columns:
                self.columns[key] += 1
            elif len(self.columns) < COLUMNS_MAX:
                self.columns[key] = 1
        if self.format is None:
            return
        ref = ref_of(raw)
        if self.format == "messages" and self.spec.text_field in value and self.column in value:
            self.both_columns.add(ref)
        missing = [c for c in self.needed if c not in value]
        if missing:
            keys = ", ".join(map(str, list(value)[:8])) or "none"
            self.error("missing_column", ref, f"it has no {missing[0]!r} (its keys: {keys})")
            return
        if self.format == PC:
            cell = {"prompt": value[self.spec.prompt_field], "completion": value[self.spec.completion_field]}
        else:
            cell = value[self.column]
        checked = self._check_cell(cell, ref)
        if checked is None:
            return
        if self.max_rows is not None and self.kept >= self.max_rows:
            self.unused += 1
            return
        self.kept += 1
        if len(self.preview) < PREVIEW_ROWS:
            self.preview.append((ref, cell if self.format == PC else {self.format: cell}))
        self._batch.append((ref, checked))
        if len(self._batch) >= BATCH:
            self._flush()

    def _check_cell(self, cell, ref: dict):
        """The cell, ready to render, or None when the row is dropped or refused."""
        fmt = self.format
        if fmt == "text":
            if cell is None:
                self.drop("null", ref)
                return None
            if not isinstance(cell, str):
                self.error("bad_value", ref, f"{self.column!r} is a {type(cell).__name__}, not text")
                return None
            if not cell.strip():
                self.drop("empty", ref)
                return None
            if len(cell) > self.limit_chars:
                self.error("too_long", ref, f"{len(cell):,} characters")
                return None
            return cell
        if fmt == PC:
            return self._check_prompt_completion(cell, ref)
        if fmt == "tokens":
            if cell is None or (isinstance(cell, list) and not cell):
                self.drop("empty", ref)
                return None
            if not isinstance(cell, list) or not all(isinstance(t, int) for t in cell):
                self.error("bad_value", ref, f"{self.column!r} is not a list of token ids")
                return None
            return cell
        if cell is None:
            self.drop("null", ref)
            return None
        if isinstance(cell, list) and not cell:
            self.drop("no_turns", ref)
            return None
        if not _plain_turns(cell):  # the trainer's own check, for its words
            problem = _chat_problem(cell) or "turns of an unexpected shape"
            self.error("bad_chat", ref, problem)
            return None
        chars = sum(len(t["content"]) for t in cell)
        if chars > self.limit_chars:
            self.error("too_long", ref, f"{chars:,} characters")
            return None
        answered = empty = False
        for turn in cell:
            if turn["role"] == "assistant":
                answered = True
                empty = empty or not turn["content"].strip()
        if not answered:
            self.no_answer.add(ref)
        elif empty:
            self.empty_answers.add(ref)
        return cell

    def _check_prompt_completion(self, cell: dict, ref: dict):
        """A prompt and its completion, both text or both turns (train_backend.prompt_completion)."""
        if pc.is_empty(cell):
            self.drop("empty_completion", ref)
            return None
        problem = pc.problem(cell, _chat_problem)
        if problem is not None:
            self.error("bad_chat", ref, problem)
            return None
        chars = sum(len(_content(part)) for part in (cell["prompt"], cell["completion"]))
        if chars > self.limit_chars:
            self.error("too_long", ref, f"{chars:,} characters")
            return None
        return cell

    def drop(self, why: str, ref: dict) -> None:
        self.dropped.setdefault(why, Named()).add(ref)

    def error(self, code: str, ref: dict, detail: str, byte: int | None = None) -> None:
        named = self.errors.setdefault(code, Named())
        if not named.count:
            self.error_detail[code] = detail
            if byte is not None:
                self.error_detail[f"{code}:byte"] = str(byte)
        named.add(ref)

    # ------------------------------------------------------------ tokens

    def _flush(self) -> None:
        """Measure the batch: every row's characters (a chat row's from its turns and what the
        template adds to turns of its roles); the rows the sample takes and the long ones rendered
        and tokenized, the others counted from their characters."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        chosen: list[tuple[dict, object, bool]] = []
        for ref, cell in batch:
            if self.format == "tokens":
                self.lengths.wanted(len(cell))
                self.duplicates.add(self.opened.number, ref["row"], ",".join(map(str, cell)))
                if self.lengths.add_exact(ref, len(cell), len(cell), True) and self.first_truncated is None:
                    self.first_truncated = (ref, {"input_ids": cell})
                continue
            turns = _turns(cell, self.format)
            if turns is not None:
                overhead = self._template_overhead(ref, turns)
                if overhead is None:
                    continue
                key = "\x00".join(f"{t['role']}\x01{t['content']}" for t in turns)
                chars = sum(len(t["content"]) for t in turns) + overhead
            elif self.format == PC:
                key = f"{cell['prompt']}\x00{cell['completion']}"
                chars = len(cell["prompt"]) + len(cell["completion"])
            else:
                key, chars = cell, len(cell)
            self.duplicates.add(self.opened.number, ref["row"], key)
            in_sample, tokenize = self.lengths.wanted(chars)
            if tokenize and self.tokenizer is not None:
                chosen.append((ref, cell, in_sample))
            else:
                self.lengths.add_estimated(chars)
        if chosen:
            self._tokenize(chosen)

    def _tokenize(self, chosen: list[tuple[dict, object, bool]]) -> None:
        texts = self._render([(ref, cell) for ref, cell, _ in chosen])
        kept = [(c, t) for c, t in zip(chosen, texts) if t is not None]
        if not kept:
            return
        lengths: list[int] = [0] * len(kept)
        for special in (True, False):  # text takes the tokenizer's specials; a template writes its own
            at = [i for i, ((_, c, _), _) in enumerate(kept) if (_turns(c, self.format) is None) == special]
            if not at:
                continue
            encoded = self.tokenizer(
                [kept[i][1] for i in at], add_special_tokens=special, return_attention_mask=False
            )["input_ids"]
            for i, ids in zip(at, encoded):
                lengths[i] = len(ids)
        for ((ref, cell, in_sample), text), length in zip(kept, lengths):
            if self.lengths.add_exact(ref, length, len(text), in_sample):
                row = cell if self.format == PC else {self.format: cell}
                if self.first_truncated is None:
                    self.first_truncated = (ref, row)
                if self.format in ("messages", PC):
                    self._answer_cut(ref, row)

    def _template_overhead(self, ref: dict, turns) -> int | None:
        """Characters the chat template adds to turns of these roles (rendered once per sequence of
        roles, which is what a template refuses: an order, a role); None when it refuses them."""
        roles = tuple(t["role"] for t in turns)
        known = self.templates.get(roles)
        if known is None:
            if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
                known = 10 * len(turns)
            else:
                try:
                    rendered = self.tokenizer.apply_chat_template(turns, tokenize=False)
                    known = len(rendered) - sum(len(t["content"]) for t in turns)
                except Exception as exc:  # jinja's TemplateError: the template's own words
                    known = f"{type(exc).__name__}: {str(exc)[:300]}"
            if len(self.templates) < TEMPLATES_MAX:
                self.templates[roles] = known
        if isinstance(known, str):
            self.error("template", ref, known)
            self.kept -= 1
            return None
        return known

    def _render(self, batch: list[tuple[dict, object]]) -> list[str | None]:
        """What the tokenizer is given: a text with its end-of-sequence token (as TRL adds it; a
        prompt and its completion joined), or the chat rendered by the template (a row it refuses
        is a data error)."""
        eos = getattr(self.tokenizer, "eos_token", None) or ""
        texts: list[str | None] = [None] * len(batch)
        chats: list[int] = []
        for i, (_, cell) in enumerate(batch):
            if self.format == "text":
                texts[i] = cell if cell.endswith(eos) else cell + eos
            elif self.format == PC and _turns(cell, PC) is None:
                completion = cell["completion"]
                texts[i] = cell["prompt"] + completion + ("" if completion.endswith(eos) else eos)
            else:
                chats.append(i)
        if not chats:
            return texts
        turns = [_turns(batch[i][1], self.format) for i in chats]
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            for i, chat in zip(chats, turns):
                texts[i] = _plain_chat(chat)
            return texts
        try:
            for i, text in zip(chats, self.tokenizer.apply_chat_template(turns, tokenize=False)):
                texts[i] = text
            return texts
        except Exception:  # one row the template refuses: find it (and any other) row by row
            pass
        for i, chat in zip(chats, turns):
            try:
                texts[i] = self.tokenizer.apply_chat_template(chat, tokenize=False)
            except Exception as exc:  # jinja's TemplateError: the template's own words
                self.error("template", batch[i][0], f"{type(exc).__name__}: {str(exc)[:300]}")
                self.kept -= 1
        return texts

    def _answer_cut(self, ref: dict, row: dict) -> None:
        if self.answers is None or self.lengths.answers_looked_at >= _answer_rows_max():
            return
        self.lengths.answers_looked_at += 1
        try:
            cut, lost = self.answers(row, self.format)
        except Exception:  # a template the mask cannot read: said by the preview, not here
            return
        if lost:
            self.lengths.answer_lost.add(ref)
        elif cut:
            self.lengths.answer_cut.add(ref)

    # ------------------------------------------------------------ the source's part of the report

    def used_columns(self) -> list[str]:
        return list(self.needed) if self.format else []

    def ignored_columns(self) -> list[str]:
        return [c for c in self.columns if c not in self.used_columns()]


def _answer_rows_max() -> int:
    from train_backend.datacheck.lengths import ANSWER_CUT_ROWS_MAX

    return ANSWER_CUT_ROWS_MAX


def _plain_turns(turns) -> bool:
    """Whether every turn is an object with a known role and text content (the common case, checked
    fast; anything else goes to the trainer's own check for its words)."""
    if not isinstance(turns, list):
        return False
    for turn in turns:
        if type(turn) is not dict or turn.get("role") not in ROLES or type(turn.get("content")) is not str:
            return False
    return True


ROLES = frozenset(CHAT_ROLES)


def _turns(cell, fmt: str) -> list | None:
    """A row's chat turns: a chat row's, or a conversational prompt/completion's; None for text."""
    if fmt == "messages":
        return cell
    if fmt == PC and isinstance(cell["prompt"], list):
        return [*cell["prompt"], *cell["completion"]]
    return None


def _content(part) -> str:
    if isinstance(part, str):
        return part
    return "".join(str(t.get("content") or "") for t in part if isinstance(t, dict))


def _plain_chat(turns) -> str:
    """A chat row as text when there is no template to render it (only its length is used)."""
    return "\n".join(f"{t.get('role')}: {t.get('content')}" for t in turns)


def detect(columns: list[str], spec) -> tuple[str | None, str]:
    """(format, why) as the trainer detects it; (None, why) when no column fits."""
    if spec.format != "auto":
        return spec.format, f"format: {spec.format} (set)"
    if "input_ids" in columns:
        return "tokens", "auto: column 'input_ids'"
    if spec.messages_field in columns:
        return "messages", f"auto: column {spec.messages_field!r} (chat turns)"
    if spec.prompt_field in columns and spec.completion_field in columns:
        return PC, f"auto: columns {spec.prompt_field!r} and {spec.completion_field!r}"
    if spec.text_field in columns:
        return "text", f"auto: column {spec.text_field!r}"
    return None, "auto: no known column"


def _names(columns: list[str]) -> str:
    return ", ".join(repr(c) for c in columns[:10]) or "no columns"


ALLOWED_ROLES = ", ".join(CHAT_ROLES)
