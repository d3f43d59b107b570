"""What the run screen's header, progress line and figures say in the states a first hour meets:
a failed start, a pause, a run bounded by max_steps, the two losses, a replay's price (issue 16)."""

from __future__ import annotations

import shutil

from support.pilot import EVENTS, FIXTURE, events_until_step

from cockpit.live.headless import describe
from cockpit.live.replay import ReplaySession
from cockpit.live.session import RunSession
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from screens.run.figures import phase_text, stat_rows
from widgets.progress import progress_label


def state_of(events: list[dict]) -> RunState:
    state = RunState()
    for event in events:
        state.apply(event)
    return state


def test_a_run_that_failed_while_starting_says_so_not_its_last_phase():
    hello = next(e for e in EVENTS if e["type"] == "hello")
    reading = {
        "v": 1,
        "type": "phase",
        "ts": hello["ts"] + 0.1,
        "phase": "starting",
        "message": "reading config",
    }
    error = {
        "v": 1,
        "type": "error",
        "ts": hello["ts"] + 0.2,
        "kind": "config",
        "message": "bad",
        "phase": "starting",
    }
    state = state_of([hello, reading])
    assert phase_text(state) == "starting: reading config"
    state.apply(error)
    assert phase_text(state) == "failed while starting"
    trained = state_of(events_until_step(30))
    trained.apply({**error, "ts": trained.last_ts + 1, "phase": "training", "step": 31})
    assert phase_text(trained) == "failed while training at step 31"
    assert phase_text(state_of(EVENTS)) == "finished at step 88"


def test_a_pause_moves_the_header_to_the_step_the_trainer_paused_at():
    events = events_until_step(5)
    state = state_of([*events, {"v": 1, "type": "paused", "ts": events[-1]["ts"] + 0.1, "step": 6}])
    assert state.step == 6 and state.status == "paused"
    assert progress_label(state.step, state.total_steps, None, None).startswith("step 6/88")
    assert describe({"v": 1, "type": "paused", "ts": 0.0, "step": 6}) == "paused at step 6"


def test_epochs_past_their_total_show_without_the_total():
    assert progress_label(100, 100, 16.67, 1.0) == "step 100/100 · epoch 16.67 · 100%"  # max_steps bounded
    assert progress_label(50, 100, 0.5, 1.0) == "step 50/100 · epoch 0.50/1 · 50%"
    assert progress_label(50, 100, 0.5, None) == "step 50/100 · epoch 0.50 · 50%"


def test_both_losses_are_labelled():
    state = state_of(EVENTS)
    rows = dict(stat_rows(state, state.last_ts))
    assert "step loss" in rows and "loss" not in rows
    done = next(e for e in EVENTS if e["type"] == "done")
    assert "mean loss over the run" in describe(done)


def test_a_replay_and_an_attach_show_the_configs_price_before_the_first_event(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    shutil.copy(FIXTURE, run.events_path)
    run.config_path.write_text("model:\n  name: synthetic:tiny\ncost:\n  price_per_hour: 1.2\n")
    for session in (ReplaySession(run, speed=1.0), RunSession(run, recorded=True)):
        rows = dict(stat_rows(session.state, None))  # nothing played yet
        assert str(rows["cost"]).endswith("at $1.20/h"), rows["cost"]
    run.config_path.write_text("cost: [not, a, mapping]\n")
    assert run.config_price_per_hour() is None
    run.config_path.unlink()
    assert run.config_price_per_hour() is None


def _contrast(a, b) -> float:
    """WCAG contrast ratio of two colours."""

    def luminance(color) -> float:
        def channel(c: int) -> float:
            c = c / 255
            return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

        r, g, b_ = color.triplet
        return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b_)

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


async def test_the_learning_rate_line_is_legible_in_colour_and_with_no_color(tmp_path, monkeypatch):
    from test_tui_snapshots import drawn, finished_replay
    from textual.filter import monochrome_style

    from widgets.loss_plot import LossPlot

    for no_color in (False, True):
        if no_color:
            monkeypatch.setenv("NO_COLOR", "1")
        folder = tmp_path / str(no_color)
        folder.mkdir()
        app = finished_replay(folder)
        async with app.run_test(size=(80, 24)) as pilot:
            await drawn(pilot)
            plot = app.run_view.query_one(LossPlot)
            style = plot.base_style + plot.component_style("loss-plot--lr")
            if no_color:
                assert app.no_color
                style = monochrome_style(style)
            assert _contrast(style.color, style.bgcolor) >= 3.0  # WCAG's minimum for graphics


def test_a_cuda_device_row_is_its_name_and_fits_the_run_panel_at_80_columns():
    from cockpit.run.state import RunState
    from screens.run.figures import stat_rows

    state = RunState(run_id="r")
    state.device = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"}
    assert dict(stat_rows(state, 0.0))["device"] == "NVIDIA H100 80GB HBM3"
    state.device = {"kind": "cpu", "name": "x86_64"}
    assert dict(stat_rows(state, 0.0))["device"] == "cpu x86_64"
