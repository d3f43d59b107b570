"""The end of a run, without the trainer: the cost keys' validation, the budget, the end runner
(once, after the end, failures said), the summary, the idle alarm on fake telemetry, and
`cockpit runs` with --json, --rm and --prune. The real trainer's side: tests/test_finish_e2e.py."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.cli.main import main
from cockpit.config import load as config_load
from cockpit.config.schema import ConfigError
from cockpit.money import budget, end_runner, idle
from cockpit.protocol.wire import encode
from cockpit.results import runs_list, summary
from cockpit.run import end_launch, journal, process, rundir
from cockpit.run.state import RunState
from cockpit.telemetry.sampler import Sampler

T0 = 1_796_000_000.0


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make_run(events: list[bytes], config: str = "model: {name: 'synthetic:tiny'}\n", trainer=None):
    run = rundir.create(None, "synthetic:tiny", config)
    run.events_path.write_bytes(b"".join(events))
    record = trainer if trainer is not None else {"pid": dead_pid(), "create_time": None}
    run.trainer_path.write_text(json.dumps(record))
    return run


def checkpoint(run: rundir.RunDir, step: int, size: int = 1000) -> Path:
    path = run.checkpoints_dir / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / rundir.COMPLETE_MARKER).write_text(json.dumps({"step": step}))
    (path / "adapter_model.safetensors").write_bytes(b"\0" * size)
    return path


def final(run: rundir.RunDir) -> Path:
    run.final_dir.mkdir()
    (run.final_dir / "adapter_model.safetensors").write_bytes(b"\0" * 100)
    return run.final_dir


def history(*, status: str = "finished", price: float | None = 2.0, max_usd=None, steps: int = 6) -> list:
    """A run's events: hello at T0, one log per step a second apart from T0 + 10, then its end."""
    out = [encode("hello", ts=T0, pid=1, run_id="r", price_per_hour=price, max_usd=max_usd)]
    out.append(encode("train_begin", ts=T0 + 9, total_steps=steps))
    for n in range(1, steps + 1):
        out.append(encode("log", ts=T0 + 9 + n, step=n, total_steps=steps, loss=3.0 - n / 10))
    end = T0 + 10 + steps
    if status == "failed":
        out.append(encode("error", ts=end, kind="other", message="injected fault", hint="", step=steps))
    else:
        out.append(encode("done", ts=end, status=status, step=steps, total_steps=steps, train_loss=2.7))
    return out


def state_of(events: list[bytes]) -> RunState:
    state = RunState(run_id="r")
    for item in journal.LineDecoder().feed(b"".join(events)):
        state.apply(item)
    return state


# ---------------------------------------------------------------- config


def test_max_usd_needs_a_price():
    with pytest.raises(ConfigError, match=r"cost.max_usd: 5 needs cost.price_per_hour"):
        config_load.load_config(None, ["cost.max_usd=5"])
    assert config_load.load_config(None, ["cost.max_usd=5", "cost.price_per_hour=2"]).cost.max_usd == 5.0
    with pytest.raises(ConfigError, match=r"cost.max_usd: 0.0.*must be > 0"):
        config_load.load_config(None, ["cost.max_usd=0", "cost.price_per_hour=2"])


def test_an_empty_end_command_is_refused():
    with pytest.raises(ConfigError, match=r"cost.on_end: the command is empty"):
        config_load.load_config(None, ["cost.on_end='  '"])


def test_then_sets_on_end_as_the_very_string(tmp_path):
    overrides: list[str] = []
    command = 'sudo shutdown -h now; echo "done: yes"'
    config_load.set_override(overrides, "cost.on_end", command)
    assert config_load.load_config(None, overrides).cost.on_end == command
    assert main(["demo", "--then", "true", "--check"]) == 0


def test_report_to_names_installed_trackers_only():
    assert config_load.load_config(None, ["report_to=[tensorboard]"]).report_to == ["tensorboard"]
    assert config_load.load_config(None, []).report_to is None  # off by default
    with pytest.raises(ConfigError, match=r"'tensorbord' is not a tracker.*Did you mean 'tensorboard'"):
        config_load.load_config(None, ["report_to=[tensorbord]"])
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ConfigError, match=r"wandb is not installed.*pip install wandb"):
            config_load.load_config(None, ["report_to=[tensorboard, wandb]"])


# ---------------------------------------------------------------- the budget


