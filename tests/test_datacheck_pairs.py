"""The data check of a preference objective (train_backend.datacheck.pairs): the rows the trainer would
refuse, each kind one data error with its rows (a missing `rejected`, chosen equal to rejected, a KTO
label that is not a boolean), and what the cuts take, counted in the shipped tokenizer's tokens
(prompts max_prompt_length cuts, answers max_length cuts, rows left without an answer)."""

from __future__ import annotations

import json

from cockpit.config.load import load_config
from cockpit.datacheck.text import report_lines
from train_backend.datacheck.check import run_check


def _check(tmp_path, objective: str, rows: list[dict], *extra: str) -> dict:
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        "model.name=synthetic:tiny",
        f"objective={objective}",
        f"dataset.path={data}",
        "method=lora",
        "training.max_length=64",
        *extra,
    ]
    return run_check(load_config(None, overrides))


def _codes(items: list[dict]) -> dict[str, list[int]]:
    return {item["code"]: [r["row"] for r in item["rows"]] for item in items}


def _pair(prompt: str = "What is 2+2?", chosen: str = " 4", rejected: str = " 5") -> dict:
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


def test_pairs_without_rejected_or_with_equal_answers_are_data_errors(tmp_path):
    rows = [_pair(), {"prompt": "Hi", "chosen": " yes"}, _pair(chosen=" 4", rejected=" 4"), _pair()]
    report = _check(tmp_path, "dpo", rows)
    assert not report["ok"]
    found = _codes(report["problems"])
    assert found == {"missing_column": [2], "same_answers": [3]}, report["problems"]
    missing = next(p for p in report["problems"] if p["code"] == "missing_column")
    assert "'rejected'" in missing["message"] and missing["count"] == 1
    assert report["sources"][0]["rows"] == {"read": 4, "kept": 2, "dropped": 0, "refused": 2, "unused": 0}
    assert _codes(report["warnings"]) == {"duplicates": [4]}  # row 4 repeats row 1
    text = "\n".join(report_lines(report, "x.yaml", 400))
    assert "1 row with the chosen answer equal to the rejected one (nothing to prefer) (row 3: " in text


def test_a_kto_label_that_is_not_a_boolean_is_a_data_error(tmp_path):
    rows = [
        {"prompt": "2+2=", "completion": " 4", "label": True},
        {"prompt": "2+2=", "completion": " 5", "label": "false"},
        {"prompt": "2+3=", "completion": " 5", "label": 1},
        {"prompt": "2+3=", "completion": " 6", "label": False},
    ]
    report = _check(tmp_path, "kto", rows)
    assert _codes(report["problems"]) == {"bad_label": [2, 3]}
    assert "'false' (str)" in report["problems"][0]["message"]
    assert report["preference"]["sequences_per_row"] == 1


def test_the_cuts_are_counted_in_tokens_and_said(tmp_path):
    long_prompt = "word " * 80  # more tokens than max_length: with no prompt cut, no room for an answer
    rows = [
        _pair(),
        _pair(prompt="Say it. " * 6, chosen=" yes " * 40, rejected=" no"),  # the chosen answer's end goes
        _pair(prompt=long_prompt),
    ]
    report = _check(tmp_path, "dpo", rows)
    assert report["ok"], report["problems"]
    part = report["preference"]
    assert part["sequences_per_row"] == 2 and part["max_prompt_length"] is None
    assert part["answer_cut"]["rows"] == [2] and part["answer_lost"]["rows"] == [3]
    assert part["prompt_cut"]["count"] == 0 and part["answer_tokens_cut"] > 0
    assert set(_codes(report["warnings"])) == {"answer_cut", "answer_lost"}
    assert report["totals"]["train_rows"] == 2 and report["totals"]["max"] > 64

    cut = _check(tmp_path, "dpo", rows, "preference.max_prompt_length=32")["preference"]
    assert cut["prompt_cut"]["rows"] == [3] and cut["answer_lost"]["count"] == 0
    assert cut["prompt_tokens_cut"] == part["prompt_tokens"]["max"] - 32
    text = "\n".join(report_lines(_check(tmp_path, "dpo", rows), "x.yaml", 200))
    assert "1 row the end of an answer (max_length), 1 row dropped" in text, text


def test_the_demo_pairs_pass_the_check(tmp_path):
    report = run_check(
        load_config(None, ["model.name=synthetic:tiny", "objective=orpo", "dataset.path=demo", "method=lora"])
    )
    assert report["ok"] and report["format"] == "preference", report["problems"]
    assert report["sources"][0]["rows"]["kept"] == 345 and not report["warnings"]


async def test_the_data_screen_shows_the_pairs_errors_and_cuts(tmp_path):
    from support.pilot import screen_text
    from test_data_screen import DataApp

    long_prompt = "word " * 80
    rows = [_pair(), _pair(chosen=" 4", rejected=" 4"), _pair(prompt=long_prompt)]
    app = DataApp(_check(tmp_path, "dpo", rows))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "1 row with the chosen answer equal to the rejected one" in text
        await pilot.press("t")
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert "dpo: a pair a row" in text and "1 row dropped (no room left for an answer)" in text
