"""The run screen once the run has ended, as `cockpit demo` leaves it: the summary, the GPU/host
strip (no GPU here), the doctor's one-line finding, and the run's panels under them.

At 80x24 the summary folds to its first line so that the run panel's cost, the checkpoints, the
loss plot and the events' `done` line stay on screen; `f` shows it whole and folds it again.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.pilot import (
    EVENTS,
    RUN_ID,
    ScriptedSession,
    ScriptedWatch,
    events_until_step,
    fake_samples,
    screen_text,
    wait_for,
)

from cockpit.doctor.window import Finding
from cockpit.run.rundir import RunDir
from screens.run.app import CockpitApp

NO_GPU = Finding(
    "no_gpu",
    "info",
    "Training without a GPU?",
    "NVML: no_driver for 10 of 19 s while the run trains on cpu (x86_64)",
    "Check nvidia-smi and the driver, or pick an instance with a GPU: on the CPU a fine-tune of a 7B "
    "model takes days.",
    0.0,
)
DONE_OUTPUT = EVENTS[-1]["output"]  # the recording's final/ folder, named by its `done` line
COST_ROW = "cost          $0.0067 at $1.20/h"
SUMMARY_FIRST_LINE = "finished: step 88/88 in 0:00:20, $0.0067 at $1.20/h"
FIRST_PART = events_until_step(30)  # the run while it trains, before the doctor's finding


def ended_demo(path: Path) -> CockpitApp:
    """The recorded demo run at `path` with final/ and its two checkpoints on disk, watched by a
    watch that finds no GPU. The recording comes in two parts (`end_the_run` feeds the second), so
    that, as in the demo, the doctor's finding is logged while it trains and the `done` line last."""
    path.mkdir(parents=True)
    run = RunDir(path)
    (run.path / "final").mkdir()
    for step in (75, 88):
        checkpoint = run.checkpoints_dir / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "cockpit-complete.json").write_text(json.dumps({"step": step}))
    watch = ScriptedWatch(fake_samples(init_error="driver_not_loaded"), [NO_GPU])
    now = EVENTS[-1]["ts"] + 2.0
    return CockpitApp(ScriptedSession(run, FIRST_PART), watch=watch, poll_interval_s=0.02, clock=lambda: now)


async def end_the_run(pilot) -> None:
    """Until the doctor's finding is on screen, then the rest of the recording and the trainer gone,
    until the summary is drawn."""
    view = pilot.app.run_view
    await wait_for(pilot, lambda: view.updates_shown > 0 and view.telemetry_shown > 0)
    view.session.feed(EVENTS[len(FIRST_PART) :])
    view.session.alive = False
    await wait_for(pilot, lambda: view.run_ended and view.has_class("-ended"))
    await pilot.pause()


def region_text(app, selector: str) -> str:
    """The screen's text inside one widget's region, its border included."""
    region = app.run_view.query_one(selector).region
    lines = screen_text(app).splitlines()[region.y : region.bottom]
    return "\n".join(line[region.x : region.right] for line in lines)


def squeezed(text: str) -> str:
    """Without spaces, newlines and box borders: a line the events log wrapped reads as one."""
    return "".join(ch for ch in text if ch not in " \n│╭╮╰╯─")


async def test_at_80x24_an_ended_run_shows_its_cost_checkpoints_done_line_and_loss(tmp_path):
    app = ended_demo(tmp_path / RUN_ID)
    async with app.run_test(size=(80, 24)) as pilot:
        await end_the_run(pilot)
        text = screen_text(app)
        assert SUMMARY_FIRST_LINE in text  # the summary, folded to its first line
        assert COST_ROW in region_text(app, "#stats-box")
        checkpoints = region_text(app, "#checkpoints")
        assert "step 75 12.9 MiB" in checkpoints and "step 88 12.9 MiB" in checkpoints
        assert squeezed(f"output in {DONE_OUTPUT}") in squeezed(region_text(app, "#events"))
        plot = region_text(app, "#loss-plot")
        assert "7.0169" in plot and "step 88" in plot  # the plot's top, its bottom axis
        assert "Training without a GPU?" in text and "no NVIDIA GPU" in text  # the doctor, the strip
        assert "f Summary" in text.splitlines()[-1]


async def test_f_shows_the_whole_summary_and_folds_it_again(tmp_path):
    app = ended_demo(tmp_path / RUN_ID)
    async with app.run_test(size=(80, 24)) as pilot:
        await end_the_run(pilot)
        assert f"next: cockpit chat {RUN_ID}" not in screen_text(app)
        await pilot.press("f")
        await pilot.pause()
        summary = region_text(app, "#summary")
        assert "the run has finished" in summary  # its border's title
        assert squeezed(f"adapter: {tmp_path / RUN_ID / 'final'}") in squeezed(summary)  # a long path wraps
        assert f"next: cockpit chat {RUN_ID}" in summary and f"cockpit export {RUN_ID}" in summary
        await pilot.press("f")
        await pilot.pause()
        assert f"next: cockpit chat {RUN_ID}" not in screen_text(app)
        assert COST_ROW in region_text(app, "#stats-box")


async def test_a_tall_terminal_shows_the_whole_summary_and_a_resize_folds_it(tmp_path):
    app = ended_demo(tmp_path / RUN_ID)
    async with app.run_test(size=(100, 40)) as pilot:
        await end_the_run(pilot)
        assert f"next: cockpit chat {RUN_ID}" in region_text(app, "#summary")
        assert COST_ROW in region_text(app, "#stats-box")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert f"next: cockpit chat {RUN_ID}" not in screen_text(app)
        assert SUMMARY_FIRST_LINE in screen_text(app)


async def test_the_summary_key_is_offered_only_once_the_run_has_ended(tmp_path):
    app = ended_demo(tmp_path / RUN_ID)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.run_view
        await wait_for(pilot, lambda: view.updates_shown > 0 and view.telemetry_shown > 0)
        await pilot.pause()
        assert "Summary" not in screen_text(app).splitlines()[-1]
        await pilot.press("f")  # nothing to fold: no error, nothing shown
        assert not view.query_one("#summary").display


# ---------------------------------------------------------------- snapshots


def test_ended_demo_80x24(snap_compare, tmp_path):
    """The summary in one line; the run panel to `precision`, the plot, the checkpoints, the end
    of the `done` line."""
    assert snap_compare(ended_demo(tmp_path / RUN_ID), terminal_size=(80, 24), run_before=end_the_run)


def test_ended_demo_60x20(snap_compare, tmp_path):
    """The summary in one line, the run panel down to its `cost` row."""
    assert snap_compare(ended_demo(tmp_path / RUN_ID), terminal_size=(60, 20), run_before=end_the_run)
