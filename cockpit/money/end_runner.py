"""The end runner: runs `cost.on_end` once the run has ended and everything it wrote is on disk.

    python -m cockpit.money.end_runner RUN_DIR TRAINER_PID

The supervisor (cockpit.run.process.launch) starts one beside each trainer it launches, when the
config has an end command or an export at the end, in a session of its own, with stdout and
stderr on the run's backend.log: it outlives every client (a detached TUI, an SSH drop, a
SIGKILLed --no-ui) and is out of reach of `cockpit stop`'s signals to the trainer's process group. It

1. waits for the trainer to exit, whatever the ending (finished, failed, stopped, killed), then
   for the rest of its process group (the telemetry recorder, loader workers) to go;
2. after an out-of-memory failure, waits up to OOM_RELAUNCH_WAIT_S for a relaunch (the OOM wizard,
   `--on-oom`): a relaunched trainer brings its own end runner, and this one leaves;
3. claims the attempt (a file made with O_EXCL under `on_end/`), so its export and command never
   run twice for one ending, whoever else starts a runner for it;
4. syncs the file systems, runs the steps asked to come first (`steps_before_on_end`: the
   export asked for with the run, `export.at_end`), then the command, with its output in
   backend.log and an `end_command` event before and after it in events.jsonl; a command still
   running after `cost.on_end_timeout_min` has its process group ended (`timed_out`);
5. with `cost.on_idle` set, watches the GPUs while no client is attached
   (cockpit.money.idle_watch) and runs on_idle once they have idled `cost.idle_minutes`.

A failing command is said (backend.log, the event, `cockpit runs`); nothing in the run
directory is touched by it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from cockpit import cloud
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError, TrainConfig
from cockpit.money import idle, idle_watch, instance_end, notify
from cockpit.paths import cockpit_command
from cockpit.run import journal, pids
from cockpit.run import process as supervisor
from cockpit.run.rundir import RunDir
from cockpit.run.status import run_status

CLAIMS_NAME = "on_end"  # one claim file per trainer attempt whose end ran the command
POLL_S = 0.5
GROUP_WAIT_S = 60.0  # the recorder ends within a second of the trainer; loader workers soon after
OOM_RELAUNCH_WAIT_S = 120.0


@dataclass(frozen=True)
class EndStep:
    """A command to run at the end before `cost.on_end` (argv, no shell), named in the log."""

    name: str
    argv: list[str]


EXPORT_STATES = ("finished", "stopped")  # a failed run's weights are not exported unasked


def export_argv(cfg: TrainConfig, run: RunDir) -> list[str]:
    """`cockpit export` for this run with the config's export section."""
    e = cfg.export
    argv = [sys.executable, "-m", "cockpit", "export", str(run.path), "--dtype", e.dtype]
    if e.merge:
        argv.append("--merge")
    if e.gguf:
        argv += ["--gguf", e.gguf]
    if e.to:
        argv += ["--to", e.to]
    return argv


def steps_before_on_end(cfg: TrainConfig, run: RunDir, status: str) -> list[EndStep]:
    """What must happen after the run and before its end command (which may switch the box off):
    the export asked for with the run (`export.at_end`, `cockpit train --export`), when the run
    finished or was stopped. Each step's output goes to backend.log; a failed step is said and
    the end command still runs (the billing stops either way)."""
    if not cfg.export.at_end:
        return []
    if status not in EXPORT_STATES:
        log(
            f"export.at_end: not exported, the run {status}; `{cockpit_command()} export {run.run_id}` "
            "can still try"
        )
        return []
    return [EndStep("export", export_argv(cfg, run))]


def log(text: str) -> None:
    print(f"[cockpit {time.strftime('%H:%M:%S')}] {text}", flush=True)


def append_event(run: RunDir, msg_type: str, **fields: Any) -> None:
    try:
        journal.append(run.events_path, msg_type, **fields)
    except OSError as exc:
        log(f"could not record {msg_type} in events.jsonl: {exc.strerror or exc}")


def claim_path(run: RunDir, trainer_pid: int, started: float | None) -> Path:
    return run.path / CLAIMS_NAME / f"attempt-{trainer_pid}-{int(started or 0)}.json"


