"""bench/plan_repeat.py: one config started three times, the plans compared on what they decide."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import plan_repeat

    return plan_repeat


def _start(bench, **changed):
    plan = {k: 0 for k in bench.PLAN_DECISIONS} | changed
    host = {k: None for k in bench.HOST_KEYS} | {"host_rank_scale": 1.0}
    return {"returncode": 0, "plan": plan, "host": host}


def test_plans_that_differ_in_a_decision_are_named_and_a_start_without_one_is_not_the_same(bench):
    same = bench.compare([_start(bench), _start(bench), _start(bench)])
    assert same["same"] and same["differ"] == {}
    split = bench.compare([_start(bench), _start(bench, checkpoint_layers=11), _start(bench)])
    assert not split["same"] and split["differ"] == {"checkpoint_layers": ["0", "11"]}
    short = bench.compare([_start(bench), {"returncode": 1, "failure": "OOM"}])
    assert not short["same"] and short["planned"] == 1
    assert "no plan (exit 1)" in bench.table([{"returncode": 1, "failure": "OOM"}])


@pytest.mark.slow
@pytest.mark.bench
def test_the_smoke_run_starts_the_config_three_times_and_compares_the_plans(bench, tmp_path, env):
    out = tmp_path / "out"
    assert bench.main(["--smoke", "--out", str(out), "--workdir", str(tmp_path / "work")]) == 0
    record = json.loads((out / "plan_repeat.json").read_text())
    assert record["smoke"] and len(record["starts"]) == 3
    assert record["compare"] == {"planned": 3, "starts": 3, "same": True, "differ": {}}
    assert all(s["plan"]["micro_batch_size"] == 4 for s in record["starts"])
    assert (out / "plan_repeat.md").read_text().startswith("| start | micro-batch x accum |")
