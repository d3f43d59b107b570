"""The data check's parts without a subprocess: the bounded reader (a huge line is counted, never
joined; an undecodable byte is named with its offset), JSON arrays and CSV, the report of a file
with every kind of trouble (its format, columns, drops, refusals, empty answers, copies, rows cut
at max_length and whether the cut takes the answer), sampling on a big file, and the histogram."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from cockpit.config.load import load_config
from train_backend.datacheck import reader
from train_backend.datacheck.check import run_check
from train_backend.datacheck.lengths import histogram

GOOD = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]


def write_lines(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def check(tmp_path, rows, **training) -> dict:
    data = write_lines(tmp_path / "data.jsonl", rows)
    overrides = [f"dataset.path={data}", "method=lora", "training.max_length=64"]
    overrides += [f"training.{k}={v}" for k, v in training.items()]
    return run_check(load_config(None, overrides))


def codes(items: list[dict]) -> list[str]:
    return [item["code"] for item in items]


def test_a_line_over_the_limit_is_counted_not_joined(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"text": "a"}\n')
        f.write(b'{"text": "' + b"x" * 3_000_000 + b'"}\n')
        f.write(b'{"text": "b"}')  # no newline at the end
    got = list(reader.lines(str(path), limit_bytes=4096, chunk_bytes=1 << 16))
    assert [(line.number, line.data is None) for line in got] == [(1, False), (2, True), (3, False)]
    assert got[1].size == 3_000_000 + 12 and got[2].data == b'{"text": "b"}'
    assert got[2].offset == got[1].offset + got[1].size + 1


def test_an_undecodable_byte_is_named_with_its_line_and_offset(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "ok"}\r\n{"text": "caf\xe9"}\n')
    rows = list(reader.json_lines(str(path), 4096))
    assert rows[0].value == {"text": "ok"}  # CRLF read as LF
    bad = rows[1]
    assert (bad.problem, bad.line, bad.detail) == ("encoding", 2, "0xE9")
    assert path.read_bytes()[bad.byte] == 0xE9


def test_a_json_array_is_read_element_by_element(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"text": f"row {i}"} for i in range(500)]))
    rows = list(reader.json_array(str(path), 4096, chunk_bytes=100))
    assert [r.value["text"] for r in rows] == [f"row {i}" for i in range(500)]
    path.write_text('[{"text": "a"}, 3]')
    assert [r.problem for r in reader.json_array(str(path), 4096)] == [None, "not_object"]


def test_csv_rows_are_keyed_by_the_header(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text('text,id\n"two\nlines",1\nplain,2\n')
    rows = list(reader.csv_rows(str(path), 4096))
    assert [r.value for r in rows] == [{"text": "two\nlines", "id": "1"}, {"text": "plain", "id": "2"}]


def test_the_report_names_each_kind_of_trouble_with_its_rows(tmp_path):
    long_turns = [{"role": "user", "content": "Tell me more. " * 80}, {"role": "assistant", "content": "No."}]
    rows = [
        {"messages": GOOD, "id": 1},
        {"messages": long_turns, "id": 2},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]},
        {"messages": GOOD, "text": "both", "id": 4},
        {"messages": [], "id": 5},
        {"messages": GOOD, "id": 1},
    ]
    report = check(tmp_path, rows)
    source = report["sources"][0]
    assert report["ok"] and report["format"] == "messages"
    assert source["columns_used"] == ["messages"] and source["columns_ignored"] == ["id", "text"]
    assert source["rows"] == {"read": 6, "kept": 5, "dropped": 1, "refused": 0, "unused": 0}
    assert source["dropped"] == [
        {"reason": "no turns in 'messages'", "count": 1, "rows": [{"row": 5, "line": 5}]}
    ]
    assert source["empty_answers"]["rows"] == [{"row": 3, "line": 3}]
    warned = {w["code"]: w for w in report["warnings"]}
    assert set(warned) == {"dropped", "both_columns", "empty_answers", "truncated", "duplicates"}
    cut = warned["truncated"]
    assert cut["rows"] == [{"row": 2, "line": 2}] and "line 2" in cut["message"]
    assert "the cut takes every answer token" in cut["message"]
    assert cut["fix"].startswith("raise training.max_length (to ")
    assert source["tokens"]["answer_lost"]["count"] == 1
    assert "'text'" in warned["both_columns"]["message"] and "format: text" in warned["both_columns"]["fix"]
    # what a row trains on is compared: row 4's extra 'text' is not trained on
    copies = [(d["copy"]["row"], d["of"]["row"]) for d in report["duplicates"]["rows"]]
    assert copies == [(4, 1), (6, 1)]
    assert report["totals"]["truncated"] == 1 and report["totals"]["max"] > 64
    # the preview: the first rows and the cut one, the answers marked as trained
    shown = {p["row"]: p for p in report["preview"]}
    assert set(shown) == {1, 2}
    first = shown[1]
    assert [s["text"] for s in first["segments"] if s["trained"]] and first["trained_tokens"] > 0
    assert shown[2]["cut_at"] is not None and shown[2]["trained_tokens"] == 0


def test_a_row_without_the_column_is_refused_with_its_keys(tmp_path):
    report = check(tmp_path, [{"messages": GOOD}, {"text": "no turns here"}])
    assert not report["ok"]
    (problem,) = report["problems"]
    assert problem["code"] == "missing_column" and problem["rows"] == [{"row": 2, "line": 2}]
    assert problem["message"].startswith("line 2 lacks a column the format messages trains on")
    assert "it has no 'messages' (its keys: text)" in problem["message"]
    assert "remove them" in problem["fix"]


def test_a_huge_row_is_refused_not_tokenized(tmp_path):
    report = check(tmp_path, [{"text": "short"}, {"text": "y" * 50_000}, {"text": "fine"}])
    (problem,) = report["problems"]
    assert problem["code"] == "too_long" and problem["rows"] == [{"row": 2, "line": 2}]
    assert "4,096 characters (64 x max_length)" in problem["message"]
    assert report["sources"][0]["rows"]["kept"] == 2 and report["totals"]["max"] < 64


def test_a_big_file_is_sampled_and_says_so(tmp_path, monkeypatch):
    from train_backend.datacheck import lengths

    monkeypatch.setattr(lengths, "SAMPLE_BYTES", 4096)
    rows = [{"text": f"row {i} " + "word " * (i % 7)} for i in range(400)] + [{"text": "long " * 200}]
    report = check(tmp_path, rows)
    tokens = report["sources"][0]["tokens"]
    assert tokens["sample_every"] > 1 and tokens["estimated_rows"] > 0
    assert tokens["exact_rows"] + tokens["estimated_rows"] == 401
    assert report["totals"]["truncated"] == 1  # the long row is tokenized whatever the sample
    assert not report["totals"]["exact"]


def test_the_histogram_fits_its_bins_and_counts_the_cut_rows_apart():
    bins = histogram(Counter({12: 2, 40: 1, 274: 1}), 64)
    assert len(bins) <= 13 and sum(b["count"] for b in bins) == 4
    assert bins[-1] == {"low": 65, "high": 274, "count": 1}
    assert all(b["high"] <= 64 for b in bins[:-1])


@pytest.mark.parametrize("split", ["validation", "test"])
def test_a_split_a_file_lacks_is_refused_with_how_to_hold_out_eval_rows(tmp_path, split):
    data = write_lines(tmp_path / "data.jsonl", [{"text": "a"}])
    report = run_check(load_config(None, [f"dataset.path={data}", f"dataset.split={split}", "method=lora"]))
    (problem,) = report["problems"]
    assert problem["code"] == "split" and f"dataset.split: {split!r}" in problem["message"]
    assert "eval_fraction" in problem["fix"] and "eval_split" in problem["fix"]


def test_a_big_file_read_by_several_processes_reports_as_one(tmp_path, monkeypatch):
    from train_backend.datacheck import parallel

    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
        for i in range(60)
    ]
    rows[4] = {"text": "no turns"}
    rows[33] = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": " "}]}
    rows[50] = rows[7]
    data = tmp_path / "data.jsonl"
    data.write_bytes(
        b"\n".join(json.dumps(r).encode() for r in rows[:40])
        + b'\n\n{"text": "caf\xe9"}\n'
        + b"\n".join(json.dumps(r).encode() for r in rows[40:])
        + b"\n"
    )
    cfg = load_config(None, [f"dataset.path={data}", "method=lora", "training.max_length=64"])
    monkeypatch.setattr(parallel, "workers", lambda: 3)
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 1 << 40)
    one = run_check(cfg)
    monkeypatch.setattr(parallel, "PARALLEL_BYTES", 1)
    several = run_check(cfg)
    for report in (one, several):
        for item in report["problems"] + report["warnings"]:
            item.pop("message")  # the same rows in the same words: compared by their parts
    assert several["problems"] == one["problems"] and several["warnings"] == one["warnings"]
    assert several["sources"][0]["rows"] == one["sources"][0]["rows"]
    assert several["duplicates"]["rows"] == one["duplicates"]["rows"]
    lines = {p["code"]: p["rows"] for p in several["problems"]}
    assert lines == {"missing_column": [{"row": 5, "line": 5}], "encoding": [{"row": 41, "line": 42}]}
