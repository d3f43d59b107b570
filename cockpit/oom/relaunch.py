"""Changing a run's config after an OOM and starting it again: the run's history, the relaunch,
and `--on-oom ask|auto|stop` for the headless client.

A change is recorded in three places of the run directory: the old config is copied to
`history/config-<n>.yaml`, a `config_change` event is appended to `events.jsonl` (what changed,
why, the prediction it was chosen on), and `config.yaml` holds the new config. A change that
alters the adapter's shape (LoRA rank, targets) cannot resume from the old checkpoints: they
move to `history/checkpoints-<n>/` and the relaunch starts at step 0. The relaunch is the
restart path: a new trainer process that resumes from the last complete checkpoint (the CUDA
context of the failed one is not trusted after an OOM).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from cockpit import yaml_text
from cockpit.config import load as config_load
from cockpit.config import schema as config_mod
from cockpit.fmt import GIB
from cockpit.live.session import RunSession
from cockpit.oom.remedies import Analysis, Option, analyse
from cockpit.paths import cockpit_command
from cockpit.run import journal, process
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState

HISTORY_NAME = "history"
MAX_AUTO_ATTEMPTS = 3
ON_OOM = ("ask", "auto", "stop")


@dataclass(frozen=True)
class Applied:
    attempt: int  # n of history/config-<n>.yaml
    changes: dict[str, Any]
    previous: Path
    moved_checkpoints: Path | None


def history_dir(run: RunDir) -> Path:
    return run.path / HISTORY_NAME


def _next_attempt(run: RunDir) -> int:
    folder = history_dir(run)
    taken = [
        int(p.stem.split("-")[1]) for p in folder.glob("config-*.yaml") if p.stem.split("-")[1].isdigit()
    ]
    return max(taken, default=0) + 1


def apply_changes(run: RunDir, changes: dict[str, Any], reason: str, **record: Any) -> Applied:
    """Write `changes` (dotted keys) into the run's config, keeping the old one; ConfigError if invalid."""
    raw = yaml_text.safe_load(run.config_path.read_text(encoding="utf-8")) or {}
    for dotted, value in changes.items():
        node = raw
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:  # a key removed: left to its default or to speed: auto
            node.pop(last, None)
        else:
            node[last] = value
    new_cfg = config_load.config_from_dict(raw)  # validated before anything moves
    folder = history_dir(run)
    folder.mkdir(mode=0o700, exist_ok=True)
    attempt = _next_attempt(run)
    previous = folder / f"config-{attempt}.yaml"
    _write_private(previous, run.config_path.read_text(encoding="utf-8"))
    moved = None
    if record.get("from_step_zero"):
        kept = run.complete_checkpoints()
        if kept:
            moved = folder / f"checkpoints-{attempt}"
            moved.mkdir(mode=0o700)
            for checkpoint in kept:
                os.rename(checkpoint, moved / checkpoint.name)
    tmp = run.config_path.with_suffix(".tmp")
    _write_private(tmp, config_mod.dump_config(new_cfg))
    os.replace(tmp, run.config_path)
    journal.append(
        run.events_path,
        "config_change",
        attempt=attempt,
        reason=reason,
        changes=changes,
        previous=f"{HISTORY_NAME}/{previous.name}",
        checkpoints_moved=f"{HISTORY_NAME}/{moved.name}" if moved else None,
        **record,
    )
    return Applied(attempt, changes, previous, moved)


def apply_option(run: RunDir, option: Option, analysis: Analysis, chosen_by: str) -> Applied:
    """Apply a remedy and record the prediction it was chosen on."""
    changes = {**analysis.pinned, **option.config}  # what ran, changed by the remedy
    return apply_changes(
        run,
        changes,
        "oom",
        remedy=list(option.keys),
        title=option.title,
        chosen_by=chosen_by,
        predicted_peak_bytes=option.peak_bytes,
        card_bytes=analysis.target.bytes,
        card=analysis.target.source,
        verdict=option.verdict,
        speed=option.speed,
        effect=option.effect,
        resume=option.resume,
        from_step_zero=option.from_step_zero,
    )


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def relaunch(run: RunDir) -> subprocess.Popen[bytes]:
    """A new trainer process in the run directory: it resumes from the last complete checkpoint."""
    return process.launch(run)


