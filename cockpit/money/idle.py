"""The idle alarm: a GPU idle while billed for `cost.idle_minutes` with no run training.

The doctor's `idle_billed` rule (cockpit.doctor.rules) judges the telemetry: every GPU below 5%
util for the window (`cost.idle_minutes`, 95% of it, so a stray sample is forgiven) while the run
is paused, ended or absent. `IdleAlarm` acts on that finding once per idle spell: it returns the
line to show (the view and the headless mode print it, with the terminal bell) and starts
`cost.on_idle`, whose output goes to the run's backend.log. The alarm is re-armed once the
finding goes (the GPU worked again).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cockpit.doctor.engine import Doctor
from cockpit.doctor.window import Finding
from cockpit.money.instance_end import shell_for
from cockpit.money.notify import Notifier

IDLE_RULE = "idle_billed"
BELL = "\a"

# (command, log file) -> the started process, or the reason it could not start
Starter = Callable[[str, Path | None], "subprocess.Popen[bytes] | str"]


@dataclass(frozen=True)
class IdleSettings:
    idle_minutes: float = 5.0
    on_idle: str | None = None

    def doctor(self) -> Doctor:
        return Doctor(idle_window_s=self.idle_minutes * 60)


def settings_of(config_path: Path) -> IdleSettings:
    """The run's cost.idle_minutes and cost.on_idle; the defaults when its config cannot be read."""
    from cockpit.config.load import load_config
    from cockpit.config.schema import ConfigError

    try:
        cfg = load_config(config_path)
    except (ConfigError, OSError):
        return IdleSettings()
    return IdleSettings(cfg.cost.idle_minutes, cfg.cost.on_idle)


def start_command(command: str, log_path: Path | None) -> subprocess.Popen[bytes] | str:
    """`command` through the shell, detached, its output appended to `log_path` (or discarded)."""
    try:
        log = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115
    except OSError as exc:
        return f"cannot open {log_path}: {exc.strerror or exc}"
    try:
        if log is not None:
            stamp = time.strftime("%H:%M:%S")
            log.write(f"[cockpit {stamp}] on_idle: running: {command}\n".encode())
            log.flush()
        return subprocess.Popen(
            shell_for(command),  # stop-instance / destroy-instance: the provider's own (cockpit.cloud)
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if log is None else log,
            stderr=subprocess.STDOUT,
            cwd=str(log_path.parent) if log_path is not None else None,
            start_new_session=True,
        )
    except OSError as exc:
        return f"{exc.strerror or exc}"
    finally:
        if log is not None:
            log.close()


class IdleAlarm:
    """Once per idle spell: the alarm's line and cost.on_idle. Fed the doctor's findings."""

    def __init__(
        self, settings: IdleSettings, log_path: Path | None = None, starter: Starter = start_command
    ) -> None:
        self.settings = settings
        self.log_path = log_path
        self.starter = starter
        self.sounding = False  # the idle finding holds and was acted on
        self.spells = 0  # how many times the alarm went off
        self.started: list[subprocess.Popen[bytes]] = []  # the on_idle processes started
        # notify.urls: the run's own (its notify.json beside the log), told from a thread
        self.notifier = (
            Notifier.for_run(log_path.parent, say=lambda _: None) if log_path is not None else None
        )

    def update(self, findings: Sequence[Finding]) -> str | None:
        """The alarm's line when the idle finding has just appeared, else None."""
        finding = next((f for f in findings if getattr(f, "rule", None) == IDLE_RULE), None)
        if finding is None:
            self.sounding = False
            return None
        if self.sounding:
            return None
        self.sounding = True
        self.spells += 1
        text = f"IDLE ALARM: {finding.title}: {finding.evidence}"
        if self.notifier is not None:
            self.notifier.send_in_background("idle", "GPU idle, still billed", text)
        command = self.settings.on_idle
        if not command:
            return f"{text}. Set cost.on_idle to act on it (e.g. 'sudo shutdown -h now')"
        started = self.starter(command, self.log_path)
        if isinstance(started, str):
            return f"{text}. cost.on_idle could not start ({started}): {command}"
        self.started.append(started)
        where = "its output in backend.log" if self.log_path is not None else "its output discarded"
        return f"{text}. Ran cost.on_idle (pid {started.pid}, {where}): {command}"

    def wait(self, timeout_s: float = 5.0) -> None:
        """Reap the commands started (tests; a client leaving waits for none)."""
        for proc in self.started:
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass


def ring(out: IO[str]) -> None:
    """The terminal bell, on a terminal only (a log file gets no control character)."""
    if getattr(out, "isatty", lambda: False)():
        out.write(BELL)
        out.flush()
