"""Several sources in one run: the config takes `dataset` as a list (or `sources:`) beside the one
mapping every existing config has; each source's mistakes are named with its number; the mix's
arithmetic; the trainer's mix (seeded, in the proportions `cockpit data` shows); and a real run on
two sources."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import cockpit, events, only_run, write_config

from cockpit.config.load import config_from_dict, load_config, with_absolute_paths
from cockpit.config.schema import ConfigError, DatasetSource, dump_config
from cockpit.config.sources import mix_counts

GOOD = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_one_mapping_reads_as_ever_and_a_list_as_sources(tmp_path):
    one = load_config(None, ["dataset.path=demo"])
    assert one.dataset.sources is None and [s.path for s in one.dataset.source_list()] == ["demo"]
    a, b = write(tmp_path / "a.jsonl", [{"text": "a"}]), write(tmp_path / "b.jsonl", [{"text": "b"}])
    short = config_from_dict({"dataset": [{"path": a, "weight": 3}, {"path": b, "weight": 1}]})
    long = config_from_dict({"dataset": {"sources": [{"path": a, "samples": 3}, b], "eval_fraction": 0.1}})
    assert [(s.path, s.weight) for s in short.dataset.sources] == [(a, 3.0), (b, 1.0)]
    assert long.dataset.sources[1] == DatasetSource(path=b) and long.dataset.eval_fraction == 0.1
    assert short.dataset.where() == f"2 sources: {a}, {b}"
    again = config_from_dict(yaml.safe_load(dump_config(short)))  # the run directory's config.yaml
    assert again.dataset.sources == short.dataset.sources
    assert "sources" not in yaml.safe_load(dump_config(one))["dataset"]


def test_relative_source_paths_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "a.jsonl", [{"text": "a"}])
    cfg = with_absolute_paths(config_from_dict({"dataset": ["./a.jsonl", "org/hub-data"]}), tmp_path)
    assert [s.path for s in cfg.dataset.sources] == [str(tmp_path / "a.jsonl"), "org/hub-data"]


@pytest.mark.parametrize(
    ("dataset", "said"),
    [
        ([], "dataset.sources: expected a list of sources"),
        ([{"path": "A", "weight": 1, "samples": 5}], "dataset.sources[1]: both weight (1) and samples (5)"),
        (
            [{"path": "org/a", "weight": 1}, {"path": "org/b"}],
            "dataset.sources[2]: no weight, while source 1",
        ),
        (
            [{"path": "org/a", "weight": 0}],
            "dataset.sources[1].weight: 0.0 (float) is out of range; it must be > 0",
        ),
        ([{"path": "org/a", "splitt": "x"}], "unknown key 'dataset.sources[1].splitt'"),
        ([{"weight": 2}], "dataset.sources[1].path: empty"),
        ([{"path": "./nothing.jsonl"}], "dataset.sources[1].path: './nothing.jsonl' does not exist"),
        ({"sources": [{"path": "org/a"}], "path": "org/b"}, "dataset.path: set beside dataset.sources"),
        ({"sources": ["org/a", "org/b"], "eval_split": "validation"}, "names a split, but the data has 2"),
    ],
)
def test_each_source_mistake_names_its_source(tmp_path, monkeypatch, dataset, said):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        config_from_dict({"dataset": dataset})
    assert said in str(info.value)


def test_the_mix_counts_rows_by_samples_weights_or_all():
    sources = [DatasetSource("a", weight=1), DatasetSource("b", weight=3), DatasetSource("c", samples=7)]
    assert mix_counts([100, 20, 3], sources) == [30, 90, 7]  # 120 weighted rows redrawn 1:3
    assert mix_counts([5, 8], [DatasetSource("a"), DatasetSource("b")]) == [5, 8]
    assert mix_counts([0, 8], [DatasetSource("a", weight=1), DatasetSource("b", weight=1)]) == [0, 4]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from train_backend.model import shipped_tokenizer_dir

    return AutoTokenizer.from_pretrained(shipped_tokenizer_dir())


def test_the_trainer_mixes_in_the_proportions_with_the_seed(tmp_path, tokenizer):
    from train_backend.data_mix import prepare_all

    a = write(
        tmp_path / "a.jsonl",
        [{"messages": [{"role": "user", "content": f"a{i}"}, GOOD[1]]} for i in range(10)],
    )
    b = write(
        tmp_path / "b.jsonl",
        [{"messages": [{"role": "user", "content": f"b{i}"}, GOOD[1]]} for i in range(4)],
    )
    section = config_from_dict({"dataset": [{"path": a, "samples": 3}, {"path": b, "samples": 9}]}).dataset
    mixed = prepare_all(section, tokenizer, 64, seed=7)
    users = [m[0]["content"] for m in mixed.dataset["messages"]]
    assert len(users) == 12 and sum(u.startswith("a") for u in users) == 3
    assert sorted(u for u in users if u.startswith("b")).count("b0") in (
        2,
        3,
    )  # 9 of 4 rows: each twice, one thrice
    assert mixed.stats["samples"] == 12 and len(mixed.lengths) == 12
    assert [m[0]["content"] for m in prepare_all(section, tokenizer, 64, seed=7).dataset["messages"]] == users
    assert [m[0]["content"] for m in prepare_all(section, tokenizer, 64, seed=8).dataset["messages"]] != users


def test_sources_of_different_formats_are_refused(tmp_path, tokenizer):
    from train_backend.data_mix import prepare_all
    from train_backend.errors import DataError

    a = write(tmp_path / "a.jsonl", [{"text": "plain"}] * 2)
    b = write(tmp_path / "b.jsonl", [{"messages": GOOD}] * 2)
    with pytest.raises(DataError, match="source 1: text, source 2: messages"):
        prepare_all(config_from_dict({"dataset": [a, b]}).dataset, tokenizer, 64, seed=1)


@pytest.mark.slow
def test_a_real_run_trains_on_the_mix(tmp_path, env):
    a = write(tmp_path / "a.jsonl", [{"text": f"<s>[INST] q{i} [/INST] a{i} </s>"} for i in range(30)])
    b = write(tmp_path / "b.jsonl", [{"text": f"<s>[INST] r{i} [/INST] s{i} </s>"} for i in range(10)])
    config = write_config(tmp_path / "c.yaml", {"training.max_steps": 2})
    raw = yaml.safe_load(config.read_text())
    raw["dataset"] = [{"path": a, "weight": 1}, {"path": b, "weight": 1}]
    config.write_text(yaml.safe_dump(raw))
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = next(e for e in events(only_run(env)) if e["type"] == "data")
    assert data["samples"] == 40  # 40 weighted rows, redrawn 1:1: 20 of each
    phases = [e.get("message", "") for e in events(only_run(env)) if e["type"] == "phase"]
    assert any("2 sources" in m for m in phases)
