"""What a run's end prints: how it ended, its figures, where its adapter is and what to do next.

Pure: a run's folded `RunState` and what its directory holds in, a `RunSummary` and its lines
out. The headless mode prints the lines when the run ends; the run view shows them in its
summary panel; `cockpit runs` takes its columns from the same figures.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit import fmt
from cockpit.paths import cockpit_command
from cockpit.protocol.wire import number
from cockpit.run.state import RunState
from cockpit.sync import text as sync_text

if TYPE_CHECKING:
    from cockpit.run.rundir import RunDir


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str  # finished | stopped | failed (or running, for a run not ended yet)
    reason: str | None  # stopped: request | budget; finished: early_stop
    step: int
    total_steps: int | None
    train_loss: float | None  # the last logged training loss
    mean_train_loss: float | None  # the trainer's mean over the run (its `done` event)
    eval_loss: float | None  # the last evaluation's loss; None without evaluation
    billed_s: float
    cost_usd: float | None
    price_per_hour: float | None
    max_usd: float | None
    adapter: str | None  # the folder with the trained weights: final/, else the newest checkpoint
    adapter_is_final: bool
    adapter_was_saved: bool  # the trainer said it wrote final/ (its `done` event)
    error: str | None  # failed: kind and message
    next_commands: list[str] = field(default_factory=list)
    on_end: str | None = None  # the end command, as configured
    on_end_state: str | None = None  # started | finished | failed (its event), None before
    sync: str | None = None  # output.sync: what is on the target (cockpit.sync.text.runs_line)
    step_change: str | None = None  # the optimizer step's size where the plan changed it (batch_change)
    early_stop: str | None = None  # eval.early_stop_patience: where it stopped, what was not spent
    on_end_detail: str | None = None  # stop-instance / destroy-instance: what was done, what still bills

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def last_eval_loss(state: RunState) -> float | None:
    """The newest evaluation loss (`eval` events); None for a run without an eval split."""
    return state.eval_loss


def summarize(
    state: RunState, run_path: Path, checkpoints: list[Path], on_end: str | None = None
) -> RunSummary:
    """`checkpoints`: the run's complete checkpoints, oldest first (RunDir.complete_checkpoints)."""
    outcome = state.outcome or {}
    final = run_path / "final"
    if state.status == "finished" and final.is_dir():
        adapter, is_final = str(final), True
    elif checkpoints:
        adapter, is_final = str(checkpoints[-1]), False
    else:
        adapter, is_final = None, False
    error = None
    if state.status == "failed":
        if state.error:
            error = f"{state.error.get('kind')}: {state.error.get('message', '')}"
        else:
            error = str(outcome.get("reason") or "the trainer ended without a final event")
    reason = outcome.get("reason") if state.status == "stopped" else None
    early = outcome.get("message") if outcome.get("reason") == "early_stop" else None
    reason = "early_stop" if early else reason
    ended_command = state.end_command or {}
    return RunSummary(
        run_id=run_path.name,
        status=state.status,
        reason=reason if isinstance(reason, str) else None,
        step=state.step,
        total_steps=state.total_steps,
        train_loss=state.loss,
        mean_train_loss=number(outcome.get("train_loss")),
        eval_loss=last_eval_loss(state),
        billed_s=state.billed_s(),
        cost_usd=state.cost_so_far(),
        price_per_hour=state.price_per_hour,
        max_usd=state.max_usd,
        adapter=adapter,
        adapter_is_final=is_final,
        adapter_was_saved=bool(outcome.get("output")),
        error=error,
        next_commands=(
            next_commands(run_path.name, state, adapter, is_final, checkpoints, reason)
            if run_path.is_dir()
            else gone_commands(state.sync)
        ),
        on_end=on_end,
        on_end_state=ended_command.get("state"),
        sync=sync_text.runs_line(state.sync),
        step_change=batch_change(state),
        early_stop=early if isinstance(early, str) else None,
        on_end_detail=ended_command.get("detail"),
    )


def batch_change(state: RunState) -> str | None:
    """What the plan did to the optimizer step's size where it did not keep it (speed.keep_effective_batch
    false: the `speed_plan` event's `effective_batch`); None where it was kept or no plan said."""
    step = state.speed_plan.get("effective_batch")
    if not isinstance(step, dict) or step.get("kept") is not False:
        return None
    unit = step.get("unit") or "rows"
    return (
        f"{step.get('planned')} {unit} an optimizer step, not the {step.get('target')} your config makes "
        "(speed.keep_effective_batch: false)"
    )


