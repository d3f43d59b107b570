"""--no-ui output: plain lines for logs, a live status on a terminal; exit codes by ending."""

from __future__ import annotations

import io
import shutil

from conftest import FIXTURES

from cockpit.live.headless import follow, status_line
from cockpit.live.session import RunSession
from cockpit.protocol.wire import encode
from cockpit.run.exit_codes import EXIT_FAILED, EXIT_FINISHED, EXIT_STOPPED
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState


def replay_run(tmp_path, extra: bytes = b"") -> RunDir:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "demo_run_events.jsonl", run / "events.jsonl")
    if extra:
        with open(run / "events.jsonl", "ab") as f:
            f.write(extra)
    return RunDir(run)


def test_plain_replay_prints_the_history_in_order(tmp_path):
    out = io.StringIO()
    code = follow(RunSession(replay_run(tmp_path), recorded=True), out=out, log_every_s=0)
    text = out.getvalue()
    assert code == EXIT_FINISHED
    lines = text.splitlines()
    steps = [line for line in lines if " step " in line and "/88 epoch" in line]
    assert len(steps) == 88 and "step 1/88" in steps[0] and "step 88/88" in steps[-1]
    assert "loss 6.97" in steps[0]  # each line shows its own step's figures, not the final ones
    assert any("data: 345 samples" in line for line in lines)
    summary_at = lines.index("summary:")  # the run's summary comes last
    assert "done: finished at step 88" in lines[summary_at - 1]
    assert lines[summary_at + 1] == "finished: step 88/88 in 0:00:20, $0.0067 at $1.20/h"
    assert "cost $" in steps[-1]  # the demo sets a price


def test_plain_throttles_step_lines(tmp_path):
    out = io.StringIO()
    follow(RunSession(replay_run(tmp_path), recorded=True), out=out, log_every_s=10)
    steps = [line for line in out.getvalue().splitlines() if "/88 epoch" in line]
    assert 1 < len(steps) < 10 and "step 88/88" in steps[-1]


def test_terminal_mode_renders_a_live_status(tmp_path):
    out = io.StringIO()
    code = follow(RunSession(replay_run(tmp_path), recorded=True), out=out, force_terminal=True)
    text = out.getvalue()
    assert code == EXIT_FINISHED
    assert "88/88" in text and "tok/s" in text and "ETA" in text and "done: finished" in text


def test_garbage_on_the_channel_is_reported_and_survived(tmp_path):
    out = io.StringIO()
    extra = b"Segmentation fault (core dumped)\n" + encode("gpu_telemetry", util=3) + b'{"v":1,"type":"lo'
    code = follow(RunSession(replay_run(tmp_path, extra), recorded=True), out=out, log_every_s=0)
    text = out.getvalue()
    assert code == EXIT_FINISHED
    assert "channel fault (not_json)" in text and "Segmentation fault" in text
    assert "channel fault (truncated)" in text
    assert "unknown type 'gpu_telemetry'" in text


def test_exit_codes_follow_the_ending(tmp_path):
    failed = encode("error", kind="oom", message="CUDA out of memory", hint="turn on gradient checkpointing")
    out = io.StringIO()
    assert follow(RunSession(replay_run(tmp_path, failed), recorded=True), out=out) == EXIT_FAILED
    assert "ERROR (oom): CUDA out of memory" in out.getvalue() and "fix: turn on" in out.getvalue()
    state = RunState()
    state.apply({"v": 1, "type": "done", "ts": 1.0, "status": "stopped"})
    from cockpit.run.exit_codes import exit_code

    assert exit_code(state) == EXIT_STOPPED


def test_status_line_shows_cost_only_with_a_price():
    state = RunState()
    state.apply({"v": 1, "type": "hello", "ts": 100.0, "pid": 1, "price_per_hour": 3.6})
    for step in (3, 4, 5):  # three timed steps: an ETA
        log = {"v": 1, "type": "log", "ts": 180.0 + 10 * (step - 3), "step": step, "total_steps": 10}
        state.apply({**log, "loss": 1.0, "step_time_s": 10.0})
    line = status_line(state, 200.0)
    assert "cost $0.10" in line and "ETA 0:00:50" in line  # 100 s at $3.6/h; 5 steps x 10 s left
    assert "(of ~$0.15)" in line
    state.price_per_hour = None
    assert "cost" not in status_line(state, 200.0)


def test_a_killed_trainer_is_said_once(tmp_path):
    import json

    from cockpit.live.event_text import describe
    from cockpit.run.status import record_exit

    run = tmp_path / "run"
    run.mkdir()
    assert record_exit(RunDir(run), -9) == []
    (event,) = (json.loads(line) for line in (run / "events.jsonl").read_text().splitlines())
    assert describe(event) == "trainer killed by SIGKILL"


def test_the_time_between_a_stop_and_its_restart_is_not_billed():
    """Billed: 100-110 (the first attempt), 1000-1010 (the second, killed; its end noticed at 9000)."""
    state = RunState()
    events = [
        {"type": "hello", "ts": 100.0, "pid": 1, "price_per_hour": 3.6},
        {"type": "done", "ts": 110.0, "status": "stopped", "step": 5},
        {"type": "config_change", "ts": 500.0, "attempt": 1, "reason": "oom", "changes": {}},
        {"type": "phase", "ts": 998.0, "phase": "starting", "message": "reading config"},
        {"type": "hello", "ts": 1000.0, "pid": 2, "price_per_hour": 3.6},
        {"type": "log", "ts": 1010.0, "step": 7},
        {"type": "exit", "ts": 9000.0, "reason": "trainer killed by SIGKILL"},  # noticed much later
    ]
    for event in events:
        state.apply({"v": 1, **event})
    assert state.billed_s() == 20.0 and state.cost_so_far() == 0.02


def test_ctrl_c_on_a_replay_does_not_say_training_goes_on(tmp_path):
    import os
    import signal

    from cockpit.run.exit_codes import EXIT_DETACHED

    session = RunSession(replay_run(tmp_path), recorded=True)
    session.poll = lambda: os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while it plays
    out = io.StringIO()
    assert follow(session, out=out) == EXIT_DETACHED
    assert "left the recording of" in out.getvalue() and "training goes on" not in out.getvalue()


def test_the_eta_is_estimating_until_three_steps_are_timed_then_the_median_of_recent_ones():
    state = RunState()
    state.apply({"v": 1, "type": "hello", "ts": 0.0, "pid": 1, "price_per_hour": 3.6})
    log = {"v": 1, "type": "log", "total_steps": 100, "loss": 1.0}
    state.apply({**log, "ts": 10.0, "step": 1, "step_time_s": 10.0})
    line = status_line(state, 10.0)
    assert "ETA estimating" in line and "(of ~" not in line  # no projection equal to the cost so far
    assert state.cost_projected(10.0) is None
    for step, seconds in ((2, 1.0), (3, 1.0), (4, 1.0), (5, 30.0), (6, 1.0)):  # one slow step under load
        state.apply({**log, "ts": 10.0 + step, "step": step, "step_time_s": seconds})
    assert state.eta_s() == 94 * 1.0  # the median: the 30 s step does not swing it
    assert "ETA 0:01:34" in status_line(state, 16.0)
