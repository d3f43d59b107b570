"""`dataset.train_on`: the key and its config error, the rows the trainer gets (prompt/completion
data included), the rows whose answers max_length cuts, the `data` event's trained tokens and
its line; end to end, a chat run trained on its answers against one trained on all its tokens."""

from __future__ import annotations

import json
import re

import pytest
from conftest import cockpit, events, only_run, write_config

from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError, DatasetSection
from cockpit.live.event_text import describe
from train_backend.answer_mask import IGNORE
from train_backend.data import prepare
from train_backend.errors import DataError

CHAT = [
    [
        {"role": "user", "content": f"What is {n} plus {n}?"},
        {"role": "assistant", "content": f"It is {2 * n}."},
    ]
    for n in range(6)
]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from train_backend.model import shipped_tokenizer_dir

    return AutoTokenizer.from_pretrained(shipped_tokenizer_dir())


def write_rows(path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_answers_on_text_is_a_config_error_with_the_fix():
    for fmt in ("text", "tokens"):
        with pytest.raises(ConfigError) as info:
            load_config(None, [f"dataset.format={fmt}", "dataset.train_on=answers"])
        message = str(info.value)
        assert message.startswith(f"--set dataset.train_on: answers, but dataset.format is {fmt}")
        assert "Set dataset.train_on: all" in message and "format: messages" in message
    with pytest.raises(ConfigError, match="is not one of auto, answers, all"):
        load_config(None, ["dataset.train_on=prompts"])
    assert load_config(None, ["dataset.format=prompt_completion"]).dataset.train_on == "auto"


def test_answers_on_data_found_to_be_text_is_a_data_error(tmp_path, tokenizer):
    path = write_rows(tmp_path / "t.jsonl", [{"text": "a b c"}] * 3)
    with pytest.raises(DataError, match=r"dataset\.train_on: answers, but the data is in format 'text'"):
        prepare(DatasetSection(path=path, train_on="answers"), tokenizer, 64)
    plain = prepare(DatasetSection(path=path), tokenizer, 64)  # auto: text trains on all
    assert plain.stats["train_on"] == "all" and "labels" not in plain.dataset.column_names
    assert plain.stats["trained_tokens"] == plain.stats["tokens_total"] - 3


def test_chat_rows_reach_the_trainer_tokenized_with_their_answers(tmp_path, tokenizer):
    path = write_rows(tmp_path / "c.jsonl", [{"messages": m} for m in CHAT])
    answers = prepare(DatasetSection(path=path), tokenizer, 64)
    assert answers.format == "messages" and answers.stats["train_on"] == "answers"
    assert answers.dataset.column_names == ["messages", "input_ids", "labels"]  # messages: for the prompts
    first = answers.dataset[0]
    trained = [t for t in first["labels"] if t != IGNORE]
    assert tokenizer.decode(trained) == tokenizer.decode(
        tokenizer(" It is 0. </s>", add_special_tokens=False)["input_ids"]
    )
    stats = answers.stats
    assert stats["trained_tokens"] == sum(
        sum(1 for t in r[1:] if t != IGNORE) for r in answers.dataset["labels"]
    )
    assert 0 < stats["trained_share"] < 0.6 and stats["answers_cut"] == 0 and stats["note"] is None
    everything = prepare(DatasetSection(path=path, train_on="all"), tokenizer, 64)
    assert everything.dataset.column_names == ["messages"]  # TRL tokenizes it, as before
    assert everything.stats["tokens_total"] == stats["tokens_total"]
    assert everything.stats["trained_tokens"] == stats["tokens_total"] - len(CHAT)


def test_prompt_completion_rows_are_found_and_train_their_completion(tmp_path, tokenizer):
    rows = [{"question": f"{n} + {n} =", "answer": f" {2 * n}", "id": n} for n in range(4)]
    path = write_rows(tmp_path / "pc.jsonl", rows)
    section = DatasetSection(path=path, prompt_field="question", completion_field="answer")
    prepared = prepare(section, tokenizer, 64)
    assert prepared.format == "prompt_completion" and prepared.stats["column"] == "question, answer"
    assert prepared.dataset.column_names == ["prompt", "completion", "input_ids", "labels"]
    trained = [t for t in prepared.dataset[3]["labels"] if t != IGNORE]
    assert tokenizer.decode(trained) == " 6</s>"
    everything = prepare(
        DatasetSection(path=path, prompt_field="question", completion_field="answer", train_on="all"),
        tokenizer,
        64,
    )
    assert all(sum(t != IGNORE for t in r) == len(r) - 1 for r in everything.dataset["labels"])


def test_prompt_completion_turns_and_a_mixed_row(tmp_path, tokenizer):
    good = {"prompt": CHAT[0][:1], "completion": CHAT[0][1:]}
    path = write_rows(tmp_path / "pc.jsonl", [good, good])
    prepared = prepare(DatasetSection(path=path), tokenizer, 64)
    assert prepared.stats["train_on"] == "answers" and prepared.stats["trained_tokens"] > 0
    mixed = write_rows(tmp_path / "mixed.jsonl", [{"prompt": "text", "completion": CHAT[0][1:]}])
    with pytest.raises(DataError) as info:
        prepare(DatasetSection(path=mixed, format="prompt_completion"), tokenizer, 64)
    assert "dataset row 1" in str(info.value) and "give both as text or both as lists of turns" in str(
        info.value
    )


def test_rows_whose_answers_max_length_cuts_are_named_and_those_cut_off_dropped(tmp_path, tokenizer):
    long_question = {"role": "user", "content": "tell me " * 30}
    rows = [{"messages": m} for m in CHAT]
    rows[1] = {"messages": [long_question, {"role": "assistant", "content": "No."}]}  # cut off entirely
    rows[3] = {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "word " * 40}]
    }
    rows[4] = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}]}
    prepared = prepare(DatasetSection(path=write_rows(tmp_path / "c.jsonl", rows)), tokenizer, 32)
    stats = prepared.stats
    assert stats["samples"] == 4 and stats["answers_cut"] == 1 and stats["answers_dropped"] == 2
    assert stats["note"] == (
        "training.max_length (32) cuts the answers of 1 row (row 4): they train on what is left; "
        "dropped 1 row whose answers training.max_length (32) cuts off entirely (row 2); "
        "dropped 1 row with no answer to train on (row 5)"
    )
    assert all(len(ids) <= 32 for ids in prepared.dataset["input_ids"])
    line = describe({"type": "data", **stats})
    assert "; trained tokens (answers): " in line and f"of {stats['tokens_total']:,}" in line
    assert line.endswith("\n  " + stats["note"])
    with pytest.raises(DataError, match="no row has an answer left to train on"):
        prepare(DatasetSection(path=write_rows(tmp_path / "gone.jsonl", [rows[1]] * 2)), tokenizer, 32)