def test_budget_counts_every_attempt_at_the_price():
    prior = state_of(history(status="stopped"))  # hello at T0 .. done at T0 + 16: 16 s billed
    cfg = config_load.load_config(None, ["cost.price_per_hour=3600", "cost.max_usd=20"])
    b = budget.budget_for(cfg, prior, started_ts=T0 + 100)
    assert b.prior_s == pytest.approx(16.0)
    assert b.cost_usd(T0 + 103) == pytest.approx(19.0)  # $1/s: 16 s before, 3 s now
    assert not b.reached(T0 + 103.9) and b.reached(T0 + 104)
    assert "budget reached at step 7: $20.00 spent of cost.max_usd $20.00" in b.reached_message(T0 + 104, 7)


def test_a_restart_with_the_budget_spent_is_refused_and_says_how_to_raise_it(home, capsys):
    config = "model: {name: 'synthetic:tiny'}\ncost: {price_per_hour: 3600, max_usd: 10}\n"
    run = make_run(history(status="stopped"), config)  # 16 s at $1/s: $16 spent of $10
    assert main(["restart", run.run_id, "--no-ui"]) == 2
    err = capsys.readouterr().err
    assert f"cost.max_usd is $10.00 but run {run.run_id} has already cost $16.00" in err
    assert "0:00:16 over 1 attempt at $3,600/h" in err
    assert f"cockpit restart {run.run_id} --max-usd N (N above $16.00)" in err
    assert main(["restart", run.run_id, "--no-ui", "--max-usd", "12"]) == 2  # still below
    assert "max_usd: 10" in run.config_path.read_text()  # a refused budget is not written
    assert not run.trainer_path.read_text().count('"started"')  # no trainer was launched
    assert main(["restart", run.run_id, "--no-ui", "--max-usd", "-1"]) == 2
    assert "give US dollars above 0" in capsys.readouterr().err


# ---------------------------------------------------------------- the end runner


def end_config(command: str) -> str:
    return f"model: {{name: 'synthetic:tiny'}}\ncost: {{on_end: {json.dumps(command)}}}\n"


def test_on_end_runs_once_per_ending_never_twice(home):
    run = make_run(history(), end_config('echo "$COCKPIT_RUN_STATUS" >> count.txt'))
    final(run)
    pid = json.loads(run.trainer_path.read_text())["pid"]
    log = io.StringIO()
    with _stdout(log):
        assert end_runner.run_end(run, pid) == 0
        assert end_runner.run_end(run, pid) == 0  # a second runner for the same ending
    assert (run.path / "count.txt").read_text() == "finished\n"
    assert "on_end already ran for this ending of the run" in log.getvalue()
    ended = [e for e in journal.read_all(run.events_path) if e["type"] == "end_command"]
    assert [e["state"] for e in ended] == ["started", "finished"]
    assert ended[-1]["returncode"] == 0 and ended[-1]["run_status"] == "finished"
    assert len(list((run.path / end_runner.CLAIMS_NAME).iterdir())) == 1


def test_a_failing_end_command_is_said_and_the_run_directory_stays(home):
    run = make_run(history(status="failed"), end_config("echo partial; exit 3"))
    checkpoint(run, 4)
    before = sorted(p.name for p in run.path.iterdir())
    log = io.StringIO()
    with _stdout(log):
        assert end_runner.run_end(run, json.loads(run.trainer_path.read_text())["pid"]) == 1
    assert "on_end FAILED (exit 3)" in log.getvalue() and "the run directory is intact" in log.getvalue()
    last = journal.last_event(run.events_path, "end_command")
    assert last["state"] == "failed" and last["returncode"] == 3 and last["run_status"] == "failed"
    state = journal.fold(run.events_path)
    assert state.status == "failed" and state.error["message"] == "injected fault"  # still the run's end
    assert set(before) <= {p.name for p in run.path.iterdir()}
    assert run.complete_checkpoints() == [run.checkpoints_dir / "checkpoint-4"]
    lines = summary.run_summary_lines(run, state)
    assert lines[-1] == "on_end: echo partial; exit 3: FAILED, see backend.log; the run directory is intact"
    (row,) = runs_list.rows([run])
    assert row.on_end["state"] == "failed" and row.on_end["returncode"] == 3
    said = "  on_end FAILED (exit 3): echo partial; exit 3 (see its backend.log)"
    assert said in runs_list.table_lines([row])