# ---------------------------------------------------------------- analysis of a run


def last_speed_plan(run: RunDir) -> dict[str, Any] | None:
    """The `speed_plan` event of the trainer that failed (the last one in the run's events)."""
    return journal.last_event(run.events_path, "speed_plan")


def as_run(state: RunState, plan: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """The settings `speed: auto` chose for the failed trainer, as config keys, and notes.

    The wizard predicts from what ran, and a relaunch pins these keys so that `speed: auto` does
    not choose again around the remedy: the relaunch runs what was predicted. Partial
    checkpointing has no config key: it is left to `speed: auto`, and counted as none.
    """
    settings: dict[str, Any] = {}
    notes: list[str] = []
    begin = state.plan or {}
    source = plan or begin
    for key, name in (
        ("training.micro_batch_size", "micro_batch_size"),
        ("training.gradient_accumulation_steps", "gradient_accumulation_steps"),
    ):
        if source.get(name) is not None:
            settings[key] = source[name]
    if plan is not None:
        settings["training.packing"] = plan.get("packing", "none") != "none"
        if plan.get("unpack_scales"):  # memory the failed trainer held (a remedy may give it back)
            settings["quantization.unpack_scales"] = True
        layers, total = plan.get("checkpoint_layers") or 0, plan.get("num_layers")
        if layers == 0 or (total and layers >= total):
            settings["training.gradient_checkpointing"] = layers > 0
        else:
            notes.append(
                f"the run checkpointed {layers} of {total} layers (speed: auto): counted as none here, "
                "and left to speed: auto on a relaunch"
            )
    elif begin.get("gradient_checkpointing") is not None:
        settings["training.gradient_checkpointing"] = bool(begin["gradient_checkpointing"])
    return settings, notes


def analyse_run(run: RunDir, state: RunState) -> Analysis:
    """The remedies for a run whose state ended in an OOM error: from its config with the settings
    it ran with, the model's shape and the GPU catalog (what cannot be read leaves a note)."""
    from cockpit.gpus import catalog as catalog_mod
    from cockpit.models import shape as modelshape

    raw = yaml_text.safe_load(run.config_path.read_text(encoding="utf-8")) or {}
    pinned, notes = as_run(state, last_speed_plan(run))
    partial = bool(notes)
    for dotted, value in pinned.items():
        section, name = dotted.split(".")
        raw.setdefault(section, {})[name] = value
    cfg = config_load.config_from_dict(raw)
    if partial:
        cfg.training.gradient_checkpointing = False
    try:
        shape = modelshape.load_shape(cfg.model.name, cfg.model.revision or "main")
    except modelshape.ShapeError as exc:
        shape = None
        notes.append(f"no predictions: {exc}")
    try:
        catalog = catalog_mod.load_catalog()
    except catalog_mod.CatalogError as exc:
        catalog = None
        notes.append(f"no card suggestions: {exc}")
    # a preference run's prompt and answer lengths (preference_setup) size the max_prompt_length remedy
    lengths = {
        k: v for k, v in state.preference.setup.items() if k in ("prompt_tokens_max", "answer_tokens_max")
    }
    data = {**(state.data or {}), **lengths}
    analysis = analyse(cfg, state.error or {}, shape, data, state.device, catalog, state.precision)
    analysis.notes[:0] = notes
    analysis.pinned.update(pinned)
    return analysis


def is_oom_failure(state: RunState) -> bool:
    return state.status == "failed" and (state.error or {}).get("kind") == "oom"


# ---------------------------------------------------------------- headless


def option_line(index: int, option: Option) -> str:
    peak = "-" if option.peak_bytes is None else f"{option.peak_bytes / GIB:.2f} GiB"
    headroom = "-" if option.headroom_bytes is None else f"{option.headroom_bytes / GIB:+.2f}"
    speed = "-" if option.speed is None else f"{option.speed:.2f}x"
    mark = "  [auto]" if option.auto else ""
    return (
        f"  {index:>2}. {option.title}\n"
        f"      peak {peak} ({option.verdict}, headroom {headroom}), speed {speed}, {option.effect}; "
        f"resumes {option.resume}{mark}"
    )


def report(analysis: Analysis) -> str:
    obs, target = analysis.observation, analysis.target
    where = f"while {obs.phase.replace('_', ' ')}" if obs.phase else ""
    step = f" at step {obs.step}" if obs.step else ""
    batch = f" (batch {obs.batch_rows} x {obs.seq_len} tokens)" if obs.seq_len else ""
    card = "-" if target.bytes is None else f"{target.bytes / GIB:.2f} GiB"
    lines = [f"out of memory {where}{step}{batch}; card: {card} ({target.source})".replace("  ", " ")]
    if analysis.estimate is not None:
        lines.append(f"memory model: {analysis.estimate.peak_gib:.2f} GiB for the failed config")
    lines += [f"note: {n}" for n in analysis.notes]
    lines.append("remedies, best first (predicted peak, fit with the 5% margin, tokens/s relative, effect):")
    lines += [option_line(i, o) for i, o in enumerate(analysis.options, 1)]
    return "\n".join(lines)


def headless_on_oom(
    run: RunDir,
    state: RunState,
    mode: str,
    attempt: int,
    out: TextIO | None = None,
    ask: Callable[[str], str] = input,
    interactive: bool | None = None,
) -> RunSession | None:
    """After a headless run ended: when it failed with an OOM and `mode` allows, choose a remedy
    (auto: the best one that keeps results; ask: the user's pick), apply it and relaunch.
    Returns a session on the new trainer that has read (not shown) the history so far, or None
    (the run stays as it ended)."""
    stream = out or sys.stdout
    if mode == "stop" or not is_oom_failure(state):
        return None

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    try:
        analysis = analyse_run(run, state)
    except (config_mod.ConfigError, OSError, ValueError) as exc:
        say(f"--on-oom {mode}: the OOM could not be analysed ({exc}); nothing applied")
        return None
    say(report(analysis))
    if mode == "auto":
        if attempt > MAX_AUTO_ATTEMPTS:
            say(f"--on-oom auto: stopped after {MAX_AUTO_ATTEMPTS} relaunches that all ran out of memory")
            return None
        option = analysis.auto_choice()
        if option is None:
            say(
                "--on-oom auto: no remedy both fits and keeps the results (auto never cuts samples, shrinks "
                f"the adapter or changes the base weights). Pick one: {cockpit_command()} restart "
                f"{run.run_id} --no-ui --on-oom ask"
            )
            return None
        chosen_by = f"--on-oom auto (relaunch {attempt} of at most {MAX_AUTO_ATTEMPTS})"
    else:
        interactive = sys.stdin.isatty() if interactive is None else interactive
        if not interactive:
            say("--on-oom ask: stdin is not a terminal, so nothing is applied (use --on-oom auto)")
            return None
        choices = [o for o in analysis.options if o.applicable]
        answer = ask(f"apply which remedy? [1-{len(analysis.options)}, Enter: none] ").strip()
        if not answer.isdigit() or not 1 <= int(answer) <= len(analysis.options):
            say("nothing applied")
            return None
        option = analysis.options[int(answer) - 1]
        if option not in choices:
            say(f"{option.title}: not a change to this run; {option.resume}")
            return None
        chosen_by = "--on-oom ask"
    applied = apply_option(run, option, analysis, chosen_by)
    moved = (
        f"; old checkpoints moved to {applied.moved_checkpoints.name}" if applied.moved_checkpoints else ""
    )
    say(f"applied: {option.title} (old config in history/{applied.previous.name}{moved}); relaunching")
    session = RunSession(run)
    for item in session.follower.poll():  # read before the new trainer writes: only its lines show
        session.state.apply(item)
    session.proc = relaunch(run)
    return session
