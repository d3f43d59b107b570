"""Chat rows are checked before training: a role typo or a missing key is a `data` error naming the
row, the value and what is allowed; empty rows are dropped and said, with their count and why."""

from __future__ import annotations

import json

import pytest

from cockpit.config.schema import DatasetSection
from train_backend.data import prepare
from train_backend.errors import DataError, classify

GOOD = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from train_backend.model import shipped_tokenizer_dir

    return AutoTokenizer.from_pretrained(shipped_tokenizer_dir())


def write_rows(path, rows, key="messages"):
    path.write_text("".join(json.dumps({key: r}) + "\n" for r in rows))
    return DatasetSection(path=str(path))


def data_error(section, tokenizer) -> str:
    with pytest.raises(DataError) as info:
        prepare(section, tokenizer, 64)
    assert classify(info.value, "preparing_data").kind == "data"
    return str(info.value)


def test_a_role_typo_names_the_row_the_value_and_the_allowed_roles(tmp_path, tokenizer):
    rows = [GOOD] * 4 + [[{"role": "usr", "content": "hi"}]] + [GOOD] * 3
    message = data_error(write_rows(tmp_path / "chat.jsonl", rows), tokenizer)
    assert message.startswith("dataset row 5 (column 'messages'): turn 1 has role 'usr'")
    assert "allowed roles: system, user, assistant, tool" in message


def test_a_missing_role_key_is_named_with_the_keys_there_are(tmp_path, tokenizer):
    rows = [GOOD, [{"rol": "user", "content": "hi"}], [{"rol": "user", "content": "x"}]] + [GOOD] * 2
    message = data_error(write_rows(tmp_path / "chat.jsonl", rows), tokenizer)
    assert "dataset row 2 (column 'messages'): turn 1 has no 'role' key (its keys: rol, content)" in message
    assert "2 rows have such problems (rows 2, 3)" in message


def test_a_role_the_template_refuses_names_the_row(tmp_path, tokenizer):
    rows = [GOOD, GOOD, [{"role": "tool", "content": "42"}]]
    message = data_error(write_rows(tmp_path / "chat.jsonl", rows), tokenizer)
    assert message.startswith("dataset row 3: the tokenizer's chat template refused it: TemplateError")


def test_empty_rows_are_dropped_and_said(tmp_path, tokenizer):
    path = tmp_path / "text.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["a b", "", "c d", "  ", "e"]))
    prepared = prepare(DatasetSection(path=str(path)), tokenizer, 64)
    assert prepared.stats["samples"] == 3 and prepared.stats["dropped"] == 2
    assert prepared.dropped_note == "dropped 2 of 5 rows: empty or missing 'text' (rows 2, 4)"
    good = write_rows(tmp_path / "good.jsonl", [GOOD] * 3)
    assert prepare(good, tokenizer, 64).dropped_note is None