def test_a_hanging_end_command_is_ended_at_its_limit_and_said(home):
    """`sleep 3600` as cost.on_end ran for ever, and `cockpit runs` did not show it running."""
    import threading

    command = "sleep 3600 & echo $! > child.pid; wait"
    limit = "on_end_timeout_min: 0.05"  # 3 s
    config = f"model: {{name: 'synthetic:tiny'}}\ncost: {{on_end: {json.dumps(command)}, {limit}}}\n"
    run = make_run(history(), config)
    final(run)
    log = io.StringIO()
    codes = []
    began = time.monotonic()
    with _stdout(log):
        runner = threading.Thread(
            target=lambda: codes.append(
                end_runner.run_end(run, json.loads(run.trainer_path.read_text())["pid"])
            )
        )
        runner.start()
        started = wait_for(lambda: journal.last_event(run.events_path, "end_command"), 20, what="on_end")
        assert started["state"] == "started" and started["timeout_s"] == 3.0
        (row,) = runs_list.rows([run])
        assert any(line.startswith("  on_end running for 0:00:0") for line in runs_list.table_lines([row]))
        runner.join(60)
    assert codes == [1] and time.monotonic() - began < 30
    child = int((run.path / "child.pid").read_text())

    def gone() -> bool:  # the group's SIGKILL lands asynchronously
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(gone, 10, what="the command's child ended with its group")
    assert "on_end TIMED OUT after" in log.getvalue() and "its process group was ended" in log.getvalue()
    last = journal.last_event(run.events_path, "end_command")
    assert last["state"] == "timed_out" and last["timeout_s"] == 3.0 and last["duration_s"] < 20
    (row,) = runs_list.rows([run])
    said = f" (cost.on_end_timeout_min), ended: {command} (see backend.log)"
    assert any(
        line.startswith("  on_end TIMED OUT after 0:00:") and line.endswith(said)
        for line in runs_list.table_lines([row])
    )
    state = journal.fold(run.events_path)
    assert summary.run_summary_lines(run, state)[-1].endswith(
        "TIMED OUT (cost.on_end_timeout_min) and ended; see backend.log"
    )


def test_the_end_runner_waits_for_the_trainer_to_end(home, tmp_path):
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    record = {
        "pid": trainer.pid,
        "pgid": trainer.pid,
        "create_time": psutil.Process(trainer.pid).create_time(),
    }
    run = make_run(history(), end_config("date +%s.%N > ran_at.txt"), trainer=record)
    runner = end_launch.start(run, trainer.pid)
    assert runner is not None
    trainer.wait()
    ended_at = time.time()
    assert runner.wait(30) == 0
    assert float((run.path / "ran_at.txt").read_text()) >= ended_at - 0.1
    assert "on_end: done" in run.log_path.read_text()  # its output is the run's log


class _stdout:
    def __init__(self, into: io.StringIO):
        self.into = into

    def __enter__(self):
        self.saved, sys.stdout = sys.stdout, self.into

    def __exit__(self, *exc):
        sys.stdout = self.saved


# ---------------------------------------------------------------- the summary


def test_summary_of_a_finished_run(home):
    run = make_run(history())
    adapter = final(run)
    lines = summary.run_summary_lines(run, journal.fold(run.events_path))
    assert lines == [
        "finished: step 6/6 in 0:00:16, $0.0089 at $2.00/h",
        "train loss 2.4000 (last logged; run mean 2.7000), no eval",
        f"adapter: {adapter}",
        f"next: cockpit chat {run.run_id}",
        f"      cockpit export {run.run_id}",
    ]


def test_summary_of_a_budget_stop_names_the_checkpoint_and_the_way_on(home):
    events = history(status="stopped", max_usd=0.008)
    events[-1] = encode("done", ts=T0 + 16, status="stopped", step=6, total_steps=6, reason="budget")
    run = make_run(events)
    path = checkpoint(run, 6)
    s = summary.run_summary(run, journal.fold(run.events_path))
    assert s.reason == "budget" and s.adapter == str(path) and not s.adapter_is_final
    lines = summary.summary_lines(s)
    assert lines[0] == "stopped at the budget ($0.0080): step 6/6 in 0:00:16, $0.0089 at $2.00/h"
    assert lines[2] == f"adapter (newest checkpoint): {path}"
    assert lines[3:] == [
        f"next: cockpit restart {run.run_id} --max-usd N",
        f"      cockpit chat {run.run_id} --checkpoint 6",
        f"      cockpit export {run.run_id} --checkpoint 6",
    ]


