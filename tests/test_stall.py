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
    slow_end = sorted(state.step_times)[int(0.9 * len(state.step_times))]  # not the last step's time
    expected = max(slow_end, state.log_gap_s)
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


def _alternating_run(step_times: list[float]) -> RunState:
    """A training run whose steps took `step_times`, one log event each, the last one now."""
    state = RunState()
    ts = 1000.0
    state.apply(event("hello", ts, pid=1))
    state.apply(event("phase", ts, phase="training"))
    for step, took in enumerate(step_times, 1):
        ts += took
        state.apply(event("log", ts, step=step, total_steps=100, step_time_s=took, loss=1.0))
    return state


def test_false_alarms_a_loaded_box_gave_are_judged_by_the_spread_the_work_and_the_process():
    """A healthy trainer was said silent 9 times: 'for 32 s (its steps take 0.5 s)' quoting the last
    short step of steps of 4 and 1 micro-batches, and 'silent for 53 s' during an eval pass."""
    from cockpit.live.trainer_seen import Seen

    state = _alternating_run([2.0, 0.5] * 10)
    assert state.step_time_s == 0.5
    stall = find_stall(state, state.last_ts + 12)
    assert stall is not None and stall.expected_s == 2.0  # the slow end, not the last step
    assert stall.text().startswith("no event from the trainer for 12 s (its steps take up to 2.0 s): ")
    # the process seen working on the CPU: a slow step on a loaded box, not a stall yet
    working = Seen(4242, "R", 0.9)
    assert find_stall(state, state.last_ts + 25, working) is None
    stall = find_stall(state, state.last_ts + 32, working)
    assert "its process 4242 uses 0.9 of a core, so it works" in stall.text()
    # seen stopped: said at the floor, with what was seen and how to go on
    stopped = find_stall(state, state.last_ts + 11, Seen(4242, "T", 0.0))
    assert "its process 4242 is stopped (state T" in stopped.text() and "kill -CONT 4242" in stopped.text()
    in_io = find_stall(state, state.last_ts + 12, Seen(4242, "D", 0.01))
    assert "waits on I/O (state D)" in in_io.text()
    asleep = find_stall(state, state.last_ts + 12, Seen(4242, "S", 0.0))
    assert "is asleep (state S, 0.00 of a core)" in asleep.text()
    # an eval pass under way (the trainer's busy event): judged by the evals' own duration
    state.apply(event("busy", state.last_ts + 0.1, what="eval", step=20))
    state.apply(event("eval", state.last_ts + 20, step=20, eval_loss=1.0, eval_s=20.0))
    state.apply(event("log", state.last_ts + 2, step=21, total_steps=100, step_time_s=2.0, loss=1.0))
    state.apply(event("busy", state.last_ts + 0.1, what="eval", step=40))
    assert find_stall(state, state.last_ts + 53) is None  # was "silent: no event for 53 s"
    stall = find_stall(state, state.last_ts + 61)
    assert stall.busy == "eval" and "during an eval pass, which took up to 20 s" in stall.text()
    state.apply(event("eval", state.last_ts + 61, step=40, eval_loss=1.0, eval_s=61.0))
    assert state.busy is None  # its own event ends it
    state.apply(event("busy", state.last_ts + 0.1, what="save", step=40))  # the first save: no history
    assert find_stall(state, state.last_ts + 250) is None
    assert "during a checkpoint save, its first" in find_stall(state, state.last_ts + 301).text()


def test_the_process_look_reads_the_state_and_the_cpu_of_a_real_process():
    import os
    import signal
    import subprocess
    import sys
    import time

    from cockpit.live.trainer_seen import TrainerLook, read_stat

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        look = TrainerLook(spinner.pid)
        assert look.look().cores is None  # one look measures nothing yet
        time.sleep(1.5)
        seen = look.look()
        assert seen.state == "R" and seen.working and seen.cores > 0.1, seen
        os.kill(spinner.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while read_stat(spinner.pid)[0] != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.2)
        seen = look.look()
        assert seen.stopped and not seen.working and seen.cores < 0.05, seen
    finally:
        spinner.kill()
        spinner.wait()
    assert read_stat(spinner.pid) is None  # reaped: nothing to read


def test_a_wall_clock_step_is_neither_silence_nor_cost_and_the_trainer_says_it_once(tmp_path, monkeypatch):
    """The clock stepped +1 h (NTP) while the trainer is quiet: the live view said `no event from the
    trainer for 1:00:01` and elapsed 1:01:14. The session's clock (now_ts) moves on the monotonic clock,
    billing follows the trainer's mono_s, and the trainer's emitter says the step once."""
    import json
    import os
    import subprocess
    import sys
    import time

    from cockpit.live import session as session_mod
    from cockpit.run.rundir import RunDir
    from train_backend import channel

    run = tmp_path / "run"
    run.mkdir()
    t0 = time.time() - 10
    lines = [event("hello", t0, pid=1, mono_s=0.0), event("phase", t0, phase="training", mono_s=0.0)]
    lines += [event("log", t0 + s, step=s, step_time_s=1.0, loss=1.0, mono_s=float(s)) for s in range(1, 10)]
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = session_mod.RunSession(RunDir(run), proc=stand_in)
        live.poll()
        real_time = time.time
        monkeypatch.setattr(session_mod.time, "time", lambda: real_time() + 3600)  # stepped, quiet
        now = live.now_ts()
        assert now - live.state.last_ts < 5 and find_stall(live.state, now) is None
        assert live.state.billed_s(now) < 20
        # the trainer's next event, stamped by the stepped clock: billed by its mono_s
        with open(run / "events.jsonl", "a") as f:
            f.write(
                json.dumps(event("log", t0 + 3610, step=10, step_time_s=1.0, loss=1.0, mono_s=10.0)) + "\n"
            )
        live.poll()
        assert 10 <= live.state.billed_s(live.now_ts()) < 20
    finally:
        stand_in.kill()
        stand_in.wait()
    # the trainer's side: every event carries mono_s, and a step of its wall clock is said once
    read_fd, write_fd = os.pipe()
    emitter = channel.Emitter(write_fd, secrets=[])
    emitter.emit("log", step=1)
    wall = channel.time.time
    monkeypatch.setattr(channel.time, "time", lambda: wall() + 3600)
    emitter.emit("log", step=2)
    emitter.emit("log", step=3)
    os.close(write_fd)
    said = [json.loads(line) for line in os.read(read_fd, 1 << 16).splitlines()]
    os.close(read_fd)
    assert [e["type"] for e in said] == ["log", "log", "warning", "log"]
    assert said[2]["message"].startswith("the wall clock was stepped by +1:00:00")
    assert said[1]["ts"] - said[0]["ts"] > 3599 and said[1]["mono_s"] - said[0]["mono_s"] < 5
