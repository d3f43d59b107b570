"""The idle watch with no client attached: the end runner's last duty when `cost.on_idle` is set.

A client watching a run (the run view, `--no-ui`) rings the idle alarm itself (cockpit.money.idle).
Once the SSH link has dropped there is none, and the box bills on. So the end runner, which outlives
every client, then reads the GPUs' utilisation through NVML (cockpit.telemetry.nvml) every POLL_S:
every GPU under IDLE_UTIL_PCT for `cost.idle_minutes` in a row, with no cockpit client attached to
any run and no run training, runs `cost.on_idle` once (output and the reasons in backend.log, an
`idle_alarm` warning in events.jsonl) and the watch ends. It leaves without acting when a run
starts training (that run brings its own end runner), and stays quiet while a client is attached
(that client's alarm speaks for the box; the spell restarts when it leaves).

Clients say they are attached with a presence file, `clients/<pid>.json` in the run directory they
follow, made by `attached(run)` and removed when they leave; one whose process is gone (killed,
SIGHUP) does not count.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cockpit.money import idle
from cockpit.money.notify import Notifier
from cockpit.run import process as supervisor
from cockpit.run import rundir
from cockpit.run.clients import attached_clients
from cockpit.telemetry.nvml import NvmlSource, PynvmlSource

IDLE_UTIL_PCT = 5  # as the doctor's idle_billed rule
POLL_S = 15.0
NVML_SOURCE: Callable[[], NvmlSource] = PynvmlSource  # tests put a FakeNvml here


def training_runs(runs: list[rundir.RunDir], leaving_out: rundir.RunDir) -> list[str]:
    return [r.run_id for r in runs if r.path != leaving_out.path and supervisor.is_alive(r)]


# ---------------------------------------------------------------- the GPUs


def gpu_utils(source: NvmlSource) -> list[int]:
    """Each GPU's utilisation (%) now; the source's NVMLError when it cannot say."""
    return [source.read(source.handle(i), "utilization").gpu for i in range(source.device_count())]


# ---------------------------------------------------------------- the watch


@dataclass
class WatchEnd:
    reason: str  # on_idle_ran | on_idle_failed | run_training | no_gpu
    text: str


def watch(
    run: rundir.RunDir,
    settings: idle.IdleSettings,
    *,
    runs_root: Path | None = None,
    source_factory: Callable[[], NvmlSource] | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] | None = None,
    poll_s: float | None = None,
    say: Callable[[str], None] = print,
    starter: idle.Starter = idle.start_command,
    notifier: Notifier | None = None,
) -> WatchEnd:
    """Watch until on_idle ran (once), a run trains, or NVML cannot be read. `clock` and `sleep`
    are the test's way past the minutes."""
    poll_s = POLL_S if poll_s is None else poll_s
    clock, sleep = clock or time.monotonic, sleep or time.sleep
    window_s = settings.idle_minutes * 60
    source = (source_factory or NVML_SOURCE)()
    try:
        source.init()
    except Exception as exc:  # NVMLError of any code; no pynvml import here to name it
        return WatchEnd("no_gpu", f"idle watch: NVML cannot be read ({exc}); not watching")
    say(
        f"idle watch: every GPU under {IDLE_UTIL_PCT}% for {settings.idle_minutes:g} min with no client "
        f"and no run training runs cost.on_idle: {settings.on_idle}"
    )
    idle_since: float | None = None
    quiet_reason = None
    try:
        while True:
            runs = rundir.all_runs(runs_root)
            if all(r.path.resolve() != run.path.resolve() for r in runs):
                runs.append(run)  # a run outside the runs folder, not registered there
            training = training_runs(runs, run)
            if training:
                return WatchEnd("run_training", f"idle watch: run {training[0]} is training; the watch ends")
            clients = attached_clients(runs)
            try:
                utils = gpu_utils(source)
            except Exception as exc:
                return WatchEnd("no_gpu", f"idle watch: NVML stopped answering ({exc}); the watch ends")
            if not utils:
                return WatchEnd("no_gpu", "idle watch: NVML lists no GPU; not watching")
            busy = [u for u in utils if u >= IDLE_UTIL_PCT]
            reason = f"a client is attached: {clients[0]}" if clients else ("busy" if busy else None)
            if reason is not None:
                if reason != quiet_reason and clients:
                    say(f"idle watch: waiting; {reason} (its own idle alarm speaks)")
                quiet_reason, idle_since = reason, None
            else:
                quiet_reason = None
                now = clock()
                if idle_since is None:
                    idle_since = now
                elif now - idle_since >= window_s:
                    return act(run, settings, utils, now - idle_since, say, starter, notifier)
            sleep(poll_s)
    finally:
        with contextlib.suppress(Exception):
            source.shutdown()


def act(
    run: rundir.RunDir,
    settings: idle.IdleSettings,
    utils: list[int],
    idle_s: float,
    say: Callable[[str], None],
    starter: idle.Starter,
    notifier: Notifier | None = None,
) -> WatchEnd:
    shown = ", ".join(f"GPU{i} {u}%" for i, u in enumerate(utils))
    what = f"every GPU idle for {idle_s / 60:.1f} min ({shown}) with no run training and no client attached"
    say(f"IDLE ALARM (no client): {what}; running cost.on_idle: {settings.on_idle}")
    assert settings.on_idle is not None  # the end runner watches only with cost.on_idle set
    if notifier is not None:  # before on_idle, which may switch the box off
        notifier.send("idle", "GPU idle, still billed", f"{what}; running cost.on_idle: {settings.on_idle}")
    started = starter(settings.on_idle, run.log_path)
    message = f"idle alarm with no client attached: {what}; " + (
        f"cost.on_idle could not start ({started}): {settings.on_idle}"
        if isinstance(started, str)
        else f"ran cost.on_idle (pid {started.pid}): {settings.on_idle}"
    )
    from cockpit.run import journal

    with contextlib.suppress(OSError):
        journal.append(run.events_path, "warning", message=message, hint=None)
    if not isinstance(started, str):
        with contextlib.suppress(Exception):
            started.wait()
    return WatchEnd("on_idle_failed" if isinstance(started, str) else "on_idle_ran", message)
