"""The step's size kept exactly unless the config lets it grow (and then said in the plan and the
summary), and a host probe that warms up and probes again when a busy moment spreads its rounds."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest
from test_speed_auto import FIXED, LLAMA7, RAGGED, choice, gpu, qlora

from cockpit.live.event_text import describe
from cockpit.results.summary import summarize, summary_lines
from cockpit.run.state import RunState
from cockpit.speed import auto as speed_auto
from train_backend.speed import host_probe


@pytest.mark.parametrize("memory_gib", [16, 22, 40, 80])
@pytest.mark.parametrize("data", [FIXED, RAGGED], ids=["fixed", "ragged"])
def test_by_default_the_split_makes_the_step_exactly(data, memory_gib):
    """speed.keep_effective_batch (true by default): micro-batch x accumulation is the step's rows,
    never a few more; the plan says so and its event carries the sizes."""
    plan = speed_auto.plan(qlora(), gpu(memory_gib), data, LLAMA7)
    t = plan.config.training
    step = plan.to_event()["effective_batch"]
    assert t.micro_batch_size * t.gradient_accumulation_steps == step["target"] == step["planned"]
    assert step["kept"] is True and step["keep_effective_batch"] is True and step["config"] == 16
    assert "kept exactly (speed.keep_effective_batch)" in choice(plan, "micro-batch").reason


def _grown_plan() -> speed_auto.SpeedPlan:
    """A config that lets the step grow, on a card where a split of a few more rows is the fastest:
    the first such case of a small sweep (asserted found)."""
    for memory_gib, rows in itertools.product((10, 12, 14, 16, 18, 22, 30), (7, 11, 13, 17, 19)):
        cfg = qlora(
            **{"speed.keep_effective_batch": False, "training.gradient_accumulation_steps": rows},
            **{"training.micro_batch_size": 1},
        )
        cfg = replace(cfg, speed=replace(cfg.speed, keep=None))
        plan = speed_auto.plan(cfg, gpu(memory_gib), FIXED, LLAMA7)
        step = plan.to_event()["effective_batch"]
        if step["planned"] != step["target"]:
            return plan
    raise AssertionError("no card in the sweep grows the step: the test needs another case")


def test_where_the_config_lets_the_step_grow_the_plan_and_the_summary_say_so():
    plan = _grown_plan()
    step = plan.to_event()["effective_batch"]
    assert step["kept"] is False and step["planned"] > step["target"]
    planned, unit, target = step["planned"], step["unit"], step["target"]
    said = f"{planned} {unit} a step, not {target}, since speed.keep_effective_batch is false"
    assert said in choice(plan, "micro-batch").reason
    assert said in describe({"type": "speed_plan", **plan.to_event()})
    state = RunState()
    state.apply({"type": "speed_plan", **plan.to_event()})
    lines = summary_lines(summarize(state, Path("/nonexistent-run"), []))
    assert (
        f"step size: {planned} {unit} an optimizer step, not the {target} your config makes "
        "(speed.keep_effective_batch: false)"
    ) in lines


def test_a_kept_step_adds_no_summary_line():
    state = RunState()
    state.apply({"type": "speed_plan", **speed_auto.plan(qlora(), gpu(22), FIXED, LLAMA7).to_event()})
    lines = summary_lines(summarize(state, Path("/nonexistent-run"), []))
    assert not any(line.startswith("step size:") for line in lines)


class FakeHost:
    """A probe iteration's cost in ms by round: the rounds are counted by the probe's syncs (0: the
    warm-up), `busy` ones cost `slow`, the rest `fast`."""

    def __init__(self, busy: set[int], fast: float = 4.0, slow: float = 9.0):
        self.now, self.busy, self.fast, self.slow, self.round = 0.0, busy, fast, slow, 0

    def once(self) -> None:
        self.now += (self.slow if self.round in self.busy else self.fast) / 1000

    def sync(self) -> None:
        self.round += 1

    def clock(self) -> float:
        return self.now


def test_a_steady_host_is_probed_once():
    host = FakeHost(busy=set())
    reading = host_probe.probe(host.once, host.sync, host.clock)
    assert reading["probes"] == 1 and reading["ms"] == pytest.approx(4.0) and reading["spread"] == 1.0


def test_a_busy_moment_in_the_rounds_gets_a_second_probe_and_the_quieter_is_kept():
    """Eight of the first probe's fifteen rounds slowed by other work on the host: its rounds spread
    wide and its median is a busy one, so the probe runs again; the second is steady and is kept."""
    host = FakeHost(busy=set(range(1, 16, 2)))
    reading = host_probe.probe(host.once, host.sync, host.clock)
    assert reading["probes"] == 2
    assert reading["ms"] == pytest.approx(4.0) and reading["spread"] <= host_probe.WIDE_SPREAD
