"""Behaviour of the TUI, driven with pilot over a recorded demo run (88 steps, CPU, tiny model),
with watch doubles over fake NVML for the GPU and host panels and the doctor."""

from __future__ import annotations

import itertools
import json
import math
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.nvml_fake import FakeGpu, FakeNvml
from support.pilot import (
    EVENTS,
    FIXTURE,
    GPU_BINS,
    INPUT_BOUND,
    LAST_TS,
    RUN_ID,
    TRAINER_PID,
    ScriptedSession,
    ScriptedWatch,
    event,
    events_until_step,
    fake_host,
    fake_samples,
    gpu_events,
    make_app,
    recorded,
    running,
    screen_text,
    scripted,
    shown,
    wait_for,
    write_gpu_recording,
)

import screens.run.app
import screens.run.view
from cockpit.fmt import GIB
from cockpit.live.replay import ReplaySession
from cockpit.live.watch import LiveWatch
from cockpit.protocol.wire import Fault
from cockpit.run import process
from cockpit.run.control import NotRunning
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from cockpit.telemetry.sampler import Sampler
from screens.confirm import Confirm
from screens.run.app import CockpitApp
from screens.run.telemetry_feed import LogTailReader, SeriesBook, WatchSlot, tail_lines
from screens.run.view import EventLines, RunView, stat_rows
from widgets.gpu_panel import GpuView, gpu_lines, row_count
from widgets.host_panel import byte_rate, host_lines
from widgets.log_tail import LogTail
from widgets.loss_plot import LossPlot, PlotRow, braille_rows, lr_range_text, plot_lines
from widgets.progress import StepProgress
from widgets.sparkline import Series, grid_span, spark
from widgets.stats import StatsPanel


def progress_label(app: CockpitApp) -> str:
    return app.run_view.query_one(StepProgress).label


# ---------------------------------------------------------------- commands