def test_the_data_line_reads_the_share():
    item = {
        "type": "data",
        "samples": 3,
        "train_on": "answers",
        "trained_share": 0.4071,
        "tokens_total": 12345,
    }
    assert describe(item).endswith("; trained tokens (answers): 41% of 12,345")


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir) -> dict:
    """One run per train_on on the shipped chat rows (tiny model, 4 steps, the same eval rows), and
    a prompt/completion run with packed rows."""
    import os

    from conftest import ROOT, SUPPORT

    from train_backend.data import demo_dataset_path

    chat = demo_dataset_path().replace("train.jsonl", "chat.jsonl")
    done = {}
    for name, overrides in {
        "answers": {"dataset.path": chat, "dataset.eval_fraction": 0.2, "eval.prompts": 1},
        "all": {"dataset.path": chat, "dataset.eval_fraction": 0.2, "dataset.train_on": "all"},
        "packed": {"dataset.path": None, "training.packing": True},
    }.items():
        tmp = tmp_path_factory.mktemp(name)
        if overrides["dataset.path"] is None:
            rows = [{"prompt": f"Q: what is {n} + {n}? A:", "completion": f" {2 * n}"} for n in range(40)]
            overrides["dataset.path"] = write_rows(tmp / "pc.jsonl", rows)
        env = dict(
            os.environ,
            COCKPIT_HOME=str(tmp / "home"),
            COCKPIT_CACHE=str(cache_dir),
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_DATASETS_CACHE=str(cache_dir / "datasets"),
            PYTHONPATH=os.pathsep.join([str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")]),
            PYTHONUNBUFFERED="1",
        )
        env.pop("COCKPIT_TEST_MODULES_DIR", None)
        config = write_config(
            tmp / "c.yaml",
            {"training.max_steps": 4, "output.save_steps": 4, "eval.max_new_tokens": 4, **overrides},
        )
        proc = cockpit(
            ["train", str(config), "--no-ui", "--log-every", "0", "--skip-preflight"], env, timeout=600
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        done[name] = (events(only_run(env)), proc.stdout)
    return done


def first(evs: list[dict], kind: str) -> dict:
    return next(e for e in evs if e["type"] == kind)


@pytest.mark.slow
@pytest.mark.xdist_group("train-on-runs")
def test_a_chat_run_trains_and_evaluates_its_answers_alone(runs):
    from cockpit.protocol.events import undeclared

    answers, _ = runs["answers"]
    everything, _ = runs["all"]
    assert {e["type"]: undeclared(e) for e in answers if undeclared(e)} == {}
    data, data_all = first(answers, "data"), first(everything, "data")
    assert data["train_on"] == "answers" and data_all["train_on"] == "all"
    assert data["tokens_total"] == data_all["tokens_total"]  # the same rows, tokenized the same
    assert data["trained_tokens"] < 0.6 * data_all["trained_tokens"]
    logs, logs_all = [e for e in answers if e["type"] == "log"], [e for e in everything if e["type"] == "log"]
    seen = [e["trained_tokens_seen"] for e in logs]
    assert seen == sorted(seen) and 0 < seen[-1] < 0.6 * logs[-1]["tokens_seen"]
    assert logs_all[-1]["trained_tokens_seen"] > 0.9 * logs_all[-1]["tokens_seen"]
    # the same held-out rows: the answers' eval counts their answers' tokens alone
    evals, evals_all = first(answers, "eval"), first(everything, "eval")
    assert evals["eval_samples"] == evals_all["eval_samples"]
    assert 0 < evals["eval_tokens"] < 0.6 * evals_all["eval_tokens"]
    assert first(answers, "sample")["reference"]  # a prompt taken from a held-out chat row


@pytest.mark.slow
@pytest.mark.xdist_group("train-on-runs")
def test_the_headless_data_line_says_what_trains(runs):
    _, out = runs["answers"]
    line = next(text for text in out.splitlines() if "data: " in text)
    assert "samples (messages)" in line and "; trained tokens (answers): " in line


@pytest.mark.slow
@pytest.mark.xdist_group("train-on-runs")
def test_prompt_completion_rows_train_packed(runs):
    evs, _ = runs["packed"]
    data = first(evs, "data")
    assert data["format"] == "prompt_completion" and data["train_on"] == "answers"
    assert first(evs, "speed_plan")["packing"] == "rows"
    last = [e for e in evs if e["type"] == "log"][-1]
    assert 0 < last["trained_tokens_seen"] < 0.4 * last["tokens_seen"]
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"


def test_the_docs_figures_are_the_records():
    from conftest import ROOT

    record = (ROOT / "bench" / "results" / "2026-12-07-answers-vs-all-cpu.txt").read_text()
    figures = re.findall(
        r"^seed (\d+): answers ([\d.]+), all ([\d.]+) \(([+-][\d.]+%) for answers\)$", record, re.M
    )
    mean = re.search(r"^mean: answers [\d.]+, all [\d.]+ \(([+-][\d.]+%)\)", record, re.M).group(1)
    assert len(figures) == 2
    data_doc = (ROOT / "docs" / "data.md").read_text()
    measured = " ".join((ROOT / "docs" / "measurements.md").read_text().split())
    for seed, answers, everything, change in figures:
        assert f"| {seed} | {answers} | {everything} |" in data_doc
        assert f"{answers} against {everything} with seed {seed}" in measured
        assert f"by {change.lstrip('+-')}" in data_doc  # "lower by 4.0%", "higher by 2.4%"
    assert f"(mean {mean})" in data_doc and f"(mean {mean})" in measured
