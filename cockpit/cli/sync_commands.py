"""output.sync on the command line: the target checked before a run starts, and `cockpit restart
--from TARGET` (a run rebuilt from its copy on a new machine, cockpit.sync.restore)."""

from __future__ import annotations

import argparse
import sys

from cockpit.config import schema as config
from cockpit.config.sync_spec import SyncSpec
from cockpit.run import rundir
from cockpit.run.exit_codes import EXIT_FAILED


def check_line(cfg: config.TrainConfig) -> str | None:
    """Where the run's copy goes, in a line; ConfigError (exit 2) when it cannot go there."""
    if cfg.output.sync is None:
        return None
    from cockpit.sync.check import check_target

    return check_target(cfg.output.sync)


def warn_target(cfg: config.TrainConfig) -> None:
    """At a restart: a target that cannot take the copy now is said; the run starts all the same."""
    try:
        check_line(cfg)
    except config.ConfigError as exc:
        print(f"warning: {exc}; the run goes on and tries again at each checkpoint", file=sys.stderr)


def restored_run(args: argparse.Namespace) -> rundir.RunDir | int:
    """The run rebuilt from `--from` (and the run id given, if any), or the exit code of a refusal."""
    from cockpit.sync.restore import RestoreError, restore

    try:
        restored = restore(args.from_target, args.run)
    except RestoreError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # the runs folder: read-only, full
        print(f"cannot rebuild the run here: {exc.strerror or exc} ({exc.filename})", file=sys.stderr)
        return EXIT_FAILED
    print(restored.line(args.from_target), file=sys.stderr)
    repoint(restored.run, args.from_target)
    return restored.run


def repoint(run: rundir.RunDir, text: str) -> None:
    """The restored run goes on copying to where it came from: a config whose output.sync names
    another place (the share mounted elsewhere on this machine) is changed to `text`, the old config
    kept in history/ (cockpit.oom.relaunch.apply_changes); a config that cannot take it is said."""
    from cockpit.config.load import load_config
    from cockpit.config.sync_spec import parse
    from cockpit.oom.relaunch import apply_changes

    came_from = parse(text, key="--from")
    try:
        synced_to = load_config(run.config_path).output.sync
        if synced_to is None or _same_place(parse(synced_to), came_from):
            return
        wanted = text if came_from.path is None else str(came_from.path)
        apply_changes(
            run, {"output.sync": wanted}, reason="restart --from: copies go on where the run came from"
        )
    except (config.ConfigError, OSError) as exc:
        print(f"warning: output.sync stays as the run's config has it: {exc}", file=sys.stderr)
        return
    print(f"output.sync: {synced_to} -> {wanted} (the old config is in history/)", file=sys.stderr)


def _same_place(a: SyncSpec, b: SyncSpec) -> bool:
    return (a.repo_id, a.path) == (b.repo_id, b.path)