def test_summary_of_a_failure_without_checkpoint_and_an_eval_loss_when_there_is_one(home):
    run = make_run(history(status="failed"))
    state = journal.fold(run.events_path)
    lines = summary.run_summary_lines(run, state)
    assert "error: other: injected fault" in lines
    assert "adapter: none saved (no complete checkpoint)" in lines
    assert lines[-1] == f"next: cockpit restart {run.run_id}"
    state.eval_loss = 2.25  # what a run with evaluation folds (`eval` events)
    assert ", eval loss 2.2500" in summary.run_summary_lines(run, state)[1]


# ---------------------------------------------------------------- the idle alarm, on fake telemetry


def idle_samples(seconds: int, util_pct: int = 0, start: float = T0) -> list:
    """One sample a second from fake NVML: an H100 at `util_pct`, no process on it."""
    times = itertools.count()
    sampler = Sampler(
        FakeNvml(gpus=[FakeGpu(util_pct=util_pct, processes=[], power_mw=70_000)]),
        clock=lambda: start + next(times),
    )
    try:
        return [sampler.sample() for _ in range(seconds)]
    finally:
        sampler.close()


def feed(doctor, alarm, samples, state) -> list[str]:
    said = []
    for sample in samples:
        doctor.observe(sample, state)
        text = alarm.update(doctor.findings(sample.ts))
        if text:
            said.append(text)
    return said


def test_the_idle_alarm_sounds_once_per_spell_and_runs_on_idle(tmp_path):
    settings = idle.IdleSettings(idle_minutes=2, on_idle="sudo shutdown -h now")
    started = []
    alarm = idle.IdleAlarm(
        settings, tmp_path / "backend.log", starter=lambda c, _log: started.append(c) or FakeProc()
    )
    doctor = settings.doctor()
    ended = RunState(status="finished", price_per_hour=2.5)
    assert feed(doctor, alarm, idle_samples(100), ended) == []  # 100 s idle: not yet 2 minutes
    said = feed(doctor, alarm, idle_samples(200, start=T0 + 100), ended)
    assert len(said) == 1 and started == ["sudo shutdown -h now"]  # once, not every second after
    assert said[0].startswith("IDLE ALARM: Idle GPU, still billed: GPU util below 5% for 2 min")
    assert "while the run is finished; $0.078 burnt at $2.50/h" in said[0]  # 113 s idle so far
    assert said[0].endswith("Ran cost.on_idle (pid 4242, its output in backend.log): sudo shutdown -h now")
    assert feed(doctor, alarm, idle_samples(60, util_pct=97, start=T0 + 300), ended) == []  # busy: re-armed
    assert len(feed(doctor, alarm, idle_samples(200, start=T0 + 360), ended)) == 1
    assert alarm.spells == 2 and len(started) == 2


def test_no_alarm_while_a_run_trains_even_on_an_idle_gpu():
    settings = idle.IdleSettings(idle_minutes=1)
    alarm = idle.IdleAlarm(settings)
    assert feed(settings.doctor(), alarm, idle_samples(200), RunState(status="running")) == []


def test_on_idle_output_goes_to_the_run_log_and_the_bell_only_to_a_terminal(tmp_path):
    log = tmp_path / "backend.log"
    proc = idle.start_command("echo on-idle-ran", log)
    proc.wait(10)
    assert "on_idle: running: echo on-idle-ran" in log.read_text() and "on-idle-ran\n" in log.read_text()
    plain, tty = io.StringIO(), TtyOut()
    idle.ring(plain)
    idle.ring(tty)
    assert plain.getvalue() == "" and tty.getvalue() == "\a"


def test_the_alarm_without_on_idle_says_how_to_act(tmp_path):
    settings = idle.IdleSettings(idle_minutes=1)
    text = feed(settings.doctor(), idle.IdleAlarm(settings), idle_samples(90), RunState(status="paused"))
    assert len(text) == 1 and "while the run is paused" in text[0]
    assert text[0].endswith("Set cost.on_idle to act on it (e.g. 'sudo shutdown -h now')")


def test_the_live_watch_judges_idleness_over_cost_idle_minutes(tmp_path):
    from cockpit.live.watch import LiveWatch

    config = tmp_path / "c.yaml"
    config.write_text("cost: {idle_minutes: 30, on_idle: 'true'}\n")
    settings = idle.settings_of(config)
    assert settings == idle.IdleSettings(30.0, "true")
    watch = LiveWatch(None, sampler=Sampler(FakeNvml(gpus=[FakeGpu()])), doctor=settings.doctor())
    assert dict((rule, span) for rule, _fn, span in watch.doctor.rules)["idle_billed"] == 1800
    assert idle.settings_of(tmp_path / "missing.yaml") == idle.IdleSettings()