def next_commands(
    run_id: str,
    state: RunState,
    adapter: str | None,
    is_final: bool,
    checkpoints: list[Path],
    reason: str | None,
) -> list[str]:
    """The commands that go on from here, naming the run as `cockpit runs` does (its folder)."""
    out = []
    me = cockpit_command()
    if state.status in ("stopped", "failed") and checkpoints:
        budget = " --max-usd N" if reason == "budget" else ""
        out.append(f"{me} restart {run_id}{budget}")
    if adapter is not None:
        which = "" if is_final else f" --checkpoint {_step_of(adapter)}"
        out += [f"{me} chat {run_id}{which}", f"{me} export {run_id}{which}"]
    elif state.status == "failed":
        out.append(f"{me} restart {run_id}")
    return out


def gone_commands(sync: dict[str, Any]) -> list[str]:
    """What goes on from a run whose directory is gone: restart, chat and export need its checkpoints,
    which went with it; its copy off the machine (output.sync), if it has one, or a new run."""
    if sync.get("step") is not None and sync.get("target"):
        target = shlex.quote(str(sync["target"]))
        return [f"{cockpit_command()} restart --from {target} (its copy, at step {sync['step']})"]
    return ["cockpit train CONFIG (a new run: this one's directory and checkpoints are gone)"]


def _step_of(checkpoint: str) -> str:
    return checkpoint.rsplit("-", 1)[-1]


def summary_lines(s: RunSummary) -> list[str]:
    """The summary: a few lines of at most ~80 columns each (a path may run longer), one next
    command a line."""
    how = {
        "budget": "stopped at the budget",
        "request": "stopped by request",
        "early_stop": "finished early (eval.early_stop_patience)",
    }.get(s.reason or "", s.status)
    if s.reason == "budget" and s.max_usd is not None:
        how += f" ({fmt.money(s.max_usd)})"
    first = f"{how}: step {s.step}/{s.total_steps or '?'} in {fmt.duration(s.billed_s)}"
    if s.cost_usd is not None:
        first += f", {fmt.money(s.cost_usd)} at {fmt.money(s.price_per_hour)}/h"
        if s.max_usd is not None and s.reason != "budget":
            first += f" (budget {fmt.money(s.max_usd)})"
    lines = [first]
    loss = f"train loss {fmt.loss(s.train_loss)}"
    if s.mean_train_loss is not None:
        loss += f" (last logged; run mean {fmt.loss(s.mean_train_loss)})"
    loss += f", eval loss {fmt.loss(s.eval_loss)}" if s.eval_loss is not None else ", no eval"
    lines.append(loss)
    if s.step_change:
        lines.append(f"step size: {s.step_change}")
    if s.early_stop:
        lines.append(s.early_stop)
    if s.error:
        lines.append(f"error: {s.error[:200]}")
    if s.adapter is None and s.status == "finished" and s.adapter_was_saved:
        lines.append("adapter: its final/ folder is no longer on disk (deleted since)")
    elif s.adapter is None:
        lines.append("adapter: none saved (no complete checkpoint)")
    elif s.adapter_is_final:
        lines.append(f"adapter: {s.adapter}")
    else:
        lines.append(f"adapter (newest checkpoint): {s.adapter}")
    for i, command in enumerate(s.next_commands):
        lines.append(("next: " if i == 0 else "      ") + command)
    if s.on_end:
        state = {
            None: "runs once the trainer's processes are gone; output in backend.log",
            "started": "running; output in backend.log",
            "finished": "done (exit 0)",
            "failed": "FAILED, see backend.log; the run directory is intact",
            "timed_out": "TIMED OUT (cost.on_end_timeout_min) and ended; see backend.log",
        }.get(s.on_end_state, s.on_end_state)
        lines.append(f"on_end: {s.on_end}: {s.on_end_detail or state}")
    if s.sync:
        lines.append(s.sync)
    return lines


def configured_on_end(run: RunDir) -> str | None:
    """The run's cost.on_end, or None (none set, or a config that cannot be read)."""
    from cockpit.config.load import load_config
    from cockpit.config.schema import ConfigError

    try:
        return load_config(run.config_path).cost.on_end
    except (ConfigError, OSError):
        return None


def run_summary(run: RunDir, state: RunState) -> RunSummary:
    """The summary of `run` (a cockpit.run.rundir.RunDir) as `state` tells it."""
    return summarize(state, run.path, run.complete_checkpoints(), configured_on_end(run))


def run_summary_lines(run: RunDir, state: RunState, next_commands: list[str] | None = None) -> list[str]:
    """The summary's lines; `next_commands` in place of the run's own where its source knows better
    (a rehearsal: the recorded run is not on this machine to restart)."""
    s = run_summary(run, state)
    return summary_lines(s if next_commands is None else replace(s, next_commands=next_commands))
