"""Behaviour of the TUI, driven with pilot over a recorded demo run (88 steps, CPU, tiny model)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cockpit import supervisor
from cockpit.protocol import Fault
from cockpit.rundir import RunDir
from cockpit.runstate import RunState
from cockpit.session import RunSession
from screens.app import CockpitApp
from screens.confirm import Confirm
from screens.run_view import EventLines, RunView, stat_rows
from widgets.loss_plot import LossPlot, braille_rows, plot_lines
from widgets.progress import StepProgress

FIXTURE = Path(__file__).parent / "fixtures" / "demo_run_events.jsonl"
RUN_ID = "20261130-152228-tiny"
EVENTS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
LAST_TS = EVENTS[-1]["ts"]
SIZE = (100, 32)


def events_until_step(step: int) -> list[dict]:
    """The recording up to the log event of `step` and its checkpoint, before any ending."""
    out = []
    for item in EVENTS:
        past = item["type"] == "log" and item["step"] > step
        if past or item["type"] == "done" or item.get("phase") in ("saving", "done"):
            break
        out.append(item)
    return out


def event(type_: str, ts: float, **fields) -> dict:
    return {"v": 1, "type": type_, "ts": ts, **fields}


class ScriptedSession:
    """The RunSession interface over recorded events: `feed()` makes more arrive, commands are recorded."""

    def __init__(self, run: RunDir, events: list[dict], *, alive: bool = True, replay: bool = False):
        self.run = run
        self.replay = replay
        self.alive = alive and not replay
        self.state = RunState(run_id=run.run_id)
        self.trainer_gone = False
        self.sent: list[str] = []
        self.send_error: Exception | None = None
        self.closed = False
        self.poll_threads: set[str] = set()
        self._pending = list(events)
        self._lock = threading.Lock()

    def feed(self, events: list[dict]) -> None:
        with self._lock:
            self._pending.extend(events)

    def poll(self) -> list:
        self.poll_threads.add(threading.current_thread().name)
        with self._lock:
            items, self._pending = self._pending, []
        for item in items:
            self.state.apply(item)
        if not self.alive:
            self.trainer_gone = True
        return items

    @property
    def ended(self) -> bool:
        return self.trainer_gone and (self.state.ended or self.replay)

    def send(self, command: str, sender: str = "cockpit") -> None:
        if self.send_error is not None:
            raise self.send_error
        self.sent.append(command)

    def close(self) -> None:
        self.closed = True


def scripted(tmp_path: Path, events: list[dict], **kw) -> ScriptedSession:
    path = tmp_path / RUN_ID
    path.mkdir(exist_ok=True)
    return ScriptedSession(RunDir(path), events, **kw)


def recorded(tmp_path: Path, events: list[dict] = EVENTS) -> RunSession:
    """A real session replaying a recording (what `cockpit attach` does when no trainer is alive)."""
    path = tmp_path / RUN_ID
    path.mkdir()
    if events is EVENTS:
        shutil.copy(FIXTURE, path / "events.jsonl")
    else:
        (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return RunSession(RunDir(path), replay=True)


def make_app(session, clock_ts: float = LAST_TS + 5.0) -> CockpitApp:
    return CockpitApp(session, poll_interval_s=0.02, clock=lambda: clock_ts)


def running(app: CockpitApp):
    return app.run_test(size=SIZE, notifications=True)


def screen_text(app: CockpitApp) -> str:
    """What the terminal shows, as plain text (toasts included)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_for(pilot, condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the view"
        await pilot.pause(0.02)


async def shown(pilot, app: CockpitApp) -> None:
    await wait_for(pilot, lambda: app.run_view.updates_shown > 0)
    await pilot.pause()


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
    session.send_error = supervisor.NotRunning(f"run {RUN_ID} has no live trainer to take 'save'")
    app = make_app(session)
    async with running(app) as pilot:
        await shown(pilot, app)
        await pilot.press("s")
        await pilot.pause()
        assert "'save' was not sent" in screen_text(app)
        assert app.is_running


async def test_x_asks_first_and_n_cancels(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(supervisor, "stop", lambda run, **kw: calls.append(run) or "stopped")
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

    monkeypatch.setattr(supervisor, "stop", fake_stop)
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
    monkeypatch.setattr(supervisor, "stop", lambda run, **kw: calls.append(run))
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
        assert "checkpoint-25" in screen_text(app)
        assert "checkpoint: step 25" in screen_text(app)
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
    assert steps_drawn == [10, 30]


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
    assert "checkpoint-75" in text and "checkpoint-88" in text and "checkpoint-50" not in text
    assert "7.0169" in text and "0.9556" in text and "step 88" in text  # plot max, min, steps
    assert "done: finished at step 88" in text


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
        assert "- (set cost.price_per_hour)" in screen_text(app)


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
        ("", "loss max 4.0000 min 1.5000, steps 1-9", False)
    ]
    assert plot_lines([], width=40, height=10) == [("", "no loss logged yet", False)]


def test_the_ui_never_imports_torch():
    code = (
        "import sys, screens.app; assert not {'torch', 'train_backend'} & set(sys.modules), 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
