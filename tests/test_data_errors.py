"""A local dataset file or model folder that cannot be read says what is wrong with it (no library's bare
wrapper)."""

from __future__ import annotations

import pytest

from cockpit.config.schema import DatasetSection
from train_backend.data import load_raw
from train_backend.errors import DataError


def load_error(path) -> str:
    with pytest.raises(DataError) as info:
        load_raw(DatasetSection(path=str(path)))
    return str(info.value)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_file_is_named_empty(tmp_path, content):
    path = tmp_path / "train.jsonl"
    path.write_text(content)
    assert f"dataset.path: {str(path)!r} is empty" in load_error(path)


def test_json_lines_with_a_garbage_line_name_the_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a"}\n\nnot json at all\n{"text": "b"}\n')
    message = load_error(path)
    assert "line 3 is not a JSON object: 'not json at all'" in message
    assert "DatasetGenerationError" not in message


def test_a_bad_json_file_gives_the_parsers_reason(tmp_path):
    path = tmp_path / "train.json"
    path.write_text('[{"text": "a"}, {"text": ')
    message = load_error(path)
    assert "could not load dataset" in message and "DatasetGenerationError" not in message


def test_a_model_folder_without_tokenizer_files_says_so(tmp_path):
    from train_backend.model import _load_failure

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    exc = ValueError("Couldn't instantiate the backend tokenizer from one of: \n(1) a `tokenizers` file")
    message = _load_failure("tokenizer", str(tmp_path), exc)
    assert "the folder has no tokenizer files" in message and "tokenizer.save_pretrained" in message
    (tmp_path / "tokenizer.json").write_text("{}")
    assert "no tokenizer files" not in _load_failure("tokenizer", str(tmp_path), exc)
