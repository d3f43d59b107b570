"""The run view of a preference run: a recorded DPO run on the tiny model (tests/fixtures/
dpo_run_events.jsonl: 30 steps, held-out eval every 10) shows its reward accuracy under the loss,
the held-out accuracy over it and the margin's range on the border; an SFT run shows no such panel.
A snapshot of the whole screen, and the plot's points checked through the pilot."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from support.pilot import FIXTURE, FIXTURES, RUN_ID

from cockpit.live.session import RunSession
from cockpit.run.rundir import RunDir
from screens.run.app import CockpitApp
from widgets.preference_plot import PreferencePlot, range_text, title_of

DPO_FIXTURE = FIXTURES / "dpo_run_events.jsonl"
DPO_EVENTS = [json.loads(line) for line in DPO_FIXTURE.read_text().splitlines()]


def replay_of(tmp_path: Path, fixture: Path) -> CockpitApp:
    path = tmp_path / RUN_ID
    path.mkdir()
    run = RunDir(path)
    shutil.copy(fixture, run.events_path)
    last = json.loads(fixture.read_text().splitlines()[-1])["ts"]
    return CockpitApp(RunSession(run, recorded=True), poll_interval_s=0.02, clock=lambda: last + 2.0)


async def drawn(pilot) -> None:
    deadline = time.monotonic() + 5
    while pilot.app.run_view.updates_shown == 0:
        assert time.monotonic() < deadline, "the run view was never drawn"
        await pilot.pause(0.02)
    await pilot.pause()


def test_a_finished_dpo_run(snap_compare, tmp_path):
    assert snap_compare(replay_of(tmp_path, DPO_FIXTURE), terminal_size=(100, 40), run_before=drawn)


async def test_the_plot_shows_the_logged_and_held_out_accuracy(tmp_path):
    logs = [e for e in DPO_EVENTS if e["type"] == "preference_log"]
    evals = [e for e in DPO_EVENTS if e["type"] == "preference_eval"]
    app = replay_of(tmp_path, DPO_FIXTURE)
    async with app.run_test(size=(100, 40)) as pilot:
        await drawn(pilot)
        plot = app.run_view.query_one(PreferencePlot)
        assert plot.display
        assert plot.points == tuple((e["step"], e["accuracy"]) for e in logs)
        assert plot.eval_points == tuple((e["step"], e["accuracy"]) for e in evals)
        assert plot.eval_points[0] == (0, 0.0) and plot.eval_points[-1][1] > 0.5
        assert plot.lr_points == tuple((e["step"], e["margins"]) for e in logs)
        assert str(plot.border_title) == title_of("dpo", True) == "dpo: reward accuracy · held-out"
        assert str(plot.border_subtitle).startswith("margin ")


async def test_an_sft_run_has_no_preference_plot(tmp_path):
    app = replay_of(tmp_path, FIXTURE)
    async with app.run_test(size=(100, 32)) as pilot:
        await drawn(pilot)
        assert not app.run_view.query_one(PreferencePlot).display


def test_the_second_lines_range_gives_way_to_the_width():
    points = [(1, 0.0), (2, 1.25), (3, 0.5)]
    assert range_text("margins", points) == "margin 0.0000…1.2500, now 0.5000"
    assert range_text("margins", points, 20) == "margin now 0.5000"
    assert range_text("margins", points, 8) == "0.5000"
    assert range_text("margins", []) == ""
