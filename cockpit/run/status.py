"""How a run stands, folded from its events and the process table, and how a trainer that
ended without a final event is written down."""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from typing import Any

from cockpit.paths import cockpit_command
from cockpit.protocol.wire import Fault, LineDecoder, encode
from cockpit.run import journal, process
from cockpit.run.oom_messages import silent_oom
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState


@dataclass
class RunStatus:
    state: str  # running | finished | stopped | failed
    detail: str
    step: int
    total_steps: int | None
    last_event_ts: float | None


def run_status(run: RunDir) -> RunStatus:
    """Status from the event history and the process table; right after a crash or reboot too."""
    state = journal.fold(run.events_path)
    alive = process.is_alive(run)
    if not alive:
        state.settle_from_remains(run.final_dir.is_dir())
    if alive:
        label = "paused" if state.status == "paused" else "running"
        return RunStatus(label, state.phase, state.step, state.total_steps, state.last_ts)
    beyond = _steps_beyond_events(run, state)
    if state.status in ("finished", "stopped"):
        return RunStatus(
            state.status,
            (state.outcome or {}).get("message", "") + beyond,
            state.step,
            state.total_steps,
            state.last_ts,
        )
    if state.status == "failed" and state.error:
        detail = f"{state.error.get('kind')}: {state.error.get('message', '')}"[:120]
        return RunStatus("failed", detail, state.step, state.total_steps, state.last_ts)
    if state.outcome:
        return RunStatus(
            "failed",
            state.outcome.get("reason", "trainer exited"),
            state.step,
            state.total_steps,
            state.last_ts,
        )
    record = run.read_trainer() or {}
    rebooted = record.get("boot_id") and record["boot_id"] != process.boot_id()
    reason = "machine rebooted" if rebooted else "killed"
    return RunStatus(
        "failed",
        f"trainer gone without a final event ({reason}); continue from the last checkpoint with: "
        f"{cockpit_command()} restart {run.run_id}",
        state.step,
        state.total_steps,
        state.last_ts,
    )


def _steps_beyond_events(run: RunDir, state: RunState) -> str:
    """An ended run whose complete checkpoints went further than its events say (events.jsonl stopped
    taking events and nothing else was recorded): the step is the checkpoints', and the detail says
    why the two differ; "" when they agree."""
    checkpoints = run.complete_checkpoints()
    if not checkpoints:
        return ""
    newest = checkpoints[-1]
    step = int(newest.name.rsplit("-", 1)[-1])
    if step <= state.step:
        return ""
    said = state.step
    state.step = step
    return f" (events.jsonl ends at step {said}; {newest.name} shows the run reached step {step})"


def record_exit(run: RunDir, returncode: int | None) -> list[dict[str, Any] | Fault]:
    """A client saw the trainer end without done/error: write down how (None: not its child, unknown).
    Returns the message when it could not be written (a full disk): the caller shows it all the same."""
    sig = -returncode if returncode is not None and returncode < 0 else None
    if returncode is None:
        reason = "vanished without a final event (killed, crashed, or the machine rebooted)"
    elif sig:
        reason = f"killed by {signal.Signals(sig).name}"
    else:
        reason = f"exited with code {returncode} without a final event"
    tail = ""
    try:
        tail = run.log_path.read_text(errors="replace")[-2000:]
    except OSError:
        pass
    oom = _oom_without_event(run, returncode, sig, tail)
    if oom is not None:
        kind, fields = "error", {**oom, "returncode": returncode, "signal": sig, "log_tail": tail}
    else:
        kind = "exit"
        fields = {"returncode": returncode, "signal": sig, "reason": f"trainer {reason}", "log_tail": tail}
    try:
        journal.append(run.events_path, kind, **fields)
        return []
    except OSError as exc:  # a full disk (or a run directory gone): the end is shown, not recorded
        print(
            f"cockpit: could not record how the trainer ended in {run.events_path}: {exc.strerror or exc}; "
            f"free space on that disk (df -h) so `{cockpit_command()} runs` can tell later",
            file=sys.stderr,
        )
        return LineDecoder().feed(encode(kind, **fields))


def _oom_without_event(
    run: RunDir, returncode: int | None, sig: int | None, tail: str
) -> dict[str, Any] | None:
    """The error event for an out-of-memory death that left none (oom.messages.silent_oom), or None."""
    found = silent_oom(returncode, sig, tail, (run.read_trainer() or {}).get("memory_cgroup"))
    if found is None:
        return None
    state = journal.fold(run.events_path)
    return {
        "kind": "oom",
        "message": found.message,
        "hint": found.hint,
        "phase": state.phase,
        "step": state.step or None,
        "oom": found.info,
        "source": "client",
        "checkpoints": [p.name for p in run.complete_checkpoints()],
    }