def claim(path: Path) -> bool:
    """True for the one caller that made the claim file; False when the attempt is taken."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({"claimed_at": time.time(), "runner_pid": os.getpid()}, f)
    return True


def wait_trainer_gone(pid: int, record: dict[str, Any], tick: Callable[[], None] = lambda: None) -> None:
    """`record`: what trainer.json says of this pid (its start), {} when it names another trainer;
    `tick`: called at every poll (the notifications' watch)."""
    try:
        proc = psutil.Process(pid)
        if not pids.same_process(proc, record):
            return  # the pid is already someone else's
        while proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
            tick()
            time.sleep(POLL_S)
    except psutil.Error:
        pass  # gone


def wait_group_gone(
    pgid: int, timeout_s: float = GROUP_WAIT_S, tick: Callable[[], None] = lambda: None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and supervisor.group_members(pgid):
        tick()
        time.sleep(POLL_S)


def relaunched(run: RunDir, pid: int) -> bool:
    """A newer trainer took the run over (the OOM wizard, --on-oom, cockpit restart)."""
    record = run.read_trainer() or {}
    return record.get("pid") not in (None, pid) and supervisor.is_alive(run)


def run_end(run: RunDir, trainer_pid: int) -> int:
    record = run.read_trainer() or {}
    ours = record.get("pid") == trainer_pid
    started = record.get("create_time") if ours else None  # as recorded: the claim's name
    notifier = notify.Notifier.for_run(run.path, say=log)
    watch = notify.RunWatch(run.path, notifier, _best_eval(run)) if notifier else None
    tick = watch.poll if watch else (lambda: None)
    wait_trainer_gone(trainer_pid, record if ours else {}, tick)
    wait_group_gone(
        record.get("pgid", trainer_pid) if record.get("pid") == trainer_pid else trainer_pid, tick=tick
    )
    status = run_status(run)
    if status.state == "failed" and status.detail.startswith("oom"):
        deadline = time.monotonic() + OOM_RELAUNCH_WAIT_S
        log(f"the run failed out of memory: on_end waits up to {OOM_RELAUNCH_WAIT_S:.0f} s for a relaunch")
        while time.monotonic() < deadline and not relaunched(run, trainer_pid):
            tick()
            time.sleep(POLL_S)
    tick()
    if relaunched(run, trainer_pid):
        log("a new trainer took the run over: its end runs on_end, not this one's")
        return 0
    try:
        cfg = load_config(run.config_path)
    except ConfigError as exc:
        log(f"on_end not run: the run's config cannot be read: {exc}")
        return 1
    command = cfg.cost.on_end
    if not (command or cfg.export.at_end or cfg.cost.on_idle or notifier):
        return 0
    if not claim(claim_path(run, trainer_pid, started)):
        log(f"on_end already ran for this ending of the run (trainer pid {trainer_pid}): not again")
        return 0
    status = run_status(run)  # as the run ended, after any client's exit record
    os.sync()  # checkpoints and final/ were fsynced by the trainer; the rest (logs, events) now too
    steps = steps_before_on_end(cfg, run, status.state)
    if watch is not None:  # told before the export and on_end: on_end may switch the box off
        tell_ending(run, cfg, watch, steps)
    failed_steps = run_steps(run, steps)
    code = 1 if failed_steps else 0
    if command:
        limit_s = round(cfg.cost.on_end_timeout_min * 60, 3)
        if cloud.is_instance_action(command):  # the provider's stop or destroy
            code = instance_end.run_action(
                run, command.strip(), status.state, trainer_pid, limit_s, say=log, record=append_event
            )
        else:
            code = run_command(run, command, status.state, trainer_pid, limit_s)
    if cfg.cost.on_idle:
        settings = idle.IdleSettings(cfg.cost.idle_minutes, cfg.cost.on_idle)
        log(idle_watch.watch(run, settings, say=log, notifier=notifier).text)
    return code


def _best_eval(run: RunDir) -> bool:
    try:
        return load_config(run.config_path).notify.best_eval
    except ConfigError:
        return False


def tell_ending(run: RunDir, cfg: TrainConfig, watch: notify.RunWatch, steps: list[EndStep]) -> None:
    """The run's ending, with what comes next (the export, on_end and what still bills)."""
    then = [f"then: {step.name}" for step in steps]
    command = cfg.cost.on_end
    if cloud.is_instance_action(command):
        assert command is not None
        plan = cloud.plan(command.strip())
        then.append(plan.before_line("then") if plan.ok else f"then: {command}: cannot run here")
    elif command:
        then.append(f"then: {command}")
    notice = watch.notices.ending(journal.fold(run.events_path), then)
    if notice is not None:
        watch.notifier.send(notice.kind, notice.title, notice.body)
    watch.close()


def run_steps(run: RunDir, steps: list[EndStep]) -> list[str]:
    """Each step in turn, output on our stdout (backend.log); the names of those that failed, each
    also said in the log and as a `warning` event (the run view and `cockpit runs` show those)."""
    failed = []
    for step in steps:
        log(f"before on_end: {step.name}: {shlex.join(step.argv)}")
        began = time.time()
        try:
            code = subprocess.run(step.argv, stdin=subprocess.DEVNULL, cwd=run.path, check=False).returncode
            why = f"exit {code}"
        except OSError as exc:
            code, why = None, f"{exc.strerror or exc}"
        took = time.time() - began
        if code == 0:
            log(f"before on_end: {step.name} done in {took:.1f} s")
        else:
            failed.append(step.name)
            log(f"before on_end: {step.name} FAILED ({why}) after {took:.1f} s; on_end runs all the same")
            append_event(
                run,
                "warning",
                message=f"the {step.name} asked for with the run failed ({why}); see backend.log",
            )
        os.sync()
    return failed


def run_command(
    run: RunDir, command: str, run_status: str, trainer_pid: int, timeout_s: float = 300.0
) -> int:
    """The end command through the shell, in the run directory, output on our stdout (backend.log);
    past `timeout_s` (cost.on_end_timeout_min) its process group is ended and it is recorded as
    timed out."""
    log(f"on_end: the run {run_status}; running: {command} (at most {timeout_s / 60:g} min)")
    append_event(
        run, "end_command", state="started", command=command, run_status=run_status, timeout_s=timeout_s
    )
    env = dict(
        os.environ, COCKPIT_RUN_ID=run.run_id, COCKPIT_RUN_DIR=str(run.path), COCKPIT_RUN_STATUS=run_status
    )
    began = time.monotonic()
    timed_out = False
    try:
        shell = subprocess.Popen(  # a group of its own: what it starts is ended with it
            command, shell=True, stdin=subprocess.DEVNULL, cwd=run.path, env=env, start_new_session=True
        )
        code, timed_out = _wait_bounded(shell, timeout_s)
        error = None
    except OSError as exc:  # no shell, no such directory
        code, error = None, f"{exc.strerror or exc}"
    took = round(time.monotonic() - began, 2)
    ok = code == 0 and not timed_out
    if ok:
        log(f"on_end: done in {took} s (exit 0)")
    elif timed_out:
        log(
            f"on_end TIMED OUT after {took} s (cost.on_end_timeout_min {timeout_s / 60:g}): its process "
            f"group was ended: {command}; the run directory is intact"
        )
    else:
        why = f"exit {code}" if error is None else error
        log(f"on_end FAILED ({why}) after {took} s: {command}; the run directory is intact")
    append_event(
        run,
        "end_command",
        state="finished" if ok else "timed_out" if timed_out else "failed",
        command=command,
        run_status=run_status,
        returncode=code,
        error=error,
        duration_s=took,
        timeout_s=timeout_s,
        trainer_pid=trainer_pid,
    )
    return 0 if ok else 1


def _wait_bounded(
    shell: subprocess.Popen[bytes], timeout_s: float, term_s: float = 10.0
) -> tuple[int | None, bool]:
    """(its exit status, whether it ran out of time): past `timeout_s`, SIGTERM to its process group,
    then SIGKILL after `term_s`."""
    try:
        return shell.wait(timeout_s), False
    except subprocess.TimeoutExpired:
        pass
    for sig, wait_s in ((signal.SIGTERM, term_s), (signal.SIGKILL, 5.0)):  # SIGKILL: any stray member too
        try:
            os.killpg(shell.pid, sig)
        except ProcessLookupError:
            break
        try:
            shell.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass
    return shell.poll(), True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    os.umask(0o077)
    return run_end(RunDir(Path(argv[0]).resolve()), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