async def test_s_sends_save_on_a_live_run(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("s")
        await pilot.pause()
        assert session.sent == ["save"]
        assert "asked for a checkpoint" in screen_text(app)


async def test_p_pauses_then_resumes_once_the_trainer_says_paused(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "p Pause" in screen_text(app)
        await pilot.press("p")
        assert session.sent == ["pause"]
        ts = EVENTS[40]["ts"]
        session.feed(
            [
                event("command", ts, name="pause", accepted=True, detail="pausing after step 30"),
                event("paused", ts, step=30),
            ]
        )
        await wait_for(pilot, lambda: app.run_view.status == "paused")
        await pilot.pause()
        text = screen_text(app)
        assert " paused " in text and "p Resume" in text and "paused at step 30" in text
        await pilot.press("p")
        assert session.sent == ["pause", "resume"]
        session.feed([event("resumed", ts + 5, step=30, paused_s=5.0)])
        await wait_for(pilot, lambda: app.run_view.status == "running")
        await pilot.press("p")
        assert session.sent == ["pause", "resume", "pause"]


async def test_a_command_the_trainer_cannot_take_is_a_notification(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    session.send_error = NotRunning(f"run {RUN_ID} has no live trainer to take 'save'")
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("s")
        await pilot.pause()
        assert "'save' was not sent" in screen_text(app)
        assert app.is_running


async def test_x_asks_first_and_n_cancels(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(process, "stop", lambda run, **kw: calls.append(run) or "stopped")
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, Confirm)
        assert "Stop the run? A checkpoint is saved first." in screen_text(app)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, RunView)
        assert calls == [] and session.sent == []
        assert not app.run_view.stopping


async def test_x_then_y_stops_through_the_supervisor_in_a_thread(tmp_path, monkeypatch):
    release, calls = threading.Event(), []

    def fake_stop(run, say=lambda _t: None, **kw):
        calls.append((run, threading.current_thread() is threading.main_thread()))
        say("the trainer did not stop in time: SIGTERM to its process group")
        release.wait(5)
        return "terminated"

    monkeypatch.setattr(process, "stop", fake_stop)
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("x", "y")
        await wait_for(pilot, lambda: calls)
        await pilot.pause()
        assert calls == [(session.run, False)]
        text = screen_text(app)
        assert "stopping…" in text and "SIGTERM to its process group" in text
        await pilot.press("s")  # no more commands while it stops
        assert session.sent == []
        release.set()
        await wait_for(pilot, lambda: not app.run_view.stopping)
        await pilot.pause()
        assert "stop: terminated" in screen_text(app)


async def test_d_detaches_from_a_live_run_with_code_4(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("d")
    assert app.return_value == 4
    assert session.sent == []  # detaching leaves the trainer alone
    assert session.closed


async def test_q_on_a_live_run_detaches_too(tmp_path):
    app = make_app(scripted(tmp_path, events_until_step(30)))
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("q")
    assert app.return_value == 4


@pytest.mark.parametrize(
    ("ending", "code"),
    [
        ([], 0),
        ([event("done", LAST_TS + 1, status="stopped", step=88, message="stopped by request")], 3),
    ],
)
async def test_q_on_an_ended_run_returns_how_it_ended(tmp_path, ending, code):
    events = EVENTS if not ending else [*events_until_step(88), *ending]
    app = make_app(scripted(tmp_path, events, alive=False))
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("q")
    assert app.return_value == code


async def test_commands_are_refused_on_a_replay(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(process, "stop", lambda run, **kw: calls.append(run))
    session = recorded(tmp_path)
    sent = []
    session.send = lambda command, sender="cockpit": sent.append(command)
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "REPLAY" in screen_text(app)
        for key in ("s", "p", "x"):
            await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, RunView)
        assert sent == [] and calls == []
        assert "this is a replay of a recorded run" in screen_text(app)
        await pilot.press("d")
    assert app.return_value == 0  # the recording finished


async def test_commands_are_refused_once_the_run_has_ended(tmp_path):
    session = scripted(tmp_path, EVENTS, alive=False)
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("s")
        await pilot.pause()
        assert session.sent == []
        assert "the run has ended (finished)" in screen_text(app)


# ---------------------------------------------------------------- following the run


async def test_the_view_follows_new_events_off_the_ui_thread(tmp_path):
    session = scripted(tmp_path, events_until_step(10))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert progress_label(app).startswith("step 10/88")
        assert len(app.run_view.query_one(LossPlot).points) == 10
        session.feed(events_until_step(30)[len(events_until_step(10)) :])
        await wait_for(pilot, lambda: progress_label(app).startswith("step 30/88"))
        await pilot.pause()
        assert len(app.run_view.query_one(LossPlot).points) == 30
        assert "checkpoint: step 25" in screen_text(app)
        # one size in one unit on the screen: the checkpoints box's and the events log's
        events_log = "\n".join(s.text for s in app.run_view.query_one("#events").lines)
        assert "step 25 12.9 MiB" in screen_text(app) and "checkpoint: step 25 (12.9 MiB," in events_log
    assert session.poll_threads and threading.main_thread().name not in session.poll_threads


async def test_events_that_pile_up_while_the_screen_draws_arrive_as_one_update(tmp_path):
    session = scripted(tmp_path, events_until_step(10))
    app = make_app(session)
    later = events_until_step(30)[len(events_until_step(10)) :]
    steps_drawn = []
    draw = app.run_view.show

    def slow_draw(lines):
        draw(lines)
        steps_drawn.append(session.state.step)
        if len(steps_drawn) == 1:  # a slow terminal: 20 steps arrive one by one during this draw
            for item in later:
                session.feed([item])
                time.sleep(0.01)

    app.run_view.show = slow_draw
    async with running(app) as pilot:
        await wait_for(pilot, lambda: len(steps_drawn) >= 2)
        await pilot.pause(0.3)  # time for stray updates to show up (the clock tick is 1 s)
    # no step between 10 and 30 was drawn (a clock tick on a loaded box may redraw step 30 again)
    assert [s for i, s in enumerate(steps_drawn) if i == 0 or s != steps_drawn[i - 1]] == [10, 30]


async def test_a_replayed_run_shows_its_real_numbers(tmp_path):
    app = make_app(recorded(tmp_path), clock_ts=0.0)  # an ended run ignores the clock
    async with running(app) as pilot:
        await shown(pilot, app)
        text = screen_text(app)
    assert " finished " in text and RUN_ID in text
    assert "step 88/88 · epoch 4.00/4 · 100%" in text
    assert "1.2093, -82.7% from first" in text  # last loss 1.2093 against the first, 6.9747
    assert "0:00:20 billed" in text  # hello at ...150.184 to done at ...170.287
    assert "$0.0067 at $1.20/h" in text  # $1.20/h for 20.1 s
    assert "0.62 GiB RSS (host)" in text
    assert "1.12M of 4.54M (24.6%)" in text
    assert "345 samples, 0 truncated" in text and "25-61, mean 31.9, p95 50" in text
    checkpoints = "\n".join(line[44:] for line in text.splitlines())  # the right-hand column
    assert "step 75 12.9 MiB" in checkpoints and "step 88 " in checkpoints and "step 50 " not in checkpoints
    assert "7.0169" in text and "0.9556" in text and "step 88" in text  # plot max, min, steps
    assert "finished: step 88/88 in 0:00:20, $0.0067 at $1.20/h" in text  # the ended run's summary


async def test_a_failed_run_says_what_failed_how_to_fix_it_and_what_is_kept(tmp_path):
    error = event(
        "error",
        EVENTS[40]["ts"],
        kind="oom",
        phase="training",
        step=31,
        checkpoints=["checkpoint-25"],
        message="CUDA out of memory. Tried to allocate 2.00 GiB.",
        hint="Turn on training.gradient_checkpointing.",
    )
    session = scripted(tmp_path, [*events_until_step(30), error], alive=False)
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        text = screen_text(app)
        assert " failed " in text
        assert "OOM at step 31 while training: CUDA out of memory." in text
        assert "fix: Turn on training.gradient_checkpointing." in text
        assert f"checkpoints intact: checkpoint-25; continue with: cockpit restart {RUN_ID}" in text
        await pilot.press("q")
    assert app.return_value == 1


async def test_a_replay_whose_trainer_vanished_is_not_shown_as_running(tmp_path):
    app = make_app(recorded(tmp_path, events_until_step(30)))
    async with running(app) as pilot:
        await shown(pilot, app)
        text = screen_text(app)
        assert " interrupted " in text and " running " not in text
        assert "the trainer is gone without a final event" in text
        assert f"checkpoints intact: checkpoint-25; continue with: cockpit restart {RUN_ID}" in text
        await pilot.press("q")
    assert app.return_value == 1


async def test_elapsed_and_cost_use_the_clock_only_while_the_trainer_runs(tmp_path):
    live = make_app(scripted(tmp_path, events_until_step(30)), clock_ts=EVENTS[1]["ts"] + 3600)
    async with running(live) as pilot:
        await shown(pilot, live)
        assert "1:00:00 billed" in screen_text(live) and "$1.20 at $1.20/h" in screen_text(live)


async def test_without_a_price_the_cost_says_how_to_set_one(tmp_path):
    events = [dict(e, price_per_hour=None) if e["type"] == "hello" else e for e in events_until_step(30)]
    app = make_app(scripted(tmp_path, events))
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "- set cost.price_per_hour" in screen_text(app)


# ---------------------------------------------------------------- pure parts


def test_event_lines_keep_each_notice_with_its_own_event():
    items = [
        event("hello", 100.0, pid=1, device={"kind": "cpu", "name": "x86_64"}, precision="fp32"),
        event("command", 101.0, name="pause", accepted=True, detail="pausing after step 3"),
        event("paused", 102.0, step=3),
        event("resumed", 110.0, step=3, paused_s=8.0),
        event("mystery", 111.0),
        Fault("not_json", "line 9 is not JSON", "{oops"),
        event("warning", 112.0, message="disk 95% full", hint=""),
    ]
    assert EventLines().lines(items) == [
        "0:00:00 trainer pid 1 on cpu x86_64 (fp32)",
        "0:00:01 command pause: pausing after step 3",
        "0:00:02 paused at step 3",
        "0:00:10 resumed at step 3",
        "0:00:11 ignored a message of unknown type 'mystery'",
        "0:00:11 channel fault (not_json): line 9 is not JSON: '{oops'",
        "0:00:12 warning: disk 95% full",
    ]


def test_gpu_memory_rows_come_from_the_torch_counters():
    state = RunState(device={"kind": "cuda", "name": "NVIDIA H100", "total_bytes": 80 * 2**30})
    state.memory = {
        "mem_allocated_bytes": 30 * 2**30,
        "mem_reserved_bytes": 34 * 2**30,
        "mem_peak_bytes": 41 * 2**30,
    }
    rows = dict(stat_rows(state, None))
    assert rows["GPU alloc/res"] == "30.00 / 34.00 GiB"
    assert rows["GPU peak"] == "41.00 GiB of 80.0 GiB"


def test_the_loss_plot_draws_a_falling_line_with_its_labels():
    rows = braille_rows([(1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0)], columns=4, rows=2)
    assert rows[0][0] != " " and rows[0][-1] == " "  # starts top-left
    assert rows[1][-1] != " " and rows[1][0] == " "  # ends bottom-right
    lines = plot_lines([(1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0)], width=20, height=4)
    assert lines[0][0].strip() == "4.0000" and lines[2][0].strip() == "1.0000"
    assert lines[-1][1].split() == ["1", "step", "4"]


def test_the_loss_plot_says_it_in_words_when_there_is_no_room():
    assert plot_lines([(1, 4.0), (9, 1.5)], width=10, height=2) == [
        PlotRow("", "loss max 4.0000 min 1.5000, steps 1-9", False)
    ]
    assert plot_lines([], width=40, height=10) == [PlotRow("", "no loss logged yet", False)]


def test_the_learning_rate_has_its_own_strip_on_its_own_scale():
    loss = [(1, 4.0), (2, 3.0), (3, 2.0), (4, 1.0)]
    lr = [(1, 0.0), (2, 1e-3), (3, 1e-3), (4, 1e-3)]  # warm-up, then flat
    rows = plot_lines(loss, width=20, height=8, lr_points=lr)
    plotted = [row for row in rows if row.is_plot]
    strip = [row for row in plotted if row.lr_columns]
    assert len(strip) == 2 and strip[0].label.strip() == "lr" and plotted[-2:] == strip  # under the loss
    alone = plot_lines(loss, width=20, height=8)
    assert [r.text for r in plotted if not r.lr_columns] != [
        r.text for r in alone if r.is_plot
    ]  # 5 rows, not 7
    assert plot_lines(loss, width=20, height=8, lr_points=lr)[0].label.strip() == "4.0000"
    # too short for both: the loss keeps the rows, the subtitle keeps the lr
    assert not any(row.lr_columns for row in plot_lines(loss, width=20, height=4, lr_points=lr))
    assert lr_range_text(lr) == "lr 0.00e+00…1.00e-03, now 1.00e-03"


def test_the_ui_never_imports_torch():
    code = (
        "import sys, screens.run.app; "
        "assert not {'torch', 'train_backend'} & set(sys.modules), 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


# ---------------------------------------------------------------- live figures: GPU, host, doctor, log


def gpu_run(tmp_path: Path, step: int = 52, history: bool = True) -> ScriptedSession:
    events = gpu_events(events_until_step(step))
    session = scripted(tmp_path, events)
    if history:
        last_ts = events[-1]["ts"]
        lines = [json.dumps(b) for b in GPU_BINS if b["ts_end"] < last_ts]
        (session.run.path / "telemetry.jsonl").write_text("".join(line + "\n" for line in lines))
    return session


def live_app(session, watch=None, clock_ts: float = LAST_TS + 5.0) -> CockpitApp:
    return CockpitApp(session, watch=watch, poll_interval_s=0.02, clock=lambda: clock_ts)


async def telemetry_shown(pilot, app: CockpitApp, count: int = 1) -> None:
    await shown(pilot, app)
    await wait_for(pilot, lambda: app.run_view.telemetry_shown >= count)
    await pilot.pause()


async def test_the_watch_drives_the_gpu_and_host_panels_off_the_ui_thread(tmp_path):
    watch = ScriptedWatch(fake_samples())
    app = live_app(gpu_run(tmp_path, history=False), watch)
    async with running(app) as pilot:
        await telemetry_shown(pilot, app)
        text = screen_text(app)
    assert "GPU · NVIDIA H100 80GB HBM3 · FAKE test data · host" in text
    assert "GPU0 util  99%" in text and "67°C  SM 1980 MHz" in text
    assert "61.0/80.0 GiB" in text and "torch 30.0/34.0 GiB alloc/res" in text  # NVML next to torch
    assert "612/700 W" in text
    assert "CPU   52%  of 16" in text and "RAM 28.0/251.0 GiB" in text and "swap 0.0/8.0 GiB" in text
    assert "read 120.0 MB/s write 2.0 MB/s" in text and "trainer 0% CPU, 9.0 GiB RSS" in text
    assert threading.main_thread().name not in watch.threads
    assert watch.stopped  # the app stops the watch when it exits


async def test_gpu_figures_reach_the_screen_at_least_twice_a_second(tmp_path):
    utils = itertools.cycle([62, 88, 97, 99, 94, 71])
    gpu = FakeGpu(
        processes=[(TRAINER_PID, 34 * GIB)],
        overrides={"utilization": lambda _n: SimpleNamespace(gpu=next(utils), memory=50)},
    )
    sampler = Sampler(FakeNvml(gpus=[gpu]), trainer_pid=TRAINER_PID, host=fake_host())
    watch = LiveWatch(TRAINER_PID, sampler=sampler).start()  # the live view's own sampling interval
    app = live_app(gpu_run(tmp_path, history=False), watch)
    drawn: list[tuple[float, float]] = []  # (when, the sample's time) of each sample drawn
    draw = app.run_view.show_telemetry

    def show_telemetry(sample, findings, samples=()):
        draw(sample, findings, samples)
        drawn.append((time.monotonic(), sample.ts))

    app.run_view.show_telemetry = show_telemetry
    async with running(app) as pilot:
        await wait_for(pilot, lambda: len(drawn) >= 2)
        first = len(drawn)
        await pilot.pause(3.0)
        text = screen_text(app)
    window = drawn[first:]
    assert len({ts for _, ts in window}) == len(window) >= 5  # each draw shows a new sample
    per_s = (len(window) - 1) / (window[-1][0] - window[0][0])
    # twice a second: the sampler's fixed cadence (SAMPLE_INTERVAL_S), less the draws' jitter
    assert per_s >= 1.9, f"GPU figures drawn {per_s:.2f} times a second"
    assert "GPU0 util" in text
    assert not any(t.name == "cockpit-telemetry" for t in threading.enumerate())  # stopped on exit


def test_the_watch_slot_keeps_only_news_and_merges_what_was_not_drawn():
    slot = WatchSlot(clock=lambda: 7.0)
    first, second = fake_samples(count=2)
    assert slot.put(first, [], [first], None) and slot.put_at == 7.0
    assert not slot.put(first, [], [], None)  # the same sample again: no news
    assert slot.put(second, [INPUT_BOUND], [second], None)  # not yet drawn: merged
    news = slot.take()
    assert news.sample is second and news.findings == [INPUT_BOUND] and news.samples == [first, second]
    assert slot.take() is None and not slot.pending
    assert slot.put(second, [], [], None)  # the findings changed: news
    assert slot.put(None, [], [], "the GPU/host watch failed: boom")  # an error is news too
    assert slot.take().error == "the GPU/host watch failed: boom"


async def test_a_tick_redraws_only_the_figures_that_changed(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        stats = app.run_view.query_one("#stats", StatsPanel)
        before, redrawn = stats.rows, []
        draw_row = stats.render_line
        stats.render_line = lambda y: redrawn.append(y) or draw_row(y)
        session.feed(events_until_step(31)[len(events_until_step(30)) :])
        await wait_for(pilot, lambda: progress_label(app).startswith("step 31/88"))
        await pilot.pause()
        after = stats.rows
    changed = {y for y, (old, new) in enumerate(zip(before, after)) if old != new}
    assert len(after) == len(before) and 0 < len(changed) < len(after)
    assert set(redrawn) == changed  # the clock is fixed here: elapsed time and cost stay put


def test_the_loss_plot_takes_in_only_the_new_points_of_a_growing_run():
    plot = LossPlot()
    losses = [(1, 4.0), (2, math.nan), (3, 3.0)]
    plot.plot(losses)
    assert plot.points == ((1, 4.0), (3, 3.0))  # not a number: not drawn
    losses.append((4, 2.5))
    plot.plot(losses)
    assert plot.points == ((1, 4.0), (3, 3.0), (4, 2.5))
    plot.plot([(1, 1.0)])  # another list: read from its start
    assert plot.points == ((1, 1.0),)


async def test_a_recorded_history_prefills_the_sparklines_off_the_ui_thread(tmp_path, monkeypatch):
    threads = []
    real_read = screens.run.app.read_history

    def read_history(path, **kw):
        threads.append(threading.current_thread())
        return real_read(path, **kw)

    monkeypatch.setattr(screens.run.app, "read_history", read_history)
    session = gpu_run(tmp_path, step=88)
    session.alive = False
    app = live_app(session)  # no watch: an attach to an ended run
    async with running(app) as pilot:
        await telemetry_shown(pilot, app)
        text = screen_text(app)
        book = app.run_view.book
    assert threads and threads[0] is not threading.main_thread()
    assert len(book.get("gpu0.util")) == 5  # the bins that ended before the last event
    assert "GPU · as recorded · host" in text
    assert "GPU0 util  35%" in text and "SM 1980 MHz" in text  # the last bin's figures
    assert "whole run" in text


async def test_live_samples_extend_the_recorded_history(tmp_path):
    watch = ScriptedWatch(fake_samples(count=6))
    app = live_app(gpu_run(tmp_path), watch)
    async with running(app) as pilot:
        await telemetry_shown(pilot, app, count=2)
        series = app.run_view.book.get("gpu0.util")
        assert len(series) == 3 + 6
        assert series.first_ts == GPU_BINS[0]["ts_start"] and series.last_ts == 1796052168.0


async def test_g_hides_the_gpu_panels_and_h_switches_the_sparkline_span(tmp_path):
    app = live_app(gpu_run(tmp_path), ScriptedWatch(fake_samples()))
    async with running(app) as pilot:
        await telemetry_shown(pilot, app, count=2)
        assert "GPU0 util" in screen_text(app) and "whole run" in screen_text(app)
        await pilot.press("h")
        await pilot.pause()
        assert "last 0:05:00" in screen_text(app) or "last 0:00:1" in screen_text(app)
        await pilot.press("g")
        await pilot.pause()
        assert "GPU0 util" not in screen_text(app)
        await pilot.press("g")
        await pilot.pause()
        assert "GPU0 util" in screen_text(app)


async def test_g_without_any_telemetry_says_why(tmp_path):
    app = make_app(scripted(tmp_path, events_until_step(30)))
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "GPU" not in screen_text(app).split("\n")[2]
        await pilot.press("g")
        await pilot.pause()
        assert "no GPU/host telemetry for this run" in screen_text(app)


async def test_l_shows_the_tail_of_backend_log(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    lines = [f"line {n}" for n in range(30)]
    progress = "\rmap:  10%|#         |\rmap: 100%|##########| 345/345\x1b[0m"
    session.run.log_path.write_text("\n".join([*lines, progress]) + "\n")
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "line 29" not in screen_text(app)  # hidden until asked for
        await pilot.press("l")
        await wait_for(pilot, lambda: app.run_view.query_one(LogTail).lines)
        await pilot.pause()
        text = screen_text(app)
        assert app.run_view.query_one(LogTail).lines == (*lines[21:], "map: 100%|##########| 345/345")
        assert "backend.log" in text and "line 29" in text and "map: 100%" in text
        assert "events" not in text  # the log takes the events' place
        await pilot.press("l")
        await pilot.pause()
        assert "line 29" not in screen_text(app) and "events" in screen_text(app)


async def test_the_doctor_panel_shows_the_findings_and_empties_when_none_hold(tmp_path):
    watch = ScriptedWatch(fake_samples(), [INPUT_BOUND])
    app = live_app(gpu_run(tmp_path), watch)
    async with running(app) as pilot:
        await telemetry_shown(pilot, app, count=2)
        text = screen_text(app)
        assert "doctor: 1 finding" in text and "● WARN Input-bound: the GPU waits for data" in text
        assert "GPU util 41% (mean of 60 s)" in text and "fix: Raise training.dataloader_num_workers" in text
        shown_before = app.run_view.telemetry_shown
        watch.findings = []
        await wait_for(pilot, lambda: app.run_view.telemetry_shown > shown_before)
        await pilot.pause()
        assert (
            "doctor: 1 finding" not in screen_text(app) and not app.run_view.query_one("#doctor-box").display
        )
        assert "doctor: ● WARN Input-bound" in screen_text(app)  # the events log keeps the whole finding


async def test_a_stuck_watch_leaves_the_keys_and_the_events_working(tmp_path, monkeypatch):
    monkeypatch.setattr(screens.run.view, "WATCH_LATE_S", 0.2)
    release = threading.Event()
    watch = ScriptedWatch(fake_samples(), block=release)
    session = gpu_run(tmp_path, step=10, history=False)
    app = live_app(session, watch)
    try:
        async with running(app) as pilot:
            await shown(pilot, app)
            await wait_for(pilot, lambda: watch.calls == 1)
            await pilot.press("s")
            assert session.sent == ["save"]
            session.feed(gpu_events(events_until_step(30))[len(events_until_step(10)) :])
            await wait_for(pilot, lambda: progress_label(app).startswith("step 30/88"))
            await pilot.press("g", "g")  # hide and show the panels: they say the watch is late
            box = app.run_view.query_one("#telemetry")
            await wait_for(pilot, lambda: str(box.border_subtitle).startswith("no new sample for"))
            await pilot.press("q")
        assert app.return_value == 4
    finally:
        release.set()


async def test_a_replay_plays_events_and_telemetry_at_its_speed(tmp_path):
    run = write_gpu_recording(tmp_path / RUN_ID)
    clock = [0.0]
    session = ReplaySession(run, speed=10, clock=lambda: clock[0])
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)
    async with running(app) as pilot:
        await shown(pilot, app)
        assert "REPLAY x10 0:00:00/0:00:22" in screen_text(app)
        assert app.run_view.telemetry_shown == 0 or app.run_view.sample is None
        clock[0] = 1.6  # 16 s of the recording: step 52 was at 16.8 s
        await wait_for(pilot, lambda: app.run_view.sample is not None and app.run_view.status == "running")
        # the header's status is drawn on its own refresh: on a loaded box a frame after the clock's
        await wait_for(pilot, lambda: "REPLAY x10 0:00:16/0:00:22" in screen_text(app))
        await wait_for(pilot, lambda: " running " in screen_text(app))
        text = screen_text(app)
        assert "step 4" in progress_label(app) and " running " in text
        assert "GPU0 util  94%" in text  # the bin that ended at 164.0 s
        assert "0:00:14 billed" in text  # elapsed at the replay's own time, not the wall clock
        await pilot.press("s")
        await pilot.pause()
        assert "this is a replay of a recorded run" in screen_text(app)
        await pilot.press("q")
    assert app.return_value == 4  # left before the end: no ending of the run's own


async def test_a_replay_that_played_out_returns_how_the_run_ended(tmp_path):
    path = tmp_path / RUN_ID
    path.mkdir()
    shutil.copy(FIXTURE, path / "events.jsonl")
    session = ReplaySession(RunDir(path), speed=0)
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)
    async with running(app) as pilot:
        await wait_for(pilot, lambda: app.run_view.status == "finished")
        await pilot.pause()
        assert "REPLAY max speed 0:00:22/0:00:22" in screen_text(app)
        await pilot.press("q")
    assert app.return_value == 0


# ---------------------------------------------------------------- the panels' pure parts


def test_several_gpus_get_a_row_each_and_a_lost_one_says_so():
    gpus = [FakeGpu(), FakeGpu(clock_event_reasons=0x4), FakeGpu(lost_at_call=1), FakeGpu(util_pct=12)]
    sample = fake_samples(count=1, gpus=gpus)[0]
    view = GpuView(sample, SeriesBook(), None, {}, None, compact=True)
    lines = [line.plain for line in gpu_lines(view, 96)]
    assert len(lines) == row_count(view) == 5
    assert lines[0].startswith("GPU0 97%") and "61.0/80.0G 612/700W 67°C 1980MHz" in lines[0]
    assert lines[1].endswith("throttle: sw_power_cap")
    assert lines[2].startswith("GPU2 LOST GPU is lost: check `nvidia-smi`")
    assert lines[3].startswith("GPU3 12%")
    # no trainer pid in the process lists: the spread of every GPU with figures, and it says so
    assert lines[4] == (
        "NVLink 18 links/GPU × 26.6 GB/s · util 12-97%, GPU3 lowest · all 3 GPUs: trainer's not known"
    )


def test_a_stalled_gpu_shows_its_last_values_as_stale():
    sample = fake_samples(count=1)[0]
    sample.gpus[0].state, sample.gpus[0].stale = "stalled", True
    lines = [line.plain for line in gpu_lines(GpuView(sample, SeriesBook()), 96)]
    assert "STALLED: NVML does not answer" in lines[0] and "61.0/80.0 GiB" in lines[1]


def test_no_driver_is_said_plainly():
    sample = fake_samples(count=1, init_error="driver_not_loaded")[0]
    full = [line.plain for line in gpu_lines(GpuView(sample, SeriesBook()), 96)]
    assert full == ["no NVIDIA GPU / driver not loaded", "Driver Not Loaded (`nvidia-smi` says why)"]
    compact = gpu_lines(GpuView(sample, SeriesBook(), compact=True), 96)
    assert [line.plain for line in compact] == [
        "no NVIDIA GPU / driver not loaded · Driver Not Loaded (`nvidia-smi` says why)"
    ]


def test_host_figures_fit_their_width():
    host = fake_samples(count=2)[1].host
    wide = [line.plain for line in host_lines(host, 120)]
    assert "cores ▃█▂▅▃█▂▅▃█▂▅▃█▂▅" in wide[0]
    narrow = [line.plain for line in host_lines(host, 60)]
    assert "cores" not in narrow[0] and "RAM 28.0/251.0 GiB" in narrow[0]
    compact = host_lines(host, 60, compact=True)[0].plain
    assert (
        compact.startswith("CPU 52% RAM 28.0/251.0G") and "trainer 0% 9.0G" in compact
    )  # swap, net left out
    assert "…" not in compact
    assert host_lines(host, 120, compact=True)[0].plain.startswith("CPU 52% RAM 28.0/251.0G swap 0.0G")
    assert byte_rate(1.25e6) == "1.2 MB/s" and byte_rate(999) == "999 B/s" and byte_rate(None) == "-"


def test_a_series_stays_bounded_and_keeps_the_newest_at_full_resolution():
    series = Series(max_points=8)
    for n in range(20):
        series.add(n, n + 1, float(n))
    assert len(series) <= 8
    assert series.points[-1] == (19, 20, 19.0) and series.points[0][0] == 0
    assert series.first_ts == 0 and series.last_ts == 20
    peaks = Series(max_points=4, how="max")
    for n, value in enumerate([1, 9, 2, 3, 4]):
        peaks.add(n, n + 1, value)
    assert peaks.points[0] == (0, 2, 9)  # a merged peak keeps its maximum


def test_a_sparkline_is_on_a_fixed_scale_with_gaps_left_blank():
    series = Series()
    series.add(0, 10, 0.0)
    series.add(10, 20, 100.0)
    series.add(30, 40, 50.0)  # nothing from 20 to 30
    assert spark(series, 8, 0, 40, high=100.0) == "▁▁██  ▅▅"
    assert spark(series, 4, 0, 40, high=200.0) == "▁▅ ▃"
    assert spark(Series(), 3, 0, 1, 100.0) == "   "


def test_a_live_sparkline_keeps_its_columns_between_samples():
    """Drawn over grid_span, a new sample changes the columns it falls in only (the panels repaint
    only the rows whose text changed), the whole run fills >= 92% of the columns, and the last N
    seconds move left by whole columns."""
    series, t, drawn = Series(), 1000.0, []
    for n in range(400):
        series.add(t, t + 0.5, 50.0 + 40.0 * math.sin(n / 7.0))
        t += 0.5
        t0, t1 = grid_span(series.first_ts, series.last_ts, 60)
        assert t0 == series.first_ts and (t1 - t0) * 0.917 <= series.last_ts - t0 <= t1 - t0
        drawn.append((t1, spark(series, 60, t0, t1, 100.0)))
    same_grid = [(a, b) for (g1, a), (g2, b) in itertools.pairwise(drawn) if g1 == g2]
    assert len(same_grid) > 300  # the grid moved ~25 times in 400 samples, at each step of 2**(1/8)
    for before, after in same_grid:
        changed = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
        assert not changed or min(changed) >= len(before.rstrip()) - 1  # where the new sample fell
    # the last 60 s of 200: a column is 1 s wide; its grid moves by whole columns
    a0, a1 = grid_span(series.last_ts - 60, series.last_ts, 60, sliding=True)
    b0, _ = grid_span(series.last_ts - 59.5, series.last_ts + 0.5, 60, sliding=True)
    assert a1 >= series.last_ts and a1 - a0 == pytest.approx(60) and b0 - a0 in (0.0, pytest.approx(1.0))
    assert grid_span(5.0, 5.0, 10) == (5.0, 5.0) and grid_span(0.0, 1.0, 0) == (0.0, 1.0)


def test_the_log_tail_reader_reads_when_the_file_changed_and_at_most_once_a_second(tmp_path):
    path = tmp_path / "backend.log"
    now = [0.0]
    reader = LogTailReader(path, n=3, clock=lambda: now[0])
    assert reader.poll() == ["no backend.log yet"]
    path.write_text("a\nb\n\x1b[31mc\x1b[0m\nd\n")
    assert reader.poll() is None  # read a moment ago
    now[0] = 1.0
    assert reader.poll() == ["b", "c", "d"]
    now[0] = 2.0
    assert reader.poll() is None  # unchanged
    path.write_text("x" * 20000 + "\nlast\n")
    now[0] = 3.0
    assert reader.poll() == ["last"]  # the cut first line is dropped
    assert tail_lines(path, n=1) == ["last"]


async def test_a_watch_that_raises_is_said_and_asked_again(tmp_path, monkeypatch):
    monkeypatch.setattr(screens.run.app, "WATCH_RETRY_S", 0.05)

    class Failing(ScriptedWatch):
        broken = True

        def update(self, state):
            if self.broken:
                self.calls += 1
                raise RuntimeError("sampler bug")
            return super().update(state)

    watch = Failing(fake_samples())
    app = live_app(gpu_run(tmp_path, history=False), watch)
    async with running(app) as pilot:
        await shown(pilot, app)
        box = app.run_view.query_one("#telemetry")
        await wait_for(pilot, lambda: "watch failed: RuntimeError: sampler bug" in str(box.border_subtitle))
        assert app.run_view.sample is None
        watch.broken = False
        await wait_for(pilot, lambda: app.run_view.sample is not None)
        await pilot.pause()
        assert "failed" not in str(box.border_subtitle) and "GPU0 util  99%" in screen_text(app)


def test_the_learning_rate_subtitle_gives_way_rather_than_being_cut():
    lr = [(1, 0.0), (2, 3e-3), (3, 1.25e-3)]
    assert lr_range_text(lr) == lr_range_text(lr, 40) == "lr 0.00e+00…3.00e-03, now 1.25e-03"
    assert lr_range_text(lr, 30) == "lr now 1.25e-03, max 3.00e-03"  # the loss panel at 80x24
    assert lr_range_text(lr, 15) == "lr now 1.25e-03"
    assert lr_range_text(lr, 11) == "lr 1.25e-03"
    assert lr_range_text(lr, 5) == ""


def test_a_sparkline_drawn_again_after_new_samples_is_the_one_drawn_afresh():
    """spark() keeps a series' last drawing per grid and computes again only the columns from
    where the new intervals start: on random series (gaps, merges past max_points, spans that move
    and stay), at every sample it equals a drawing of a copy that remembers nothing."""
    rng = random.Random(3)
    for how in ("mean", "max"):
        series, t = Series(max_points=64, how=how), 100.0
        for n in range(700):
            t += rng.choice((0.5, 0.5, 0.5, 0.2, 3.0, 15.0))
            series.add(t - 0.5, t, rng.uniform(0, 100) if rng.random() > 0.05 else None)
            if not len(series):
                continue
            width = rng.choice((40, 40, 40, 17))
            sliding = rng.random() < 0.3
            t0, t1 = grid_span(series.first_ts, series.last_ts, width, sliding=sliding)
            fresh = Series(max_points=64, how=how)
            fresh._index(series.points)
            assert spark(series, width, t0, t1, 100.0) == spark(fresh, width, t0, t1, 100.0), n
