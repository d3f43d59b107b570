"""Starting, finding and stopping the trainer process (no torch here).

The trainer runs in its own session and process group with stdout on the run's
events.jsonl, so it outlives its client: a closed TUI, a SIGKILLed headless client
or a dropped SSH link leave it training. Any client follows events.jsonl and sends
commands through the control FIFO.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from cockpit.run import control, journal, pids
from cockpit.run import ranks as distributed
from cockpit.run.oom_messages import cgroup_memory
from cockpit.run.rundir import EVENTS_NAME, RunDir

STOP_GRACE_S = 60.0  # a checkpoint of a 7B QLoRA adapter takes seconds; of a full model, longer
TERM_GRACE_S = 15.0


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def project_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a helper child started in a session of its own (its whole group), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def launch(run: RunDir, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `python -m train_backend train RUN` detached (or, for several GPUs, the launcher of one
    such process per GPU: cockpit.run.ranks); record who it is in trainer.json."""
    command, launch_env = _trainer_command(run)
    env = dict(os.environ)
    env.update(launch_env)
    env.update(extra_env or {})
    env["PYTHONUNBUFFERED"] = "1"
    # the trainer imports this very tree, whether installed or run from a checkout
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root(), env.get("PYTHONPATH", "")) if p)
    events = journal.open_for_trainer(run.events_path)
    log = os.open(run.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=events,
            stderr=log,
            env=env,
            cwd=str(run.path),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(events)
        os.close(log)
    record = {
        "pid": proc.pid,
        "pgid": proc.pid,
        **pids.identity(proc.pid),  # create_time, start_ticks: cockpit.run.pids
        "boot_id": boot_id(),
        "started": time.time(),
    }
    # the host's OOM killer leaves no message: its count in the trainer's cgroup, now, tells later
    memory = cgroup_memory(Path(f"/proc/{proc.pid}/cgroup"))
    if memory is not None:
        record["memory_cgroup"] = {
            "path": memory.path,
            "version": memory.version,
            "oom_kills": memory.oom_kills,
        }
    tmp = run.trainer_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.chmod(tmp, 0o600)
    os.replace(tmp, run.trainer_path)
    _start_end_runner(run, proc.pid)
    return proc


def _start_end_runner(run: RunDir, trainer_pid: int) -> None:
    """cost.on_end: the process that runs it once this trainer's run has ended (cockpit.money.end_runner)."""
    from cockpit.config.load import load_config
    from cockpit.config.schema import ConfigError
    from cockpit.run import end_launch

    try:
        cfg = load_config(run.config_path)
    except ConfigError:
        return  # the trainer reports it; a run that cannot start has no end command to run
    if end_launch.needs_runner(cfg) and end_launch.start(run, trainer_pid) is None:
        print(
            f"cockpit: could not start the process that runs cost.on_end for {run.run_id}; it will not "
            "run by itself. Run it yourself when the run ends.",
            file=sys.stderr,
        )


def _trainer_command(run: RunDir) -> tuple[list[str], dict[str, str]]:
    from cockpit.config.load import load_config
    from cockpit.config.schema import ConfigError

    try:
        cfg = load_config(run.config_path)
    except ConfigError:  # the trainer reports it as the run's error
        return [sys.executable, "-m", "train_backend", "train", str(run.path)], {}
    return distributed.trainer_command(cfg, run.path), distributed.launch_env(cfg)


def trainer_process(run: RunDir) -> psutil.Process | None:
    """The run's live trainer, or None (never started, exited, or gone with a reboot)."""
    record = run.read_trainer()
    if not record:
        return None
    if record.get("boot_id") and record["boot_id"] != boot_id():
        return None
    try:
        proc = psutil.Process(record["pid"])
        if not pids.same_process(proc, record):
            return None  # the pid was reused
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def is_alive(run: RunDir) -> bool:
    return trainer_process(run) is not None


def stop(
    run: RunDir,
    grace_s: float = STOP_GRACE_S,
    term_s: float = TERM_GRACE_S,
    say: Callable[[str], object] = lambda _t: None,
) -> str:
    """Stop command, then SIGTERM to the process group, then SIGKILL. Returns how it ended."""
    proc = trainer_process(run)
    if proc is None:
        return "not running"
    # trainer.json may be gone or unreadable since trainer_process read it: the process is its group's leader
    pgid = (run.read_trainer() or {}).get("pgid", proc.pid)
    try:
        control.send_command(run, "stop")
        say(f"asked the trainer to stop (up to {grace_s:.0f} s for its checkpoint)")
        if _wait_gone(run, grace_s):
            return "stopped"
        say("the trainer did not stop in time: SIGTERM to its process group")
    except control.NotTheFifo as exc:
        say(f"{exc}; SIGTERM to its process group instead (the trainer saves a checkpoint on it)")
    except control.NotRunning:
        say("the trainer did not stop in time: SIGTERM to its process group")
    _signal_group(pgid, signal.SIGTERM)
    if _wait_gone(run, term_s):
        _signal_group(pgid, signal.SIGKILL)  # stray workers of the group
        distributed.kill_ranks(run.path)  # ranks of several GPUs live in sessions of their own
        return "terminated"
    say("still there: SIGKILL")
    _signal_group(pgid, signal.SIGKILL)
    distributed.kill_ranks(run.path)
    _wait_gone(run, 5.0)
    return "killed"


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(run: RunDir, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(run):
            return True
        time.sleep(0.1)
    return not is_alive(run)


def group_members(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.info["pid"])
        except (ProcessLookupError, psutil.Error, PermissionError):
            continue
    return members


# ------------------------------------------------------------------ trainers whose run directory is gone


@dataclass(frozen=True)
class Orphan:
    """A trainer still running whose run directory was deleted: found by its command line (the run's
    path is its argument), since trainer.json went with the directory."""

    run_id: str
    path: str
    pid: int


def trainer_run_path(cmdline: list[str]) -> str | None:
    """The run directory a trainer's command line names (`-m train_backend train RUN`, or the
    launcher's `-m train_backend.launcher RUN ...`), else None."""
    for i, word in enumerate(cmdline[:-1]):
        if word != "-m":
            continue
        rest = cmdline[i + 1 :]
        if rest[0] == "train_backend" and len(rest) >= 3 and rest[1] == "train":
            return rest[2]
        if rest[0] == distributed.LAUNCHER_MODULE and len(rest) >= 2:
            return rest[1]
    return None


def orphaned_trainers(runs_root: Path | None = None) -> list[Orphan]:
    """This user's trainers (session leaders: ranks of several GPUs are the launcher's) whose run
    directory no longer holds its events file; with `runs_root`, only those of that root's runs (in
    it, or linked from it: a run with its own output.dir), not another COCKPIT_HOME's."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "uids"]):
        try:
            uids = proc.info["uids"]
            if uids is None or uids.real != os.getuid() or os.getsid(proc.info["pid"]) != proc.info["pid"]:
                continue
            path = trainer_run_path(proc.info["cmdline"] or [])
            if path is None or (Path(path) / EVENTS_NAME).exists():
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if runs_root is not None and not _of_root(Path(path), runs_root):
                continue
            found.append(Orphan(Path(path).name, path, proc.info["pid"]))
        except (psutil.Error, OSError):
            continue
    return found


def _of_root(path: Path, runs_root: Path) -> bool:
    """Whether a (deleted) run directory was one of `runs_root`'s: inside it, or the target of the link
    `_register` left there (dangling now)."""
    if path.parent == runs_root or path.parent == runs_root.resolve():
        return True
    link = runs_root / path.name
    return link.is_symlink() and Path(os.readlink(link)) in (path, path.resolve())


def stop_orphan(
    orphan: Orphan, term_s: float = TERM_GRACE_S, say: Callable[[str], object] = lambda _t: None
) -> str:
    """SIGTERM to its process group (its control FIFO went with the directory), then SIGKILL."""
    say(f"the run directory {orphan.path} is gone: SIGTERM to the trainer's process group")
    _signal_group(orphan.pid, signal.SIGTERM)
    if _wait_pid_gone(orphan.pid, term_s):
        _signal_group(orphan.pid, signal.SIGKILL)
        return "terminated"
    say("still there: SIGKILL")
    _signal_group(orphan.pid, signal.SIGKILL)
    _wait_pid_gone(orphan.pid, 5.0)
    return "killed"


def _wait_pid_gone(pid: int, timeout_s: float) -> bool:
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout_s)
        return True
    except psutil.TimeoutExpired:
        return False
    except psutil.Error:
        return True