class FakeProc:
    pid = 4242


class TtyOut(io.StringIO):
    def isatty(self) -> bool:
        return True


# ---------------------------------------------------------------- cockpit runs


def test_runs_json_has_start_duration_loss_cost_config_and_disk(home, capsys):
    run = make_run(history())
    run.write_source("/somewhere/my-recipe.yaml")
    final(run)
    checkpoint(run, 6, size=5000)
    assert main(["runs", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["run"] == run.run_id and row["status"] == "finished" and row["config"] == "my-recipe.yaml"
    assert row["started_ts"] == T0 and row["duration_s"] == 16.0
    assert row["final_loss"] == pytest.approx(2.4) and row["cost_usd"] == pytest.approx(2.0 * 16 / 3600)
    assert row["checkpoints_bytes"] >= 5000 and row["disk_bytes"] > row["checkpoints_bytes"]
    assert row["adapter"] == str(run.final_dir)
    assert main(["runs"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["RUN", "STATUS", "STEPS", "LOSS", "COST", "DISK"]
    assert table[1].split()[:5] == [run.run_id, "finished", "6/6", "2.4000", "$0.0089"]
    assert table[2].startswith("  started ") and table[2].endswith(", ran 0:00:16, config my-recipe.yaml")
    assert max(len(line) for line in table) <= 80


def live_run() -> rundir.RunDir:
    me = psutil.Process()
    record = {"pid": me.pid, "create_time": me.create_time(), "boot_id": process.boot_id()}
    run = make_run([encode("hello", pid=me.pid), encode("phase", phase="training")], trainer=record)
    checkpoint(run, 2)
    return run


def test_rm_asks_first_and_never_touches_a_running_run(home, capsys, monkeypatch):
    running = live_run()
    assert main(["runs", "--rm", running.run_id, "--yes"]) == 2
    assert "is still running: nothing deleted" in capsys.readouterr().err
    assert running.path.is_dir()
    ended = make_run(history())
    assert main(["runs", "--rm", ended.run_id]) == 2  # nobody to ask (stdin is no terminal)
    assert "add --yes" in capsys.readouterr().err and ended.path.is_dir()
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda _q: "n")
    assert main(["runs", "--rm", ended.run_id]) == 0
    assert "nothing deleted" in capsys.readouterr().out and ended.path.is_dir()
    monkeypatch.setattr("builtins.input", lambda _q: "y")
    assert main(["runs", "--rm", ended.run_id]) == 0
    out = capsys.readouterr().out
    assert f"{ended.run_id}: the whole run directory" in out and "deleted; freed" in out
    assert not ended.path.exists() and [r.run_id for r in rundir.all_runs()] == [running.run_id]


def test_rm_of_a_run_outside_the_default_root_removes_its_link_too(home, tmp_path):
    run = rundir.create(tmp_path / "elsewhere", "synthetic:tiny", "")
    run.trainer_path.write_text(json.dumps({"pid": dead_pid()}))
    assert main(["runs", "--rm", run.run_id, "--yes"]) == 0
    assert not run.path.exists() and rundir.all_runs() == []
    assert not (home / "runs" / run.run_id).is_symlink()


def test_prune_frees_checkpoints_of_ended_runs_and_keeps_what_goes_on(home, capsys):
    finished = make_run(history())
    final(finished)
    for step in (3, 6):
        checkpoint(finished, step)
    stopped = make_run(history(status="stopped"))
    for step in (2, 4):
        checkpoint(stopped, step)
    (stopped.checkpoints_dir / "checkpoint-5").mkdir()  # a save that never completed
    running = live_run()
    assert main(["runs", "--prune", "--yes"]) == 0
    captured = capsys.readouterr()
    assert f"{running.run_id}: running, left alone" in captured.err
    assert f"{finished.run_id}: 2 checkpoint folders (final/ kept)" in captured.out
    assert f"{stopped.run_id}: 2 checkpoint folders (checkpoint-4 kept)" in captured.out
    assert list(finished.checkpoints_dir.iterdir()) == [] and finished.final_dir.is_dir()
    assert [p.name for p in stopped.checkpoints_dir.iterdir()] == ["checkpoint-4"]
    assert [p.name for p in running.complete_checkpoints()] == ["checkpoint-2"]
    assert main(["runs", "--prune", "--yes"]) == 0
    assert "nothing to delete" in capsys.readouterr().out


def test_a_run_that_comes_alive_between_plan_and_delete_is_left_alone(home, monkeypatch):
    run = make_run(history(status="stopped"))
    checkpoint(run, 3)
    checkpoint(run, 6)
    (removal,) = runs_list.plan_prune([run])[0]
    monkeypatch.setattr(runs_list.process, "is_alive", lambda _run: True)
    with pytest.raises(runs_list.StillRunning, match="started again meanwhile"):
        runs_list.execute(removal)
    assert run.complete_checkpoints()


# ---------------------------------------------------------------- the idle alarm in the run view


async def test_the_run_view_rings_once_says_so_and_runs_on_idle(tmp_path):
    from support.pilot import EVENTS, ScriptedSession, ScriptedWatch, fake_samples, screen_text

    from cockpit.doctor.window import Finding
    from screens.run.app import CockpitApp

    run_path = tmp_path / "run"
    run_path.mkdir()
    (run_path / "config.yaml").write_text("cost: {idle_minutes: 10, on_idle: 'echo idle >> idle.txt'}\n")
    (run_path / "backend.log").write_text("")
    finding = Finding(
        "idle_billed",
        "alarm",
        "Idle GPU, still billed",
        "GPU util below 5% for 10 min while the run is finished; $0.42 burnt at $2.50/h",
        "Shut the instance down, or start the next run: it is billed by the hour, idle or not.",
    )
    watch = ScriptedWatch(fake_samples(), [finding])
    session = ScriptedSession(rundir.RunDir(run_path), EVENTS, alive=False)
    app = CockpitApp(session, watch=watch, poll_interval_s=0.02, clock=lambda: EVENTS[-1]["ts"] + 2)
    bells = []
    app.bell = lambda: bells.append(1)
    async with app.run_test(size=(100, 32), notifications=True) as pilot:
        deadline = time.monotonic() + 10
        while watch.calls < 8:  # the same finding, again and again
            assert time.monotonic() < deadline, "the watch was never asked"
            await pilot.pause(0.05)
        await pilot.pause(0.2)
        text = screen_text(app)
    assert bells == [1]
    assert "IDLE ALARM: Idle GPU, still billed" in text
    alarm = app.run_view.idle_alarm
    assert alarm.spells == 1
    alarm.wait()
    assert (run_path / "idle.txt").read_text() == "idle\n"
    assert "on_idle: running: echo idle >> idle.txt" in (run_path / "backend.log").read_text()


def test_nothing_to_export_offers_a_restart_only_to_a_run_that_can_be_restarted(home):
    """A finished run whose weights are gone was told to `cockpit restart` it, which refuses a
    finished run."""
    from cockpit.results import export as exporter

    finished = make_run([encode("hello", pid=1), encode("done", status="finished", step=88)])
    with pytest.raises(exporter.ExportError) as said:
        exporter.pick_source(finished, None)
    assert "cockpit restart" not in str(said.value) and "It finished" in str(said.value)
    assert "cockpit train" in str(said.value)
    assert main(["restart", finished.run_id, "--no-ui"]) != 0  # what it used to offer
    stopped = make_run([encode("hello", pid=1), encode("done", status="stopped", step=12)])
    with pytest.raises(exporter.ExportError, match=f"Continue it with `cockpit restart {stopped.run_id}`"):
        exporter.pick_source(stopped, None)


def test_a_paused_run_is_billed_up_to_now_in_cockpit_runs(home):
    """`cockpit runs` showed a paused run's time and cost frozen at its last event (a paused
    trainer writes none until it resumes) while the live view went on counting the instance."""
    me = psutil.Process()
    start = time.time() - 100
    events = [
        encode("hello", ts=start, pid=me.pid, price_per_hour=3.6),
        encode("phase", ts=start + 1, phase="training"),
        encode("log", ts=start + 10, step=5, loss=1.0),
        encode("paused", ts=start + 10.5, step=5),
    ]
    record = {"pid": me.pid, "create_time": me.create_time(), "boot_id": process.boot_id()}
    row = runs_list.row_of(make_run(events, trainer=record))
    assert row.status == "paused"
    assert 99 <= row.duration_s <= 100 + 30  # up to now, not the 10.5 s to the pause
    assert row.cost_usd == pytest.approx(3.6 * row.duration_s / 3600, rel=0.01)
    ended = make_run([*events, encode("done", ts=start + 20, status="stopped", step=5)])
    assert runs_list.row_of(ended).duration_s == pytest.approx(20, abs=0.01)  # an ended run: to its end
