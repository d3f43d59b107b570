"""A trainer that goes quiet (SIGSTOP, a hang) is said, with how long, in the TUI and headless, once
no event has come for longer than its steps take; the notice clears when events come again."""

from __future__ import annotations

import io

from support.pilot import EVENTS, event, events_until_step, running, screen_text, scripted, shown, wait_for

from cockpit.live import headless
from cockpit.live.stall import STALL_FLOOR_S, StallNotices, find_stall
from cockpit.money import idle
from cockpit.run.state import RunState
from screens.run.app import CockpitApp


def state_at_step(step: int) -> RunState:
    state = RunState()
    for item in events_until_step(step):
        state.apply(item)
    return state


def test_a_stall_is_judged_against_the_runs_own_step_time():
    state = state_at_step(30)
    last = state.last_ts
    expected = max(state.step_time_s, state.log_gap_s)
    limit = max(STALL_FLOOR_S, 3 * expected)
    assert find_stall(state, last + limit - 0.5) is None
    stall = find_stall(state, last + 34)
    assert stall is not None and stall.silent_s == 34 and stall.expected_s == expected
    assert stall.text().startswith("no event from the trainer for 34 s (its steps take ")


def test_no_stall_while_paused_loading_or_ended():
    state = state_at_step(30)
    state.apply(event("paused", state.last_ts, step=30))
    assert find_stall(state, state.last_ts + 600) is None
    loading = RunState()
    for item in EVENTS:
        if item["type"] == "log":
            break
        loading.apply(item)
    assert find_stall(loading, loading.last_ts + 600) is None  # before a step was said
    done = RunState()
    for item in EVENTS:
        done.apply(item)
    assert find_stall(done, done.last_ts + 600) is None


def test_notices_say_the_start_and_the_end_once():
    state = state_at_step(30)
    notices = StallNotices()
    assert notices.update(find_stall(state, state.last_ts + 1)) is None
    assert notices.update(find_stall(state, state.last_ts + 40)).startswith(
        "no event from the trainer for 40 s"
    )
    assert notices.update(find_stall(state, state.last_ts + 50)) is None
    assert notices.update(None) == "events again, after 50 s without one"


async def test_the_tui_says_a_silent_trainer_and_clears_it(tmp_path):
    session = scripted(tmp_path, events_until_step(30))
    now = {"ts": events_until_step(30)[-1]["ts"] + 1.0}
    app = CockpitApp(session, poll_interval_s=0.02, clock=lambda: now["ts"])
    async with running(app) as pilot:
        await shown(pilot, app)
        assert " running " in screen_text(app) and "no event from" not in screen_text(app)
        now["ts"] += 33.0  # kill -STOP: nothing comes for 34 s
        await wait_for(pilot, lambda: app.run_view.stall is not None, timeout_s=5)
        await pilot.pause()
        text = screen_text(app)
        assert " silent " in text and "no event from the trainer for 34 s" in text
        step_31 = next(e for e in EVENTS if e["type"] == "log" and e["step"] == 31)
        session.feed([{**step_31, "ts": now["ts"]}])  # kill -CONT
        await wait_for(pilot, lambda: app.run_view.stall is None, timeout_s=5)
        await pilot.pause()
        text = screen_text(app)
        assert " running " in text and "no event from the trainer" not in text.split("\n")[0]
        assert "events again, after 34 s without one" in text


def test_headless_says_it_and_clears_it(tmp_path, monkeypatch):
    session = scripted(tmp_path, events_until_step(30))
    last = events_until_step(30)[-1]["ts"]
    clock = iter([last + 1, last + 34, last + 35, last + 36])
    step_31 = next(e for e in EVENTS if e["type"] == "log" and e["step"] == 31)
    calls = {"n": 0}
    real_poll = session.poll

    def poll():
        calls["n"] += 1
        if calls["n"] == 3:
            session.feed([{**step_31, "ts": last + 35}])
        if calls["n"] == 4:
            session.alive = False
            session.feed([event("done", last + 36, status="finished", step=31)])
        return real_poll()

    session.poll = poll
    monkeypatch.setattr(headless.time, "time", lambda: next(clock, last + 40))
    monkeypatch.setattr(headless.time, "sleep", lambda _s: None)
    out = io.StringIO()
    assert headless._follow_plain(session, out, 10.0, None, idle.IdleAlarm(idle.IdleSettings())) == 0
    text = out.getvalue()
    assert "no event from the trainer for 34 s" in text and "events again, after 34 s without one" in text
    assert text.index("no event from") < text.index("events again")
