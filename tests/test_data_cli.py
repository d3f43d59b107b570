"""Each bad input the data check exists for, through the real command line: `cockpit train` (and
`--check`) refuses it with exit 2 before the model loads and before a run directory exists, the
message naming the file, the row (the byte, for an encoding error) and the fix; `cockpit data`
prints the whole report (and --json); several sources and their mix; `cockpit cards` takes the
data's real tokens; the report is cached by file size and mtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_config

from cockpit.cli.main import main
from cockpit.datacheck import cache

GOOD = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]


def lines(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def no_run_dir(env: dict) -> bool:
    root = Path(env["COCKPIT_HOME"]) / "runs"
    return not root.exists() or not any(root.iterdir())


def train(env, config: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["train", str(config), "--no-ui", "--skip-preflight", *extra])
    said = capsys.readouterr()
    return code, said.out + said.err


@pytest.mark.parametrize("check", [True, False], ids=["--check", "train"])
def test_a_typo_in_a_local_path_is_file_not_found_with_the_closest_names(
    tmp_path, env, capsys, check, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    lines(tmp_path / "capital.jsonl", [{"text": "a"}])
    config = write_config(tmp_path / "c.yaml", {"dataset.path": "capitalz.jsonl"})
    code, said = train(env, config, capsys, *(["--check"] if check else []))
    assert code == 2 and no_run_dir(env)
    assert "data error:" in said and "dataset.path: 'capitalz.jsonl' does not exist" in said
    assert "closest names there: capital.jsonl" in said and "hub id" in said


def test_a_split_a_jsonl_lacks_is_refused_with_how_to_hold_out(tmp_path, env, capsys):
    data = lines(tmp_path / "d.jsonl", [{"text": "a b"}] * 3)
    config = write_config(tmp_path / "c.yaml", {"dataset.path": str(data), "dataset.split": "validation"})
    code, said = train(env, config, capsys)
    assert code == 2 and no_run_dir(env)
    flat = " ".join(said.split())
    assert f"dataset.split: 'validation', but '{data}' is one file" in flat
    assert "dataset.eval_fraction: 0.05" in flat and "dataset.eval_split" in flat


def test_a_latin1_byte_names_the_file_line_byte_and_encoding(tmp_path, env, capsys):
    data = tmp_path / "d.jsonl"
    data.write_bytes(b'{"text": "ok"}\n{"text": "na\xefve caf\xe9"}\n')
    config = write_config(tmp_path / "c.yaml", {"dataset.path": str(data)})
    code, said = train(env, config, capsys)
    flat = " ".join(said.split())
    assert code == 2 and no_run_dir(env)
    offset = data.read_bytes().index(b"\xef")
    assert f"({data}): line 2, byte {offset} (0xEF) is not UTF-8" in flat
    assert "Latin-1" in flat and "iconv -f latin1 -t utf-8" in flat


def test_a_line_far_longer_than_max_length_is_refused_by_its_line(tmp_path, env, capsys):
    data = tmp_path / "d.jsonl"
    with open(data, "w") as f:
        for i in range(40):
            f.write(json.dumps({"text": "x" * 5_000_000 if i == 17 else f"row {i}"}) + "\n")
    config = write_config(tmp_path / "c.yaml", {"dataset.path": str(data)})
    code, said = train(env, config, capsys)
    flat = " ".join(said.split())
    assert code == 2 and no_run_dir(env)
    assert "line 18 is far longer than training.max_length (64 tokens) allows" in flat
    assert "line 18 is 5,000,012 bytes" in flat and "split such a row" in flat


def test_a_row_without_messages_among_two_is_an_error_not_a_drop(tmp_path, env, capsys):
    data = lines(tmp_path / "d.jsonl", [{"messages": GOOD}, {"text": "no turns"}])
    config = write_config(tmp_path / "c.yaml", {"dataset.path": str(data)})
    code, said = train(env, config, capsys, "--check")
    flat = " ".join(said.split())
    assert code == 2 and no_run_dir(env)
    assert f"({data}): line 2 lacks a column the format messages trains on" in flat
    assert "it has no 'messages' (its keys: text)" in flat and "add 'messages' to those rows" in flat


def test_cockpit_data_says_what_the_trainer_would_do_with_each_row(tmp_path, env, capsys):
    long_turns = [{"role": "user", "content": "Tell me more. " * 80}, {"role": "assistant", "content": "No."}]
    empty = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  "}]
    rows = [
        {"messages": GOOD, "text": "both"},
        {"messages": long_turns},
        {"messages": empty},
        {"messages": GOOD},
    ]
    data = lines(tmp_path / "d.jsonl", rows)
    config = write_config(tmp_path / "c.yaml", {"dataset.path": str(data)})
    assert main(["data", str(config), "--card", "rtx-4090"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "format messages (auto: column 'messages' (chat turns)); columns used: messages; ignored: text" in out
    )
    assert "1 row has both 'text' and 'messages': training uses 'messages'" in out
    assert "1 row has an empty or whitespace-only assistant turn (line 3)" in out
    assert "1 row is longer than training.max_length (64) and cut (line 2)" in out
    assert "the cut takes every answer token: it trains nothing (line 2)" in out
    assert "row 4 = row 1" in out
    assert "run on RTX 4090 (--card)" in out and "tok/s (speed model, an estimate)" in out
    assert "«" in out and "✂" in out  # the trained text marked, the cut shown
    assert main(["data", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cached"] and report["totals"]["truncated"] == 1 and report["ok"]
    assert set(report["totals"]) >= {"tokens_per_epoch", "p50", "p90", "p99", "max", "histogram"}


def test_several_sources_are_checked_each_and_mixed(tmp_path, env, capsys):
    chat = lines(tmp_path / "a.jsonl", [{"messages": GOOD}] * 6)
    more = lines(
        tmp_path / "b.jsonl",
        [{"messages": [{"role": "user", "content": f"q{i}"}, GOOD[1]]} for i in range(3)],
    )
    config = tmp_path / "c.yaml"
    config.write_text(
        "model: {name: synthetic:tiny}\nmethod: lora\ntraining: {max_length: 64, optimizer: adamw_torch}\n"
        f"dataset:\n  - {{path: {chat}, weight: 1}}\n  - {{path: {more}, weight: 2}}\n"
    )
    assert main(["data", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    mixed = [s["mix"] for s in report["sources"]]
    assert [m["rows"] for m in mixed] == [3, 6] and report["totals"]["mix_rows"] == 9
    assert main(["data", str(config)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "source 2: " in out and "in the mix: weight 2 -> 6 rows (66.7% of the mix)" in out


def test_cards_take_the_configs_real_token_count(tmp_path, env, capsys):
    data = lines(tmp_path / "d.jsonl", [{"text": f"row {i} " * 5} for i in range(20)])
    config = write_config(tmp_path / "c.yaml", {"dataset.path": str(data), "training.max_steps": None})
    assert main(["data", str(config), "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["totals"]["tokens_per_epoch"]
    assert main(["cards", str(config), "--json"]) == 0
    said = capsys.readouterr()
    table = json.loads(said.out)
    assert table["inputs"]["run"]["dataset_tokens"] == tokens
    assert f"{tokens:,} tokens per epoch, counted by the data check" in " ".join(said.err.split())


def test_the_report_is_kept_until_a_file_changes(tmp_path, env):
    from cockpit.config.load import load_config

    data = lines(tmp_path / "d.jsonl", [{"text": "a b c"}] * 3)
    cfg = load_config(None, [f"dataset.path={data}", "method=lora"])
    calls = []

    def runner(cfg, **_):
        calls.append(1)
        from cockpit.datacheck.client import DataCheckAnswer

        return DataCheckAnswer(report={"version": 1, "n": len(calls)})

    assert cache.cached_check(cfg, runner=runner).report["n"] == 1
    again = cache.cached_check(cfg, runner=runner)
    assert again.cached and again.report["n"] == 1 and len(calls) == 1
    lines(data, [{"text": "a b c d"}] * 3)  # another size
    assert cache.cached_check(cfg, runner=runner).report["n"] == 2
    assert cache.cached_check(cfg, runner=runner, fresh=True).report["n"] == 3
