"""`cost.on_end` / `cost.on_idle` set to `stop-instance` or `destroy-instance`: the provider's own way
to stop paying (cockpit.cloud), said before the run starts and carried out by the end runner.

Before the run (`cockpit train`, `--check`): what will happen at the end and what will still bill,
or why it cannot happen here (no provider detected, its CLI or key missing): then the run is
refused, since the end it promises could not come.

At the end: the `end_command` event that starts it already says what is being done and what still
bills (`detail`): the box may go down before the event that ends it is written.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from cockpit import cloud
from cockpit.config.schema import TrainConfig
from cockpit.run.rundir import RunDir

Say = Callable[[str], None]
Record = Callable[..., None]  # (run, type, **fields): the end runner's append_event


def shell_for(command: str) -> str:
    """The shell command that runs `command`: a stop/destroy action becomes `python -m cockpit.cloud.command
    ACTION` (what the idle alarm starts through the shell); anything else is itself."""
    if cloud.is_instance_action(command):
        return shlex.join([sys.executable, "-m", "cockpit.cloud.command", command.strip()])
    return command


def planned(
    cfg: TrainConfig, environ: Mapping[str, str] | None = None, which: Any = None
) -> list[tuple[str, cloud.InstancePlan]]:
    """(when, plan) for each of cost.on_end and cost.on_idle that is a stop/destroy action."""
    out = []
    kwargs: dict[str, Any] = {"environ": environ}
    if which is not None:
        kwargs["which"] = which
    for key, when in (
        ("on_end", "when the run ends (cost.on_end)"),
        ("on_idle", f"when the GPU idles {cfg.cost.idle_minutes:g} min with no run training (cost.on_idle)"),
    ):
        command = getattr(cfg.cost, key)
        if cloud.is_instance_action(command):
            out.append((when, cloud.plan(command.strip(), **kwargs)))
    return out


def before_lines(
    cfg: TrainConfig, environ: Mapping[str, str] | None = None, which: Any = None
) -> tuple[list[str], list[str]]:
    """(lines to say before the run, problems that refuse it): the provider, what each action does
    and what still bills."""
    plans = planned(cfg, environ, which)
    if not plans:
        return [], []
    lines, problems = [], []
    provider = plans[0][1].provider
    if provider is not None:
        lines.append(f"provider: {provider.describe()}")
    for when, plan in plans:
        if plan.ok:
            lines.append(plan.before_line(when))
        else:
            key = "cost.on_end" if "on_end" in when else "cost.on_idle"
            problems.append(f"{key}: {plan.action} cannot run here: {'; '.join(plan.problems)}")
    return lines, problems


def run_action(
    run: RunDir,
    action: str,
    run_status: str,
    trainer_pid: int,
    timeout_s: float,
    *,
    say: Say,
    record: Record,
    environ: Mapping[str, str] | None = None,
) -> int:
    """The end runner's stop/destroy: planned here, from the end runner's own environment (the
    trainer's), said and recorded before it is done, then done; 0 done, 1 not."""
    plan = cloud.plan(action, environ)
    detail = plan.before_line("at the end") if plan.ok else f"cannot run here: {'; '.join(plan.problems)}"
    say(f"on_end: the run {run_status}; {action}: {detail}")
    record(
        run,
        "end_command",
        state="started",
        command=action,
        run_status=run_status,
        timeout_s=timeout_s,
        detail=detail,
    )
    began = time.monotonic()
    outcome = cloud.carry_out(plan, environ, timeout_s=timeout_s)
    took = round(time.monotonic() - began, 2)
    if outcome.answer:
        say(f"on_end: {plan.provider.name if plan.provider else 'the provider'} answered: {outcome.answer}")
    say(f"on_end: {outcome.text} ({took} s)")
    record(
        run,
        "end_command",
        state="finished" if outcome.ok else "failed",
        command=action,
        run_status=run_status,
        returncode=0 if outcome.ok else 1,
        error=None if outcome.ok else outcome.text,
        duration_s=took,
        timeout_s=timeout_s,
        trainer_pid=trainer_pid,
        detail=outcome.text,
    )
    return 0 if outcome.ok else 1
