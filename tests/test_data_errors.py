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


@pytest.mark.parametrize("cut", ["in the data", "in the header"])
def test_a_truncated_model_safetensors_is_named_with_its_sizes(cut, tmp_path):
    """Was SafetensorError's `incomplete metadata` with the generic model.name fix."""
    import os

    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import save_file

    from train_backend.errors import ModelLoadError, classify

    model = tmp_path / "model"
    model.mkdir()
    weights = model / "model.safetensors"
    save_file({"w": np.zeros((64, 64), np.float32)}, str(weights))
    whole = weights.stat().st_size
    os.truncate(weights, whole // 2 if cut == "in the data" else 20)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(f"model:\n  name: {model}\n")
    try:
        with safe_open(str(weights), framework="np"):  # what transformers' loader calls
            pass
    except Exception as exc:
        try:
            raise ModelLoadError(f"could not load the model from local path '{model}': {exc}") from exc
        except ModelLoadError as wrapped:
            verdict = classify(wrapped, "loading_model", str(run_dir))
    else:
        raise AssertionError("the cut file loaded")
    size = weights.stat().st_size
    assert verdict.kind == "model_load"
    assert verdict.message.startswith(f"model.safetensors ({weights}) is truncated: {size:,} bytes on disk")
    if cut == "in the data":
        assert f"its header declares {whole:,}" in verdict.message
    assert "Check model.name" not in verdict.hint and "Fetch or copy model.safetensors again" in verdict.hint
    assert "cockpit restart run" in verdict.hint
