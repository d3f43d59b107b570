"""The finish line's config keys (dataset.eval_split / eval_fraction, eval.*): defaults, limits, and
the combinations that cannot run, refused before anything starts."""

from __future__ import annotations

import pytest

from cockpit.config import load as config_load
from cockpit.config import schema as config
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError


def test_defaults_turn_evaluation_off():
    cfg = load_config(None)
    assert cfg.dataset.eval_split is None and cfg.dataset.eval_fraction is None
    assert cfg.eval.steps is None and cfg.eval.prompts is None and cfg.eval.max_new_tokens == 64


def test_the_template_writes_every_eval_key():
    text = config.template()
    for key in ("eval_split:", "eval_fraction:", "eval:", "steps:", "prompts:", "max_new_tokens:"):
        assert key in text, key


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["dataset.eval_fraction=0"], "dataset.eval_fraction: 0.0 (float) is out of range; it must be > 0"),
        (
            ["dataset.eval_fraction=0.7"],
            "dataset.eval_fraction: 0.7 (float) is out of range; it must be <= 0.5",
        ),
        (["dataset.eval_fraction=-0.1"], "it must be > 0"),
        (["dataset.eval_fraction=lots"], "dataset.eval_fraction: expected a number"),
        (
            ["dataset.eval_fraction=0.1", "dataset.eval_split=validation"],
            "dataset.eval_split ('validation') and dataset.eval_fraction (0.1) are both set",
        ),
        (["dataset.eval_split=train"], "is the split trained on (dataset.split)"),
        (["eval.steps=10"], "eval.steps: 10, but there is no eval data; set dataset.eval_fraction"),
        (
            ["eval.steps=0", "dataset.eval_fraction=0.1"],
            "eval.steps: 0 (int) is out of range; it must be >= 1",
        ),
        (
            ["eval.prompts=3"],
            "eval.prompts: 3 takes that many prompts from the eval split, and there is none",
        ),
        (["eval.prompts=[]"], "eval.prompts: the list is empty; give at least one prompt"),
        (["eval.prompts=['hi', ' ']"], "eval.prompts: one of the prompts is empty"),
        (["eval.prompts=0", "dataset.eval_fraction=0.1"], "eval.prompts: 0 (int) is out of range"),
        (["eval.max_new_tokens=0"], "eval.max_new_tokens: 0 (int) is out of range; it must be >= 1"),
        (["eval.prompts=yes"], "eval.prompts: expected a list of strings or a whole number"),
    ],
)
def test_bad_eval_settings_name_the_key_and_the_fix(overrides, expected):
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    assert expected in str(caught.value)


def test_an_eval_file_that_does_not_exist(tmp_path):
    missing = tmp_path / "eval.jsonl"
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"dataset.eval_split={missing}"])
    text = str(caught.value)
    assert f"dataset.eval_split: {str(missing)!r} does not exist" in text and "eval_fraction" in text


def test_good_eval_settings_are_typed(tmp_path):
    cfg = load_config(None, ["dataset.eval_fraction=0.05", "eval.steps=20", "eval.prompts=4"])
    assert cfg.dataset.eval_fraction == 0.05 and cfg.eval.steps == 20 and cfg.eval.prompts == 4
    cfg = load_config(None, ["eval.prompts=['What is LoRA?', 'Say hi']"])
    assert cfg.eval.prompts == ["What is LoRA?", "Say hi"]


def test_a_relative_eval_file_becomes_absolute(tmp_path, monkeypatch):
    (tmp_path / "eval.jsonl").write_text('{"text": "a"}\n')
    monkeypatch.chdir(tmp_path)
    cfg = config_load.with_absolute_paths(load_config(None, ["dataset.eval_split=eval.jsonl"]), tmp_path)
    assert cfg.dataset.eval_split == str(tmp_path / "eval.jsonl")
